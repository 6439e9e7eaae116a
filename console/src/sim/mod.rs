//! `rollout-controller simulate`: the whole rollout of one
//! ManifestWorkReplicaSet over an in-memory fleet, through the real hook
//! path.
//!
//! The simulated ManifestWorkReplicaSet `default/web` has one placement,
//! `fleet`, over N clusters `cluster-001`, … in G decision groups
//! ([`fleet`]). Its template just changed: the fleet runs the previous
//! revision (an Argo Rollout of `web:1.0`, applied, done and validated) and
//! the update revision (`web:1.1`) is rolled out; with `--first-rollout`
//! the fleet starts empty instead. Each step is one reconcile, as `run`
//! does it:
//!
//! 1. the work agent ([`fleet::Agent`]) moves the works whose latency
//!    passed (done, or Degraded on a `--fail` cluster);
//! 2. the revision status begins ([`RevisionStatus::begin`]);
//! 3. [`orchestrate::deploy`], the very code `run` uses, runs one step over
//!    the [`FleetWorld`], calling the gateway ([`Recorder`] around any
//!    [`Hooks`]): validation, the engine's decision, the abort and
//!    rollback, ProgressRollout, BeginRollout + MutateManifestWork + apply;
//! 4. the revision status finishes ([`RevisionStatus::finish`]):
//!    `currentRevision` moves on once every cluster succeeded, an abort is
//!    remembered;
//! 5. the step is reported ([`report::StepReport`]) and the simulated
//!    clock moves on to the next interesting time ([`clock`]).
//!
//! It ends when every cluster runs the update revision (`Succeeded`), when
//! an abort rolled every updated cluster back or stopped the rollout
//! (`Aborted`), or when nothing can happen any more: no recheck, no work
//! transition pending (`Failed`, or `Aborted` after an abort).

pub mod api;
pub(crate) mod clock;
pub(crate) mod command;
pub(crate) mod config;
pub(crate) mod diff;
pub mod fleet;
pub(crate) mod record;
pub(crate) mod report;
pub mod template;
pub(crate) mod terminal;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use opentelemetry::trace::TraceContextExt;
use rollout_proto::code_name;
use rollout_proto::v1alpha1::{InitializeRequest, ValidationResult};
use thiserror::Error;

pub use command::{SimulateError, SimulateOptions, simulate};
pub use config::{Config, ConfigError, StrategyFlags};
pub(crate) use fleet::FleetWorld;
pub use record::Recorder;
use record::{Record, Recorded};
pub use report::{JsonLines, Outcome, Plan, Report, StepReport, Summary};
use rollout_controller::api::ManifestWork;
use rollout_controller::api::annotations::VALIDATION_ANNOTATION;
use rollout_controller::hooks::{
    Call, HookCalls, HookCounts, HookError, HookKind, Hooks, Origin, Persistence, StateDetail,
    TlsFailure,
};
use rollout_controller::orchestrate::observe::{self, Verdict};
use rollout_controller::orchestrate::{
    self, AbortReport, DeployInput, DeployOutcome, ManualControl, Owner, PlacementOutcome,
    PlacementTarget, World, WorldError,
};
use rollout_controller::revision::{AbortAction, Revision, RevisionStatus};
use rollout_controller::rollout::work_status::ValidationResult as Decided;
use rollout_controller::rollout::{RolloutStatus, Strategy};
use rollout_controller::telemetry::Tracing;

