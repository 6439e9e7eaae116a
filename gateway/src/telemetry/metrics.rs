//! The gateway's Prometheus metrics (docs/plugin-api.md §4), served on the admin
//! listener's `/metrics`.
//!
//! The hot path never looks a series up by name: each plugin of a registry
//! snapshot holds a [`PluginMetrics`] with its handles resolved once, so a call
//! costs a few atomic increments. What is state rather than events (circuit
//! state, reload counts and result, the generation, process memory and
//! descriptors) is read at scrape time by collectors, so it can never drift
//! from the truth. The exposition format (OpenMetrics or the Prometheus
//! text, as the scraper asks), the `process_*` series and the build info
//! are `rollout_telemetry::metrics`'.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry as MetricRegistry, Unit};
use rollout_telemetry::metrics::{self as exposition, ProcessCollector};
use tonic::Code;

use crate::hooks::HookKind;
use crate::hub::{self, Hub};

use super::registry_state::{RegistryCollector, RegistryState};

/// Bucket bounds of the duration histograms, in seconds: hook calls take from
/// about a millisecond (a local plugin) to the 30 s contract limit.
pub(crate) const DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

use rollout_proto::code_name;

/// The number of gRPC codes (`Code` is 0..=16).
const CODES: usize = 17;
/// The number of hooks ([`HookKind`] is 0..=4).
const HOOKS: usize = 5;

/// Labels `{hook, plugin, hub, code}`: `hub` is the plugin's hub, empty for
/// a shared plugin (and always in sidecar mode), so that plugins of the same
/// name in two hubs' registries keep their own series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CodeLabels {
    hook: &'static str,
    plugin: Arc<str>,
    hub: Arc<str>,
    code: &'static str,
}

impl EncodeLabelSet for CodeLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        [
            ("hook", self.hook),
            ("plugin", &*self.plugin),
            ("hub", &*self.hub),
            ("code", self.code),
        ]
        .encode(encoder)
    }
}

/// Labels `{hook, plugin, hub}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct HookLabels {
    hook: &'static str,
    plugin: Arc<str>,
    hub: Arc<str>,
}

impl EncodeLabelSet for HookLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        [
            ("hook", self.hook),
            ("plugin", &*self.plugin),
            ("hub", &*self.hub),
        ]
        .encode(encoder)
    }
}

/// Labels `{hook, target, code}` of the whole-call metrics.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TargetCodeLabels {
    hook: &'static str,
    target: Arc<str>,
    code: &'static str,
}

impl EncodeLabelSet for TargetCodeLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        [
            ("hook", self.hook),
            ("target", &*self.target),
            ("code", self.code),
        ]
        .encode(encoder)
    }
}

/// Labels `{hook, target}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TargetLabels {
    hook: &'static str,
    target: Arc<str>,
}

impl EncodeLabelSet for TargetLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        [("hook", self.hook), ("target", &*self.target)].encode(encoder)
    }
}

/// Labels `{plugin, hub}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct PluginLabels {
    plugin: Arc<str>,
    hub: Arc<str>,
}

impl EncodeLabelSet for PluginLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        [("plugin", &*self.plugin), ("hub", &*self.hub)].encode(encoder)
    }
}

/// Why a call was refused while its request was being received, before it
/// reached a service (the label `reason` of `rollout_gateway_calls_refused`):
/// a fixed set, so a caller cannot create series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Refused {
    /// The request is not gRPC (its `content-type`).
    NotGrpc,
    /// A caller header the receive layer reads (`grpc-timeout`) is malformed
    /// or repeated.
    Header,
    /// The caller's own deadline passed before the request arrived whole.
    Deadline,
    /// The gateway's receive timeout passed before the request arrived whole.
    ReceiveTimeout,
    /// Holding the request's bytes would go over a pending-bytes pool.
    PendingBytes,
    /// The request's message declares more than the message limit.
    TooLarge,
    /// The request's message is malformed (framing, compression, several
    /// messages).
    Malformed,
    /// The request's stream failed (reset by the caller, or an HTTP/2
    /// stream error) while it arrived.
    Stream,
}

impl Refused {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Refused::NotGrpc => "not_grpc",
            Refused::Header => "header",
            Refused::Deadline => "deadline",
            Refused::ReceiveTimeout => "receive_timeout",
            Refused::PendingBytes => "pending_bytes",
            Refused::TooLarge => "too_large",
            Refused::Malformed => "malformed",
            Refused::Stream => "stream",
        }
    }
}

/// Labels `{reason}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ReasonLabels {
    reason: &'static str,
}

