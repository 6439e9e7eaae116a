//! The controller's Prometheus metrics, served as `/metrics` on
//! `run --health-listen` as the gateway serves its own: OpenMetrics when
//! `Accept` asks for it (as Prometheus does), else the Prometheus text
//! (`rollout_telemetry::metrics`). Names follow the gateway's
//! (`rollout_gateway_*`):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `rollout_controller_reconciles_total` | counter | `result` = `success`/`error` |
//! | `rollout_controller_reconcile_duration_seconds` | histogram | |
//! | `rollout_controller_reconcile_errors_total` | counter | `error` = [`ReconcileErrorKind`] |
//! | `rollout_controller_hook_calls_total` | counter | `hook`, `target`, `code` |
//! | `rollout_controller_hook_call_duration_seconds` | histogram | `hook`, `target` |

//! | `rollout_controller_rollouts_in_progress` | gauge | `aborting` = `false`/`true` |
//! | `rollout_controller_aborts_total` | counter | `action` = `RollBack`/`Stop` |
//! | `rollout_controller_leader` | gauge | |
//! | `rollout_controller_build_info` | info | `version`, `revision` |
//! | `process_*` | | |
//!
//! `target` is a plugin or pipeline name the gateway resolved (at most
//! [`targets::MAX_NAMED_TARGETS`] of them), else [`targets::UNREGISTERED_TARGET`]:
//! the names come from ManifestWorkReplicaSets, which their authors choose.
//!
//! [`Metered`] counts the hook calls of any [`Hooks`](crate::hooks::Hooks),
//! so `run` and the simulator count the same way. Recording is a few atomic
//! operations and two short locks: the set of resolved targets, touched
//! once per hook call, and the map of rollouts in progress, once per
//! reconcile.

mod metered;
mod targets;

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use rollout_proto::{HookKind, code_name};
use rollout_telemetry::metrics::{self as exposition, ProcessCollector};

pub use metered::Metered;

use crate::hooks::HookError;
use crate::orchestrate::DeployOutcome;
use crate::revision::AbortAction;

/// Bucket bounds of the hook call durations, in seconds: from a local
/// plugin's millisecond to the 30 s contract limit (the gateway's buckets).
pub(crate) const HOOK_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Bucket bounds of the reconcile durations, in seconds: a reconcile makes
/// several API and hook calls.
pub(crate) const RECONCILE_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Why a reconcile failed, as the `error` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReconcileErrorKind {
    /// A Kubernetes API call of the reconcile failed (`kube`).
    Kube,
    /// Listing or writing a ManifestWork failed (`manifestwork`).
    ManifestWork,
    /// The object cannot be reconciled as it is (`invalid`).
    Invalid,
}

impl ReconcileErrorKind {
    /// Every kind, each a series from the start.
    pub(crate) const ALL: [ReconcileErrorKind; 3] = [
        ReconcileErrorKind::Kube,
        ReconcileErrorKind::ManifestWork,
        ReconcileErrorKind::Invalid,
    ];

    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReconcileErrorKind::Kube => "kube",
            ReconcileErrorKind::ManifestWork => "manifestwork",
            ReconcileErrorKind::Invalid => "invalid",
        }
    }
}

/// One label pair whose value is one of a fixed set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct One(&'static str, &'static str);

impl EncodeLabelSet for One {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        [(self.0, self.1)].encode(encoder)
    }
}

/// Labels `{hook, target, code}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct CallLabels {
    hook: &'static str,
    target: String,
    code: &'static str,
}

impl EncodeLabelSet for CallLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        [
            ("hook", self.hook),
            ("target", self.target.as_str()),
            ("code", self.code),
        ]
        .encode(encoder)
    }
}

/// Labels `{hook, target}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct TargetLabels {
    hook: &'static str,
    target: String,
}

