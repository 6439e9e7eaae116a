//! One placement's step: the phases (observe, validate, decide, act,
//! prune) as methods over one [`StepState`]; the validate phase is in
//! [`validate`], act and prune in [`act`], the abort in [`abort`].

mod abort;
mod act;
mod promote;
mod validate;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use jiff::Timestamp;
use kube::ResourceExt;
use rollout_proto::v1alpha1::RolloutCounts;

use crate::api::ManifestWork;
use crate::api::annotations::SPEC_HASH_ANNOTATION;
use crate::api::labels::CONTROLLER_HASH_LABEL;
use crate::hooks::{Call, Hooks, StateDetail, encode_state};
use crate::orchestrate::conflict;
use crate::orchestrate::input::{DeployInput, PlacementTarget};
use crate::orchestrate::observe::{self, Observed};
use crate::orchestrate::report::{
    AbortReport, ClusterReport, PlacementOutcome, WorkCounts, soonest,
};
use crate::orchestrate::request::{self, Reported, RequestScope, Requests, RolloutOrder};
use crate::orchestrate::works::{count_works, is_deleting, kept, placement_of, work_name};
use crate::orchestrate::world::World;
use crate::revision::{AbortAction, Revision};
use crate::rollout::work_status::{self, Validation};
use crate::rollout::{self, ClusterRolloutStatus, RolloutResult, RolloutStatus};

/// The statuses of one placement's clusters for one desired revision.
struct View {
    desired: Revision,
    /// Whether the requests say `aborting`.
    aborting: bool,
    /// Observed status per cluster in the placement (work of the desired
    /// revision).
    observed: BTreeMap<String, Observed>,
    /// The clusters an operator promoted on the desired revision (their
    /// work's generation): a soak is over for the engine.
    promoted: BTreeSet<String>,
}

/// What the phases of one placement's step share and build up.
struct StepState {
    /// The placement's works, one per cluster, as the step last wrote them.
    works: BTreeMap<String, Arc<ManifestWork>>,
    outcome: PlacementOutcome,
    /// Per cluster: the validation message or the error of a hook call.
    messages: HashMap<String, String>,
    /// `revision/cluster` already validated in this step.
    validated: BTreeSet<String>,
    action: AbortAction,
    /// When and why an abort started in this step.
    abort: Option<(Timestamp, AbortReport)>,
    /// When the abort under way before this step started.
    aborted_at: Option<Timestamp>,
    /// The clusters whose work another controller wrote for a revision
    /// (see [`PlacementStep::adopt`]).
    adopted: BTreeSet<String>,
}

pub(super) struct PlacementStep<'s, 'a, H, W> {
    hooks: &'s H,
    world: &'s W,
    input: &'s DeployInput<'a>,
    target: &'s PlacementTarget<'a>,
    plugin: Option<&'s str>,
    order: RolloutOrder,
}

impl<'s, 'a, H: Hooks, W: World> PlacementStep<'s, 'a, H, W> {
    /// The step of `target`.
    pub(super) fn new(
        hooks: &'s H,
        world: &'s W,
        input: &'s DeployInput<'a>,
        target: &'s PlacementTarget<'a>,
    ) -> Self {
        PlacementStep {
            hooks,
            world,
            input,
            target,
            plugin: target.strategy.plugin.as_deref(),
            order: RolloutOrder::new(target.strategy, target.groups),
        }
    }
}

