//! The act and prune phases: `ProgressRollout`, then per cluster
//! `BeginRollout`, `MutateManifestWork` and the apply; the works of
//! clusters that left the placement deleted.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use futures::StreamExt;
use kube::ResourceExt;
use rollout_telemetry::throttle::{LOG_INTERVAL, Throttle};

use super::{PlacementStep, StepState, View, reported, timed_out_reported};
use crate::api::ManifestWork;
use crate::hooks::{Call, HookCalls, HookError, HookKind, Hooks};
use crate::orchestrate::conflict::{self, WorkConflict};
use crate::orchestrate::report::{HookFailure, soonest};
use crate::orchestrate::request::{self, Reported, Requests};
#[cfg(doc)]
use crate::orchestrate::settings::Settings;
use crate::orchestrate::splice::work_json;
use crate::orchestrate::works::{desired_work, finish_work, read_mutated, work_name};
use crate::orchestrate::world::{World, WorldError};
use crate::revision::Revision;
use crate::rollout::{ClusterRolloutStatus, RolloutResult, RolloutStatus};

/// The fail-open warnings of MutateManifestWork, per set of plugins.
static FAILED_OPEN_LOG: LazyLock<Throttle> = LazyLock::new(|| Throttle::new(LOG_INTERVAL));

/// One cluster's work to roll out.
struct Job {
    cluster: String,
    work: ManifestWork,
    /// Whether the apply takes over fields another manager owns.
    force: bool,
}

/// How one cluster's roll-out went, from its concurrent task.
enum RolledOut {
    Applied(Box<ManifestWork>),
    /// Applied without the plugin's mutation, its hook having failed (a
    /// rollback past its grace).
    AppliedUnmutated(Box<ManifestWork>, HookError),
    HookFailed(HookError),
    WriteFailed(WorldError),
}

/// What the mutations of one act phase share: the call, the requests and
/// the template's JSON, encoded once for the step (each work's JSON is its
/// own metadata around it).
struct Mutate<'v> {
    call: Call<'v>,
    requests: Requests<'v>,
    spec_json: Vec<u8>,
}

impl<H: Hooks, W: World> PlacementStep<'_, '_, H, W> {
    /// Act: `ProgressRollout` once, then for each cluster to roll out
    /// BeginRollout, MutateManifestWork and the apply, in that order per
    /// cluster, up to [`Settings::hook_concurrency`] clusters at once.
    /// Without a plugin, only the applies.
    pub(super) async fn act(
        &self,
        state: &mut StepState,
        view: &View,
        result: &RolloutResult,
        removed: &[Reported],
    ) {
        let to_roll_out = self.to_roll_out(state, view, result);
        let progressed = match self.call() {
            Some(call) => {
                let lists = request::RolloutStateLists {
                    order: &self.order,
                    observed: reported(view, &self.order),
                    timed_out: timed_out_reported(result, view),
                    to_roll_out: to_roll_out
                        .iter()
                        .map(|c| Reported::new((*c).clone(), view.desired.hash.clone()))
                        .collect(),
                    removed: removed.to_vec(),
                };
                let requests = self.requests(view, &lists, request::rollout_counts(&lists));
                if let Err(error) = self
                    .hooks
                    .progress_rollout(call, requests.placement())
                    .await
                {
                    let failure = HookFailure {
                        cluster: None,
                        error,
                    };
                    state.outcome.hook_errors.push(failure);
                    return;
                }
                Some((call, requests))
            }
            None => None,
        };
        if state.outcome.stopped {
            return;
        }
        let mutate = match progressed {
            Some((call, requests)) => match serde_json::to_vec(&view.desired.template) {
                Ok(spec_json) => Some(Mutate {
                    call,
                    requests,
                    spec_json,
                }),
                Err(err) => {
                    let error = WorldError::encoding(String::new(), String::new(), err);
                    state.outcome.world_errors.push(error);
                    return;
                }
            },
            None => None,
        };
        let jobs = self.jobs(state, view, &to_roll_out);
        let unmutated = view.aborting && self.grace_over(state);
        let done: Vec<(String, RolledOut)> = futures::stream::iter(jobs)
            .map(|job| self.roll_out(job, mutate.as_ref(), &view.desired, unmutated))
            .buffered(self.limit())
            .collect()
            .await;
        for (cluster, rolled) in done {
            record(state, cluster, rolled);
        }
    }

