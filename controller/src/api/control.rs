//! Manual control of a rollout, kept on the ManifestWorkReplicaSetRollout
//! so that a GitOps tool sees it: `spec.control` is what an operator asks
//! (`rollout-controller abort|retry|pause|resume|promote` writes it, as may
//! anyone with write access to the object), `status.control` what the
//! controller made of it.
//!
//! - `paused` is a state: while it is set no new cluster starts rolling
//!   out; removing it resumes.
//! - `abort`, `retry` and `promote` are requests: each carries the time it
//!   was made, and acts once. The controller acknowledges the latest one of
//!   each kind in `status.control` (with what came of it); a request whose
//!   time is not after the acknowledged one's does nothing, and so does a
//!   stale one: one naming another `revision` than the update revision, or,
//!   without a revision, one made before the controller started rolling out
//!   the update revision (`status.control.revisionStartTime`).
//!
//! What each does to the rollout, and what plugins see of it, is
//! docs/plugin-api.md §5, "Manual control".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `spec.control`: what an operator asks of the rollout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Control {
    /// While set, no new cluster starts rolling out (clusters in flight go
    /// on, their validations included; a rollback under way goes on).
    /// Removing it resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Pause>,
    /// Abort the rollout of the update revision: every updated cluster is
    /// restored to the current revision, as after a plugin's FAILED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort: Option<ControlRequest>,
    /// Start an aborted rollout of the update revision again, without a
    /// template change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<ControlRequest>,
    /// Skip the current wait (a soak, an INPROGRESS validation) of the
    /// clusters named, or of every cluster. Never turns a FAILED verdict
    /// into a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promote: Option<Promote>,
}

/// Who paused the rollout, when and why.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pause {
    /// When it was paused.
    pub time: Time,
    /// Who paused it (the user as the API server knows them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One request of an operator: acts once, when the controller first reads
/// it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlRequest {
    /// When it was made; a new request has a later time than the last.
    pub requested_time: Time,
    /// Who made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The update revision it is about (`status.updateRevision` when it was
    /// made); another revision makes it stale. Without it, it is about the
    /// revision being rolled out when the controller reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) revision: Option<String>,
}

/// A promotion: a request and the clusters it is for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Promote {
    // The request itself, its fields inline. (Not a doc comment: that would
    // be a description in the CRD's schema.)
    #[serde(flatten)]
    pub request: ControlRequest,
    /// The clusters to promote; empty: every cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) clusters: Vec<String>,
}

/// `status.control`: what the controller made of `spec.control`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlStatus {
    /// When the controller started rolling out the update revision: a
    /// request without a revision made before then is stale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) revision_start_time: Option<Time>,
    /// The pause the rollout is held for, as read from `spec.control`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Pause>,
    /// The latest abort request read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort: Option<Acknowledged>,
    /// The latest retry request read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Acknowledged>,
    /// The latest promotion read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promote: Option<Acknowledged>,
}

/// A request the controller read, and what came of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Acknowledged {
    /// The request's `requestedTime`.
    pub requested_time: Time,
    /// The request's `by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The request's `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the controller read it.
    pub(crate) observed_time: Time,
    /// The update revision then.
    pub revision: String,
    /// What came of it.
    pub result: RequestResult,
    /// What came of it, for a person.
    pub message: String,
}

/// What came of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RequestResult {
    /// It acted.
    Acted,
    /// There was nothing for it to do (an abort of a rollout already
    /// aborted, a retry of one that is not).
    Unneeded,
    /// It was about another revision, or older than the update revision's
    /// rollout.
    Stale,
}

impl RequestResult {
    /// As written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestResult::Acted => "Acted",
            RequestResult::Unneeded => "Unneeded",
            RequestResult::Stale => "Stale",
        }
    }
}

impl ControlRequest {
    /// Who made it, and why, as a phrase: `by alice (bad canary)`.
    pub(crate) fn who(&self) -> String {
        who(self.by.as_deref(), self.reason.as_deref())
    }
}

impl Pause {
    /// Who paused, and why, as a phrase: `by alice (bad canary)`.
    pub(crate) fn who(&self) -> String {
        who(self.by.as_deref(), self.reason.as_deref())
    }
}

/// `by alice (why)`, `by alice`, `(why)` or `by an operator`.
pub fn who(by: Option<&str>, reason: Option<&str>) -> String {
    let by = by.filter(|b| !b.is_empty());
    let reason = reason.filter(|r| !r.is_empty());
    match (by, reason) {
        (Some(by), Some(reason)) => format!("by {by} ({reason})"),
        (Some(by), None) => format!("by {by}"),
        (None, Some(reason)) => format!("by an operator ({reason})"),
        (None, None) => "by an operator".to_owned(),
    }
}
