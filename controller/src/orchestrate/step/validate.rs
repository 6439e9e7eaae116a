//! The validate phase: `ValidateRolloutCompletion` for the clusters
//! waiting on their plugin's verdict.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::ResourceExt;
use rollout_proto::v1alpha1::{ValidateResponse, ValidationResult as ProtoValidation};

use super::{PlacementStep, StepState, View, reported};
use crate::hooks::{Call, HookCalls, HookError, Hooks, RolloutRequest};
use crate::orchestrate::observe::{self, Verdict};
use crate::orchestrate::report::{HookFailure, soonest};
use crate::orchestrate::request;
#[cfg(doc)]
use crate::orchestrate::settings::Settings;
use crate::orchestrate::world::{World, WorldError};
use crate::rollout::RolloutStatus;
use crate::rollout::work_status::{self, ValidationResult};

/// A validation to ask for: the cluster, its deadline, and its work's name
/// and generation (to persist the verdict on).
struct Ask {
    cluster: String,
    ends: Option<Timestamp>,
    work: Option<(String, i64)>,
}

/// How one cluster's validation went, from its concurrent task.
struct Validated {
    cluster: String,
    /// The deadline of its validation.
    ends: Option<Timestamp>,
    answer: Result<ValidateResponse, HookError>,
    /// The verdict's annotations and whether writing them succeeded.
    persisted: Option<(BTreeMap<String, String>, Result<(), WorldError>)>,
}

impl<H: Hooks, W: World> PlacementStep<'_, '_, H, W> {
    /// Validate: `ValidateRolloutCompletion` for each `Validating` cluster
    /// not past its deadline (and not asked already in this step),
    /// concurrently; SUCCEEDED and FAILED are persisted on the work and
    /// folded into the view, INPROGRESS asks to come back.
    pub(super) async fn validate(&self, plugin: &str, state: &mut StepState, view: &mut View) {
        let now = self.input.clock.now();
        let asks = self.asks(state, view, now);
        if asks.is_empty() {
            return;
        }
        let lists = request::RolloutStateLists {
            order: &self.order,
            observed: reported(view, &self.order),
            timed_out: Vec::new(),
            to_roll_out: Vec::new(),
            removed: Vec::new(),
        };
        let counts = request::rollout_counts(&lists);
        let requests = self.requests(view, &lists, counts);
        let call = Call {
            plugin,
            trace: self.input.trace,
        };
        let desired = view.desired.hash.as_str();
        let answers: Vec<Validated> = futures::stream::iter(asks)
            .map(|ask| {
                let request = requests.cluster(&ask.cluster);
                self.ask(call, request, ask, desired)
            })
            .buffered(self.limit())
            .collect()
            .await;
        for answer in answers {
            self.fold(state, view, answer, now);
        }
    }

    /// The validations to ask for at `now`: the `Validating` clusters in
    /// rollout order, each once per revision in a step, while their
    /// deadline has not passed.
    fn asks(&self, state: &mut StepState, view: &View, now: Timestamp) -> Vec<Ask> {
        let deadline = self.target.strategy.config().progress_deadline;
        let mut asks: Vec<Ask> = Vec::new();
        for cluster in self.order.clusters() {
            let Some(observed) = view.observed.get(cluster) else {
                continue;
            };
            if observed.status.status != RolloutStatus::Validating
                || !state
                    .validated
                    .insert(format!("{}/{cluster}", view.desired.hash))
            {
                continue;
            }
            // Polled until lastTransitionTime + progressDeadline; after that
            // the engine times the cluster out.
            let since = observed.status.last_transition_time.unwrap_or(now);
            let ends = deadline.map(|d| since.saturating_add(d).unwrap_or(Timestamp::MAX));
            if ends.is_some_and(|ends| now >= ends) {
                continue;
            }
            let work = state
                .works
                .get(cluster)
                .map(|w| (w.name_any(), w.metadata.generation.unwrap_or(0)));
            asks.push(Ask {
                cluster: cluster.clone(),
                ends,
                work,
            });
        }
        asks
    }

