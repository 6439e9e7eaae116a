use super::*;
use crate::api::{ClusterCounts, ManifestWorkReplicaSetSummary, PlacementSummary};
use crate::hooks::{HookError, HookKind};
use crate::orchestrate::{AbortReport, ClusterReport, HookFailure, PlacementOutcome, WorkCounts};
use crate::rollout::{RolloutResult, RolloutStatus};

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).expect("time")
}

fn placement(hook_errors: Vec<HookFailure>) -> PlacementOutcome {
    PlacementOutcome {
        name: "p".into(),
        desired_revision: "r1".into(),
        aborting: false,
        stopped: false,
        held: false,
        paused: Vec::new(),
        promoted: Vec::new(),
        clusters: Vec::new(),
        result: RolloutResult::default(),
        works: WorkCounts::default(),
        updated: 0,
        at_update: 0,
        hook_errors,
        world_errors: Vec::new(),
        conflicts: Vec::new(),
        applied: Vec::new(),
        deleted: Vec::new(),
        requeue_after: None,
    }
}

fn outcome(abort: Option<AbortReport>, hook_errors: Vec<HookFailure>) -> DeployOutcome {
    DeployOutcome {
        placements: vec![placement(hook_errors)],
        aborted_at: None,
        abort,
        deleted_stale: Vec::new(),
        world_errors: Vec::new(),
        requeue_after: None,
    }
}

fn status(aborted: bool, succeeded: i32, total: i32) -> ManifestWorkReplicaSetStatus {
    ManifestWorkReplicaSetStatus {
        aborted_time: aborted.then(|| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0))),
        current_revision: Some("r1".into()),
        update_revision: Some("r2".into()),
        placements_summary: vec![PlacementSummary {
            name: "p".into(),
            summary: ManifestWorkReplicaSetSummary {
                desired_total: total,
                ..ManifestWorkReplicaSetSummary::default()
            },
            cluster_counts: ClusterCounts {
                succeeded,
                ..ClusterCounts::default()
            },
            ..PlacementSummary::default()
        }],
        ..ManifestWorkReplicaSetStatus::default()
    }
}

fn failure(cluster: &str) -> HookFailure {
    HookFailure {
        cluster: Some(cluster.into()),
        error: HookError {
            hook: HookKind::BeginRollout,
            code: tonic::Code::Unavailable,
            message: "connection refused".into(),
            origin: crate::hooks::Origin::Answer,
        },
    }
}

#[test]
fn an_abort_its_end_and_failures_become_events() {
    let abort = AbortReport {
        requested: None,
        placement: "p".into(),
        action: AbortAction::RollBack,
        failures: vec![ClusterReport {
            cluster: "c1".into(),
            status: RolloutStatus::Failed,
            group_index: 0,
            group_name: String::new(),
            last_transition_time: None,
            revision: Some("r2".into()),
            message: Some("smoke test failed".into()),
        }],
    };
    let plugins = [
        PluginState {
            name: "ok".into(),
            result: Ok(()),
        },
        PluginState {
            name: "canary".into(),
            result: Err(crate::hooks::HookError {
                hook: crate::hooks::HookKind::Initialize,
                code: tonic::Code::Unavailable,
                message: "x".into(),
                origin: crate::hooks::Origin::Answer,
            }),
        },
    ];
    let events = rollout_events(
        &status(false, 2, 2),
        &status(true, 0, 2),
        &outcome(Some(abort), vec![failure("c2"), failure("c3")]),
        &plugins,
    );
    let reasons: Vec<Reason> = events.iter().map(|e| e.reason).collect();
    assert_eq!(
        reasons,
        [
            Reason::AbortStarted,
            Reason::PluginLoadFailed,
            Reason::HookCallFailed
        ]
    );
    assert_eq!(
        events[0].note,
        "Rollout of revision r2 aborted: placement p: c1 Failed (smoke test failed). Rolling back to revision r1."
    );
    assert!(
        events[1]
            .note
            .starts_with("canary plugin: Initialize fails")
    );
    assert_eq!(
        events[2].note,
        "placement p: cluster c2: BeginRollout failed: UNAVAILABLE: connection refused (and 1 more failed hook calls)"
    );

    // The rollback finishes once; not again while it stays finished.
    let finished = rollout_events(
        &status(true, 1, 2),
        &status(true, 2, 2),
        &outcome(None, vec![]),
        &[],
    );
    assert_eq!(
        finished,
        [RolloutEvent {
            reason: Reason::RollbackFinished,
            note: "Revision r1 is restored on every cluster.".into()
        }]
    );
    assert!(
        rollout_events(
            &status(true, 2, 2),
            &status(true, 2, 2),
            &outcome(None, vec![]),
            &[]
        )
        .is_empty()
    );
    // A rollout that completes without an abort is no rollback.
    assert!(
        rollout_events(
            &status(false, 1, 2),
            &status(false, 2, 2),
            &outcome(None, vec![]),
            &[]
        )
        .is_empty()
    );
}

