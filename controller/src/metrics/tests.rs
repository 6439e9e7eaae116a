use std::time::Duration;

use super::*;
use crate::orchestrate::{AbortReport, PlacementOutcome, WorkCounts};
use crate::rollout::RolloutResult;

fn placement(aborting: bool, stopped: bool, complete: bool) -> PlacementOutcome {
    use crate::orchestrate::ClusterReport;
    use crate::rollout::RolloutStatus;
    PlacementOutcome {
        name: "p".into(),
        desired_revision: "r".into(),
        aborting,
        stopped,
        held: false,
        clusters: vec![ClusterReport {
            cluster: "c1".into(),
            status: if complete {
                RolloutStatus::Succeeded
            } else {
                RolloutStatus::Progressing
            },
            group_index: 0,
            group_name: String::new(),
            last_transition_time: None,
            revision: None,
            message: None,
        }],
        result: RolloutResult::default(),
        works: WorkCounts::default(),
        updated: 0,
        at_update: 0,
        hook_errors: Vec::new(),
        world_errors: Vec::new(),
        conflicts: Vec::new(),
        applied: Vec::new(),
        deleted: Vec::new(),
        requeue_after: None,
    }
}

fn outcome(p: PlacementOutcome, abort: Option<AbortAction>) -> DeployOutcome {
    DeployOutcome {
        abort: abort.map(|action| AbortReport {
            placement: "p".into(),
            action,
            failures: Vec::new(),
        }),
        placements: vec![p],
        aborted_at: None,
        deleted_stale: Vec::new(),
        world_errors: Vec::new(),
        requeue_after: None,
    }
}

#[test]
fn phases_of_an_outcome() {
    use RolloutPhase::*;
    let phase = |a, s, c| RolloutPhase::of(&outcome(placement(a, s, c), None));
    assert_eq!(phase(false, false, false), RollingOut);
    assert_eq!(phase(false, false, true), Idle);
    assert_eq!(phase(true, false, false), RollingBack);
    assert_eq!(phase(true, false, true), Idle);
    assert_eq!(phase(true, true, false), Idle);
}

#[test]
fn reconciles_hooks_rollouts_and_aborts_are_counted() {
    let m = ControllerMetrics::new();
    let text = m.encode();
    // The gauges exist before anything happened.
    assert_eq!(
        sample(
            &text,
            r#"rollout_controller_rollouts_in_progress{aborting="false"}"#
        ),
        Some(0.0)
    );
    assert_eq!(sample(&text, "rollout_controller_leader"), Some(0.0));
    // So do the reconcile counters, at 0 for every result and cause.
    for result in ["success", "error"] {
        assert_eq!(
            sample(
                &text,
                &format!(r#"rollout_controller_reconciles_total{{result="{result}"}}"#)
            ),
            Some(0.0),
            "{text}"
        );
    }
    for error in ["kube", "manifestwork", "invalid"] {
        assert_eq!(
            sample(
                &text,
                &format!(r#"rollout_controller_reconcile_errors_total{{error="{error}"}}"#)
            ),
            Some(0.0),
            "{text}"
        );
    }

    m.record_reconcile(Duration::from_millis(20), None);
    m.record_reconcile(Duration::from_millis(40), Some(ReconcileErrorKind::Kube));
    m.record_hook(
        HookKind::BeginRollout,
        "canary",
        tonic::Code::Ok,
        Duration::from_millis(3),
    );
    m.record_hook(
        HookKind::BeginRollout,
        "canary",
        tonic::Code::Unavailable,
        Duration::from_millis(2),
    );
    m.record_rollout("ns/a", &outcome(placement(false, false, false), None));
    m.record_rollout("ns/b", &outcome(placement(false, false, false), None));
    m.record_rollout(
        "ns/b",
        &outcome(placement(true, false, false), Some(AbortAction::RollBack)),
    );
    m.record_rollout(
        "ns/c",
        &outcome(placement(true, true, false), Some(AbortAction::Stop)),
    );
    m.set_leader(true);

    let text = m.encode();
    let value =
        |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
    assert_eq!(
        value(r#"rollout_controller_reconciles_total{result="success"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_reconciles_total{result="error"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_reconcile_errors_total{error="kube"}"#),
        1.0
    );
    assert_eq!(
        value("rollout_controller_reconcile_duration_seconds_count"),
        2.0
    );
    assert_eq!(
        value(
            r#"rollout_controller_hook_calls_total{hook="BeginRollout",target="canary",code="OK"}"#
        ),
        1.0
    );
    assert_eq!(
        value(
            r#"rollout_controller_hook_calls_total{hook="BeginRollout",target="canary",code="UNAVAILABLE"}"#
        ),
        1.0
    );
    assert_eq!(
        value(
            r#"rollout_controller_hook_call_duration_seconds_count{hook="BeginRollout",target="canary"}"#
        ),
        2.0
    );
    assert_eq!(
        value(r#"rollout_controller_rollouts_in_progress{aborting="false"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_rollouts_in_progress{aborting="true"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_aborts_total{action="RollBack"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_aborts_total{action="Stop"}"#),
        1.0
    );
    assert_eq!(value("rollout_controller_leader"), 1.0);

    // A deleted ManifestWorkReplicaSet no longer counts.
    m.forget_rollout("ns/b");
    m.record_rollout("ns/a", &outcome(placement(false, false, true), None));
    let text = m.encode();
    assert_eq!(
        sample(
            &text,
            r#"rollout_controller_rollouts_in_progress{aborting="true"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"rollout_controller_rollouts_in_progress{aborting="false"}"#
        ),
        Some(0.0)
    );
}
