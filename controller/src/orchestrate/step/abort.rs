//! The step's abort: the one under way or asked for at its start, the one a
//! decision asks for, the rollback of every updated cluster at once, and
//! the clusters that count as failing.

use std::collections::{BTreeSet, HashMap};

use crate::hooks::Hooks;
use crate::orchestrate::observe;
use crate::orchestrate::report::{AbortReport, ClusterReport};
use crate::orchestrate::request::RolloutOrder;
use crate::orchestrate::world::World;
use crate::revision::{self, AbortAction};
use crate::rollout::{ClusterRolloutStatus, RollbackPace, RolloutResult, RolloutStatus};

use super::{PlacementStep, StepState, View, existing_statuses, status_of};

impl<H: Hooks, W: World> PlacementStep<'_, '_, H, W> {
    /// The abort action at the start of the step: that of the abort under
    /// way, or of one an operator asks for now (`spec.control.abort`),
    /// which starts here, before any hook of the update revision, just as
    /// an abort a failure starts.
    pub(super) fn abort_at_start(&self, state: &mut StepState) {
        let input = self.input;
        let asked = input
            .control
            .abort
            .as_ref()
            .filter(|_| state.aborted_at.is_none());
        state.action = revision::abort_action(
            state.aborted_at.is_some(),
            asked.is_some(),
            &input.update.hash,
            input.current_hash,
            input.current,
        );
        if let Some(who) = asked.filter(|_| state.action != AbortAction::Proceed) {
            state.abort = Some((
                input.clock.now(),
                AbortReport {
                    placement: self.target.name.to_owned(),
                    action: state.action,
                    failures: Vec::new(),
                    requested: Some(who.clone()),
                },
            ));
        }
    }

    /// Handles an abort the decision asks for; true when the step must
    /// observe again, for the revision rolled back to.
    pub(super) fn abort(&self, state: &mut StepState, view: &View, result: &RolloutResult) -> bool {
        let input = self.input;
        if state.action != AbortAction::Proceed {
            return false;
        }
        let existing = existing_statuses(view, &self.order);
        if !revision::abort_requested(self.target.strategy, result, &existing) {
            return false;
        }
        let next = revision::abort_action(
            false,
            true,
            &input.update.hash,
            input.current_hash,
            input.current,
        );
        if next == AbortAction::Proceed {
            return false;
        }
        state.abort = Some((
            input.clock.now(),
            AbortReport {
                requested: None,
                placement: self.target.name.to_owned(),
                action: next,
                failures: failures(view, result, &self.order, &state.messages),
            },
        ));
        state.action = next;
        next == AbortAction::RollBack
    }

    /// While rolling back at [`RollbackPace::AtOnce`]: every cluster of the
    /// placement whose work is not the restored revision is to roll out now,
    /// whatever the strategy's pace, the failing clusters first. Clusters
    /// with no work yet are left to the engine's decision. Any other pace
    /// or action keeps the decision as it is.
    pub(super) fn restore_at_once(
        &self,
        state: &StepState,
        view: &View,
        mut result: RolloutResult,
    ) -> RolloutResult {
        if state.action != AbortAction::RollBack
            || self.target.strategy.rollback_pace != RollbackPace::AtOnce
        {
            return result;
        }
        let listed: BTreeSet<String> = result
            .clusters_to_rollout
            .iter()
            .map(|c| c.cluster_name.clone())
            .collect();
        for cluster in state.works.keys() {
            if !self.order.contains(cluster)
                || view.observed.contains_key(cluster)
                || listed.contains(cluster)
            {
                continue;
            }
            let mut entry = ClusterRolloutStatus::new(cluster.clone(), RolloutStatus::ToApply);
            if let Some(p) = self.order.position(cluster) {
                entry = entry.in_group(p.group_index, p.group_name.clone());
            }
            result.clusters_to_rollout.push(entry);
        }
        let failing = self.failing(state);
        result.clusters_to_rollout.sort_by_key(|c| {
            (
                !failing.contains(&c.cluster_name),
                self.order
                    .position(&c.cluster_name)
                    .map_or(usize::MAX, |p| p.index),
            )
        });
        result
    }

    /// The clusters that failed the update revision: those the abort of
    /// this step names, and those whose work of the update revision is
    /// `Failed`.
    pub(super) fn failing(&self, state: &StepState) -> BTreeSet<String> {
        let update = &self.input.update.hash;
        let mut failing: BTreeSet<String> = state
            .abort
            .iter()
            .flat_map(|(_, report)| report.failures.iter().map(|c| c.cluster.clone()))
            .collect();
        failing.extend(
            state
                .works
                .iter()
                .filter(|(_, work)| {
                    observe::observe(work, update, self.validation())
                        .is_some_and(|o| o.status.status == RolloutStatus::Failed)
                })
                .map(|(cluster, _)| cluster.clone()),
        );
        failing
    }
}

/// The failed and timed-out clusters of a decision, for the abort report.
fn failures(
    view: &View,
    result: &RolloutResult,
    order: &RolloutOrder,
    messages: &HashMap<String, String>,
) -> Vec<ClusterReport> {
    let timed_out = result
        .clusters_timeout
        .iter()
        .map(|c| (c.clone(), RolloutStatus::TimeOut));
    let failed = view
        .observed
        .iter()
        .filter(|(_, o)| o.status.status == RolloutStatus::Failed)
        .map(|(cluster, o)| (status_of(cluster, o, order), RolloutStatus::Failed));
    let mut list: Vec<ClusterReport> = timed_out
        .chain(failed)
        .map(|(c, status)| ClusterReport {
            message: messages.get(&c.cluster_name).cloned(),
            cluster: c.cluster_name,
            status,
            group_index: c.group_index,
            group_name: c.group_name,
            last_transition_time: c.last_transition_time,
            revision: Some(view.desired.hash.clone()),
        })
        .collect();
    list.sort_by_key(|c| order.position(&c.cluster).map_or(usize::MAX, |p| p.index));
    list.dedup_by(|a, b| a.cluster == b.cluster);
    list
}
