//! The rollout of one ManifestWorkReplicaSet, one reconcile step at a time:
//! the design's sequence (DESIGN-rollout-plugin.md, "Rollout sequence with
//! plugin") over the pure engine, the plugin [`Hooks`] and a [`World`] that
//! holds the ManifestWorks.
//!
//! [`deploy`] is shared by `rollout-controller run` (the [`World`] is the
//! Kubernetes API) and the simulator (the [`World`] is an in-memory fleet).
//! For each placement it:
//!
//! 1. takes the placement's ManifestWorks and derives each cluster's status
//!    for the desired revision ([`observe`]): a work of another revision, or
//!    one changed by hand, counts as not there; with a plugin a work done
//!    progressing is `Validating` until the plugin decided;
//! 2. calls `ValidateRolloutCompletion` for each `Validating` cluster whose
//!    `lastTransitionTime + progressDeadline` has not passed; SUCCEEDED and
//!    FAILED are persisted on the work ([`World::annotate_work`]) so they
//!    stick; INPROGRESS asks to come back after its `recheck_after` (or
//!    [`Settings::validation_poll`]);
//! 3. runs the engine ([`rollout::decide`]);
//! 4. handles the abort ([`revision::abort_action`]): with abort on and a
//!    failure, the desired revision becomes the current one and steps 1–3
//!    run again for it, every request then saying `aborting = true`; with no
//!    revision to go back to, nothing more is rolled out;
//! 5. calls `ProgressRollout` once;
//! 6. for each cluster to roll out (`ToApply`) that does not already have
//!    the desired work: `BeginRollout`, `MutateManifestWork` with the desired
//!    ManifestWork as JSON, then applies the mutated work
//!    ([`World::apply_work`]);
//! 7. deletes the works of clusters that left the placement.
//!
//! Works of placements no longer in the spec are deleted first.
//!
//! Without a plugin no hook is called and no cluster is ever `Validating`:
//! OCM's behaviour. A hook that fails stops its cluster for this step (a
//! failed `ProgressRollout` stops every cluster of the placement); the
//! failures come back in [`PlacementOutcome::hook_errors`] for the
//! `Progressing` condition, and the step asks to come back after
//! [`Settings::error_requeue`]. A placement on [`PlacementTarget::hold`]
//! (its plugin is not loaded) is only observed: no hook, no write.

pub mod memory;
pub mod observe;
pub mod request;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::future::Future;
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use rollout_proto::v1alpha1::{
    MutateManifestWorkRequest, ValidateCompletionRequest, ValidationResult as ProtoValidation,
};
use thiserror::Error;

use crate::api::ManifestWork;
use crate::api::annotations::{OWNER_ANNOTATION, SPEC_HASH_ANNOTATION};
use crate::api::labels::{CONTROLLER_HASH_LABEL, MWRS_OWNER_LABEL, PLACEMENT_NAME_LABEL, fnv1a64};
use crate::api::manifestwork::CONDITION_AVAILABLE;
use crate::hooks::{Call, HookError, HookKind, Hooks};
use crate::revision::{self, AbortAction, Revision, spec_hash};
use crate::rollout::work_status::{self, Validation, ValidationResult};
use crate::rollout::{
    self, ClusterGroup, ClusterRolloutStatus, RolloutResult, RolloutStatus, Strategy,
};
use observe::{Observed, Verdict};
use request::{Reported, RequestScope, RolloutOrder};

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
}

/// Where the ManifestWorks live: the hub's API server for `run`, memory for
/// the simulator. Every method is one operation.
pub trait World: Send + Sync {
    /// Every ManifestWork labelled with the owner label value `owner_label`,
    /// in every namespace.
    fn list_works(
        &self,
        owner_label: &str,
    ) -> impl Future<Output = Result<Vec<ManifestWork>, WorldError>> + Send;

