//! An operator's control of the step (`ManualControl`): the hook sequence
//! of an abort, of the retry after it, and of a pause and its resume.

use super::*;
use crate::orchestrate::Promotion;

/// A Progressive rollout (one at a time) of v2 over c1 and c2, current
/// revision v1, with a plugin and no `abortOnFailure`: c1 has v2 and its
/// validation is INPROGRESS.
async fn c1_validating(hooks: &Script, world: &MemoryWorld) -> Fixture {
    let mut f = Fixture::new(
        strategy(json!({"type": "Progressive", "plugin": "p",
                        "progressive": {"maxConcurrency": 1}})),
        &["c1", "c2"],
    );
    f.current = Some(Revision::of(&template("v1")));
    f.step(hooks, world, at(0)).await;
    agent(world, "c1", "False", false, at(10));
    hooks.answer("c1", proto::ValidationResult::Inprogress, "soaking", None);
    f.step(hooks, world, at(20)).await;
    assert_eq!(applies(world), ["c1"]);
    f
}

#[tokio::test]
async fn an_operator_abort_rolls_back_at_once_and_a_retry_rolls_out_again() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = c1_validating(&hooks, &world).await;
    let v1 = Revision::of(&template("v1"));

    // Aborted by hand while c1 validates, with no abortOnFailure, and
    // paused too (a pause never holds a rollback).
    f.control.abort = Some("by alice (5xx)".into());
    f.control.paused = true;
    hooks.clear();
    let out = f.step(&hooks, &world, at(30)).await;
    // No hook of the update revision any more: straight to the rollback,
    // as after a plugin's FAILED, every request saying aborting.
    assert_eq!(
        hooks.calls(),
        [call(Progress, ""), call(Begin, "c1"), call(Mutate, "c1")]
    );
    for hook in [Progress, Begin, Mutate] {
        let r = &hooks.requests(hook)[0];
        assert!(r.aborting, "{hook} says aborting");
        assert_eq!(r.desired_revision, v1.hash, "{hook} names the old revision");
    }
    assert_eq!(out.aborted_at, Some(at(30)));
    let report = out.abort.as_ref().expect("aborted");
    assert_eq!(report.action, AbortAction::RollBack);
    assert_eq!(report.requested.as_deref(), Some("by alice (5xx)"));
    assert!(report.failures.is_empty());
    let p = &out.placements[0];
    assert!(p.aborting && !p.stopped);
    assert_eq!(p.applied, ["c1"]);
    assert!(p.paused.is_empty());
    let work = world
        .all()
        .into_iter()
        .find(|w| w.namespace().as_deref() == Some("c1"))
        .expect("c1");
    assert_eq!(work.labels()[CONTROLLER_HASH_LABEL], v1.hash);

    // Retried: the abort is cleared (the reconcile does it), and v2 is
    // rolled out again from the first cluster, not aborting.
    f.aborted_at = None;
    f.control = ManualControl::default();
    hooks.clear();
    let out = f.step(&hooks, &world, at(40)).await;
    assert_eq!(
        hooks.calls(),
        [call(Progress, ""), call(Begin, "c1"), call(Mutate, "c1")]
    );
    assert!(
        hooks
            .calls
            .lock()
            .expect("lock")
            .iter()
            .all(|(_, r, _)| !r.aborting)
    );
    assert_eq!(hooks.requests(Begin)[0].desired_revision, f.update.hash);
    assert_eq!(out.abort, None);
    assert_eq!(out.placements[0].applied, ["c1"]);
}

#[tokio::test]
async fn an_operator_abort_without_a_revision_to_restore_stops() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(
        strategy(json!({"type": "All", "plugin": "p"})),
        &["c1", "c2"],
    );
    f.step(&hooks, &world, at(0)).await;
    f.control.abort = Some("by alice".into());
    hooks.clear();
    let out = f.step(&hooks, &world, at(10)).await;
    assert_eq!(
        out.abort.as_ref().map(|a| a.action),
        Some(AbortAction::Stop)
    );
    assert!(out.placements[0].stopped);
    assert_eq!(hooks.calls(), [call(Progress, "")]);
    assert!(hooks.requests(Progress)[0].aborting);
}

#[tokio::test]
async fn a_pause_holds_new_clusters_while_validations_go_on() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = c1_validating(&hooks, &world).await;
    f.control.paused = true;

    // c1's validation goes on while paused, and ends.
    hooks.answer("c1", proto::ValidationResult::Succeeded, "ok", None);
    hooks.clear();
    let out = f.step(&hooks, &world, at(30)).await;
    assert_eq!(hooks.calls(), [call(Validate, "c1"), call(Progress, "")]);
    let p = &out.placements[0];
    assert_eq!(p.count(RolloutStatus::Succeeded), 1);
    // c2 would start now; it waits for the resume.
    assert_eq!(p.paused, ["c2"]);
    assert!(p.applied.is_empty());
    assert_eq!(applies(&world), ["c1"]);
    assert!(!p.aborting);

    hooks.clear();
    let out = f.step(&hooks, &world, at(40)).await;
    assert_eq!(hooks.calls(), [call(Progress, "")]);
    assert_eq!(out.placements[0].paused, ["c2"]);

    // Resumed: c2 starts.
    f.control.paused = false;
    hooks.clear();
    let out = f.step(&hooks, &world, at(50)).await;
    assert_eq!(
        hooks.calls(),
        [call(Progress, ""), call(Begin, "c2"), call(Mutate, "c2")]
    );
    assert_eq!(out.placements[0].applied, ["c2"]);
    assert!(out.placements[0].paused.is_empty());
}

