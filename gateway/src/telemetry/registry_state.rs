//! The plugin registry's state as `/metrics` exports it: the value the
//! registry publishes ([`super::Metrics::publish`]) at each change, and the
//! collector that encodes the latest one at scrape time. The metrics never
//! see the registry itself: what changes between reloads (a plugin's
//! circuit, whether its Initialize succeeded) is read at scrape time from
//! the upstreams the published value names, so it can never drift from the
//! truth.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;
use rollout_policies::BreakerState;

use crate::hub::{self, Hub};
use crate::upstream::{Load, Upstream};

/// What the registry hands the metrics at each change of what they export.
#[derive(Debug, Clone, Default)]
pub(crate) struct RegistryState {
    /// The generation of the snapshot in use (0 before the first load).
    pub(crate) generation: u64,
    pub(crate) reloads: ReloadCounts,
    pub(crate) last_reload: LastReload,
    /// Each plugin of the snapshot in use, in file order.
    pub(crate) plugins: Arc<[PluginState]>,
}

/// One plugin of the snapshot in use: its labels, and the upstream whose
/// circuit and load state a scrape reads.
#[derive(Debug, Clone)]
pub(crate) struct PluginState {
    pub(crate) name: String,
    /// The hub whose file defines it (`None`: shared, labelled `hub=""`).
    pub(crate) hub: Option<Hub>,
    pub(crate) upstream: Arc<Upstream>,
}

impl PluginState {
    /// Whether it is loaded: its own Initialize for its hub answered OK
    /// with a valid declaration.
    fn loaded(&self) -> bool {
        matches!(
            self.upstream.load_state(self.hub.as_ref()),
            Load::Loaded { .. }
        )
    }
}

/// Counts of registry loads, by result (the first load included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReloadCounts {
    pub success: u64,
    /// Rejected changes and unreadable sources.
    pub failure: u64,
}

/// The result of the last reload, as `/debug/plugins` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LastReload {
    /// No rejected change is pending: the registry in use is what the
    /// sources hold (`lastReloadError` is null). False from a rejected
    /// change (or an unreadable source) until a later one loads.
    pub(crate) successful: bool,
    /// When a registry was last loaded (`None`: never).
    pub(crate) success_at: Option<SystemTime>,
}

impl Default for LastReload {
    /// Before anything happened: nothing was rejected, nothing loaded.
    fn default() -> Self {
        LastReload {
            successful: true,
            success_at: None,
        }
    }
}

/// Every state a circuit may be in, each a series of
/// `rollout_gateway_circuit_breaker_state`.
const BREAKER_STATES: [BreakerState; 3] = [
    BreakerState::Closed,
    BreakerState::Open,
    BreakerState::HalfOpen,
];

/// The registry's state at scrape time: circuit states, loads, reloads,
/// generation, from the latest published [`RegistryState`].
pub(super) struct RegistryCollector(pub(super) Arc<ArcSwap<RegistryState>>);

impl fmt::Debug for RegistryCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RegistryCollector")
    }
}

impl Collector for RegistryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let state = self.0.load();
        encode_circuits(&mut encoder, &state.plugins)?;
        encode_loaded(&mut encoder, &state.plugins)?;
        encode_reloads(&mut encoder, &state)
    }
}

