//! Standing aside while another ManifestWorkReplicaSet controller is at
//! work ([`crate::guard`]): nothing is rolled out, applied or deleted; the
//! carrier's `OtherController` condition, an Event and a log line say
//! what was found, and this controller's own conditions are taken off the
//! ManifestWorkReplicaSet once, so that they do not stay there stale under
//! the other controller (which keeps the conditions it reads).

use std::time::Duration;

use jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use super::{Context, Error, FIELD_MANAGER, cache::Reads, status::set_condition};
use crate::api::conditions::{
    CARRIER_BOUND, MANIFEST_WORKS_CONFLICT, OTHER_CONTROLLER, OWNER_LABEL_HASHED, PLUGIN_LOADED,
    PROGRESSING,
};
use crate::api::manifestworkreplicasetrollout::{Choice, choose};
use crate::api::{ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout};
use crate::events::{Reason, RolloutEvent};
use crate::guard::Finding;

/// The conditions only this controller sets on a ManifestWorkReplicaSet.
const OWN_CONDITIONS: [&str; 5] = [
    CARRIER_BOUND,
    PLUGIN_LOADED,
    PROGRESSING,
    MANIFEST_WORKS_CONFLICT,
    OWNER_LABEL_HASHED,
];

/// How soon a set held back by a ClusterManager's gate is looked at again
/// (the gate's watch wakes nothing by itself).
const GATE_RECHECK: Duration = Duration::from_secs(30);

/// Stands aside for `mwrs` (see the module documentation); looks again
/// when the finding may have ended.
pub(super) async fn stand_aside(
    ctx: &Context,
    reads: &Reads<'_>,
    mwrs: &ManifestWorkReplicaSet,
    finding: &Finding,
    now: Timestamp,
) -> Result<Action, Error> {
    let (namespace, name) = (mwrs.namespace().unwrap_or_default(), mwrs.name_any());
    tracing::warn!(mwrs = %name, namespace = %namespace, %finding, "another ManifestWorkReplicaSet controller is at work; reconciling nothing");
    let carriers = reads.carriers(&namespace).await?;
    if let Choice::Bound(carrier, _) = choose(&name, carriers.iter().map(AsRef::as_ref)) {
        mark_carrier(ctx, carrier, finding, now).await?;
    }
    clear_own_conditions(ctx, mwrs).await?;
    if let Some(events) = &ctx.events {
        let event = RolloutEvent {
            reason: Reason::OtherController,
            note: finding.to_string(),
        };
        events.publish(&mwrs.object_ref(&()), &[event], now).await;
    }
    let wait = ctx.guard.recheck(now).unwrap_or(GATE_RECHECK);
    Ok(Action::requeue(
        wait.min(GATE_RECHECK) + Duration::from_secs(1),
    ))
}

/// The carrier's `OtherController` condition, True with what was found;
/// written only when it changes, the rest of the status as it was.
async fn mark_carrier(
    ctx: &Context,
    carrier: &ManifestWorkReplicaSetRollout,
    finding: &Finding,
    now: Timestamp,
) -> Result<(), Error> {
    let mut status = carrier.status.clone().unwrap_or_default();
    let before = status.conditions.clone();
    let reason = match finding {
        Finding::Gate { .. } => "GateEnabled",
        Finding::StatusWriter { .. } => "OtherStatusWriter",
    };
    let message = finding.to_string();
    set_condition(
        &mut status.conditions,
        OTHER_CONTROLLER,
        true,
        reason,
        &message,
        carrier.metadata.generation,
        now,
    );
    let same = |a: &[_], b: &[_]| {
        let key = |c: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
            )
        };
        a.iter().map(key).eq(b.iter().map(key))
    };
    if same(&before, &status.conditions) {
        return Ok(());
    }
    let api: Api<ManifestWorkReplicaSetRollout> =
        Api::namespaced(ctx.client.clone(), &carrier.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": ManifestWorkReplicaSetRollout::api_version(&()),
        "kind": ManifestWorkReplicaSetRollout::kind(&()),
        "status": status,
    });
    api.patch_status(
        &carrier.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|source| Error::kube("patching the ManifestWorkReplicaSetRollout status", source))?;
    Ok(())
}

/// Takes this controller's own conditions off `mwrs`'s status, once: a
/// merge patch of the conditions without them, guarded by the resource
/// version (a concurrent write makes it fail and the reconcile retry).
async fn clear_own_conditions(ctx: &Context, mwrs: &ManifestWorkReplicaSet) -> Result<(), Error> {
    let conditions = mwrs
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    if !conditions
        .iter()
        .any(|c| OWN_CONDITIONS.contains(&c.type_.as_str()))
    {
        return Ok(());
    }
    let kept: Vec<_> = conditions
        .iter()
        .filter(|c| !OWN_CONDITIONS.contains(&c.type_.as_str()))
        .collect();
    super::carrier::merge_conditions(
        &ctx.client,
        mwrs,
        &kept,
        "taking this controller's conditions off the status",
    )
    .await
}
