//! Manual control of a rollout (`rollout-controller abort|retry|pause|
//! resume|promote`): [`decide`] is pure: from the carrier's `spec.control`
//! and `status.control` ([`crate::api::control`]) and the rollout's state
//! it says what this reconcile does (abort, retry, hold new clusters,
//! promote) and what it acknowledges; [`hub`] is the command line's I/O,
//! which writes the requests on the carrier.
//!
//! A request acts once: the controller acknowledges it in
//! `status.control` with what came of it, and a request whose time is not
//! after the acknowledged one's is not read again. An abort and a retry
//! both new in one reconcile are taken in the order they were made.

pub mod hub;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::control::{
    Acknowledged, Control, ControlRequest, ControlStatus, Promote, RequestResult,
};
use crate::orchestrate::{ManualControl, Promotion};
use crate::revision::AbortAction;

/// The rollout a reconcile starts from, as far as manual control needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rollout<'a> {
    /// The update revision.
    pub(crate) update: &'a str,
    /// The update revision in the status before this reconcile (another
    /// one, or none: the rollout of `update` starts now).
    pub(crate) previous_update: Option<&'a str>,
    /// `currentRevision`.
    pub(crate) current: Option<&'a str>,
    /// Whether an abort is under way.
    pub(crate) aborted: bool,
    /// What an abort would do now ([`crate::revision::abort_action`] with
    /// an abort requested).
    pub(crate) abort_would: AbortAction,
    /// The time of this reconcile.
    pub(crate) now: Timestamp,
}

/// The kinds of requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestKind {
    Abort,
    Retry,
    Promote,
}

impl RequestKind {
    /// Its name, as the command line spells it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RequestKind::Abort => "abort",
            RequestKind::Retry => "retry",
            RequestKind::Promote => "promote",
        }
    }
}

/// What one reconcile does about `spec.control`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    /// What the step is told ([`crate::orchestrate::deploy`]).
    pub(crate) step: ManualControl,
    /// Whether a retry clears the abort under way.
    pub(crate) retry: bool,
    /// `status.control` after this reconcile.
    pub(crate) status: ControlStatus,
    /// The requests acknowledged in this reconcile (new ones only), in the
    /// order they were made.
    pub(crate) acknowledged: Vec<(RequestKind, Acknowledged)>,
}

/// What this reconcile does about `spec` (see the module documentation),
/// given `old`, the status written before.
pub(crate) fn decide(
    spec: Option<&Control>,
    old: Option<&ControlStatus>,
    rollout: &Rollout<'_>,
) -> Decision {
    let old = old.cloned().unwrap_or_default();
    let spec = spec.cloned().unwrap_or_default();
    let started = old
        .revision_start_time
        .as_ref()
        .map(|t| t.0)
        .filter(|_| rollout.previous_update == Some(rollout.update))
        // As the status keeps it: whole seconds.
        .unwrap_or_else(|| Timestamp::from_second(rollout.now.as_second()).unwrap_or(rollout.now));
    let mut decision = Decision {
        step: ManualControl {
            paused: spec.paused.is_some(),
            ..ManualControl::default()
        },
        retry: false,
        status: ControlStatus {
            revision_start_time: Some(Time(started)),
            paused: spec.paused.clone(),
            ..old.clone()
        },
        acknowledged: Vec::new(),
    };
    let mut aborted = rollout.aborted;
    let mut new: Vec<(RequestKind, &ControlRequest)> = [
        (RequestKind::Abort, spec.abort.as_ref()),
        (RequestKind::Retry, spec.retry.as_ref()),
        (
            RequestKind::Promote,
            spec.promote.as_ref().map(|p| &p.request),
        ),
    ]
    .into_iter()
    .filter_map(|(verb, request)| Some((verb, request?)))
    .filter(|(verb, request)| is_new(request, acknowledged(&old, *verb)))
    .collect();
    new.sort_by_key(|(_, request)| request.requested_time.0);
    for (verb, request) in new {
        let (result, message) = match stale(request, rollout, started) {
            Some(why) => (RequestResult::Stale, why),
            None => match verb {
                RequestKind::Abort => abort(rollout, &mut aborted),
                RequestKind::Retry => retry(rollout, &mut aborted),
                RequestKind::Promote => promote(spec.promote.as_ref(), &mut decision.step),
            },
        };
        let ack = Acknowledged {
            requested_time: request.requested_time.clone(),
            by: request.by.clone(),
            reason: request.reason.clone(),
            observed_time: Time(rollout.now),
            revision: rollout.update.to_owned(),
            result,
            message,
        };
        *acknowledged_mut(&mut decision.status, verb) = Some(ack.clone());
        decision.acknowledged.push((verb, ack));
    }
    if aborted && !rollout.aborted {
        decision.step.abort = spec.abort.as_ref().map(ControlRequest::who);
    }
    decision.retry = rollout.aborted && !aborted;
    decision
}

