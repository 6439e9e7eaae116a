//! The `rollout-gateway` binary as a process: the listening line, exit 64 on
//! a bad registry, and SIGTERM draining calls in flight.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use rollout_gateway::hooks::HookKind;
use rollout_test_support::otlp;

const BIN: &str = env!("CARGO_BIN_EXE_rollout-gateway");

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Starts the binary on port 0 and reads its listening line.
fn spawn(config: &std::path::Path) -> (Proc, SocketAddr, SocketAddr) {
    spawn_with(config, &[])
}

/// The same, with more flags.
fn spawn_with(config: &std::path::Path, flags: &[&str]) -> (Proc, SocketAddr, SocketAddr) {
    let mut child = Command::new(BIN)
        .args([
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(flags)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let (grpc, admin) = listening(&mut child);
    (Proc(child), grpc, admin)
}

#[tokio::test]
async fn prints_the_bound_addresses_and_drains_on_sigterm() {
    let slow = plugin(Behaviour::new("slow")).await;
    slow.set(|b| b.delay = Duration::from_millis(800));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        format!("plugins:\n{}", insecure_plugin("slow", &slow, "")),
    )
    .unwrap();
    let (mut proc_, grpc, admin) = spawn(&path);
    assert_ne!(grpc.port(), 0);
    assert_eq!(http_get(admin, "/healthz").await.0, 200);
    assert_eq!(http_get(admin, "/readyz").await.0, 200);

    let mut c = client(grpc).await;
    let call = tokio::spawn(async move { c.begin_rollout(to("slow", rollout("c1"))).await });
    // SIGTERM once the call is in flight: the plugin holds it for 800 ms.
    slow.wait_calls(HookKind::BeginRollout, 1).await;
    let t = Instant::now();
    sigterm(&proc_.0);
    // The call in flight finishes; then the process exits 0.
    call.await
        .unwrap()
        .expect("the call in flight completes during the drain");
    let status = tokio::task::spawn_blocking(move || proc_.0.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // New connections are refused once it is gone.
    assert!(tokio::net::TcpStream::connect(grpc).await.is_err());
}

#[tokio::test]
async fn a_silent_connection_does_not_hold_the_drain() {
    let p = plugin(Behaviour::new("p")).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("p", &p, ""))).unwrap();
    let (mut proc_, grpc, _) = spawn(&path);
    let _silent = tokio::net::TcpStream::connect(grpc).await.unwrap();
    let mut c = client(grpc).await;
    c.begin_rollout(to("p", rollout("c1"))).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    sigterm(&proc_.0);
    let status = tokio::task::spawn_blocking(move || proc_.0.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success());
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "drain took {:?}",
        t.elapsed()
    );
}

#[test]
fn a_bad_start_up_config_exits_64_listing_every_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        "plugins:\n  - name: a\n    endpoint: nohost\n    insecure: true\n  - name: b\n    endpoint: h:1\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args([
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("plugins[0] (a).endpoint"), "{stderr}");
    assert!(stderr.contains("plugins[1] (b).caCertificate"), "{stderr}");
    assert!(out.stdout.is_empty(), "no listening line on failure");
}

#[test]
fn a_taken_port_fails_with_a_message_naming_the_flag() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "plugins: []\n").unwrap();
    let out = Command::new(BIN)
        .args([
            "--config",
            path.to_str().unwrap(),
            "--listen",
            &addr,
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--listen") && stderr.contains(&addr),
        "{stderr}"
    );
}

/// The runtime's worker threads, by name, of a running process: the count
/// once it has held for 200 ms (workers start concurrently with the listener).
fn worker_threads(pid: u32) -> usize {
    let count = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
            .filter(|name| name.trim() == "gateway-worker")
            .count()
    };
    let mut last = count();
    let mut stable_since = Instant::now();
    while stable_since.elapsed() < Duration::from_millis(200) {
        std::thread::sleep(Duration::from_millis(20));
        let now = count();
        if now != last {
            last = now;
            stable_since = Instant::now();
        }
    }
    last
}

