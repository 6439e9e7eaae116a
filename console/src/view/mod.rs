//! `rollout-controller get NAME [--watch]` (also `kubectl mwrs get`): one
//! ManifestWorkReplicaSet's rollout as the hub sees it, for a person.
//!
//! [`build`] is pure: from what the hub holds ([`Snapshot`]: the
//! ManifestWorkReplicaSet, its ManifestWorkReplicaSetRollout, its
//! ManifestWorks, its placements' PlacementDecisions and its Events) and the
//! time, it makes the [`View`]: each placement's decision groups, each
//! cluster's rollout status and revision, the plugin's verdicts and
//! messages, the abort and rollback, and what the controller waits for.
//! [`render`] draws a view as text; `-o json` prints the view itself.
//! [`hub`] is the I/O: it reads or watches the objects through the
//! Kubernetes API and redraws.
//!
//! A cluster's status is the controller's own when its status lists the
//! cluster (it lists every cluster that is not done, with the plugin's
//! message or the hook error), else it is derived from the cluster's
//! ManifestWork as the controller derives it (its conditions, its
//! `controller-hash` label against the revision rolled out, the persisted
//! validation verdict).

pub mod hub;
pub(crate) mod render;
mod requests;
mod waiting;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use serde::Serialize;

use crate::format::describe_strategy;
use rollout_controller::api::conditions::{PLACEMENT_VERIFIED, PLUGIN_LOADED, PROGRESSING};
use rollout_controller::api::labels::PLACEMENT_LABEL;
use rollout_controller::api::manifestworkreplicasetrollout::bind;
use rollout_controller::api::{
    ClusterCounts, ClusterRolloutSummary, ManifestWork, ManifestWorkReplicaSet,
    ManifestWorkReplicaSetRollout, PlacementDecision, decision_groups,
};
use rollout_controller::orchestrate::observe::{self, work_revision};
use rollout_controller::rollout::RolloutStatus;
use rollout_controller::rollout::work_status::Validation;

pub use render::render;

/// The name under which `kubectl` finds this binary as a plugin: a copy
/// or symlink named `kubectl-mwrs` on `PATH` makes `kubectl mwrs ARGS`
/// run it with ARGS.
pub(crate) const KUBECTL_PLUGIN_FILE: &str = "kubectl-mwrs";

/// How the command presents itself when `kubectl` runs it as a plugin.
pub const KUBECTL_PLUGIN_COMMAND: &str = "kubectl mwrs";

/// Whether `argv0` (the program path as started) is the kubectl plugin
/// file: its file name, less a `.exe`, is [`KUBECTL_PLUGIN_FILE`].
/// kubectl starts a plugin with the plugin file's path as `argv[0]` (a
/// symlink keeps its own name), and the arguments after `kubectl mwrs` as
/// they are, so `kubectl mwrs get NAME --watch` is `get NAME --watch`.
pub fn is_kubectl_plugin(argv0: &std::ffi::OsStr) -> bool {
    let path = std::path::Path::new(argv0);
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    name.strip_suffix(".exe").unwrap_or(name) == KUBECTL_PLUGIN_FILE
}

/// How many of the latest Events a view shows.
pub(crate) const MAX_EVENTS: usize = 5;

/// What the hub holds about one ManifestWorkReplicaSet.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The ManifestWorkReplicaSet.
    pub(crate) mwrs: ManifestWorkReplicaSet,
    /// Its ManifestWorkReplicaSetRollout (same namespace and name), if any.
    pub(crate) carrier: Option<ManifestWorkReplicaSetRollout>,
    /// The ManifestWorks carrying its owner label.
    pub(crate) works: Vec<ManifestWork>,
    /// The PlacementDecisions of its placements.
    pub(crate) decisions: Vec<PlacementDecision>,
    /// The Events about it (`events.k8s.io/v1`).
    pub(crate) events: Vec<Event>,
}

/// The rollout as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Phase {
    /// The controller has not reported on it yet.
    Unknown,
    /// The update revision is being rolled out.
    Progressing,
    /// Every cluster runs the update revision.
    Healthy,
    /// Failures beyond `maxFailures`, or hook calls failing; no abort.
    Degraded,
    /// Aborted: rolling back to the current revision.
    RollingBack,
    /// Aborted, and the rollback is done (or there was nothing to roll
    /// back to).
    Aborted,
    /// An operator paused it: no new cluster starts.
    Paused,
}

/// Which revision a cluster's ManifestWork carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum RevisionRole {
    /// `status.updateRevision`, being rolled out.
    Update,
    /// `status.currentRevision`, the last good one.
    Current,
    /// Another revision.
    Other,
    /// No ManifestWork yet.
    None,
}

