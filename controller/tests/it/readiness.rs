//! `/readyz` without leader election, against kube's mock API answering as
//! a real API server does for an empty hub: every list is empty, every
//! watch stays open. The controller is ready once it has listed the
//! ManifestWorkReplicaSets; with kube-runtime's store readiness waited on
//! by two tasks it never was on a real API server.

use crate::common::{get, start_controller};

use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::json;

/// Lists answer empty at resourceVersion 1; watches are held open (their
/// answers are never sent).
fn empty_hub() -> kube::Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        let mut open_watches = Vec::new();
        while let Some((request, send)) = handle.next_request().await {
            if request.uri().query().unwrap_or("").contains("watch=") {
                open_watches.push(send);
                continue;
            }
            let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []});
            send.send_response(
                Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&list).unwrap()))
                    .unwrap(),
            );
        }
    });
    kube::Client::new(service, "default")
}

#[tokio::test]
async fn without_leader_election_it_is_ready_once_listed() {
    let addr = start_controller(empty_hub(), None, None).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut last = String::new();
    while tokio::time::Instant::now() < deadline {
        last = get(addr, "/readyz").await;
        if last.starts_with("HTTP/1.1 200") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "not ready 5 s after an empty list: {}",
        last.lines().next().unwrap_or_default()
    );
}
