//! The ManifestWorkReplicaSet status after one reconcile, built from the
//! step's outcome. Pure: the reconcile patches the result once.
//!
//! Conditions (each keeps its `lastTransitionTime` while its status stays):
//!
//! | type | True | False |
//! |---|---|---|
//! | PlacementVerified | `AsExpected` | `PlacementDecisionNotFound` (a placement is missing), `NotAsExpected` (bad strategy or decisions), `PlacementDecisionEmpty` (no cluster selected) |
//! | PlacementRolledOut | `Complete`: every cluster succeeded | `RolloutDegraded` (aborted, or `maxFailures` exceeded), `Progressing` |
//! | ManifestworkApplied | `AsExpected` | `Processing`, `NotAsExpected`, `PlacementDecisionEmpty` (upstream's rule on the counts) |
//! | PluginLoaded (only with a plugin) | `Available` | `Failed`, with the design's messages |
//! | Progressing | `NewRevisionCreated`, `FoundNewRevision` (rolling out), `RolloutPaused` (an operator paused it: who, when, why), `NewManifestWorkAvailable` (done) | `PluginCallFailed` (hook errors in the message), `RolloutAborted`, `ProgressDeadlineExceeded` |
//! | ManifestworkApplied, for an owner label value over 63 characters ([`invalid_owner_label`]) | | `InvalidManifestWorkName`, as OCM's controller says it |
//! | ManifestWorksConflict (only while another field manager writes the works) | `OtherFieldManager`: the works and the managers | |

use std::collections::BTreeMap;
use std::fmt;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::binding::Binding;
use crate::api::conditions::*;
use crate::api::control::Pause;
use crate::api::labels::MAX_LABEL_VALUE_LEN;
use crate::api::manifestworkreplicaset::MAX_CLUSTER_SUMMARIES;
use crate::api::placement::DecisionGroupError;
use crate::api::{
    ClusterCounts, ClusterRolloutSummary, HashedLabelValue, ManifestWorkReplicaSetStatus,
    ManifestWorkReplicaSetSummary, PlacementSummary,
};
pub(crate) use crate::hooks::PluginState;
use crate::orchestrate::{AbortReport, ClusterReport, DeployOutcome, PlacementOutcome};
use crate::revision::{AbortAction, RevisionOrigin, RevisionStatus};
use crate::rollout::{InvalidStrategy, RolloutStatus};

/// The longest condition message written (the API allows 32 KiB).
pub(crate) const MAX_MESSAGE_LEN: usize = 4096;

/// Why a placement of the spec was not rolled out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlacementProblem {
    /// The Placement does not exist.
    NotFound,
    /// Its rollout strategy cannot be used.
    Strategy(InvalidStrategy),
    /// Its PlacementDecisions' group labels cannot be read.
    Decisions(DecisionGroupError),
}

impl fmt::Display for PlacementProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementProblem::NotFound => f.write_str("not found"),
            PlacementProblem::Strategy(error) => error.fmt(f),
            PlacementProblem::Decisions(error) => error.fmt(f),
        }
    }
}

/// What the status is built from.
#[derive(Debug, Clone)]
pub(crate) struct StatusInput<'a> {
    /// The status before this reconcile.
    pub(crate) old: &'a ManifestWorkReplicaSetStatus,
    /// `metadata.generation`, for the conditions' `observedGeneration`.
    pub(crate) generation: Option<i64>,
    /// The time of this reconcile.
    pub(crate) now: Timestamp,
    /// Every placement of the spec, in order.
    pub(crate) spec_placements: &'a [String],
    /// The placements that were not rolled out, and why.
    pub(crate) problems: &'a BTreeMap<String, PlacementProblem>,
    /// The step's outcome (one entry per placement rolled out).
    pub(crate) outcome: &'a DeployOutcome,
    /// The plugins the strategies name.
    pub(crate) plugins: &'a [PluginState],
    /// The revision fields after this reconcile.
    pub(crate) revisions: &'a RevisionStatus,
    /// `collisionCount`.
    pub(crate) collision_count: i32,
    /// How the update revision was found in this reconcile.
    pub(crate) origin: RevisionOrigin,
    /// What the bind phase did (`CarrierBound`); `None` leaves the
    /// condition as it was.
    pub(crate) binding: Option<&'a Binding>,
    /// The pause an operator holds the rollout for (`spec.control.paused`).
    pub(crate) paused: Option<&'a Pause>,
}

