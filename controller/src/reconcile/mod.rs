//! The ManifestWorkReplicaSet controller, in the controller-rs shape:
//! [`reconcile`] and [`error_policy`] over a shared [`Context`], started by
//! [`run`].
//!
//! One reconcile of one ManifestWorkReplicaSet follows upstream's loop
//! (REFERENCE-OCM §4) with the design's plugin phases:
//!
//! 1. **finalize**: when it is being deleted, delete every ManifestWork it
//!    owns; with `cascadeDeletionPolicy: Foreground` keep the finalizer
//!    until they are all gone, then remove it;
//! 2. **add finalizer** if missing; a set whose owner label value
//!    `<namespace>.<name>` is over 63 characters stops here, with
//!    ManifestworkApplied False `InvalidManifestWorkName` and no work, as
//!    OCM's controller does; then **bind**: read the
//!    ManifestWorkReplicaSetRollout of the same namespace and name (created
//!    empty when missing) and complete the ManifestWorkReplicaSet's design
//!    fields and status from it
//!    ([`crate::api::manifestworkreplicasetrollout::bind`]);
//! 3. **revisions**: record the template's revision in a ControllerRevision
//!    and prune the history ([`revisions::sync`]);
//! 4. **PluginLoaded**: `Initialize` through the gateway for each plugin the
//!    strategies name, cached per plugin ([`plugins::PluginCache`]); a
//!    placement whose plugin failed is only observed, nothing is applied;
//! 5. **deploy**, per placement reference: read the placement and its
//!    decisions (missing: PlacementVerified False
//!    `PlacementDecisionNotFound`), then the shared orchestration
//!    ([`orchestrate::deploy`]) with the Kubernetes [`KubeWorld`];
//! 6. **status**, built by [`status::build`] and patched once at the end
//!    (server-side apply on the status subresource; skipped when
//!    unchanged): OCM's fields on the ManifestWorkReplicaSet, the rest
//!    (revisions, abort, per-cluster details) on its
//!    ManifestWorkReplicaSetRollout;
//! 7. requeue after the soonest recheck, capped at 30 minutes.

mod aside;
pub(crate) mod backoff;
mod binding;
pub(crate) mod cache;
pub mod carrier;
mod changes;
pub(crate) mod plugins;
pub(crate) mod revisions;
mod shared;
pub mod status;
mod triggers;
pub(crate) mod world;
mod written;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use opentelemetry::trace::TraceContextExt;
use rollout_proto::v1alpha1::InitializeRequest;
use serde_json::json;
use thiserror::Error;
use tokio::time::Instant;
use tracing::Instrument;

use crate::api::additions::ocm_status;
use crate::api::annotations::OWNER_ANNOTATION;
use crate::api::labels::{MANIFEST_WORK_CLEANUP_FINALIZER, MWRS_OWNER_LABEL, PLACEMENT_LABEL};
use crate::api::manifestworkreplicasetrollout::target_of;
use crate::api::{
    CascadeDeletionPolicy, ManifestWork, ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout,
    Placement, PlacementDecision, manifestworkreplicasetrollout,
};
use crate::control;
use crate::events::{self, Events};
use crate::guard::Guard;
use crate::hooks::{Call, GatewayHooks, Hooks, StateDetail};
use crate::metrics::{ControllerMetrics, Metered, ReconcileErrorKind};
use crate::orchestrate::{
    self, DeployInput, DeployOutcome, Owner, PlacementTarget, Settings, SystemClock, World,
    WorldError, soonest,
};
use crate::probes::Readiness;
use crate::revision::RevisionStatus;
use crate::rollout::{ClusterGroup, Strategy};
use crate::telemetry::Tracing;
pub use cache::StoreWriters;
use plugins::PluginCache;
pub use plugins::PluginCacheTtl;
use status::{PlacementProblem, PluginState, StatusInput};
pub(crate) use world::{FIELD_MANAGER, KubeWorld};

/// The longest wait before a ManifestWorkReplicaSet is reconciled again
/// (upstream's resync period).
pub(crate) const MAX_REQUEUE: Duration = Duration::from_secs(30 * 60);

/// A reconcile that could not finish; [`error_policy`] retries it.
#[derive(Debug, Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: &'static str,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// A ManifestWork could not be listed or written.
    #[error(transparent)]
    World(#[from] WorldError),
    /// The object has no namespace (ManifestWorkReplicaSets are namespaced).
    #[error("ManifestWorkReplicaSet {0} has no namespace")]
    NoNamespace(String),
}

impl Error {
    /// A failed API call while doing `action`.
    pub(crate) fn kube(action: &'static str, source: kube::Error) -> Error {
        Error::Kube { action, source }
    }

    /// The cause, as the reconcile error metric counts it.
    pub(crate) fn kind(&self) -> ReconcileErrorKind {
        match self {
            Error::Kube { .. } => ReconcileErrorKind::Kube,
            Error::World(_) => ReconcileErrorKind::ManifestWork,
            Error::NoNamespace(_) => ReconcileErrorKind::Invalid,
        }
    }
}

