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
//! 3. **decide**: runs the engine ([`rollout::decide`]) at the time read
//!    then ([`Clock`]), and handles the abort ([`revision::abort_action`]):
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
//! Works of placements no longer in the spec are deleted first.
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

pub mod conflict;
pub mod memory;
pub mod observe;
pub mod request;
mod trace;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use rollout_proto::v1alpha1::{
    RolloutCounts, ValidateResponse, ValidationResult as ProtoValidation,
};
use thiserror::Error;

use crate::api::annotations::{OWNER_ANNOTATION, SPEC_HASH_ANNOTATION};
use crate::api::labels::{CONTROLLER_HASH_LABEL, MWRS_OWNER_LABEL, PLACEMENT_NAME_LABEL, fnv1a64};
use crate::api::manifestwork::CONDITION_AVAILABLE;
use crate::api::{ManifestWork, ManifestWorkSpec};
use crate::hooks::{Call, HookError, HookKind, Hooks, StateDetail, encode_state};
use crate::revision::{self, AbortAction, Revision};
use crate::rollout::work_status::{self, Validation, ValidationResult};
use crate::rollout::{
    self, ClusterGroup, ClusterRolloutStatus, RollbackPace, RolloutResult, RolloutStatus, Strategy,
};
pub use conflict::{FIELD_MANAGER, WorkConflict};
use observe::{Observed, Verdict};
use request::{Reported, RequestScope, Requests, RolloutOrder};

/// A write to the world that failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{action} ManifestWork {namespace}/{name}: {message}")]
pub struct WorldError {
    /// `listing`, `applying`, `annotating` or `deleting`.
    pub action: &'static str,
    /// The work's namespace (its cluster); empty for a list.
    pub namespace: String,
    /// The work's name; empty for a list.
    pub name: String,
    /// What went wrong.
    pub message: String,
    /// Whether the API server refused an apply with 409 Conflict: another
    /// field manager owns a field the apply would change.
    pub conflict: bool,
}

/// Where the ManifestWorks live: the hub's API server for `run`, memory for
/// the simulator. Every method is one operation; the orchestration makes
/// several at once.
pub trait World: Send + Sync {
    /// Every ManifestWork labelled with the owner label value `owner_label`,
    /// in every namespace.
    fn list_works(
        &self,
        owner_label: &str,
    ) -> impl Future<Output = Result<Vec<Arc<ManifestWork>>, WorldError>> + Send;

    /// Creates or updates `work` (server-side apply with field manager
    /// [`FIELD_MANAGER`]: the controller owns the fields it sets) and
    /// returns it as stored. With `force` the apply takes over fields
    /// another manager owns; without, such a change is refused
    /// ([`WorldError::conflict`]).
    fn apply_work(
        &self,
        work: ManifestWork,
        force: bool,
    ) -> impl Future<Output = Result<ManifestWork, WorldError>> + Send;

    /// Sets `annotations` on the work, leaving everything else as it is.
    fn annotate_work(
        &self,
        namespace: &str,
        name: &str,
        annotations: BTreeMap<String, String>,
    ) -> impl Future<Output = Result<(), WorldError>> + Send;

    /// Deletes the work; a work already gone is not an error.
    fn delete_work(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), WorldError>> + Send;
}

/// Tunables of the orchestration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How soon to ask again about a `Validating` cluster when the plugin
    /// gave no `recheck_after`.
    pub validation_poll: Duration,
    /// How soon to try again after a hook or write failed.
    pub error_requeue: Duration,
    /// How many clusters of a placement have their hook calls (and writes)
    /// in flight at once within a phase; at least 1.
    pub hook_concurrency: usize,
    /// How long a work another field manager wrote is left alone before
    /// the controller takes it over again ([`conflict`]).
    pub conflict_backoff: Duration,
}

/// [`Settings::conflict_backoff`] when not configured.
pub const DEFAULT_CONFLICT_BACKOFF: Duration = Duration::from_secs(600);

/// [`Settings::hook_concurrency`] when not configured: enough to keep a
/// hub's gateway busy without flooding it.
pub const DEFAULT_HOOK_CONCURRENCY: usize = 32;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            validation_poll: Duration::from_secs(15),
            error_requeue: Duration::from_secs(5),
            hook_concurrency: DEFAULT_HOOK_CONCURRENCY,
            conflict_backoff: DEFAULT_CONFLICT_BACKOFF,
        }
    }
}

