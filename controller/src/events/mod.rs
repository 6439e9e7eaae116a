//! Kubernetes Events on the ManifestWorkReplicaSet, through kube-runtime's
//! [`Recorder`] (`events.k8s.io/v1`): what a user should see in
//! `kubectl describe` without reading the status.
//!
//! | reason | type | action | when |
//! |---|---|---|---|
//! | `AbortStarted` | Warning | `Abort` | a reconcile started the abort (the failures, and whether it rolls back or stops) |
//! | `RollbackFinished` | Normal | `RollBack` | every cluster is back on the current revision |
//! | `PluginLoadFailed` | Warning | `Initialize` | a plugin the strategy names did not answer `Initialize` |
//! | `HookCallFailed` | Warning | `CallHook` | hook calls failed in a reconcile (the first, and how many) |
//! | `ManifestWorkConflict` | Warning | `Apply` | another field manager wrote works of the set since the controller applied them (the works and the managers); they are left alone |
//! | `OtherController` | Warning | `StandAside` | another ManifestWorkReplicaSet controller (OCM's own) is found at work (what showed it); nothing is reconciled |
//! | `CarrierBound` | Normal | `Bind` | the `CarrierBound` condition changed: which ManifestWorkReplicaSetRollout is bound and how, or that an empty one was created |
//! | `BindingProblem` | Warning | `Bind` | the same, when something written binds to nothing: a carrier's entry for a placement not in the spec, or a carrier of the namespace that binds to no set beside a set bound to an empty one (a typo'd name) |
//! | `RolloutPaused` | Normal | `Pause` | an operator paused the rollout (`spec.control.paused`): who, when, why |
//! | `RolloutResumed` | Normal | `Resume` | the pause was lifted |
//! | `RolloutRetried` | Normal | `Retry` | an operator's retry started the aborted rollout again |
//! | `RolloutPromoted` | Normal | `Promote` | an operator's promotion skipped the clusters' current wait |
//! | `ControlRequestIgnored` | Warning | `Acknowledge` | an operator's abort, retry or promotion did nothing: stale (another revision, or made before its rollout started) or unneeded (an abort of an aborted rollout) |
//!
//! An abort an operator asks for is `AbortStarted`, its note naming who and
//! why.
//!
//! Deduplicated in two layers, so that a plugin failing on every reconcile
//! does not flood the API: [`EventGate`] lets one event per object and
//! reason through per window (5 minutes; the rest make no request at all),
//! and the recorder turns a repeat within its 6-minute cache into a patch
//! of the same Event's `series` (count and last time) instead of a new
//! object. So a plugin down for an hour makes one Event on each
//! ManifestWorkReplicaSet using it, patched about 12 times, where one per
//! reconcile (every 10 s) would make 360 writes. The note stays the first
//! one's (the recorder's key is the object, reason and action). An
//! operator's request makes one Event each, never held back by the gate
//! (they come one at a time, by hand).
//! [`rollout_events`] is pure: it derives the events from one reconcile.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::api::ManifestWorkReplicaSetStatus;
use crate::api::conditions::CARRIER_BOUND;
use crate::api::control::{ControlStatus, RequestResult, who};
use crate::control::{self, Decision, RequestKind};
use crate::hooks::PluginState;
use crate::orchestrate::DeployOutcome;
use crate::revision::AbortAction;