    /// The clusters the decision rolls out now: `ToApply`, without a work
    /// of the desired revision, and whose work may be applied.
    fn to_roll_out<'r>(
        &self,
        state: &mut StepState,
        view: &View,
        result: &'r RolloutResult,
    ) -> Vec<&'r ClusterRolloutStatus> {
        let candidates = result
            .clusters_to_rollout
            .iter()
            .filter(|c| c.status == RolloutStatus::ToApply)
            // A work of the desired revision applied but not yet seen by
            // the agent is waiting, not to roll out again.
            .filter(|c| !view.observed.contains_key(&c.cluster_name));
        // A pause holds new clusters of the update revision; a rollback,
        // which restores, goes on.
        if self.input.control.paused && !view.aborting {
            state.outcome.paused = candidates.map(|c| c.cluster_name.clone()).collect();
            return Vec::new();
        }
        candidates
            .filter(|c| self.may_apply(state, &c.cluster_name, &view.desired.hash))
            .collect()
    }

    /// The desired work of each cluster to roll out, under its existing
    /// name, forced over a work another field manager owns.
    fn jobs(
        &self,
        state: &StepState,
        view: &View,
        to_roll_out: &[&ClusterRolloutStatus],
    ) -> Vec<Job> {
        to_roll_out
            .iter()
            .map(|c| {
                let cluster = c.cluster_name.clone();
                let name = self.name_for(&state.works, &cluster);
                let owner = &self.input.owner;
                let work = desired_work(owner, self.target.name, &cluster, &name, &view.desired);
                let force = state
                    .works
                    .get(&cluster)
                    .is_some_and(|w| conflict::foreign_owned(w));
                Job {
                    cluster,
                    work,
                    force,
                }
            })
            .collect()
    }

    /// Whether `cluster`'s work may be applied for `desired` now: not when
    /// another field manager wrote it and its back-off is not over
    /// ([`conflict::decide`]); then the step asks to come back when it
    /// ends. A conflicting work taken over is marked so.
    fn may_apply(&self, state: &mut StepState, cluster: &str, desired: &str) -> bool {
        let Some(work) = state.works.get(cluster) else {
            return true;
        };
        let now = self.input.clock.now();
        let backoff = self.input.settings.conflict_backoff;
        match conflict::decide(cluster, work, desired, now, backoff) {
            conflict::Decision::Apply { .. } => {
                for c in state
                    .outcome
                    .conflicts
                    .iter_mut()
                    .filter(|c| c.cluster == cluster)
                {
                    c.left_alone = false;
                }
                true
            }
            conflict::Decision::LeaveAlone { retry_after, .. } => {
                state.outcome.requeue_after =
                    soonest(state.outcome.requeue_after, Some(retry_after));
                false
            }
        }
    }

    /// Prune: deletes the works of clusters that left the placement.
    pub(super) async fn prune(&self, state: &mut StepState, removed: &[Reported]) {
        for entry in removed {
            let cluster = &entry.status.cluster_name;
            let Some(work) = state.works.get(cluster) else {
                continue;
            };
            let name = work.name_any();
            match self.world.delete_work(cluster, &name).await {
                Ok(()) => {
                    state.outcome.deleted.push(cluster.clone());
                    state.works.remove(cluster);
                }
                Err(err) => state.outcome.world_errors.push(err),
            }
        }
    }

    /// The name of `cluster`'s work: the existing one's, else a new one.
    fn name_for(&self, works: &BTreeMap<String, Arc<ManifestWork>>, cluster: &str) -> String {
        works.get(cluster).map_or_else(
            || {
                work_name(
                    self.input.owner.namespace,
                    self.input.owner.name,
                    self.target.name,
                )
            },
            |w| w.name_any(),
        )
    }

    /// Whether the rollback under way has waited for its plugin longer
    /// than [`Settings::rollback_hook_grace`] since its abort started.
    fn grace_over(&self, state: &StepState) -> bool {
        let started = state.abort.as_ref().map(|(at, _)| *at).or(state.aborted_at);
        let grace = jiff::SignedDuration::try_from(self.input.settings.rollback_hook_grace)
            .unwrap_or(jiff::SignedDuration::MAX);
        started.is_some_and(|at| self.input.clock.now().duration_since(at) >= grace)
    }

    /// One cluster's roll-out: with a plugin, BeginRollout,
    /// MutateManifestWork and the apply, in that order; without, the apply.
    /// With `unmutated` (a rollback past its grace), a failed hook does not
    /// hold the cluster: the desired work is applied as it is, the failure
    /// reported with it.
    async fn roll_out(
        &self,
        job: Job,
        mutate: Option<&Mutate<'_>>,
        desired: &Revision,
        unmutated: bool,
    ) -> (String, RolledOut) {
        let Job {
            cluster,
            work,
            force,
        } = job;
        let owner = &self.input.owner;
        let mut skipped = None;
        let mutated = match mutate {
            Some(mutate) => match self.mutate(mutate, &cluster, &work).await {
                Ok(mutated) => mutated,
                Err(RolledOut::HookFailed(error)) if unmutated => {
                    skipped = Some(error);
                    None
                }
                Err(failed) => return (cluster, failed),
            },
            None => None,
        };
        let work = finish_work(&work, mutated, owner, self.target.name, &desired.hash);
        let rolled = match (self.apply(work, force).await, skipped) {
            (RolledOut::Applied(stored), Some(error)) => RolledOut::AppliedUnmutated(stored, error),
            (rolled, _) => rolled,
        };
        (cluster, rolled)
    }

    /// BeginRollout, then MutateManifestWork with `work` as JSON: the
    /// mutated work, `None` when the plugins left it unchanged.
    async fn mutate(
        &self,
        mutate: &Mutate<'_>,
        cluster: &str,
        work: &ManifestWork,
    ) -> Result<Option<ManifestWork>, RolledOut> {
        let call = mutate.call;
        let request = mutate.requests.cluster(cluster);
        if let Err(error) = self.hooks.begin_rollout(call, request.clone()).await {
            return Err(RolledOut::HookFailed(error));
        }
        let json = work_json(work, &mutate.spec_json).map_err(|err| {
            RolledOut::WriteFailed(WorldError::encoding(
                cluster.to_owned(),
                work.name_any(),
                err,
            ))
        })?;
        let mutation = self
            .hooks
            .mutate_manifest_work(call, request, json.into())
            .await
            .map_err(RolledOut::HookFailed)?;
        if !mutation.failed_open.is_empty() {
            let failed_open = mutation.failed_open.join(",");
            // Once a minute per set of plugins, however many clusters.
            if let Some(left_out) =
                FAILED_OPEN_LOG.admit(&failed_open, tokio::time::Instant::now().into_std())
            {
                tracing::warn!(
                    cluster,
                    failed_open,
                    left_out,
                    "plugins failed open on MutateManifestWork (left_out: lines of the same plugins not logged since the last)"
                );
            }
        }
        match mutation.work.as_deref().map(|b| read_mutated(work, b)) {
            None => Ok(None),
            Some(Ok(mutated)) => Ok(Some(mutated)),
            Some(Err(refused)) => Err(RolledOut::HookFailed(HookError {
                hook: HookKind::MutateManifestWork,
                code: tonic::Code::Internal,
                message: refused.to_string(),
                origin: crate::hooks::Origin::Answer,
            })),
        }
    }

    async fn apply(&self, work: ManifestWork, force: bool) -> RolledOut {
        match self.world.apply_work(work, force).await {
            Ok(stored) => RolledOut::Applied(Box::new(stored)),
            Err(err) => RolledOut::WriteFailed(err),
        }
    }
}

