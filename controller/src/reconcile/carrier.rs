//! The I/O of the ManifestWorkReplicaSetRollout bound to a
//! ManifestWorkReplicaSet (`crate::api::manifestworkreplicasetrollout`):
//! read, created empty when missing, and its status written; and the
//! ManifestWorkReplicaSet's own status, written with OCM's fields only.
//!
//! The controller keeps what it must read back (revisions, the abort) in
//! the carrier's status only, so a hub whose ManifestWorkReplicaSet CRD is
//! OCM's, which prunes those fields, loses nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use super::{Error, FIELD_MANAGER, cache::Reads};
use crate::api::additions::ocm_status;
use crate::api::manifestworkreplicasetrollout::carrier_status;
use crate::api::{
    ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout, ManifestWorkReplicaSetRolloutSpec,
    ManifestWorkReplicaSetStatus,
};

/// The carrier `mwrs` binds to when it has none: empty, of the same
/// namespace and name, owned by `mwrs` so that it goes with it.
pub(crate) fn empty_carrier(mwrs: &ManifestWorkReplicaSet) -> ManifestWorkReplicaSetRollout {
    let mut carrier = ManifestWorkReplicaSetRollout::new(
        &mwrs.name_any(),
        ManifestWorkReplicaSetRolloutSpec::default(),
    );
    carrier.metadata.namespace = mwrs.namespace();
    carrier.metadata.owner_references = Some(vec![OwnerReference {
        api_version: ManifestWorkReplicaSet::api_version(&()).into_owned(),
        kind: ManifestWorkReplicaSet::kind(&()).into_owned(),
        name: mwrs.name_any(),
        uid: mwrs.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    carrier
}

/// The carrier of `mwrs`: read, or created empty when there is none
/// (then `true`).
pub(super) async fn ensure(
    reads: &Reads<'_>,
    mwrs: &ManifestWorkReplicaSet,
) -> Result<(ManifestWorkReplicaSetRollout, bool), Error> {
    let (namespace, name) = (mwrs.namespace().unwrap_or_default(), mwrs.name_any());
    if let Some(carrier) = reads.carrier(&namespace, &name).await? {
        return Ok((carrier, false));
    }
    let api: Api<ManifestWorkReplicaSetRollout> = Api::namespaced(reads.client.clone(), &namespace);
    match api
        .create(&PostParams::default(), &empty_carrier(mwrs))
        .await
    {
        Ok(created) => Ok((created, true)),
        // Written meanwhile (by a person, or a stale read of ours).
        Err(kube::Error::Api(status)) if status.is_already_exists() => api
            .get(&name)
            .await
            .map(|c| (c, false))
            .map_err(|source| Error::kube("reading the ManifestWorkReplicaSetRollout", source)),
        Err(source) => Err(Error::kube(
            "creating the ManifestWorkReplicaSetRollout",
            source,
        )),
    }
}

/// The ManifestWorkReplicaSetRollouts of `namespace` that bind to no
/// ManifestWorkReplicaSet of `sets` (the names there), from the stores;
/// none known without them.
pub(super) fn unbound(
    reads: &Reads<'_>,
    sets: Option<&Store<ManifestWorkReplicaSet>>,
    namespace: &str,
) -> Vec<String> {
    let (Some(stores), Some(sets)) = (reads.stores, sets) else {
        return Vec::new();
    };
    let names: std::collections::BTreeSet<String> = sets
        .state()
        .iter()
        .filter(|m| m.namespace().as_deref() == Some(namespace))
        .map(|m| m.name_any())
        .collect();
    let mut unbound: Vec<String> = stores
        .carriers
        .state()
        .iter()
        .filter(|c| c.namespace().as_deref() == Some(namespace) && !names.contains(&c.name_any()))
        .map(|c| c.name_any())
        .collect();
    unbound.sort();
    unbound.truncate(10);
    unbound
}

/// Writes `status` where it belongs: the carrier's part to the carrier
/// first (what the next reconcile reads back), then OCM's part to the
/// ManifestWorkReplicaSet; each only when it changed.
pub(super) async fn write_status(
    client: &Client,
    mwrs: &ManifestWorkReplicaSet,
    carrier: &ManifestWorkReplicaSetRollout,
    status: &ManifestWorkReplicaSetStatus,
) -> Result<(), Error> {
    let namespace = mwrs.namespace().unwrap_or_default();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let details = carrier_status(status, carrier.metadata.generation);
    if carrier.status.as_ref() != Some(&details) {
        let api: Api<ManifestWorkReplicaSetRollout> = Api::namespaced(client.clone(), &namespace);
        let patch = json!({
            "apiVersion": ManifestWorkReplicaSetRollout::api_version(&()),
            "kind": ManifestWorkReplicaSetRollout::kind(&()),
            "status": details,
        });
        api.patch_status(&carrier.name_any(), &params, &Patch::Apply(&patch))
            .await
            .map_err(|source| {
                Error::kube("patching the ManifestWorkReplicaSetRollout status", source)
            })?;
    }
    let ocm = ocm_status(status);
    if mwrs.status.as_ref().map(ocm_status).as_ref() != Some(&ocm) {
        let api: Api<ManifestWorkReplicaSet> = Api::namespaced(client.clone(), &namespace);
        let patch = json!({
            "apiVersion": ManifestWorkReplicaSet::api_version(&()),
            "kind": ManifestWorkReplicaSet::kind(&()),
            "status": ocm,
        });
        api.patch_status(&mwrs.name_any(), &params, &Patch::Apply(&patch))
            .await
            .map_err(|source| Error::kube("patching the status", source))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_empty_carrier_is_owned_by_its_mwrs() {
        let mwrs: ManifestWorkReplicaSet = serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1alpha1",
            "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": "hello", "namespace": "default", "uid": "u-1"},
            "spec": {"placementRefs": [{"name": "a"}]}
        }))
        .expect("an MWRS");
        let carrier = serde_json::to_value(empty_carrier(&mwrs)).expect("serializes");
        assert_eq!(
            carrier,
            json!({"apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
                   "metadata": {"name": "hello", "namespace": "default",
                                "ownerReferences": [{"apiVersion": "work.open-cluster-management.io/v1alpha1",
                                                     "kind": "ManifestWorkReplicaSet", "name": "hello",
                                                     "uid": "u-1", "controller": true}]},
                   "spec": {}})
        );
    }
}