/// The status of a ManifestWorkReplicaSet whose owner label value
/// `<namespace>.<name>` is not a valid label value (over 63 characters):
/// `old` with ManifestworkApplied False, reason `InvalidManifestWorkName`,
/// as OCM's own controller reports it. Nothing is rolled out: OCM's
/// controller finds works by exactly that label, so works labelled with any
/// other value would be orphaned when it takes the set back.
pub(crate) fn invalid_owner_label(
    old: &ManifestWorkReplicaSetStatus,
    generation: Option<i64>,
    now: Timestamp,
    owner: &HashedLabelValue,
) -> ManifestWorkReplicaSetStatus {
    let mut status = old.clone();
    let message = format!(
        "ManifestWork owner label value {:?} (namespace.name) is not a valid label value: at most {MAX_LABEL_VALUE_LEN} characters, starting and ending with a letter or digit. Recreate the ManifestWorkReplicaSet with a shorter namespace and name; nothing is rolled out meanwhile.",
        owner.original
    );
    set_condition(
        &mut status.conditions,
        MANIFESTWORK_APPLIED,
        false,
        REASON_INVALID_MANIFEST_WORK_NAME,
        &message,
        generation,
        now,
    );
    remove_condition(&mut status.conditions, OWNER_LABEL_HASHED);
    status
}

/// Sets condition `kind` in `conditions`: its `lastTransitionTime` changes
/// only when its status does.
pub(crate) fn set_condition(
    conditions: &mut Vec<Condition>,
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) {
    let status = if status { "True" } else { "False" };
    let message = cut(message);
    match conditions.iter_mut().find(|c| c.type_ == kind) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = Time(now);
            }
            existing.status = status.to_owned();
            existing.reason = reason.to_owned();
            existing.message = message;
            existing.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: kind.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message,
            observed_generation: generation,
            last_transition_time: Time(now),
        }),
    }
}

fn remove_condition(conditions: &mut Vec<Condition>, kind: &str) {
    conditions.retain(|c| c.type_ != kind);
}

fn condition<'c>(conditions: &'c [Condition], kind: &str) -> Option<&'c Condition> {
    conditions.iter().find(|c| c.type_ == kind)
}