/// One cluster of a placement.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterView {
    /// The managed cluster.
    pub(crate) name: String,
    /// Its rollout status for the revision rolled out (the restored one
    /// while rolling back).
    pub(crate) status: RolloutStatus,
    /// The revision its ManifestWork carries (`controller-hash` label).
    pub(crate) revision: Option<String>,
    /// Which revision that is.
    pub(crate) revision_role: RevisionRole,
    /// The work agent's conditions that are True, such as `Applied,
    /// Available`.
    pub(crate) work: String,
    /// The plugin's message, the hook error, or the persisted verdict's
    /// message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
    /// When the status began.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) since: Option<Timestamp>,
}

/// One decision group of a placement.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GroupView {
    /// The group's index.
    pub(crate) index: i32,
    /// The group's name (may be empty).
    pub(crate) name: String,
    /// Its clusters, by name.
    pub(crate) clusters: Vec<ClusterView>,
}

/// One placement of the ManifestWorkReplicaSet.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PlacementView {
    /// The placement's name.
    pub(crate) name: String,
    /// The rollout strategy, as a phrase (or why it is invalid).
    pub(crate) strategy: String,
    /// The rollout plugin (or pipeline), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) plugin: Option<String>,
    /// `progressDeadline`, in seconds, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) progress_deadline_seconds: Option<i64>,
    /// Clusters per rollout status.
    pub(crate) counts: ClusterCounts,
    /// Whether more clusters failed than `maxFailures` allows.
    pub(crate) max_failure_breach: bool,
    /// The decision groups, by index.
    pub(crate) groups: Vec<GroupView>,
    /// Why its decision groups cannot be read, if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) problem: Option<String>,
}

/// One Event about the ManifestWorkReplicaSet.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EventView {
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    /// Such as `AbortStarted`.
    pub(crate) reason: String,
    /// What happened.
    pub(crate) note: String,
    /// When it last happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) last_seen: Option<Timestamp>,
    /// How many times.
    pub(crate) count: i32,
}

/// A condition of the ManifestWorkReplicaSet, as shown.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ConditionView {
    /// Its type.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    /// `True`, `False` or `Unknown`.
    pub(crate) status: String,
    /// Its reason.
    pub(crate) reason: String,
    /// Its message.
    pub(crate) message: String,
}

/// One ManifestWorkReplicaSet's rollout, for a person (`-o json` prints
/// it as is).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// Its namespace.
    pub(crate) namespace: String,
    /// Its name.
    pub(crate) name: String,
    /// The time the view was made.
    pub(crate) now: Timestamp,
    /// The rollout as a whole.
    pub(crate) phase: Phase,
    /// The Progressing condition's message.
    pub(crate) message: String,
    /// `status.updateRevision`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) update_revision: Option<String>,
    /// `status.currentRevision`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) current_revision: Option<String>,
    /// `status.abortedTime`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) aborted_time: Option<Timestamp>,
    /// The revision the clusters are moved to now: the update revision, or
    /// the current one while rolling back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) desired_revision: Option<String>,
    /// The pause an operator holds the rollout for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) paused: Option<requests::PauseView>,
    /// Operators' requests about the update revision (abort, retry,
    /// promote): what came of each, or that the controller has not read
    /// it yet.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) requests: Vec<requests::RequestView>,
    /// The conditions, as written by the controller.
    pub(crate) conditions: Vec<ConditionView>,
    /// The placements, in spec order.
    pub(crate) placements: Vec<PlacementView>,
    /// What the controller waits for, or why it stopped, one line each.
    pub(crate) waiting: Vec<String>,
    /// The latest Events, oldest first.
    pub(crate) events: Vec<EventView>,
}

/// The view of `snapshot` at `now` (see the module documentation).
pub fn build(snapshot: &Snapshot, now: Timestamp) -> View {
    let bound = bind(&snapshot.mwrs, snapshot.carrier.as_ref());
    let status = bound.status.clone().unwrap_or_default();
    let aborted = status.aborted_time.as_ref().map(|t| t.0);
    let desired = if aborted.is_some() {
        status.current_revision.clone()
    } else {
        status.update_revision.clone()
    };
    let conditions: Vec<ConditionView> = status
        .conditions
        .iter()
        .map(|c| ConditionView {
            kind: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect();
    let roles = Roles {
        update: status.update_revision.as_deref(),
        current: status.current_revision.as_deref(),
        desired: desired.as_deref(),
    };
    let placements: Vec<PlacementView> = bound
        .spec
        .placement_refs
        .iter()
        .map(|reference| {
            let summary = placement_status(snapshot, &status, &reference.name);
            placement_view(reference, summary, snapshot, &roles)
        })
        .collect();
    let mut view = View {
        namespace: bound.namespace().unwrap_or_default(),
        name: bound.name_any(),
        now,
        phase: Phase::Unknown,
        message: find(&conditions, PROGRESSING)
            .map(|c| c.message.clone())
            .unwrap_or_default(),
        update_revision: status.update_revision.clone(),
        current_revision: status.current_revision.clone(),
        aborted_time: aborted,
        desired_revision: desired,
        paused: requests::pause(snapshot.carrier.as_ref()),
        requests: requests::requests(snapshot.carrier.as_ref(), status.update_revision.as_deref()),
        conditions,
        placements,
        waiting: Vec::new(),
        events: events(&snapshot.events),
    };
    view.phase = phase(&view);
    view.waiting = waiting::lines(&view);
    view
}

fn find<'c>(conditions: &'c [ConditionView], kind: &str) -> Option<&'c ConditionView> {
    conditions.iter().find(|c| c.kind == kind)
}