impl<H: Hooks, W: World> PlacementStep<'_, '_, H, W> {
    /// Runs the step for the placement (`aborted_at`: when the abort under
    /// way started, if one is): observe, validate, decide (again from
    /// observe after an abort turns into a rollback), act, prune; returns
    /// its outcome and, when an abort started here, when and why.
    pub(super) async fn run(
        &self,
        aborted_at: Option<Timestamp>,
    ) -> (PlacementOutcome, Option<(Timestamp, AbortReport)>) {
        let mut state = self.begin(aborted_at);
        let (mut view, result) = loop {
            let mut view = self.observe(&state);
            if self.acting()
                && let Some(plugin) = self.plugin
            {
                self.validate(plugin, &mut state, &mut view).await;
            }
            if self.acting() {
                self.promote(&mut state, &mut view).await;
            }
            let result = self.decide(&view);
            if self.abort(&mut state, &view, &result) {
                // Observe again, for the revision rolled back to.
                continue;
            }
            let result = self.restore_at_once(&state, &view, result);
            break (view, result);
        };
        // A stopped rollout did not observe again, yet it is aborting.
        view.aborting = state.action != AbortAction::Proceed;
        state.outcome.desired_revision = view.desired.hash.clone();
        state.outcome.aborting = view.aborting;
        state.outcome.stopped = state.action == AbortAction::Stop;
        let removed = self.removed(&state);
        if self.acting() {
            self.act(&mut state, &view, &result, &removed).await;
            self.prune(&mut state, &removed).await;
        }
        let abort = state.abort.take();
        (self.report(state, &view, result), abort)
    }

    fn acting(&self) -> bool {
        self.target.hold.is_none()
    }

    fn validation(&self) -> Validation {
        if self.plugin.is_some() {
            Validation::Plugin
        } else {
            Validation::None
        }
    }

    fn limit(&self) -> usize {
        self.input.settings.hook_concurrency.max(1)
    }