/// Where the orchestration reads the time: before each validation phase,
/// each decision and an abort, not once per step.
pub trait Clock: fmt::Debug + Send + Sync {
    /// The time now.
    fn now(&self) -> Timestamp;
}

/// The system clock (`run`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock stopped at a time (the simulator's step, tests).
impl Clock for Timestamp {
    fn now(&self) -> Timestamp {
        *self
    }
}

/// The ManifestWorkReplicaSet being rolled out.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// Its namespace.
    pub namespace: &'a str,
    /// Its name.
    pub name: &'a str,
    /// The owner label value on its works (hashed when too long).
    pub label: &'a str,
    /// Its own labels, copied onto its works as upstream does.
    pub labels: &'a BTreeMap<String, String>,
}

/// One placement to roll out to.
#[derive(Debug, Clone)]
pub struct PlacementTarget<'a> {
    /// The placement's name.
    pub name: &'a str,
    /// Its validated rollout strategy.
    pub strategy: &'a Strategy,
    /// Its decision groups.
    pub groups: &'a [ClusterGroup],
    /// Why nothing may be done for it in this step (its plugin is not
    /// loaded); it is still observed.
    pub hold: Option<&'a str>,
    /// How much rollout state its plugin asked for (its `Initialize`
    /// answer): with [`StateDetail::Counts`] the requests carry no
    /// `rollout_status`.
    pub state_detail: StateDetail,
}

/// Everything one step of the rollout needs.
#[derive(Debug, Clone)]
pub struct DeployInput<'a> {
    /// The ManifestWorkReplicaSet.
    pub owner: Owner<'a>,
    /// Every placement name in the spec: works of any other placement are
    /// deleted. A spec placement missing from `placements` (not found, bad
    /// decisions) keeps its works untouched.
    pub spec_placements: &'a [String],
    /// The placements to roll out, in spec order.
    pub placements: &'a [PlacementTarget<'a>],
    /// Every ManifestWork the ManifestWorkReplicaSet owns (shared, as a
    /// watch cache holds them).
    pub works: &'a [Arc<ManifestWork>],
    /// The current template's revision.
    pub update: &'a Revision,
    /// `status.currentRevision`, the last revision rolled out everywhere.
    pub current_hash: Option<&'a str>,
    /// The current revision with its template (from its ControllerRevision);
    /// `None` if there is none or it is gone.
    pub current: Option<&'a Revision>,
    /// Whether an abort is under way (`status.abortedTime` is set).
    pub aborted: bool,
    /// The time, read before each validation phase, decision and abort.
    pub clock: &'a dyn Clock,
    /// Tunables.
    pub settings: &'a Settings,
    /// The trace context the hook calls descend from.
    pub trace: &'a opentelemetry::Context,
}

/// A hook call that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookFailure {
    /// The cluster, for a per-cluster hook.
    pub cluster: Option<String>,
    /// The error.
    pub error: HookError,
}

impl fmt::Display for HookFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cluster {
            Some(cluster) => write!(f, "cluster {cluster}: {}", self.error),
            None => write!(f, "{}", self.error),
        }
    }
}

/// One cluster of a placement after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterReport {
    /// The cluster.
    pub cluster: String,
    /// Its status for the desired revision (`TimeOut` once its deadline
    /// passed; `ToApply` when it has no work of that revision).
    pub status: RolloutStatus,
    /// Its decision group's index.
    pub group_index: i32,
    /// Its decision group's name.
    pub group_name: String,
    /// When the status began.
    pub last_transition_time: Option<Timestamp>,
    /// The revision its work carries, if it has one.
    pub revision: Option<String>,
    /// The validation message, or the error of a hook call about it.
    pub message: Option<String>,
}

/// Counts of a placement's works by condition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkCounts {
    /// Works.
    pub total: usize,
    /// With `Applied` True.
    pub applied: usize,
    /// With `Available` True.
    pub available: usize,
    /// With `Degraded` True.
    pub degraded: usize,
    /// With `Progressing` True.
    pub progressing: usize,
}

/// Why a rollout was aborted in this step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortReport {
    /// The placement where it happened.
    pub placement: String,
    /// What follows: [`AbortAction::RollBack`] or [`AbortAction::Stop`].
    pub action: AbortAction,
    /// The failed and timed-out clusters of the update revision.
    pub failures: Vec<ClusterReport>,
}

