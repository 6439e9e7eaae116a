//! What counts as a plugin's answer and what as its failure, against a real
//! gateway on loopback: compressed answers (from a plugin written on raw
//! HTTP/2), caller-chosen deadlines and the circuit, oversized error
//! messages, the retry budget of a fresh gateway, and the state a reload keeps
//! or must leave alone (concurrency bound, breaker and budget settings).

use crate::common;

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use prost::Message as _;
use rollout_gateway::hooks::HookKind;
use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, MutateManifestWorkRequest, MutateManifestWorkResponse,
    ValidateResponse, ValidationResult,
};
use rollout_test_support::h2_peer;
use serde_json::Value;
use tonic::Code;

/// How the raw plugin frames its answers.
#[derive(Debug, Clone, Copy)]
enum Framing {
    /// gzip, flag 1, `grpc-encoding: gzip`: what gRPC libraries send with
    /// compression switched on.
    Gzip,
    /// Flag 1 on uncompressed bytes, no `grpc-encoding`.
    FlagWithoutEncoding,
    /// Flag 1, compressed with an encoding the gateway does not offer.
    UnknownEncoding,
}

/// A plugin on raw HTTP/2 that answers ValidateRolloutCompletion with FAILED,
/// MutateManifestWork with the work annotated, and the others empty, framed
/// as `framing` says.
async fn raw_plugin(framing: Framing) -> SocketAddr {
    h2_peer::serve(move |request, respond| answer(framing, request, respond)).await
}

async fn answer(
    framing: Framing,
    request: http::Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
) {
    let method = request.uri().path().rsplit('/').next().unwrap().to_string();
    let input = h2_peer::read_body(&mut request.into_body()).await;
    let message = match method.as_str() {
        "Initialize" => InitializeResponse::default().encode_to_vec(),
        "ValidateRolloutCompletion" => ValidateResponse {
            result: ValidationResult::Failed as i32,
            message: "smoke test failed".into(),
            recheck_after: None,
        }
        .encode_to_vec(),
        "MutateManifestWork" => {
            let request = MutateManifestWorkRequest::decode(&input[5..]).unwrap();
            let work: Value = serde_json::from_slice(&request.manifest_work).unwrap();
            let work = annotate(work, "raw", "compressed", "yes");
            MutateManifestWorkResponse {
                manifest_work: Bytes::from(serde_json::to_vec(&work).unwrap()),
            }
            .encode_to_vec()
        }
        _ => Vec::new(),
    };
    let gzip = |bytes: &[u8]| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    };
    let (compressed, bytes, encoding) = match framing {
        Framing::Gzip => (true, gzip(&message), Some("gzip")),
        Framing::FlagWithoutEncoding => (true, message, None),
        Framing::UnknownEncoding => (true, gzip(&message), Some("snappy")),
    };
    let headers: Vec<_> = encoding.map(|e| ("grpc-encoding", e)).into_iter().collect();
    h2_peer::answer_ok(respond, &headers, compressed, &bytes);
}

fn raw_entry(name: &str, addr: SocketAddr) -> String {
    format!("  - name: {name}\n    endpoint: {addr}\n    insecure: true\n")
}

#[tokio::test]
async fn a_gzip_compressed_answer_is_decoded_not_skipped() {
    let addr = raw_plugin(Framing::Gzip).await;
    let gw = gateway(&format!("plugins:\n{}", raw_entry("raw", addr))).await;
    let mut c = gw.client().await;

    c.initialize(to("raw", InitializeRequest::default()))
        .await
        .expect("initialized");
    let v = c
        .validate_rollout_completion(to("raw", validate_request("c1")))
        .await
        .expect("validated")
        .into_inner();
    assert_eq!(v.result, ValidationResult::Failed as i32, "{v:?}");
    assert!(v.message.contains("smoke test failed"), "{v:?}");

    let m = c
        .mutate_manifest_work(to("raw", mutate_request("c1", work(1024))))
        .await
        .expect("mutated")
        .into_inner();
    let out: Value = serde_json::from_slice(&m.manifest_work).expect("a work");
    assert_eq!(out["metadata"]["annotations"]["compressed"], "yes", "{out}");
    gw.stop().await;
}

