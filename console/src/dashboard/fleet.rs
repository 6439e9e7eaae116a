//! The fleet the dashboard shows, pure: from everything the hub holds
//! ([`Objects`]) each ManifestWorkReplicaSet's [`Snapshot`] by the rules
//! `get` reads it with ([`crate::view::hub`]: the works carrying its owner
//! label, its namespace's carrier bound to it, its namespace's
//! PlacementDecisions, the Events about it), hence its [`View`], the one
//! model `get` draws; and a row of the list per set ([`RolloutRow`]).

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use serde::Serialize;

use crate::view::hub::{bound_carrier, is_about, owner_of, owner_of_works};
use crate::view::{Phase, Snapshot, View, build};
use rollout_controller::api::{
    ClusterCounts, ManifestWork, ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout,
    PlacementDecision,
};

/// Everything the dashboard reads from the hub, of its namespace or of all.
#[derive(Debug, Clone, Default)]
pub(crate) struct Objects {
    /// The ManifestWorkReplicaSets.
    pub(crate) sets: Vec<ManifestWorkReplicaSet>,
    /// The ManifestWorkReplicaSetRollouts.
    pub(crate) carriers: Vec<ManifestWorkReplicaSetRollout>,
    /// The ManifestWorks carrying an owner label, in every namespace.
    pub(crate) works: Vec<ManifestWork>,
    /// The PlacementDecisions labelled with a placement.
    pub(crate) decisions: Vec<PlacementDecision>,
    /// The Events about ManifestWorkReplicaSets.
    pub(crate) events: Vec<Event>,
}

/// A ManifestWorkReplicaSet: its namespace and name.
pub(crate) type Key = (String, String);

/// One ManifestWorkReplicaSet in the dashboard's list.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolloutRow {
    /// Its namespace.
    pub(crate) namespace: String,
    /// Its name.
    pub(crate) name: String,
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
    /// Clusters per rollout status, over its placements.
    pub(crate) counts: ClusterCounts,
    /// How many clusters its placements decided.
    pub(crate) clusters: usize,
}

impl RolloutRow {
    fn of(view: &View) -> RolloutRow {
        let mut counts = ClusterCounts::default();
        let mut clusters = 0;
        for cluster in view
            .placements
            .iter()
            .flat_map(|p| &p.groups)
            .flat_map(|g| &g.clusters)
        {
            counts.add(cluster.status);
            clusters += 1;
        }
        RolloutRow {
            namespace: view.namespace.clone(),
            name: view.name.clone(),
            phase: view.phase,
            message: view.message.clone(),
            update_revision: view.update_revision.clone(),
            current_revision: view.current_revision.clone(),
            counts,
            clusters,
        }
    }
}

/// Every ManifestWorkReplicaSet's view, by namespace and name.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Fleet {
    /// The views.
    pub(crate) views: BTreeMap<Key, View>,
}

impl Fleet {
    /// The fleet of `objects` at `now`.
    pub(crate) fn of(objects: &Objects, now: Timestamp) -> Fleet {
        let views = snapshots(objects)
            .iter()
            .map(|snapshot| {
                let view = build(snapshot, now);
                ((view.namespace.clone(), view.name.clone()), view)
            })
            .collect();
        Fleet { views }
    }

    /// The list, by namespace and name.
    pub(crate) fn rows(&self) -> Vec<RolloutRow> {
        self.views.values().map(RolloutRow::of).collect()
    }

    /// `self`, with each view that differs from `previous`'s only in the
    /// time it was made replaced by `previous`'s: what did not change
    /// stays equal, so it is not sent again.
    pub(crate) fn keeping(mut self, previous: &Fleet) -> Fleet {
        for (key, view) in &mut self.views {
            let Some(old) = previous.views.get(key) else {
                continue;
            };
            let now = view.now;
            view.now = old.now;
            if view != old {
                view.now = now;
            }
        }
        self
    }
}

/// Each ManifestWorkReplicaSet of `objects` with what belongs to it, by
/// the rules `get` reads one with.
pub(crate) fn snapshots(objects: &Objects) -> Vec<Snapshot> {
    let mut works: HashMap<&str, Vec<&ManifestWork>> = HashMap::new();
    for work in &objects.works {
        if let Some(owner) = owner_of(work) {
            works.entry(owner).or_default().push(work);
        }
    }
    let by_namespace = |namespace: Option<String>| namespace.unwrap_or_default();
    let mut carriers: HashMap<String, Vec<&ManifestWorkReplicaSetRollout>> = HashMap::new();
    for carrier in &objects.carriers {
        carriers
            .entry(by_namespace(carrier.namespace()))
            .or_default()
            .push(carrier);
    }
    let mut decisions: HashMap<String, Vec<&PlacementDecision>> = HashMap::new();
    for decision in &objects.decisions {
        decisions
            .entry(by_namespace(decision.namespace()))
            .or_default()
            .push(decision);
    }
    let mut events: HashMap<String, Vec<&Event>> = HashMap::new();
    for event in &objects.events {
        events
            .entry(by_namespace(event.namespace()))
            .or_default()
            .push(event);
    }
    objects
        .sets
        .iter()
        .map(|mwrs| {
            let namespace = by_namespace(mwrs.namespace());
            let name = mwrs.name_any();
            let owner = owner_of_works(mwrs);
            let in_namespace = carriers.get(&namespace).map(Vec::as_slice).unwrap_or(&[]);
            Snapshot {
                carrier: bound_carrier(&name, in_namespace.iter().copied()),
                works: cloned(works.get(owner.as_str())),
                decisions: cloned(decisions.get(&namespace)),
                events: events
                    .get(&namespace)
                    .into_iter()
                    .flatten()
                    .filter(|e| is_about(e, &namespace, &name))
                    .map(|e| (*e).clone())
                    .collect(),
                mwrs: mwrs.clone(),
            }
        })
        .collect()
}

fn cloned<T: Clone>(list: Option<&Vec<&T>>) -> Vec<T> {
    list.map(|l| l.iter().map(|o| (*o).clone()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