/// One placement after a step.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacementOutcome {
    /// The placement.
    pub name: String,
    /// The revision rolled out in this step.
    pub desired_revision: String,
    /// Whether it is a rollback (or a stopped rollout).
    pub aborting: bool,
    /// Whether the rollout is stopped (aborted with nothing to go back to).
    pub stopped: bool,
    /// Whether the placement was on hold.
    pub held: bool,
    /// Every cluster of the placement, in rollout order.
    pub clusters: Vec<ClusterReport>,
    /// The engine's decision (after any abort).
    pub result: RolloutResult,
    /// The placement's works after this step, by condition.
    pub works: WorkCounts,
    /// Clusters whose work of the update revision succeeded.
    pub updated: usize,
    /// Clusters with a work of the update revision (the rollback design's
    /// "already updated").
    pub at_update: usize,
    /// Hook calls that failed.
    pub hook_errors: Vec<HookFailure>,
    /// Writes that failed.
    pub world_errors: Vec<WorldError>,
    /// Works another field manager wrote since the controller applied
    /// them, and applies the API server refused with 409 Conflict.
    pub conflicts: Vec<WorkConflict>,
    /// Clusters whose work was applied in this step, in order.
    pub applied: Vec<String>,
    /// Clusters whose work was deleted (they left the placement).
    pub deleted: Vec<String>,
    /// When to look again for this placement.
    pub requeue_after: Option<Duration>,
}

impl PlacementOutcome {
    /// Whether every cluster of the placement succeeded with the desired
    /// revision (true for an empty placement, as upstream).
    pub fn complete(&self) -> bool {
        self.clusters
            .iter()
            .all(|c| c.status == RolloutStatus::Succeeded)
    }

    /// The number of clusters in `status`.
    pub fn count(&self, status: RolloutStatus) -> usize {
        self.clusters.iter().filter(|c| c.status == status).count()
    }
}

/// The outcome of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct DeployOutcome {
    /// One per [`DeployInput::placements`], in order.
    pub placements: Vec<PlacementOutcome>,
    /// When an abort started in this step.
    pub aborted_at: Option<Timestamp>,
    /// Why it started.
    pub abort: Option<AbortReport>,
    /// Works of placements no longer in the spec, deleted.
    pub deleted_stale: Vec<(String, String)>,
    /// Writes outside any placement that failed.
    pub world_errors: Vec<WorldError>,
    /// When to look again: the soonest of the placements'.
    pub requeue_after: Option<Duration>,
}

impl DeployOutcome {
    /// Every hook failure, with its placement.
    pub fn hook_errors(&self) -> impl Iterator<Item = (&str, &HookFailure)> {
        self.placements
            .iter()
            .flat_map(|p| p.hook_errors.iter().map(move |e| (p.name.as_str(), e)))
    }

    /// What the ManifestWorksConflict condition and its Event say about
    /// the works other field managers wrote: the first few, how many more,
    /// and what to do; `None` when there is none.
    pub fn conflict_message(&self) -> Option<String> {
        let conflicts: Vec<String> = self
            .placements
            .iter()
            .flat_map(|p| &p.conflicts)
            .map(ToString::to_string)
            .collect();
        if conflicts.is_empty() {
            return None;
        }
        let shown = conflicts.len().min(MAX_CONFLICTS_NAMED);
        let mut message = conflicts[..shown].join(". ");
        if conflicts.len() > shown {
            message.push_str(&format!(". And {} more", conflicts.len() - shown));
        }
        message.push_str(
            ". Another writer changes these works: stop it (OCM's own ManifestWorkReplicaSet \
             controller is turned off with the ClusterManager's workConfiguration.featureGates \
             ManifestWorkReplicaSet: Disable) or stop editing them.",
        );
        Some(message)
    }

    /// Every failed write.
    pub fn all_world_errors(&self) -> impl Iterator<Item = &WorldError> {
        self.world_errors
            .iter()
            .chain(self.placements.iter().flat_map(|p| &p.world_errors))
    }
}

/// The validation message of a work adopted from another controller.
pub const ADOPTED_MESSAGE: &str = "adopted: written by another controller for this template";

/// How many conflicting works [`DeployOutcome::conflict_message`] names.
const MAX_CONFLICTS_NAMED: usize = 5;