/// Tunables of the reconcile.
#[derive(Debug, Clone)]
pub struct Tunables {
    /// The orchestration's.
    pub settings: Settings,
    /// How long `Initialize` answers are reused.
    pub plugin_ttl: PluginCacheTtl,
    /// `InitializeRequest.hub_name`.
    pub hub_name: String,
    /// How soon a Foreground deletion looks again for remaining works.
    pub finalizer_requeue: Duration,
    /// How soon a failed reconcile is retried.
    pub error_requeue: Duration,
    /// How long another field manager's write of a ManifestWorkReplicaSet
    /// status keeps this controller from reconciling any
    /// ([`crate::guard`]).
    pub other_writer_quiet: Duration,
}

impl Default for Tunables {
    fn default() -> Self {
        Tunables {
            settings: Settings::default(),
            plugin_ttl: PluginCacheTtl::default(),
            hub_name: String::new(),
            finalizer_requeue: Duration::from_secs(5),
            error_requeue: Duration::from_secs(10),
            other_writer_quiet: crate::guard::DEFAULT_OTHER_WRITER_QUIET,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    /// The hub's API.
    pub(crate) client: Client,
    /// The gateway.
    pub hooks: GatewayHooks,
    /// Traces.
    pub(crate) telemetry: Tracing,
    /// Tunables.
    pub(crate) options: Tunables,
    /// The metrics every reconcile records (`/metrics`).
    pub(crate) metrics: Arc<ControllerMetrics>,
    /// Where the Events on the ManifestWorkReplicaSets go; none by default.
    pub(crate) events: Option<Arc<Events>>,
    /// What shows another ManifestWorkReplicaSet controller at work.
    pub(crate) guard: Arc<Guard>,
    /// The controller's own store of every ManifestWorkReplicaSet, once
    /// [`run`] started it (for the carriers that bind to none).
    sets: std::sync::OnceLock<Store<ManifestWorkReplicaSet>>,
    plugins: PluginCache,
    cache: cache::Cache,
    backoffs: backoff::Backoffs,
}

impl Context {
    /// A context over `client` and the gateway `hooks`, with metrics of
    /// its own.
    pub fn new(
        client: Client,
        hooks: GatewayHooks,
        telemetry: Tracing,
        options: Tunables,
    ) -> Context {
        Context {
            plugins: PluginCache::new(options.plugin_ttl),
            cache: cache::Cache::new(),
            backoffs: backoff::Backoffs::default(),
            guard: Arc::new(Guard::new(options.other_writer_quiet)),
            sets: std::sync::OnceLock::new(),
            client,
            hooks,
            telemetry,
            options,
            metrics: Arc::new(ControllerMetrics::new()),
            events: None,
        }
    }

    /// The same context, publishing Events through `events`.
    pub fn with_events(mut self, events: Arc<Events>) -> Context {
        self.events = Some(events);
        self
    }

    /// The same context, recording into `metrics` (the ones `/metrics`
    /// serves).
    pub(crate) fn with_metrics(mut self, metrics: Arc<ControllerMetrics>) -> Context {
        self.metrics = metrics;
        self
    }
}

impl Context {
    /// The writers of the reflector stores reconciles read once they are
    /// synced; handed out once, to [`run`] (or a test playing the
    /// watches).
    pub fn take_store_writers(&self) -> Option<cache::StoreWriters> {
        self.cache.take_writers()
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("hooks", &self.hooks)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn has_finalizer(mwrs: &ManifestWorkReplicaSet) -> bool {
    mwrs.finalizers()
        .iter()
        .any(|f| f == MANIFEST_WORK_CLEANUP_FINALIZER)
}

/// Sets the finalizers with a merge patch guarded by the resource version
/// (a concurrent change makes it fail and the reconcile retry).
async fn patch_finalizers(
    api: &Api<ManifestWorkReplicaSet>,
    mwrs: &ManifestWorkReplicaSet,
    finalizers: Vec<String>,
    action: &'static str,
) -> Result<ManifestWorkReplicaSet, Error> {
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": mwrs.resource_version(),
    }});
    api.patch(
        &mwrs.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|source| Error::kube(action, source))
}

/// Deletes the owned works; removes the finalizer when they are gone (at
/// once for Background).
async fn finalize<W: World>(
    api: &Api<ManifestWorkReplicaSet>,
    reads: &cache::Reads<'_>,
    world: &W,
    mwrs: &ManifestWorkReplicaSet,
    owner_label: &str,
    options: &Tunables,
) -> Result<Action, Error> {
    if !has_finalizer(mwrs) {
        return Ok(Action::await_change());
    }
    let works = reads.works(owner_label).await?;
    for work in works
        .iter()
        .filter(|w| w.metadata.deletion_timestamp.is_none())
    {
        world
            .delete_work(&work.namespace().unwrap_or_default(), &work.name_any())
            .await?;
    }
    if mwrs.spec.cascade_deletion_policy() == CascadeDeletionPolicy::Foreground && !works.is_empty()
    {
        tracing::info!(
            mwrs = %mwrs.name_any(),
            remaining = works.len(),
            "waiting for ManifestWorks to be deleted"
        );
        return Ok(Action::requeue(options.finalizer_requeue));
    }
    let rest: Vec<String> = mwrs
        .finalizers()
        .iter()
        .filter(|f| *f != MANIFEST_WORK_CLEANUP_FINALIZER)
        .cloned()
        .collect();
    patch_finalizers(api, mwrs, rest, "removing the finalizer").await?;
    Ok(Action::await_change())
}

/// Reconciles one ManifestWorkReplicaSet (see the module documentation).
/// Fails when an API call of its own fails; failures of hooks and of
/// single ManifestWork writes are reported in the status instead.
pub async fn reconcile(
    mwrs: Arc<ManifestWorkReplicaSet>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let name = mwrs.name_any();
    let namespace = mwrs.namespace().unwrap_or_default();
    let trace = ctx.telemetry.reconcile_span(&namespace, &name);
    // Log lines of this reconcile carry its trace (JSON logs lift them).
    let context = trace.span().span_context().clone();
    let span = tracing::info_span!(
        "reconcile",
        mwrs = %name,
        namespace = %namespace,
        trace_id = %context.trace_id(),
        span_id = %context.span_id()
    );
    let start = Instant::now();
    let metrics = ctx.metrics.clone();
    let result = reconcile_traced(mwrs, ctx, trace).instrument(span).await;
    metrics.record_reconcile(start.elapsed(), result.as_ref().err().map(Error::kind));
    result
}

/// One reconcile, phase by phase (see the module documentation).
async fn reconcile_traced(
    mwrs: Arc<ManifestWorkReplicaSet>,
    ctx: Arc<Context>,
    trace: opentelemetry::Context,
) -> Result<Action, Error> {
    let world = KubeWorld::new(ctx.client.clone(), Arc::clone(&ctx.cache.written));
    let pass = Pass::new(&ctx, &mwrs, &world, &trace)?;
    if mwrs.meta().deletion_timestamp.is_some() {
        return pass.finalize(&mwrs).await;
    }
    ctx.guard.observe(&mwrs);
    if let Some(finding) = ctx.guard.finding(pass.now) {
        return aside::stand_aside(&ctx, &pass.reads, &mwrs, &finding, pass.now).await;
    }
    let mwrs = pass.ensure_finalizer(mwrs).await?;
    if let Some(hashed) = &pass.hashed_label {
        return refuse_invalid_owner_label(&pass.api, &mwrs, hashed, pass.now).await;
    }
    let bound = match pass.bind(Arc::clone(&mwrs)).await? {
        Bind::Bound(bound) => bound,
        Bind::BackingOff(wait) => return Ok(Action::requeue(wait)),
        Bind::Held(binding) => return carrier::hold(&ctx, &mwrs, &binding, pass.now).await,
    };
    let mut revisions = pass.revisions(&bound.mwrs).await?;
    let control = pass.control(&bound, &mut revisions);
    let placements = pass.placements(&bound.mwrs, &revisions.works).await?;
    // Every hook call of this reconcile is counted and timed.
    let hooks = Metered::new(ctx.hooks.clone(), ctx.metrics.clone());
    let plugins = pass.load_plugins(&hooks, &placements.resolved).await;
    let outcome = pass
        .deploy(
            &hooks,
            &bound.mwrs,
            &revisions,
            &placements,
            &plugins,
            &control.step,
        )
        .await;
    let wrote = Wrote {
        placements: &placements,
        plugins: &plugins,
        outcome: &outcome,
        control: &control,
    };
    pass.write_status(&bound, revisions, &wrote).await?;
    Ok(pass.requeue(&bound, &outcome, &plugins))
}

/// What the phases of one reconcile share.
struct Pass<'r> {
    ctx: &'r Context,
    api: Api<ManifestWorkReplicaSet>,
    world: &'r KubeWorld,
    reads: cache::Reads<'r>,
    trace: &'r opentelemetry::Context,
    name: String,
    namespace: String,
    /// `namespace/name`, the key of the metrics and back-offs.
    key: String,
    now: Timestamp,
    owner_label: String,
    /// The owner label value when it is too long to be one.
    hashed_label: Option<crate::api::HashedLabelValue>,
}

