//! Where a reconcile reads: once the reflector stores are synced, from them
//! only. The mock API server (kube's mock-service pattern) fails the test on
//! any request it was not told to expect, so a reconcile over synced stores
//! that makes one read fails.

use crate::common;

use std::sync::Arc;

use common::*;
use http::Method;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use rollout_controller::api::{
    ManifestWork, ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout, Placement,
    PlacementDecision,
};
use rollout_controller::orchestrate::work_name;
use rollout_controller::reconcile::{StoreWriters, reconcile};
use serde_json::{Value, json};

/// Plays a watch's first list into `writer`.
fn listed<K>(writer: &mut Writer<K>, items: Vec<Value>)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned,
{
    writer.apply_watcher_event(&Event::Init);
    for item in items {
        writer.apply_watcher_event(&Event::InitApply(serde_json::from_value(item).unwrap()));
    }
    writer.apply_watcher_event(&Event::InitDone);
}

/// Plays every store's first list: no works and no revisions yet, the
/// placement deciding `clusters`, and `hub`'s carrier.
fn synced(writers: &mut StoreWriters, hub: &Hub, clusters: &[&str]) {
    listed::<ManifestWork>(&mut writers.works, vec![]);
    listed::<Placement>(&mut writers.placements, vec![placement()]);
    let decisions = decisions(clusters)["items"].as_array().unwrap().clone();
    listed::<PlacementDecision>(&mut writers.decisions, decisions);
    listed::<ControllerRevision>(&mut writers.revisions, vec![]);
    listed::<ManifestWorkReplicaSetRollout>(&mut writers.carriers, vec![hub.carrier().unwrap()]);
}

#[tokio::test]
async fn a_reconcile_over_synced_stores_reads_nothing_from_the_api() {
    let v2 = template("v2");
    let name = work_name(NS, MWRS, PLACEMENT);
    let clusters = ["cluster1", "cluster2", "cluster3"];
    let obj = mwrs(v2, json!({"type": "All"}), Value::Null);
    // Only writes: the revision, the three works, the status (the carrier's,
    // outside the script, and the MWRS's).
    let hub = Hub::ocm().with_carrier(json!([{"name": PLACEMENT}]), Value::Null);
    let (client, server) = api_server_on(
        hub.clone(),
        vec![
            Expect::echo(Method::POST, revisions_path()),
            Expect::echo(Method::PATCH, work_path("cluster1", &name)),
            Expect::echo(Method::PATCH, work_path("cluster2", &name)),
            Expect::echo(Method::PATCH, work_path("cluster3", &name)),
            Expect::status(&obj),
        ],
    );
    let ctx = context(client, &format!("http://{}", closed_port().await));
    let mut writers = ctx.take_store_writers().expect("the writers, once");
    assert!(ctx.take_store_writers().is_none());
    synced(&mut writers, &hub, &clusters);

    let object: Arc<ManifestWorkReplicaSet> = Arc::new(serde_json::from_value(obj).unwrap());
    reconcile(object, ctx.clone()).await.expect("reconciled");
    drop(ctx);
    let requests = server.await.unwrap();
    assert_eq!(requests.len(), 5);
    assert!(
        requests.iter().all(|r| r.method != Method::GET),
        "{requests:#?}"
    );
    let carrier_requests = hub.carrier_requests.lock().unwrap().clone();
    assert_eq!(
        carrier_requests
            .iter()
            .map(|r| (r.method.clone(), r.path.ends_with("/status")))
            .collect::<Vec<_>>(),
        [(Method::PATCH, true)],
        "the carrier is read from its store: {carrier_requests:#?}"
    );
}

#[tokio::test]
async fn a_reconcile_before_the_store_shows_its_own_writes_does_not_write_them_again() {
    let v2 = template("v2");
    let name = work_name(NS, MWRS, PLACEMENT);
    let clusters = ["cluster1", "cluster2", "cluster3"];
    let obj = mwrs(v2, json!({"type": "All"}), Value::Null);
    let hub = Hub::ocm().with_carrier(json!([{"name": PLACEMENT}]), Value::Null);
    // The revision's body, kept to play its watch event.
    let revision = Arc::new(std::sync::Mutex::new(Value::Null));
    let kept = Arc::clone(&revision);
    let (client, server) = api_server_on(
        hub.clone(),
        vec![
            Expect::new(Method::POST, revisions_path(), move |body| {
                let mut stored = body.clone();
                stored["metadata"]["resourceVersion"] = json!("99");
                *kept.lock().unwrap() = stored.clone();
                (http::StatusCode::CREATED, stored)
            }),
            Expect::echo(Method::PATCH, work_path("cluster1", &name)),
            Expect::echo(Method::PATCH, work_path("cluster2", &name)),
            Expect::echo(Method::PATCH, work_path("cluster3", &name)),
            Expect::status(&obj),
            // The second reconcile: its status, and no work again.
            Expect::status(&obj),
        ],
    );
    let ctx = context(client, &format!("http://{}", closed_port().await));
    let mut writers = ctx.take_store_writers().expect("the writers, once");
    synced(&mut writers, &hub, &clusters);

    let object: Arc<ManifestWorkReplicaSet> = Arc::new(serde_json::from_value(obj).unwrap());
    reconcile(Arc::clone(&object), ctx.clone())
        .await
        .expect("reconciled");
    // The revision's event came; the works' have not yet.
    let stored = revision.lock().unwrap().clone();
    writers
        .revisions
        .apply_watcher_event(&Event::Apply(serde_json::from_value(stored).unwrap()));
    reconcile(object, ctx.clone())
        .await
        .expect("reconciled again");
    drop(ctx);
    let requests = server.await.unwrap();
    let works = requests
        .iter()
        .filter(|r| r.path.contains("/manifestworks/"))
        .count();
    assert_eq!(works, 3, "each work written once: {requests:#?}");
}