/// The soonest of two optional waits.
pub fn soonest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The name of the ManifestWork of `owner`'s `placement` in any cluster
/// namespace: `<mwrs>-<8 hex digits>`, the digits hashing the owner's
/// namespace and the placement, so two ManifestWorkReplicaSets of one name
/// in different namespaces, or two placements selecting one cluster, never
/// share a work. Cut to fit 253 characters. An existing work keeps its name.
pub fn work_name(owner_namespace: &str, owner_name: &str, placement: &str) -> String {
    let digest = fnv1a64(format!("{owner_namespace}/{placement}").as_bytes());
    let suffix = format!("{:08x}", digest as u32);
    let room = revision::MAX_NAME_LEN - suffix.len() - 1;
    let mut end = owner_name.len().min(room);
    while !owner_name.is_char_boundary(end) {
        end -= 1;
    }
    let prefix = owner_name[..end].trim_end_matches(['-', '.']);
    format!("{prefix}-{suffix}")
}

/// The ManifestWork of `revision` for `cluster`: named `name`, labelled
/// with the owner's labels, the owner label, the placement and the revision
/// hash, annotated with the owner; its spec the revision's template.
pub fn desired_work(
    owner: &Owner<'_>,
    placement: &str,
    cluster: &str,
    name: &str,
    revision: &Revision,
) -> ManifestWork {
    let mut work = ManifestWork::new(name, revision.template.clone());
    work.metadata.namespace = Some(cluster.to_owned());
    let mut labels = owner.labels.clone();
    labels.extend(required_labels(owner, placement, &revision.hash));
    work.metadata.labels = Some(labels);
    work.metadata.annotations = Some(BTreeMap::from([(
        OWNER_ANNOTATION.to_owned(),
        format!("{}/{}", owner.namespace, owner.name),
    )]));
    work
}

fn required_labels(owner: &Owner<'_>, placement: &str, hash: &str) -> [(String, String); 3] {
    [
        (MWRS_OWNER_LABEL.to_owned(), owner.label.to_owned()),
        (PLACEMENT_NAME_LABEL.to_owned(), placement.to_owned()),
        (CONTROLLER_HASH_LABEL.to_owned(), hash.to_owned()),
    ]
}

/// The work to apply after a plugin's mutation (`mutated`, or `desired`
/// when the plugin left it unchanged): the mutated labels, annotations and
/// spec, with the identity, the controller's labels and annotations put
/// back, and [`SPEC_HASH_ANNOTATION`] set; nothing else of the metadata,
/// and no status.
pub fn finish_work(
    desired: &ManifestWork,
    mutated: Option<ManifestWork>,
    owner: &Owner<'_>,
    placement: &str,
    hash: &str,
) -> ManifestWork {
    let source = match mutated {
        Some(mut mutated) => {
            // Manifests the plugin left as they were stay shared with the
            // revision's (one copy for the fleet, not one per cluster).
            if mutated.spec.workload.manifests == desired.spec.workload.manifests {
                mutated.spec.workload.manifests = desired.spec.workload.manifests.clone();
            }
            mutated
        }
        None => desired.clone(),
    };
    let mut labels = source.metadata.labels.unwrap_or_default();
    labels.extend(required_labels(owner, placement, hash));
    let mut annotations = source.metadata.annotations.unwrap_or_default();
    annotations.insert(
        OWNER_ANNOTATION.to_owned(),
        format!("{}/{}", owner.namespace, owner.name),
    );
    annotations.insert(
        SPEC_HASH_ANNOTATION.to_owned(),
        observe::spec_hash_of(&source.spec),
    );
    ManifestWork {
        metadata: ObjectMeta {
            name: desired.metadata.name.clone(),
            namespace: desired.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: source.spec,
        status: None,
    }
}

/// Counts of `works` by condition (True only), as upstream's status
/// reconciler counts them: only works of `desired_revision` as the
/// controller applied them ([`observe::is_current`]) and not being deleted.
/// A work of an older revision (a template change not rolled out to its
/// cluster yet) does not count, so its `Available` cannot make the set look
/// `AsExpected`.
pub fn count_works<'a>(
    works: impl IntoIterator<Item = &'a ManifestWork>,
    desired_revision: &str,
) -> WorkCounts {
    let mut counts = WorkCounts::default();
    let counted = works
        .into_iter()
        .filter(|w| !is_deleting(w) && observe::is_current(w, desired_revision));
    for work in counted {
        counts.total += 1;
        let is_true = |kind: &str| {
            work.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == kind && c.status == "True")
            })
        };
        counts.applied += usize::from(is_true(work_status::APPLIED));
        counts.available += usize::from(is_true(CONDITION_AVAILABLE));
        counts.degraded += usize::from(is_true(work_status::DEGRADED));
        counts.progressing += usize::from(is_true(work_status::PROGRESSING));
    }
    counts
}