/// Why a simulation could not run to its end.
#[derive(Debug, Error)]
pub enum SimError {
    /// The plugin's `Initialize` through the gateway failed before the
    /// first step.
    #[error("Initialize of plugin {plugin:?} failed: {error}")]
    Initialize {
        /// The plugin or pipeline.
        plugin: String,
        /// The error.
        error: HookError,
    },
    /// The gateway stopped answering during the rollout.
    #[error("the gateway stopped answering: {0}")]
    GatewayLost(HookError),
    /// A plugin refused the rollout's input with a permanent error (such
    /// as `INVALID_ARGUMENT` to a bad `pluginConfig`): nothing in a
    /// simulation changes that input, so the run ends at the step that
    /// got it instead of calling the plugin again and again.
    #[error(
        "a plugin refused the rollout: {0}. The same input gets the same answer: fix the \
         rollout's pluginConfig (or the plugin) and run again"
    )]
    PluginRefused(HookError),
    /// The in-memory world failed (it does not, short of a bug).
    #[error(transparent)]
    World(#[from] WorldError),
    /// The rollout did not end within the steps allowed.
    #[error("the rollout did not end within {0} steps (--max-steps)")]
    TooManySteps(usize),
    /// Progress could not be written.
    #[error("writing the progress: {0}")]
    Output(#[from] std::io::Error),
    /// The simulated API server (`--crds`) refused an object.
    #[error("the simulated API server: {0}")]
    Api(#[from] api::ApiError),
}

impl SimError {
    /// Whether `error` says the gateway itself cannot be reached (or its
    /// TLS handshake failed): an `UNAVAILABLE` the client made for want of
    /// an answer, not one the gateway answered (a plugin behind it down,
    /// its circuit open).
    pub(crate) fn is_unreachable(error: &HookError) -> bool {
        error.code == tonic::Code::Unavailable && !error.origin.answered()
    }

    /// What went wrong, and what to do about it, for a gateway at
    /// `gateway`: a failed TLS handshake, an unreachable gateway and a
    /// plugin it does not know are explained; any other error is said as
    /// it is.
    pub(crate) fn advice(&self, gateway: &str) -> String {
        match self {
            SimError::Initialize { error, .. } | SimError::GatewayLost(error)
                if matches!(error.origin, Origin::Tls(_)) =>
            {
                tls_advice(gateway, error)
            }
            SimError::Initialize { error, .. } | SimError::GatewayLost(error)
                if SimError::is_unreachable(error) =>
            {
                format!(
                    "cannot reach the rollout gateway at {gateway} ({}). Start one \
                     (rollout-gateway --config FILE) or point --gateway at it; without --plugin \
                     no gateway is needed.",
                    error.message
                )
            }
            SimError::Initialize { plugin, error } if error.code == tonic::Code::NotFound => {
                format!(
                    "the gateway at {gateway} has no plugin or pipeline named {plugin:?} ({}). \
                     Add it to the gateway's registry, or name another with --plugin.",
                    error.message
                )
            }
            other => other.to_string(),
        }
    }
}

/// What to do about a failed TLS handshake with the gateway at `gateway`
/// (`error.origin` is [`Origin::Tls`]).
fn tls_advice(gateway: &str, error: &HookError) -> String {
    let plaintext = gateway.replacen("https://", "http://", 1);
    let what = match error.origin {
        Origin::Tls(TlsFailure::NotTls) => {
            format!("If it serves plaintext, use --gateway {plaintext}.")
        }
        _ => format!(
            "Check --gateway-ca (the CA of the gateway's certificate) and --client-cert; a \
             plaintext gateway is reached at {plaintext}."
        ),
    };
    format!(
        "the rollout gateway at {gateway} cannot be used: {}. {what}",
        error.message
    )
}

pub(crate) use crate::format::describe_strategy;

/// The annotations on `work`'s manifests (the union, a later manifest
/// winning).
pub(crate) fn manifest_annotations(work: &ManifestWork) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::new();
    for manifest in work.spec.workload.manifests.iter() {
        if let Some(map) = manifest
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.as_object())
        {
            for (key, value) in map {
                let value = value
                    .as_str()
                    .map_or_else(|| value.to_string(), str::to_owned);
                annotations.insert(key.clone(), value);
            }
        }
    }
    annotations
}

/// How the report names a revision: where its template came from, or the
/// built-in template's image.
fn label(template: &Option<template::Template>, image: &str) -> String {
    template
        .as_ref()
        .map_or_else(|| image.to_owned(), |t| t.label.clone())
}