/// An Event when the `CarrierBound` condition changed: its message, as
/// `CarrierBound` while True, `BindingProblem` while False.
pub(crate) fn binding_event(
    old: &ManifestWorkReplicaSetStatus,
    new: &ManifestWorkReplicaSetStatus,
) -> Option<RolloutEvent> {
    let find = |s: &ManifestWorkReplicaSetStatus| {
        s.conditions
            .iter()
            .find(|c| c.type_ == CARRIER_BOUND)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let (status, _, message) = find(new)?;
    if find(old) == find(new) {
        return None;
    }
    Some(RolloutEvent {
        reason: if status == "True" {
            Reason::CarrierBound
        } else {
            Reason::BindingProblem
        },
        note: message,
    })
}

/// The longest note written (the API allows 1 kB).
pub(crate) const MAX_NOTE_LEN: usize = 1000;

/// The reporting controller's name in every Event.
pub(crate) const REPORTING_CONTROLLER: &str = "rollout-controller";

/// The reason of an Event (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The abort started.
    AbortStarted,
    /// The rollback finished.
    RollbackFinished,
    /// A plugin failed `Initialize`.
    PluginLoadFailed,
    /// Hook calls failed.
    HookCallFailed,
    /// Another field manager wrote works of the set.
    ManifestWorkConflict,
    /// Another ManifestWorkReplicaSet controller is at work: this one
    /// reconciles nothing.
    OtherController,
    /// The set was bound to a ManifestWorkReplicaSetRollout, or to a new
    /// empty one, or its binding changed.
    CarrierBound,
    /// Something written binds to nothing: a carrier's placement entry, or
    /// a carrier of no set beside a set bound to an empty one.
    BindingProblem,
    /// An operator paused the rollout.
    RolloutPaused,
    /// The pause was lifted.
    RolloutResumed,
    /// An operator's retry started the aborted rollout again.
    RolloutRetried,
    /// An operator's promotion skipped the clusters' wait.
    RolloutPromoted,
    /// An operator's request did nothing (stale or unneeded).
    ControlRequestIgnored,
}

impl Reason {
    /// The `reason` field.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::AbortStarted => "AbortStarted",
            Reason::RollbackFinished => "RollbackFinished",
            Reason::PluginLoadFailed => "PluginLoadFailed",
            Reason::HookCallFailed => "HookCallFailed",
            Reason::ManifestWorkConflict => "ManifestWorkConflict",
            Reason::OtherController => "OtherController",
            Reason::CarrierBound => "CarrierBound",
            Reason::BindingProblem => "BindingProblem",
            Reason::RolloutPaused => "RolloutPaused",
            Reason::RolloutResumed => "RolloutResumed",
            Reason::RolloutRetried => "RolloutRetried",
            Reason::RolloutPromoted => "RolloutPromoted",
            Reason::ControlRequestIgnored => "ControlRequestIgnored",
        }
    }

    /// The `action` field.
    pub(crate) fn action(self) -> &'static str {
        match self {
            Reason::AbortStarted => "Abort",
            Reason::RollbackFinished => "RollBack",
            Reason::PluginLoadFailed => "Initialize",
            Reason::HookCallFailed => "CallHook",
            Reason::ManifestWorkConflict => "Apply",
            Reason::OtherController => "StandAside",
            Reason::CarrierBound | Reason::BindingProblem => "Bind",
            Reason::RolloutPaused => "Pause",
            Reason::RolloutResumed => "Resume",
            Reason::RolloutRetried => "Retry",
            Reason::RolloutPromoted => "Promote",
            Reason::ControlRequestIgnored => "Acknowledge",
        }
    }

    /// Whether the [`EventGate`] may hold it back: not an operator's
    /// request, each of which is said once.
    pub(crate) fn gated(self) -> bool {
        !matches!(
            self,
            Reason::RolloutPaused
                | Reason::RolloutResumed
                | Reason::RolloutRetried
                | Reason::RolloutPromoted
                | Reason::ControlRequestIgnored
        )
    }

    /// Warning or Normal.
    pub(crate) fn event_type(self) -> EventType {
        match self {
            Reason::RollbackFinished
            | Reason::CarrierBound
            | Reason::RolloutPaused
            | Reason::RolloutResumed
            | Reason::RolloutRetried
            | Reason::RolloutPromoted => EventType::Normal,
            _ => EventType::Warning,
        }
    }
}

/// One Event to publish about a ManifestWorkReplicaSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutEvent {
    /// Why.
    pub reason: Reason,
    /// What happened, for a person.
    pub note: String,
}

/// Whether every placement of `status` has all its clusters succeeded on
/// the revision it rolls out, while aborted: the rollback is done.
fn restored(status: &ManifestWorkReplicaSetStatus) -> bool {
    status.aborted_time.is_some()
        && !status.placements_summary.is_empty()
        && status
            .placements_summary
            .iter()
            .all(|p| p.cluster_counts.succeeded == p.summary.desired_total)
}