    /// One cluster's validation, its verdict persisted on its work when the
    /// answer decides (for revision `desired`).
    async fn ask(
        &self,
        call: Call<'_>,
        request: RolloutRequest,
        ask: Ask,
        desired: &str,
    ) -> Validated {
        let Ask {
            cluster,
            ends,
            work,
        } = ask;
        let answer = self.hooks.validate_rollout_completion(call, request).await;
        let decision = answer
            .as_ref()
            .ok()
            .and_then(|r| decided(r).map(|d| (r, d)));
        let persisted = match (decision, &work) {
            (Some((response, result)), Some((name, generation))) => {
                let verdict = Verdict {
                    result,
                    message: response.message.clone(),
                };
                let annotations = observe::verdict_annotations(&verdict, desired, *generation);
                let written = self
                    .world
                    .annotate_work(&cluster, name, annotations.clone())
                    .await;
                Some((annotations, written))
            }
            _ => None,
        };
        Validated {
            cluster,
            ends,
            answer,
            persisted,
        }
    }

    /// Folds one cluster's validation into the step: a hook error, a
    /// recheck for INPROGRESS, else the verdict on the view (and on the
    /// step's copy of the work when persisted).
    fn fold(&self, state: &mut StepState, view: &mut View, validated: Validated, now: Timestamp) {
        let Validated {
            cluster,
            ends,
            answer,
            persisted,
        } = validated;
        let response = match answer {
            Ok(response) => response,
            Err(error) => {
                state.messages.insert(cluster.clone(), error.to_string());
                state.outcome.hook_errors.push(HookFailure {
                    cluster: Some(cluster),
                    error,
                });
                return;
            }
        };
        if !response.message.is_empty() {
            state
                .messages
                .insert(cluster.clone(), response.message.clone());
        }
        let Some(result) = decided(&response) else {
            // INPROGRESS, or an answer that decides nothing.
            let wait = self.recheck(&response, ends, now);
            state.outcome.requeue_after = soonest(state.outcome.requeue_after, wait);
            return;
        };
        match persisted {
            // Keep the copy in step with the world for the counts.
            Some((annotations, Ok(()))) => {
                if let Some(work) = state.works.get_mut(&cluster) {
                    Arc::make_mut(work)
                        .metadata
                        .annotations
                        .get_or_insert_default()
                        .extend(annotations);
                }
            }
            Some((_, Err(err))) => state.outcome.world_errors.push(err),
            None => {}
        }
        if let Some(observed) = view.observed.get_mut(&cluster) {
            observed.status = work_status::apply_validation(observed.status, result);
            observed.verdict = Some(Verdict {
                result,
                message: response.message,
            });
        }
    }

    /// When to ask again about a cluster still validating: the plugin's
    /// `recheck_after` (else [`Settings::validation_poll`]), never after
    /// the validation's deadline `ends`.
    fn recheck(
        &self,
        response: &ValidateResponse,
        ends: Option<Timestamp>,
        now: Timestamp,
    ) -> Option<Duration> {
        let hint = response
            .recheck_after
            .and_then(|d| Duration::try_from(d).ok())
            .filter(|d| !d.is_zero())
            .unwrap_or(self.input.settings.validation_poll);
        let until_deadline =
            ends.and_then(|ends| Duration::try_from(ends.duration_since(now)).ok());
        soonest(Some(hint), until_deadline)
    }
}

/// The validation result a response decides: SUCCEEDED or FAILED; `None`
/// for INPROGRESS or an answer that decides nothing.
fn decided(response: &ValidateResponse) -> Option<ValidationResult> {
    match ProtoValidation::try_from(response.result) {
        Ok(ProtoValidation::Succeeded) => Some(ValidationResult::Succeeded),
        Ok(ProtoValidation::Failed) => Some(ValidationResult::Failed),
        _ => None,
    }
}
