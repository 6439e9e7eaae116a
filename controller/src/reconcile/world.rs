//! [`KubeWorld`]: the orchestration's [`World`] over the hub's API server.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::written::OwnWrites;
use crate::api::ManifestWork;
use crate::api::labels::MWRS_OWNER_LABEL;
pub(crate) use crate::orchestrate::FIELD_MANAGER;
use crate::orchestrate::{World, WorldAction, WorldError};

/// ManifestWorks through the Kubernetes API: listed by the owner label in
/// every namespace, applied server-side with field manager
/// [`FIELD_MANAGER`] (forcing ownership only when asked to take a work
/// over, so that another writer's change is refused with 409 rather than
/// overwritten), annotated with a JSON merge patch under the same field
/// manager, deleted with the default propagation. Each write's answer is
/// remembered in [`OwnWrites`] until the store shows it.
#[derive(Clone)]
pub(crate) struct KubeWorld {
    client: Client,
    written: Arc<OwnWrites>,
}

impl KubeWorld {
    /// The world of `client`'s cluster, its writes remembered in `written`.
    pub(crate) fn new(client: Client, written: Arc<OwnWrites>) -> KubeWorld {
        KubeWorld { client, written }
    }

    fn api(&self, namespace: &str) -> Api<ManifestWork> {
        Api::namespaced(self.client.clone(), namespace)
    }
}

impl World for KubeWorld {
    async fn list_works(&self, owner_label: &str) -> Result<Vec<Arc<ManifestWork>>, WorldError> {
        let api: Api<ManifestWork> = Api::all(self.client.clone());
        let params = ListParams::default().labels(&format!("{MWRS_OWNER_LABEL}={owner_label}"));
        api.list(&params)
            .await
            .map(|list| list.items.into_iter().map(Arc::new).collect())
            .map_err(|e| WorldError::kube(WorldAction::Listing, "", "", e))
    }

    async fn apply_work(
        &self,
        work: ManifestWork,
        force: bool,
    ) -> Result<ManifestWork, WorldError> {
        let namespace = work.namespace().unwrap_or_default();
        let name = work.name_any();
        let mut params = PatchParams::apply(FIELD_MANAGER);
        params.force = force;
        let applied = self
            .api(&namespace)
            .patch(&name, &params, &Patch::Apply(&work))
            .await
            .map_err(|e| WorldError::kube(WorldAction::Applying, namespace, name, e))?;
        self.written.record(applied.clone());
        Ok(applied)
    }

    async fn annotate_work(
        &self,
        namespace: &str,
        name: &str,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), WorldError> {
        let patch = json!({"metadata": {"annotations": annotations}});
        self.api(namespace)
            .patch(
                name,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_owned()),
                    ..PatchParams::default()
                },
                &Patch::Merge(&patch),
            )
            .await
            .map(|annotated| self.written.record(annotated))
            .map_err(|e| WorldError::kube(WorldAction::Annotating, namespace, name, e))
    }

    async fn delete_work(&self, namespace: &str, name: &str) -> Result<(), WorldError> {
        self.written.forget(namespace, name);
        match self
            .api(namespace)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.is_not_found() => Ok(()),
            Err(e) => Err(WorldError::kube(WorldAction::Deleting, namespace, name, e)),
        }
    }
}
