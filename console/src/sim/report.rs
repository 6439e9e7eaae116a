//! What the simulator reports: a [`Plan`] before the first step, a
//! [`StepReport`] per step and a [`Summary`] at the end, and where they go
//! ([`Report`]): JSON lines ([`JsonLines`], `--json`) or the terminal
//! ([`super::terminal::Terminal`]).
//!
//! The JSON of a step (docs/plugin-api.md §5 and more), one object per line:
//!
//! ```json
//! {"step": 5, "time": "…", "elapsedSeconds": 90.6, "wallSeconds": 1.2,
//!  "revision": "5cb84c", "aborting": true,
//!  "clusters": {"ToApply": 5, "Progressing": 5, "Validating": 0, "Succeeded": 10, "Failed": 0, "TimeOut": 0},
//!  "updated": 5,
//!  "applied": [{"cluster": "cluster-001", "index": 1, "aborting": true, "revision": "5cb84c",
//!               "generation": 3, "mutatedBy": ["traffic-weights", "rollback-mutator"],
//!               "annotations": {"rollout-hooks.io/canary-weight": "100", …}}],
//!  "validations": {"Succeeded": 4, "Failed": 1, "InProgress": 0},
//!  "verdicts": [{"cluster": "cluster-008", "revision": "…", "result": "Failed", "message": "smoke-test: …"}],
//!  "hookCalls": {"BeginRollout": 5, "ProgressRollout": 1, "ValidateRolloutCompletion": 5, "MutateManifestWork": 5},
//!  "events": [{"type": "validationFailed", …}, {"type": "abort", …}],
//!  "mutations": [{"cluster": "cluster-001", "aborting": false, "mutatedBy": ["traffic-weights"],
//!                 "patch": [{"op": "replace", "path": "/spec/workload/manifests/0/…/setWeight", "value": 5}],
//!                 "diff": "@@ -22,7 +22,7 @@\n …"}],
//!  "nextInSeconds": 30.0, "realWait": false, "traceId": "…"}
//! ```

use std::collections::BTreeMap;
use std::io::{self, Write};

use jiff::Timestamp;
use serde::Serialize;

use rollout_controller::hooks::HookCounts;
use rollout_controller::rollout::RolloutStatus;

/// The clusters per status (docs/plugin-api.md §5's `clusters` object).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct StatusCounts {
    /// No work of the revision yet.
    #[serde(rename = "ToApply")]
    pub(crate) to_apply: usize,
    /// Applied, progressing.
    #[serde(rename = "Progressing")]
    pub(crate) progressing: usize,
    /// Done; the plugin is validating.
    #[serde(rename = "Validating")]
    pub(crate) validating: usize,
    /// Done (and validated).
    #[serde(rename = "Succeeded")]
    pub(crate) succeeded: usize,
    /// Degraded, or failed validation.
    #[serde(rename = "Failed")]
    pub(crate) failed: usize,
    /// Past its progress deadline.
    #[serde(rename = "TimeOut")]
    pub(crate) time_out: usize,
}

impl StatusCounts {
    /// Counts one cluster in `status` (`Skip` is never produced).
    pub(crate) fn add(&mut self, status: RolloutStatus) {
        match status {
            RolloutStatus::ToApply | RolloutStatus::Skip => self.to_apply += 1,
            RolloutStatus::Progressing => self.progressing += 1,
            RolloutStatus::Validating => self.validating += 1,
            RolloutStatus::Succeeded => self.succeeded += 1,
            RolloutStatus::Failed => self.failed += 1,
            RolloutStatus::TimeOut => self.time_out += 1,
        }
    }
}

/// A work applied in a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AppliedWork {
    /// The cluster.
    pub(crate) cluster: String,
    /// Its `cluster_index` (1-based position in the rollout order).
    pub(crate) index: usize,
    /// Whether the hook requests said `aborting` (a rollback).
    pub(crate) aborting: bool,
    /// The revision applied.
    pub(crate) revision: String,
    /// The work's generation after the apply.
    pub(crate) generation: i64,
    /// The plugins that changed the work (`ocm-rollout-mutated-by`).
    pub(crate) mutated_by: Vec<String>,
    /// The annotations on the work's manifests after the mutation (the
    /// union over its manifests).
    pub(crate) annotations: BTreeMap<String, String>,
}