/// The phase, from the status.
fn phase(view: &View) -> Phase {
    let Some(progressing) = find(&view.conditions, PROGRESSING) else {
        return Phase::Unknown;
    };
    let clusters = view
        .placements
        .iter()
        .flat_map(|p| &p.groups)
        .flat_map(|g| &g.clusters);
    let restored = clusters
        .clone()
        .all(|c| c.status == RolloutStatus::Succeeded);
    if view.aborted_time.is_some() {
        let stopped = view.current_revision.is_none();
        return if stopped || restored {
            Phase::Aborted
        } else {
            Phase::RollingBack
        };
    }
    let done = view.update_revision.is_some() && view.update_revision == view.current_revision;
    if view.paused.is_some() && !(done && restored) {
        return Phase::Paused;
    }
    let breach = view.placements.iter().any(|p| p.max_failure_breach);
    let false_ = |kind: &str| find(&view.conditions, kind).is_some_and(|c| c.status == "False");
    // Hook calls failing, a deadline passed, a plugin or placement missing.
    if breach
        || false_(PLUGIN_LOADED)
        || false_(PLACEMENT_VERIFIED)
        || progressing.status == "False"
    {
        return Phase::Degraded;
    }
    if done && restored {
        Phase::Healthy
    } else {
        Phase::Progressing
    }
}

/// What the controller last reported about one placement's clusters.
#[derive(Debug, Clone, Default)]
struct Reported {
    /// The clusters it listed (every one not succeeded, most urgent first).
    clusters: Vec<ClusterRolloutSummary>,
    /// Whether it listed every such cluster.
    complete: bool,
    /// Whether more clusters failed than `maxFailures` allows.
    max_failure_breach: bool,
}

/// The report on placement `name`: from the carrier's status when it has
/// one (a hub with OCM's CRD prunes it from the ManifestWorkReplicaSet),
/// else from the ManifestWorkReplicaSet's own status.
fn placement_status(
    snapshot: &Snapshot,
    status: &rollout_controller::api::ManifestWorkReplicaSetStatus,
    name: &str,
) -> Option<Reported> {
    let carried = snapshot
        .carrier
        .as_ref()
        .and_then(|c| c.status.as_ref())
        .and_then(|s| s.placements.iter().find(|p| p.name == name));
    // A report without counts (a hub whose CRD pruned them) lists nothing,
    // so it says nothing about the clusters it leaves out.
    let counted = |c: &ClusterCounts| {
        c.to_apply + c.progressing + c.validating + c.succeeded + c.failed + c.time_out + c.skip > 0
    };
    if let Some(p) = carried {
        return Some(Reported {
            clusters: p.clusters.clone(),
            complete: p.omitted_clusters == 0 && counted(&p.cluster_counts),
            max_failure_breach: p.max_failure_breach,
        });
    }
    let own = status.placements_summary.iter().find(|p| p.name == name)?;
    Some(Reported {
        clusters: own.clusters.clone(),
        complete: own.omitted_clusters == 0 && counted(&own.cluster_counts),
        max_failure_breach: own.max_failure_breach,
    })
}

/// The revisions a cluster's work is compared with.
struct Roles<'a> {
    update: Option<&'a str>,
    current: Option<&'a str>,
    desired: Option<&'a str>,
}

impl Roles<'_> {
    fn of(&self, revision: Option<&str>) -> RevisionRole {
        match revision {
            None => RevisionRole::None,
            Some(r) if Some(r) == self.update => RevisionRole::Update,
            Some(r) if Some(r) == self.current => RevisionRole::Current,
            Some(_) => RevisionRole::Other,
        }
    }
}