impl EncodeLabelSet for TargetLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> fmt::Result {
        [("hook", self.hook), ("target", self.target.as_str())].encode(encoder)
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn hook_histogram() -> Histogram {
    Histogram::new(HOOK_BUCKETS)
}

/// Where one ManifestWorkReplicaSet's rollout stands after a reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RolloutPhase {
    /// Nothing left to do: every cluster succeeded (rolled out or rolled
    /// back), or an abort stopped the rollout.
    Idle,
    /// Rolling the update revision out.
    RollingOut,
    /// Rolling back after an abort.
    RollingBack,
}

impl RolloutPhase {
    /// The phase a step's outcome leaves the rollout in.
    pub(crate) fn of(outcome: &DeployOutcome) -> RolloutPhase {
        let placements = &outcome.placements;
        if placements.iter().any(|p| p.stopped) || placements.iter().all(|p| p.complete()) {
            RolloutPhase::Idle
        } else if placements.iter().any(|p| p.aborting) {
            RolloutPhase::RollingBack
        } else {
            RolloutPhase::RollingOut
        }
    }
}

/// Every metric of one controller (or one simulation), and the registry
/// that encodes them. Shared in an `Arc`.
#[derive(Debug)]
pub struct ControllerMetrics {
    registry: Registry,
    reconciles: Family<One, Counter>,
    reconcile_duration: Histogram,
    reconcile_errors: Family<One, Counter>,
    hook_calls: Family<CallLabels, Counter>,
    hook_duration: HistogramFamily<TargetLabels>,
    in_progress: Family<One, Gauge>,
    aborts: Family<One, Counter>,
    leader: Gauge,
    phases: Mutex<HashMap<String, RolloutPhase>>,
    targets: targets::Targets,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        ControllerMetrics::new()
    }
}