/// The Events of one reconcile: from its step's `outcome`, the plugins'
/// states, and the status before (`old`) and after (`new`).
pub(crate) fn rollout_events(
    old: &ManifestWorkReplicaSetStatus,
    new: &ManifestWorkReplicaSetStatus,
    outcome: &DeployOutcome,
    plugins: &[PluginState],
) -> Vec<RolloutEvent> {
    let mut events = Vec::new();
    if let Some(event) = binding_event(old, new) {
        events.push(event);
    }
    if let Some(abort) = &outcome.abort {
        let failures = abort.failure_list();
        let update = new.update_revision.as_deref().unwrap_or_default();
        let then = match (abort.action, new.current_revision.as_deref()) {
            (AbortAction::RollBack, Some(current)) => {
                format!("Rolling back to revision {current}.")
            }
            _ => "No earlier revision to roll back to: the rollout is stopped.".to_owned(),
        };
        let cause = match &abort.requested {
            Some(who) => format!("asked {who}"),
            None => format!("placement {}: {}", abort.placement, failures.join(", ")),
        };
        events.push(RolloutEvent {
            reason: Reason::AbortStarted,
            note: format!("Rollout of revision {update} aborted: {cause}. {then}"),
        });
    }
    if restored(new) && !restored(old) {
        events.push(RolloutEvent {
            reason: Reason::RollbackFinished,
            note: format!(
                "Revision {} is restored on every cluster.",
                new.current_revision.as_deref().unwrap_or_default()
            ),
        });
    }
    for plugin in plugins {
        if let Some(note) = plugin.failure_message() {
            events.push(RolloutEvent {
                reason: Reason::PluginLoadFailed,
                note,
            });
        }
    }
    let errors: Vec<String> = outcome
        .hook_errors()
        .map(|(placement, failure)| format!("placement {placement}: {failure}"))
        .collect();
    if let Some(first) = errors.first() {
        let more = errors.len() - 1;
        events.push(RolloutEvent {
            reason: Reason::HookCallFailed,
            note: if more == 0 {
                first.clone()
            } else {
                format!("{first} (and {more} more failed hook calls)")
            },
        });
    }
    if let Some(note) = outcome.conflict_message() {
        events.push(RolloutEvent {
            reason: Reason::ManifestWorkConflict,
            note,
        });
    }
    events
}

/// The Events of an operator's requests in one reconcile: the pause set or
/// lifted (against `old`, the control status before), and each request
/// acknowledged, but an abort that acted (that one is `AbortStarted`).
pub(crate) fn control_events(
    old: Option<&ControlStatus>,
    decision: &Decision,
) -> Vec<RolloutEvent> {
    let mut events = Vec::new();
    if control::pause_changed(old, &decision.status) {
        events.push(match &decision.status.paused {
            Some(pause) => RolloutEvent {
                reason: Reason::RolloutPaused,
                note: format!(
                    "Rollout paused {} at {}: no new cluster starts until it is resumed.",
                    pause.who(),
                    pause.time.0
                ),
            },
            None => RolloutEvent {
                reason: Reason::RolloutResumed,
                note: "Rollout resumed: new clusters start again.".to_owned(),
            },
        });
    }
    for (verb, ack) in &decision.acknowledged {
        let who = who(ack.by.as_deref(), ack.reason.as_deref());
        let reason = match (ack.result, verb) {
            (RequestResult::Acted, RequestKind::Abort) => continue,
            (RequestResult::Acted, RequestKind::Retry) => Reason::RolloutRetried,
            (RequestResult::Acted, RequestKind::Promote) => Reason::RolloutPromoted,
            (RequestResult::Stale | RequestResult::Unneeded, _) => Reason::ControlRequestIgnored,
        };
        let note = match reason {
            Reason::ControlRequestIgnored => format!(
                "{} requested {who} at {} does nothing: {}.",
                verb.as_str(),
                ack.requested_time.0,
                ack.message
            ),
            _ => format!("{} requested {who}: {}.", verb.as_str(), ack.message),
        };
        events.push(RolloutEvent { reason, note });
    }
    events
}