    fn call(&self) -> Option<Call<'_>> {
        self.plugin.map(|plugin| Call {
            plugin,
            trace: self.input.trace,
        })
    }

    /// The step's starting state: the placement's works, one per cluster
    /// (the kept one, when another controller left a second one: the
    /// deploy deletes the others), and the abort action so far.
    fn begin(&self, aborted_at: Option<Timestamp>) -> StepState {
        let input = self.input;
        let mut works: BTreeMap<String, Arc<ManifestWork>> = BTreeMap::new();
        let mut adopted = BTreeSet::new();
        let own_name = work_name(input.owner.namespace, input.owner.name, self.target.name);
        let of_placement = input
            .works
            .iter()
            .filter(|w| placement_of(w) == Some(self.target.name) && !is_deleting(w));
        for (cluster, work) in kept(of_placement, &own_name) {
            let work = match self.adopt(work) {
                Some(work) => {
                    adopted.insert(cluster.clone());
                    work
                }
                None => Arc::clone(work),
            };
            works.insert(cluster, work);
        }
        let conflicts = conflict::conflicts_of(works.iter().map(|(c, w)| (c, w.as_ref())));
        let mut state = StepState {
            works,
            outcome: PlacementOutcome {
                name: self.target.name.to_owned(),
                desired_revision: input.update.hash.clone(),
                aborting: false,
                stopped: false,
                held: !self.acting(),
                paused: Vec::new(),
                promoted: Vec::new(),
                clusters: Vec::new(),
                result: RolloutResult::default(),
                works: WorkCounts::default(),
                updated: 0,
                at_update: 0,
                hook_errors: Vec::new(),
                world_errors: Vec::new(),
                conflicts,
                applied: Vec::new(),
                deleted: Vec::new(),
                requeue_after: None,
            },
            messages: HashMap::new(),
            validated: BTreeSet::new(),
            action: AbortAction::Proceed,
            abort: None,
            aborted_at,
            adopted,
        };
        self.abort_at_start(&mut state);
        state
    }

    /// A work another controller wrote (OCM's own ManifestWorkReplicaSet
    /// controller: the owner and placement labels, no `controller-hash`, no
    /// spec hash) whose spec is the template of the update revision or of
    /// the current one counts as on that revision: moving from OCM's
    /// controller does not roll the fleet out again. It counts as written,
    /// never as validated: no verdict is made up for it, so with a plugin
    /// the cluster is `Validating` until the plugin decides. Nothing is
    /// written but that verdict; the work is taken over when a new revision
    /// is rolled out to it.
    ///
    /// Only a work this controller never applied is adopted (no `Apply`
    /// entry of its field manager): one it applied that lost its labels
    /// (OCM's controller strips them with a merge patch, which leaves no
    /// field manager of its own behind) is not on any revision, and is
    /// rolled out to, and validated, again.
    fn adopt(&self, work: &ManifestWork) -> Option<Arc<ManifestWork>> {
        if observe::work_revision(work).is_some()
            || work.annotations().contains_key(SPEC_HASH_ANNOTATION)
            || conflict::own_apply_time(work).is_some()
        {
            return None;
        }
        let spec = observe::spec_hash_of(&work.spec);
        let input = self.input;
        let revision = std::iter::once(input.update)
            .chain(input.current)
            .find(|r| observe::spec_hash_of(&r.template) == spec)?;
        let mut adopted = ManifestWork::clone(work);
        adopted
            .metadata
            .labels
            .get_or_insert_default()
            .insert(CONTROLLER_HASH_LABEL.to_owned(), revision.hash.clone());
        adopted
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(SPEC_HASH_ANNOTATION.to_owned(), spec);
        Some(Arc::new(adopted))
    }

    /// Observe: each cluster's status for the revision the action rolls
    /// out.
    fn observe(&self, state: &StepState) -> View {
        let desired = match (state.action, self.input.current) {
            (AbortAction::RollBack, Some(current)) => current.clone(),
            _ => self.input.update.clone(),
        };
        let validation = self.validation();
        View {
            observed: state
                .works
                .iter()
                .filter(|(cluster, _)| self.order.contains(cluster))
                .filter_map(|(cluster, work)| {
                    let observed = observe::observe(work, &desired.hash, validation)?;
                    let adopted = state.adopted.contains(cluster);
                    Some((cluster.clone(), validation_clock(observed, adopted)))
                })
                .collect(),
            promoted: state
                .works
                .iter()
                .filter(|(cluster, work)| {
                    self.order.contains(cluster) && promote::is_promoted(work, &desired.hash)
                })
                .map(|(cluster, _)| cluster.clone())
                .collect(),
            aborting: state.action != AbortAction::Proceed,
            desired,
        }
    }

    /// The requests of one phase: the state encoded once (when the target
    /// wants it) and the counts, shared by every request.
    fn requests<'v>(
        &'v self,
        view: &'v View,
        state: &request::RolloutStateLists<'_>,
        counts: RolloutCounts,
    ) -> Requests<'v> {
        Requests::new(
            RequestScope {
                mwrs_name: self.input.owner.name,
                mwrs_namespace: self.input.owner.namespace,
                placement: self.target.name,
                desired_revision: &view.desired.hash,
                aborting: view.aborting,
                plugin_config: self.target.strategy.plugin_config.as_ref(),
            },
            &self.order,
            match self.target.state_detail {
                StateDetail::Full => Some(encode_state(&request::rollout_state(state))),
                StateDetail::Counts => None,
            },
            counts,
        )
    }

    /// Decide: the engine over the view, at the time read now (the
    /// validations before it may have taken a while).
    fn decide(&self, view: &View) -> RolloutResult {
        let existing = existing_statuses(view, &self.order);
        rollout::decide(
            self.target.strategy,
            self.target.groups,
            &existing,
            self.input.clock.now(),
        )
    }

    /// The clusters with a work that left the placement.
    fn removed(&self, state: &StepState) -> Vec<Reported> {
        let validation = self.validation();
        state
            .works
            .iter()
            .filter(|(cluster, _)| !self.order.contains(cluster))
            .map(|(cluster, work)| removed_status(cluster, work, validation))
            .collect()
    }

    /// The placement's outcome after the phases.
    fn report(&self, state: StepState, view: &View, result: RolloutResult) -> PlacementOutcome {
        let StepState {
            works,
            mut outcome,
            messages,
            ..
        } = state;
        let order = &self.order;
        let timed_out: HashMap<&str, &ClusterRolloutStatus> = result
            .clusters_timeout
            .iter()
            .map(|c| (c.cluster_name.as_str(), c))
            .collect();
        for cluster in order.clusters() {
            let position = order.position(cluster);
            let (status, since) =
                match (timed_out.get(cluster.as_str()), view.observed.get(cluster)) {
                    (Some(t), _) => (RolloutStatus::TimeOut, t.last_transition_time),
                    (None, Some(o)) => (o.status.status, o.status.last_transition_time),
                    (None, None) => (RolloutStatus::ToApply, None),
                };
            outcome.clusters.push(ClusterReport {
                cluster: cluster.clone(),
                status,
                group_index: position.map_or(0, |p| p.group_index),
                group_name: position.map(|p| p.group_name.clone()).unwrap_or_default(),
                last_transition_time: since,
                revision: works
                    .get(cluster)
                    .and_then(|w| observe::work_revision(w))
                    .map(str::to_owned),
                message: messages.get(cluster).cloned().or_else(|| {
                    view.observed
                        .get(cluster)
                        .and_then(|o| o.verdict.as_ref())
                        .map(|v| v.message.clone())
                        .filter(|m| !m.is_empty())
                }),
            });
        }
        let update = &self.input.update.hash;
        outcome.works = count_works(works.values().map(AsRef::as_ref), &view.desired.hash);
        outcome.at_update = works
            .iter()
            .filter(|(c, w)| order.contains(c) && observe::is_current(w, update))
            .count();
        outcome.updated = works
            .iter()
            .filter(|(c, _)| order.contains(c))
            .filter_map(|(_, w)| observe::observe(w, update, self.validation()))
            .filter(|o| o.status.status == RolloutStatus::Succeeded)
            .count();
        if !outcome.hook_errors.is_empty() || !outcome.world_errors.is_empty() {
            outcome.requeue_after = soonest(
                outcome.requeue_after,
                Some(self.input.settings.error_requeue),
            );
        }
        outcome.requeue_after = soonest(outcome.requeue_after, result.recheck_after);
        outcome.result = result;
        outcome
    }
}