fn placement_view(
    reference: &rollout_controller::api::LocalPlacementReference,
    reported: Option<Reported>,
    snapshot: &Snapshot,
    roles: &Roles<'_>,
) -> PlacementView {
    let strategy = reference.strategy();
    let (text, plugin, deadline) = match &strategy {
        Ok(s) => (
            describe_strategy(s),
            s.plugin.clone(),
            s.config().progress_deadline.map(|d| d.as_secs()),
        ),
        Err(e) => (format!("invalid: {e}"), None, None),
    };
    let decisions: Vec<PlacementDecision> = snapshot
        .decisions
        .iter()
        .filter(|d| d.labels().get(PLACEMENT_LABEL) == Some(&reference.name))
        .cloned()
        .collect();
    let validation = if plugin.is_some() {
        Validation::Plugin
    } else {
        Validation::None
    };
    let reported = reported.unwrap_or_default();
    let listed: BTreeMap<&str, &ClusterRolloutSummary> = reported
        .clusters
        .iter()
        .map(|c| (c.cluster_name.as_str(), c))
        .collect();
    let listed = Listed {
        clusters: listed,
        complete: reported.complete,
    };
    let works: BTreeMap<String, &ManifestWork> = snapshot
        .works
        .iter()
        .filter(|w| {
            w.labels()
                .get(rollout_controller::api::labels::PLACEMENT_NAME_LABEL)
                == Some(&reference.name)
        })
        .map(|w| (w.namespace().unwrap_or_default(), w))
        .collect();
    let cluster = |name: &String| {
        let work = works.get(name).copied();
        cluster_view(name, work, &listed, roles, validation)
    };
    let (groups, problem) = match decision_groups(&decisions) {
        Ok(groups) => (
            groups
                .iter()
                .map(|g| GroupView {
                    index: g.index,
                    name: g.name.clone(),
                    clusters: g.clusters.iter().map(cluster).collect(),
                })
                .collect(),
            None,
        ),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let mut counts = ClusterCounts::default();
    for c in groups.iter().flat_map(|g: &GroupView| &g.clusters) {
        counts.add(c.status);
    }
    PlacementView {
        name: reference.name.clone(),
        strategy: text,
        plugin,
        progress_deadline_seconds: deadline,
        counts,
        max_failure_breach: reported.max_failure_breach,
        groups,
        problem,
    }
}

/// The conditions of `work` that are True, in the agent's order.
fn work_conditions(work: &ManifestWork) -> String {
    let true_ones: Vec<&str> = work
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .filter(|c| c.status == "True")
        .map(|c| c.type_.as_str())
        .collect();
    if true_ones.is_empty() {
        "-".to_owned()
    } else {
        true_ones.join(", ")
    }
}

/// The clusters a placement's report lists.
struct Listed<'a> {
    clusters: BTreeMap<&'a str, &'a ClusterRolloutSummary>,
    /// Whether every cluster not succeeded is listed (none omitted).
    complete: bool,
}

fn cluster_view(
    name: &str,
    work: Option<&ManifestWork>,
    listed: &Listed<'_>,
    roles: &Roles<'_>,
    validation: Validation,
) -> ClusterView {
    let revision = work.and_then(work_revision).map(str::to_owned);
    let observed = match (work, roles.desired) {
        (Some(work), Some(desired)) => observe::observe(work, desired, validation).map(|mut o| {
            // The report lists every cluster not succeeded: one left out,
            // whose work is of the revision rolled out, has succeeded.
            if listed.complete && o.status.status == RolloutStatus::Validating {
                o.status.status = RolloutStatus::Succeeded;
            }
            o
        }),
        _ => None,
    };
    let (status, since, message) = match (listed.clusters.get(name).copied(), &observed) {
        (Some(l), _) => (
            l.rollout_status,
            l.last_transition_time.as_ref().map(|t| t.0),
            l.message.clone(),
        ),
        (None, Some(o)) => (
            o.status.status,
            o.status.last_transition_time,
            o.verdict.as_ref().map(|v| v.message.clone()),
        ),
        (None, None) => (RolloutStatus::ToApply, None, None),
    };
    ClusterView {
        name: name.to_owned(),
        status,
        revision_role: roles.of(revision.as_deref()),
        revision,
        work: work.map_or_else(|| "-".to_owned(), work_conditions),
        message: message.filter(|m| !m.is_empty()),
        since,
    }
}

/// The latest [`MAX_EVENTS`] Events, oldest first.
fn events(events: &[Event]) -> Vec<EventView> {
    let mut list: Vec<EventView> = events
        .iter()
        .map(|e| {
            let series = e.series.as_ref();
            let last_seen = series
                .map(|s| s.last_observed_time.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
                .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0));
            EventView {
                kind: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                note: e.note.clone().unwrap_or_default(),
                last_seen,
                count: series.map_or(1, |s| s.count),
            }
        })
        .collect();
    list.sort_by_key(|e| e.last_seen);
    let skip = list.len().saturating_sub(MAX_EVENTS);
    list.split_off(skip)
}

#[cfg(test)]
pub(crate) mod tests;
