//! Routing through the real gateway to real plugin servers: each hook, every
//! answer of docs/plugin-api.md §2, pipelines (fan-out and the mutate chain), deadlines.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use rollout_gateway::hooks::HookKind;
use rollout_gateway::transport::grpc;
use rollout_proto::v1alpha1::*;
use serde_json::Value;
use tonic::Code;

fn validate(
    result: ValidationResult,
    message: &str,
    recheck_secs: Option<i64>,
) -> ValidateResponse {
    ValidateResponse {
        result: result as i32,
        message: message.into(),
        recheck_after: recheck_secs.map(|s| prost_types::Duration {
            seconds: s,
            nanos: 0,
        }),
    }
}

#[tokio::test]
async fn each_hook_through_one_plugin() {
    let p = plugin(Behaviour::new("weights")).await;
    p.set(|b| {
        b.mutate = Mutation::Annotate("weights/canary", "10");
        b.validate = validate(ValidationResult::Inprogress, "soaking 20s", Some(7));
    });
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("weights", &p, ""))).await;
    let mut c = gw.client().await;

    let init = c
        .initialize(to(
            "weights",
            InitializeRequest {
                controller_version: "t".into(),
                hub_name: "hub".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (init.name.as_str(), init.version.as_str()),
        ("weights", "1.0.0")
    );

    c.begin_rollout(to("weights", rollout("cluster1")))
        .await
        .unwrap();
    c.progress_rollout(to("weights", rollout("")))
        .await
        .unwrap();
    assert_eq!(p.calls(HookKind::BeginRollout), 1);
    assert_eq!(p.calls(HookKind::ProgressRollout), 1);
    assert_eq!(p.last(HookKind::BeginRollout).unwrap().cluster, "cluster1");

    // A single plugin's validation passes through unchanged.
    let v = c
        .validate_rollout_completion(to("weights", validate_request("cluster1")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        v,
        validate(ValidationResult::Inprogress, "soaking 20s", Some(7))
    );

    let input = work(4096);
    let resp = c
        .mutate_manifest_work(to("weights", mutate_request("cluster1", input)))
        .await
        .unwrap();
    assert_eq!(
        trailer(resp.metadata(), "ocm-rollout-mutated-by").as_deref(),
        Some("weights")
    );
    let out: Value = serde_json::from_slice(&resp.into_inner().manifest_work).unwrap();
    assert_eq!(out["metadata"]["annotations"]["weights/canary"], "10");
    gw.stop().await;
}

#[tokio::test]
async fn every_answer_of_the_routing_table() {
    let ok = plugin(Behaviour::new("ok")).await;
    let broken = plugin(Behaviour::new("broken")).await;
    broken.set(|b| b.fail = Some((Code::FailedPrecondition, "traffic split not found".into())));
    let partial = plugin(Behaviour::new("partial")).await;
    partial.set(|b| {
        b.unimplemented = vec![
            HookKind::ValidateRolloutCompletion,
            HookKind::MutateManifestWork,
        ]
    });
    let config = format!(
        "plugins:\n{}{}{}{}",
        insecure_plugin("ok", &ok, ""),
        insecure_plugin("broken", &broken, ""),
        insecure_plugin("partial", &partial, ""),
        insecure_plugin("hub-only", &ok, "    hubs: [hub-b]\n"),
    );
    let gw = gateway(&config).await;
    let mut c = gw.client().await;

    // Missing or empty key.
    let e = c.begin_rollout(to("", rollout("c1"))).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("ocm-rollout-plugin"),
        "{}",
        e.message()
    );
    let mut r = tonic::Request::new(rollout("c1"));
    r.metadata_mut()
        .insert("ocm-rollout-plugin", "".parse().unwrap());
    assert_eq!(
        c.begin_rollout(r).await.unwrap_err().code(),
        Code::InvalidArgument
    );

    // Not registered: NOT_FOUND naming it.
    let e = c
        .begin_rollout(to("nope", rollout("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("\"nope\""), "{}", e.message());

    // The caller (no hub identity) may not use a plugin limited to hub-b.
    let e = c
        .begin_rollout(to("hub-only", rollout("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(e.message().contains("hub-only"), "{}", e.message());

    // A plugin's error: its code, message prefixed with its name.
    let e = c
        .begin_rollout(to("broken", rollout("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert_eq!(e.message(), "plugin \"broken\": traffic split not found");

    // UNIMPLEMENTED: skipped, neutral result.
    let v = c
        .validate_rollout_completion(to("partial", validate_request("c1")))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.result, ValidationResult::Succeeded as i32);
    let m = c
        .mutate_manifest_work(to("partial", mutate_request("c1", work(512))))
        .await
        .unwrap();
    assert_eq!(
        trailer(m.metadata(), "ocm-rollout-mutated-by").as_deref(),
        Some("")
    );
    assert!(
        m.into_inner().manifest_work.is_empty(),
        "no mutation means an empty answer"
    );
    gw.stop().await;
}

#[tokio::test]
async fn hooks_left_out_of_initialize_are_not_called() {
    let p = plugin(Behaviour::new("validator")).await;
    p.set(|b| b.hooks = vec![Hook::ValidateRolloutCompletion]);
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin("validator", &p, "")
    ))
    .await;
    let mut c = gw.client().await;
    let init = c
        .initialize(to("validator", InitializeRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(init.hooks, vec![Hook::ValidateRolloutCompletion as i32]);

    c.begin_rollout(to("validator", rollout("c1")))
        .await
        .unwrap();
    c.progress_rollout(to("validator", rollout("")))
        .await
        .unwrap();
    let m = c
        .mutate_manifest_work(to("validator", mutate_request("c1", work(256))))
        .await
        .unwrap();
    assert!(m.into_inner().manifest_work.is_empty());
    c.validate_rollout_completion(to("validator", validate_request("c1")))
        .await
        .unwrap();
    assert_eq!(p.calls(HookKind::BeginRollout), 0);
    assert_eq!(p.calls(HookKind::ProgressRollout), 0);
    assert_eq!(p.calls(HookKind::MutateManifestWork), 0);
    assert_eq!(p.calls(HookKind::ValidateRolloutCompletion), 1);
    let debug = gw.debug().await;
    assert_eq!(
        debug["plugins"][0]["hooks"],
        serde_json::json!(["ValidateRolloutCompletion"])
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_three_member_mutate_chain_runs_in_order() {
    let a = plugin(Behaviour::new("a")).await;
    let b = plugin(Behaviour::new("b")).await;
    let c3 = plugin(Behaviour::new("c")).await;
    a.set(|x| x.mutate = Mutation::Annotate("a", "1"));
    b.set(|x| x.mutate = Mutation::Echo);
    c3.set(|x| x.mutate = Mutation::Annotate("c", "3"));
    // The listed order, not the file order, is the chain's.
    let config = format!(
        "plugins:\n{}{}{}pipelines:\n  - name: chain\n    plugins: [c, a, b]\n",
        insecure_plugin("a", &a, ""),
        insecure_plugin("b", &b, ""),
        insecure_plugin("c", &c3, ""),
    );
    let gw = gateway(&config).await;
    let mut client = gw.client().await;
    let resp = client
        .mutate_manifest_work(to("chain", mutate_request("cluster1", work(2048))))
        .await
        .unwrap();
    assert_eq!(
        trailer(resp.metadata(), "ocm-rollout-mutated-by").as_deref(),
        Some("c,a")
    );
    assert_eq!(trailer(resp.metadata(), "ocm-rollout-failed-open"), None);
    // Sent as trailers, after the answer, not as headers.
    let raw = raw_unary(
        gw.grpc,
        "MutateManifestWork",
        &mutate_request("cluster1", work(2048)),
        &[("ocm-rollout-plugin", "chain")],
    )
    .await;
    assert_eq!(raw.status().as_deref(), Some("0"));
    assert_eq!(
        raw.trailers
            .get("ocm-rollout-mutated-by")
            .map(|v| v.to_str().unwrap()),
        Some("c,a")
    );
    assert!(raw.headers.get("ocm-rollout-mutated-by").is_none());
    let out: Value = serde_json::from_slice(&resp.into_inner().manifest_work).unwrap();
    assert_eq!(out["metadata"]["annotations"]["test/chain"], "c,a");
    assert!(
        a.last(HookKind::MutateManifestWork).unwrap().at
            > c3.last(HookKind::MutateManifestWork).unwrap().at
    );
    assert!(
        b.last(HookKind::MutateManifestWork).unwrap().at
            > a.last(HookKind::MutateManifestWork).unwrap().at
    );

    // A Fail member failing stops the chain with its code.
    a.set(|x| x.fail = Some((Code::Aborted, "conflict".into())));
    let b_before = b.calls(HookKind::MutateManifestWork);
    let e = client
        .mutate_manifest_work(to("chain", mutate_request("cluster1", work(2048))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Aborted);
    assert_eq!(e.message(), "plugin \"a\": conflict");
    assert_eq!(
        b.calls(HookKind::MutateManifestWork),
        b_before,
        "the chain stopped at a"
    );
    gw.stop().await;
}

#[tokio::test]
async fn an_ignore_member_that_fails_is_skipped_and_named() {
    let a = plugin(Behaviour::new("a")).await;
    let flaky = plugin(Behaviour::new("flaky")).await;
    a.set(|x| x.mutate = Mutation::Annotate("a", "1"));
    flaky.set(|x| x.fail = Some((Code::Internal, "boom".into())));
    let config = format!(
        "plugins:\n{}{}pipelines:\n  - name: p\n    plugins: [flaky, a]\n",
        insecure_plugin("a", &a, ""),
        insecure_plugin("flaky", &flaky, "    failurePolicy: Ignore\n"),
    );
    let gw = gateway(&config).await;
    let mut c = gw.client().await;
    let resp = c
        .mutate_manifest_work(to("p", mutate_request("c1", work(1024))))
        .await
        .unwrap();
    assert_eq!(
        trailer(resp.metadata(), "ocm-rollout-failed-open").as_deref(),
        Some("flaky")
    );
    assert_eq!(
        trailer(resp.metadata(), "ocm-rollout-mutated-by").as_deref(),
        Some("a")
    );
    let r = c.begin_rollout(to("p", rollout("c1"))).await.unwrap();
    assert_eq!(
        trailer(r.metadata(), "ocm-rollout-failed-open").as_deref(),
        Some("flaky")
    );
    gw.stop().await;
}

/// What one member does in the aggregation table.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Vote {
    Succeeded,
    Failed,
    InProgress,
    Unimplemented,
    Error,
}

const VOTES: [Vote; 5] = [
    Vote::Succeeded,
    Vote::Failed,
    Vote::InProgress,
    Vote::Unimplemented,
    Vote::Error,
];

fn script(p: &Plugin, vote: Vote) {
    p.set(|b| {
        b.unimplemented.clear();
        b.fail = None;
        match vote {
            Vote::Succeeded => b.validate = validate(ValidationResult::Succeeded, "", None),
            Vote::Failed => {
                b.validate = validate(
                    ValidationResult::Failed,
                    &format!("{} says no", b.name),
                    None,
                )
            }
            Vote::InProgress => {
                b.validate = validate(
                    ValidationResult::Inprogress,
                    &format!("{} soaking", b.name),
                    Some(if b.name == "strict" { 9 } else { 4 }),
                )
            }
            Vote::Unimplemented => b.unimplemented = vec![HookKind::ValidateRolloutCompletion],
            Vote::Error => b.fail = Some((Code::Unavailable, "down".into())),
        }
    });
}

#[tokio::test]
async fn validate_aggregation_for_every_combination_of_member_results() {
    // "strict" has failurePolicy Fail, "lenient" Ignore.
    let strict = plugin(Behaviour::new("strict")).await;
    let lenient = plugin(Behaviour::new("lenient")).await;
    let config = format!(
        "defaults:\n  retry:\n    maxAttempts: 1\nplugins:\n{}{}pipelines:\n  - name: both\n    plugins: [strict, lenient]\n",
        insecure_plugin("strict", &strict, ""),
        insecure_plugin("lenient", &lenient, "    failurePolicy: Ignore\n"),
    );
    let gw = gateway(&config).await;
    let mut c = gw.client().await;
    for s in VOTES {
        for l in VOTES {
            script(&strict, s);
            script(&lenient, l);
            let got = c
                .validate_rollout_completion(to("both", validate_request("c1")))
                .await;
            // The expectation, spelled out from docs/plugin-api.md §2.
            if s == Vote::Error {
                let e = got.expect_err("a Fail member's error fails the call");
                assert_eq!(e.code(), Code::Unavailable, "{s:?}/{l:?}");
                assert_eq!(e.message(), "plugin \"strict\": down");
                continue;
            }
            let resp = got.unwrap_or_else(|e| panic!("{s:?}/{l:?}: {e}"));
            let failed_open = trailer(resp.metadata(), "ocm-rollout-failed-open");
            let v = resp.into_inner();
            let votes: Vec<(&str, Vote)> = [("strict", s), ("lenient", l)]
                .into_iter()
                .filter(|(_, v)| !matches!(v, Vote::Unimplemented | Vote::Error))
                .collect();
            let want = if votes.iter().any(|(_, v)| *v == Vote::Failed) {
                ValidationResult::Failed
            } else if votes.iter().any(|(_, v)| *v == Vote::InProgress) {
                ValidationResult::Inprogress
            } else {
                ValidationResult::Succeeded
            };
            assert_eq!(v.result, want as i32, "{s:?}/{l:?}");
            let want_message: Vec<String> = votes
                .iter()
                .filter_map(|(n, v)| match v {
                    Vote::Failed => Some(format!("{n}: {n} says no")),
                    Vote::InProgress => Some(format!("{n}: {n} soaking")),
                    _ => None,
                })
                .collect();
            assert_eq!(v.message, want_message.join("; "), "{s:?}/{l:?}");
            let want_recheck = (want == ValidationResult::Inprogress).then(|| {
                votes
                    .iter()
                    .filter(|(_, v)| *v == Vote::InProgress)
                    .map(|(n, _)| if *n == "strict" { 9 } else { 4 })
                    .min()
                    .unwrap()
            });
            assert_eq!(
                v.recheck_after.map(|d| d.seconds),
                want_recheck,
                "{s:?}/{l:?}"
            );
            assert_eq!(
                failed_open.as_deref(),
                (l == Vote::Error).then_some("lenient"),
                "{s:?}/{l:?}"
            );
        }
    }
    gw.stop().await;
}

#[tokio::test]
async fn fan_out_is_concurrent() {
    let mut members = Vec::new();
    let mut config = String::from("plugins:\n");
    for name in ["slow-a", "slow-b", "slow-c"] {
        let p = plugin(Behaviour::new(name)).await;
        p.set(|b| b.delay = Duration::from_millis(300));
        config.push_str(&insecure_plugin(name, &p, ""));
        members.push(p);
    }
    config.push_str("pipelines:\n  - name: slow\n    plugins: [slow-a, slow-b, slow-c]\n");
    let gw = gateway(&config).await;
    let mut c = gw.client().await;
    // Warm the connections so the measurement is the fan-out alone.
    c.initialize(to("slow", InitializeRequest::default()))
        .await
        .unwrap();
    for (hook, call) in [("progress", 0), ("validate", 1)] {
        let t = Instant::now();
        if call == 0 {
            c.progress_rollout(to("slow", rollout(""))).await.unwrap();
        } else {
            c.validate_rollout_completion(to("slow", validate_request("c1")))
                .await
                .unwrap();
        }
        let took = t.elapsed();
        assert!(took >= Duration::from_millis(300), "{hook}: {took:?}");
        assert!(
            took < Duration::from_millis(550),
            "{hook}: 3 × 300 ms members took {took:?}: not concurrent"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn the_callers_deadline_reaches_the_plugin() {
    let p = plugin(Behaviour::new("p")).await;
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin("p", &p, "    timeout: 2s\n")
    ))
    .await;
    let mut c = gw.client().await;

    let mut r = to("p", rollout("c1"));
    r.set_timeout(Duration::from_millis(300));
    c.begin_rollout(r).await.unwrap();
    let seen = p
        .last(HookKind::BeginRollout)
        .unwrap()
        .timeout
        .expect("a grpc-timeout");
    assert!(
        seen <= Duration::from_millis(300) && seen > Duration::from_millis(200),
        "{seen:?}"
    );

    // The plugin's own timeout is sooner than the caller's: that is what it sees.
    let mut r = to("p", rollout("c1"));
    r.set_timeout(Duration::from_secs(20));
    c.begin_rollout(r).await.unwrap();
    let seen = p
        .last(HookKind::BeginRollout)
        .unwrap()
        .timeout
        .expect("a grpc-timeout");
    assert!(
        seen <= Duration::from_secs(2) && seen > Duration::from_millis(1800),
        "{seen:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_plugin_past_its_timeout_is_deadline_exceeded() {
    let p = plugin(Behaviour::new("sleepy")).await;
    p.set(|b| b.delay = Duration::from_secs(3));
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin("sleepy", &p, "    timeout: 500ms\n")
    ))
    .await;
    let mut c = gw.client().await;
    let t = Instant::now();
    let e = c
        .validate_rollout_completion(to("sleepy", validate_request("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    assert!(
        e.message().starts_with("plugin \"sleepy\": "),
        "{}",
        e.message()
    );
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );

    // The caller's own deadline, sooner than the plugin's timeout. A tonic
    // client would give up by itself at that instant, so a bare HTTP/2 client
    // shows what the gateway answers.
    let t = Instant::now();
    let raw = raw_unary(
        gw.grpc,
        "BeginRollout",
        &rollout("c1"),
        &[("ocm-rollout-plugin", "sleepy"), ("grpc-timeout", "200m")],
    )
    .await;
    assert_eq!(
        raw.status().as_deref(),
        Some("4"),
        "DEADLINE_EXCEEDED: {raw:?}"
    );
    assert!(
        t.elapsed() < Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );
    gw.stop().await;
}

#[tokio::test]
async fn pipeline_initialize_merges_members() {
    let a = plugin(Behaviour::new("a")).await;
    let b = plugin(Behaviour::new("b")).await;
    a.set(|x| x.hooks = vec![Hook::MutateManifestWork]);
    b.set(|x| x.hooks = vec![Hook::BeginRollout]);
    let config = format!(
        "plugins:\n{}{}pipelines:\n  - name: p\n    plugins: [a, b]\n",
        insecure_plugin("a", &a, ""),
        insecure_plugin("b", &b, ""),
    );
    let gw = gateway(&config).await;
    let mut c = gw.client().await;
    let init = c
        .initialize(to("p", InitializeRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(init.name, "p");
    assert_eq!(init.version, "a=1.0.0,b=1.0.0");
    assert_eq!(
        init.hooks,
        vec![Hook::BeginRollout as i32, Hook::MutateManifestWork as i32]
    );
    // Each member's hooks were learned: b is not asked to mutate.
    c.mutate_manifest_work(to("p", mutate_request("c1", work(256))))
        .await
        .unwrap();
    assert_eq!(b.calls(HookKind::MutateManifestWork), 0);
    assert_eq!(a.calls(HookKind::MutateManifestWork), 1);
    gw.stop().await;
}

#[tokio::test]
async fn trace_context_reaches_the_plugin_only_when_well_formed() {
    let p = plugin(Behaviour::new("traced")).await;
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("traced", &p, ""))).await;
    let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let raw = raw_unary(
        gw.grpc,
        "BeginRollout",
        &rollout("c1"),
        &[("ocm-rollout-plugin", "traced"), ("traceparent", good)],
    )
    .await;
    assert_eq!(raw.status().as_deref(), Some("0"));
    // The plugin's parent is the gateway's own span, in the caller's trace.
    let seen = p.last(HookKind::BeginRollout).unwrap().traceparent.unwrap();
    assert!(
        seen.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-") && seen.ends_with("-01"),
        "{seen}"
    );
    assert_ne!(seen, good);
    let raw = raw_unary(
        gw.grpc,
        "BeginRollout",
        &rollout("c1"),
        &[
            ("ocm-rollout-plugin", "traced"),
            ("traceparent", "not-a-trace"),
            ("tracestate", "caller=1"),
        ],
    )
    .await;
    assert_eq!(raw.status().as_deref(), Some("0"));
    // A malformed one is not passed on: the gateway starts a trace of its own.
    let seen = p.last(HookKind::BeginRollout).unwrap().traceparent.unwrap();
    assert!(!seen.contains("not-a-trace"));
    assert!(
        rollout_telemetry::parse_traceparent(seen.as_bytes()).is_some(),
        "{seen}"
    );
    assert!(!seen.contains("4bf92f3577b34da6a3ce929d0e0e4736"));
    gw.stop().await;
}

/// A plugin on bare HTTP/2 that keeps every request's message bytes exactly
/// as they arrived, and answers each hook with an empty message (for
/// Initialize: every hook implemented; for MutateManifestWork: unchanged).
async fn byte_recorder() -> (std::net::SocketAddr, Arc<Mutex<Vec<(String, Bytes)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Arc<Mutex<Vec<(String, Bytes)>>> = Arc::default();
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(stream).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = conn.accept().await {
                    let method = request.uri().path().rsplit('/').next().unwrap().to_owned();
                    let mut body = request.into_body();
                    let (framed, _) = grpc::collect(&mut body, 64 << 20).await.unwrap();
                    let message = grpc::message(framed, 64 << 20).unwrap();
                    record.lock().unwrap().push((method.clone(), message));
                    let answer = match method.as_str() {
                        "Initialize" => grpc::flatten(grpc::encode(&InitializeResponse {
                            name: "recorder".into(),
                            version: "1".into(),
                            hooks: vec![],
                            ..Default::default()
                        })),
                        _ => grpc::flatten(grpc::encode(&())),
                    };
                    let response = http::Response::builder()
                        .header("content-type", "application/grpc")
                        .body(())
                        .unwrap();
                    let mut stream = respond.send_response(response, false).unwrap();
                    stream.send_data(answer, false).unwrap();
                    let mut trailers = http::HeaderMap::new();
                    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                    stream.send_trailers(trailers).unwrap();
                }
            });
        }
    });
    (addr, seen)
}

/// A request as a newer controller might send it: the state, and a field
/// this gateway's proto does not have.
#[derive(Clone, PartialEq, prost::Message)]
struct NewerRequest {
    #[prost(string, tag = "1")]
    mwrs_name: String,
    #[prost(string, tag = "4")]
    cluster_name: String,
    #[prost(message, optional, tag = "6")]
    rollout_status: Option<RolloutState>,
    #[prost(string, tag = "100")]
    added_later: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NewerMutateRequest {
    #[prost(message, optional, tag = "1")]
    rollout: Option<NewerRequest>,
    #[prost(bytes = "bytes", tag = "2")]
    manifest_work: Bytes,
}

#[tokio::test]
async fn rollout_requests_reach_every_member_byte_for_byte() {
    use prost::Message as _;
    let (a, seen_a) = byte_recorder().await;
    let (b, seen_b) = byte_recorder().await;
    let gw = gateway(&format!(
        "plugins:\n  - name: a\n    endpoint: {a}\n    insecure: true\n  - name: b\n    endpoint: {b}\n    insecure: true\npipelines:\n  - name: both\n    plugins: [a, b]\n"
    ))
    .await;
    let state = RolloutState {
        completed: (1..=500)
            .map(|i| ClusterRolloutStatus {
                cluster_name: format!("cluster-{i:04}"),
                manifest_revision_name: "rev".into(),
                ..ClusterRolloutStatus::default()
            })
            .collect(),
        ..RolloutState::default()
    };
    let request = NewerRequest {
        mwrs_name: "web".into(),
        cluster_name: "cluster-0501".into(),
        rollout_status: Some(state),
        added_later: "a field from a later API version".into(),
    };
    let answer = raw_unary(
        gw.grpc,
        "BeginRollout",
        &request,
        &[("ocm-rollout-plugin", "both")],
    )
    .await;
    assert_eq!(answer.status().as_deref(), Some("0"), "{answer:?}");
    let mutate = NewerMutateRequest {
        rollout: Some(request.clone()),
        manifest_work: work(2048),
    };
    let answer = raw_unary(
        gw.grpc,
        "MutateManifestWork",
        &mutate,
        &[("ocm-rollout-plugin", "both")],
    )
    .await;
    assert_eq!(answer.status().as_deref(), Some("0"), "{answer:?}");

    for seen in [seen_a, seen_b] {
        let seen = seen.lock().unwrap();
        let message = |method: &str| {
            seen.iter()
                .find(|(m, _)| m == method)
                .map(|(_, bytes)| bytes.clone())
                .unwrap_or_else(|| {
                    panic!(
                        "no {method} in {:?}",
                        seen.iter().map(|s| &s.0).collect::<Vec<_>>()
                    )
                })
        };
        assert_eq!(message("BeginRollout"), request.encode_to_vec());
        assert_eq!(message("MutateManifestWork"), mutate.encode_to_vec());
    }
    gw.stop().await;
}
