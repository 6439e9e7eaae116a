//! Never two writers: with another ManifestWorkReplicaSet controller (OCM's
//! own) found at work, a reconcile writes no work, no revision and no
//! rollout status; it marks the carrier, takes its own conditions off the
//! ManifestWorkReplicaSet, and looks again once the quiet period ends.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use kube::runtime::controller::Action;
use rollout_controller::api::ManifestWorkReplicaSet;
use rollout_controller::reconcile::reconcile;
use serde_json::{Value, json};

/// The set as OCM's controller leaves it: its status written a moment ago
/// by field manager `work` (OCM's work controller), and this controller's
/// `PluginLoaded` and `Progressing` still in it from before.
fn written_by_ocm(at: &str) -> Value {
    let mut obj = mwrs(
        template("v1"),
        json!({"type": "All"}),
        json!({"conditions": [
            {"type": "PlacementVerified", "status": "True", "reason": "AsExpected", "message": "",
             "lastTransitionTime": at},
            {"type": "PluginLoaded", "status": "True", "reason": "Available", "message": "",
             "lastTransitionTime": at},
            {"type": "Progressing", "status": "True", "reason": "NewManifestWorkAvailable",
             "message": "", "lastTransitionTime": at},
        ]}),
    );
    obj["metadata"]["managedFields"] = json!([
        {"manager": "rollout-controller", "operation": "Apply", "subresource": "status",
         "apiVersion": "work.open-cluster-management.io/v1alpha1",
         "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {}},
        {"manager": "work", "operation": "Update", "subresource": "status",
         "apiVersion": "work.open-cluster-management.io/v1alpha1",
         "time": at, "fieldsType": "FieldsV1", "fieldsV1": {}},
    ]);
    obj
}

#[tokio::test]
async fn a_foreign_status_writer_holds_every_reconcile_back() {
    let now = jiff::Timestamp::now().round(jiff::Unit::Second).unwrap();
    let obj = written_by_ocm(&now.to_string());
    let hub = Hub::ocm().with_carrier(json!([]), json!({"currentRevision": "r1"}));
    let (client, server) = api_server_on(hub.clone(), vec![Expect::conditions(&obj)]);
    let ctx = context(client, "http://127.0.0.1:1");
    let set: ManifestWorkReplicaSet = serde_json::from_value(obj).unwrap();
    let action = reconcile(Arc::new(set), ctx.clone())
        .await
        .expect("reconciled");
    // Back once the quiet period (two minutes by default) may have ended,
    // never later than half a minute.
    assert_eq!(action, Action::requeue(Duration::from_secs(31)));
    drop(ctx);
    let recorded = server.await.unwrap();
    // Only this controller's conditions are taken off, with a merge patch
    // guarded by the resource version; OCM's stay.
    let patch = &recorded[0];
    assert_eq!(patch.content_type, "application/merge-patch+json");
    assert_eq!(patch.body["metadata"]["resourceVersion"], "10");
    let kinds: Vec<&str> = patch.body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["PlacementVerified"]);
    // The carrier says why, and keeps what it held.
    let carrier = hub.carrier().unwrap();
    let other = &carrier["status"]["conditions"][0];
    assert_eq!(
        (
            other["type"].as_str(),
            other["status"].as_str(),
            other["reason"].as_str()
        ),
        (
            Some("OtherController"),
            Some("True"),
            Some("OtherStatusWriter")
        )
    );
    let message = other["message"].as_str().unwrap();
    assert!(message.contains("field manager \"work\""), "{message}");
    assert!(message.contains("default/hello"), "{message}");
    assert_eq!(carrier["status"]["currentRevision"], "r1");
}
