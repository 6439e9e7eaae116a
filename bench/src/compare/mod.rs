//! The pure parts of `gwbench`, the driver that compares one echo plugin
//! called directly, through `rollout-gateway` (without and with exported
//! tracing) and through nginx: scenarios, the generated gateway and nginx
//! configurations, `/proc` readings and the summary (medians over rounds,
//! added latency, the cost of tracing, Markdown).
//!
//! Starting and stopping the processes is the binary's business.

pub mod config;
pub mod procfs;
pub mod summary;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::units::{UnitError, format_size, parse_size};

/// One load shape: calls in flight and ManifestWork size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scenario {
    /// `c{concurrency}-{size}`, e.g. `c32-4k`.
    pub name: String,
    /// Calls in flight.
    pub concurrency: usize,
    /// ManifestWork JSON size in bytes.
    pub work_bytes: u64,
}

/// The default scenarios: latency alone, small calls under load, larger
/// works under moderate load.
pub const DEFAULT_SCENARIOS: &[&str] = &["c1-4k", "c32-4k", "c8-64k"];

/// A scenario name that is not `c{N}-{SIZE}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    /// Not of the form `c{N}-{SIZE}`.
    #[error("scenario {0:?} is not of the form c{{CONCURRENCY}}-{{SIZE}}, e.g. c32-4k")]
    Malformed(String),
    /// The size part is not a size.
    #[error("scenario {name:?}: {source}")]
    Size {
        /// The scenario as given.
        name: String,
        /// Why the size is invalid.
        source: UnitError,
    },
}

impl Scenario {
    /// Parses `c{concurrency}-{size}`: `c1-4k`, `c32-4k`, `c8-64k`, `c4-4m`.
    pub fn parse(name: &str) -> Result<Self, ScenarioError> {
        let malformed = || ScenarioError::Malformed(name.to_owned());
        let (concurrency, size) = name
            .strip_prefix('c')
            .and_then(|rest| rest.split_once('-'))
            .ok_or_else(malformed)?;
        let concurrency: usize = concurrency.parse().map_err(|_| malformed())?;
        if concurrency == 0 {
            return Err(malformed());
        }
        let work_bytes = parse_size(size).map_err(|source| ScenarioError::Size {
            name: name.to_owned(),
            source,
        })?;
        Ok(Self {
            name: format!("c{concurrency}-{}", format_size(work_bytes)),
            concurrency,
            work_bytes,
        })
    }
}

/// Where the load goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TargetKind {
    /// The echo plugin itself: the baseline.
    Direct,
    /// `rollout-gateway` in front of the echo plugin, exporting no spans.
    Gateway,
    /// A second `rollout-gateway`, the same but exporting its spans over
    /// OTLP/gRPC (`OTEL_EXPORTER_OTLP_ENDPOINT`) to a receiver in `gwbench`.
    #[serde(rename = "gateway-traced")]
    GatewayTraced,
    /// nginx `grpc_pass` in front of the echo plugin: a plain proxy for scale.
    Nginx,
}

impl TargetKind {
    /// The lowercase name used in output.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Direct => "direct",
            TargetKind::Gateway => "gateway",
            TargetKind::GatewayTraced => "gateway-traced",
            TargetKind::Nginx => "nginx",
        }
    }

    /// Whether the target is a `rollout-gateway`, which routes by the
    /// `ocm-rollout-plugin` metadata.
    pub fn is_gateway(self) -> bool {
        matches!(self, TargetKind::Gateway | TargetKind::GatewayTraced)
    }
}

impl fmt::Display for TargetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios() {
        let parsed = Scenario::parse("c32-4k").expect("valid");
        assert_eq!(
            parsed,
            Scenario {
                name: "c32-4k".to_owned(),
                concurrency: 32,
                work_bytes: 4096
            }
        );
        assert_eq!(Scenario::parse("c8-64KiB").expect("valid").name, "c8-64k");
        assert_eq!(Scenario::parse("c4-4m").expect("valid").work_bytes, 4 << 20);
        for name in DEFAULT_SCENARIOS {
            assert_eq!(Scenario::parse(name).expect("valid").name, *name);
        }
        for bad in ["32-4k", "c-4k", "c0-4k", "c4", "cx-4k"] {
            assert!(
                matches!(Scenario::parse(bad), Err(ScenarioError::Malformed(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            Scenario::parse("c4-4q"),
            Err(ScenarioError::Size { .. })
        ));
    }

    #[test]
    fn target_names() {
        for kind in [
            TargetKind::Direct,
            TargetKind::Gateway,
            TargetKind::GatewayTraced,
            TargetKind::Nginx,
        ] {
            // The JSON name is the displayed one.
            assert_eq!(
                serde_json::to_string(&kind).expect("serializable"),
                format!("\"{kind}\"")
            );
            assert_eq!(
                kind.is_gateway(),
                matches!(kind, TargetKind::Gateway | TargetKind::GatewayTraced)
            );
        }
        assert_eq!(TargetKind::GatewayTraced.to_string(), "gateway-traced");
        assert_eq!(
            serde_json::from_str::<TargetKind>("\"gateway-traced\"").expect("valid"),
            TargetKind::GatewayTraced
        );
    }
}