/// What the plugins changed in the works of a step: one report per work
/// they changed, in the records' order.
fn mutation_reports(records: &[Record]) -> Vec<report::MutationReport> {
    records
        .iter()
        .filter_map(|record| {
            let Recorded::Mutation {
                mutated_by,
                failed_open,
                sent,
                answered: Some(answered),
            } = &record.answer
            else {
                return None;
            };
            let (patch, diff) = match diff::diff(sent, answered) {
                Ok(Some(d)) => (d.patch, d.text),
                Ok(None) => return None,
                Err(err) => (
                    serde_json::Value::Null,
                    format!("cannot show the change: {err}"),
                ),
            };
            Some(report::MutationReport {
                cluster: record.cluster.clone(),
                aborting: record.aborting,
                mutated_by: mutated_by.clone(),
                failed_open: failed_open.clone(),
                patch,
                diff,
            })
        })
        .collect()
}

/// The first failed call in `records` whose error `matches`.
fn failure(records: &[Record], matches: impl Fn(&HookError) -> bool) -> Option<HookError> {
    records.iter().find_map(|r| match &r.answer {
        Recorded::Failed(e) if matches(e) => Some(e.clone()),
        _ => None,
    })
}

/// What a step's hook calls come to, gathered in the records' order (the
/// events keep it).
#[derive(Default)]
struct Tally<'r> {
    hook_calls: HookCounts,
    validations: report::ValidationCounts,
    verdicts: Vec<report::Verdict>,
    events: Vec<report::Event>,
    /// Failed calls.
    errors: usize,
    /// The mutate call of each cluster.
    mutations: HashMap<&'r str, &'r Record>,
}

impl<'r> Tally<'r> {
    fn of(records: &'r [Record]) -> Tally<'r> {
        let mut tally = Tally::default();
        for record in records {
            tally.count(record);
            tally.answer(record);
        }
        tally
    }

    fn count(&mut self, record: &'r Record) {
        let calls = &mut self.hook_calls;
        match record.hook {
            HookKind::Initialize => {}
            HookKind::BeginRollout => calls.begin_rollout += 1,
            HookKind::ProgressRollout => calls.progress_rollout += 1,
            HookKind::ValidateRolloutCompletion => calls.validate_rollout_completion += 1,
            HookKind::MutateManifestWork => {
                calls.mutate_manifest_work += 1;
                self.mutations.insert(&record.cluster, record);
            }
        }
    }

    fn answer(&mut self, record: &Record) {
        match &record.answer {
            Recorded::Validation {
                result, message, ..
            } => self.validation(record, *result, message),
            Recorded::Failed(error) => {
                self.errors += 1;
                self.events.push(report::Event::HookError {
                    hook: error.hook.as_str().to_owned(),
                    cluster: (!record.cluster.is_empty()).then(|| record.cluster.clone()),
                    code: code_name(error.code).to_owned(),
                    message: error.message.clone(),
                });
            }
            Recorded::Done | Recorded::Mutation { .. } => {}
        }
    }

    /// The hook failures of the step that no call ended with: answers the
    /// controller refused (a mutated work it cannot read or that changes
    /// its executor), reported as failed calls of their hook and cluster.
    fn refusals(&mut self, placement: &PlacementOutcome) {
        for failure in &placement.hook_errors {
            let (hook, cluster) = (failure.error.hook.as_str(), &failure.cluster);
            let reported = self.events.iter().any(|e| {
                matches!(e, report::Event::HookError { hook: h, cluster: c, .. }
                    if h == hook && c == cluster)
            });
            if !reported {
                self.errors += 1;
                self.events.push(report::Event::HookError {
                    hook: hook.to_owned(),
                    cluster: cluster.clone(),
                    code: code_name(failure.error.code).to_owned(),
                    message: failure.error.message.clone(),
                });
            }
        }
    }

    fn validation(&mut self, record: &Record, result: ValidationResult, message: &str) {
        let verdict = |result| report::Verdict {
            cluster: record.cluster.clone(),
            revision: record.revision.clone(),
            result,
            message: message.to_owned(),
        };
        match result {
            ValidationResult::Succeeded => {
                self.validations.succeeded += 1;
                self.verdicts.push(verdict(RolloutStatus::Succeeded));
            }
            ValidationResult::Failed => {
                self.validations.failed += 1;
                self.verdicts.push(verdict(RolloutStatus::Failed));
                self.events.push(report::Event::ValidationFailed {
                    cluster: record.cluster.clone(),
                    message: message.to_owned(),
                });
            }
            _ => {
                let v = &mut self.validations;
                v.in_progress += 1;
                if v.in_progress_message.is_none() && !message.is_empty() {
                    v.in_progress_message = Some(message.to_owned());
                }
            }
        }
    }
}

/// One simulated rollout.
struct Simulation<'a, H> {
    config: &'a Config,
    hooks: &'a Recorder<H>,
    telemetry: &'a Tracing,
    world: FleetWorld,
    clusters: Vec<String>,
    groups: Vec<rollout_controller::rollout::ClusterGroup>,
    index: HashMap<String, usize>,
    update: Revision,
    previous: Revision,
    work_name: String,
    labels: BTreeMap<String, String>,
    status: RevisionStatus,
    /// Clusters whose time-out was reported.
    timed_out: BTreeSet<String>,
    /// Applies per cluster.
    applies: BTreeMap<String, usize>,
    /// Applies while aborting.
    rollback_applies: usize,
    hook_errors: usize,
    abort: Option<report::AbortSummary>,
    /// What the plugin's `Initialize` asked for.
    state_detail: StateDetail,
    /// The placement's strategy: as given, or read back from the
    /// simulated API server.
    strategy: Strategy,
    /// The simulated API server (`--crds`).
    api: Option<api::SimApi>,
}

