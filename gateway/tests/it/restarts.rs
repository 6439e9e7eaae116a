//! A plugin's graceful GOAWAY (grpc servers send one at `max_connection_age`
//! and on every graceful stop, so on every rolling update) and a plugin
//! restarted on the same port never fail a call: new calls go to a new
//! connection, a stream the plugin never processed is sent again there, and
//! a plugin coming back is waited for within the call's deadline. Counted
//! under load at 1 and 32 calls in flight.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use prost::Message;
use rollout_proto::v1alpha1::InitializeResponse;
use rollout_test_support::h2_peer;

/// A plugin on raw HTTP/2 that ends each connection gracefully, as grpc
/// servers do at `max_connection_age`: after `streams_per_connection`
/// streams it sends GOAWAY (h2's graceful shutdown: a GOAWAY with the
/// largest stream id, a PING, then one with the last stream it took) and
/// finishes the streams it took. Each answer takes `delay`, so calls are in
/// flight when the GOAWAY goes out. Counts the connections it accepted.
async fn restless_plugin(
    streams_per_connection: usize,
    delay: Duration,
) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counter = connections.clone();
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(socket).await else {
                    return;
                };
                let mut taken = 0;
                while let Some(Ok((request, respond))) = conn.accept().await {
                    taken += 1;
                    tokio::spawn(answer(request, respond, delay));
                    if taken == streams_per_connection {
                        conn.graceful_shutdown();
                    }
                }
            });
        }
    });
    (addr, connections)
}

/// A gRPC answer: Initialize declares every hook; any other hook answers
/// an empty message (BeginRollout's `Empty`).
async fn answer(
    request: http::Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
    delay: Duration,
) {
    let initialize = request.uri().path().ends_with("/Initialize");
    h2_peer::read_body(&mut request.into_body()).await;
    tokio::time::sleep(delay).await;
    let message = if initialize {
        InitializeResponse {
            name: "restless".into(),
            ..Default::default()
        }
        .encode_to_vec()
    } else {
        Vec::new()
    };
    h2_peer::answer_ok(respond, &[], false, &message);
}

/// No retries and a breaker that opens at the first failure: a call that
/// succeeds did so without the retry policy's help.
const STRICT: &str = "    timeout: 10s\n    retry:\n      maxAttempts: 1\n    circuitBreaker:\n      consecutiveFailures: 1\n      openFor: 1m\n";

/// `in_flight` callers calling BeginRollout on `target` for `run`; the
/// calls made and those that failed (with the first failure).
async fn load(
    gw: &Gateway,
    target: &str,
    in_flight: usize,
    run: Duration,
) -> (usize, usize, Option<String>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let first = Arc::new(std::sync::Mutex::new(None));
    let until = Instant::now() + run;
    let mut workers = Vec::new();
    for _ in 0..in_flight {
        let mut c = gw.client().await;
        let (calls, failed, first) = (calls.clone(), failed.clone(), first.clone());
        let target = target.to_string();
        workers.push(tokio::spawn(async move {
            while Instant::now() < until {
                calls.fetch_add(1, Ordering::Relaxed);
                let mut request = to(&target, rollout("c1"));
                request.set_timeout(Duration::from_secs(10));
                if let Err(e) = c.begin_rollout(request).await {
                    failed.fetch_add(1, Ordering::Relaxed);
                    first.lock().unwrap().get_or_insert(format!("{e:?}"));
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let first = first.lock().unwrap().take();
    (
        calls.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        first,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_graceful_goaways_fail_no_call_at_1_and_32_in_flight() {
    for in_flight in [1, 32] {
        let (addr, connections) = restless_plugin(20, Duration::from_millis(2)).await;
        let gw = gateway(&format!(
            "plugins:\n  - name: restless\n    endpoint: {addr}\n    insecure: true\n{STRICT}"
        ))
        .await;
        let (calls, failed, first) = load(&gw, "restless", in_flight, Duration::from_secs(2)).await;
        let goaways = connections.load(Ordering::SeqCst);
        assert!(goaways >= 5, "the plugin went away only {goaways} times");
        assert_eq!(
            failed, 0,
            "{failed} of {calls} calls failed at {in_flight} in flight over {goaways} connections: {first:?}"
        );
        gw.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_restarted_on_the_same_port_under_load_fails_no_call() {
    for in_flight in [1, 32] {
        let mut behaviour = Behaviour::new("rolling");
        behaviour.delay = Duration::from_millis(2);
        let p = plugin(behaviour.clone()).await;
        let addr = p.addr;
        let gw = gateway(&format!(
            "plugins:\n  - name: rolling\n    endpoint: {addr}\n    insecure: true\n{STRICT}"
        ))
        .await;
        let restarts = tokio::spawn(async move {
            let mut current = p;
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                // A graceful stop (GOAWAY, the calls in flight finish),
                // down for a moment, then up again on the same port.
                current.stop();
                tokio::time::sleep(Duration::from_millis(150)).await;
                current = plugin_on(addr, behaviour.clone()).await;
            }
            current
        });
        let (calls, failed, first) = load(&gw, "rolling", in_flight, Duration::from_secs(2)).await;
        let last = restarts.await.unwrap();
        assert_eq!(
            failed, 0,
            "{failed} of {calls} calls failed at {in_flight} in flight across 3 restarts: {first:?}"
        );
        assert!(last.calls(rollout_gateway::hooks::HookKind::BeginRollout) > 0);
        last.stop();
        gw.stop().await;
    }
}
