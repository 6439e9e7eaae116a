//! Events on a ManifestWorkReplicaSet through kube-runtime's recorder,
//! against kube's mock API: the Event written, repeats within the window
//! held back (no request at all), and the next window's one patching the
//! same Event's series.

use crate::common;

use std::time::Duration;

use common::*;
use http::Method;
use jiff::Timestamp;
use kube::Resource;
use rollout_controller::api::ManifestWorkReplicaSet;
use rollout_controller::events::{EventGate, Events, Reason, RolloutEvent};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// An API server that answers every request 200 (201 for POST) with its
/// body, and returns them all once the client is dropped.
type Seen = Vec<(Method, String, Value)>;

fn recording_api() -> (kube::Client, JoinHandle<Seen>) {
    use http::{Request, Response, StatusCode};
    use kube::client::Body;
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let task = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_owned();
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let code = if method == Method::POST {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            send.send_response(
                Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
            seen.push((method, path, body));
        }
        seen
    });
    (kube::Client::new(service, "default"), task)
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).expect("time")
}

#[tokio::test]
async fn events_are_written_and_a_failing_plugin_does_not_flood_the_api() {
    let events_path = "/apis/events.k8s.io/v1/namespaces/default/events";
    let mwrs: ManifestWorkReplicaSet = serde_json::from_value(mwrs(
        template("v1"),
        json!({"type": "All", "plugin": "canary"}),
        serde_json::Value::Null,
    ))
    .unwrap();
    let object = mwrs.object_ref(&());
    let plugin_down = RolloutEvent {
        reason: Reason::PluginLoadFailed,
        note: "canary plugin: Initialize fails with unavailable plugin server endpoint (x).".into(),
    };
    let abort = RolloutEvent {
        reason: Reason::AbortStarted,
        note:
            "Rollout of revision r2 aborted: placement p: c1 Failed. Rolling back to revision r1."
                .into(),
    };

    // First window: both written; the plugin's repeats held back.
    let (client, requests) = api_server(vec![
        Expect::echo(Method::POST, events_path),
        Expect::echo(Method::POST, events_path),
    ]);
    let events = Events::new(
        client,
        "replica-a",
        EventGate::new(Duration::from_secs(300)),
    );
    events
        .publish(&object, &[plugin_down.clone(), abort.clone()], at(0))
        .await;
    for i in 1..=20 {
        events
            .publish(&object, std::slice::from_ref(&plugin_down), at(i * 10))
            .await;
    }
    drop(events);
    let written = requests.await.unwrap();
    assert_eq!(written.len(), 2);
    let event = &written[0].body;
    assert_eq!(event["reason"], "PluginLoadFailed");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["action"], "Initialize");
    assert_eq!(event["reportingController"], "rollout-controller");
    assert_eq!(event["reportingInstance"], "replica-a");
    assert_eq!(event["regarding"]["kind"], "ManifestWorkReplicaSet");
    assert_eq!(event["regarding"]["name"], "hello");
    assert_eq!(event["regarding"]["namespace"], "default");
    assert_eq!(event["note"], plugin_down.note);
    assert_eq!(written[1].body["reason"], "AbortStarted");
    assert_eq!(written[1].body["note"], abort.note);
}

#[tokio::test]
async fn a_repeat_in_the_next_window_patches_the_same_event() {
    let events_path = "/apis/events.k8s.io/v1/namespaces/default/events";
    let mwrs: ManifestWorkReplicaSet = serde_json::from_value(mwrs(
        template("v1"),
        json!({"type": "All"}),
        serde_json::Value::Null,
    ))
    .unwrap();
    let object = mwrs.object_ref(&());
    let failed = RolloutEvent {
        reason: Reason::HookCallFailed,
        note: "placement p: cluster c1: BeginRollout failed: UNAVAILABLE: refused".into(),
    };
    // The recorder names the Event `<object>.<nanoseconds>`: the patch is
    // checked against the name the first request carried.
    let (client, requests) = recording_api();
    let events = Events::new(client, "replica-a", EventGate::new(Duration::from_secs(60)));
    events
        .publish(&object, std::slice::from_ref(&failed), at(0))
        .await;
    events
        .publish(&object, std::slice::from_ref(&failed), at(30))
        .await;
    events
        .publish(&object, std::slice::from_ref(&failed), at(61))
        .await;
    drop(events);
    let written = requests.await.unwrap();
    assert_eq!(written.len(), 2, "{written:#?}");
    let (method, path, body) = &written[0];
    assert_eq!((method, path.as_str()), (&Method::POST, events_path));
    let name = body["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(name.starts_with("hello."), "{name}");
    let (method, path, body) = &written[1];
    assert_eq!(*method, Method::PATCH);
    assert_eq!(*path, format!("{events_path}/{name}"));
    assert_eq!(body["series"]["count"], 2);
    assert_eq!(body["note"], failed.note);
}