/// Runs the whole rollout (see the module documentation), reporting to
/// `report`. With a plugin, `Initialize` goes first: a gateway that cannot
/// be reached, or a plugin it does not know, fails here. Fails too when
/// the gateway stops answering, or the rollout does not end within
/// [`Config::max_steps`]; every other hook failure is reported and retried
/// as `run` would.
pub async fn run<H: Hooks>(
    config: &Config,
    hooks: &Recorder<H>,
    telemetry: &Tracing,
    gateway: Option<&str>,
    report: &mut dyn Report,
) -> Result<Summary, SimError> {
    let clusters = fleet::cluster_names(config.clusters);
    let groups = fleet::decision_groups(&clusters, config.groups);
    let api = config.api.as_ref().map(api::SimApi::new).transpose()?;
    let strategy = match &api {
        Some(api) => api.strategy()?,
        None => config.strategy.clone(),
    };
    // Each cluster's cluster_index: its place in the engine's order.
    let order = rollout_controller::orchestrate::request::RolloutOrder::new(&strategy, &groups);
    let index = order
        .clusters()
        .iter()
        .enumerate()
        .map(|(i, c)| (c.clone(), i + 1))
        .collect();
    let spec = |template: &Option<template::Template>, image: &str| {
        template
            .as_ref()
            .map_or_else(|| config::template(image), |t| t.spec.clone())
    };
    let update = Revision::of(&spec(&config.template, config::UPDATE_IMAGE));
    let previous = Revision::of(&spec(&config.previous_template, config::PREVIOUS_IMAGE));
    let world = FleetWorld::new(
        fleet::AgentConfig {
            delay: config.agent_delay,
            latency: config.apply_latency,
            jitter: config.jitter,
            seed: config.seed,
            fail: config.fail.clone(),
            failing_revision: update.hash.clone(),
            progressing: config.agent_progressing,
        },
        config.start,
    );
    let mut sim = Simulation {
        config,
        hooks,
        telemetry,
        world,
        clusters,
        groups,
        index,
        work_name: orchestrate::work_name(config::NAMESPACE, config::NAME, config::PLACEMENT),
        labels: BTreeMap::new(),
        status: RevisionStatus::default(),
        timed_out: BTreeSet::new(),
        applies: BTreeMap::new(),
        rollback_applies: 0,
        hook_errors: 0,
        abort: None,
        state_detail: StateDetail::Full,
        update,
        previous,
        strategy,
        api,
    };
    let plugin = match sim.strategy.plugin.clone() {
        Some(plugin) => {
            let answer = sim.initialize(&plugin).await?;
            Some((plugin, answer))
        }
        None => None,
    };
    sim.seed()?;
    report.begin(&sim.plan(plugin, gateway))?;
    sim.rollout(report).await
}