/// Labels `{plugin, hub}` of a plugin; a plugin name may repeat across hubs
/// (central mode): the hub label keeps the series apart ("" for the shared
/// scope).
fn plugin_labels(plugin: &PluginState) -> [(&'static str, &str); 2] {
    [
        ("plugin", &plugin.name),
        ("hub", hub::label(plugin.hub.as_ref())),
    ]
}

/// The circuits, twice: as the 0/1/2 gauge kept for the dashboards and
/// alerts written against it, and as one series per state, 1 for the state
/// the circuit is in.
fn encode_circuits(encoder: &mut DescriptorEncoder, plugins: &[PluginState]) -> fmt::Result {
    let circuits: Vec<(&PluginState, BreakerState)> = plugins
        .iter()
        .map(|p| (p, p.upstream.circuit().state))
        .collect();
    let mut metric = encoder.encode_descriptor(
        "rollout_gateway_circuit_state",
        "State of each plugin's circuit breaker: 0 closed, 1 open, 2 half-open (rollout_gateway_circuit_breaker_state has one series per state)",
        None,
        MetricType::Gauge,
    )?;
    for (plugin, state) in &circuits {
        let value: i64 = match state {
            BreakerState::Closed => 0,
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
        };
        ConstGauge::new(value).encode(metric.encode_family(&plugin_labels(plugin))?)?;
    }
    let mut metric = encoder.encode_descriptor(
        "rollout_gateway_circuit_breaker_state",
        "Whether each plugin's circuit breaker is in the state of the state label (closed, open, half-open): 1 for the one it is in, 0 for the others",
        None,
        MetricType::Gauge,
    )?;
    for (plugin, state) in &circuits {
        for each in BREAKER_STATES {
            let [plugin, hub] = plugin_labels(plugin);
            let labels = [plugin, hub, ("state", each.as_str())];
            ConstGauge::new(i64::from(each == *state)).encode(metric.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

fn encode_loaded(encoder: &mut DescriptorEncoder, plugins: &[PluginState]) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(
        "rollout_gateway_plugin_loaded",
        "Whether each plugin is loaded (1): its Initialize answered OK with a valid declaration; 0 until then, and while its server refuses",
        None,
        MetricType::Gauge,
    )?;
    for plugin in plugins {
        ConstGauge::new(i64::from(plugin.loaded()))
            .encode(metric.encode_family(&plugin_labels(plugin))?)?;
    }
    Ok(())
}

/// Reload counts, the last reload's result, and the generation.
fn encode_reloads(encoder: &mut DescriptorEncoder, state: &RegistryState) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(
        "rollout_gateway_config_reloads",
        "Registry loads, by result (the first load included)",
        None,
        MetricType::Counter,
    )?;
    ConstCounter::new(state.reloads.success)
        .encode(metric.encode_family(&[("result", "success")])?)?;
    ConstCounter::new(state.reloads.failure)
        .encode(metric.encode_family(&[("result", "failure")])?)?;

    let last = state.last_reload;
    let metric = encoder.encode_descriptor(
        "rollout_gateway_config_last_reload_successful",
        "1 while the registry in use is the sources' latest; 0 from a rejected change or an unreadable source until a later change loads",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(i64::from(last.successful)).encode(metric)?;
    if let Some(at) = last.success_at {
        let seconds = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64();
        let metric = encoder.encode_descriptor(
            "rollout_gateway_config_last_reload_success_timestamp",
            "When a registry was last loaded, since the Unix epoch",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        ConstGauge::new(seconds).encode(metric)?;
    }

    let metric = encoder.encode_descriptor(
        "rollout_gateway_config_generation",
        "Generation of the registry snapshot in use (0 before the first load)",
        None,
        MetricType::Gauge,
    )?;
    ConstGauge::new(i64::try_from(state.generation).unwrap_or(i64::MAX)).encode(metric)
}

#[cfg(test)]
mod tests {
    use rollout_policies::Policy;
    use rollout_policies::breaker::CallOutcome;

    use super::*;
    use crate::config::parse_endpoint;
    use crate::telemetry::Metrics;
    use crate::upstream::{ChannelSettings, UpstreamKey};

    fn upstream() -> Arc<Upstream> {
        let key = UpstreamKey {
            endpoint: parse_endpoint("127.0.0.1:7001").expect("endpoint"),
            ca_bundle: None,
            client_identity: None,
        };
        let policy = Policy::default();
        let upstream = Upstream::sharing(
            key,
            &ChannelSettings::default(),
            &policy,
            Arc::default(),
            None,
        );
        Arc::new(upstream.expect("plaintext"))
    }

    /// The lines of `text` that start with one of `names`.
    fn lines<'a>(text: &'a str, names: &[&str]) -> Vec<&'a str> {
        text.lines()
            .filter(|l| names.iter().any(|n| l.starts_with(n)))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_scrape_reads_the_state_last_published_and_each_circuit_as_it_is() {
        let metrics = Metrics::new();
        let reloads = [
            "rollout_gateway_config_reloads_total",
            "rollout_gateway_config_last_reload_successful",
            "rollout_gateway_config_generation",
            "rollout_gateway_config_last_reload_success_timestamp",
        ];
        assert_eq!(
            lines(&metrics.encode(), &reloads),
            vec![
                "rollout_gateway_config_reloads_total{result=\"success\"} 0",
                "rollout_gateway_config_reloads_total{result=\"failure\"} 0",
                "rollout_gateway_config_last_reload_successful 1",
                "rollout_gateway_config_generation 0",
            ],
            "nothing published yet"
        );
        let shared = upstream();
        metrics.publish(RegistryState {
            generation: 3,
            reloads: ReloadCounts {
                success: 2,
                failure: 1,
            },
            last_reload: LastReload {
                successful: false,
                success_at: Some(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(5)),
            },
            plugins: Arc::from(vec![
                PluginState {
                    name: "a".into(),
                    hub: None,
                    upstream: shared.clone(),
                },
                PluginState {
                    name: "a".into(),
                    hub: Some(Hub::new("hub-a")),
                    upstream: upstream(),
                },
            ]),
        });
        let text = metrics.encode();
        assert_eq!(
            lines(&text, &reloads),
            vec![
                "rollout_gateway_config_reloads_total{result=\"success\"} 2",
                "rollout_gateway_config_reloads_total{result=\"failure\"} 1",
                "rollout_gateway_config_last_reload_successful 0",
                "rollout_gateway_config_last_reload_success_timestamp_seconds 5.0",
                "rollout_gateway_config_generation 3",
            ]
        );
        let gauges = [
            "rollout_gateway_circuit_state",
            "rollout_gateway_plugin_loaded",
        ];
        assert_eq!(
            lines(&text, &gauges),
            vec![
                "rollout_gateway_circuit_state{plugin=\"a\",hub=\"\"} 0",
                "rollout_gateway_circuit_state{plugin=\"a\",hub=\"hub-a\"} 0",
                "rollout_gateway_plugin_loaded{plugin=\"a\",hub=\"\"} 0",
                "rollout_gateway_plugin_loaded{plugin=\"a\",hub=\"hub-a\"} 0",
            ]
        );
        // The circuit opens after the publication: the next scrape says so.
        let breaker = shared.breaker();
        let now = tokio::time::Instant::now().into_std();
        for _ in 0..Policy::default().circuit_breaker.consecutive_failures {
            let mut b = breaker.lock().expect("breaker");
            let permit = b.acquire(now).expect("closed");
            b.record(permit, CallOutcome::Failure, now, 0.5);
        }
        let text = metrics.encode();
        assert!(
            text.contains("rollout_gateway_circuit_state{plugin=\"a\",hub=\"\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "rollout_gateway_circuit_breaker_state{plugin=\"a\",hub=\"\",state=\"open\"} 1\n"
            ),
            "{text}"
        );
    }
}