/// The set as this reconcile rolls it out: completed from its carrier.
struct Bound {
    /// The set as stored (its status is patched).
    stored: Arc<ManifestWorkReplicaSet>,
    /// Its ManifestWorkReplicaSetRollout.
    carrier: ManifestWorkReplicaSetRollout,
    /// The set with the carrier's fields bound in.
    mwrs: Arc<ManifestWorkReplicaSet>,
    generations: backoff::Generations,
    /// What the bind did.
    binding: binding::Binding,
}

/// Whether the reconcile goes on past the bind.
enum Bind {
    Bound(Box<Bound>),
    /// A plugin refused this very input; its message is in the status.
    BackingOff(Duration),
    /// No carrier can be bound (several target the set): nothing is
    /// rolled out until that changes.
    Held(binding::Binding),
}

/// The works and revisions the step starts from.
struct Revisions {
    works: Vec<Arc<crate::api::ManifestWork>>,
    synced: revisions::Synced,
    /// The status before this reconcile.
    old: crate::api::ManifestWorkReplicaSetStatus,
    start: RevisionStatus,
}

/// What a reconcile's status is written from, beside the revisions.
struct Wrote<'w> {
    placements: &'w Placements,
    plugins: &'w Plugins,
    outcome: &'w DeployOutcome,
    control: &'w control::Decision,
}