/// The admin endpoints run on a thread of their own, not on the worker
/// that serves gRPC: a scrape takes none of the gRPC path's time.
#[tokio::test]
async fn the_admin_listener_has_a_thread_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "plugins: []\n").unwrap();
    let (gw, _, _) = spawn(&path);
    // A thread takes its name once it runs (until then it has its parent's).
    let names = || -> Vec<String> {
        std::fs::read_dir(format!("/proc/{}/task", gw.0.id()))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
            .map(|name| name.trim().to_string())
            .collect()
    };
    let admin = || names().iter().filter(|n| *n == "gateway-admin").count();
    let named = Instant::now();
    while admin() == 0 && named.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(admin(), 1, "{:?}", names());
    assert_eq!(worker_threads(gw.0.id()), 1);
}

#[tokio::test]
async fn runs_the_configured_number_of_worker_threads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "plugins: []\n").unwrap();
    let (one, _, _) = spawn(&path);
    assert_eq!(
        worker_threads(one.0.id()),
        1,
        "one worker thread by default"
    );
    drop(one);
    let mut child = Command::new(BIN)
        .args([
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(["--worker-threads", "3"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    listening(&mut child);
    let three = Proc(child);
    assert_eq!(worker_threads(three.0.id()), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_and_exported_spans_carry_the_callers_trace() {
    let (otlp, otlp_addr) = otlp::receiver().await;
    let ok = plugin(Behaviour::new("ok")).await;
    let soft = plugin(Behaviour::new("soft")).await;
    soft.set(|b| b.fail = Some((tonic::Code::Internal, "smoke test crashed".into())));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "plugins:\n{}{}pipelines:\n  - name: p\n    plugins: [ok, soft]\n",
            insecure_plugin("ok", &ok, ""),
            insecure_plugin("soft", &soft, "    failurePolicy: Ignore\n"),
        ),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["--config", path.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--log-format", "json"])
        .env("RUST_LOG", "info")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp_addr}"))
        .env("OTEL_SERVICE_NAME", "gw-process")
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (grpc, _) = listening(&mut child);
    let stderr = child.stderr.take().unwrap();
    let proc = Proc(child);

    let trace = "0af7651916cd43dd8448eb211c80319c";
    let mut request = to("p", rollout("c1"));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace}-b7ad6b7169203331-01").parse().unwrap(),
    );
    client(grpc).await.begin_rollout(request).await.unwrap();
    sigterm(&proc.0);
    let lines: Vec<serde_json::Value> = BufReader::new(stderr)
        .lines()
        .map(|l| {
            let l = l.unwrap();
            serde_json::from_str(&l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))
        })
        .collect();
    let failed = lines
        .iter()
        .find(|l| l["plugin"] == "soft")
        .unwrap_or_else(|| panic!("no line about the failed plugin: {lines:#?}"));
    assert_eq!(failed["level"], "WARN");
    assert_eq!(failed["trace_id"], trace);
    assert_eq!(failed["span_id"].as_str().map(str::len), Some(16));

    // The process exported its spans (the drain flushes them) under the
    // service name from the environment.
    let spans = otlp.spans_with_service();
    assert!(!spans.is_empty(), "no spans exported");
    assert!(spans.iter().all(|(service, _)| service == "gw-process"));
    assert!(
        spans.iter().all(|(_, s)| otlp::hex(&s.trace_id) == trace),
        "every span is in the caller's trace"
    );
    let server = spans
        .iter()
        .find(|(_, s)| s.name.ends_with("/BeginRollout"))
        .expect("server span");
    assert_eq!(
        otlp::hex(&server.1.span_id),
        failed["span_id"].as_str().unwrap()
    );
    assert_eq!(
        spans.len(),
        3,
        "one server span and a client span per member"
    );
}

mod refused {
    use bytes::{BufMut, Bytes, BytesMut};
    use h2::client::SendRequest;

    use super::*;

    const MIB: usize = 1024 * 1024;
    const MUTATE: &str = "/ocm.rolloutplugin.v1alpha1.RolloutPluginService/MutateManifestWork";

    /// A gRPC request head for the plugin service, with `headers` added.
    fn request(headers: &[(&str, &str)]) -> http::Request<()> {
        let mut b = http::Request::builder()
            .method("POST")
            .uri(format!("http://gateway{MUTATE}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("ocm-rollout-plugin", "p");
        for (name, value) in headers {
            b = b.header(*name, *value);
        }
        b.body(()).unwrap()
    }

    /// A gRPC message prefix declaring `len` bytes, then `sent` bytes of it.
    fn partial_message(len: usize, sent: usize) -> Bytes {
        let mut b = BytesMut::with_capacity(5 + sent);
        b.put_u8(0);
        b.put_u32(len as u32);
        b.put_bytes(b'x', sent);
        b.freeze()
    }

    /// Sends a request head and `data` (the stream left open), and returns
    /// the answer's grpc-status, waiting at most 5 s for it.
    async fn refused(
        send: &SendRequest<Bytes>,
        headers: &[(&str, &str)],
        data: Bytes,
    ) -> (Option<String>, h2::SendStream<Bytes>) {
        let mut send = send.clone().ready().await.unwrap();
        let (answer, mut body) = send.send_request(request(headers), false).unwrap();
        body.send_data(data, false).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), answer)
            .await
            .expect("an answer within 5 s")
            .unwrap();
        let status = answer
            .headers()
            .get("grpc-status")
            .map(|v| v.to_str().unwrap().to_string());
        (status, body)
    }

    /// `rollout_gateway_calls_refused_total` by reason, from `/metrics`.
    async fn counts(admin: SocketAddr) -> std::collections::BTreeMap<String, u64> {
        let (code, text) = http_get(admin, "/metrics").await;
        assert_eq!(code, 200);
        text.lines()
            .filter_map(|l| l.strip_prefix("rollout_gateway_calls_refused_total{reason=\""))
            .filter_map(|l| l.split_once("\"} "))
            .map(|(reason, n)| (reason.to_string(), n.trim().parse().unwrap()))
            .collect()
    }

    /// Calls refused while their request arrives (a half-sent request past
    /// the receive timeout or the caller's deadline, the pending-bytes pool
    /// refusing, a message over the limit, a malformed `grpc-timeout`) never
    /// reach the layers that trace and count calls; `/metrics` counts each,
    /// by reason.
    #[tokio::test]
    async fn calls_refused_while_received_are_counted_by_reason() {
        let p = plugin(Behaviour::new("p")).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("p", &p, ""))).unwrap();
        let flags = [
            "--request-receive-timeout",
            "1s",
            "--max-message-bytes",
            "1048576",
            "--max-pending-request-bytes-per-connection",
            "2097152",
        ];
        let (_gw, grpc, admin) = spawn_with(&path, &flags);
        let before = counts(admin).await;

        let tcp = tokio::net::TcpStream::connect(grpc).await.unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.unwrap();
        let conn = tokio::spawn(conn);
        let half = partial_message(1024, 100);
        let (status, _) = refused(&send, &[], half.clone()).await;
        assert_eq!(status.as_deref(), Some("4"), "receive timeout");
        let (status, _) = refused(&send, &[("grpc-timeout", "200m")], half.clone()).await;
        assert_eq!(status.as_deref(), Some("4"), "caller's deadline");
        let (status, _) = refused(&send, &[], partial_message(2 * MIB, 10)).await;
        assert_eq!(status.as_deref(), Some("8"), "over the message limit");
        let (status, _) = refused(&send, &[("grpc-timeout", "soon")], half).await;
        assert_eq!(status.as_deref(), Some("3"), "malformed grpc-timeout");
        // Two requests of nearly 1 MiB held open fill the connection's
        // 2 MiB pool: the third is refused.
        let nearly = MIB - 64;
        let mut open = Vec::new();
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let mut s = send.clone().ready().await.unwrap();
            let (answer, mut body) = s.send_request(request(&[]), false).unwrap();
            body.send_data(partial_message(nearly, nearly - 1), false)
                .unwrap();
            open.push((answer, body));
        }
        for (answer, _body) in open {
            if let Ok(Ok(a)) = tokio::time::timeout(Duration::from_millis(500), answer).await {
                statuses.push(a.headers().get("grpc-status").cloned());
            }
        }
        assert!(
            statuses
                .iter()
                .any(|s| s.as_ref().is_some_and(|v| v == "8")),
            "the pool refused none: {statuses:?}"
        );

        let after = counts(admin).await;
        let count = |m: &std::collections::BTreeMap<String, u64>, reason: &str| {
            m.get(reason).copied().unwrap_or(0)
        };
        let rose = |reason: &str| count(&after, reason) > count(&before, reason);
        for reason in [
            "receive_timeout",
            "deadline",
            "pending_bytes",
            "too_large",
            "header",
        ] {
            assert!(rose(reason), "{reason}: {before:?} then {after:?}");
        }
        conn.abort();
    }
}
