//! The revision history in ControllerRevisions: the I/O half of
//! [`crate::revision`].

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::Error;
use crate::api::annotations::{ABORTED_TIME_ANNOTATION, CURRENT_REVISION_ANNOTATION};
use crate::api::labels::CONTROLLER_HASH_LABEL;
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

/// The revision state recorded on the ControllerRevisions ([`record`]):
/// from the highest-numbered one that carries it. For a set whose carrier
/// lost its status (deleted and made again): the current revision and the
/// abort are not lost with it.
pub(crate) fn recorded(listed: &[Arc<ControllerRevision>]) -> Option<RevisionStatus> {
    let latest = listed
        .iter()
        .filter(|r| r.annotations().contains_key(CURRENT_REVISION_ANNOTATION))
        .max_by_key(|r| r.revision)?;
    let annotations = latest.annotations();
    Some(RevisionStatus {
        current: annotations
            .get(CURRENT_REVISION_ANNOTATION)
            .filter(|c| !c.is_empty())
            .cloned(),
        update: latest.labels().get(CONTROLLER_HASH_LABEL).cloned(),
        aborted_time: annotations
            .get(ABORTED_TIME_ANNOTATION)
            .and_then(|t| t.parse().ok()),
    })
}

/// Records `status` on the ControllerRevision of its update revision
/// (among `listed`), when it says something else: the current revision and
/// the abort time as annotations (a merge patch).
pub(crate) async fn record(
    client: &Client,
    namespace: &str,
    listed: &[Arc<ControllerRevision>],
    status: &RevisionStatus,
) -> Result<(), Error> {
    let Some(update) = status.update.as_deref() else {
        return Ok(());
    };
    let Some(revision) = listed
        .iter()
        .find(|r| r.labels().get(CONTROLLER_HASH_LABEL).map(String::as_str) == Some(update))
    else {
        return Ok(());
    };
    let current = status.current.clone().unwrap_or_default();
    let aborted = status.aborted_time.map(|t| t.to_string());
    let annotations = revision.annotations();
    if annotations.get(CURRENT_REVISION_ANNOTATION) == Some(&current)
        && annotations.get(ABORTED_TIME_ANNOTATION) == aborted.as_ref()
    {
        return Ok(());
    }
    let patch = json!({"metadata": {"annotations": {
        CURRENT_REVISION_ANNOTATION: current,
        ABORTED_TIME_ANNOTATION: aborted,
    }}});
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    api.patch(
        &revision.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|source| Error::kube("recording the revisions on a ControllerRevision", source))?;
    Ok(())
}