/// Folds one cluster's roll-out into the step: the work applied, a hook
/// failure, or a write refused (a 409 conflict is also reported as one).
fn record(state: &mut StepState, cluster: String, rolled: RolledOut) {
    match rolled {
        RolledOut::Applied(stored) => {
            state.outcome.applied.push(cluster.clone());
            state.works.insert(cluster, Arc::new(*stored));
        }
        RolledOut::AppliedUnmutated(stored, error) => {
            record(state, cluster.clone(), RolledOut::Applied(stored));
            record(state, cluster, RolledOut::HookFailed(error));
        }
        RolledOut::HookFailed(error) => {
            state.messages.insert(cluster.clone(), error.to_string());
            state.outcome.hook_errors.push(HookFailure {
                cluster: Some(cluster),
                error,
            });
        }
        RolledOut::WriteFailed(err) if err.is_conflict() => {
            state.outcome.conflicts.retain(|c| c.cluster != cluster);
            state.outcome.conflicts.push(WorkConflict {
                cluster,
                work: err.name.clone(),
                managers: Vec::new(),
                at: None,
                refused: Some(err.source.to_string()),
                left_alone: true,
            });
            state.outcome.world_errors.push(err);
        }
        RolledOut::WriteFailed(err) => state.outcome.world_errors.push(err),
    }
}