#[tokio::test]
async fn an_answer_the_gateway_cannot_decode_is_the_plugins_failure() {
    for framing in [Framing::FlagWithoutEncoding, Framing::UnknownEncoding] {
        let addr = raw_plugin(framing).await;
        let gw = gateway(&format!("plugins:\n{}", raw_entry("raw", addr))).await;
        let mut c = gw.client().await;
        let e = c
            .initialize(to("raw", InitializeRequest::default()))
            .await
            .expect_err("not answered for the plugin");
        assert_eq!(e.code(), Code::Internal, "{framing:?}: {e:?}");
        let e = c
            .validate_rollout_completion(to("raw", validate_request("c1")))
            .await
            .expect_err("not a neutral answer");
        assert_eq!(e.code(), Code::Internal, "{framing:?}: {e:?}");
        // Its Initialize is as undecodable: the plugin is never loaded.
        assert!(
            e.message().starts_with("plugin \"raw\": not loaded: ")
                && e.message().contains("undecodable answer: "),
            "{framing:?}: {}",
            e.message()
        );
        let e = c
            .mutate_manifest_work(to("raw", mutate_request("c1", work(1024))))
            .await
            .expect_err("not dropped");
        assert_eq!(e.code(), Code::Internal, "{framing:?}: {e:?}");
        assert!(e.message().contains("plugin \"raw\""), "{}", e.message());
        gw.stop().await;
    }
}

#[tokio::test]
async fn caller_deadlines_do_not_open_a_healthy_plugins_circuit() {
    let p = plugin(Behaviour::new("slow")).await;
    p.set(|b| b.delay = Duration::from_millis(1_000));
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin(
            "slow",
            &p,
            "    timeout: 10s\n    circuitBreaker:\n      consecutiveFailures: 2\n      openFor: 30s\n"
        )
    ))
    .await;
    // Callers that chose a deadline shorter than the plugin's answer…
    for _ in 0..5 {
        let answer = raw_unary(
            gw.grpc,
            "BeginRollout",
            &rollout("c1"),
            &[("ocm-rollout-plugin", "slow"), ("grpc-timeout", "200m")],
        )
        .await;
        assert_eq!(answer.status().as_deref(), Some("4"), "{answer:?}");
    }
    // …and callers whose deadline passed before the plugin was called.
    for _ in 0..5 {
        let answer = raw_unary(
            gw.grpc,
            "BeginRollout",
            &rollout("c1"),
            &[("ocm-rollout-plugin", "slow"), ("grpc-timeout", "1n")],
        )
        .await;
        assert_eq!(answer.status().as_deref(), Some("4"), "{answer:?}");
    }
    assert_eq!(gw.debug().await["plugins"][0]["circuit"], "closed");
    // Another caller, with time to wait, is served.
    gw.client()
        .await
        .begin_rollout(to("slow", rollout("c2")))
        .await
        .expect("no circuit open for everyone else");
    gw.stop().await;
}

#[tokio::test]
async fn the_plugins_own_timeout_still_opens_its_circuit() {
    let p = plugin(Behaviour::new("slow")).await;
    p.set(|b| b.delay = Duration::from_millis(1_000));
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin(
            "slow",
            &p,
            "    timeout: 100ms\n    retry:\n      maxAttempts: 1\n    circuitBreaker:\n      consecutiveFailures: 2\n      openFor: 30s\n"
        )
    ))
    .await;
    let mut c = gw.client().await;
    for _ in 0..2 {
        let e = c
            .begin_rollout(to("slow", rollout("c1")))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    }
    let e = c
        .begin_rollout(to("slow", rollout("c1")))
        .await
        .unwrap_err();
    assert!(e.message().contains("circuit open"), "{}", e.message());
    gw.stop().await;
}

