//! What an operator sees of the gateway: OpenTelemetry spans ([`trace`], with
//! the per-attempt layer in [`attempt`]) and Prometheus metrics ([`metrics`]).
//! The exporter set-up and the JSON logs with trace ids are shared with the
//! controller, in `rollout_telemetry`.

pub(crate) mod attempt;
pub mod metrics;
pub(crate) mod trace;

use std::sync::{Arc, Weak};

pub(crate) use metrics::{LastReload, Metrics, PluginMetrics, RegistryState};
pub use rollout_telemetry::{TracingError, TracingOptions};
pub(crate) use trace::Tracing;

/// The tracer and the metrics of one gateway. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Telemetry {
    pub(crate) tracing: Tracing,
    pub metrics: Arc<Metrics>,
}

impl Telemetry {
    /// Telemetry whose registry-state metrics (circuits, reloads, generation)
    /// read `registry` at scrape time.
    pub(crate) fn new(tracing: Tracing, registry: Weak<dyn RegistryState>) -> Telemetry {
        Telemetry {
            tracing,
            metrics: Arc::new(Metrics::new(Some(registry))),
        }
    }

    /// No export and no registry: for registries built outside [`crate::app`].
    pub(crate) fn disabled() -> Telemetry {
        Telemetry {
            tracing: Tracing::disabled(),
            metrics: Arc::new(Metrics::new(None)),
        }
    }
}
