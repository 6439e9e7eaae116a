//! The ManifestWorks the controller writes: their names, their labels, the
//! desired work of a revision, the work applied after a plugin's mutation,
//! and their counts by condition.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::ObjectMeta;

use crate::api::ManifestWork;
use crate::api::annotations::{OWNER_ANNOTATION, SPEC_HASH_ANNOTATION};
use crate::api::labels::{CONTROLLER_HASH_LABEL, MWRS_OWNER_LABEL, PLACEMENT_NAME_LABEL, fnv1a64};
use crate::api::manifestwork::CONDITION_AVAILABLE;
use crate::orchestrate::input::Owner;
use crate::orchestrate::observe;
use crate::orchestrate::report::WorkCounts;
use crate::revision::{self, Revision};
use crate::rollout::work_status;

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

/// Why the controller refuses a plugin's mutated work: it is applied only
/// when it reads as a ManifestWork and keeps who the agent applies it as.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RefusedWork {
    #[error("the mutated ManifestWork cannot be read: {0}")]
    Unreadable(#[source] serde_json::Error),
    /// `spec.executor` differs: a plugin may not choose the service account
    /// a work runs as on the managed cluster (the gateway refuses it too).
    #[error("the mutated ManifestWork changes spec.executor from {before} to {after}")]
    Executor { before: String, after: String },
}

/// Reads a plugin's mutation of `desired`: a ManifestWork with `desired`'s
/// `spec.executor`. (Its name, namespace and the controller's labels are put
/// back by [`finish_work`].)
pub(crate) fn read_mutated(
    desired: &ManifestWork,
    bytes: &[u8],
) -> Result<ManifestWork, RefusedWork> {
    let mutated: ManifestWork = serde_json::from_slice(bytes).map_err(RefusedWork::Unreadable)?;
    if mutated.spec.executor != desired.spec.executor {
        let show = |v: &Option<serde_json::Value>| {
            v.as_ref()
                .map_or_else(|| "nothing".to_owned(), serde_json::Value::to_string)
        };
        return Err(RefusedWork::Executor {
            before: show(&desired.spec.executor),
            after: show(&mutated.spec.executor),
        });
    }
    Ok(mutated)
}

/// Counts of `works` by condition (True only), as upstream's status
/// reconciler counts them: only works of `desired_revision` as the
/// controller applied them ([`observe::is_current`]) and not being deleted.
/// A work of an older revision (a template change not rolled out to its
/// cluster yet) does not count, so its `Available` cannot make the set look
/// `AsExpected`.
pub(crate) fn count_works<'a>(
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

pub(crate) fn placement_of(work: &ManifestWork) -> Option<&str> {
    work.labels().get(PLACEMENT_NAME_LABEL).map(String::as_str)
}

pub(crate) fn is_deleting(work: &ManifestWork) -> bool {
    work.metadata.deletion_timestamp.is_some()
}
/// Which of a placement's works for one cluster is kept when there are
/// several (another controller's leftover beside this controller's, such as
/// OCM's, which names its works after the ManifestWorkReplicaSet): the one
/// on a revision of this controller, else one it applied, else one named as
/// it names them, else the first by name. The others are deleted
/// ([`duplicates`]): one work per cluster, as OCM keeps.
fn keeper_rank(work: &ManifestWork, own_name: &str) -> (u8, String) {
    let rank = if observe::work_revision(work).is_some() {
        0
    } else if super::conflict::own_apply_time(work).is_some() {
        1
    } else if work.name_any() == own_name {
        2
    } else {
        3
    };
    (rank, work.name_any())
}

/// The kept work of each cluster among `works` (those of one placement).
pub(crate) fn kept<'w>(
    works: impl IntoIterator<Item = &'w Arc<ManifestWork>>,
    own_name: &str,
) -> BTreeMap<String, &'w Arc<ManifestWork>> {
    let mut kept: BTreeMap<String, &'w Arc<ManifestWork>> = BTreeMap::new();
    for work in works {
        let cluster = work.namespace().unwrap_or_default();
        match kept.get(&cluster) {
            Some(known) if keeper_rank(known, own_name) <= keeper_rank(work, own_name) => {}
            _ => {
                kept.insert(cluster, work);
            }
        }
    }
    kept
}

/// The works of `placement` among `works` that are not the kept one of
/// their cluster ([`kept`]): `(namespace, name)`.
pub(crate) fn duplicates(
    works: &[Arc<ManifestWork>],
    placement: &str,
    own_name: &str,
) -> Vec<(String, String)> {
    let of_placement: Vec<&Arc<ManifestWork>> = works
        .iter()
        .filter(|w| placement_of(w) == Some(placement) && !is_deleting(w))
        .collect();
    let kept = kept(of_placement.iter().copied(), own_name);
    of_placement
        .into_iter()
        .filter(|w| {
            let cluster = w.namespace().unwrap_or_default();
            kept.get(&cluster).is_none_or(|k| !Arc::ptr_eq(k, w))
        })
        .map(|w| (w.namespace().unwrap_or_default(), w.name_any()))
        .collect()
}