fn cut(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_LEN {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE_LEN - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

fn to_i32(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn status_name(status: RolloutStatus) -> &'static str {
    match status {
        RolloutStatus::ToApply => "ToApply",
        RolloutStatus::Progressing => "Progressing",
        RolloutStatus::Succeeded => "Succeeded",
        RolloutStatus::Failed => "Failed",
        RolloutStatus::TimeOut => "TimeOut",
        RolloutStatus::Skip => "Skip",
        RolloutStatus::Validating => "Validating",
    }
}

/// How urgent a status is in the summary's cluster list (lower first);
/// `None` for those not listed.
fn urgency(status: RolloutStatus) -> Option<u8> {
    match status {
        RolloutStatus::TimeOut => Some(0),
        RolloutStatus::Failed => Some(1),
        RolloutStatus::Validating => Some(2),
        RolloutStatus::Progressing => Some(3),
        RolloutStatus::ToApply => Some(4),
        RolloutStatus::Skip => Some(5),
        RolloutStatus::Succeeded => None,
    }
}

fn cluster_summary(report: &ClusterReport) -> ClusterRolloutSummary {
    ClusterRolloutSummary {
        cluster_name: report.cluster.clone(),
        rollout_status: report.status,
        group_index: report.group_index,
        group_name: report.group_name.clone(),
        last_transition_time: report.last_transition_time.map(Time),
        revision: report.revision.clone(),
        message: report.message.clone(),
    }
}

/// The summary of one placement rolled out.
pub fn placement_summary(outcome: &PlacementOutcome) -> PlacementSummary {
    let mut counts = ClusterCounts::default();
    for cluster in &outcome.clusters {
        counts.add(cluster.status);
    }
    let mut attention: Vec<(u8, usize, &ClusterReport)> = outcome
        .clusters
        .iter()
        .enumerate()
        .filter_map(|(i, c)| urgency(c.status).map(|u| (u, i, c)))
        .collect();
    attention.sort_by_key(|(u, i, _)| (*u, *i));
    let omitted = attention.len().saturating_sub(MAX_CLUSTER_SUMMARIES);
    let groups: std::collections::BTreeSet<(i32, &str)> = outcome
        .clusters
        .iter()
        .map(|c| (c.group_index, c.group_name.as_str()))
        .collect();
    PlacementSummary {
        name: outcome.name.clone(),
        // Upstream's wording: groups (works / selected clusters applied).
        available_decision_groups: format!(
            "{} ({} / {} clusters applied)",
            groups.len(),
            outcome.works.total,
            outcome.clusters.len()
        ),
        summary: ManifestWorkReplicaSetSummary {
            total: to_i32(outcome.works.total),
            progressing: to_i32(outcome.works.progressing),
            available: to_i32(outcome.works.available),
            degraded: to_i32(outcome.works.degraded),
            applied: to_i32(outcome.works.applied),
            desired_total: to_i32(outcome.clusters.len()),
            updated: to_i32(outcome.updated),
        },
        max_failure_breach: outcome.result.max_failure_breach,
        cluster_counts: counts,
        clusters: attention
            .into_iter()
            .take(MAX_CLUSTER_SUMMARIES)
            .map(|(_, _, c)| cluster_summary(c))
            .collect(),
        omitted_clusters: to_i32(omitted),
        abort_failures: Vec::new(),
    }
}

/// Sets `summary.abort_failures`: the failures of `abort` when it aborted
/// this placement, else those of `old` while the abort lasts (`aborted`),
/// else none.
pub fn set_abort_failures(
    summary: &mut PlacementSummary,
    abort: Option<&AbortReport>,
    old: Option<&PlacementSummary>,
    aborted: bool,
) {
    summary.abort_failures = match abort.filter(|a| a.placement == summary.name) {
        Some(abort) => abort
            .failures
            .iter()
            .take(MAX_CLUSTER_SUMMARIES)
            .map(cluster_summary)
            .collect(),
        None if aborted => old.map(|o| o.abort_failures.clone()).unwrap_or_default(),
        None => Vec::new(),
    };
}

fn list_clusters<'a>(clusters: impl IntoIterator<Item = &'a ClusterReport>) -> String {
    clusters
        .into_iter()
        .map(|c| match &c.message {
            Some(m) if !m.is_empty() => format!("{} {} ({m})", c.cluster, status_name(c.status)),
            _ => format!("{} {}", c.cluster, status_name(c.status)),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The status after this reconcile (see the module documentation): one
/// function per section and condition, each pure over the input.
pub(crate) fn build(input: &StatusInput<'_>) -> ManifestWorkReplicaSetStatus {
    let summary = total_summary(input.outcome);
    let verified = placement_verified(input);
    let abort = abort_message(input);
    let mut conditions = Conditions {
        list: input.old.conditions.clone(),
        generation: input.generation,
        now: input.now,
    };
    conditions.set(PLACEMENT_VERIFIED, &verified);
    conditions.set(PLACEMENT_ROLLED_OUT, &placement_rolled_out(input, &abort));
    conditions.set(
        MANIFESTWORK_APPLIED,
        &manifestwork_applied(&summary, verified.reason),
    );
    match plugin_loaded(input.plugins) {
        Some(plugin_loaded) => conditions.set(PLUGIN_LOADED, &plugin_loaded),
        None => conditions.remove(PLUGIN_LOADED),
    }
    conditions.set(PROGRESSING, &progressing(input, &summary, abort));
    // An owner label is never hashed any more: a set whose label cannot be
    // written stops in `invalid_owner_label`.
    conditions.remove(OWNER_LABEL_HASHED);
    match works_conflict(input.outcome) {
        Some(conflict) => conditions.set(MANIFEST_WORKS_CONFLICT, &conflict),
        None => conditions.remove(MANIFEST_WORKS_CONFLICT),
    }
    if let Some(binding) = input.binding {
        let value = ConditionValue::new(binding.status, binding.reason, binding.message.clone());
        conditions.set(CARRIER_BOUND, &value);
    }
    ManifestWorkReplicaSetStatus {
        conditions: conditions.list,
        summary,
        placements_summary: placements_summary(input),
        current_revision: input.revisions.current.clone(),
        update_revision: input.revisions.update.clone(),
        aborted_time: input.revisions.aborted_time.map(Time),
        collision_count: (input.collision_count > 0 || input.old.collision_count.is_some())
            .then_some(input.collision_count),
    }
}

/// The conditions being built, with the generation and time they are
/// stamped with.
struct Conditions {
    list: Vec<Condition>,
    generation: Option<i64>,
    now: Timestamp,
}

impl Conditions {
    fn set(&mut self, kind: &str, value: &ConditionValue) {
        set_condition(
            &mut self.list,
            kind,
            value.status,
            value.reason,
            &value.message,
            self.generation,
            self.now,
        );
    }

    fn remove(&mut self, kind: &str) {
        remove_condition(&mut self.list, kind);
    }
}

/// What one condition says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConditionValue {
    status: bool,
    reason: &'static str,
    message: String,
}

impl ConditionValue {
    fn new(status: bool, reason: &'static str, message: impl Into<String>) -> ConditionValue {
        ConditionValue {
            status,
            reason,
            message: message.into(),
        }
    }
}

/// The placements' summaries, in spec order: a placement not rolled out in
/// this step keeps its old summary (an empty one when it has none).
fn placements_summary(input: &StatusInput<'_>) -> Vec<PlacementSummary> {
    let by_name: BTreeMap<&str, &PlacementOutcome> = input
        .outcome
        .placements
        .iter()
        .map(|p| (p.name.as_str(), p))
        .collect();
    let old_of = |name: &str| input.old.placements_summary.iter().find(|s| s.name == name);
    input
        .spec_placements
        .iter()
        .map(|name| match by_name.get(name.as_str()) {
            Some(p) => {
                let mut summary = placement_summary(p);
                set_abort_failures(
                    &mut summary,
                    input.outcome.abort.as_ref(),
                    old_of(name),
                    input.revisions.is_aborted(),
                );
                summary
            }
            None => old_of(name).cloned().unwrap_or_else(|| PlacementSummary {
                name: name.clone(),
                ..PlacementSummary::default()
            }),
        })
        .collect()
}

/// The work counts of every placement rolled out, added up.
fn total_summary(outcome: &DeployOutcome) -> ManifestWorkReplicaSetSummary {
    let mut summary = ManifestWorkReplicaSetSummary::default();
    for p in &outcome.placements {
        let s = placement_summary(p).summary;
        summary.total += s.total;
        summary.progressing += s.progressing;
        summary.available += s.available;
        summary.degraded += s.degraded;
        summary.applied += s.applied;
        summary.desired_total += s.desired_total;
        summary.updated += s.updated;
    }
    summary
}

/// The clusters the placements rolled out select.
fn selected(outcome: &DeployOutcome) -> usize {
    outcome.placements.iter().map(|p| p.clusters.len()).sum()
}

/// Whether every placement of the spec was rolled out and is complete.
fn complete(input: &StatusInput<'_>) -> bool {
    input.problems.is_empty() && input.outcome.placements.iter().all(|p| p.complete())
}

/// PlacementVerified.
fn placement_verified(input: &StatusInput<'_>) -> ConditionValue {
    let not_found: Vec<&str> = input
        .problems
        .iter()
        .filter(|(_, p)| **p == PlacementProblem::NotFound)
        .map(|(n, _)| n.as_str())
        .collect();
    let invalid: Vec<String> = input
        .problems
        .iter()
        .filter(|(_, p)| **p != PlacementProblem::NotFound)
        .map(|(n, p)| format!("placement {n}: {p}"))
        .collect();
    if !not_found.is_empty() {
        let message = format!("placement {} not found", not_found.join(", "));
        ConditionValue::new(false, REASON_PLACEMENT_DECISION_NOT_FOUND, message)
    } else if !invalid.is_empty() {
        ConditionValue::new(false, REASON_NOT_AS_EXPECTED, invalid.join("; "))
    } else if selected(input.outcome) == 0 {
        let message = "the placements select no cluster";
        ConditionValue::new(false, REASON_PLACEMENT_DECISION_EMPTY, message)
    } else {
        ConditionValue::new(true, REASON_AS_EXPECTED, "")
    }
}

/// The abort's wording, shared by PlacementRolledOut and Progressing:
/// what aborted the update revision (kept from the old Progressing message
/// once the report is gone), then how far the rollback is.
fn abort_message(input: &StatusInput<'_>) -> String {
    let outcome = input.outcome;
    let update = input.revisions.update.as_deref().unwrap_or_default();
    let prefix = format!("Rollout of revision {update} aborted: ");
    let cause = match &outcome.abort {
        Some(report) if report.requested.is_some() => {
            format!("asked {}", report.requested.as_deref().unwrap_or_default())
        }
        Some(report) if !report.failures.is_empty() => {
            format!(
                "placement {}: {}",
                report.placement,
                list_clusters(&report.failures)
            )
        }
        _ => condition(&input.old.conditions, PROGRESSING)
            .filter(|c| c.reason == REASON_ROLLOUT_ABORTED)
            .and_then(|c| c.message.strip_prefix(&prefix))
            .and_then(|rest| rest.rfind(". ").map(|end| rest[..end].to_owned()))
            .unwrap_or_else(|| "a cluster failed or timed out".to_owned()),
    };
    format!("{prefix}{cause}. {}", abort_progress(input))
}

/// How far the rollback of an abort is.
fn abort_progress(input: &StatusInput<'_>) -> String {
    let outcome = input.outcome;
    let current = input.revisions.current.as_deref().unwrap_or_default();
    let stopped = outcome.placements.iter().any(|p| p.stopped)
        || outcome
            .abort
            .as_ref()
            .is_some_and(|a| a.action == AbortAction::Stop);
    let restored: usize = outcome
        .placements
        .iter()
        .filter(|p| p.aborting && !p.stopped)
        .map(|p| p.count(RolloutStatus::Succeeded))
        .sum();
    let selected = selected(outcome);
    if stopped {
        "No earlier revision to roll back to: the rollout is stopped.".to_owned()
    } else if restored == selected {
        format!("Revision {current} is restored on every cluster.")
    } else {
        format!("Rolling back to revision {current}: {restored} of {selected} clusters restored.")
    }
}

/// PlacementRolledOut.
fn placement_rolled_out(input: &StatusInput<'_>, abort_message: &str) -> ConditionValue {
    let outcome = input.outcome;
    let breaches: Vec<String> = outcome
        .placements
        .iter()
        .filter(|p| p.result.max_failure_breach)
        .map(|p| {
            let failing = p.clusters.iter().filter(|c| c.status.is_failure());
            format!("placement {}: {}", p.name, list_clusters(failing))
        })
        .collect();
    if input.revisions.is_aborted() {
        ConditionValue::new(false, REASON_ROLLOUT_DEGRADED, abort_message)
    } else if !breaches.is_empty() {
        let message = format!("maxFailures exceeded on {}", breaches.join("; "));
        ConditionValue::new(false, REASON_ROLLOUT_DEGRADED, message)
    } else if complete(input) {
        ConditionValue::new(true, REASON_COMPLETE, "")
    } else {
        let succeeded: usize = outcome
            .placements
            .iter()
            .map(|p| p.count(RolloutStatus::Succeeded))
            .sum();
        let message = format!("{succeeded} of {} clusters succeeded", selected(outcome));
        ConditionValue::new(false, REASON_PROGRESSING, message)
    }
}

/// ManifestworkApplied: upstream's rule on the counts; with no work, the
/// reason PlacementVerified gave for an empty selection.
fn manifestwork_applied(
    summary: &ManifestWorkReplicaSetSummary,
    verified_reason: &str,
) -> ConditionValue {
    let (applied, reason) = if summary.total == 0 {
        if verified_reason == REASON_PLACEMENT_DECISION_EMPTY {
            (false, REASON_PLACEMENT_DECISION_EMPTY)
        } else {
            (false, REASON_NOT_AS_EXPECTED)
        }
    } else if summary.available == summary.total
        && summary.progressing == 0
        && summary.degraded == 0
    {
        (true, REASON_AS_EXPECTED)
    } else if summary.progressing > 0 && summary.degraded == 0 {
        (false, REASON_PROCESSING)
    } else {
        (false, REASON_NOT_AS_EXPECTED)
    };
    let message = format!(
        "{} of {} ManifestWorks available, {} progressing, {} degraded",
        summary.available, summary.total, summary.progressing, summary.degraded
    );
    ConditionValue::new(applied, reason, message)
}

/// PluginLoaded; `None` (the condition goes) when no strategy names a
/// plugin.
fn plugin_loaded(plugins: &[PluginState]) -> Option<ConditionValue> {
    if plugins.is_empty() {
        return None;
    }
    let failed: Vec<String> = plugins
        .iter()
        .filter_map(PluginState::failure_message)
        .collect();
    if failed.is_empty() {
        let message = plugins
            .iter()
            .map(|p| plugin_available_message(&p.name))
            .collect::<Vec<_>>()
            .join(" ");
        Some(ConditionValue::new(true, REASON_AVAILABLE, message))
    } else {
        Some(ConditionValue::new(false, REASON_FAILED, failed.join(" ")))
    }
}

/// Progressing: hook errors first, then the abort, timed-out clusters, done,
/// and rolling out.
fn progressing(
    input: &StatusInput<'_>,
    summary: &ManifestWorkReplicaSetSummary,
    abort_message: String,
) -> ConditionValue {
    let outcome = input.outcome;
    let update = input.revisions.update.as_deref().unwrap_or_default();
    let hook_errors: Vec<String> = outcome
        .hook_errors()
        .map(|(placement, failure)| format!("placement {placement}: {failure}"))
        .collect();
    let timed_out: Vec<String> = outcome
        .placements
        .iter()
        .flat_map(|p| {
            p.clusters
                .iter()
                .filter(|c| c.status == RolloutStatus::TimeOut)
                .map(move |c| format!("{}/{}", p.name, c.cluster))
        })
        .collect();
    if !hook_errors.is_empty() {
        ConditionValue::new(false, REASON_PLUGIN_CALL_FAILED, hook_errors.join("; "))
    } else if input.revisions.is_aborted() {
        ConditionValue::new(false, REASON_ROLLOUT_ABORTED, abort_message)
    } else if !timed_out.is_empty() {
        let message = format!(
            "clusters did not finish within progressDeadline: {}",
            timed_out.join(", ")
        );
        ConditionValue::new(false, REASON_PROGRESS_DEADLINE_EXCEEDED, message)
    } else if complete(input) {
        let message = format!("Revision {update} is rolled out to every cluster.");
        ConditionValue::new(true, REASON_NEW_MANIFEST_WORK_AVAILABLE, message)
    } else if let Some(pause) = input.paused {
        let message = format!(
            "Rollout of revision {update} paused {} at {}: {} of {} clusters updated; no new cluster starts until it is resumed.",
            pause.who(),
            pause.time.0,
            summary.updated,
            summary.desired_total
        );
        ConditionValue::new(true, REASON_ROLLOUT_PAUSED, message)
    } else {
        let message = format!(
            "Rolling out revision {update}: {} of {} clusters updated.",
            summary.updated, summary.desired_total
        );
        ConditionValue::new(true, rolling_reason(input), message)
    }
}

/// Progressing's reason while rolling out: how the update revision was
/// found, kept from the old condition while the revision stays.
fn rolling_reason(input: &StatusInput<'_>) -> &'static str {
    match input.origin {
        RevisionOrigin::Created => REASON_NEW_REVISION_CREATED,
        RevisionOrigin::Found => REASON_FOUND_NEW_REVISION,
        RevisionOrigin::Unchanged => {
            let found = condition(&input.old.conditions, PROGRESSING)
                .is_some_and(|c| c.reason == REASON_FOUND_NEW_REVISION);
            if found {
                REASON_FOUND_NEW_REVISION
            } else {
                REASON_NEW_REVISION_CREATED
            }
        }
    }
}

/// ManifestWorksConflict, while other field managers write the works.
fn works_conflict(outcome: &DeployOutcome) -> Option<ConditionValue> {
    let message = outcome.conflict_message()?;
    Some(ConditionValue::new(
        true,
        REASON_OTHER_FIELD_MANAGER,
        message,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::labels::owner_label_value;
    use crate::hooks::{HookError, HookKind};
    use crate::orchestrate::{AbortReport, HookFailure, WorkCounts};
    use crate::rollout::RolloutResult;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("time")
    }

    fn report(cluster: &str, status: RolloutStatus) -> ClusterReport {
        ClusterReport {
            cluster: cluster.into(),
            status,
            group_index: 0,
            group_name: String::new(),
            last_transition_time: Some(at(0)),
            revision: Some("r2".into()),
            message: None,
        }
    }

    fn placement(name: &str, clusters: Vec<ClusterReport>) -> PlacementOutcome {
        let works = WorkCounts {
            total: clusters.len(),
            applied: clusters.len(),
            available: clusters.len(),
            ..WorkCounts::default()
        };
        let updated = clusters
            .iter()
            .filter(|c| c.status == RolloutStatus::Succeeded)
            .count();
        PlacementOutcome {
            name: name.into(),
            desired_revision: "r2".into(),
            aborting: false,
            stopped: false,
            held: false,
            paused: Vec::new(),
            promoted: Vec::new(),
            clusters,
            result: RolloutResult::default(),
            works,
            updated,
            at_update: updated,
            hook_errors: Vec::new(),
            world_errors: Vec::new(),
            conflicts: Vec::new(),
            applied: Vec::new(),
            deleted: Vec::new(),
            requeue_after: None,
        }
    }

    fn outcome(placements: Vec<PlacementOutcome>) -> DeployOutcome {
        DeployOutcome {
            placements,
            aborted_at: None,
            abort: None,
            deleted_stale: Vec::new(),
            world_errors: Vec::new(),
            requeue_after: None,
        }
    }

    struct Fixture {
        old: ManifestWorkReplicaSetStatus,
        spec: Vec<String>,
        problems: BTreeMap<String, PlacementProblem>,
        outcome: DeployOutcome,
        plugins: Vec<PluginState>,
        revisions: RevisionStatus,
        origin: RevisionOrigin,
        paused: Option<Pause>,
    }

    impl Fixture {
        fn new(outcome: DeployOutcome) -> Fixture {
            Fixture {
                old: ManifestWorkReplicaSetStatus::default(),
                spec: outcome.placements.iter().map(|p| p.name.clone()).collect(),
                problems: BTreeMap::new(),
                outcome,
                plugins: Vec::new(),
                revisions: RevisionStatus {
                    current: Some("r1".into()),
                    update: Some("r2".into()),
                    aborted_time: None,
                },
                origin: RevisionOrigin::Unchanged,
                paused: None,
            }
        }

        fn build(&self) -> ManifestWorkReplicaSetStatus {
            build(&StatusInput {
                binding: None,
                old: &self.old,
                generation: Some(3),
                now: at(100),
                spec_placements: &self.spec,
                problems: &self.problems,
                outcome: &self.outcome,
                plugins: &self.plugins,
                revisions: &self.revisions,
                collision_count: 0,
                origin: self.origin,
                paused: self.paused.as_ref(),
            })
        }
    }

    fn get<'a>(status: &'a ManifestWorkReplicaSetStatus, kind: &str) -> &'a Condition {
        condition(&status.conditions, kind).unwrap_or_else(|| panic!("no {kind} condition"))
    }

    #[test]
    fn a_paused_rollout_says_who_paused_it_until_it_is_done() {
        use RolloutStatus::{Succeeded, ToApply};
        let mut f = Fixture::new(outcome(vec![placement(
            "p",
            vec![report("c1", Succeeded), report("c2", ToApply)],
        )]));
        f.paused = Some(Pause {
            time: Time(at(50)),
            by: Some("alice".into()),
            reason: Some("5xx".into()),
        });
        let status = f.build();
        let c = get(&status, PROGRESSING);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (
                "True",
                REASON_ROLLOUT_PAUSED,
                "Rollout of revision r2 paused by alice (5xx) at 2023-11-14T22:14:10Z: 1 of 2 clusters updated; no new cluster starts until it is resumed."
            )
        );
        // Done while paused: done.
        f.outcome = outcome(vec![placement(
            "p",
            vec![report("c1", Succeeded), report("c2", Succeeded)],
        )]);
        let c = get(&f.build(), PROGRESSING).clone();
        assert_eq!(c.reason, REASON_NEW_MANIFEST_WORK_AVAILABLE);
    }

    #[test]
    fn a_complete_rollout() {
        use RolloutStatus::Succeeded;
        let mut f = Fixture::new(outcome(vec![placement(
            "p",
            vec![report("c1", Succeeded), report("c2", Succeeded)],
        )]));
        f.plugins = vec![PluginState {
            name: "my-rollout".into(),
            result: Ok(()),
        }];
        let status = f.build();
        let c = get(&status, PLACEMENT_ROLLED_OUT);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", REASON_COMPLETE)
        );
        assert_eq!(c.observed_generation, Some(3));
        let c = get(&status, PLUGIN_LOADED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            ("True", REASON_AVAILABLE, "my-rollout plugin is available.")
        );
        let c = get(&status, PROGRESSING);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", REASON_NEW_MANIFEST_WORK_AVAILABLE)
        );
        assert_eq!(
            get(&status, MANIFESTWORK_APPLIED).reason,
            REASON_AS_EXPECTED
        );
        assert_eq!(get(&status, PLACEMENT_VERIFIED).reason, REASON_AS_EXPECTED);
        assert_eq!(status.summary.desired_total, 2);
        assert_eq!(status.summary.updated, 2);
        assert_eq!(
            status.placements_summary[0].available_decision_groups,
            "1 (2 / 2 clusters applied)"
        );
        assert!(status.placements_summary[0].clusters.is_empty());
        assert_eq!(status.update_revision.as_deref(), Some("r2"));
        assert_eq!(status.collision_count, None);

        // Built again from its own result, nothing changes (no write loop).
        f.old = status.clone();
        assert_eq!(f.build(), status);
    }

    #[test]
    fn failures_and_breaches_are_visible() {
        use RolloutStatus::*;
        let mut p = placement(
            "p",
            vec![
                report("c1", Succeeded),
                report("c2", Failed),
                report("c3", TimeOut),
                report("c4", Validating),
                report("c5", ToApply),
            ],
        );
        p.result.max_failure_breach = true;
        p.clusters[1].message = Some("smoke test failed".into());
        let f = Fixture::new(outcome(vec![p]));
        let status = f.build();
        let s = &status.placements_summary[0];
        assert!(s.max_failure_breach);
        assert_eq!((s.cluster_counts.failed, s.cluster_counts.time_out), (1, 1));
        let listed: Vec<&str> = s.clusters.iter().map(|c| c.cluster_name.as_str()).collect();
        assert_eq!(listed, ["c3", "c2", "c4", "c5"], "most urgent first");
        let c = get(&status, PLACEMENT_ROLLED_OUT);
        assert_eq!(c.reason, REASON_ROLLOUT_DEGRADED);
        assert_eq!(
            c.message,
            "maxFailures exceeded on placement p: c2 Failed (smoke test failed), c3 TimeOut"
        );
        let c = get(&status, PROGRESSING);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", REASON_PROGRESS_DEADLINE_EXCEEDED)
        );
        assert!(c.message.contains("p/c3"), "{}", c.message);
    }

    #[test]
    fn plugin_errors_and_failed_plugins() {
        let mut p = placement("p", vec![report("c1", RolloutStatus::ToApply)]);
        p.hook_errors.push(HookFailure {
            cluster: Some("c1".into()),
            error: HookError {
                hook: HookKind::BeginRollout,
                code: tonic::Code::Unavailable,
                message: "plugin \"canary\": down".into(),
                origin: crate::hooks::Origin::Answer,
            },
        });
        let mut f = Fixture::new(outcome(vec![p]));
        f.plugins = vec![PluginState {
            name: "canary".into(),
            result: Err(crate::hooks::HookError {
                hook: crate::hooks::HookKind::Initialize,
                code: tonic::Code::Unavailable,
                message: String::new(),
                origin: crate::hooks::Origin::Answer,
            }),
        }];
        let status = f.build();
        let c = get(&status, PROGRESSING);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", REASON_PLUGIN_CALL_FAILED)
        );
        assert_eq!(
            c.message,
            "placement p: cluster c1: BeginRollout failed: UNAVAILABLE: plugin \"canary\": down"
        );
        let c = get(&status, PLUGIN_LOADED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (
                "False",
                REASON_FAILED,
                "canary plugin: Initialize fails with unavailable plugin server endpoint."
            )
        );
        // Without a plugin the condition goes away.
        f.old = status;
        f.plugins.clear();
        assert!(condition(&f.build().conditions, PLUGIN_LOADED).is_none());
    }

    #[test]
    fn abort_messages_keep_their_cause() {
        use RolloutStatus::*;
        let mut p = placement("p", vec![report("c1", ToApply), report("c2", Succeeded)]);
        p.aborting = true;
        p.desired_revision = "r1".into();
        let mut o = outcome(vec![p]);
        let mut failed = report("c1", Failed);
        failed.message = Some("smoke test failed".into());
        o.abort = Some(AbortReport {
            requested: None,
            placement: "p".into(),
            action: AbortAction::RollBack,
            failures: vec![failed],
        });
        o.aborted_at = Some(at(50));
        let mut f = Fixture::new(o);
        f.revisions.aborted_time = Some(at(50));
        let status = f.build();
        let want = "Rollout of revision r2 aborted: placement p: c1 Failed (smoke test failed). \
                    Rolling back to revision r1: 1 of 2 clusters restored.";
        let c = get(&status, PROGRESSING);
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            (REASON_ROLLOUT_ABORTED, want)
        );
        assert_eq!(
            get(&status, PLACEMENT_ROLLED_OUT).reason,
            REASON_ROLLOUT_DEGRADED
        );
        assert_eq!(status.aborted_time, Some(Time(at(50))));

        // Next reconcile: the cause stays, the progress moves on.
        f.old = status;
        f.outcome.abort = None;
        f.outcome.placements[0].clusters[0].status = Succeeded;
        let c = get(&f.build(), PROGRESSING).clone();
        assert_eq!(
            c.message,
            "Rollout of revision r2 aborted: placement p: c1 Failed (smoke test failed). \
             Revision r1 is restored on every cluster."
        );

        // First rollout ever: stopped.
        f.old = ManifestWorkReplicaSetStatus::default();
        f.outcome.placements[0].stopped = true;
        f.revisions.current = None;
        let c = get(&f.build(), PROGRESSING).clone();
        assert!(
            c.message
                .ends_with("No earlier revision to roll back to: the rollout is stopped."),
            "{}",
            c.message
        );
    }

    #[test]
    fn placement_problems() {
        let mut f = Fixture::new(outcome(vec![placement("p", vec![])]));
        f.spec = vec!["p".into(), "missing".into()];
        f.problems
            .insert("missing".into(), PlacementProblem::NotFound);
        // A condition an earlier version set goes.
        f.old.conditions.push(Condition {
            type_: OWNER_LABEL_HASHED.into(),
            status: "True".into(),
            reason: "LabelValueHashed".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(at(1)),
        });
        let status = f.build();
        let c = get(&status, PLACEMENT_VERIFIED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
            (
                "False",
                REASON_PLACEMENT_DECISION_NOT_FOUND,
                "placement missing not found"
            )
        );
        assert_eq!(status.placements_summary.len(), 2);
        assert_eq!(status.placements_summary[1].name, "missing");
        assert_eq!(condition(&status.conditions, OWNER_LABEL_HASHED), None);
        assert_eq!(
            get(&status, MANIFESTWORK_APPLIED).reason,
            REASON_NOT_AS_EXPECTED
        );
        assert_ne!(get(&status, PLACEMENT_ROLLED_OUT).reason, REASON_COMPLETE);

        f.problems.clear();
        f.spec = vec!["p".into()];
        let c = get(&f.build(), PLACEMENT_VERIFIED).clone();
        assert_eq!(c.reason, REASON_PLACEMENT_DECISION_EMPTY);
    }

    #[test]
    fn an_owner_label_over_63_characters_stops_as_ocm_does() {
        let (_, hashed) = owner_label_value("default", &"n".repeat(70));
        let hashed = hashed.expect("too long");
        let status = invalid_owner_label(
            &ManifestWorkReplicaSetStatus::default(),
            Some(2),
            at(5),
            &hashed,
        );
        let c = get(&status, MANIFESTWORK_APPLIED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", REASON_INVALID_MANIFEST_WORK_NAME)
        );
        assert!(c.message.contains(&format!("default.{}", "n".repeat(70))));
    }

    #[test]
    fn transition_times_move_only_with_the_status() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, "X", true, "A", "m", Some(1), at(1));
        set_condition(&mut conditions, "X", true, "B", "n", Some(2), at(2));
        assert_eq!(conditions[0].last_transition_time, Time(at(1)));
        assert_eq!(
            (
                conditions[0].reason.as_str(),
                conditions[0].observed_generation
            ),
            ("B", Some(2))
        );
        set_condition(
            &mut conditions,
            "X",
            false,
            "C",
            &"x".repeat(10_000),
            Some(2),
            at(3),
        );
        assert_eq!(conditions[0].last_transition_time, Time(at(3)));
        assert!(conditions[0].message.len() <= MAX_MESSAGE_LEN);
    }
}
