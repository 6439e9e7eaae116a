//! Condition types, reasons and messages of a ManifestWorkReplicaSet's
//! status.
//!
//! Upstream's three condition types keep their upstream reasons. The design
//! adds `PluginLoaded` (is the `rolloutStrategy.plugin` reachable, from
//! `Initialize` through the gateway) and the rollback design `Progressing`
//! (the rollout of the current revision; it also carries plugin call errors
//! in its message, as the design asks).

/// Whether each placement of `spec.placementRefs` exists and has decisions.
/// Reasons: [`REASON_AS_EXPECTED`], [`REASON_PLACEMENT_DECISION_NOT_FOUND`],
/// [`REASON_PLACEMENT_DECISION_EMPTY`], [`REASON_NOT_AS_EXPECTED`].
pub const PLACEMENT_VERIFIED: &str = "PlacementVerified";

/// Whether the rollout strategy has run to its end on every placement.
/// Reasons: [`REASON_PROGRESSING`], [`REASON_COMPLETE`],
/// [`REASON_ROLLOUT_DEGRADED`].
pub(crate) const PLACEMENT_ROLLED_OUT: &str = "PlacementRolledOut";

/// Whether a ManifestWork exists for each decided cluster.
/// Reasons: [`REASON_AS_EXPECTED`], [`REASON_NOT_AS_EXPECTED`],
/// [`REASON_PROCESSING`].
pub(crate) const MANIFESTWORK_APPLIED: &str = "ManifestworkApplied";

/// Whether the rollout plugin named by `rolloutStrategy.plugin` answered
/// `Initialize` (design). Reasons: [`REASON_AVAILABLE`] (True) with
/// [`plugin_available_message`], [`REASON_FAILED`] (False) with
/// [`plugin_failed_message`].
pub const PLUGIN_LOADED: &str = "PluginLoaded";

/// The progress of the current revision's rollout (rollback design); False
/// with the plugin's error as message when a hook call fails. Reasons:
/// [`REASON_NEW_REVISION_CREATED`], [`REASON_FOUND_NEW_REVISION`],
/// [`REASON_NEW_MANIFEST_WORK_AVAILABLE`], [`REASON_ROLLOUT_ABORTED`],
/// [`REASON_PROGRESS_DEADLINE_EXCEEDED`], [`REASON_PLUGIN_CALL_FAILED`],
/// [`REASON_ROLLOUT_PAUSED`].
pub const PROGRESSING: &str = "Progressing";

/// A condition the controller never sets and removes wherever it finds
/// it: an owner label value over 63 characters is not hashed to fit; the
/// set stops with [`MANIFESTWORK_APPLIED`] False, reason
/// [`REASON_INVALID_MANIFEST_WORK_NAME`], as OCM's own controller reports it.
pub(crate) const OWNER_LABEL_HASHED: &str = "OwnerLabelHashed";

/// On a ManifestWorkReplicaSet: which ManifestWorkReplicaSetRollout it is
/// bound to and how (`SameName`, `Empty`, `CreatedEmpty`), False when
/// something written binds to nothing (`UnknownPlacements`,
/// `NothingBound`).
pub(crate) const CARRIER_BOUND: &str = "CarrierBound";

/// On a ManifestWorkReplicaSetRollout: another ManifestWorkReplicaSet
/// controller (OCM's own) is at work, and this one reconciles nothing.
pub(crate) const OTHER_CONTROLLER: &str = "OtherController";

/// Present (True) only while another field manager (OCM's own
/// ManifestWorkReplicaSet controller, a person, a GitOps tool) has written
/// ManifestWorks of the set since the controller applied them; its message
/// names the works and the managers. Reason [`REASON_OTHER_FIELD_MANAGER`].
/// Such a work is left alone rather than applied again. An addition of this
/// project.
pub(crate) const MANIFEST_WORKS_CONFLICT: &str = "ManifestWorksConflict";

/// ManifestworkApplied: the owner label value `<namespace>.<name>` is not a
/// valid label value (over 63 characters), so no work is written. OCM's
/// controller's reason for the same case.
pub(crate) const REASON_INVALID_MANIFEST_WORK_NAME: &str = "InvalidManifestWorkName";

/// ManifestWorksConflict: another field manager wrote the works.
pub(crate) const REASON_OTHER_FIELD_MANAGER: &str = "OtherFieldManager";