fn placement_of(work: &ManifestWork) -> Option<&str> {
    work.labels().get(PLACEMENT_NAME_LABEL).map(String::as_str)
}

fn is_deleting(work: &ManifestWork) -> bool {
    work.metadata.deletion_timestamp.is_some()
}

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

    // Works whose placement left the spec (or that name none).
    let in_spec: BTreeSet<&str> = input.spec_placements.iter().map(String::as_str).collect();
    for work in input.works {
        let keep = placement_of(work).is_some_and(|p| in_spec.contains(p));
        if keep || is_deleting(work) {
            continue;
        }
        let (namespace, name) = (work.namespace().unwrap_or_default(), work.name_any());
        match world.delete_work(&namespace, &name).await {
            Ok(()) => outcome.deleted_stale.push((namespace, name)),
            Err(err) => {
                outcome.requeue_after =
                    soonest(outcome.requeue_after, Some(input.settings.error_requeue));
                outcome.world_errors.push(err);
            }
        }
    }

    let mut aborted = input.aborted;
    for target in input.placements {
        let step = PlacementStep {
            hooks,
            world,
            input,
            target,
            plugin: target.strategy.plugin.as_deref(),
            order: RolloutOrder::new(target.strategy, target.groups),
        };
        let (placement, abort) = step.run(aborted).await;
        if let Some((at, report)) = abort {
            aborted = true;
            outcome.aborted_at = Some(at);
            outcome.abort = Some(report);
        }
        outcome.requeue_after = soonest(outcome.requeue_after, placement.requeue_after);
        outcome.placements.push(placement);
    }
    trace::record_step(input, &outcome);
    outcome
}

/// The statuses of one placement's clusters for one desired revision.
struct View {
    desired: Revision,
    /// Whether the requests say `aborting`.
    aborting: bool,
    /// Observed status per cluster in the placement (work of the desired
    /// revision).
    observed: BTreeMap<String, Observed>,
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
}

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

/// One cluster's work to roll out.
struct Job<'c> {
    cluster: &'c str,
    work: ManifestWork,
    /// Whether the apply takes over fields another manager owns.
    force: bool,
}

/// How one cluster's roll-out went, from its concurrent task.
enum RolledOut {
    Applied(Box<ManifestWork>),
    HookFailed(HookError),
    WriteFailed(WorldError),
}

struct PlacementStep<'s, 'a, H, W> {
    hooks: &'s H,
    world: &'s W,
    input: &'s DeployInput<'a>,
    target: &'s PlacementTarget<'a>,
    plugin: Option<&'s str>,
    order: RolloutOrder,
}