/// The placements of the spec: those to roll out, and why the others are
/// not.
struct Placements {
    spec: Vec<String>,
    problems: BTreeMap<String, PlacementProblem>,
    resolved: Vec<(String, Strategy, Vec<ClusterGroup>)>,
}

/// The plugins the strategies name, after their `Initialize`.
#[derive(Default)]
struct Plugins {
    states: Vec<PluginState>,
    /// The failure message of each plugin that did not load.
    failed: BTreeMap<String, String>,
    details: BTreeMap<String, StateDetail>,
}

impl<'r> Pass<'r> {
    fn new(
        ctx: &'r Context,
        mwrs: &ManifestWorkReplicaSet,
        world: &'r KubeWorld,
        trace: &'r opentelemetry::Context,
    ) -> Result<Pass<'r>, Error> {
        let name = mwrs.name_any();
        let namespace = mwrs
            .namespace()
            .ok_or_else(|| Error::NoNamespace(name.clone()))?;
        let (owner_label, hashed_label) = mwrs.owner_label_value();
        Ok(Pass {
            api: Api::namespaced(ctx.client.clone(), &namespace),
            reads: cache::Reads {
                client: &ctx.client,
                world,
                stores: ctx.cache.synced(),
                written: &ctx.cache.written,
            },
            key: format!("{namespace}/{name}"),
            now: Timestamp::now(),
            ctx,
            world,
            trace,
            name,
            namespace,
            owner_label,
            hashed_label,
        })
    }

    /// Finalize: the set is being deleted; it is forgotten.
    async fn finalize(&self, mwrs: &ManifestWorkReplicaSet) -> Result<Action, Error> {
        self.ctx.metrics.forget_rollout(&self.key);
        self.ctx.backoffs.forget(&self.key);
        let options = &self.ctx.options;
        finalize(
            &self.api,
            &self.reads,
            self.world,
            mwrs,
            &self.owner_label,
            options,
        )
        .await
    }

    /// Add the finalizer if missing.
    async fn ensure_finalizer(
        &self,
        mwrs: Arc<ManifestWorkReplicaSet>,
    ) -> Result<Arc<ManifestWorkReplicaSet>, Error> {
        if has_finalizer(&mwrs) {
            return Ok(mwrs);
        }
        let mut finalizers = mwrs.finalizers().to_vec();
        finalizers.push(MANIFEST_WORK_CLEANUP_FINALIZER.to_owned());
        let action = "adding the finalizer";
        Ok(Arc::new(
            patch_finalizers(&self.api, &mwrs, finalizers, action).await?,
        ))
    }

    /// Bind: the set as read, its own fields completed from its carrier;
    /// nothing more while a plugin's refusal of this input backs off.
    async fn bind(&self, stored: Arc<ManifestWorkReplicaSet>) -> Result<Bind, Error> {
        let (ensured, unbound) = carrier::ensure(&self.reads, &stored, self.ctx.sets.get()).await?;
        let (carrier, found) = match ensured {
            carrier::Ensured::Found(carrier, found) => (carrier, Some(found)),
            carrier::Ensured::Created(carrier) => (carrier, None),
            carrier::Ensured::Ambiguous(names) => {
                return Ok(Bind::Held(binding::ambiguous(&stored, &names)));
            }
        };
        // One the controller made empty stays "created empty" (it is owned
        // by the set) until someone writes to it.
        let made_here = found.is_none()
            || carrier
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && Some(&o.uid) == stored.uid().as_ref());
        let how = match found {
            Some(found) if !made_here => binding::How::Found(found),
            _ => binding::How::Created,
        };
        let binding = binding::describe(&stored, &carrier, how, &unbound);
        let generations = backoff::Generations {
            mwrs: stored.meta().generation,
            carrier: carrier.meta().generation,
        };
        let waiting = self
            .ctx
            .backoffs
            .waiting(&self.key, generations, Instant::now().into_std());
        if let Some(wait) = waiting {
            tracing::debug!(mwrs = %self.name, namespace = %self.namespace, ?wait, "backing off after a permanent hook error");
            return Ok(Bind::BackingOff(wait));
        }
        let mwrs = Arc::new(manifestworkreplicasetrollout::bind(&stored, Some(&carrier)));
        Ok(Bind::Bound(Box::new(Bound {
            stored,
            carrier,
            mwrs,
            generations,
            binding,
        })))
    }

    /// Revisions: the template's revision recorded, the history pruned.
    async fn revisions(&self, mwrs: &ManifestWorkReplicaSet) -> Result<Revisions, Error> {
        let works = self.reads.works(&self.owner_label).await?;
        let listed = self
            .reads
            .revisions(&self.namespace, &self.owner_label)
            .await?;
        let client = &self.ctx.client;
        let mut old = mwrs.status.clone().unwrap_or_default();
        // A carrier with no revisions (made again after a deletion) gets
        // them back from what the set records.
        let recovered = (old.current_revision.is_none() && old.update_revision.is_none())
            .then(|| revisions::recorded(mwrs))
            .flatten();
        let recovered_mwrs;
        let mwrs = match recovered {
            Some(state) => {
                tracing::info!(mwrs = %self.name, namespace = %self.namespace, current = ?state.current, aborted = ?state.aborted_time, "revisions recovered from the ManifestWorkReplicaSet's annotations");
                old.current_revision = state.current;
                old.update_revision = state.update;
                old.aborted_time = state.aborted_time.map(Time);
                let mut with = mwrs.clone();
                with.status = Some(old.clone());
                recovered_mwrs = with;
                &recovered_mwrs
            }
            None => mwrs,
        };
        let synced = revisions::sync(client, mwrs, &self.owner_label, &works, &listed).await?;
        let start = RevisionStatus::begin(
            &RevisionStatus {
                current: old.current_revision.clone(),
                update: old.update_revision.clone(),
                aborted_time: old.aborted_time.as_ref().map(|t| t.0),
            },
            &synced.plan.update.hash,
        );
        Ok(Revisions {
            works,
            synced,
            old,
            start,
        })
    }

    /// Manual control: what `spec.control` of the carrier asks of this
    /// reconcile ([`control::decide`]); a retry clears the abort under way.
    fn control(&self, bound: &Bound, revisions: &mut Revisions) -> control::Decision {
        let start = &revisions.start;
        let update = revisions.synced.plan.update.hash.as_str();
        let current = start.current.as_deref();
        let rollout = control::Rollout {
            update,
            previous_update: revisions.old.update_revision.as_deref(),
            current,
            aborted: start.is_aborted(),
            abort_would: crate::revision::abort_action(
                false,
                true,
                update,
                current,
                revisions.synced.current.as_ref(),
            ),
            now: self.now,
        };
        let acknowledged = bound
            .carrier
            .status
            .as_ref()
            .filter(|s| manifestworkreplicasetrollout::status_belongs(s, &bound.stored))
            .and_then(|s| s.control.as_ref());
        let decision = control::decide(bound.carrier.spec.control.as_ref(), acknowledged, &rollout);
        for (verb, ack) in &decision.acknowledged {
            tracing::info!(mwrs = %self.name, namespace = %self.namespace, verb = verb.as_str(), by = ack.by.as_deref().unwrap_or_default(), result = ack.result.as_str(), message = %ack.message, "manual control request acknowledged");
        }
        if decision.retry {
            revisions.start.aborted_time = None;
        }
        decision
    }

    /// Strategies and placements: each reference's strategy and decision
    /// groups, or why it cannot be rolled out; a cluster that several
    /// select left to one of them (`works`: the set's).
    async fn placements(
        &self,
        mwrs: &ManifestWorkReplicaSet,
        works: &[Arc<crate::api::ManifestWork>],
    ) -> Result<Placements, Error> {
        let references = &mwrs.spec.placement_refs;
        let mut placements = Placements {
            spec: references.iter().map(|p| p.name.clone()).collect(),
            problems: BTreeMap::new(),
            resolved: Vec::new(),
        };
        for reference in references {
            let name = reference.name.clone();
            let strategy = match reference.strategy() {
                Ok(strategy) => strategy,
                Err(err) => {
                    let problem = PlacementProblem::Strategy(err);
                    placements.problems.insert(name, problem);
                    continue;
                }
            };
            match self.reads.placement_groups(&self.namespace, &name).await? {
                Ok(Some(groups)) => placements.resolved.push((name, strategy, groups)),
                Ok(None) => {
                    placements.problems.insert(name, PlacementProblem::NotFound);
                }
                Err(error) => {
                    let problem = PlacementProblem::Decisions(error);
                    placements.problems.insert(name, problem);
                }
            }
        }
        let working = works
            .iter()
            .filter(|w| !crate::orchestrate::is_deleting(w))
            .filter_map(|w| {
                Some((
                    w.metadata.namespace.as_deref()?,
                    crate::orchestrate::placement_of(w)?,
                ))
            });
        for (placement, left_out) in
            shared::one_placement_per_cluster(&mut placements.resolved, working)
        {
            tracing::debug!(mwrs = %self.name, namespace = %self.namespace, %placement, ?left_out, "clusters an earlier placement of the set selects are left to it");
        }
        Ok(placements)
    }

    /// PluginLoaded: `Initialize` for each plugin the strategies name, once.
    async fn load_plugins<H: Hooks>(
        &self,
        hooks: &H,
        resolved: &[(String, Strategy, Vec<ClusterGroup>)],
    ) -> Plugins {
        let mut plugins = Plugins::default();
        let mut seen = BTreeSet::new();
        let named = resolved.iter().filter_map(|(_, s, _)| s.plugin.as_deref());
        for plugin in named.filter(|p| seen.insert(*p)) {
            let call = Call {
                plugin,
                trace: self.trace,
            };
            let request = InitializeRequest {
                controller_version: env!("CARGO_PKG_VERSION").to_owned(),
                hub_name: self.ctx.options.hub_name.clone(),
            };
            let result = match self.ctx.plugins.check(hooks, call, request).await {
                Ok(response) => {
                    let detail = StateDetail::of(&response);
                    plugins.details.insert(plugin.to_owned(), detail);
                    Ok(())
                }
                Err(error) => {
                    let message = plugins::failure_message(plugin, &error);
                    plugins.failed.insert(plugin.to_owned(), message);
                    Err(error)
                }
            };
            plugins.states.push(PluginState {
                name: plugin.to_owned(),
                result,
            });
        }
        plugins
    }

    /// Deploy: the shared orchestration over the placements resolved; a
    /// placement whose plugin did not load is on hold.
    async fn deploy<H: Hooks>(
        &self,
        hooks: &H,
        mwrs: &ManifestWorkReplicaSet,
        revisions: &Revisions,
        placements: &Placements,
        plugins: &Plugins,
        control: &orchestrate::ManualControl,
    ) -> DeployOutcome {
        let targets: Vec<PlacementTarget<'_>> = placements
            .resolved
            .iter()
            .map(|(name, strategy, groups)| {
                let plugin = strategy.plugin.as_deref();
                PlacementTarget {
                    name,
                    strategy,
                    groups,
                    hold: plugin
                        .and_then(|p| plugins.failed.get(p))
                        .map(String::as_str),
                    state_detail: plugin
                        .and_then(|p| plugins.details.get(p).copied())
                        .unwrap_or_default(),
                }
            })
            .collect();
        let input = DeployInput {
            owner: Owner {
                namespace: &self.namespace,
                name: &self.name,
                label: &self.owner_label,
                labels: mwrs.labels(),
            },
            spec_placements: &placements.spec,
            placements: &targets,
            works: &revisions.works,
            update: &revisions.synced.plan.update,
            current_hash: revisions.start.current.as_deref(),
            current: revisions.synced.current.as_ref(),
            aborted_at: revisions.start.aborted_time,
            clock: &SystemClock,
            settings: &self.ctx.options.settings,
            trace: self.trace,
            control: control.clone(),
        };
        let outcome = orchestrate::deploy(hooks, self.world, &input).await;
        self.ctx.metrics.record_rollout(&self.key, &outcome);
        let (name, namespace) = (&self.name, &self.namespace);
        for (placement, failure) in outcome.hook_errors() {
            tracing::warn!(mwrs = %name, namespace = %namespace, placement, error = %failure, "hook call failed");
        }
        for error in outcome.all_world_errors() {
            tracing::warn!(mwrs = %name, namespace = %namespace, %error, "ManifestWork write failed");
        }
        outcome
    }

    /// Status: built from the step, patched once, and its changes published
    /// as Events.
    async fn write_status(
        &self,
        bound: &Bound,
        revisions: Revisions,
        wrote: &Wrote<'_>,
    ) -> Result<(), Error> {
        let Wrote {
            placements,
            plugins,
            outcome,
            control,
        } = *wrote;
        let update_complete = placements.problems.is_empty()
            && outcome
                .placements
                .iter()
                .all(|p| !p.aborting && p.complete());
        let start = revisions.start.clone();
        let revision_status = revisions.start.finish(outcome.aborted_at, update_complete);
        let new_status = status::build(&StatusInput {
            old: &revisions.old,
            generation: bound.mwrs.meta().generation,
            now: self.now,
            spec_placements: &placements.spec,
            problems: &placements.problems,
            outcome,
            plugins: &plugins.states,
            revisions: &revision_status,
            collision_count: revisions.synced.plan.collision_count,
            origin: revisions.synced.plan.origin,
            binding: Some(&bound.binding),
            paused: control.status.paused.as_ref(),
        });
        let client = &self.ctx.client;
        let carried = carrier::Carried {
            status: &new_status,
            control: Some(&control.status),
        };
        carrier::write_status(client, &bound.stored, &bound.carrier, &carried).await?;
        if let Some(publisher) = &self.ctx.events {
            let mut list =
                events::rollout_events(&revisions.old, &new_status, outcome, &plugins.states);
            let acknowledged = bound
                .carrier
                .status
                .as_ref()
                .and_then(|s| s.control.as_ref());
            list.extend(events::control_events(acknowledged, control));
            if !list.is_empty() {
                publisher
                    .publish(&bound.mwrs.object_ref(&()), &list, self.now)
                    .await;
            }
        }
        // Recorded where it changed: a revision made current, an abort
        // started or ended, by a failure, an operator or a retry (after
        // the Events, which a failure here must not lose).
        if revision_status.current != start.current
            || revision_status.aborted_time != start.aborted_time
            || control.retry
        {
            revisions::record(client, &bound.stored, &revision_status).await?;
        }
        Ok(())
    }

    /// Requeue: after the soonest recheck, a back-off when a plugin refused
    /// this input, or the plugin cache's retry, capped at [`MAX_REQUEUE`].
    fn requeue(&self, bound: &Bound, outcome: &DeployOutcome, plugins: &Plugins) -> Action {
        let ctx = self.ctx;
        let mut requeue = outcome.requeue_after;
        let permanent = backoff::all_permanent(outcome.hook_errors().map(|(_, f)| &f.error));
        if let Some(wait) = ctx.backoffs.record(
            &self.key,
            bound.generations,
            permanent,
            ctx.options.settings.error_requeue,
            Instant::now().into_std(),
        ) {
            tracing::warn!(mwrs = %self.name, namespace = %self.namespace, ?wait, "a plugin refused this input; retrying after a backoff, or at once when the ManifestWorkReplicaSet changes");
            requeue = Some(wait);
        }
        if !plugins.failed.is_empty() {
            requeue = soonest(requeue, Some(ctx.plugins.retry_after()));
        }
        // A cluster waiting for its work agent's report is looked at again
        // within STORE_LAG_RECHECK. The works' triggers come from their
        // store once it holds each change (`changes`), so a report is not
        // read stale; the recheck bounds the wait should one be missed
        // (a trigger sent while no run listened, a watch re-listing).
        let waiting_for_agent = outcome.placements.iter().any(|p| {
            p.clusters
                .iter()
                .any(|c| c.status == crate::rollout::RolloutStatus::Progressing)
        });
        if waiting_for_agent {
            requeue = soonest(requeue, Some(STORE_LAG_RECHECK));
        }
        tracing::debug!(requeue_secs = requeue.map(|d| d.as_secs()), "reconciled");
        Action::requeue(requeue.unwrap_or(MAX_REQUEUE).min(MAX_REQUEUE))
    }
}

