//! The admin port under slow and hostile peers: peers that hold admin
//! connections with requests they never finish cannot keep the liveness
//! probe out; a huge `Accept` is refused before any work; `/debug/plugins`
//! pages. A real gateway in-process, peers on raw TCP.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// GET `path` from 127.0.0.1 within `within` (the kubelet's probe
/// timeout is 1 s by default): the status, or `None`.
async fn probe(addr: SocketAddr, path: &str, within: Duration) -> Option<u16> {
    let get = async {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        tcp.write_all(request.as_bytes()).await.ok()?;
        let mut out = String::new();
        tcp.read_to_string(&mut out).await.ok()?;
        out.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(within, get).await.ok().flatten()
}

/// 4 addresses × 32 connections with half-sent requests (twice the
/// admin port's 64 places) leave the liveness probe every answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_peers_cannot_keep_the_liveness_probe_out() {
    let gw = gateway("plugins: []\n").await;
    let stop = Arc::new(AtomicBool::new(false));
    // Half a request's headers, then nothing; reopened 100 ms after the
    // gateway closes it.
    holding_peers(
        gw.admin,
        (4, 32),
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
        Duration::from_millis(100),
        stop.clone(),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut answered = 0;
    for _ in 0..50 {
        if probe(gw.admin, "/healthz", Duration::from_secs(1)).await == Some(200) {
            answered += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert_eq!(answered, 50, "/healthz answers, of 50");
    gw.stop().await;
}

/// A 440 KB `Accept` on `/metrics` is refused (`431`) before it is read
/// whole or any metric is made; the port goes on answering.
#[tokio::test]
async fn a_huge_accept_header_is_refused() {
    let gw = gateway("plugins: []\n").await;
    let mut tcp = tokio::net::TcpStream::connect(gw.admin).await.unwrap();
    let accept = "application/openmetrics-text;version=1.0.0,".repeat(10_000);
    let request = format!("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n");
    // The gateway may close before taking all of it.
    let _ = tcp.write_all(request.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
    assert_eq!(http_get(gw.admin, "/healthz").await.0, 200);
    gw.stop().await;
}

/// `/debug/plugins` lists at most `limit` plugins from `offset`, with the
/// total and the next page's offset.
#[tokio::test]
async fn debug_plugins_pages() {
    let p = plugin(Behaviour::new("p")).await;
    let config = format!(
        "plugins:\n{}{}{}",
        insecure_plugin("a", &p, ""),
        insecure_plugin("b", &p, ""),
        insecure_plugin("c", &p, "")
    );
    let gw = gateway(&config).await;
    let page = |query: &'static str| {
        let admin = gw.admin;
        async move {
            let (status, body) = http_get(admin, &format!("/debug/plugins{query}")).await;
            assert_eq!(status, 200, "{body}");
            serde_json::from_str::<serde_json::Value>(&body).unwrap()
        }
    };
    let names = |doc: &serde_json::Value| -> Vec<String> {
        doc["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };
    let all = page("").await;
    assert_eq!(names(&all), ["a", "b", "c"]);
    assert_eq!(all["pluginsTotal"], 3);
    assert!(all["nextOffset"].is_null());
    let first = page("?limit=2").await;
    assert_eq!(names(&first), ["a", "b"]);
    assert_eq!(first["nextOffset"], 2);
    let rest = page("?offset=2&limit=2").await;
    assert_eq!(names(&rest), ["c"]);
    assert!(rest["nextOffset"].is_null());
    assert_eq!(http_get(gw.admin, "/debug/plugins?limit=x").await.0, 400);
    gw.stop().await;
}
