//! A plugin that takes no work on a stream or a connection never makes the
//! gateway dial once per call: a stream reset with `REFUSED_STREAM` (a
//! plugin shedding load) is sent again on the same connection within the
//! retry budget, and a connection that went away (GOAWAY, last stream id 0)
//! before answering anything is replaced only after a wait that doubles.
//! Counted by the plugins, which are written on the wire.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use common::*;
use prost::Message as _;
use rollout_proto::v1alpha1::InitializeResponse;
use rollout_test_support::h2_peer;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tonic::Code;

/// What a plugin counted: connections accepted, streams refused.
#[derive(Default)]
struct Counts {
    connections: AtomicUsize,
    streams: AtomicUsize,
    refused: AtomicUsize,
}

/// A plugin on raw HTTP/2 that resets with REFUSED_STREAM every stream
/// whose number (counted over all connections, from 1) is a multiple of
/// `every`, and answers the others: Initialize declares every hook, the
/// other hooks answer an empty message.
async fn shedding_plugin(every: usize) -> (SocketAddr, Arc<Counts>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts = Arc::new(Counts::default());
    let seen = counts.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            seen.connections.fetch_add(1, Ordering::SeqCst);
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(socket).await else {
                    return;
                };
                while let Some(Ok((request, respond))) = conn.accept().await {
                    let n = seen.streams.fetch_add(1, Ordering::SeqCst) + 1;
                    if n % every == 0 {
                        seen.refused.fetch_add(1, Ordering::SeqCst);
                        let mut respond = respond;
                        respond.send_reset(h2::Reason::REFUSED_STREAM);
                        continue;
                    }
                    tokio::spawn(answer(request, respond));
                }
            });
        }
    });
    (addr, counts)
}

async fn answer(request: http::Request<h2::RecvStream>, respond: h2::server::SendResponse<Bytes>) {
    let initialize = request.uri().path().ends_with("/Initialize");
    h2_peer::read_body(&mut request.into_body()).await;
    let message = if initialize {
        InitializeResponse::default().encode_to_vec()
    } else {
        Vec::new()
    };
    h2_peer::answer_ok(respond, &[], false, &message);
}

/// A server that ends every connection at once with GOAWAY, last stream
/// id 0, NO_ERROR (written as bytes: h2's server only says GOAWAY after
/// the streams it has taken), and reads what the client sends until it
/// closes.
async fn going_away_plugin() -> (SocketAddr, Arc<Counts>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counts = Arc::new(Counts::default());
    let seen = counts.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            seen.connections.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                // SETTINGS (empty), then GOAWAY: 8 bytes, last stream 0,
                // error NO_ERROR.
                let mut frames = vec![0, 0, 0, 4, 0, 0, 0, 0, 0];
                frames.extend_from_slice(&[0, 0, 8, 7, 0, 0, 0, 0, 0]);
                frames.extend_from_slice(&[0; 8]);
                if socket.write_all(&frames).await.is_err() {
                    return;
                }
                let mut sink = [0u8; 4096];
                while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    (addr, counts)
}

/// `calls` BeginRollout calls to `target`, 10 at a time; the codes of
/// those that failed.
async fn calls(gw: &Gateway, target: &str, calls: usize) -> Vec<Code> {
    let failed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..10 {
        let mut c = gw.client().await;
        let (failed, next, target) = (failed.clone(), next.clone(), target.to_string());
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::SeqCst) < calls {
                if let Err(e) = c.begin_rollout(to(&target, rollout("c1"))).await {
                    failed.lock().unwrap().push(e.code());
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    Arc::try_unwrap(failed).unwrap().into_inner().unwrap()
}

#[tokio::test]
async fn refused_streams_are_sent_again_on_the_same_connection() {
    let (addr, counts) = shedding_plugin(3).await;
    let gw = gateway(&format!(
        "plugins:\n  - name: shedding\n    endpoint: {addr}\n    insecure: true\n    retryBudget:\n      ratio: 1.0\n      minPerSecond: 100\n"
    ))
    .await;
    let failed = calls(&gw, "shedding", 300).await;
    let connections = counts.connections.load(Ordering::SeqCst);
    let refused = counts.refused.load(Ordering::SeqCst);
    eprintln!("300 calls, {refused} streams refused: {connections} connections");
    assert!(
        failed.is_empty(),
        "{} calls failed: {failed:?}",
        failed.len()
    );
    assert!(refused >= 100, "only {refused} streams refused");
    assert_eq!(
        connections, 1,
        "{refused} refused streams made {connections} connections"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_plugin_refusing_every_stream_is_not_sent_more_than_its_budget() {
    let (addr, counts) = shedding_plugin(1).await;
    let gw = gateway(&format!(
        "plugins:\n  - name: shedding\n    endpoint: {addr}\n    insecure: true\n"
    ))
    .await;
    let failed = calls(&gw, "shedding", 300).await;
    let connections = counts.connections.load(Ordering::SeqCst);
    let streams = counts.streams.load(Ordering::SeqCst);
    eprintln!(
        "300 calls to a plugin refusing every stream: {streams} streams, {connections} connections"
    );
    assert_eq!(failed.len(), 300);
    assert!(failed.iter().all(|c| *c == Code::Unavailable), "{failed:?}");
    assert_eq!(
        connections, 1,
        "{streams} refused streams made {connections} connections"
    );
    // The gateway's Initialize, and per call at most one stream and the
    // retries its budget allowed (10 a second, 20 % of the calls), until
    // the circuit opened.
    assert!(streams < 300, "{streams} streams for 300 calls");
    gw.stop().await;
}

#[tokio::test]
async fn a_goaway_before_any_answer_does_not_make_a_connection_per_call() {
    let (addr, counts) = going_away_plugin().await;
    let gw = gateway(&format!(
        "plugins:\n  - name: leaving\n    endpoint: {addr}\n    insecure: true\n"
    ))
    .await;
    let failed = calls(&gw, "leaving", 300).await;
    let connections = counts.connections.load(Ordering::SeqCst);
    eprintln!(
        "300 calls to a plugin saying GOAWAY(0) on every connection: {connections} connections"
    );
    assert_eq!(failed.len(), 300);
    assert!(failed.iter().all(|c| *c == Code::Unavailable), "{failed:?}");
    assert!(
        connections <= 10,
        "300 calls made {connections} connections"
    );
    gw.stop().await;
}