/// `ValidateRolloutCompletion` answers in a step, by result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct ValidationCounts {
    /// SUCCEEDED.
    #[serde(rename = "Succeeded")]
    pub(crate) succeeded: usize,
    /// FAILED.
    #[serde(rename = "Failed")]
    pub(crate) failed: usize,
    /// INPROGRESS (or an answer that decides nothing).
    #[serde(rename = "InProgress")]
    pub(crate) in_progress: usize,
    /// The first INPROGRESS message, as an example.
    #[serde(rename = "inProgressMessage", skip_serializing_if = "Option::is_none")]
    pub(crate) in_progress_message: Option<String>,
}

/// A decisive validation answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Verdict {
    /// The cluster.
    pub(crate) cluster: String,
    /// The revision validated (`desired_revision`).
    pub(crate) revision: String,
    /// `Succeeded` or `Failed`.
    pub(crate) result: RolloutStatus,
    /// The plugin's message.
    pub(crate) message: String,
}

/// A failed or timed-out cluster named by an abort.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Failure {
    /// The cluster.
    pub(crate) cluster: String,
    /// `Failed` or `TimeOut`.
    pub(crate) status: RolloutStatus,
    /// The validation message, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
}

/// Something worth telling that happened in a step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub(crate) enum Event {
    /// The agent reported a work Degraded (a `--fail` cluster).
    #[serde(rename_all = "camelCase")]
    WorkDegraded {
        /// The cluster.
        cluster: String,
    },
    /// The plugin answered FAILED.
    #[serde(rename_all = "camelCase")]
    ValidationFailed {
        /// The cluster.
        cluster: String,
        /// The plugin's message.
        message: String,
    },
    /// A cluster passed its progress deadline (reported once).
    #[serde(rename_all = "camelCase")]
    TimedOut {
        /// The cluster.
        cluster: String,
    },
    /// A hook call failed; its cluster (or, for ProgressRollout, the
    /// placement) waits for the next step.
    #[serde(rename_all = "camelCase")]
    HookError {
        /// The hook.
        hook: String,
        /// The cluster, for a per-cluster hook.
        #[serde(skip_serializing_if = "Option::is_none")]
        cluster: Option<String>,
        /// The gRPC code, such as `UNAVAILABLE`.
        code: String,
        /// The status message.
        message: String,
    },
    /// The rollout aborted in this step.
    #[serde(rename_all = "camelCase")]
    Abort {
        /// `RollBack` (to `to`) or `Stop` (no earlier revision).
        action: String,
        /// The revision given up.
        from: String,
        /// The revision restored, for a rollback.
        #[serde(skip_serializing_if = "Option::is_none")]
        to: Option<String>,
        /// The clusters that failed or timed out.
        failures: Vec<Failure>,
    },
}

/// What the plugins changed in one work (`MutateManifestWork`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MutationReport {
    /// The cluster.
    pub(crate) cluster: String,
    /// Whether the request said `aborting` (a rollback's work).
    pub(crate) aborting: bool,
    /// The plugins that changed the work, in order
    /// (`ocm-rollout-mutated-by`).
    pub(crate) mutated_by: Vec<String>,
    /// Plugins skipped under `failurePolicy: Ignore`
    /// (`ocm-rollout-failed-open`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) failed_open: Vec<String>,
    /// RFC 6902 operations from the work sent to the work answered.
    pub(crate) patch: serde_json::Value,
    /// The same change as a unified diff of the works as YAML, changed
    /// lines with two lines of context.
    pub(crate) diff: String,
}

/// One step: one reconcile of the ManifestWorkReplicaSet.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepReport {
    /// 1, 2, …
    pub(crate) step: usize,
    /// The simulated time of the step.
    pub(crate) time: Timestamp,
    /// Simulated seconds since the start.
    pub(crate) elapsed_seconds: f64,
    /// Real seconds since the start.
    pub(crate) wall_seconds: f64,
    /// The revision rolled out in this step (the restored one while
    /// aborting).
    pub(crate) revision: String,
    /// Whether the step rolls back (every request said `aborting`).
    pub(crate) aborting: bool,
    /// Every cluster's status for [`StepReport::revision`], as the step
    /// saw it (a cluster applied in the step is still `ToApply`: the agent
    /// has not reported it yet).
    pub(crate) clusters: StatusCounts,
    /// Clusters with a work of the update revision after the step.
    pub(crate) updated: usize,
    /// The works applied in the step, in order.
    pub(crate) applied: Vec<AppliedWork>,
    /// The validation answers of the step.
    pub(crate) validations: ValidationCounts,
    /// The SUCCEEDED and FAILED answers of the step.
    pub(crate) verdicts: Vec<Verdict>,
    /// The hook calls of the step.
    pub(crate) hook_calls: HookCounts,
    /// What else happened.
    pub(crate) events: Vec<Event>,
    /// What the plugins changed in the works of the step, in order; only
    /// the works they changed, and only with a template of the user's own
    /// (`--template`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) mutations: Vec<MutationReport>,
    /// Simulated seconds until the next step; `None` after the last.
    pub(crate) next_in_seconds: Option<f64>,
    /// Whether that wait is slept in real time (a plugin is deciding).
    pub(crate) real_wait: bool,
    /// The trace of the step (its spans leave the process only when an
    /// OTLP endpoint is set).
    pub(crate) trace_id: String,
    /// With `--crds`: the failed and timed-out clusters as the stored
    /// ManifestWorkReplicaSetRollout status lists them after the step.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) status_clusters: Vec<rollout_controller::api::ClusterRolloutSummary>,
}

