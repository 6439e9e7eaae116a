//! A fail-open as Jaeger holds it: a pipeline of the three example plugins
//! and `gone`, a plugin with `failurePolicy: Ignore` whose endpoint
//! refuses every connection. The rollout goes on without it; Jaeger finds
//! the calls by `ocm.rollout.failed_open=gone` (the gateway's and the
//! controller's spans) and by `ocm.rollout.failure_ignored=true` (each of
//! its failed attempts, an error whose `ocm.rollout.failure_policy` is
//! `Ignore`).

use std::time::Duration;

use rollout_demo::{RolloutParams, StackOptions};
use serde_json::Value;

use super::*;

/// A registry entry for `gone` at a port nothing listens on: one attempt
/// per call, a short timeout.
fn gone_plugin() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    format!(
        "  - name: gone\n    endpoint: 127.0.0.1:{port}\n    insecure: true\n    timeout: 1s\n\
         \x20   failurePolicy: Ignore\n    retry:\n      maxAttempts: 1\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_failing_under_failure_policy_ignore_is_found_by_its_tags() {
    let Some(binary) = jaeger_binary() else {
        return;
    };
    let options = StackOptions {
        extra_plugins: gone_plugin(),
        extra_pipelines: "  - name: open-rollout\n    plugins: [traffic-weights, smoke-test, rollback-mutator, gone]\n".into(),
        ..StackOptions::default()
    };
    let params = RolloutParams {
        fail: Vec::new(),
        ..RolloutParams::default()
    };
    let run = traced_rollout(
        &binary,
        None,
        options,
        4,
        &params,
        &["--plugin", "open-rollout"],
    )
    .await;
    assert_eq!(run.summary["result"], "Succeeded", "{}", run.summary);
    settled(&run.jaeger, &SERVICES, Duration::from_secs(30)).await;

    // The gateway's span of each call says the call went on without it,
    // and is no error.
    let open = run
        .jaeger
        .search(
            "rollout-gateway",
            r#"{"ocm.rollout.failed_open":"gone"}"#,
            "",
        )
        .await
        .unwrap();
    assert!(
        !open.is_empty(),
        "ocm.rollout.failed_open=gone finds the calls"
    );
    let mut servers = 0;
    for trace in &open {
        let tree = Tree::of(trace);
        for server in tree.of_kind("rollout-gateway", "server") {
            if tag(server, "ocm.rollout.failed_open").as_deref() != Some("gone") {
                continue;
            }
            servers += 1;
            assert!(!is_error(server), "{server}");
            assert_eq!(tag(server, "rpc.grpc.status_code").as_deref(), Some("0"));
            assert!(
                server["logs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|l| l["fields"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|f| f["value"] == "fail-open")),
                "a fail-open event: {server}"
            );
            // Its attempt at gone: an error that was ignored.
            let attempts: Vec<&Value> = tree
                .children(server)
                .into_iter()
                .map(|(_, s)| s)
                .filter(|s| tag(s, "ocm.rollout.plugin").as_deref() == Some("gone"))
                .collect();
            let [attempt] = attempts[..] else {
                panic!("one attempt at gone: {attempts:?}")
            };
            assert!(is_error(attempt), "{attempt}");
            assert_eq!(
                tag(attempt, "ocm.rollout.failure_policy").as_deref(),
                Some("Ignore")
            );
            assert_eq!(
                tag(attempt, "ocm.rollout.failure_ignored").as_deref(),
                Some("true")
            );
            assert!(tree.children(attempt).is_empty(), "gone answered nothing");
            // The controller's span of the call names it too.
            let parent = parent_id(server).expect("the controller's span");
            let controller = spans(trace)
                .iter()
                .find(|s| span_id(s) == parent)
                .expect("in the trace");
            assert_eq!(
                tag(controller, "ocm.rollout.failed_open").as_deref(),
                Some("gone")
            );
            assert!(!is_error(controller), "{controller}");
        }
    }
    assert!(servers > 0);

    // The attempts themselves, by their own tag.
    let ignored = run
        .jaeger
        .search(
            "rollout-gateway",
            r#"{"ocm.rollout.failure_ignored":"true"}"#,
            "",
        )
        .await
        .unwrap();
    let traces = |found: &[Value]| -> BTreeSet<String> {
        found
            .iter()
            .filter_map(|t| t["traceID"].as_str().map(str::to_owned))
            .collect()
    };
    assert!(
        traces(&open).is_subset(&traces(&ignored)),
        "every call that failed open has an ignored attempt"
    );
    // And from the controller's side.
    let from_controller = run
        .jaeger
        .search(
            "rollout-controller",
            r#"{"ocm.rollout.failed_open":"gone"}"#,
            "",
        )
        .await
        .unwrap();
    assert!(traces(&open).is_subset(&traces(&from_controller)));
}