    /// Creates or updates `work` (server-side apply: the controller owns the
    /// fields it sets) and returns it as stored.
    fn apply_work(
        &self,
        work: ManifestWork,
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
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            validation_poll: Duration::from_secs(15),
            error_requeue: Duration::from_secs(5),
        }
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
    /// Every ManifestWork the ManifestWorkReplicaSet owns.
    pub works: &'a [ManifestWork],
    /// The current template's revision.
    pub update: &'a Revision,
    /// `status.currentRevision`, the last revision rolled out everywhere.
    pub current_hash: Option<&'a str>,
    /// The current revision with its template (from its ControllerRevision);
    /// `None` if there is none or it is gone.
    pub current: Option<&'a Revision>,
    /// Whether an abort is under way (`status.abortedTime` is set).
    pub aborted: bool,
    /// The time of this step.
    pub now: Timestamp,
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

    /// Every failed write.
    pub fn all_world_errors(&self) -> impl Iterator<Item = &WorldError> {
        self.world_errors
            .iter()
            .chain(self.placements.iter().flat_map(|p| &p.world_errors))
    }
}

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
    let source = mutated.unwrap_or_else(|| desired.clone());
    let mut labels = source.metadata.labels.unwrap_or_default();
    labels.extend(required_labels(owner, placement, hash));
    let mut annotations = source.metadata.annotations.unwrap_or_default();
    annotations.insert(
        OWNER_ANNOTATION.to_owned(),
        format!("{}/{}", owner.namespace, owner.name),
    );
    annotations.insert(SPEC_HASH_ANNOTATION.to_owned(), spec_hash(&source.spec));
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
        };
        let (placement, abort) = step.run(aborted).await;
        if let Some(report) = abort {
            aborted = true;
            outcome.aborted_at = Some(input.now);
            outcome.abort = Some(report);
        }
        outcome.requeue_after = soonest(outcome.requeue_after, placement.requeue_after);
        outcome.placements.push(placement);
    }
    outcome
}

/// The statuses of one placement's clusters for one desired revision.
struct View {
    desired: Revision,
    /// Observed status per cluster in the placement (work of the desired
    /// revision).
    observed: BTreeMap<String, Observed>,
}

struct PlacementStep<'s, 'a, H, W> {
    hooks: &'s H,
    world: &'s W,
    input: &'s DeployInput<'a>,
    target: &'s PlacementTarget<'a>,
}

