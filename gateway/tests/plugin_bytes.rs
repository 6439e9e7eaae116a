//! What a plugin sends is bounded: its error messages are cut once, with
//! the right count; a pipeline's joined validation messages are bounded
//! however long its members' are; a compressed answer is inflated off the
//! thread that drives other calls.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "these tests time real processes and servers on the wall clock; none pauses tokio's"
)]
#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

// The harness the `it` binary shares; this binary uses part of it.
#[allow(dead_code)]
#[path = "it/common/mod.rs"]
mod common;

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use rollout_proto::v1alpha1::ValidationResult;
use rollout_test_support::h2_peer;
use tonic::Code;

/// The tests of this binary run one at a time: one measures latency, and
/// another's 16 MiB of JSON would be measured with it.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn a_long_plugin_error_is_cut_once_with_the_bytes_cut_counted() {
    let _serial = SERIAL.lock().await;
    let long = "y".repeat(48 * 1024);
    let mut behaviour = Behaviour::new("wordy");
    behaviour.fail = Some((Code::FailedPrecondition, long.clone()));
    let p = plugin(behaviour).await;
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("wordy", &p, ""))).await;
    let e = gw
        .client()
        .await
        .begin_rollout(to("wordy", rollout("c1")))
        .await
        .expect_err("the plugin fails");
    assert_eq!(e.code(), Code::FailedPrecondition);
    let full = format!("plugin \"wordy\": {long}");
    let message = e.message();
    assert!(message.len() <= 4096, "{}", message.len());
    let kept = message.split('…').next().unwrap();
    assert!(full.starts_with(kept));
    assert_eq!(
        message,
        format!("{kept}… [{} bytes cut]", full.len() - kept.len()),
        "cut once, counting every byte the caller did not get"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_pipelines_joined_messages_stay_bounded_however_long_its_members_are() {
    let _serial = SERIAL.lock().await;
    let reason = "z".repeat(9 * MIB);
    let mut members = Vec::new();
    for name in ["first", "second"] {
        let mut behaviour = Behaviour::new(name);
        behaviour.validate.result = ValidationResult::Failed as i32;
        behaviour.validate.message = reason.clone();
        members.push(plugin(behaviour).await);
    }
    let gw = gateway(&format!(
        "plugins:\n{}{}pipelines:\n  - name: both\n    plugins: [first, second]\n",
        insecure_plugin("first", &members[0], ""),
        insecure_plugin("second", &members[1], "")
    ))
    .await;
    let answer = gw
        .client()
        .await
        .validate_rollout_completion(to("both", validate_request("c1")))
        .await
        .expect("a verdict")
        .into_inner();
    assert_eq!(answer.result, ValidationResult::Failed as i32);
    assert!(answer.message.len() < 80 * 1024, "{}", answer.message.len());
    for name in ["first: ", "second: "] {
        assert!(answer.message.contains(name), "each member keeps its part");
    }
    assert_eq!(answer.message.matches(" bytes cut]").count(), 2);
    gw.stop().await;
}

/// A raw HTTP/2 plugin whose every answer is `inflated` bytes of zeros,
/// gzip-compressed (about a thousandth of that on the wire).
async fn gzip_bomb(inflated: usize) -> SocketAddr {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![0u8; inflated]).unwrap();
    let compressed = Bytes::from(gz.finish().unwrap());
    h2_peer::serve(move |_, respond| answer_compressed(compressed.clone(), respond)).await
}

/// Answers with `compressed` as one gzip-flagged message, then
/// `grpc-status: 0`.
async fn answer_compressed(compressed: Bytes, respond: h2::server::SendResponse<Bytes>) {
    h2_peer::answer_ok(respond, &[("grpc-encoding", "gzip")], true, &compressed);
}

