//! The revision history in ControllerRevisions: the I/O half of
//! [`crate::revision`].

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::Error;
use crate::api::annotations::{
    ABORTED_TIME_ANNOTATION, CURRENT_REVISION_ANNOTATION, UPDATE_REVISION_ANNOTATION,
};
use crate::api::{ManifestWork, ManifestWorkReplicaSet};
use crate::orchestrate::observe::work_revision;
use crate::revision::RevisionStatus;
use crate::revision::{self, HistoryEntry, HistoryPlan, Revision};

/// The history after it was brought up to date.
#[derive(Debug, Clone)]
pub(crate) struct Synced {
    /// What was done.
    pub(crate) plan: HistoryPlan,
    /// `status.currentRevision` with its template, if its ControllerRevision
    /// exists.
    pub(crate) current: Option<Revision>,
}

/// From `mwrs`'s ControllerRevisions (`listed`), records its template's revision
/// (creating or renumbering one), prunes beyond `revisionHistoryLimit`
/// (keeping the current revision and those `works` still carry), and
/// returns the update and current revisions.
pub(crate) async fn sync(
    client: &Client,
    mwrs: &ManifestWorkReplicaSet,
    owner_label: &str,
    works: &[Arc<ManifestWork>],
    listed: &[Arc<ControllerRevision>],
) -> Result<Synced, Error> {
    let namespace = mwrs.namespace().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    let history: Vec<HistoryEntry> = listed
        .iter()
        .filter_map(|r| HistoryEntry::from_controller_revision(r))
        .collect();

    let status = mwrs.status.clone().unwrap_or_default();
    let mut live: BTreeSet<String> = works
        .iter()
        .filter_map(|w| work_revision(w).map(str::to_owned))
        .collect();
    live.extend(status.current_revision.clone());
    let plan = revision::plan_history(
        &history,
        &mwrs.spec.manifest_work_template,
        status.collision_count.unwrap_or(0),
        &mwrs.name_any(),
        &live,
        mwrs.spec.revision_history_limit(),
    );

    if let Some(entry) = &plan.create {
        let object = revision::controller_revision(mwrs, owner_label, entry);
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            // Created by an earlier reconcile whose list was stale.
            Err(kube::Error::Api(status)) if status.is_already_exists() => {}
            Err(source) => return Err(Error::kube("creating a ControllerRevision", source)),
        }
    }
    if let Some((name, number)) = &plan.renumber {
        let patch = json!({"revision": number});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::kube("renumbering a ControllerRevision", source))?;
    }
    for name in &plan.prune {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.is_not_found() => {}
            Err(source) => return Err(Error::kube("pruning a ControllerRevision", source)),
        }
    }

    let current = status.current_revision.as_deref().and_then(|hash| {
        if hash == plan.update.hash {
            return Some(plan.update.clone());
        }
        history
            .iter()
            .find(|e| e.hash == hash)
            .and_then(HistoryEntry::revision)
    });
    Ok(Synced { plan, current })
}

/// The revision state recorded on the ManifestWorkReplicaSet ([`record`]).
/// For a set whose carrier lost its status (deleted and made again): the
/// current revision and the abort are not lost with it.
pub(crate) fn recorded(mwrs: &ManifestWorkReplicaSet) -> Option<RevisionStatus> {
    let annotations = mwrs.annotations();
    let update = annotations.get(UPDATE_REVISION_ANNOTATION)?.clone();
    Some(RevisionStatus {
        current: annotations
            .get(CURRENT_REVISION_ANNOTATION)
            .filter(|c| !c.is_empty())
            .cloned(),
        update: Some(update),
        aborted_time: annotations
            .get(ABORTED_TIME_ANNOTATION)
            .and_then(|t| t.parse().ok()),
    })
}

/// Records `status` on `mwrs` as annotations (a merge patch), when they say
/// something else: the update and current revisions and the abort time.
/// (Not on a ControllerRevision: the API server refuses any patch of one
/// whose `data` it re-encodes differently, as it does for templates with
/// `&&` in a condition rule.)
pub(crate) async fn record(
    client: &Client,
    mwrs: &ManifestWorkReplicaSet,
    status: &RevisionStatus,
) -> Result<(), Error> {
    if recorded(mwrs).as_ref() == Some(status) {
        return Ok(());
    }
    let patch = json!({"metadata": {"annotations": {
        UPDATE_REVISION_ANNOTATION: status.update,
        CURRENT_REVISION_ANNOTATION: status.current.clone().unwrap_or_default(),
        ABORTED_TIME_ANNOTATION: status.aborted_time.map(|t| t.to_string()),
    }}});
    let api: Api<ManifestWorkReplicaSet> =
        Api::namespaced(client.clone(), &mwrs.namespace().unwrap_or_default());
    api.patch(
        &mwrs.name_any(),
        &PatchParams {
            field_manager: Some(super::FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        },
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|source| {
        Error::kube(
            "recording the revisions on the ManifestWorkReplicaSet",
            source,
        )
    })?;
    Ok(())
}