impl ControllerMetrics {
    /// The metric families, registered.
    pub fn new() -> ControllerMetrics {
        let mut r = Registry::default();
        let reconciles = Family::<One, Counter>::default();
        r.register(
            "rollout_controller_reconciles",
            "Reconciles of a ManifestWorkReplicaSet, by result",
            reconciles.clone(),
        );
        let reconcile_duration = Histogram::new(RECONCILE_BUCKETS);
        r.register_with_unit(
            "rollout_controller_reconcile_duration",
            "Duration of reconciles, hook calls and API calls included",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        let reconcile_errors = Family::<One, Counter>::default();
        r.register(
            "rollout_controller_reconcile_errors",
            "Reconciles that failed and are retried, by cause",
            reconcile_errors.clone(),
        );
        let hook_calls = Family::<CallLabels, Counter>::default();
        r.register(
            "rollout_controller_hook_calls",
            "Hook calls to the gateway, by hook, target (plugin or pipeline) and gRPC code",
            hook_calls.clone(),
        );
        let hook_duration: HistogramFamily<TargetLabels> =
            Family::new_with_constructor(hook_histogram);
        r.register_with_unit(
            "rollout_controller_hook_call_duration",
            "Duration of hook calls to the gateway, as the controller waited for them",
            Unit::Seconds,
            hook_duration.clone(),
        );
        // Every result and cause is a series from the start: rate() sees
        // the first failure (a series born at 1 has no increase), and the
        // alerts on them never miss a series.
        for result in ["success", "error"] {
            let _ = reconciles.get_or_create(&One("result", result));
        }
        for kind in ReconcileErrorKind::ALL {
            let _ = reconcile_errors.get_or_create(&One("error", kind.as_str()));
        }
        let in_progress = Family::<One, Gauge>::default();
        r.register(
            "rollout_controller_rollouts_in_progress",
            "ManifestWorkReplicaSets whose last reconcile left a rollout (aborting=false) or a rollback (aborting=true) unfinished",
            in_progress.clone(),
        );
        // Both series exist from the start, so an alert sees a 0.
        in_progress.get_or_create(&One("aborting", "false")).set(0);
        in_progress.get_or_create(&One("aborting", "true")).set(0);
        let aborts = Family::<One, Counter>::default();
        r.register(
            "rollout_controller_aborts",
            "Aborts started, by what followed: RollBack to the current revision, or Stop (nothing to go back to)",
            aborts.clone(),
        );
        let leader = Gauge::default();
        r.register(
            "rollout_controller_leader",
            "1 while this replica holds the leader Lease and reconciles, else 0",
            leader.clone(),
        );
        rollout_telemetry::metrics::register_build_info(
            &mut r,
            "rollout_controller_build",
            "The controller's version, and the git revision it was built from when known; always 1",
            env!("CARGO_PKG_VERSION"),
        );
        r.register_collector(Box::new(ProcessCollector));
        ControllerMetrics {
            registry: r,
            reconciles,
            reconcile_duration,
            reconcile_errors,
            hook_calls,
            hook_duration,
            in_progress,
            aborts,
            leader,
            phases: Mutex::new(HashMap::new()),
            targets: targets::Targets::default(),
        }
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

    /// One reconcile ended after `elapsed`, failed with `error` if any.
    pub fn record_reconcile(&self, elapsed: Duration, error: Option<ReconcileErrorKind>) {
        let result = if error.is_some() { "error" } else { "success" };
        self.reconciles.get_or_create(&One("result", result)).inc();
        self.reconcile_duration.observe(elapsed.as_secs_f64());
        if let Some(kind) = error {
            self.reconcile_errors
                .get_or_create(&One("error", kind.as_str()))
                .inc();
        }
    }

    /// One hook call to `target` ended after `elapsed`, failed with
    /// `error` if any; labelled by `target` only once the gateway resolved
    /// it ([`targets::Targets::label`]).
    pub(crate) fn record_hook(
        &self,
        hook: HookKind,
        target: &str,
        error: Option<&HookError>,
        elapsed: Duration,
    ) {
        let code = error.map_or(tonic::Code::Ok, |e| e.code);
        let target = self.targets.label(target, error);
        self.hook_calls
            .get_or_create(&CallLabels {
                hook: hook.as_str(),
                target: target.clone(),
                code: code_name(code),
            })
            .inc();
        self.hook_duration
            .get_or_create(&TargetLabels {
                hook: hook.as_str(),
                target,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// One rollout step of the ManifestWorkReplicaSet `key`
    /// (`namespace/name`): counts the abort it started, if any, and its
    /// phase afterwards.
    pub fn record_rollout(&self, key: &str, outcome: &DeployOutcome) {
        if let Some(abort) = &outcome.abort {
            let action = match abort.action {
                AbortAction::Stop => "Stop",
                // Proceed never comes with a report.
                AbortAction::RollBack | AbortAction::Proceed => "RollBack",
            };
            self.aborts.get_or_create(&One("action", action)).inc();
        }
        self.set_phase(key, Some(RolloutPhase::of(outcome)));
    }

    /// The ManifestWorkReplicaSet `key` is gone (deleted): its rollout no
    /// longer counts.
    pub(crate) fn forget_rollout(&self, key: &str) {
        self.set_phase(key, None);
    }

    fn set_phase(&self, key: &str, phase: Option<RolloutPhase>) {
        let mut phases = self.phases.lock().unwrap_or_else(|p| p.into_inner());
        match phase {
            Some(RolloutPhase::Idle) | None => {
                phases.remove(key);
            }
            Some(phase) => {
                phases.insert(key.to_owned(), phase);
            }
        }
        let count = |want: RolloutPhase| {
            let n = phases.values().filter(|p| **p == want).count();
            i64::try_from(n).unwrap_or(i64::MAX)
        };
        self.in_progress
            .get_or_create(&One("aborting", "false"))
            .set(count(RolloutPhase::RollingOut));
        self.in_progress
            .get_or_create(&One("aborting", "true"))
            .set(count(RolloutPhase::RollingBack));
    }

    /// Whether this replica leads (see [`crate::leader`]).
    pub(crate) fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }
}

/// The value of `series` (a name with its labels as encoded, such as
/// `rollout_controller_aborts_total{action="RollBack"}`) in the text `text`.
#[cfg(test)]
pub(crate) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| line.strip_prefix(series))
        .filter_map(|rest| rest.strip_prefix(' '))
        .find_map(|value| value.split(' ').next()?.parse().ok())
}

#[cfg(test)]
mod tests;