impl<H: Hooks, W: World> PlacementStep<'_, '_, H, W> {
    /// Runs the step for the placement: observe, validate, decide (again
    /// from observe after an abort turns into a rollback), act, prune;
    /// returns its outcome and, when an abort started here, when and why.
    async fn run(
        &self,
        already_aborted: bool,
    ) -> (PlacementOutcome, Option<(Timestamp, AbortReport)>) {
        let mut state = self.begin(already_aborted);
        let (mut view, result) = loop {
            let mut view = self.observe(&state);
            if self.acting()
                && let Some(plugin) = self.plugin
            {
                self.validate(plugin, &mut state, &mut view).await;
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
    /// (a second one for a cluster, such as a leftover of another
    /// controller, is ignored), and the abort action so far.
    fn begin(&self, already_aborted: bool) -> StepState {
        let input = self.input;
        let mut works: BTreeMap<String, Arc<ManifestWork>> = BTreeMap::new();
        for work in input.works {
            if placement_of(work) != Some(self.target.name) || is_deleting(work) {
                continue;
            }
            let cluster = work.namespace().unwrap_or_default();
            works
                .entry(cluster)
                .or_insert_with(|| self.adopt(Arc::clone(work)));
        }
        let conflicts = conflict::conflicts_of(works.iter().map(|(c, w)| (c, w.as_ref())));
        StepState {
            works,
            outcome: PlacementOutcome {
                name: self.target.name.to_owned(),
                desired_revision: input.update.hash.clone(),
                aborting: false,
                stopped: false,
                held: !self.acting(),
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
            action: revision::abort_action(
                already_aborted,
                false,
                &input.update.hash,
                input.current_hash,
                input.current,
            ),
            abort: None,
        }
    }

    /// A work another controller wrote (OCM's own ManifestWorkReplicaSet
    /// controller: the owner and placement labels, no `controller-hash`, no
    /// spec hash) whose spec is the template of the update revision or of
    /// the current one counts as on that revision, as if this controller
    /// had applied it and its plugin had validated it: moving from OCM's
    /// controller does not roll the fleet out again. Nothing is written; the
    /// work is taken over when a new revision is rolled out to it.
    fn adopt(&self, work: Arc<ManifestWork>) -> Arc<ManifestWork> {
        if observe::work_revision(&work).is_some()
            || work.annotations().contains_key(SPEC_HASH_ANNOTATION)
        {
            return work;
        }
        let spec = observe::spec_hash_of(&work.spec);
        let input = self.input;
        let Some(revision) = std::iter::once(input.update)
            .chain(input.current)
            .find(|r| observe::spec_hash_of(&r.template) == spec)
        else {
            return work;
        };
        let mut adopted = ManifestWork::clone(&work);
        adopted
            .metadata
            .labels
            .get_or_insert_default()
            .insert(CONTROLLER_HASH_LABEL.to_owned(), revision.hash.clone());
        let verdict = Verdict {
            result: ValidationResult::Succeeded,
            message: ADOPTED_MESSAGE.to_owned(),
        };
        let generation = adopted.metadata.generation.unwrap_or(0);
        let annotations = adopted.metadata.annotations.get_or_insert_default();
        annotations.insert(SPEC_HASH_ANNOTATION.to_owned(), spec);
        annotations.extend(observe::verdict_annotations(
            &verdict,
            &revision.hash,
            generation,
        ));
        Arc::new(adopted)
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
                    observe::observe(work, &desired.hash, validation).map(|o| (cluster.clone(), o))
                })
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

    /// Validate: `ValidateRolloutCompletion` for each `Validating` cluster
    /// not past its deadline (and not asked already in this step),
    /// concurrently; SUCCEEDED and FAILED are persisted on the work and
    /// folded into the view, INPROGRESS asks to come back.
    async fn validate(&self, plugin: &str, state: &mut StepState, view: &mut View) {
        let input = self.input;
        let now = input.clock.now();
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
            trace: input.trace,
        };
        let desired = view.desired.hash.as_str();
        let answers: Vec<Validated> = futures::stream::iter(asks)
            .map(
                |Ask {
                     cluster,
                     ends,
                     work,
                 }| {
                    let request = requests.cluster(&cluster);
                    async move {
                        let answer = self.hooks.validate_rollout_completion(call, request).await;
                        let persisted = match (&answer, &work) {
                            (Ok(response), Some((name, generation))) => match decided(response) {
                                Some(result) => {
                                    let verdict = Verdict {
                                        result,
                                        message: response.message.clone(),
                                    };
                                    let annotations = observe::verdict_annotations(
                                        &verdict,
                                        desired,
                                        *generation,
                                    );
                                    let written = self
                                        .world
                                        .annotate_work(&cluster, name, annotations.clone())
                                        .await;
                                    Some((annotations, written))
                                }
                                None => None,
                            },
                            _ => None,
                        };
                        Validated {
                            cluster,
                            ends,
                            answer,
                            persisted,
                        }
                    }
                },
            )
            .buffered(self.limit())
            .collect()
            .await;
        for Validated {
            cluster,
            ends,
            answer,
            persisted,
        } in answers
        {
            let response = match answer {
                Ok(response) => response,
                Err(error) => {
                    state.messages.insert(cluster.clone(), error.to_string());
                    state.outcome.hook_errors.push(HookFailure {
                        cluster: Some(cluster),
                        error,
                    });
                    continue;
                }
            };
            if !response.message.is_empty() {
                state
                    .messages
                    .insert(cluster.clone(), response.message.clone());
            }
            let Some(result) = decided(&response) else {
                // INPROGRESS, or an answer that decides nothing.
                let hint = response
                    .recheck_after
                    .and_then(|d| Duration::try_from(d).ok())
                    .filter(|d| !d.is_zero())
                    .unwrap_or(input.settings.validation_poll);
                let until_deadline =
                    ends.and_then(|ends| Duration::try_from(ends.duration_since(now)).ok());
                let wait = soonest(Some(hint), until_deadline);
                state.outcome.requeue_after = soonest(state.outcome.requeue_after, wait);
                continue;
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

    /// Handles an abort the decision asks for; true when the step must
    /// observe again, for the revision rolled back to.
    fn abort(&self, state: &mut StepState, view: &View, result: &RolloutResult) -> bool {
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
    fn restore_at_once(
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
    fn failing(&self, state: &StepState) -> BTreeSet<String> {
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

    /// Act: `ProgressRollout` once, then for each cluster to roll out
    /// BeginRollout, MutateManifestWork and the apply, in that order per
    /// cluster, up to [`Settings::hook_concurrency`] clusters at once.
    /// Without a plugin, only the applies.
    async fn act(
        &self,
        state: &mut StepState,
        view: &View,
        result: &RolloutResult,
        removed: &[Reported],
    ) {
        let to_roll_out: Vec<&ClusterRolloutStatus> = result
            .clusters_to_rollout
            .iter()
            .filter(|c| c.status == RolloutStatus::ToApply)
            // A work of the desired revision applied but not yet seen by
            // the agent is waiting, not to roll out again.
            .filter(|c| !view.observed.contains_key(&c.cluster_name))
            .filter(|c| self.may_apply(state, &c.cluster_name, &view.desired.hash))
            .collect();
        let requests = match self.call() {
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
                let counts = request::rollout_counts(&lists);
                let requests = self.requests(view, &lists, counts);
                if let Err(error) = self
                    .hooks
                    .progress_rollout(call, requests.placement())
                    .await
                {
                    state.outcome.hook_errors.push(HookFailure {
                        cluster: None,
                        error,
                    });
                    return;
                }
                Some((call, requests))
            }
            None => None,
        };
        if state.outcome.stopped {
            return;
        }
        // The template's JSON once for the step: each work's is its own
        // metadata around it.
        let spec_json = match requests {
            Some(_) => match serde_json::to_vec(&view.desired.template) {
                Ok(json) => Some(json),
                Err(err) => {
                    state.outcome.world_errors.push(WorldError {
                        action: "encoding",
                        namespace: String::new(),
                        name: String::new(),
                        message: err.to_string(),
                        conflict: false,
                    });
                    return;
                }
            },
            None => None,
        };
        let jobs: Vec<(String, ManifestWork, bool)> = to_roll_out
            .iter()
            .map(|c| {
                let cluster = c.cluster_name.clone();
                let name = self.name_for(&state.works, &cluster);
                let work = desired_work(
                    &self.input.owner,
                    self.target.name,
                    &cluster,
                    &name,
                    &view.desired,
                );
                let force = state
                    .works
                    .get(&cluster)
                    .is_some_and(|w| conflict::foreign_owned(w));
                (cluster, work, force)
            })
            .collect();
        let requests = requests.as_ref();
        let spec_json = spec_json.as_deref();
        let done: Vec<(String, RolledOut)> = futures::stream::iter(jobs)
            .map(|(cluster, work, force)| async move {
                let rolled = match (requests, spec_json) {
                    (Some((call, requests)), Some(spec_json)) => {
                        let job = Job {
                            cluster: &cluster,
                            work,
                            force,
                        };
                        self.roll_out(*call, requests, job, spec_json, &view.desired)
                            .await
                    }
                    _ => {
                        let work = finish_work(
                            &work,
                            None,
                            &self.input.owner,
                            self.target.name,
                            &view.desired.hash,
                        );
                        self.apply(work, force).await
                    }
                };
                (cluster, rolled)
            })
            .buffered(self.limit())
            .collect()
            .await;
        for (cluster, rolled) in done {
            match rolled {
                RolledOut::Applied(stored) => {
                    state.outcome.applied.push(cluster.clone());
                    state.works.insert(cluster, Arc::new(*stored));
                }
                RolledOut::HookFailed(error) => {
                    state.messages.insert(cluster.clone(), error.to_string());
                    state.outcome.hook_errors.push(HookFailure {
                        cluster: Some(cluster),
                        error,
                    });
                }
                RolledOut::WriteFailed(err) if err.conflict => {
                    state.outcome.conflicts.retain(|c| c.cluster != cluster);
                    state.outcome.conflicts.push(WorkConflict {
                        cluster,
                        work: err.name.clone(),
                        managers: Vec::new(),
                        at: None,
                        refused: Some(err.message.clone()),
                        left_alone: true,
                    });
                    state.outcome.world_errors.push(err);
                }
                RolledOut::WriteFailed(err) => state.outcome.world_errors.push(err),
            }
        }
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
    async fn prune(&self, state: &mut StepState, removed: &[Reported]) {
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

    /// BeginRollout, MutateManifestWork and the apply, for one cluster, in
    /// that order.
    async fn roll_out(
        &self,
        call: Call<'_>,
        requests: &Requests<'_>,
        job: Job<'_>,
        spec_json: &[u8],
        desired: &Revision,
    ) -> RolledOut {
        let Job {
            cluster,
            work,
            force,
        } = job;
        let owner = &self.input.owner;
        let placement = self.target.name;
        let request = requests.cluster(cluster);
        if let Err(error) = self.hooks.begin_rollout(call, request.clone()).await {
            return RolledOut::HookFailed(error);
        }
        let json = match work_json(&work, spec_json) {
            Ok(json) => json,
            Err(err) => {
                return RolledOut::WriteFailed(WorldError {
                    action: "encoding",
                    namespace: cluster.to_owned(),
                    name: work.name_any(),
                    message: err.to_string(),
                    conflict: false,
                });
            }
        };
        let mutation = match self
            .hooks
            .mutate_manifest_work(call, request, json.into())
            .await
        {
            Ok(mutation) => mutation,
            Err(error) => return RolledOut::HookFailed(error),
        };
        let mutated = match mutation
            .work
            .as_deref()
            .map(serde_json::from_slice::<ManifestWork>)
        {
            None => None,
            Some(Ok(mutated)) => Some(mutated),
            Some(Err(err)) => {
                return RolledOut::HookFailed(HookError {
                    hook: HookKind::MutateManifestWork,
                    code: tonic::Code::Internal,
                    message: format!("the mutated ManifestWork cannot be read: {err}"),
                    origin: crate::hooks::Origin::Answer,
                });
            }
        };
        if !mutation.failed_open.is_empty() {
            tracing::warn!(
                cluster,
                failed_open = mutation.failed_open.join(","),
                "plugins failed open on MutateManifestWork"
            );
        }
        let work = finish_work(&work, mutated, owner, placement, &desired.hash);
        self.apply(work, force).await
    }

    async fn apply(&self, work: ManifestWork, force: bool) -> RolledOut {
        match self.world.apply_work(work, force).await {
            Ok(stored) => RolledOut::Applied(Box::new(stored)),
            Err(err) => RolledOut::WriteFailed(err),
        }
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

/// The JSON of `work` with `spec_json` (its spec's JSON, encoded once for
/// every work of the step) spliced in rather than encoded again.
fn work_json(work: &ManifestWork, spec_json: &[u8]) -> Result<Vec<u8>, serde_json::Error> {
    let head = ManifestWork {
        metadata: work.metadata.clone(),
        spec: ManifestWorkSpec::default(),
        status: None,
    };
    let mut object = match serde_json::to_value(&head)? {
        serde_json::Value::Object(object) => object,
        _ => serde_json::Map::new(),
    };
    object.remove("spec");
    object.remove("status");
    let mut json = serde_json::to_vec(&object)?;
    // `{…}` becomes `{…,"spec":<spec>}`.
    json.pop();
    if !object.is_empty() {
        json.push(b',');
    }
    json.extend_from_slice(b"\"spec\":");
    json.extend_from_slice(spec_json);
    json.push(b'}');
    Ok(json)
}

/// The engine's input: the observed status of each cluster of the
/// placement, with its group.
fn existing_statuses(view: &View, order: &RolloutOrder) -> Vec<ClusterRolloutStatus> {
    view.observed
        .iter()
        .map(|(cluster, o)| status_of(cluster, o, order))
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