/// What the gate says about one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Publish it; `held_back` like it were not since the last one.
    Publish {
        /// Events of this key held back since the last published.
        held_back: u64,
    },
    /// Hold it back: one of this key was published within the window.
    HoldBack,
}

/// At most one Event per key (object and reason) per window; pure (the
/// caller gives the time). Keys not seen for a window are forgotten, so
/// the memory is bounded by the objects and reasons active in one window.
#[derive(Debug, Clone)]
pub struct EventGate {
    window: SignedDuration,
    last: HashMap<(String, Reason), (Timestamp, u64)>,
}

impl EventGate {
    /// A gate letting one event per key through per `window`.
    pub fn new(window: Duration) -> EventGate {
        EventGate {
            window: SignedDuration::try_from(window).unwrap_or(SignedDuration::MAX),
            last: HashMap::new(),
        }
    }

    /// Whether an event of `reason` about `object` may go out at `now`:
    /// the first of a key in a window is published, saying how many were
    /// held back in the key's previous window; the rest are held back.
    pub(crate) fn admit(&mut self, object: &str, reason: Reason, now: Timestamp) -> Admit {
        let window = self.window;
        let after = |at: Timestamp, windows: i32| {
            window
                .checked_mul(windows)
                .and_then(|w| at.checked_add(w).ok())
                .unwrap_or(Timestamp::MAX)
        };
        // A key quiet for two windows has nothing left to say.
        self.last.retain(|_, (at, _)| after(*at, 2) > now);
        let key = (object.to_owned(), reason);
        match self.last.get_mut(&key) {
            Some((at, held)) if after(*at, 1) > now => {
                *held += 1;
                Admit::HoldBack
            }
            entry => {
                let held_back = entry.map_or(0, |(_, held)| *held);
                self.last.insert(key, (now, 0));
                Admit::Publish { held_back }
            }
        }
    }
}

impl Default for EventGate {
    fn default() -> Self {
        EventGate::new(Duration::from_secs(5 * 60))
    }
}

/// Publishes [`RolloutEvent`]s through kube-runtime's recorder, behind an
/// [`EventGate`]. A failed publish is logged, never fails a reconcile.
pub struct Events {
    recorder: Recorder,
    gate: Mutex<EventGate>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

fn cut(note: &str) -> String {
    if note.len() <= MAX_NOTE_LEN {
        return note.to_owned();
    }
    let mut end = MAX_NOTE_LEN - 3;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &note[..end])
}

impl Events {
    /// Events over `client`, reported by `instance` (the replica).
    pub fn new(client: Client, instance: &str, gate: EventGate) -> Events {
        Events {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: REPORTING_CONTROLLER.to_owned(),
                    instance: Some(instance.to_owned()),
                },
            ),
            gate: Mutex::new(gate),
        }
    }

    /// Publishes `events` about `object` at `now`, those the gate lets
    /// through.
    pub async fn publish(&self, object: &ObjectReference, events: &[RolloutEvent], now: Timestamp) {
        let key = format!(
            "{}/{}",
            object.namespace.as_deref().unwrap_or_default(),
            object.name.as_deref().unwrap_or_default()
        );
        for event in events {
            let admit = if event.reason.gated() {
                self.gate
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .admit(&key, event.reason, now)
            } else {
                Admit::Publish { held_back: 0 }
            };
            let Admit::Publish { held_back } = admit else {
                tracing::debug!(
                    object = key,
                    reason = event.reason.as_str(),
                    "event held back"
                );
                continue;
            };
            if held_back > 0 {
                tracing::debug!(
                    object = key,
                    reason = event.reason.as_str(),
                    held_back,
                    "events were held back"
                );
            }
            let published = self
                .recorder
                .publish(
                    &Event {
                        type_: event.reason.event_type(),
                        reason: event.reason.as_str().to_owned(),
                        note: Some(cut(&event.note)),
                        action: event.reason.action().to_owned(),
                        secondary: None,
                    },
                    object,
                )
                .await;
            if let Err(error) = published {
                tracing::warn!(object = key, reason = event.reason.as_str(), %error, "publishing an event failed");
            }
        }
    }
}

#[cfg(test)]
mod tests;