fn promotion(clusters: &[&str]) -> Option<Promotion> {
    Some(Promotion {
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
        who: "by alice (canary looks fine)".into(),
    })
}

fn work_of(world: &MemoryWorld, cluster: &str) -> ManifestWork {
    world
        .all()
        .into_iter()
        .find(|w| w.namespace().as_deref() == Some(cluster))
        .expect("the cluster has a work")
}

#[tokio::test]
async fn a_promotion_ends_an_inprogress_validation_for_the_clusters_it_names() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = c1_validating(&hooks, &world).await;

    // Promoting another cluster leaves c1 validating.
    f.control.promote = promotion(&["c2"]);
    hooks.clear();
    let out = f.step(&hooks, &world, at(30)).await;
    assert!(out.placements[0].promoted.is_empty());
    assert_eq!(hooks.calls(), [call(Validate, "c1"), call(Progress, "")]);

    // Promoting c1: its plugin still says INPROGRESS, the operator ends the
    // wait, and c2 starts in the same step.
    f.control.promote = promotion(&["c1"]);
    hooks.clear();
    let out = f.step(&hooks, &world, at(40)).await;
    assert_eq!(
        hooks.calls(),
        [
            call(Validate, "c1"),
            call(Progress, ""),
            call(Begin, "c2"),
            call(Mutate, "c2")
        ]
    );
    let p = &out.placements[0];
    assert_eq!(p.promoted, ["c1"]);
    assert_eq!(p.applied, ["c2"]);
    let c1 = p.clusters.iter().find(|c| c.cluster == "c1").expect("c1");
    assert_eq!(c1.status, RolloutStatus::Succeeded);
    assert_eq!(
        c1.message.as_deref(),
        Some("promoted by alice (canary looks fine)")
    );
    // ProgressRollout tells the plugin c1 succeeded.
    let progress = &hooks.requests(Progress)[0];
    assert_eq!(progress.counts.map(|c| c.succeeded), Some(1));
    let annotations = work_of(&world, "c1").annotations().clone();
    assert_eq!(annotations[VALIDATION_ANNOTATION], "Succeeded");
    assert!(annotations.contains_key("rollout-hooks.io/promoted"));

    // It sticks: the plugin is not asked about c1 again.
    f.control = ManualControl::default();
    hooks.clear();
    let out = f.step(&hooks, &world, at(50)).await;
    assert_eq!(hooks.calls(), [call(Progress, "")]);
    assert_eq!(out.placements[0].count(RolloutStatus::Succeeded), 1);
}

#[tokio::test]
async fn a_promotion_never_makes_a_failed_validation_a_success() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = c1_validating(&hooks, &world).await;
    hooks.answer(
        "c1",
        proto::ValidationResult::Failed,
        "smoke test failed",
        None,
    );
    f.control.promote = promotion(&[]);
    hooks.clear();
    let out = f.step(&hooks, &world, at(30)).await;
    let p = &out.placements[0];
    assert!(p.promoted.is_empty());
    assert_eq!(p.count(RolloutStatus::Failed), 1);
    assert!(p.applied.is_empty());
    assert_eq!(
        work_of(&world, "c1").annotations()[VALIDATION_ANNOTATION],
        "Failed"
    );
    // Promoted again with the verdict persisted: still failed.
    hooks.clear();
    let out = f.step(&hooks, &world, at(40)).await;
    assert!(out.placements[0].promoted.is_empty());
    assert_eq!(out.placements[0].count(RolloutStatus::Failed), 1);
}

#[tokio::test]
async fn a_promotion_ends_a_soak() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let f = Fixture::new(
        strategy(json!({"type": "Progressive",
                        "progressive": {"maxConcurrency": 1, "minSuccessTime": "60s"}})),
        &["c1", "c2"],
    );
    let mut f = f;
    f.step(&hooks, &world, at(0)).await;
    agent(&world, "c1", "False", false, at(10));
    // c1 succeeded at 10 and soaks until 70: c2 waits.
    let out = f.step(&hooks, &world, at(20)).await;
    assert!(out.placements[0].applied.is_empty());
    f.control.promote = promotion(&[]);
    let out = f.step(&hooks, &world, at(30)).await;
    let p = &out.placements[0];
    assert_eq!(p.promoted, ["c1"]);
    assert_eq!(p.applied, ["c2"]);
    assert!(
        work_of(&world, "c1")
            .annotations()
            .contains_key("rollout-hooks.io/promoted")
    );
}