impl EncodeLabelSet for ReasonLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        [("reason", self.reason)].encode(encoder)
    }
}

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric family of one gateway, and the Prometheus registry that
/// encodes them. Shared (in an `Arc`) by the service, each plugin's handles
/// and the admin endpoint.
#[derive(Debug)]
pub struct Metrics {
    registry: MetricRegistry,
    hook_requests: Family<CodeLabels, Counter>,
    hook_duration: HistogramFamily<HookLabels>,
    upstream_attempts: Family<CodeLabels, Counter>,
    retries: Family<HookLabels, Counter>,
    fail_open: Family<HookLabels, Counter>,
    circuit_rejections: Family<HookLabels, Counter>,
    budget_exhausted: Family<PluginLabels, Counter>,
    calls: Family<TargetCodeLabels, Counter>,
    call_duration: HistogramFamily<TargetLabels>,
    calls_refused: Family<ReasonLabels, Counter>,
    /// The registry's state as its last change published it, read at
    /// scrape time.
    registry_state: Arc<ArcSwap<RegistryState>>,
}

/// A counter family registered in `r` as `name` (`_total` added).
fn counter<L>(r: &mut MetricRegistry, name: &str, help: &str) -> Family<L, Counter>
where
    L: Clone
        + std::hash::Hash
        + Eq
        + prometheus_client::encoding::EncodeLabelSet
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let family = Family::<L, Counter>::default();
    r.register(name, help, family.clone());
    family
}

/// A duration histogram family registered in `r` as `name`, in seconds.
fn histogram<L>(r: &mut MetricRegistry, name: &str, help: &str) -> HistogramFamily<L>
where
    L: Clone
        + std::hash::Hash
        + Eq
        + prometheus_client::encoding::EncodeLabelSet
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let family: HistogramFamily<L> = Family::new_with_constructor(duration_histogram);
    r.register_with_unit(name, help, Unit::Seconds, family.clone());
    family
}

impl Metrics {
    /// The metric families, and collectors reading the registry's state
    /// ([`Metrics::publish`]; before anything is published: no plugin,
    /// no reload, generation 0) and this process at scrape time.
    pub(crate) fn new() -> Metrics {
        let mut r = MetricRegistry::default();
        let registry_state = Arc::new(ArcSwap::from_pointee(RegistryState::default()));
        let families = Metrics {
            registry: MetricRegistry::default(),
            hook_requests: counter(
                &mut r,
                "rollout_gateway_hook_requests",
                "Calls to a plugin, one per plugin per gateway call (all attempts included), by the gateway's verdict",
            ),
            hook_duration: histogram(
                &mut r,
                "rollout_gateway_hook_duration",
                "Duration of calls to a plugin, all attempts and backoffs included",
            ),
            upstream_attempts: counter(
                &mut r,
                "rollout_gateway_upstream_attempts",
                "Attempts sent to a plugin, by the status the attempt ended with",
            ),
            retries: counter(
                &mut r,
                "rollout_gateway_retries",
                "Attempts after the first one of a call (retries)",
            ),
            fail_open: counter(
                &mut r,
                "rollout_gateway_fail_open",
                "Failed plugin calls skipped under failurePolicy Ignore",
            ),
            circuit_rejections: counter(
                &mut r,
                "rollout_gateway_circuit_rejections",
                "Attempts refused without a call because the plugin's circuit was open",
            ),
            budget_exhausted: counter(
                &mut r,
                "rollout_gateway_retry_budget_exhausted",
                "Retries the policy allowed but the plugin's retry budget refused",
            ),
            calls: counter(
                &mut r,
                "rollout_gateway_calls",
                "Calls from the controller, by target (plugin or pipeline) and answer",
            ),
            call_duration: histogram(
                &mut r,
                "rollout_gateway_call_duration",
                "Duration of calls from the controller, from the request's arrival to the answer",
            ),
            calls_refused: counter(
                &mut r,
                "rollout_gateway_calls_refused",
                "Calls refused while their request was being received, before any service saw them, by reason",
            ),
            registry_state: registry_state.clone(),
        };
        r.register_collector(Box::new(RegistryCollector(registry_state)));
        r.register_collector(Box::new(ProcessCollector));
        rollout_telemetry::metrics::register_build_info(
            &mut r,
            "rollout_gateway_build",
            "The gateway's version, and the git revision it was built from when known; always 1",
            env!("CARGO_PKG_VERSION"),
        );
        Metrics {
            registry: r,
            ..families
        }
    }

    /// Replaces the registry's state the metrics export: the registry
    /// publishes it at each change (a commit, a rejected change, an
    /// unreadable source), and a scrape reads the latest.
    pub(crate) fn publish(&self, state: RegistryState) {
        self.registry_state.store(Arc::new(state));
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        exposition::encode(&self.registry, exposition::Format::OpenMetrics)
    }

    /// The answer to `GET /metrics` with request headers `headers`: every
    /// metric in the format its `Accept` asks for (OpenMetrics for
    /// Prometheus, else the Prometheus text).
    pub(crate) fn response(&self, headers: &http::HeaderMap) -> http::Response<String> {
        exposition::response(&self.registry, headers)
    }

