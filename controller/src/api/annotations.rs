//! Annotations the controller writes on the hub ManifestWorks it owns.
//!
//! - [`OWNER_ANNOTATION`]: the owning ManifestWorkReplicaSet as
//!   `namespace/name`, readable even when the owner label had to be hashed,
//!   so a work's events map back to its owner.
//! - [`SPEC_HASH_ANNOTATION`]: the hash of the spec the controller applied
//!   (after the plugin's mutation). A work whose spec no longer has that hash
//!   was changed by someone else and counts as "not there".
//! - The validation verdict ([`VALIDATION_ANNOTATION`] and its companions):
//!   what the plugin's `ValidateRolloutCompletion` decided for this revision
//!   and generation of the work, so a SUCCEEDED or FAILED answer sticks and
//!   the plugin is not asked again.
//! - [`PROMOTED_ANNOTATION`]: an operator's promotion of the cluster
//!   (`rollout-controller promote`), for this revision and generation of
//!   the work: its wait is over (no soak; a validation still in progress
//!   ends with a SUCCEEDED verdict naming the operator).

/// On a ManifestWork: its ManifestWorkReplicaSet, `namespace/name`.
pub(crate) const OWNER_ANNOTATION: &str = "rollout.open-cluster-management.io/owner";

/// On a ManifestWork: hex FNV-1a 64 of the canonical JSON of the spec the
/// controller applied.
pub(crate) const SPEC_HASH_ANNOTATION: &str = "rollout.open-cluster-management.io/spec-hash";

/// On a ManifestWork: the validation verdict, `Succeeded` or `Failed`.
pub const VALIDATION_ANNOTATION: &str = "rollout.open-cluster-management.io/validation";

/// On a ManifestWork: the plugin's message with the verdict.
pub(crate) const VALIDATION_MESSAGE_ANNOTATION: &str =
    "rollout.open-cluster-management.io/validation-message";

/// On a ManifestWork: the revision (template hash) the verdict is for.
pub(crate) const VALIDATION_REVISION_ANNOTATION: &str =
    "rollout.open-cluster-management.io/validation-revision";

/// On a ManifestWork: the work's `metadata.generation` the verdict is for.
pub(crate) const VALIDATION_GENERATION_ANNOTATION: &str =
    "rollout.open-cluster-management.io/validation-generation";

/// On a ManifestWork: `<revision>/<generation>` of the work an operator
/// promoted.
pub(crate) const PROMOTED_ANNOTATION: &str = "rollout-hooks.io/promoted";

/// [`VALIDATION_ANNOTATION`] for a SUCCEEDED answer.
pub(crate) const VALIDATION_SUCCEEDED: &str = "Succeeded";

/// [`VALIDATION_ANNOTATION`] for a FAILED answer.
pub(crate) const VALIDATION_FAILED: &str = "Failed";

/// On a ManifestWorkReplicaSet: its update revision as the controller last
/// recorded it with [`CURRENT_REVISION_ANNOTATION`] and
/// [`ABORTED_TIME_ANNOTATION`], so that they survive the
/// ManifestWorkReplicaSetRollout's status.
pub(crate) const UPDATE_REVISION_ANNOTATION: &str = "rollout-hooks.io/update-revision";

/// On a ManifestWorkReplicaSet: the current revision (the one an abort
/// restores); empty when there is none.
pub(crate) const CURRENT_REVISION_ANNOTATION: &str = "rollout-hooks.io/current-revision";

/// On a ManifestWorkReplicaSet: when the rollout of the update revision
/// was aborted (RFC 3339), while the abort stands.
pub(crate) const ABORTED_TIME_ANNOTATION: &str = "rollout-hooks.io/aborted-time";