#[tokio::test]
async fn a_huge_plugin_message_is_cut_and_the_code_kept() {
    let p = plugin(Behaviour::new("chatty")).await;
    let long = "x".repeat(60_000);
    p.set(|b| b.fail = Some((Code::FailedPrecondition, long.clone())));
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("chatty", &p, ""))).await;
    let e = gw
        .client()
        .await
        .begin_rollout(to("chatty", rollout("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{:?}", e.code());
    assert!(
        e.message().starts_with("plugin \"chatty\": xxxx"),
        "{}",
        &e.message()[..100]
    );
    assert!(e.message().len() <= 4 * 1024, "{}", e.message().len());
    assert!(e.message().ends_with(" bytes cut]"), "{}", e.message());
    gw.stop().await;
}

#[tokio::test]
async fn a_fresh_gateway_retries_a_warming_plugins_first_unavailable() {
    let p = plugin(Behaviour::new("warming")).await;
    p.set(|b| b.fail_first = Some((1, Code::Unavailable)));
    // One retry a second, whatever the traffic: the first one is there at once.
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin(
            "warming",
            &p,
            "    retry:\n      maxAttempts: 2\n      initialBackoff: 1ms\n    retryBudget:\n      ratio: 0.2\n      minPerSecond: 1\n"
        )
    ))
    .await;
    gw.client()
        .await
        .begin_rollout(to("warming", rollout("c1")))
        .await
        .expect("retried");
    assert_eq!(p.calls(HookKind::BeginRollout), 2);
    gw.stop().await;
}

#[tokio::test]
async fn a_reload_keeps_counting_the_calls_in_flight_under_a_resized_bound() {
    let p = plugin(Behaviour::new("slow")).await;
    p.set(|b| b.delay = Duration::from_millis(1_500));
    let entry = |max: u32| {
        format!(
            "plugins:\n{}",
            insecure_plugin("slow", &p, &format!("    maxConcurrentCalls: {max}\n"))
        )
    };
    let gw = gateway(&entry(1)).await;
    let mut c = gw.client().await;
    let first = tokio::spawn(async move { c.begin_rollout(to("slow", rollout("c1"))).await });
    p.wait_calls(HookKind::BeginRollout, 1).await;

    // Raised to 2 while one call is in flight: one more fits, not two.
    gw.write_config(&entry(2));
    gw.wait_generation(2).await;
    let mut c = gw.client().await;
    let second = tokio::spawn(async move { c.begin_rollout(to("slow", rollout("c2"))).await });
    p.wait_calls(HookKind::BeginRollout, 2).await;
    let e = gw
        .client()
        .await
        .begin_rollout(to("slow", rollout("c3")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("limit 2"), "{}", e.message());
    first.await.unwrap().expect("first");
    second.await.unwrap().expect("second");
    gw.stop().await;
}

#[tokio::test]
async fn a_reload_rejected_across_files_changes_no_live_policy() {
    let kept = plugin(Behaviour::new("kept")).await;
    kept.set(|b| b.fail = Some((Code::Unavailable, "down".into())));
    let other = plugin(Behaviour::new("other")).await;
    let kept_entry = |failures: u32| {
        insecure_plugin(
            "kept",
            &kept,
            &format!(
                "    retry:\n      maxAttempts: 1\n    circuitBreaker:\n      consecutiveFailures: {failures}\n      openFor: 30s\n"
            ),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("a.yaml");
    let second = dir.path().join("b.yaml");
    std::fs::write(&first, format!("plugins:\n{}", kept_entry(10))).unwrap();
    std::fs::write(
        &second,
        format!("plugins:\n{}", insecure_plugin("other", &other, "")),
    )
    .unwrap();
    let gw = gateway_with(dir, first, |o| o.configs.push(second)).await;
    let generation = gw.debug().await["generation"].clone();

    // A change that would open the circuit after 2 failures, and that also
    // defines "other", which the second file defines: rejected whole.
    gw.write_config(&format!(
        "plugins:\n{}{}",
        kept_entry(2),
        insecure_plugin("other", &other, "")
    ));
    let rejected = |debug: &Value| {
        debug["lastReloadError"]
            .as_str()
            .is_some_and(|e| e.contains("\"other\" is already defined by") && e.contains("b.yaml"))
    };
    for _ in 0..500 {
        if rejected(&gw.debug().await) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let debug = gw.debug().await;
    assert!(rejected(&debug), "{debug}");
    assert_eq!(debug["generation"], generation, "{debug}");

    // The kept plugin still has the breaker of the live registry: five
    // failures in a row do not open its circuit.
    let mut c = gw.client().await;
    for _ in 0..5 {
        let e = c
            .begin_rollout(to("kept", rollout("c1")))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
        assert!(!e.message().contains("circuit open"), "{}", e.message());
    }
    assert_eq!(gw.debug().await["plugins"][0]["circuit"], "closed");
    gw.stop().await;
}