impl StepReport {
    /// The first abort event, if the step has one.
    #[cfg(test)]
    pub(crate) fn abort(&self) -> Option<&Event> {
        self.events
            .iter()
            .find(|e| matches!(e, Event::Abort { .. }))
    }
}

/// How the rollout ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Outcome {
    /// Every cluster runs the update revision.
    Succeeded,
    /// A failure aborted the rollout; the updated clusters were rolled back
    /// (or, with no earlier revision, the rollout stopped).
    Aborted,
    /// The rollout cannot go on (failures beyond `maxFailures`, or a
    /// cluster stuck) and was not aborted.
    Failed,
}

/// What a simulation is about to do, for the terminal's header.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// `namespace/name` of the ManifestWorkReplicaSet.
    pub(crate) owner: String,
    /// The placement.
    pub(crate) placement: String,
    /// The clusters, in order.
    pub(crate) clusters: Vec<String>,
    /// The number of decision groups.
    pub(crate) groups: usize,
    /// The strategy, as a phrase.
    pub(crate) strategy: String,
    /// The plugin and what its Initialize answered (`name version`).
    pub(crate) plugin: Option<(String, String)>,
    /// Where the gateway is, when a plugin is called.
    pub(crate) gateway: Option<String>,
    /// The update revision and its image.
    pub(crate) update: (String, String),
    /// The revision every cluster runs before, with its image; `None` for
    /// a first rollout.
    pub(crate) previous: Option<(String, String)>,
    /// The agent's latency, as a phrase.
    pub(crate) latency: String,
    /// The agent's delay before its first report, as a phrase.
    pub(crate) delay: String,
    /// The clusters whose new work degrades.
    pub(crate) fail: Vec<String>,
    /// Whether spans are exported.
    pub(crate) tracing: bool,
    /// The fields the simulated API server (`--crds`) dropped when it
    /// stored the objects, as its warnings name them.
    pub(crate) api_warnings: Vec<String>,
    /// Whether the terminal shows what the plugins changed in each work
    /// (`--template`).
    pub(crate) diffs: bool,
}

/// The works at the end, summed up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkSummary {
    /// Works in the fleet.
    pub(crate) total: usize,
    /// Works per revision.
    pub(crate) by_revision: BTreeMap<String, usize>,
    /// Works applied at least once during the simulation.
    pub(crate) applied: usize,
    /// For each manifest annotation, how many of the applied works carry
    /// it.
    pub(crate) annotations: BTreeMap<String, usize>,
}

/// One work at the end (`--list-works`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkEntry {
    /// The cluster.
    pub(crate) cluster: String,
    /// The revision the work carries.
    pub(crate) revision: String,
    /// Its generation.
    pub(crate) generation: i64,
    /// How many times it was applied during the simulation.
    pub(crate) applies: usize,
    /// Its status for the last step's revision.
    pub(crate) status: RolloutStatus,
    /// The persisted validation verdict, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) validation: Option<String>,
    /// The annotations on its manifests.
    pub(crate) annotations: BTreeMap<String, String>,
}

/// The abort, for the summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AbortSummary {
    /// The step it happened in.
    pub(crate) step: usize,
    /// `RollBack` or `Stop`.
    pub(crate) action: String,
    /// The clusters that failed or timed out.
    pub(crate) failures: Vec<Failure>,
    /// The trace of that step.
    pub(crate) trace_id: String,
}