/// A set whose owner label value `<namespace>.<name>` cannot be a label
/// value: ManifestworkApplied False `InvalidManifestWorkName`, nothing
/// rolled out, and no requeue (only recreating the set under a shorter
/// name helps), as OCM's own controller does. Works an earlier version
/// wrote under a hashed label are left as they are; the finalizer still
/// deletes them.
async fn refuse_invalid_owner_label(
    api: &Api<ManifestWorkReplicaSet>,
    mwrs: &ManifestWorkReplicaSet,
    owner: &crate::api::HashedLabelValue,
    now: Timestamp,
) -> Result<Action, Error> {
    let old = mwrs.status.clone().unwrap_or_default();
    let new_status = status::invalid_owner_label(&old, mwrs.meta().generation, now, owner);
    // No carrier is read or written for such a set: only OCM's fields,
    // compared as read back, so that nothing pruned is written again.
    let ocm = ocm_status(&new_status);
    if mwrs.status.as_ref().map(ocm_status).as_ref() != Some(&ocm) {
        let patch = json!({
            "apiVersion": ManifestWorkReplicaSet::api_version(&()),
            "kind": ManifestWorkReplicaSet::kind(&()),
            "status": ocm,
        });
        api.patch_status(
            &mwrs.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(|source| Error::kube("patching the status", source))?;
    }
    tracing::warn!(owner_label = %owner.original, "owner label value is not a valid label value; nothing is rolled out");
    Ok(Action::await_change())
}

/// Retries a failed reconcile after [`Tunables::error_requeue`].
pub(crate) fn error_policy(
    mwrs: Arc<ManifestWorkReplicaSet>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    tracing::warn!(
        mwrs = %mwrs.name_any(),
        namespace = mwrs.namespace().unwrap_or_default(),
        %error,
        "reconcile failed"
    );
    Action::requeue(ctx.options.error_requeue)
}

/// The ManifestWorkReplicaSet owning `work`: from its owner annotation,
/// else from its owner label `<namespace>.<name>` (a namespace has no dot).
pub(crate) fn owner_of_work(work: &ManifestWork) -> Option<ObjectRef<ManifestWorkReplicaSet>> {
    if let Some((namespace, name)) = work
        .annotations()
        .get(OWNER_ANNOTATION)
        .and_then(|v| v.split_once('/'))
    {
        return Some(ObjectRef::new(name).within(namespace));
    }
    let (namespace, name) = work.labels().get(MWRS_OWNER_LABEL)?.split_once('.')?;
    Some(ObjectRef::new(name).within(namespace))
}

/// The ManifestWorkReplicaSets a change of `carrier` concerns: the one it
/// targets, and the one of its name (which it may have bound to before its
/// `targetRef` was set).
pub(crate) fn bound_mwrs(
    carrier: &ManifestWorkReplicaSetRollout,
) -> Vec<ObjectRef<ManifestWorkReplicaSet>> {
    let namespace = carrier.namespace().unwrap_or_default();
    let (target, own) = (target_of(carrier), carrier.name_any());
    let mut sets = vec![ObjectRef::new(target).within(&namespace)];
    if own != target {
        sets.push(ObjectRef::new(&own).within(&namespace));
    }
    sets
}

/// The ManifestWorkReplicaSets in `namespace` whose placement references
/// name `placement`.
pub(crate) fn referencing(
    store: &Store<ManifestWorkReplicaSet>,
    namespace: &str,
    placement: &str,
) -> Vec<ObjectRef<ManifestWorkReplicaSet>> {
    store
        .state()
        .iter()
        .filter(|m| m.namespace().as_deref() == Some(namespace))
        .filter(|m| m.spec.placement_refs.iter().any(|p| p.name == placement))
        .map(|m| ObjectRef::from_obj(m.as_ref()))
        .collect()
}

/// The longest a cluster waiting for its agent's report goes without a
/// reconcile (see `Pass::requeue`).
const STORE_LAG_RECHECK: Duration = Duration::from_secs(5);

/// A shutdown trigger that every phase of `run` can wait on (cloned).
pub(crate) type Stop = futures::future::Shared<futures::future::BoxFuture<'static, ()>>;

/// Runs the controller until `stop` fires: watches
/// ManifestWorkReplicaSets, the ManifestWorks they own (by owner label, in
/// every namespace: the store's watch, [`changes`]), PlacementDecisions and Placements (mapped to the
/// ManifestWorkReplicaSets referencing them), and reconciles. `readiness`
/// turns true once the ManifestWorkReplicaSets are listed, false on
/// shutdown. Reconciles in flight finish before it returns (the caller
/// bounds how long it waits for them).
pub(crate) async fn run(ctx: Arc<Context>, readiness: Readiness, stop: Stop) {
    let client = ctx.client.clone();
    // The stores' watches start with the first run and outlive it, so a
    // replica that loses the lease and leads again reads warm stores.
    if let Some(writers) = ctx.take_store_writers() {
        cache::spawn_reflectors(&client, writers, &ctx.cache.changes, &ctx.cache.written);
    }
    let controller = mwrs_controller(&client, &readiness);
    let (by_decision, by_placement) = (controller.store(), controller.store());
    let _ = ctx.sets.set(controller.store());
    controller
        // The works' changes come from the works' store, once it holds
        // them (`changes`): not from a watch of their own.
        .reconcile_on(ctx.cache.changes.triggers())
        .watches(
            Api::<PlacementDecision>::all(client.clone()),
            watcher::Config::default().labels(PLACEMENT_LABEL),
            move |decision| {
                let namespace = decision.namespace().unwrap_or_default();
                decision
                    .labels()
                    .get(PLACEMENT_LABEL)
                    .map(|p| referencing(&by_decision, &namespace, p))
                    .unwrap_or_default()
            },
        )
        .watches_stream(
            triggers::spec_changes(watcher(
                Api::<ManifestWorkReplicaSetRollout>::all(client.clone()),
                watcher::Config::default(),
            )),
            |carrier| bound_mwrs(&carrier),
        )
        .watches(
            Api::<Placement>::all(client),
            watcher::Config::default(),
            move |placement| {
                referencing(
                    &by_placement,
                    &placement.namespace().unwrap_or_default(),
                    &placement.name_any(),
                )
            },
        )
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((object, action)) => tracing::debug!(%object, ?action, "reconciled"),
                Err(error) => tracing::warn!(%error, "controller"),
            }
        })
        .await;
    readiness.set(false);
}

