//! [`decide`] as a table: which requests act, once, and which are stale.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::*;
use crate::api::control::Pause;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).expect("time")
}

fn rollout(aborted: bool, now: i64) -> Rollout<'static> {
    Rollout {
        update: "r2",
        previous_update: Some("r2"),
        current: Some("r1"),
        aborted,
        abort_would: AbortAction::RollBack,
        now: at(now),
    }
}

fn control(value: Value) -> Control {
    serde_json::from_value(value).expect("a control")
}

fn request(secs: i64) -> Value {
    json!({"requestedTime": Time(at(secs)), "by": "alice", "reason": "5xx"})
}

/// The status after a reconcile that started the rollout of r2 at 0.
fn started() -> ControlStatus {
    ControlStatus {
        revision_start_time: Some(Time(at(0))),
        ..ControlStatus::default()
    }
}

#[test]
fn an_abort_acts_once_and_names_the_operator() {
    let spec = control(json!({"abort": request(10)}));
    let first = decide(Some(&spec), Some(&started()), &rollout(false, 20));
    assert_eq!(first.step.abort.as_deref(), Some("by alice (5xx)"));
    assert!(!first.retry);
    let ack = first.status.abort.clone().expect("acknowledged");
    assert_eq!(ack.result, RequestResult::Acted);
    assert_eq!(ack.revision, "r2");
    assert_eq!(ack.observed_time, Time(at(20)));
    assert_eq!(
        ack.message,
        "the rollout of revision r2 is aborted: rolling back to revision r1"
    );
    assert_eq!(first.acknowledged, [(RequestKind::Abort, ack)]);
    // Read again, acknowledged: nothing, even once the abort is retried.
    let again = decide(Some(&spec), Some(&first.status), &rollout(false, 30));
    assert_eq!(again.step, ManualControl::default());
    assert!(again.acknowledged.is_empty());
    assert_eq!(again.status, first.status);
}

#[test]
fn stale_and_unneeded_requests_do_nothing() {
    // (case, spec, rollout, result, message)
    let cases: [(&str, Value, Rollout<'_>, RequestResult, &str); 5] = [
        (
            "another revision",
            json!({"abort": {"requestedTime": Time(at(10)), "revision": "r1"}}),
            rollout(false, 20),
            RequestResult::Stale,
            "made for revision r1, not the update revision r2",
        ),
        (
            "before the rollout started",
            json!({"abort": request(-5)}),
            rollout(false, 20),
            RequestResult::Stale,
            "made at 2023-11-14T22:13:15Z, before the rollout of revision r2 started at 2023-11-14T22:13:20Z",
        ),
        (
            "already aborted",
            json!({"abort": request(10)}),
            rollout(true, 20),
            RequestResult::Unneeded,
            "the rollout of revision r2 is already aborted",
        ),
        (
            "nothing to abort",
            json!({"abort": request(10)}),
            Rollout {
                abort_would: AbortAction::Proceed,
                current: Some("r2"),
                ..rollout(false, 20)
            },
            RequestResult::Unneeded,
            "revision r2 is the current revision: there is nothing to abort",
        ),
        (
            "a retry of a rollout not aborted",
            json!({"retry": request(10)}),
            rollout(false, 20),
            RequestResult::Unneeded,
            "the rollout of revision r2 is not aborted",
        ),
    ];
    for (case, spec, rollout, result, message) in cases {
        let decision = decide(Some(&control(spec)), Some(&started()), &rollout);
        assert_eq!(decision.step, ManualControl::default(), "{case}");
        assert!(!decision.retry, "{case}");
        let [(_, ack)] = decision.acknowledged.as_slice() else {
            panic!("{case}: {:?}", decision.acknowledged);
        };
        assert_eq!(
            (ack.result, ack.message.as_str()),
            (result, message),
            "{case}"
        );
    }
}

#[test]
fn a_new_template_makes_earlier_requests_stale() {
    let spec = control(json!({"abort": request(10)}));
    let moved = Rollout {
        previous_update: Some("r1"),
        ..rollout(false, 20)
    };
    let decision = decide(Some(&spec), Some(&started()), &moved);
    assert_eq!(decision.status.revision_start_time, Some(Time(at(20))));
    assert_eq!(decision.step.abort, None);
    assert_eq!(
        decision.status.abort.map(|a| a.result),
        Some(RequestResult::Stale)
    );
    // A request naming the new revision is not stale, whenever made.
    let named = control(json!({"abort": {"requestedTime": Time(at(10)), "revision": "r2"}}));
    let decision = decide(Some(&named), Some(&started()), &moved);
    assert!(decision.step.abort.is_some());
}

#[test]
fn a_retry_clears_the_abort_and_the_later_request_wins() {
    let retry = control(json!({"retry": request(30)}));
    let decision = decide(Some(&retry), Some(&started()), &rollout(true, 40));
    assert!(decision.retry);
    assert_eq!(
        decision.status.retry.map(|a| a.message),
        Some("the rollout of revision r2 starts again".to_owned())
    );
    // Both new: an abort after the retry aborts again (the abort stays).
    let both = control(json!({"retry": request(30), "abort": request(35)}));
    let decision = decide(Some(&both), Some(&started()), &rollout(true, 40));
    assert!(!decision.retry && decision.step.abort.is_none());
    let kinds: Vec<RequestKind> = decision.acknowledged.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, [RequestKind::Retry, RequestKind::Abort]);
    // A retry after the abort, on a rollout not aborted: the abort acts,
    // the retry undoes it.
    let both = control(json!({"abort": request(30), "retry": request(35)}));
    let decision = decide(Some(&both), Some(&started()), &rollout(false, 40));
    assert!(!decision.retry && decision.step.abort.is_none());
}

#[test]
fn a_pause_is_a_state_and_a_promotion_names_its_clusters() {
    let spec = control(json!({"paused": {"time": Time(at(5)), "by": "bob"},
                              "promote": {"requestedTime": Time(at(10)), "clusters": ["c2", "c1"]}}));
    let decision = decide(Some(&spec), Some(&started()), &rollout(false, 20));
    assert!(decision.step.paused);
    assert!(pause_changed(Some(&started()), &decision.status));
    assert_eq!(
        decision.status.paused.as_ref().map(Pause::who).as_deref(),
        Some("by bob")
    );
    assert_eq!(
        decision.step.promote.map(|p| p.clusters),
        Some(["c1".to_owned(), "c2".to_owned()].into())
    );
    let again = decide(Some(&spec), Some(&decision.status), &rollout(false, 30));
    assert!(again.step.paused && again.step.promote.is_none());
    assert!(!pause_changed(Some(&decision.status), &again.status));
    // Resumed: the pause is gone from the status.
    let resumed = decide(None, Some(&again.status), &rollout(false, 40));
    assert!(!resumed.step.paused);
    assert!(pause_changed(Some(&again.status), &resumed.status));
    let all = control(json!({"promote": {"requestedTime": Time(at(50))}}));
    let decision = decide(Some(&all), Some(&resumed.status), &rollout(false, 60));
    let promotion = decision.step.promote.expect("a promotion");
    assert!(promotion.clusters.is_empty() && promotion.includes("c9"));
    assert_eq!(promotion.who, "by an operator");
}
