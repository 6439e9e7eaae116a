//! What one step of the rollout reports: per placement and cluster, the
//! hook and write failures, the abort, when to look again.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

use crate::hooks::HookError;
use crate::orchestrate::conflict::WorkConflict;
#[cfg(doc)]
use crate::orchestrate::input::DeployInput;
use crate::orchestrate::world::WorldError;
use crate::revision::AbortAction;
use crate::rollout::{RolloutResult, RolloutStatus};

/// A hook call that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure {
    /// The cluster, for a per-cluster hook.
    pub cluster: Option<String>,
    /// The error.
    pub error: HookError,
}

impl fmt::Display for HookFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cluster {
            Some(cluster) => write!(f, "cluster {cluster}: {}", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

/// One cluster of a placement after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterReport {
    /// The cluster.
    pub cluster: String,
    /// Its status for the desired revision (`TimeOut` once its deadline
    /// passed; `ToApply` when it has no work of that revision).
    pub status: RolloutStatus,
    /// Its decision group's index.
    pub(crate) group_index: i32,
    /// Its decision group's name.
    pub(crate) group_name: String,
    /// When the status began.
    pub(crate) last_transition_time: Option<Timestamp>,
    /// The revision its work carries, if it has one.
    pub(crate) revision: Option<String>,
    /// The validation message, or the error of a hook call about it.
    pub message: Option<String>,
}

/// Counts of a placement's works by condition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WorkCounts {
    /// Works.
    pub(crate) total: usize,
    /// With `Applied` True.
    pub(crate) applied: usize,
    /// With `Available` True.
    pub(crate) available: usize,
    /// With `Degraded` True.
    pub(crate) degraded: usize,
    /// With `Progressing` True.
    pub(crate) progressing: usize,
}

/// Why a rollout was aborted in this step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortReport {
    /// The placement where it happened.
    pub(crate) placement: String,
    /// What follows: [`AbortAction::RollBack`] or [`AbortAction::Stop`].
    pub action: AbortAction,
    /// The failed and timed-out clusters of the update revision.
    pub failures: Vec<ClusterReport>,
    /// Who asked for it and why (`by alice (why)`), when an operator did
    /// (`spec.control.abort`); `None` for an abort a failure started.
    pub(crate) requested: Option<String>,
}

impl AbortReport {
    /// Each failed cluster as `c2 Failed (why)`, or `c3 TimeOut` without a
    /// message: the wording of the abort's span and of its Event.
    pub(crate) fn failure_list(&self) -> Vec<String> {
        self.failures
            .iter()
            .map(|c| match &c.message {
                Some(m) if !m.is_empty() => format!("{} {:?} ({m})", c.cluster, c.status),
                _ => format!("{} {:?}", c.cluster, c.status),
            })
            .collect()
    }
}

/// One placement after a step.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementOutcome {
    /// The placement.
    pub(crate) name: String,
    /// The revision rolled out in this step.
    pub desired_revision: String,
    /// Whether it is a rollback (or a stopped rollout).
    pub aborting: bool,
    /// Whether the rollout is stopped (aborted with nothing to go back to).
    pub stopped: bool,
    /// Whether the placement was on hold.
    pub(crate) held: bool,
    /// Every cluster of the placement, in rollout order.
    pub clusters: Vec<ClusterReport>,
    /// The engine's decision (after any abort).
    pub result: RolloutResult,
    /// The placement's works after this step, by condition.
    pub(crate) works: WorkCounts,
    /// Clusters whose work of the update revision succeeded.
    pub(crate) updated: usize,
    /// Clusters with a work of the update revision (the rollback design's
    /// "already updated").
    pub at_update: usize,
    /// Hook calls that failed.
    pub hook_errors: Vec<HookFailure>,
    /// Writes that failed.
    pub(crate) world_errors: Vec<WorldError>,
    /// Works another field manager wrote since the controller applied
    /// them, and applies the API server refused with 409 Conflict.
    pub(crate) conflicts: Vec<WorkConflict>,
    /// Clusters whose work was applied in this step, in order.
    pub applied: Vec<String>,
    /// Clusters the decision would have started in this step, held back
    /// by a pause (`spec.control.paused`), in rollout order.
    pub(crate) paused: Vec<String>,
    /// Clusters an operator's promotion ended the wait of in this step.
    pub(crate) promoted: Vec<String>,
    /// Clusters whose work was deleted (they left the placement).
    pub(crate) deleted: Vec<String>,
    /// When to look again for this placement.
    pub(crate) requeue_after: Option<Duration>,
}

impl PlacementOutcome {
    /// Whether every cluster of the placement succeeded with the desired
    /// revision (true for an empty placement, as upstream).
    pub fn complete(&self) -> bool {
        self.clusters
            .iter()
            .all(|c| c.status == RolloutStatus::Succeeded)
    }

    /// The number of clusters in `status`.
    pub(crate) fn count(&self, status: RolloutStatus) -> usize {
        self.clusters.iter().filter(|c| c.status == status).count()
    }
}

/// The outcome of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployOutcome {
    /// One per [`DeployInput::placements`], in order.
    pub placements: Vec<PlacementOutcome>,
    /// When an abort started in this step.
    pub aborted_at: Option<Timestamp>,
    /// Why it started.
    pub abort: Option<AbortReport>,
    /// Works of placements no longer in the spec, deleted.
    pub(crate) deleted_stale: Vec<(String, String)>,
    /// Writes outside any placement that failed.
    pub(crate) world_errors: Vec<WorldError>,
    /// When to look again: the soonest of the placements'.
    pub requeue_after: Option<Duration>,
}

impl DeployOutcome {
    /// Every hook failure, with its placement.
    pub(crate) fn hook_errors(&self) -> impl Iterator<Item = (&str, &HookFailure)> {
        self.placements
            .iter()
            .flat_map(|p| p.hook_errors.iter().map(move |e| (p.name.as_str(), e)))
    }

    /// What the ManifestWorksConflict condition and its Event say about
    /// the works other field managers wrote: the first few, how many more,
    /// and what to do; `None` when there is none.
    pub(crate) fn conflict_message(&self) -> Option<String> {
        let conflicts: Vec<String> = self
            .placements
            .iter()
            .flat_map(|p| &p.conflicts)
            .map(ToString::to_string)
            .collect();
        if conflicts.is_empty() {
            return None;
        }
        let shown = conflicts.len().min(MAX_CONFLICTS_NAMED);
        let mut message = conflicts[..shown].join(". ");
        if conflicts.len() > shown {
            message.push_str(&format!(". And {} more", conflicts.len() - shown));
        }
        message.push_str(
            ". Another writer changes these works: stop it (OCM's own ManifestWorkReplicaSet \
             controller is turned off with the ClusterManager's workConfiguration.featureGates \
             ManifestWorkReplicaSet: Disable) or stop editing them.",
        );
        Some(message)
    }

    /// Every failed write.
    pub(crate) fn all_world_errors(&self) -> impl Iterator<Item = &WorldError> {
        self.world_errors
            .iter()
            .chain(self.placements.iter().flat_map(|p| &p.world_errors))
    }
}

/// How many conflicting works [`DeployOutcome::conflict_message`] names.
const MAX_CONFLICTS_NAMED: usize = 5;

/// The soonest of two optional waits.
pub(crate) fn soonest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
