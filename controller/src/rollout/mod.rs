//! The pure rollout engine: which clusters to roll out next.
//!
//! Given a validated [`Strategy`], the placement's decision groups and the
//! rollout status of every cluster that already has a ManifestWork, [`decide`]
//! returns one decision, a [`RolloutResult`]: the clusters to (keep) rolling
//! out, those that timed out, those removed from the placement, whether
//! `maxFailures` was breached, and when to look again. It reproduces OCM's
//! rollout handler (sdk-go `pkg/apis/cluster/v1alpha1/rollout.go`) for the
//! strategies All, Progressive and ProgressivePerGroup, and adds the design's
//! [`RolloutStatus::Validating`], which is in flight like `Progressing`.
//!
//! Nothing here does I/O or reads the clock: the current time is an argument,
//! so a decision is a function of its inputs. [`work_status`] derives a
//! cluster's status from its ManifestWork conditions; [`strategy`] parses and
//! validates the `rolloutStrategy` field; [`duration`] reads Go durations
//! (and [`format_go_duration`] writes one for a person).

pub(crate) mod duration;
mod engine;
pub(crate) mod strategy;
pub mod work_status;

use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

pub use duration::format_go_duration;
pub use engine::decide;
pub(crate) use engine::rollout_order;
pub(crate) use strategy::RollbackPace;
pub use strategy::{InvalidStrategy, RawStrategy, Strategy};
pub use strategy::{MandatoryGroup, RawAdditions, RolloutConfig, RolloutKind, Threshold};

/// A cluster's rollout status. Spelled on the wire as the variant names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RolloutStatus {
    /// The desired ManifestWork is not applied yet (or not observed yet).
    ToApply,
    /// Applied; the agent reports it is still progressing.
    Progressing,
    /// Applied and done.
    Succeeded,
    /// Applied and degraded while progressing, or rejected by validation.
    Failed,
    /// Stayed in flight past the progress deadline.
    TimeOut,
    /// Not to be rolled out (never produced by a ManifestWorkReplicaSet).
    Skip,
    /// Done progressing; the rollout plugin is validating it (design).
    Validating,
}

impl RolloutStatus {
    /// Whether the status counts against `maxFailures`.
    pub(crate) fn is_failure(self) -> bool {
        matches!(self, RolloutStatus::Failed | RolloutStatus::TimeOut)
    }
}

/// A decision group of a placement: the union of its PlacementDecisions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterGroup {
    /// The `decision-group-index` label.
    pub index: i32,
    /// The `decision-group-name` label (may be empty).
    pub name: String,
    /// The clusters of the group, in any order.
    pub clusters: Vec<String>,
}

/// One cluster's rollout status, as input to and output of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterRolloutStatus {
    /// The managed cluster (the ManifestWork's namespace).
    pub cluster_name: String,
    /// Its status.
    pub(crate) status: RolloutStatus,
    /// When the status began: the start of soak and deadline windows. `None`
    /// means "now" for those windows, as in OCM.
    pub(crate) last_transition_time: Option<Timestamp>,
    /// Index of the decision group the status was recorded with.
    pub(crate) group_index: i32,
    /// Name of that decision group.
    pub(crate) group_name: String,
    /// Output: when this cluster's soak ends or its deadline passes. Leave
    /// `None` on input; a `ToApply` input is passed through as given.
    pub(crate) recheck_time: Option<Timestamp>,
}

impl ClusterRolloutStatus {
    /// A status with no time and group 0 with an empty name, as OCM's status
    /// function builds them.
    pub fn new(cluster_name: impl Into<String>, status: RolloutStatus) -> Self {
        ClusterRolloutStatus {
            cluster_name: cluster_name.into(),
            status,
            last_transition_time: None,
            group_index: 0,
            group_name: String::new(),
            recheck_time: None,
        }
    }

    /// The same status with `last_transition_time` set.
    pub fn since(mut self, last_transition_time: Timestamp) -> Self {
        self.last_transition_time = Some(last_transition_time);
        self
    }

    /// The same status recorded under the given group.
    pub fn in_group(mut self, index: i32, name: impl Into<String>) -> Self {
        self.group_index = index;
        self.group_name = name.into();
        self
    }
}

/// One decision of the engine.
///
/// No cluster appears twice across the three lists. Statuses built from an
/// existing status keep its group and times; clusters seen for the first time
/// are `ToApply` with the group the placement puts them in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolloutResult {
    /// Clusters to apply (`ToApply`) or to keep watching (in flight, or
    /// succeeded but still soaking), in rollout order.
    pub(crate) clusters_to_rollout: Vec<ClusterRolloutStatus>,
    /// Clusters whose deadline passed in this decision, now `TimeOut`.
    pub clusters_timeout: Vec<ClusterRolloutStatus>,
    /// Existing statuses of clusters that are in no current group.
    pub(crate) clusters_removed: Vec<ClusterRolloutStatus>,
    /// Whether failures exceeded `maxFailures`, which stops new clusters.
    pub(crate) max_failure_breach: bool,
    /// The smallest positive time until a rolled-out cluster's recheck time.
    pub(crate) recheck_after: Option<Duration>,
}