impl<H: Hooks, W: World> PlacementStep<'_, '_, H, W> {
    /// Runs the step for the placement; returns its outcome and, when an
    /// abort started here, why.
    async fn run(&self, already_aborted: bool) -> (PlacementOutcome, Option<AbortReport>) {
        let input = self.input;
        let target = self.target;
        let strategy = target.strategy;
        let plugin = strategy.plugin.as_deref();
        let validation = if plugin.is_some() {
            Validation::Plugin
        } else {
            Validation::None
        };
        let order = RolloutOrder::new(strategy, target.groups);
        let acting = target.hold.is_none();

        // The placement's works, one per cluster (a second one for a
        // cluster, such as a leftover of another controller, is ignored).
        let mut works: BTreeMap<String, ManifestWork> = BTreeMap::new();
        for work in input.works {
            if placement_of(work) != Some(target.name) || is_deleting(work) {
                continue;
            }
            let cluster = work.namespace().unwrap_or_default();
            works.entry(cluster).or_insert_with(|| work.clone());
        }

        let mut outcome = PlacementOutcome {
            name: target.name.to_owned(),
            desired_revision: input.update.hash.clone(),
            aborting: false,
            stopped: false,
            held: !acting,
            clusters: Vec::new(),
            result: RolloutResult::default(),
            works: WorkCounts::default(),
            updated: 0,
            at_update: 0,
            hook_errors: Vec::new(),
            world_errors: Vec::new(),
            applied: Vec::new(),
            deleted: Vec::new(),
            requeue_after: None,
        };
        let mut messages: HashMap<String, String> = HashMap::new();

        let mut action = revision::abort_action(
            already_aborted,
            false,
            &input.update.hash,
            input.current_hash,
            input.current,
        );
        let mut abort_report = None;
        let mut validated: BTreeSet<String> = BTreeSet::new();
        let (view, result) = loop {
            let desired = match (action, input.current) {
                (AbortAction::RollBack, Some(current)) => current.clone(),
                _ => input.update.clone(),
            };
            let aborting = action != AbortAction::Proceed;
            let mut view = View {
                observed: works
                    .iter()
                    .filter(|(cluster, _)| order.contains(cluster))
                    .filter_map(|(cluster, work)| {
                        observe::observe(work, &desired.hash, validation)
                            .map(|o| (cluster.clone(), o))
                    })
                    .collect(),
                desired,
            };
            if let (Some(plugin), true) = (plugin, acting) {
                self.validate(
                    plugin,
                    &order,
                    &mut works,
                    &mut view,
                    aborting,
                    &mut validated,
                    &mut outcome,
                    &mut messages,
                )
                .await;
            }
            let existing = existing_statuses(&view, &order);
            let result = rollout::decide(strategy, target.groups, &existing, input.now);
            if action == AbortAction::Proceed
                && revision::abort_requested(strategy, &result, &existing)
            {
                let next = revision::abort_action(
                    false,
                    true,
                    &input.update.hash,
                    input.current_hash,
                    input.current,
                );
                if next != AbortAction::Proceed {
                    abort_report = Some(AbortReport {
                        placement: target.name.to_owned(),
                        action: next,
                        failures: failures(&view, &result, &order, &messages),
                    });
                    action = next;
                    if next == AbortAction::RollBack {
                        // Observe again, for the revision rolled back to.
                        continue;
                    }
                }
            }
            break (view, result);
        };
        outcome.desired_revision = view.desired.hash.clone();
        outcome.aborting = action != AbortAction::Proceed;
        outcome.stopped = action == AbortAction::Stop;

        let scope = RequestScope {
            mwrs_name: input.owner.name,
            mwrs_namespace: input.owner.namespace,
            placement: target.name,
            desired_revision: &view.desired.hash,
            aborting: outcome.aborting,
        };
        let to_roll_out: Vec<&ClusterRolloutStatus> = result
            .clusters_to_rollout
            .iter()
            .filter(|c| c.status == RolloutStatus::ToApply)
            // A work of the desired revision applied but not yet seen by
            // the agent is waiting, not to roll out again.
            .filter(|c| !view.observed.contains_key(&c.cluster_name))
            .collect();
        let removed: Vec<Reported> = works
            .iter()
            .filter(|(cluster, _)| !order.contains(cluster))
            .map(|(cluster, work)| removed_status(cluster, work, validation))
            .collect();

        let mut progress_ok = true;
        if let (Some(plugin), true) = (plugin, acting) {
            let state = request::rollout_state(
                &order,
                &reported(&view, &order),
                &timed_out_reported(&result, &view),
                &to_roll_out
                    .iter()
                    .map(|c| Reported::new((*c).clone(), view.desired.hash.clone()))
                    .collect::<Vec<_>>(),
                &removed,
            );
            let call = Call {
                plugin,
                trace: input.trace,
            };
            if let Err(error) = self
                .hooks
                .progress_rollout(call, request::placement_request(scope, &order, &state))
                .await
            {
                outcome.hook_errors.push(HookFailure {
                    cluster: None,
                    error,
                });
                progress_ok = false;
            }

            if progress_ok && !outcome.stopped {
                for cluster in &to_roll_out {
                    self.roll_out(
                        call,
                        scope,
                        &order,
                        &state,
                        &cluster.cluster_name,
                        &view.desired,
                        &mut works,
                        &mut outcome,
                        &mut messages,
                    )
                    .await;
                }
            }
        } else if acting && !outcome.stopped {
            for cluster in &to_roll_out {
                let name = self.name_for(&works, &cluster.cluster_name);
                let work = desired_work(
                    &input.owner,
                    target.name,
                    &cluster.cluster_name,
                    &name,
                    &view.desired,
                );
                let work = finish_work(&work, None, &input.owner, target.name, &view.desired.hash);
                self.apply(&cluster.cluster_name, work, &mut works, &mut outcome)
                    .await;
            }
        }

        // Clusters that left the placement.
        if acting {
            for entry in &removed {
                let cluster = &entry.status.cluster_name;
                let Some(work) = works.get(cluster) else {
                    continue;
                };
                let name = work.name_any();
                match self.world.delete_work(cluster, &name).await {
                    Ok(()) => {
                        outcome.deleted.push(cluster.clone());
                        works.remove(cluster);
                    }
                    Err(err) => outcome.world_errors.push(err),
                }
            }
        }

        // The report.
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
        outcome.works = count_works(works.values(), &view.desired.hash);
        outcome.at_update = works
            .iter()
            .filter(|(c, w)| order.contains(c) && observe::is_current(w, &input.update.hash))
            .count();
        outcome.updated = works
            .iter()
            .filter(|(c, _)| order.contains(c))
            .filter_map(|(_, w)| observe::observe(w, &input.update.hash, validation))
            .filter(|o| o.status.status == RolloutStatus::Succeeded)
            .count();
        if !outcome.hook_errors.is_empty() || !outcome.world_errors.is_empty() {
            outcome.requeue_after =
                soonest(outcome.requeue_after, Some(input.settings.error_requeue));
        }
        outcome.requeue_after = soonest(outcome.requeue_after, result.recheck_after);
        outcome.result = result;
        (outcome, abort_report)
    }