    /// Handles for one plugin of `hub` (`None`: a shared plugin, labelled
    /// `hub=""`), resolved once per registry snapshot. Series are created on
    /// first use, so a plugin shows only what it did.
    pub(crate) fn plugin(self: &Arc<Self>, name: &str, hub: Option<&Hub>) -> Arc<PluginMetrics> {
        Arc::new(PluginMetrics {
            name: Arc::from(name),
            hub: Arc::from(hub::label(hub)),
            metrics: self.clone(),
            requests: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
            attempts: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
            duration: std::array::from_fn(|_| OnceLock::new()),
            retries: std::array::from_fn(|_| OnceLock::new()),
            fail_open: std::array::from_fn(|_| OnceLock::new()),
            circuit_rejections: std::array::from_fn(|_| OnceLock::new()),
        })
    }

    /// Records one call from the controller to `target`.
    pub(crate) fn record_call(&self, hook: HookKind, target: &str, code: Code, elapsed: Duration) {
        let target: Arc<str> = Arc::from(target);
        self.calls
            .get_or_create(&TargetCodeLabels {
                hook: hook.as_str(),
                target: target.clone(),
                code: code_name(code),
            })
            .inc();
        self.call_duration
            .get_or_create(&TargetLabels {
                hook: hook.as_str(),
                target,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Records one call refused while its request was being received.
    pub(crate) fn record_refused(&self, reason: Refused) {
        self.calls_refused
            .get_or_create(&ReasonLabels {
                reason: reason.as_str(),
            })
            .inc();
    }
}

/// One plugin's metric handles (see [`Metrics::plugin`]).
#[derive(Debug)]
pub(crate) struct PluginMetrics {
    name: Arc<str>,
    hub: Arc<str>,
    metrics: Arc<Metrics>,
    requests: [[OnceLock<Counter>; CODES]; HOOKS],
    attempts: [[OnceLock<Counter>; CODES]; HOOKS],
    duration: [OnceLock<Histogram>; HOOKS],
    retries: [OnceLock<Counter>; HOOKS],
    fail_open: [OnceLock<Counter>; HOOKS],
    circuit_rejections: [OnceLock<Counter>; HOOKS],
}

impl PluginMetrics {
    fn code_labels(&self, hook: HookKind, code: Code) -> CodeLabels {
        CodeLabels {
            hook: hook.as_str(),
            plugin: self.name.clone(),
            hub: self.hub.clone(),
            code: code_name(code),
        }
    }

    fn hook_labels(&self, hook: HookKind) -> HookLabels {
        HookLabels {
            hook: hook.as_str(),
            plugin: self.name.clone(),
            hub: self.hub.clone(),
        }
    }

    /// One call to the plugin ended with the gateway's verdict `code`.
    pub(crate) fn record_request(&self, hook: HookKind, code: Code, elapsed: Duration) {
        self.requests[hook as usize][code as usize]
            .get_or_init(|| {
                self.metrics
                    .hook_requests
                    .get_or_create_owned(&self.code_labels(hook, code))
            })
            .inc();
        self.duration[hook as usize]
            .get_or_init(|| {
                self.metrics
                    .hook_duration
                    .get_or_create_owned(&self.hook_labels(hook))
            })
            .observe(elapsed.as_secs_f64());
    }

    /// One attempt was sent and ended with `code`; `attempt` is 1-based.
    pub(crate) fn record_attempt(&self, hook: HookKind, attempt: u32, code: Code) {
        self.attempts[hook as usize][code as usize]
            .get_or_init(|| {
                self.metrics
                    .upstream_attempts
                    .get_or_create_owned(&self.code_labels(hook, code))
            })
            .inc();
        if attempt > 1 {
            self.retry(hook);
        }
    }

    /// Attempt number 2 or more was refused by the open circuit: it is still
    /// a retry, though nothing was sent.
    pub(crate) fn record_rejection(&self, hook: HookKind, attempt: u32) {
        self.circuit_rejections[hook as usize]
            .get_or_init(|| {
                self.metrics
                    .circuit_rejections
                    .get_or_create_owned(&self.hook_labels(hook))
            })
            .inc();
        if attempt > 1 {
            self.retry(hook);
        }
    }

    fn retry(&self, hook: HookKind) {
        self.retries[hook as usize]
            .get_or_init(|| {
                self.metrics
                    .retries
                    .get_or_create_owned(&self.hook_labels(hook))
            })
            .inc();
    }

    /// A failed call was skipped under `failurePolicy: Ignore`.
    pub(crate) fn record_fail_open(&self, hook: HookKind) {
        self.fail_open[hook as usize]
            .get_or_init(|| {
                self.metrics
                    .fail_open
                    .get_or_create_owned(&self.hook_labels(hook))
            })
            .inc();
    }

    /// The retry budget refused a retry.
    pub(crate) fn record_budget_exhausted(&self) {
        self.metrics
            .budget_exhausted
            .get_or_create(&PluginLabels {
                plugin: self.name.clone(),
                hub: self.hub.clone(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_canonical_name() {
        assert_eq!(code_name(Code::Ok), "OK");
        assert_eq!(code_name(Code::DeadlineExceeded), "DEADLINE_EXCEEDED");
        assert_eq!(code_name(Code::Unauthenticated), "UNAUTHENTICATED");
        assert_eq!(Code::Unauthenticated as usize, CODES - 1);
    }
}
