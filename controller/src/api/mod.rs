//! The Kubernetes resources the controller reads and writes, as Rust types
//! with kube's `CustomResource` derive, and their CRDs.
//!
//! - [`ManifestWorkReplicaSet`] (`work.open-cluster-management.io/v1alpha1`):
//!   upstream's, plus the rollout plugin design (`rolloutStrategy.plugin`,
//!   the `PluginLoaded` condition), the rollback design (abort, revisions)
//!   and the status upstream leaves out (timed-out clusters,
//!   `maxFailureBreach`, `desiredTotal`, `updated`).
//! - [`ManifestWork`] (`work.open-cluster-management.io/v1`), [`Placement`]
//!   and [`PlacementDecision`] (`cluster.open-cluster-management.io/v1beta1`)
//!   and [`ClusterManager`] (`operator.open-cluster-management.io/v1`, with the
//!   design's `workConfiguration.plugins`): the fields the controller needs,
//!   every other upstream field kept as read in an `extra` map.
//!
//! - [`ManifestWorkReplicaSetRollout`] (`rollout-hooks.io/v1alpha1`, the
//!   project's own kind): the design's additions for a ManifestWorkReplicaSet
//!   of the same namespace and name, on a hub whose CRD is OCM's (which
//!   prunes them), and an operator's manual control of the rollout
//!   ([`control`]: `spec.control`, `status.control`).
//!
//! [`conditions`] and [`labels`] hold the condition types, reasons, messages
//! and label keys; [`crd`] renders the CRDs for `rollout-controller crd`,
//! [`additions`] lists the design's additions to OCM's CRDs, and [`prune`]
//! prunes objects against CRD schemas as an API server does.

pub mod additions;
pub mod annotations;
pub(crate) mod clustermanager;
pub mod conditions;
pub mod control;
pub mod crd;
pub(crate) mod defaults;
pub mod labels;
pub mod manifestwork;
pub(crate) mod manifestworkreplicaset;
pub mod manifestworkreplicasetrollout;
pub(crate) mod placement;
pub mod prune;
mod schema;

pub(crate) use clustermanager::{
    ClusterManager, RolloutPipeline, RolloutPlugin, WorkConfiguration,
};
pub use crd::{CrdShape, crd_files, crds, crds_yaml, write_crd_files};
pub(crate) use labels::HashedLabelValue;
pub use manifestwork::{ManifestWork, ManifestWorkSpec, ManifestWorkStatus};
pub(crate) use manifestworkreplicaset::CascadeDeletionPolicy;
pub use manifestworkreplicaset::{
    ClusterCounts, ClusterRolloutSummary, LocalPlacementReference, ManifestWorkReplicaSet,
    ManifestWorkReplicaSetSpec, ManifestWorkReplicaSetStatus, ManifestWorkReplicaSetSummary,
    PlacementSummary,
};
pub use manifestworkreplicasetrollout::{
    ManifestWorkReplicaSetRollout, ManifestWorkReplicaSetRolloutSpec,
    ManifestWorkReplicaSetRolloutStatus,
};
pub use placement::{DecisionGroupError, decision_groups};
pub use placement::{
    Placement, PlacementDecision, PlacementDecisionFields, PlacementDecisionStatus, PlacementSpec,
    PlacementStatus,
};
