//! The rollout of one ManifestWorkReplicaSet, one reconcile step at a time:
//! the design's sequence of hook calls (docs/design.md, "The proposal") over
//! the pure engine, the plugin [`Hooks`] and a [`World`] that
//! holds the ManifestWorks.
//!
//! [`deploy`] is shared by `rollout-controller run` (the [`World`] is the
//! Kubernetes API) and the simulator (the [`World`] is an in-memory fleet).
//! For each placement the step runs its phases, each a method over one
//! step state:
//!
//! 1. **observe**: takes the placement's ManifestWorks and derives each
//!    cluster's status for the desired revision ([`observe`]): a work of
//!    another revision, or one changed by hand, counts as not there; with a
//!    plugin a work done progressing is `Validating` until the plugin
//!    decided;
//! 2. **validate**: calls `ValidateRolloutCompletion` for each `Validating`
//!    cluster whose `lastTransitionTime + progressDeadline` has not passed;
//!    SUCCEEDED and FAILED are persisted on the work
//!    ([`World::annotate_work`]) so they stick; INPROGRESS asks to come back
//!    after its `recheck_after` (or [`Settings::validation_poll`]);
//! 3. **decide**: runs the engine ([`crate::rollout::decide`]) at the time read
//!    then ([`Clock`]), and handles the abort ([`crate::revision::abort_action`]):
//!    with abort on and a failure, the desired revision becomes the current
//!    one and phases 1–3 run again for it, every request then saying
//!    `aborting = true`; with no revision to go back to, nothing more is
//!    rolled out;
//! 4. **act**: calls `ProgressRollout` once, then for each cluster to roll
//!    out (`ToApply`) that does not already have the desired work:
//!    `BeginRollout`, `MutateManifestWork` with the desired ManifestWork as
//!    JSON, then applies the mutated work ([`World::apply_work`]);
//! 5. **prune**: deletes the works of clusters that left the placement.
//!
//! Works of placements no longer in the spec are deleted first, and so is
//! a second work of a placement for one cluster (another controller's
//! leftover, such as OCM's own, which names its works after the
//! ManifestWorkReplicaSet): one work per cluster, the one on this
//! controller's revision kept.
//!
//! The calls of the validate and act phases run concurrently, up to
//! [`Settings::hook_concurrency`] clusters at once, each cluster's calls in
//! the order above; a phase ends when all its calls have, so validations
//! come before the decision and the decision before `ProgressRollout`. The
//! outcome lists clusters in rollout order whatever order the calls finished
//! in. Every request carries the placement's `counts`; the per-cluster
//! `rollout_status` only goes to a target that wants it
//! ([`PlacementTarget::state_detail`]), encoded once per phase and shared by
//! the phase's requests ([`request::Requests`]).
//!
//! Without a plugin no hook is called and no cluster is ever `Validating`:
//! OCM's behaviour. A hook that fails stops its cluster for this step (a
//! failed `ProgressRollout` stops every cluster of the placement); the
//! failures come back in [`PlacementOutcome::hook_errors`] for the
//! `Progressing` condition, and the step asks to come back after
//! [`Settings::error_requeue`]. A placement on [`PlacementTarget::hold`]
//! (its plugin is not loaded) is only observed: no hook, no write.
//!
//! One concept per file: the [`World`] and its [`WorldError`] (`world.rs`),
//! the [`Clock`] (`clock.rs`), the [`Settings`] (`settings.rs`), the step's
//! input (`input.rs`) and outcome (`report.rs`), the works written (names,
//! labels, counts: `works.rs`), a work's JSON around a spec encoded once
//! (`splice.rs`), and the phases of one placement's step (`step/`: observe,
//! decide and the abort in `mod.rs`, `validate.rs`, `act.rs` with prune).

mod clock;
pub(crate) mod conflict;
mod input;
pub mod memory;
pub mod observe;
mod report;
pub mod request;
mod settings;
mod splice;
mod step;
mod trace;
mod works;
mod world;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use kube::ResourceExt;

pub use clock::Clock;
pub(crate) use clock::SystemClock;
pub(crate) use conflict::FIELD_MANAGER;
pub(crate) use input::Promotion;
pub use input::{DeployInput, ManualControl, Owner, PlacementTarget};
pub use report::AbortReport;
pub use report::ClusterReport;
pub(crate) use report::soonest;
pub use report::{DeployOutcome, HookFailure, PlacementOutcome};
// Tests across the crate build reports by hand.
#[cfg(test)]
pub(crate) use report::WorkCounts;
pub use settings::{DEFAULT_HOOK_CONCURRENCY, Settings};
pub use works::work_name;
pub use works::{desired_work, finish_work};
pub(crate) use works::{is_deleting, placement_of};
pub use world::{World, WorldError};
pub(crate) use world::{WorldAction, WorldErrorKind};

use crate::hooks::Hooks;
use step::PlacementStep;

/// Runs one step of the rollout (see the module documentation). Never
/// fails: every hook and write failure is in the outcome.
pub async fn deploy<H: Hooks, W: World>(
    hooks: &H,
    world: &W,
    input: &DeployInput<'_>,
) -> DeployOutcome {
    let mut outcome = DeployOutcome {
        placements: Vec::new(),
        aborted_at: None,
        abort: None,
        deleted_stale: Vec::new(),
        world_errors: Vec::new(),
        requeue_after: None,
    };

    // Works whose placement left the spec (or that name none), and a
    // second work of a placement for one cluster (another controller's
    // leftover): one work per cluster.
    let in_spec: BTreeSet<&str> = input.spec_placements.iter().map(String::as_str).collect();
    let mut stale: Vec<(String, String)> = input
        .works
        .iter()
        .filter(|w| !is_deleting(w) && !placement_of(w).is_some_and(|p| in_spec.contains(p)))
        .map(|w| (w.namespace().unwrap_or_default(), w.name_any()))
        .collect();
    for target in input.placements {
        let own_name = work_name(input.owner.namespace, input.owner.name, target.name);
        stale.extend(works::duplicates(input.works, target.name, &own_name));
    }
    for (namespace, name) in stale {
        match world.delete_work(&namespace, &name).await {
            Ok(()) => outcome.deleted_stale.push((namespace, name)),
            Err(err) => {
                outcome.requeue_after =
                    soonest(outcome.requeue_after, Some(input.settings.error_requeue));
                outcome.world_errors.push(err);
            }
        }
    }

    let mut aborted_at = input.aborted_at;
    for target in input.placements {
        let step = PlacementStep::new(hooks, world, input, target);
        let (placement, abort) = step.run(aborted_at).await;
        if let Some((at, report)) = abort {
            aborted_at = Some(at);
            outcome.aborted_at = Some(at);
            outcome.abort = Some(report);
        }
        outcome.requeue_after = soonest(outcome.requeue_after, placement.requeue_after);
        outcome.placements.push(placement);
    }
    trace::record_step(input, &outcome);
    outcome
}
