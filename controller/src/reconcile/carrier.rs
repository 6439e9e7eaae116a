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

use jiff::Timestamp;
use kube::runtime::controller::Action;

use super::binding::Binding;
use super::status::set_condition;
use super::{Context, Error, FIELD_MANAGER, cache::Reads};
use crate::api::additions::ocm_status;
use crate::api::conditions::CARRIER_BOUND;
use crate::api::control::ControlStatus;
use crate::api::manifestworkreplicasetrollout::{
    Choice, Found, TargetRef, carrier_status, choose, target_of,
};
use crate::api::{
    ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout, ManifestWorkReplicaSetRolloutSpec,
    ManifestWorkReplicaSetStatus,
};
use crate::events::binding_event;

/// The carrier `mwrs` binds to when it has none: empty, of the same
/// namespace and name, owned by `mwrs` so that it goes with it.
pub fn empty_carrier(mwrs: &ManifestWorkReplicaSet) -> ManifestWorkReplicaSetRollout {
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

/// What [`ensure`] found for a set.
pub(super) enum Ensured {
    /// Its carrier, and how it was found.
    Found(ManifestWorkReplicaSetRollout, Found),
    /// None bound to it: one was created empty.
    Created(ManifestWorkReplicaSetRollout),
    /// Several carriers target it (their names): none is read.
    Ambiguous(Vec<String>),
}

/// The carrier of `mwrs` ([`choose`] among its namespace's), or one
/// created empty when none binds to it; with every carrier of the
/// namespace that binds to no set of `sets` (the names, at most ten),
/// when the sets are known.
pub(super) async fn ensure(
    reads: &Reads<'_>,
    mwrs: &ManifestWorkReplicaSet,
    sets: Option<&Store<ManifestWorkReplicaSet>>,
) -> Result<(Ensured, Vec<String>), Error> {
    let (namespace, name) = (mwrs.namespace().unwrap_or_default(), mwrs.name_any());
    let carriers = reads.carriers(&namespace).await?;
    let unbound = sets
        .map(|sets| unbound(&carriers, sets, &namespace))
        .unwrap_or_default();
    let ensured = match choose(&name, carriers.iter().map(AsRef::as_ref)) {
        Choice::Bound(carrier, found) => Ensured::Found(carrier.clone(), found),
        Choice::Ambiguous(names) => Ensured::Ambiguous(names),
        Choice::None => {
            // The set's name may be taken by a carrier of another set.
            let taken = carriers.iter().any(|c| c.name_any() == name);
            create(reads, mwrs, taken).await?
        }
    };
    Ok((ensured, unbound))
}

/// Creates the empty carrier of `mwrs`: of its name, or, when that is
/// `taken`, of a generated one with a `targetRef`.
async fn create(
    reads: &Reads<'_>,
    mwrs: &ManifestWorkReplicaSet,
    taken: bool,
) -> Result<Ensured, Error> {
    let (namespace, name) = (mwrs.namespace().unwrap_or_default(), mwrs.name_any());
    let mut empty = empty_carrier(mwrs);
    if taken {
        empty.metadata.name = None;
        empty.metadata.generate_name = Some(format!("{name}-"));
        empty.spec.target_ref = Some(TargetRef {
            name: name.clone(),
            ..TargetRef::default()
        });
    }
    let api: Api<ManifestWorkReplicaSetRollout> = Api::namespaced(reads.client.clone(), &namespace);
    match api.create(&PostParams::default(), &empty).await {
        Ok(created) => Ok(Ensured::Created(created)),
        // Written meanwhile (by a person, or a stale read of ours).
        Err(kube::Error::Api(status)) if status.is_already_exists() => api
            .get(&name)
            .await
            .map(|c| Ensured::Found(c, Found::SameName))
            .map_err(|source| Error::kube("reading the ManifestWorkReplicaSetRollout", source)),
        Err(source) => Err(Error::kube(
            "creating the ManifestWorkReplicaSetRollout",
            source,
        )),
    }
}

/// The names of `carriers` (of `namespace`) that bind to no
/// ManifestWorkReplicaSet of `sets`: their target does not exist, or
/// another carrier targets it explicitly. At most ten, sorted.
fn unbound(
    carriers: &[std::sync::Arc<ManifestWorkReplicaSetRollout>],
    sets: &Store<ManifestWorkReplicaSet>,
    namespace: &str,
) -> Vec<String> {
    let names: std::collections::BTreeSet<String> = sets
        .state()
        .iter()
        .filter(|m| m.namespace().as_deref() == Some(namespace))
        .map(|m| m.name_any())
        .collect();
    let bound_to = |carrier: &ManifestWorkReplicaSetRollout| {
        let target = target_of(carrier);
        names.contains(target)
            && matches!(choose(target, carriers.iter().map(AsRef::as_ref)),
                        Choice::Bound(c, _) if c.name_any() == carrier.name_any())
    };
    let mut unbound: Vec<String> = carriers
        .iter()
        .filter(|c| !bound_to(c))
        .map(|c| c.name_any())
        .collect();
    unbound.sort();
    unbound.truncate(10);
    unbound
}

/// What a reconcile writes: the set's status, and what only the carrier
/// keeps.
pub(super) struct Carried<'a> {
    /// The set's status, the carrier's part of it included.
    pub(super) status: &'a ManifestWorkReplicaSetStatus,
    /// `status.control` of the carrier.
    pub(super) control: Option<&'a ControlStatus>,
}