/// The controller over every ManifestWorkReplicaSet, its reflector built
/// here so that readiness comes from the list itself: the first time the
/// watch's list ends (`InitDone`), `readiness` turns true. kube-runtime's
/// own store readiness keeps the waker of one waiter only, and its runner
/// is that waiter; a second one (a task waiting to mark the controller
/// ready) was never woken on a real API server, or, polling again, took the
/// runner's place.
fn mwrs_controller(client: &Client, readiness: &Readiness) -> Controller<ManifestWorkReplicaSet> {
    use kube::runtime::WatchStreamExt;
    use kube::runtime::reflector::{self, reflector};
    let (reader, writer) = reflector::store();
    let ready = readiness.clone();
    let watch = watcher(
        Api::<ManifestWorkReplicaSet>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    );
    let listed = reflector(writer, watch).inspect(move |event| {
        if matches!(event, Ok(watcher::Event::InitDone)) && !ready.is_ready() {
            ready.set(true);
            tracing::info!("ManifestWorkReplicaSets listed; ready");
        }
    });
    Controller::for_stream(listed.applied_objects(), reader)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn works_map_back_to_their_owner() {
        let work = |labels: serde_json::Value, annotations: serde_json::Value| -> ManifestWork {
            serde_json::from_value(json!({
                "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {"name": "w", "namespace": "cluster1", "labels": labels, "annotations": annotations},
                "spec": {}
            }))
            .expect("a work")
        };
        let by_label = owner_of_work(&work(
            json!({MWRS_OWNER_LABEL: "default.hello.v2"}),
            json!({}),
        ))
        .expect("owned");
        assert_eq!(
            (by_label.name.as_str(), by_label.namespace.as_deref()),
            ("hello.v2", Some("default"))
        );
        // A hashed label cannot be read back; the annotation can.
        let hashed = owner_of_work(&work(
            json!({MWRS_OWNER_LABEL: "default-nnnn-0123456789abcdef"}),
            json!({OWNER_ANNOTATION: "default/a-very-long-name"}),
        ))
        .expect("owned");
        assert_eq!(
            (hashed.name.as_str(), hashed.namespace.as_deref()),
            ("a-very-long-name", Some("default"))
        );
        assert!(owner_of_work(&work(json!({}), json!({}))).is_none());
    }

    #[test]
    fn a_carrier_maps_to_the_mwrs_it_targets_and_the_one_of_its_name() {
        let carrier = |spec: Value| -> ManifestWorkReplicaSetRollout {
            serde_json::from_value(json!({
                "apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
                "metadata": {"name": "hello", "namespace": "team-a"}, "spec": spec
            }))
            .expect("a carrier")
        };
        let names = |spec| -> Vec<(String, Option<String>)> {
            bound_mwrs(&carrier(spec))
                .into_iter()
                .map(|r| (r.name, r.namespace))
                .collect()
        };
        let team_a = Some("team-a".to_owned());
        assert_eq!(names(json!({})), [("hello".to_owned(), team_a.clone())]);
        assert_eq!(
            names(json!({"targetRef": {"name": "web"}})),
            [
                ("web".to_owned(), team_a.clone()),
                ("hello".to_owned(), team_a)
            ]
        );
    }
}
