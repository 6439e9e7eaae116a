//! Which ManifestWorkReplicaSetRollout a set reads: the one whose
//! `spec.targetRef` names it, else the one of its name; none when several
//! target it (the set is held); and a carrier's status only when it was
//! written for this very set (its UID).

use crate::common;

use std::time::Duration;

use common::*;
use http::Method;
use kube::runtime::controller::Action;
use rollout_controller::orchestrate::work_name;
use rollout_controller::reconcile::reconcile;
use serde_json::{Value, json};

/// The requests of a first reconcile of `obj` (nothing exists yet, one
/// cluster, strategy All, no plugin).
fn first_rollout(obj: &Value) -> Vec<Expect> {
    let name = work_name(NS, MWRS, PLACEMENT);
    vec![
        Expect::ok(Method::GET, works_path(), works(vec![])),
        Expect::ok(Method::GET, revisions_path(), revisions(vec![])),
        Expect::echo(Method::POST, revisions_path()),
        Expect::ok(Method::GET, placement_path(), placement()),
        Expect::ok(Method::GET, decisions_path(), decisions(&["cluster1"])),
        Expect::echo(Method::PATCH, work_path("cluster1", &name)),
        Expect::status(obj),
    ]
}

/// The `CarrierBound` condition of the last status written in `recorded`.
fn carrier_bound(recorded: &[Recorded]) -> Value {
    let status = recorded
        .iter()
        .rev()
        .find(|r| r.path.ends_with("/status"))
        .expect("a status written");
    status.body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "CarrierBound")
        .cloned()
        .expect("a CarrierBound condition")
}

#[tokio::test]
async fn a_carrier_whose_target_ref_names_the_set_binds_to_it() {
    let v1 = template("v1");
    // The same-name one is left for another set: an explicit reference wins.
    let hub = Hub::ocm()
        .with_carrier_named(
            "hello-rollout",
            json!({"targetRef": {"kind": "ManifestWorkReplicaSet", "name": MWRS},
                   "placements": [{"name": PLACEMENT, "abortOnFailure": true}]}),
            Value::Null,
        )
        .with_carrier_named(MWRS, json!({"targetRef": {"name": "other"}}), Value::Null);
    let obj = mwrs(v1.clone(), json!({"type": "All"}), Value::Null);
    let (client, server) = api_server_on(hub.clone(), first_rollout(&obj));
    let ctx = context(client, "http://127.0.0.1:1");
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    let bound = carrier_bound(&recorded);
    assert_eq!(
        (&bound["status"], &bound["reason"]),
        (&json!("True"), &json!("TargetRef"))
    );
    assert!(
        bound["message"]
            .as_str()
            .unwrap()
            .contains("default/hello-rollout"),
        "{bound}"
    );
    // The status went to the carrier that targets the set, with its UID;
    // none was created, and the same-name one is untouched.
    let status = &hub.carrier_named("hello-rollout").unwrap()["status"];
    assert_eq!(status["setUID"], "mwrs-uid");
    assert_eq!(status["updateRevision"], json!(hash_of(&v1)));
    assert_eq!(hub.carrier().unwrap()["status"], Value::Null);
    assert_eq!(hub.carriers.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_carrier_status_written_for_an_earlier_set_of_the_name_is_not_read() {
    let v1 = template("v1");
    // Left from a set of the same name deleted mid-abort: its revisions
    // and abort are not this set's.
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT, "abortOnFailure": true}]),
        json!({"setUID": "an-earlier-uid", "currentRevision": "0123456789",
               "updateRevision": hash_of(&v1), "abortedTime": "2025-01-01T00:00:05Z"}),
    );
    let obj = mwrs(v1.clone(), json!({"type": "All"}), Value::Null);
    let (client, server) = api_server_on(hub.clone(), first_rollout(&obj));
    let ctx = context(client, "http://127.0.0.1:1");
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    // Rolled out as a first rollout: the template applied, never held
    // back as an aborted revision.
    let work = recorded
        .iter()
        .find(|r| r.path.contains("/manifestworks/"))
        .expect("a work written");
    assert_eq!(work.body["spec"], v1);
    let status = &hub.carrier().unwrap()["status"];
    assert_eq!(status["setUID"], "mwrs-uid");
    assert_eq!(status.get("abortedTime"), None, "{status}");
    assert_eq!(status.get("currentRevision"), None, "{status}");
    let bound = carrier_bound(&recorded);
    let message = bound["message"].as_str().unwrap();
    assert!(
        message.contains("an-earlier-uid") && message.contains("starts over"),
        "{message}"
    );
}

#[tokio::test]
async fn two_carriers_targeting_one_set_hold_it() {
    let hub = Hub::ocm()
        .with_carrier_named("a", json!({"targetRef": {"name": MWRS}}), Value::Null)
        .with_carrier_named("b", json!({"targetRef": {"name": MWRS}}), Value::Null);
    let obj = mwrs(template("v1"), json!({"type": "All"}), Value::Null);
    let (client, server) = api_server_on(hub.clone(), vec![Expect::conditions(&obj)]);
    let ctx = context(client, "http://127.0.0.1:1");
    let action = reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    assert_eq!(action, Action::requeue(Duration::from_secs(60)));
    drop(ctx);
    // Nothing read or written but the condition: no work, no revision.
    let recorded = server.await.unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].content_type, "application/merge-patch+json");
    let bound = carrier_bound(&recorded);
    assert_eq!(
        (&bound["status"], &bound["reason"]),
        (&json!("False"), &json!("Ambiguous"))
    );
    let message = bound["message"].as_str().unwrap();
    assert!(message.contains("\"a\", \"b\""), "{message}");
    assert_eq!(hub.carriers.lock().unwrap().len(), 2);
}