    /// Calls `ValidateRolloutCompletion` for each `Validating` cluster of
    /// `view` not past its deadline (and not asked already in this step),
    /// folding SUCCEEDED and FAILED into the view and persisting them.
    #[allow(clippy::too_many_arguments)]
    async fn validate(
        &self,
        plugin: &str,
        order: &RolloutOrder,
        works: &mut BTreeMap<String, ManifestWork>,
        view: &mut View,
        aborting: bool,
        validated: &mut BTreeSet<String>,
        outcome: &mut PlacementOutcome,
        messages: &mut HashMap<String, String>,
    ) {
        let input = self.input;
        let deadline = self.target.strategy.config().progress_deadline;
        let validating: Vec<String> = order
            .clusters()
            .iter()
            .filter(|c| {
                view.observed
                    .get(*c)
                    .is_some_and(|o| o.status.status == RolloutStatus::Validating)
            })
            .cloned()
            .collect();
        if validating.is_empty() {
            return;
        }
        let removed: Vec<Reported> = Vec::new();
        let state = request::rollout_state(order, &reported(view, order), &[], &[], &removed);
        let scope = RequestScope {
            mwrs_name: input.owner.name,
            mwrs_namespace: input.owner.namespace,
            placement: self.target.name,
            desired_revision: &view.desired.hash,
            aborting,
        };
        let call = Call {
            plugin,
            trace: input.trace,
        };
        for cluster in validating {
            let key = format!("{}/{cluster}", view.desired.hash);
            if !validated.insert(key) {
                continue;
            }
            let Some(observed) = view.observed.get(&cluster) else {
                continue;
            };
            // Polled until lastTransitionTime + progressDeadline; after that
            // the engine times the cluster out.
            let since = observed.status.last_transition_time.unwrap_or(input.now);
            let ends = deadline.map(|d| since.saturating_add(d).unwrap_or(Timestamp::MAX));
            if ends.is_some_and(|ends| input.now >= ends) {
                continue;
            }
            let request = ValidateCompletionRequest {
                rollout: Some(request::cluster_request(scope, order, &state, &cluster)),
            };
            let response = match self.hooks.validate_rollout_completion(call, request).await {
                Ok(response) => response,
                Err(error) => {
                    messages.insert(cluster.clone(), error.to_string());
                    outcome.hook_errors.push(HookFailure {
                        cluster: Some(cluster.clone()),
                        error,
                    });
                    continue;
                }
            };
            if !response.message.is_empty() {
                messages.insert(cluster.clone(), response.message.clone());
            }
            let result = match ProtoValidation::try_from(response.result) {
                Ok(ProtoValidation::Succeeded) => ValidationResult::Succeeded,
                Ok(ProtoValidation::Failed) => ValidationResult::Failed,
                // INPROGRESS, or an answer that decides nothing.
                _ => {
                    let hint = response
                        .recheck_after
                        .and_then(|d| Duration::try_from(d).ok())
                        .filter(|d| !d.is_zero())
                        .unwrap_or(input.settings.validation_poll);
                    let until_deadline = ends
                        .and_then(|ends| Duration::try_from(ends.duration_since(input.now)).ok());
                    let wait = soonest(Some(hint), until_deadline);
                    outcome.requeue_after = soonest(outcome.requeue_after, wait);
                    continue;
                }
            };
            let verdict = Verdict {
                result,
                message: response.message,
            };
            if let Some(work) = works.get_mut(&cluster) {
                let annotations = observe::verdict_annotations(
                    &verdict,
                    &view.desired.hash,
                    work.metadata.generation.unwrap_or(0),
                );
                match self
                    .world
                    .annotate_work(&cluster, &work.name_any(), annotations.clone())
                    .await
                {
                    // Keep the copy in step with the world for the counts.
                    Ok(()) => work
                        .metadata
                        .annotations
                        .get_or_insert_default()
                        .extend(annotations),
                    Err(err) => outcome.world_errors.push(err),
                }
            }
            if let Some(observed) = view.observed.get_mut(&cluster) {
                observed.status = work_status::apply_validation(observed.status, result);
                observed.verdict = Some(verdict);
            }
        }
    }

