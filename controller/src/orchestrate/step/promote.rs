//! The promote phase: an operator's promotion (`spec.control.promote`)
//! ends the wait of the clusters it names, after the validations and
//! before the decision. A cluster whose validation is still in progress
//! gets a SUCCEEDED verdict naming the operator; a cluster that succeeded
//! and soaks is soaked. Either is persisted on its work
//! ([`PROMOTED_ANNOTATION`], with the verdict), so it holds in later
//! steps. A FAILED verdict, a failed or progressing work, are left as they
//! are: a promotion never makes a failure a success.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use kube::ResourceExt;

use super::{PlacementStep, StepState, View};
use crate::api::ManifestWork;
use crate::api::annotations::PROMOTED_ANNOTATION;
use crate::hooks::Hooks;
use crate::orchestrate::observe::{self, Observed, Verdict};
use crate::orchestrate::world::World;
use crate::rollout::RolloutStatus;
use crate::rollout::work_status::{self, ValidationResult};

/// The value of [`PROMOTED_ANNOTATION`] for `revision` at `generation`.
fn marker(revision: &str, generation: i64) -> String {
    format!("{revision}/{generation}")
}

/// Whether an operator promoted `work` on `revision` (at its generation).
pub(super) fn is_promoted(work: &ManifestWork, revision: &str) -> bool {
    let generation = work.metadata.generation.unwrap_or(0);
    work.annotations().get(PROMOTED_ANNOTATION) == Some(&marker(revision, generation))
}

impl<H: Hooks, W: World> PlacementStep<'_, '_, H, W> {
    /// Promote: for each cluster the promotion names that waits (see the
    /// module documentation), the promotion persisted on its work and
    /// folded into the view.
    pub(super) async fn promote(&self, state: &mut StepState, view: &mut View) {
        let Some(promotion) = &self.input.control.promote else {
            return;
        };
        let now = self.input.clock.now();
        let desired = view.desired.hash.clone();
        for cluster in self.order.clusters() {
            if !promotion.includes(cluster) || view.promoted.contains(cluster) {
                continue;
            }
            let (Some(observed), Some(work)) =
                (view.observed.get(cluster), state.works.get(cluster))
            else {
                continue;
            };
            let generation = work.metadata.generation.unwrap_or(0);
            let mut annotations =
                BTreeMap::from([(PROMOTED_ANNOTATION.to_owned(), marker(&desired, generation))]);
            let verdict = match self.waits(observed, now) {
                Wait::Validation => {
                    let verdict = Verdict {
                        result: ValidationResult::Succeeded,
                        message: format!("promoted {}", promotion.who),
                    };
                    annotations
                        .extend(observe::verdict_annotations(&verdict, &desired, generation));
                    Some(verdict)
                }
                Wait::Soak => None,
                Wait::None => continue,
            };
            let name = work.name_any();
            if let Err(err) = self
                .world
                .annotate_work(cluster, &name, annotations.clone())
                .await
            {
                state.outcome.world_errors.push(err);
                continue;
            }
            if let Some(work) = state.works.get_mut(cluster) {
                Arc::make_mut(work)
                    .metadata
                    .annotations
                    .get_or_insert_default()
                    .extend(annotations);
            }
            if let (Some(verdict), Some(observed)) = (verdict, view.observed.get_mut(cluster)) {
                observed.status =
                    work_status::apply_validation(observed.status, ValidationResult::Succeeded);
                state
                    .messages
                    .insert(cluster.clone(), verdict.message.clone());
                observed.verdict = Some(verdict);
            }
            view.promoted.insert(cluster.clone());
            state.outcome.promoted.push(cluster.clone());
        }
    }

    /// What `observed` waits for at `now` that a promotion ends.
    fn waits(&self, observed: &Observed, now: Timestamp) -> Wait {
        match observed.status.status {
            // Not decided: a persisted verdict (FAILED above all) stays.
            RolloutStatus::Validating if observed.verdict.is_none() => Wait::Validation,
            RolloutStatus::Succeeded => {
                let soak = self.target.strategy.config().min_success_time;
                let soaking = observed
                    .status
                    .last_transition_time
                    .is_none_or(|since| since.checked_add(soak).is_ok_and(|end| now < end));
                if !soak.is_zero() && soaking {
                    Wait::Soak
                } else {
                    Wait::None
                }
            }
            _ => Wait::None,
        }
    }
}

/// What a cluster waits for that a promotion ends.
enum Wait {
    /// Its plugin's verdict (INPROGRESS so far).
    Validation,
    /// Its soak (`minSuccessTime`).
    Soak,
    /// Nothing a promotion ends: it progresses, failed, or is done.
    None,
}