/// The 99th percentile of `n` BeginRollout calls to `target`, one at a time.
async fn p99(gw: &Gateway, target: &str, n: usize) -> Duration {
    let mut c = gw.client().await;
    let mut took = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        c.begin_rollout(to(target, rollout("c1"))).await.unwrap();
        took.push(started.elapsed());
    }
    took.sort();
    took[n * 99 / 100]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn inflating_a_compressed_answer_does_not_stall_another_plugins_callers() {
    let _serial = SERIAL.lock().await;
    let quiet = plugin(Behaviour::new("quiet")).await;
    let bomb = gzip_bomb(15 * MIB).await;
    let gw = gateway(&format!(
        "plugins:\n{}  - name: bomb\n    endpoint: {bomb}\n    insecure: true\n    failurePolicy: Ignore\n    circuitBreaker:\n      consecutiveFailures: 1000000\n",
        insecure_plugin("quiet", &quiet, "")
    ))
    .await;
    let alone = p99(&gw, "quiet", 200).await;
    // Four callers keep four 15 MiB inflations going meanwhile.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut bombers = Vec::new();
    for _ in 0..4 {
        let mut c = gw.client().await;
        let stop = stop.clone();
        bombers.push(tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = c
                    .validate_rollout_completion(to("bomb", validate_request("c1")))
                    .await;
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let loaded = p99(&gw, "quiet", 200).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut inflated = 0;
    for b in bombers {
        inflated += b.await.unwrap();
    }
    eprintln!(
        "quiet plugin p99: {alone:?} alone, {loaded:?} beside {inflated} inflations of 15 MiB"
    );
    assert!(inflated >= 4, "the inflations ran ({inflated})");
    // On the runtime's one worker thread, each 15 MiB inflation held every
    // other call for its whole duration (tens of ms); off it, a call waits
    // for the operating system's scheduler at most.
    assert!(
        loaded < alone * 2 + Duration::from_millis(15),
        "p99 {loaded:?} beside the inflations, {alone:?} alone"
    );
    gw.stop().await;
}

#[tokio::test]
async fn an_answer_over_the_limit_because_of_the_callers_own_work_is_not_the_plugins_fault() {
    let _serial = SERIAL.lock().await;
    // A plugin that adds 4 KiB to every work, as a mutator adding an
    // annotation or a sidecar does.
    let mut behaviour = Behaviour::new("annotator");
    behaviour.mutate = Mutation::With(std::sync::Arc::new(|work| {
        annotate(work.clone(), "annotator", "note", &"n".repeat(4096))
    }));
    let p = plugin(behaviour).await;
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin(
            "annotator",
            &p,
            "    retry:\n      maxAttempts: 1\n    circuitBreaker:\n      consecutiveFailures: 1\n      openFor: 1m\n"
        )
    ))
    .await;
    let mut c = gw.client().await;
    // A work 1 KiB under the 16 MiB limit: the plugin's answer is over it.
    let near = work(16 * MIB - 1024);
    for _ in 0..3 {
        let e = c
            .mutate_manifest_work(to("annotator", mutate_request("c1", near.clone())))
            .await
            .expect_err("the answer is over the limit");
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(
            e.message().contains("send a smaller one"),
            "{}",
            e.message()
        );
    }
    // The plugin's circuit stayed closed: another caller is served.
    c.mutate_manifest_work(to("annotator", mutate_request("c1", work(2048))))
        .await
        .expect("the plugin was not blamed for the caller's work");
    assert_eq!(gw.debug().await["plugins"][0]["circuit"], "closed");
    gw.stop().await;
}

/// A raw HTTP/2 plugin that tries to push a stream with its answer, and
/// reports whether its HTTP/2 stack let it (the peer's SETTINGS_ENABLE_PUSH).
async fn pushing_plugin(pushed: tokio::sync::mpsc::Sender<bool>) -> SocketAddr {
    h2_peer::serve(move |_, respond| push(pushed.clone(), respond)).await
}

/// Tries to push a stream, reports whether it could, then answers OK with
/// no message.
async fn push(
    pushed: tokio::sync::mpsc::Sender<bool>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let promise = http::Request::builder()
        .uri("http://plugin/pushed")
        .body(())
        .unwrap();
    let _ = pushed.send(respond.push_request(promise).is_ok()).await;
    let response = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .header("grpc-status", "0")
        .body(())
        .unwrap();
    let _ = respond.send_response(response, true);
}

#[tokio::test]
async fn plugins_may_not_push() {
    let _serial = SERIAL.lock().await;
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let addr = pushing_plugin(tx).await;
    let gw = gateway(&format!(
        "plugins:\n  - name: pusher\n    endpoint: {addr}\n    insecure: true\n    failurePolicy: Ignore\n"
    ))
    .await;
    let _ = gw
        .client()
        .await
        .begin_rollout(to("pusher", rollout("c1")))
        .await;
    let pushed = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .expect("the plugin was called")
        .expect("an answer");
    assert!(!pushed, "the gateway's connection allowed server push");
    gw.stop().await;
}

#[tokio::test]
async fn a_plugins_header_block_is_bounded_as_a_callers_is() {
    let _serial = SERIAL.lock().await;
    // A 1 MiB status message: a header block far over 64 KiB.
    let mut behaviour = Behaviour::new("loud");
    behaviour.fail = Some((Code::FailedPrecondition, "w".repeat(MIB)));
    let p = plugin(behaviour).await;
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin("loud", &p, "    retry:\n      maxAttempts: 1\n")
    ))
    .await;
    let e = gw
        .client()
        .await
        .begin_rollout(to("loud", rollout("c1")))
        .await
        .expect_err("the plugin's answer is refused");
    assert!(
        e.message().starts_with("plugin \"loud\": "),
        "{}",
        e.message()
    );
    assert!(e.message().len() <= 4096, "{}", e.message().len());
    gw.stop().await;
}