impl<H: Hooks> Simulation<'_, H> {
    fn owner(&self) -> Owner<'_> {
        Owner {
            namespace: config::NAMESPACE,
            name: config::NAME,
            label: config::OWNER_LABEL,
            labels: &self.labels,
        }
    }

    /// `Initialize` through the gateway: what the plugin answered, as
    /// `name version`.
    async fn initialize(&mut self, plugin: &str) -> Result<String, SimError> {
        let trace = self
            .telemetry
            .reconcile_span(config::NAMESPACE, config::NAME);
        let call = Call {
            plugin,
            trace: &trace,
        };
        let request = InitializeRequest {
            controller_version: env!("CARGO_PKG_VERSION").to_owned(),
            hub_name: String::new(),
        };
        let response = self
            .hooks
            .initialize(call, request)
            .await
            .map_err(|error| SimError::Initialize {
                plugin: plugin.to_owned(),
                error,
            })?;
        // Not part of the rollout's records.
        self.hooks.take();
        self.state_detail = StateDetail::of(&response);
        Ok(format!("{}, version {}", response.name, response.version))
    }

    /// The fleet before the rollout: every cluster runs the previous
    /// revision, applied, done and (with a plugin) validated an hour ago;
    /// `status.currentRevision` names it. A first rollout starts empty.
    fn seed(&mut self) -> Result<(), SimError> {
        if self.config.first_rollout {
            return Ok(());
        }
        let since = self
            .config
            .start
            .checked_sub(Duration::from_secs(3600))
            .unwrap_or(self.config.start);
        let owner = self.owner();
        let works: Vec<ManifestWork> = self
            .clusters
            .iter()
            .map(|cluster| {
                let desired = orchestrate::desired_work(
                    &owner,
                    config::PLACEMENT,
                    cluster,
                    &self.work_name,
                    &self.previous,
                );
                let mut work = orchestrate::finish_work(
                    &desired,
                    None,
                    &owner,
                    config::PLACEMENT,
                    &self.previous.hash,
                );
                work.metadata.generation = Some(1);
                if self.strategy.plugin.is_some() {
                    let verdict = Verdict {
                        result: Decided::Succeeded,
                        message: "validated by the previous rollout".into(),
                    };
                    work.metadata.annotations.get_or_insert_default().extend(
                        observe::verdict_annotations(&verdict, &self.previous.hash, 1),
                    );
                }
                work
            })
            .collect();
        for work in works {
            self.world.seed(work, since);
        }
        self.status = RevisionStatus {
            current: Some(self.previous.hash.clone()),
            update: Some(self.previous.hash.clone()),
            aborted_time: None,
        };
        // What the controller wrote when it rolled the previous revision out.
        if let Some(api) = &mut self.api {
            api.write_status(&self.status, None)?;
        }
        Ok(())
    }

    fn plan(&self, plugin: Option<(String, String)>, gateway: Option<&str>) -> report::Plan {
        let mut latency = terminal::duration(self.config.apply_latency);
        if self.config.jitter > 0.0 {
            latency = format!("{latency} ± {:.0}%", self.config.jitter * 100.0);
        }
        report::Plan {
            owner: format!("{}/{}", config::NAMESPACE, config::NAME),
            placement: config::PLACEMENT.to_owned(),
            clusters: self.clusters.clone(),
            groups: self.groups.len(),
            strategy: describe_strategy(&self.strategy),
            gateway: plugin.as_ref().and(gateway.map(str::to_owned)),
            plugin,
            update: (
                self.update.hash.clone(),
                label(&self.config.template, config::UPDATE_IMAGE),
            ),
            previous: (!self.config.first_rollout).then(|| {
                (
                    self.previous.hash.clone(),
                    label(&self.config.previous_template, config::PREVIOUS_IMAGE),
                )
            }),
            latency,
            delay: terminal::duration(self.config.agent_delay),
            fail: self.config.fail.iter().cloned().collect(),
            tracing: self.telemetry.is_exporting(),
            api_warnings: self
                .api
                .as_ref()
                .map(api::SimApi::warnings)
                .unwrap_or_default(),
            diffs: self.config.template.is_some(),
        }
    }

    async fn rollout(&mut self, report: &mut dyn Report) -> Result<Summary, SimError> {
        let mut clock = clock::Clock::new(self.config.start);
        let mut step = 0;
        loop {
            if step >= self.config.max_steps {
                return Err(SimError::TooManySteps(self.config.max_steps));
            }
            step += 1;
            let now = clock.now();
            self.world.set_now(now);
            let degraded = self.world.advance(now);
            let trace = self
                .telemetry
                .reconcile_span(config::NAMESPACE, config::NAME);
            let outcome = self.step(now, &trace).await?;
            let records = self.hooks.take();
            if let Some(lost) = failure(&records, SimError::is_unreachable) {
                return Err(SimError::GatewayLost(lost));
            }
            let refused = failure(&records, |e| e.persistence() == Persistence::Permanent);
            // `deploy` reports every placement it is given, and it is
            // given one.
            let placement = outcome
                .placements
                .first()
                .expect("deploy reports the simulated placement");
            let mut report_step = self.step_report(step, now, &clock, placement, &records);
            report_step.trace_id = trace.span().span_context().trace_id().to_string();
            report_step.events.splice(
                0..0,
                degraded
                    .into_iter()
                    .map(|cluster| report::Event::WorkDegraded { cluster }),
            );
            if let Some(abort) = &outcome.abort {
                self.record_abort(step, abort, placement, &mut report_step);
            }
            let wait = clock::plan(
                now,
                outcome.requeue_after,
                self.world.next_transition(),
                self.config.tick,
                report_step.clusters.validating > 0,
            );
            let result = self.result(placement, wait.is_some());
            if result.is_none()
                && let Some(wait) = wait
            {
                report_step.next_in_seconds = Some(wait.duration.as_secs_f64());
                report_step.real_wait = wait.real;
            }
            report.step(&report_step)?;
            if let Some(error) = refused {
                return Err(SimError::PluginRefused(error));
            }
            if let Some(result) = result {
                let summary = self.summary(result, step, &clock, placement);
                report.end(&summary)?;
                return Ok(summary);
            }
            if let Some(wait) = wait {
                clock.wait(wait).await;
            }
        }
    }

    /// Remembers the abort that started in `step` for the summary, and
    /// reports it as the step's last event.
    fn record_abort(
        &mut self,
        step: usize,
        abort: &AbortReport,
        placement: &PlacementOutcome,
        report_step: &mut StepReport,
    ) {
        let action = format!("{:?}", abort.action);
        let failures: Vec<report::Failure> = abort
            .failures
            .iter()
            .map(|f| report::Failure {
                cluster: f.cluster.clone(),
                status: f.status,
                message: f.message.clone(),
            })
            .collect();
        self.abort = Some(report::AbortSummary {
            step,
            action: action.clone(),
            failures: failures.clone(),
            trace_id: report_step.trace_id.clone(),
        });
        report_step.events.push(report::Event::Abort {
            action,
            from: self.update.hash.clone(),
            to: (abort.action == AbortAction::RollBack).then(|| placement.desired_revision.clone()),
            failures,
        });
    }

    /// How the rollout ended, if it did: as [`Self::ended`] says, or, when
    /// nothing is left to wait for, `Aborted` after an abort and `Failed`
    /// otherwise.
    fn result(&self, placement: &PlacementOutcome, waiting: bool) -> Option<Outcome> {
        self.ended(placement).or_else(|| {
            (!waiting).then(|| {
                if self.status.is_aborted() {
                    Outcome::Aborted
                } else {
                    Outcome::Failed
                }
            })
        })
    }

    /// One reconcile at `now`.
    async fn step(
        &mut self,
        now: Timestamp,
        trace: &opentelemetry::Context,
    ) -> Result<DeployOutcome, SimError> {
        let began = tokio::time::Instant::now();
        let works = self.world.list_works(config::OWNER_LABEL).await?;
        // As `run` does: the spec and the revisions as the API server
        // gives them back.
        if let Some(api) = &self.api {
            self.strategy = api.strategy()?;
            self.status = api.revision_status()?;
        }
        let start = RevisionStatus::begin(&self.status, &self.update.hash);
        let current = start
            .current
            .as_deref()
            .filter(|hash| *hash == self.previous.hash)
            .map(|_| &self.previous);
        let spec_placements = [config::PLACEMENT.to_owned()];
        let targets = [PlacementTarget {
            name: config::PLACEMENT,
            strategy: &self.strategy,
            groups: &self.groups,
            hold: None,
            state_detail: self.state_detail,
        }];
        let input = DeployInput {
            owner: self.owner(),
            spec_placements: &spec_placements,
            placements: &targets,
            works: &works,
            update: &self.update,
            current_hash: start.current.as_deref(),
            current,
            aborted_at: start.aborted_time,
            clock: &now,
            settings: &self.config.settings,
            trace,
            control: ManualControl::default(),
        };
        let outcome = orchestrate::deploy(self.hooks, &self.world, &input).await;
        if let Some(metrics) = &self.config.metrics {
            metrics.record_rollout(&format!("{}/{}", config::NAMESPACE, config::NAME), &outcome);
            // A step is one reconcile; the simulated world's calls cannot fail.
            metrics.record_reconcile(began.elapsed(), None);
        }
        let update_complete = outcome
            .placements
            .iter()
            .all(|p| !p.aborting && p.complete());
        self.status = start.finish(outcome.aborted_at, update_complete);
        if let Some(api) = &mut self.api {
            let old = api.bound()?.status.unwrap_or_default();
            let summary = outcome.placements.first().map(|p| {
                let mut summary = rollout_controller::reconcile::status::placement_summary(p);
                rollout_controller::reconcile::status::set_abort_failures(
                    &mut summary,
                    outcome.abort.as_ref(),
                    old.placements_summary.first(),
                    self.status.is_aborted(),
                );
                summary
            });
            api.write_status(&self.status, summary)?;
        }
        for p in &outcome.placements {
            for cluster in &p.applied {
                *self.applies.entry(cluster.clone()).or_default() += 1;
            }
            if p.aborting {
                self.rollback_applies += p.applied.len();
            }
        }
        Ok(outcome)
    }

    /// How the rollout ended, if it did: every cluster on the update
    /// revision, or an abort whose rollback is complete or that stopped.
    fn ended(&self, placement: &PlacementOutcome) -> Option<Outcome> {
        if self.status.current.as_deref() == Some(self.update.hash.as_str()) {
            return Some(Outcome::Succeeded);
        }
        if self.status.is_aborted()
            && (placement.stopped || (placement.aborting && placement.complete()))
        {
            return Some(Outcome::Aborted);
        }
        None
    }

    fn step_report(
        &mut self,
        step: usize,
        now: Timestamp,
        clock: &clock::Clock,
        placement: &PlacementOutcome,
        records: &[Record],
    ) -> StepReport {
        let mut clusters = report::StatusCounts::default();
        for c in &placement.clusters {
            clusters.add(c.status);
        }
        let mut tally = Tally::of(records);
        tally.refusals(placement);
        self.hook_errors += tally.errors;
        for timed_out in &placement.result.clusters_timeout {
            if self.timed_out.insert(timed_out.cluster_name.clone()) {
                tally.events.push(report::Event::TimedOut {
                    cluster: timed_out.cluster_name.clone(),
                });
            }
        }
        StepReport {
            step,
            time: now,
            elapsed_seconds: clock.elapsed().as_secs_f64(),
            wall_seconds: clock.wall().as_secs_f64(),
            revision: placement.desired_revision.clone(),
            aborting: placement.aborting,
            clusters,
            updated: placement.at_update,
            applied: self.applied_works(placement, &tally.mutations),
            validations: tally.validations,
            verdicts: tally.verdicts,
            hook_calls: tally.hook_calls,
            events: tally.events,
            // Diffing every work costs; only asked for with --template.
            mutations: if self.config.template.is_some() {
                mutation_reports(records)
            } else {
                Vec::new()
            },
            next_in_seconds: None,
            real_wait: false,
            trace_id: String::new(),
            status_clusters: self
                .api
                .as_ref()
                .map(api::SimApi::failed_clusters)
                .unwrap_or_default(),
        }
    }

    /// The works applied in a step, as the world holds them now, with the
    /// plugins that changed each (`mutations`: the step's mutate call per
    /// cluster).
    fn applied_works(
        &self,
        placement: &PlacementOutcome,
        mutations: &HashMap<&str, &Record>,
    ) -> Vec<report::AppliedWork> {
        placement
            .applied
            .iter()
            .map(|cluster| {
                let work = self.world.get(cluster, &self.work_name);
                let mutation = mutations.get(cluster.as_str());
                report::AppliedWork {
                    cluster: cluster.clone(),
                    index: self.index.get(cluster).copied().unwrap_or(0),
                    aborting: placement.aborting,
                    revision: work
                        .as_ref()
                        .and_then(|w| observe::work_revision(w))
                        .unwrap_or_default()
                        .to_owned(),
                    generation: work
                        .as_ref()
                        .and_then(|w| w.metadata.generation)
                        .unwrap_or(0),
                    mutated_by: match mutation.map(|r| &r.answer) {
                        Some(Recorded::Mutation { mutated_by, .. }) => mutated_by.clone(),
                        _ => Vec::new(),
                    },
                    annotations: work.as_ref().map(manifest_annotations).unwrap_or_default(),
                }
            })
            .collect()
    }

    fn summary(
        &self,
        result: Outcome,
        steps: usize,
        clock: &clock::Clock,
        placement: &PlacementOutcome,
    ) -> Summary {
        let works = self.world.works();
        let statuses: HashMap<&str, RolloutStatus> = placement
            .clusters
            .iter()
            .map(|c| (c.cluster.as_str(), c.status))
            .collect();
        let mut summary = report::WorkSummary {
            total: works.len(),
            ..report::WorkSummary::default()
        };
        let mut list = Vec::new();
        for work in &works {
            let cluster = work.namespace().unwrap_or_default();
            let revision = observe::work_revision(work).unwrap_or_default().to_owned();
            *summary.by_revision.entry(revision.clone()).or_default() += 1;
            let applies = self.applies.get(&cluster).copied().unwrap_or(0);
            let annotations = manifest_annotations(work);
            if applies > 0 {
                summary.applied += 1;
                for key in annotations.keys() {
                    *summary.annotations.entry(key.clone()).or_default() += 1;
                }
            }
            if self.config.list_works {
                list.push(report::WorkEntry {
                    status: statuses
                        .get(cluster.as_str())
                        .copied()
                        .unwrap_or(RolloutStatus::ToApply),
                    validation: work.annotations().get(VALIDATION_ANNOTATION).cloned(),
                    cluster,
                    revision,
                    generation: work.metadata.generation.unwrap_or(0),
                    applies,
                    annotations,
                });
            }
        }
        list.sort_by_key(|w| self.index.get(&w.cluster).copied().unwrap_or(usize::MAX));

        let hook_calls = self.hooks.counts();
        let calls = hook_calls.begin_rollout
            + hook_calls.progress_rollout
            + hook_calls.validate_rollout_completion
            + hook_calls.mutate_manifest_work;
        let wall = clock.wall();
        let busy = wall.saturating_sub(clock.slept()).as_secs_f64();
        Summary {
            result,
            clusters: self.clusters.len(),
            steps,
            hook_calls,
            aborting_hook_calls: self.hooks.aborting_counts(),
            hook_errors: self.hook_errors,
            strategy: self.strategy.type_name().to_owned(),
            plugin: self.strategy.plugin.clone(),
            update_revision: self.update.hash.clone(),
            previous_revision: (!self.config.first_rollout).then(|| self.previous.hash.clone()),
            current_revision: self.status.current.clone(),
            abort: self.abort.clone(),
            applies: self.applies.values().sum(),
            rollback_applies: self.rollback_applies,
            works: summary,
            simulated_seconds: clock.elapsed().as_secs_f64(),
            wall_seconds: wall.as_secs_f64(),
            real_wait_seconds: clock.slept().as_secs_f64(),
            hook_calls_per_second: if busy > 0.0 { calls as f64 / busy } else { 0.0 },
            peak_rss_mib: report::peak_rss_mib(),
            work_list: self.config.list_works.then_some(list),
            api_warnings: self
                .api
                .as_ref()
                .map(api::SimApi::warnings)
                .unwrap_or_default(),
            rollout_status: self.api.as_ref().map(api::SimApi::carrier_status),
        }
    }
}