/// PlacementVerified: the placement is not found.
pub(crate) const REASON_PLACEMENT_DECISION_NOT_FOUND: &str = "PlacementDecisionNotFound";
/// PlacementVerified: the placement selected no cluster.
pub(crate) const REASON_PLACEMENT_DECISION_EMPTY: &str = "PlacementDecisionEmpty";
/// PlacementVerified, ManifestworkApplied: all is well.
pub(crate) const REASON_AS_EXPECTED: &str = "AsExpected";
/// ManifestworkApplied: works are still being created.
pub(crate) const REASON_PROCESSING: &str = "Processing";
/// PlacementVerified, ManifestworkApplied: something is wrong.
pub(crate) const REASON_NOT_AS_EXPECTED: &str = "NotAsExpected";
/// PlacementRolledOut: clusters are still to roll out.
pub(crate) const REASON_PROGRESSING: &str = "Progressing";
/// PlacementRolledOut: every cluster succeeded.
pub(crate) const REASON_COMPLETE: &str = "Complete";
/// PlacementRolledOut: the rollout stopped on failures (rollback design).
pub(crate) const REASON_ROLLOUT_DEGRADED: &str = "RolloutDegraded";

/// PluginLoaded True: the plugin answered `Initialize`.
pub(crate) const REASON_AVAILABLE: &str = "Available";
/// PluginLoaded False: `Initialize` failed.
pub(crate) const REASON_FAILED: &str = "Failed";

/// Progressing: the template changed and a new revision was recorded.
pub(crate) const REASON_NEW_REVISION_CREATED: &str = "NewRevisionCreated";
/// Progressing: the template went back to a revision in the history.
pub(crate) const REASON_FOUND_NEW_REVISION: &str = "FoundNewRevision";
/// Progressing: the update revision is rolled out everywhere.
pub(crate) const REASON_NEW_MANIFEST_WORK_AVAILABLE: &str = "NewManifestWorkAvailable";
/// Progressing: the rollout was aborted; the current revision is being
/// restored.
pub(crate) const REASON_ROLLOUT_ABORTED: &str = "RolloutAborted";
/// Progressing: an operator paused the rollout (`spec.control.paused` of
/// the ManifestWorkReplicaSetRollout); no new cluster starts. An addition
/// of this project.
pub(crate) const REASON_ROLLOUT_PAUSED: &str = "RolloutPaused";
/// Progressing: a cluster did not finish within `progressDeadline`.
pub(crate) const REASON_PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
/// Progressing: a rollout plugin hook returned an error (its message is the
/// condition's message). An addition of this project.
pub const REASON_PLUGIN_CALL_FAILED: &str = "PluginCallFailed";

/// The detail of [`plugin_failed_message`] when the plugin's server cannot
/// be reached (gRPC `UNAVAILABLE`), in the design's words.
pub(crate) const UNAVAILABLE_ENDPOINT: &str = "unavailable plugin server endpoint";

/// The PluginLoaded message when `plugin` is available, as in the design:
/// `my-rollout plugin is available.`
pub(crate) fn plugin_available_message(plugin: &str) -> String {
    format!("{plugin} plugin is available.")
}

/// The PluginLoaded message when `plugin`'s `Initialize` failed with
/// `detail`, after the design's `Initialize fails with unavailable plugin
/// server endpoint.`: `my-rollout plugin: Initialize fails with DETAIL.`
/// One trailing period of `detail` is not doubled.
pub(crate) fn plugin_failed_message(plugin: &str, detail: &str) -> String {
    let detail = detail.strip_suffix('.').unwrap_or(detail);
    format!("{plugin} plugin: Initialize fails with {detail}.")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_messages() {
        assert_eq!(
            plugin_available_message("my-rollout"),
            "my-rollout plugin is available."
        );
        let cases = [
            (
                UNAVAILABLE_ENDPOINT,
                "my-rollout plugin: Initialize fails with unavailable plugin server endpoint.",
            ),
            (
                "plugin \"my-rollout\": boom.",
                "my-rollout plugin: Initialize fails with plugin \"my-rollout\": boom.",
            ),
            ("", "my-rollout plugin: Initialize fails with ."),
        ];
        for (detail, want) in cases {
            assert_eq!(plugin_failed_message("my-rollout", detail), want);
        }
    }
}
