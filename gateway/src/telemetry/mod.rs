//! What an operator sees of the gateway: OpenTelemetry spans ([`trace`], with
//! the per-attempt layer in [`attempt`]) and Prometheus metrics ([`metrics`],
//! with the registry's state they export in [`registry_state`]).
//! The exporter set-up and the JSON logs with trace ids are shared with the
//! controller, in `rollout_telemetry`.

pub(crate) mod attempt;
pub mod metrics;
pub(crate) mod registry_state;
pub(crate) mod trace;

use std::sync::Arc;

pub(crate) use metrics::{Metrics, PluginMetrics};
pub use registry_state::ReloadCounts;
pub(crate) use registry_state::{LastReload, PluginState, RegistryState};
pub use rollout_telemetry::{TracingError, TracingOptions};
pub(crate) use trace::Tracing;

/// The tracer and the metrics of one gateway. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Telemetry {
    pub(crate) tracing: Tracing,
    pub metrics: Arc<Metrics>,
}

impl Telemetry {
    /// Telemetry exporting spans through `tracing`, with metrics of its own.
    pub(crate) fn new(tracing: Tracing) -> Telemetry {
        Telemetry {
            tracing,
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// No export, and metrics nobody scrapes: for registries built outside
    /// [`crate::app`].
    pub(crate) fn disabled() -> Telemetry {
        Telemetry::new(Tracing::disabled())
    }
}