/// The final line (docs/plugin-api.md §5 and more).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// How the rollout ended.
    pub result: Outcome,
    /// Clusters in the fleet.
    pub(crate) clusters: usize,
    /// Steps taken.
    pub(crate) steps: usize,
    /// Every hook call (`Initialize` not included).
    pub(crate) hook_calls: HookCounts,
    /// The hook calls whose request said `aborting = true`.
    pub(crate) aborting_hook_calls: HookCounts,
    /// Hook calls that failed.
    pub(crate) hook_errors: usize,
    /// The strategy type.
    pub(crate) strategy: String,
    /// The plugin or pipeline called, if any.
    pub(crate) plugin: Option<String>,
    /// The update revision (the new template).
    pub(crate) update_revision: String,
    /// The revision the fleet ran before; `None` for a first rollout.
    pub(crate) previous_revision: Option<String>,
    /// `status.currentRevision` at the end.
    pub(crate) current_revision: Option<String>,
    /// The abort, if there was one.
    pub(crate) abort: Option<AbortSummary>,
    /// Works applied (BeginRollout, MutateManifestWork and an apply each).
    pub(crate) applies: usize,
    /// Of those, the rollbacks (applied while aborting).
    pub(crate) rollback_applies: usize,
    /// The works at the end.
    pub(crate) works: WorkSummary,
    /// Simulated seconds from the first step to the last.
    pub(crate) simulated_seconds: f64,
    /// Real seconds, start to end.
    pub(crate) wall_seconds: f64,
    /// Real seconds slept while a plugin was deciding.
    pub(crate) real_wait_seconds: f64,
    /// Hook calls per second of wall time not slept.
    pub(crate) hook_calls_per_second: f64,
    /// The process's peak resident memory (`VmHWM`), where readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) peak_rss_mib: Option<f64>,
    /// Every work (`--list-works`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) work_list: Option<Vec<WorkEntry>>,
    /// The fields the simulated API server (`--crds`) dropped.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) api_warnings: Vec<String>,
    /// With `--crds`: the ManifestWorkReplicaSetRollout's status as stored
    /// at the end (revisions, abort, per-cluster details).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rollout_status: Option<serde_json::Value>,
}

/// Where a simulation's progress goes.
pub trait Report {
    /// Before the first step.
    fn begin(&mut self, plan: &Plan) -> io::Result<()>;
    /// After each step.
    fn step(&mut self, step: &StepReport) -> io::Result<()>;
    /// At the end.
    fn end(&mut self, summary: &Summary) -> io::Result<()>;
}

/// `--json`: one object per step and the summary, one per line, flushed
/// as they come.
#[derive(Debug)]
pub struct JsonLines<W> {
    out: W,
}

impl<W: Write> JsonLines<W> {
    /// Lines written to `out`.
    pub fn new(out: W) -> JsonLines<W> {
        JsonLines { out }
    }

    fn line(&mut self, value: &impl Serialize) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, value)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

impl<W: Write> Report for JsonLines<W> {
    fn begin(&mut self, _: &Plan) -> io::Result<()> {
        Ok(())
    }

    fn step(&mut self, step: &StepReport) -> io::Result<()> {
        self.line(step)
    }

    fn end(&mut self, summary: &Summary) -> io::Result<()> {
        self.line(summary)
    }
}

/// The process's peak resident set (`VmHWM` of `/proc/self/status`) in
/// MiB; `None` where there is no such file.
pub(crate) fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn counts_and_events_serialize_as_the_contract_spells_them() {
        let mut counts = StatusCounts::default();
        for status in [
            RolloutStatus::ToApply,
            RolloutStatus::Validating,
            RolloutStatus::Validating,
            RolloutStatus::TimeOut,
        ] {
            counts.add(status);
        }
        assert_eq!(
            serde_json::to_value(counts).expect("json"),
            json!({"ToApply": 1, "Progressing": 0, "Validating": 2, "Succeeded": 0, "Failed": 0, "TimeOut": 1})
        );
        let abort = Event::Abort {
            action: "RollBack".into(),
            from: "v2".into(),
            to: Some("v1".into()),
            failures: vec![Failure {
                cluster: "cluster-008".into(),
                status: RolloutStatus::Failed,
                message: Some("smoke-test: failed".into()),
            }],
        };
        assert_eq!(
            serde_json::to_value(abort).expect("json"),
            json!({"type": "abort", "action": "RollBack", "from": "v2", "to": "v1",
                   "failures": [{"cluster": "cluster-008", "status": "Failed", "message": "smoke-test: failed"}]})
        );
        let error = Event::HookError {
            hook: "BeginRollout".into(),
            cluster: None,
            code: "UNAVAILABLE".into(),
            message: "down".into(),
        };
        assert_eq!(
            serde_json::to_value(error).expect("json")["type"],
            "hookError"
        );
    }

    #[test]
    fn peak_memory_is_read_on_linux() {
        if std::path::Path::new("/proc/self/status").exists() {
            assert!(peak_rss_mib().is_some_and(|m| m > 0.0));
        }
    }
}