    /// The name of `cluster`'s work: the existing one's, else a new one.
    fn name_for(&self, works: &BTreeMap<String, ManifestWork>, cluster: &str) -> String {
        works.get(cluster).map_or_else(
            || {
                work_name(
                    self.input.owner.namespace,
                    self.input.owner.name,
                    self.target.name,
                )
            },
            ResourceExt::name_any,
        )
    }

    /// BeginRollout, MutateManifestWork and the apply, for one cluster.
    #[allow(clippy::too_many_arguments)]
    async fn roll_out(
        &self,
        call: Call<'_>,
        scope: RequestScope<'_>,
        order: &RolloutOrder,
        state: &rollout_proto::v1alpha1::RolloutState,
        cluster: &str,
        desired: &Revision,
        works: &mut BTreeMap<String, ManifestWork>,
        outcome: &mut PlacementOutcome,
        messages: &mut HashMap<String, String>,
    ) {
        let owner = &self.input.owner;
        let placement = self.target.name;
        let request = request::cluster_request(scope, order, state, cluster);
        let mut fail = |error: HookError, outcome: &mut PlacementOutcome| {
            messages.insert(cluster.to_owned(), error.to_string());
            outcome.hook_errors.push(HookFailure {
                cluster: Some(cluster.to_owned()),
                error,
            });
        };
        if let Err(error) = self.hooks.begin_rollout(call, request.clone()).await {
            fail(error, outcome);
            return;
        }
        let name = self.name_for(works, cluster);
        let work = desired_work(owner, placement, cluster, &name, desired);
        let json = match serde_json::to_vec(&work) {
            Ok(json) => json,
            Err(err) => {
                outcome.world_errors.push(WorldError {
                    action: "encoding",
                    namespace: cluster.to_owned(),
                    name,
                    message: err.to_string(),
                });
                return;
            }
        };
        let mutation = match self
            .hooks
            .mutate_manifest_work(
                call,
                MutateManifestWorkRequest {
                    rollout: Some(request),
                    manifest_work: json.into(),
                },
            )
            .await
        {
            Ok(mutation) => mutation,
            Err(error) => {
                fail(error, outcome);
                return;
            }
        };
        let mutated = match mutation
            .work
            .as_deref()
            .map(serde_json::from_slice::<ManifestWork>)
        {
            None => None,
            Some(Ok(mutated)) => Some(mutated),
            Some(Err(err)) => {
                fail(
                    HookError {
                        hook: HookKind::MutateManifestWork,
                        code: tonic::Code::Internal,
                        message: format!("the mutated ManifestWork cannot be read: {err}"),
                    },
                    outcome,
                );
                return;
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
        self.apply(cluster, work, works, outcome).await;
    }

    async fn apply(
        &self,
        cluster: &str,
        work: ManifestWork,
        works: &mut BTreeMap<String, ManifestWork>,
        outcome: &mut PlacementOutcome,
    ) {
        match self.world.apply_work(work).await {
            Ok(stored) => {
                outcome.applied.push(cluster.to_owned());
                works.insert(cluster.to_owned(), stored);
            }
            Err(err) => outcome.world_errors.push(err),
        }
    }
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