/// Writes `carried` where it belongs: the carrier's part to the carrier
/// first (what the next reconcile reads back), then OCM's part to the
/// ManifestWorkReplicaSet; each only when it changed.
pub(super) async fn write_status(
    client: &Client,
    mwrs: &ManifestWorkReplicaSet,
    carrier: &ManifestWorkReplicaSetRollout,
    carried: &Carried<'_>,
) -> Result<(), Error> {
    let status = carried.status;
    let namespace = mwrs.namespace().unwrap_or_default();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut details = carrier_status(status, mwrs.uid(), carrier.metadata.generation);
    details.control = carried.control.cloned();
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

/// How soon a held set is looked at again (a change of a carrier of its
/// namespace wakes it sooner).
const HELD_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// Holds `mwrs`, whose carrier cannot be bound: nothing is rolled out; its
/// `CarrierBound` condition says why (a merge patch of its conditions,
/// guarded by its resource version, when it changed), with a
/// `BindingProblem` Event and a log line.
pub(super) async fn hold(
    ctx: &Context,
    mwrs: &ManifestWorkReplicaSet,
    binding: &Binding,
    now: Timestamp,
) -> Result<Action, Error> {
    tracing::warn!(mwrs = %mwrs.name_any(), namespace = %mwrs.namespace().unwrap_or_default(), reason = binding.reason, message = %binding.message, "no carrier can be bound; rolling nothing out");
    let old = mwrs.status.clone().unwrap_or_default();
    let mut new = old.clone();
    set_condition(
        &mut new.conditions,
        CARRIER_BOUND,
        binding.status,
        binding.reason,
        &binding.message,
        mwrs.metadata.generation,
        now,
    );
    let Some(event) = binding_event(&old, &new) else {
        return Ok(Action::requeue(HELD_RECHECK));
    };
    merge_conditions(
        &ctx.client,
        mwrs,
        &new.conditions,
        "patching the CarrierBound condition",
    )
    .await?;
    if let Some(events) = &ctx.events {
        events.publish(&mwrs.object_ref(&()), &[event], now).await;
    }
    Ok(Action::requeue(HELD_RECHECK))
}

/// Sets `mwrs`'s status conditions to `conditions` with a merge patch
/// guarded by its resource version (a concurrent write makes it fail and
/// the reconcile retry); `action` names it in the error.
pub(super) async fn merge_conditions(
    client: &Client,
    mwrs: &ManifestWorkReplicaSet,
    conditions: &[impl serde::Serialize],
    action: &'static str,
) -> Result<(), Error> {
    let patch = json!({
        "metadata": {"resourceVersion": mwrs.resource_version()},
        "status": {"conditions": conditions},
    });
    let api: Api<ManifestWorkReplicaSet> =
        Api::namespaced(client.clone(), &mwrs.namespace().unwrap_or_default());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch_status(&mwrs.name_any(), &params, &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::kube(action, source))?;
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
