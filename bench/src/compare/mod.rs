//! The pure parts of `gwbench`, the driver that compares a plugin (the echo
//! plugin, or the mutating one) called directly, through `rollout-gateway`
//! (without and with exported tracing) and through yardsticks (a minimal
//! forwarder on `h2`, a tonic forwarder, nginx, HAProxy, nghttpx, Envoy):
//! scenarios, the generated gateway registry and proxy configurations,
//! the machine, and the summary (medians over rounds,
//! added latency, the cost of tracing, the performance goals, Markdown).
//!
//! Starting and stopping the processes is the binary's business.

pub mod config;
pub mod machine;
pub mod summary;
pub mod yardsticks;

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::echo::EchoMode;
use crate::units::{UnitError, format_size, parse_size};

/// The plugin behind every target of a scenario. `gwbench` runs one
/// `echo-plugin` process per mode, and every target of a scenario (direct,
/// the gateways, nginx, HAProxy) calls the same one.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum PluginMode {
    /// `echo-plugin --mode echo`: answers with the work it received, as is.
    #[default]
    Echo,
    /// `echo-plugin --mode mutate`: parses the work, changes it, serialises
    /// it again, as a real mutating plugin does.
    Mutate,
}

impl PluginMode {
    /// Every mode, in order.
    pub const ALL: [PluginMode; 2] = [PluginMode::Echo, PluginMode::Mutate];

    /// The suffix of scenario names in this mode: none for echo, `-mut`.
    pub fn suffix(self) -> &'static str {
        match self {
            PluginMode::Echo => "",
            PluginMode::Mutate => "-mut",
        }
    }

    /// The plugin's name in the gateway's registry (and the
    /// `ocm-rollout-plugin` metadata of calls through the gateway).
    pub fn plugin_name(self) -> &'static str {
        match self {
            PluginMode::Echo => "echo",
            PluginMode::Mutate => "mutate",
        }
    }

    /// The `echo-plugin --mode` of the plugin process.
    pub fn echo_mode(self) -> EchoMode {
        match self {
            PluginMode::Echo => EchoMode::Echo,
            PluginMode::Mutate => EchoMode::Mutate,
        }
    }

    /// The name of that mode on `echo-plugin`'s command line.
    pub fn echo_mode_arg(self) -> &'static str {
        match self {
            PluginMode::Echo => "echo",
            PluginMode::Mutate => "mutate",
        }
    }
}

/// One load shape: calls in flight, ManifestWork size and the plugin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Scenario {
    /// `c{concurrency}-{size}` with the mode's suffix, e.g. `c32-4k`,
    /// `c1-4k-mut`.
    pub name: String,
    /// Calls in flight.
    pub concurrency: usize,
    /// ManifestWork JSON size in bytes.
    pub work_bytes: u64,
    /// The plugin behind the targets (results written before it existed
    /// read as echo).
    #[serde(default)]
    pub plugin_mode: PluginMode,
}

/// The default scenarios, the ones the performance goals name: one call in
/// flight with the echo plugin and with the mutating one, 32 in flight with
/// the mutating one; then larger works under moderate load.
pub const DEFAULT_SCENARIOS: &[&str] = &["c1-4k", "c1-4k-mut", "c32-4k-mut", "c8-64k"];

/// The scenarios the traced gateway runs in by default: the ones the
/// tracing goals name (1 and 32 in flight), with the mutating plugin.
pub const DEFAULT_TRACED_SCENARIOS: &[&str] = &["c1-4k-mut", "c32-4k-mut"];

/// A scenario name that is not `c{N}-{SIZE}[-mut]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScenarioError {
    /// Not of the form `c{N}-{SIZE}[-mut]`.
    #[error(
        "scenario {0:?} is not of the form c{{CONCURRENCY}}-{{SIZE}}[-mut], e.g. c32-4k or c1-4k-mut"
    )]
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
    /// Parses `c{concurrency}-{size}`, with `-mut` at the end for the
    /// mutating plugin: `c1-4k`, `c32-4k`, `c8-64k`, `c4-4m`, `c1-4k-mut`.
    pub fn parse(name: &str) -> Result<Self, ScenarioError> {
        let malformed = || ScenarioError::Malformed(name.to_owned());
        let (shape, plugin_mode) = match name.strip_suffix(PluginMode::Mutate.suffix()) {
            Some(shape) => (shape, PluginMode::Mutate),
            None => (name, PluginMode::Echo),
        };
        let (concurrency, size) = shape
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
            name: format!(
                "c{concurrency}-{}{}",
                format_size(work_bytes),
                plugin_mode.suffix()
            ),
            concurrency,
            work_bytes,
            plugin_mode,
        })
    }
}

