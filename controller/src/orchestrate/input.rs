//! What one step of the rollout is given: the owner, its placements, its
//! works and revisions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;

use crate::api::ManifestWork;
use crate::hooks::StateDetail;
use crate::orchestrate::clock::Clock;
use crate::orchestrate::settings::Settings;
use crate::revision::Revision;
use crate::rollout::{ClusterGroup, Strategy};

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
    /// When the abort under way started (`status.abortedTime`), if one is.
    pub aborted_at: Option<Timestamp>,
    /// The time, read before each validation phase, decision and abort.
    pub clock: &'a dyn Clock,
    /// Tunables.
    pub settings: &'a Settings,
    /// The trace context the hook calls descend from.
    pub trace: &'a opentelemetry::Context,
    /// What an operator asked for ([`crate::control`]).
    pub control: ManualControl,
}

/// What an operator asked of this step (`spec.control` of the carrier,
/// read by [`crate::control::decide`]); nothing by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManualControl {
    /// Paused: no cluster starts rolling out the update revision (a
    /// rollback under way goes on).
    pub(crate) paused: bool,
    /// Abort now, as asked (who and why, as a phrase: `by alice (why)`);
    /// only when no abort is under way.
    pub(crate) abort: Option<String>,
    /// Skip the current wait of these clusters.
    pub(crate) promote: Option<Promotion>,
}

/// A promotion: the clusters whose wait ends, and who asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Promotion {
    /// The clusters; empty: every cluster.
    pub(crate) clusters: BTreeSet<String>,
    /// Who asked and why, as a phrase: `by alice (why)`.
    pub(crate) who: String,
}

impl Promotion {
    /// Whether `cluster` is promoted.
    pub(crate) fn includes(&self, cluster: &str) -> bool {
        self.clusters.is_empty() || self.clusters.contains(cluster)
    }
}