/// Whether `request` is newer than the one `acknowledged`.
fn is_new(request: &ControlRequest, acknowledged: Option<&Acknowledged>) -> bool {
    acknowledged.is_none_or(|a| request.requested_time.0 > a.requested_time.0)
}

fn acknowledged(status: &ControlStatus, verb: RequestKind) -> Option<&Acknowledged> {
    match verb {
        RequestKind::Abort => status.abort.as_ref(),
        RequestKind::Retry => status.retry.as_ref(),
        RequestKind::Promote => status.promote.as_ref(),
    }
}

fn acknowledged_mut(status: &mut ControlStatus, verb: RequestKind) -> &mut Option<Acknowledged> {
    match verb {
        RequestKind::Abort => &mut status.abort,
        RequestKind::Retry => &mut status.retry,
        RequestKind::Promote => &mut status.promote,
    }
}

/// Why `request` is stale, if it is: it names another revision, or,
/// naming none, it was made before the rollout of the update revision
/// `started`.
fn stale(request: &ControlRequest, rollout: &Rollout<'_>, started: Timestamp) -> Option<String> {
    match request.revision.as_deref() {
        Some(revision) if revision != rollout.update => Some(format!(
            "made for revision {revision}, not the update revision {}",
            rollout.update
        )),
        Some(_) => None,
        None if request.requested_time.0 < started => Some(format!(
            "made at {}, before the rollout of revision {} started at {started}",
            request.requested_time.0, rollout.update
        )),
        None => None,
    }
}

fn abort(rollout: &Rollout<'_>, aborted: &mut bool) -> (RequestResult, String) {
    let update = rollout.update;
    if *aborted {
        return (
            RequestResult::Unneeded,
            format!("the rollout of revision {update} is already aborted"),
        );
    }
    match (rollout.abort_would, rollout.current) {
        (AbortAction::Proceed, _) => (
            RequestResult::Unneeded,
            format!("revision {update} is the current revision: there is nothing to abort"),
        ),
        (AbortAction::RollBack, Some(current)) => {
            *aborted = true;
            (
                RequestResult::Acted,
                format!(
                    "the rollout of revision {update} is aborted: rolling back to revision {current}"
                ),
            )
        }
        _ => {
            *aborted = true;
            (
                RequestResult::Acted,
                format!(
                    "the rollout of revision {update} is aborted: no earlier revision to roll back to, the rollout is stopped"
                ),
            )
        }
    }
}

fn retry(rollout: &Rollout<'_>, aborted: &mut bool) -> (RequestResult, String) {
    let update = rollout.update;
    if !*aborted {
        return (
            RequestResult::Unneeded,
            format!("the rollout of revision {update} is not aborted"),
        );
    }
    *aborted = false;
    (
        RequestResult::Acted,
        format!("the rollout of revision {update} starts again"),
    )
}

fn promote(promote: Option<&Promote>, step: &mut ManualControl) -> (RequestResult, String) {
    let clusters: BTreeSet<String> = promote
        .map(|p| p.clusters.iter().cloned().collect())
        .unwrap_or_default();
    let message = if clusters.is_empty() {
        "the wait of every cluster ends".to_owned()
    } else {
        let names: Vec<&str> = clusters.iter().map(String::as_str).collect();
        format!("the wait of {} ends", names.join(", "))
    };
    step.promote = Some(Promotion {
        clusters,
        who: promote.map(|p| p.request.who()).unwrap_or_default(),
    });
    (RequestResult::Acted, message)
}

/// Whether the pause changed from `old` to `new` (set, cleared or
/// replaced).
pub(crate) fn pause_changed(old: Option<&ControlStatus>, new: &ControlStatus) -> bool {
    old.and_then(|o| o.paused.as_ref()) != new.paused.as_ref()
}