/// Where the load goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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
    /// nginx `grpc_pass` in front of the plugin: a plain proxy for scale.
    Nginx,
    /// HAProxy (`mode http`, h2c on both sides) in front of the plugin: the
    /// second plain proxy.
    Haproxy,
    /// `h2-forwarder`: headers, data and trailers relayed over one upstream
    /// connection on the `h2` crate, nothing else: the floor of the
    /// gateway's own dependency.
    #[serde(rename = "h2-forwarder")]
    H2Forwarder,
    /// `tonic-forwarder`: tonic's generic server with a raw-bytes codec and
    /// a tonic client, the build the gateway's own framing replaces.
    #[serde(rename = "tonic-forwarder")]
    TonicForwarder,
    /// nghttpx (Debian's `nghttp2-proxy`), h2c on both sides.
    Nghttpx,
    /// Envoy (an HTTP connection manager and an HTTP/2 cluster): the L7
    /// proxy users compare a gRPC gateway with.
    Envoy,
}

impl TargetKind {
    /// The lowercase name used in output.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Direct => "direct",
            TargetKind::Gateway => "gateway",
            TargetKind::GatewayTraced => "gateway-traced",
            TargetKind::Nginx => "nginx",
            TargetKind::Haproxy => "haproxy",
            TargetKind::H2Forwarder => "h2-forwarder",
            TargetKind::TonicForwarder => "tonic-forwarder",
            TargetKind::Nghttpx => "nghttpx",
            TargetKind::Envoy => "envoy",
        }
    }

    /// The yardsticks: every target but the direct call and the gateways,
    /// in the order gwbench starts them.
    pub const YARDSTICKS: [TargetKind; 6] = [
        TargetKind::H2Forwarder,
        TargetKind::TonicForwarder,
        TargetKind::Nginx,
        TargetKind::Haproxy,
        TargetKind::Nghttpx,
        TargetKind::Envoy,
    ];

    /// How the tables name it: `nginx`, `HAProxy`, `Envoy`, ….
    pub fn display_name(self) -> &'static str {
        match self {
            TargetKind::Haproxy => "HAProxy",
            TargetKind::Envoy => "Envoy",
            other => other.as_str(),
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
                work_bytes: 4096,
                plugin_mode: PluginMode::Echo,
            }
        );
        let mutating = Scenario::parse("c1-4KiB-mut").expect("valid");
        assert_eq!(
            (
                mutating.name.as_str(),
                mutating.concurrency,
                mutating.plugin_mode
            ),
            ("c1-4k-mut", 1, PluginMode::Mutate)
        );
        for name in DEFAULT_TRACED_SCENARIOS {
            assert_eq!(Scenario::parse(name).expect("valid").name, *name);
        }
        // Written before the mode existed: echo.
        let old: Scenario =
            serde_json::from_str(r#"{"name":"c1-4k","concurrency":1,"workBytes":4096}"#)
                .expect("readable");
        assert_eq!(old.plugin_mode, PluginMode::Echo);
        assert_eq!(Scenario::parse("c8-64KiB").expect("valid").name, "c8-64k");
        assert_eq!(Scenario::parse("c4-4m").expect("valid").work_bytes, 4 << 20);
        for name in DEFAULT_SCENARIOS {
            assert_eq!(Scenario::parse(name).expect("valid").name, *name);
        }
        for bad in ["32-4k", "c-4k", "c0-4k", "c4", "cx-4k", "c1-mut"] {
            assert!(
                matches!(Scenario::parse(bad), Err(ScenarioError::Malformed(_))),
                "{bad}"
            );
        }
        assert!(Scenario::parse("c1-4k-mut-mut").is_err());
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
        ]
        .into_iter()
        .chain(TargetKind::YARDSTICKS)
        {
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