/// The engine's input: the observed status of each cluster of the
/// placement, with its group; a promoted cluster that succeeded has
/// soaked long since.
fn existing_statuses(view: &View, order: &RolloutOrder) -> Vec<ClusterRolloutStatus> {
    view.observed
        .iter()
        .map(|(cluster, o)| {
            let mut status = status_of(cluster, o, order);
            if view.promoted.contains(cluster) && status.status == RolloutStatus::Succeeded {
                status.last_transition_time = Some(Timestamp::UNIX_EPOCH);
            }
            status
        })
        .collect()
}

fn status_of(cluster: &str, observed: &Observed, order: &RolloutOrder) -> ClusterRolloutStatus {
    let mut status = ClusterRolloutStatus::new(cluster, observed.status.status);
    status.last_transition_time = observed.status.last_transition_time;
    if let Some(p) = order.position(cluster) {
        status = status.in_group(p.group_index, p.group_name.clone());
    }
    status
}

fn reported(view: &View, order: &RolloutOrder) -> Vec<Reported> {
    view.observed
        .iter()
        .map(|(cluster, o)| Reported::new(status_of(cluster, o, order), view.desired.hash.clone()))
        .collect()
}

fn timed_out_reported(result: &RolloutResult, view: &View) -> Vec<Reported> {
    result
        .clusters_timeout
        .iter()
        .map(|c| Reported::new(c.clone(), view.desired.hash.clone()))
        .collect()
}

/// `observed`, and for an adopted work not yet decided by the plugin, with
/// no time: its progress ended before this controller saw it, so its
/// validation has no progress deadline (the engine times out from the
/// time a status has).
fn validation_clock(mut observed: Observed, adopted: bool) -> Observed {
    if adopted && observed.verdict.is_none() && observed.status.status == RolloutStatus::Validating
    {
        observed.status.last_transition_time = None;
    }
    observed
}

/// A cluster that left the placement, with its work's status (for its own
/// revision; no validation).
fn removed_status(cluster: &str, work: &ManifestWork, validation: Validation) -> Reported {
    let revision = observe::work_revision(work).unwrap_or_default().to_owned();
    let status = observe::observe(work, &revision, validation)
        .map(|o| o.status)
        .unwrap_or(work_status::WorkStatus {
            status: RolloutStatus::ToApply,
            last_transition_time: None,
        });
    let mut entry = ClusterRolloutStatus::new(cluster, status.status);
    entry.last_transition_time = status.last_transition_time;
    Reported::new(entry, revision)
}
