//! What operators asked of the rollout (the carrier's `spec.control`) and
//! what the controller made of it (`status.control`), for the view: the
//! pause, and each request of the update revision with its result, or
//! waiting for the controller to read it.

use jiff::Timestamp;
use serde::Serialize;

use rollout_controller::api::ManifestWorkReplicaSetRollout;
use rollout_controller::api::control::{Acknowledged, ControlRequest, who};

/// The pause the rollout is held for.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PauseView {
    /// Who paused it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) by: Option<String>,
    /// When.
    pub(crate) time: Timestamp,
    /// Why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// Whether the controller holds the rollout for it yet (it read it).
    pub(crate) observed: bool,
}

/// One request of an operator (abort, retry, promote).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RequestView {
    /// `abort`, `retry` or `promote`.
    pub(crate) kind: &'static str,
    /// Who asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) by: Option<String>,
    /// Why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// When.
    pub(crate) requested_time: Timestamp,
    /// What came of it: `Acted`, `Unneeded`, `Stale`; `None` while the
    /// controller has not read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) result: Option<&'static str>,
    /// What came of it, for a person.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub(crate) message: String,
}

impl RequestView {
    /// `by alice (why)`.
    pub(crate) fn who(&self) -> String {
        who(self.by.as_deref(), self.reason.as_deref())
    }
}

/// The pause of `carrier`, if it is paused (`spec.control.paused`).
pub(crate) fn pause(carrier: Option<&ManifestWorkReplicaSetRollout>) -> Option<PauseView> {
    let carrier = carrier?;
    let pause = carrier.spec.control.as_ref()?.paused.as_ref()?;
    let observed = carrier
        .status
        .as_ref()
        .and_then(|s| s.control.as_ref())
        .and_then(|c| c.paused.as_ref())
        == Some(pause);
    Some(PauseView {
        by: pause.by.clone(),
        time: pause.time.0,
        reason: pause.reason.clone(),
        observed,
    })
}

/// The requests of `carrier` about the update revision `update`: those
/// acknowledged for it, and those not read yet, oldest first.
pub(crate) fn requests(
    carrier: Option<&ManifestWorkReplicaSetRollout>,
    update: Option<&str>,
) -> Vec<RequestView> {
    let Some(carrier) = carrier else {
        return Vec::new();
    };
    let spec = carrier.spec.control.clone().unwrap_or_default();
    let status = carrier
        .status
        .as_ref()
        .and_then(|s| s.control.clone())
        .unwrap_or_default();
    let mut list: Vec<RequestView> = [
        ("abort", spec.abort.as_ref(), status.abort.as_ref()),
        ("retry", spec.retry.as_ref(), status.retry.as_ref()),
        (
            "promote",
            spec.promote.as_ref().map(|p| &p.request),
            status.promote.as_ref(),
        ),
    ]
    .into_iter()
    .filter_map(|(kind, asked, acknowledged)| one(kind, asked, acknowledged, update))
    .collect();
    list.sort_by_key(|r| r.requested_time);
    list
}

/// The view of one kind of request: the one asked when the controller
/// has not read it, else the one acknowledged, if it is about `update`.
fn one(
    kind: &'static str,
    asked: Option<&ControlRequest>,
    acknowledged: Option<&Acknowledged>,
    update: Option<&str>,
) -> Option<RequestView> {
    let unread =
        asked.filter(|a| acknowledged.is_none_or(|ack| a.requested_time.0 > ack.requested_time.0));
    if let Some(asked) = unread {
        return Some(RequestView {
            kind,
            by: asked.by.clone(),
            reason: asked.reason.clone(),
            requested_time: asked.requested_time.0,
            result: None,
            message: String::new(),
        });
    }
    let ack = acknowledged.filter(|a| Some(a.revision.as_str()) == update)?;
    Some(RequestView {
        kind,
        by: ack.by.clone(),
        reason: ack.reason.clone(),
        requested_time: ack.requested_time.0,
        result: Some(ack.result.as_str()),
        message: ack.message.clone(),
    })
}