#[test]
fn the_gate_lets_one_event_per_key_and_window_through() {
    let mut gate = EventGate::new(Duration::from_secs(300));
    let hook = Reason::HookCallFailed;
    assert_eq!(
        gate.admit("ns/a", hook, at(0)),
        Admit::Publish { held_back: 0 }
    );
    assert_eq!(gate.admit("ns/a", hook, at(5)), Admit::HoldBack);
    assert_eq!(gate.admit("ns/a", hook, at(10)), Admit::HoldBack);
    // Other keys are not held back.
    assert_eq!(
        gate.admit("ns/b", hook, at(10)),
        Admit::Publish { held_back: 0 }
    );
    assert_eq!(
        gate.admit("ns/a", Reason::AbortStarted, at(10)),
        Admit::Publish { held_back: 0 }
    );
    // The next window says how many were held back.
    assert_eq!(
        gate.admit("ns/a", hook, at(300)),
        Admit::Publish { held_back: 2 }
    );
    assert_eq!(gate.admit("ns/a", hook, at(301)), Admit::HoldBack);
    // Quiet for two windows: forgotten.
    assert_eq!(
        gate.admit("ns/a", hook, at(2000)),
        Admit::Publish { held_back: 0 }
    );
    assert!(gate.last.len() <= 1, "{:?}", gate.last);
}

/// A reconcile's control decision over `spec` (JSON of `spec.control`),
/// for the update revision r2 of a rollout aborted or not, the status
/// before being `old`.
fn control_decision(
    spec: serde_json::Value,
    old: Option<&ControlStatus>,
    aborted: bool,
) -> Decision {
    let spec: crate::api::control::Control = serde_json::from_value(spec).expect("a control");
    let rollout = control::Rollout {
        update: "r2",
        previous_update: Some("r2"),
        current: Some("r1"),
        aborted,
        abort_would: AbortAction::RollBack,
        now: at(100),
    };
    control::decide(Some(&spec), old, &rollout)
}

#[test]
fn operators_requests_become_events_once_each() {
    use serde_json::json;
    let started = ControlStatus {
        revision_start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0))),
        ..ControlStatus::default()
    };
    let request = |secs: i64, by: &str| json!({"requestedTime": at(secs).to_string(), "by": by});
    let paused = control_decision(
        json!({"paused": {"time": at(10).to_string(), "by": "alice", "reason": "5xx"},
               "retry": request(20, "bob")}),
        Some(&started),
        false,
    );
    let events = control_events(Some(&started), &paused);
    let said: Vec<(Reason, &str)> = events.iter().map(|e| (e.reason, e.note.as_str())).collect();
    assert_eq!(
        said,
        [
            (
                Reason::RolloutPaused,
                "Rollout paused by alice (5xx) at 2023-11-14T22:13:30Z: no new cluster starts until it is resumed."
            ),
            (
                Reason::ControlRequestIgnored,
                "retry requested by bob at 2023-11-14T22:13:40Z does nothing: the rollout of revision r2 is not aborted."
            ),
        ]
    );
    // Read again: nothing new.
    let again = control_decision(
        json!({"paused": {"time": at(10).to_string(), "by": "alice", "reason": "5xx"},
               "retry": request(20, "bob")}),
        Some(&paused.status),
        false,
    );
    assert!(control_events(Some(&paused.status), &again).is_empty());
    // Resumed, and a retry of the abort; an abort that acts is AbortStarted,
    // not one of these.
    let resumed = control_decision(
        json!({"retry": request(30, "bob"), "abort": request(25, "carol")}),
        Some(&again.status),
        true,
    );
    let reasons: Vec<Reason> = control_events(Some(&again.status), &resumed)
        .iter()
        .map(|e| e.reason)
        .collect();
    assert_eq!(
        reasons,
        [
            Reason::RolloutResumed,
            Reason::ControlRequestIgnored,
            Reason::RolloutRetried
        ]
    );
    assert!(!Reason::RolloutPaused.gated() && Reason::AbortStarted.gated());
}

#[test]
fn an_abort_an_operator_asked_for_names_them() {
    let abort = AbortReport {
        requested: Some("by alice (5xx)".into()),
        placement: "p".into(),
        action: AbortAction::RollBack,
        failures: Vec::new(),
    };
    let events = rollout_events(
        &status(false, 1, 2),
        &status(true, 1, 2),
        &outcome(Some(abort), Vec::new()),
        &[],
    );
    assert_eq!(
        events[0].note,
        "Rollout of revision r2 aborted: asked by alice (5xx). Rolling back to revision r1."
    );
}
