//! What a peer of the gRPC port can hold, written on the wire with the `h2`
//! crate: memory (requests to any service that stop arriving, answers it
//! does not read), connections from one address, and long-lived streams;
//! and what a file the gateway reads can do (block, or be huge). Memory is
//! measured on a real gateway process; the rest runs a real gateway
//! in-process.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use h2::client::SendRequest;
use rollout_gateway::app::Options;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;

/// An HTTP/2 connection from `from` (any loopback address) to `addr`, with
/// `window` as the initial stream window it grants the gateway; its driver
/// runs in a task whose end is the connection's end.
async fn connect_from(
    from: &str,
    addr: SocketAddr,
    window: u32,
) -> (SendRequest<Bytes>, JoinHandle<Result<(), h2::Error>>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let tcp: TcpStream = socket.connect(addr).await.unwrap();
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .initial_connection_window_size(64 * MIB as u32)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    (send, tokio::spawn(conn))
}

/// A gRPC request head for `path` on the gateway.
fn grpc_request(path: &str, target: Option<&str>) -> http::Request<()> {
    let mut b = http::Request::builder()
        .method("POST")
        .uri(format!("http://gateway{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(t) = target {
        b = b.header("ocm-rollout-plugin", t);
    }
    b.body(()).unwrap()
}

const HEALTH_CHECK: &str = "/grpc.health.v1.Health/Check";
const HEALTH_WATCH: &str = "/grpc.health.v1.Health/Watch";
const MUTATE: &str = "/ocm.rolloutplugin.v1alpha1.RolloutPluginService/MutateManifestWork";

/// A gRPC message prefix declaring `len` bytes, then `sent` bytes of it.
fn partial_message(len: usize, sent: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + sent);
    b.put_u8(0);
    b.put_u32(len as u32);
    b.put_bytes(b'x', sent);
    b.freeze()
}

/// A whole gRPC message.
fn framed(message: &impl prost::Message) -> Bytes {
    rollout_gateway::transport::grpc::flatten(rollout_gateway::transport::grpc::encode(message))
}

mod memory {
    use std::process::{Child, Command, Stdio};

    use super::*;

    struct Proc(Child);

    impl Drop for Proc {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// The gateway binary on port 0 over `config`, with `flags`;
    /// `ROLLOUT_GATEWAY_BIN` runs another build instead (to compare with
    /// one before a change).
    fn spawn(config: &std::path::Path, flags: &[&str]) -> (Proc, SocketAddr) {
        let bin = std::env::var("ROLLOUT_GATEWAY_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rollout-gateway").to_string());
        let mut child = Command::new(bin)
            .args(["--config", config.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(flags)
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let (grpc, _) = listening(&mut child);
        (Proc(child), grpc)
    }

    /// [`spawn`] over a registry of the one plaintext plugin `p`, named
    /// `p`; the directory holding the registry lives as long as the first
    /// value returned.
    fn spawn_over(p: &Plugin, flags: &[&str]) -> (tempfile::TempDir, Proc, SocketAddr) {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!("plugins:\n{}", insecure_plugin("p", p, "")),
        )
        .unwrap();
        let (gw, addr) = spawn(&config, flags);
        (dir, gw, addr)
    }

    /// The resident memory of process `pid`, in MiB.
    fn rss_mib(pid: u32) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kib: usize = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        kib / 1024
    }

    /// The peak resident memory of process `pid` so far (`VmHWM`), in MiB.
    fn peak_mib(pid: u32) -> usize {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kib: usize = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        kib / 1024
    }

    /// The gateway's pool with the default limits, and what the process
    /// may hold over it: the process itself at rest (about 22 MiB, debug
    /// build), what HTTP/2 buffers before the gateway reads it (a window of
    /// 8 MiB a connection, the plugin's and the callers') and the
    /// allocator's slack.
    const POOL_MIB: usize = 256;
    const OVERHEAD_MIB: usize = 64;

    /// 200 plugins naming one 3.8 MiB `caFile` (one CA certificate, 7,300
    /// times): the gateway reads, holds and parses it once, so its peak
    /// resident memory at start-up stays far below 200 copies (760 MiB of
    /// bytes alone).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ca_file_named_by_many_plugins_is_held_once() {
        let dir = tempfile::tempdir().unwrap();
        let ca = rollout_plugin_sdk::test_certs::TestCa::new("plugins").unwrap();
        let bundle = dir.path().join("ca.crt");
        std::fs::write(&bundle, ca.pem().repeat(7300)).unwrap();
        let size = std::fs::metadata(&bundle).unwrap().len();
        let mut text = String::from("plugins:\n");
        for i in 0..200 {
            text += &format!(
                "  - name: p{i}\n    endpoint: 127.0.0.1:{}\n    caCertificate:\n      caFile: {}\n",
                20000 + i,
                bundle.display()
            );
        }
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, text).unwrap();
        let started = Instant::now();
        let (gw, _) = spawn(&config, &[]);
        let up = started.elapsed();
        let peak = peak_mib(gw.0.id());
        eprintln!(
            "caFile of {} KiB named by 200 plugins: listening after {up:?}, peak RSS {peak} MiB",
            size / 1024
        );
        assert!(peak < 100, "peak resident memory {peak} MiB");
    }

    /// The attack that took a gateway from 10 to 1,022 MiB through the
    /// health service (4 connections × 64 health checks, each declaring a
    /// message just under the health service's own 4 MiB limit and sending
    /// all of it but a byte, then nothing), at half its size: 512 MiB
    /// against pools of 64 MiB. The health service sits under the same
    /// receive limits as the plugin service, so most streams are refused,
    /// the memory stays within the pools, and it goes back once the
    /// attacker leaves.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn half_sent_health_checks_are_bounded_and_given_back() {
        let p = plugin(Behaviour::new("p")).await;
        let pools = [
            "--max-pending-request-bytes",
            "67108864",
            "--max-pending-request-bytes-per-connection",
            "33554432",
        ];
        let (_registry, gw, addr) = spawn_over(&p, &pools);
        let pid = gw.0.id();
        let before = rss_mib(pid);
        let declared = 4 * MIB - 16;
        let mut open = Vec::new();
        for _ in 0..4 {
            let (send, conn) = connect_from("127.0.0.1", addr, 4 * MIB as u32).await;
            let mut streams = Vec::new();
            for _ in 0..32 {
                let mut send = send.clone().ready().await.unwrap();
                let (_answer, mut body) = send
                    .send_request(grpc_request(HEALTH_CHECK, None), false)
                    .unwrap();
                body.send_data(partial_message(declared, declared - 1), false)
                    .unwrap();
                streams.push(body);
            }
            open.push((send, conn, streams));
        }
        // 512 MiB sent at most; let it arrive.
        let mut peak = 0;
        for _ in 0..25 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            peak = peak.max(rss_mib(pid));
        }
        // The pools (64 MiB), and what HTTP/2 buffers before the gateway
        // reads it (an 8 MiB window per connection).
        assert!(
            peak < before + 64 + 32 + 32,
            "resident memory went from {before} to {peak} MiB: the half-sent health checks are not bounded"
        );
        for (_, conn, _) in open {
            conn.abort();
        }
        let started = Instant::now();
        loop {
            let now = rss_mib(pid);
            // What the allocator keeps for reuse stays (docs/security.md).
            if now <= before + 32 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "memory not given back: {now} MiB, {before} MiB before the attack (peak {peak})"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        eprintln!("health attack: RSS {before} MiB before, peak {peak} MiB");
    }

    /// `connections` connections whose stream window is 0 each make
    /// `calls` MutateManifestWork calls of 15.9 MiB one after another (each
    /// answer's headers before the next request), against the gateway
    /// process with its default limits, `flags` added; the answers are
    /// never read. Returns the gateway's peak resident memory (`VmHWM`,
    /// MiB) over 12 s, and the answers waiting and refused.
    async fn unread_answers_peak(
        connections: usize,
        calls: usize,
        flags: &[&str],
    ) -> (usize, usize, usize) {
        use rollout_proto::v1alpha1::MutateManifestWorkRequest;
        let p = plugin(Behaviour::new("p")).await;
        let (_registry, gw, addr) = spawn_over(&p, flags);
        let pid = gw.0.id();
        let request = framed(&MutateManifestWorkRequest {
            rollout: Some(rollout("c1")),
            manifest_work: work(15 * MIB + 900 * 1024),
        });
        let mut callers = Vec::new();
        for _ in 0..connections {
            let request = request.clone();
            callers.push(tokio::spawn(async move {
                let (send, conn) = connect_from("127.0.0.1", addr, 0).await;
                let (mut streams, mut refused) = (Vec::new(), 0);
                for _ in 0..calls {
                    let Ok(mut send) = send.clone().ready().await else {
                        break;
                    };
                    let (answer, mut body) = send
                        .send_request(grpc_request(MUTATE, Some("p")), false)
                        .unwrap();
                    body.send_data(request.clone(), true).unwrap();
                    match tokio::time::timeout(Duration::from_secs(10), answer).await {
                        Ok(Ok(answer)) if answer.headers().contains_key("grpc-status") => {
                            refused += 1
                        }
                        Ok(Ok(answer)) => streams.push(answer),
                        _ => refused += 1,
                    }
                }
                (streams, refused, conn)
            }));
        }
        let sampling = Instant::now();
        while sampling.elapsed() < Duration::from_secs(12) {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let peak = peak_mib(pid);
        let (mut waiting, mut refused) = (0, 0);
        for caller in callers {
            if caller.is_finished() {
                let (streams, r, _conn) = caller.await.unwrap();
                waiting += streams.len();
                refused += r;
            } else {
                caller.abort();
            }
        }
        (peak, waiting, refused)
    }

    /// Requests that have arrived whole and wait for a slow plugin count
    /// against the pools until their answers are taken, with the plugin's
    /// answers beside them: 4 connections × 15 MutateManifestWork calls of
    /// 15.9 MiB, one after another on each, to a plugin that answers after
    /// 8 s, with the default limits. The calls beyond the pools are refused
    /// `RESOURCE_EXHAUSTED` while they arrive, or when their answers come.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn requests_waiting_for_a_slow_plugin_stay_within_the_pools() {
        let p = plugin(Behaviour::new("p")).await;
        p.set(|b| b.delay = Duration::from_secs(8));
        let (_registry, gw, addr) = spawn_over(&p, &[]);
        let pid = gw.0.id();
        let work = work(15 * MIB + 900 * 1024);
        // One request after another on each connection, 300 ms apart: each
        // has arrived whole before the next starts, and all before the
        // plugin's first answer.
        let clients = futures::future::join_all((0..4).map(|_| client(addr))).await;
        let mut calls = Vec::new();
        for _ in 0..15 {
            for client in &clients {
                let mut client = client.clone();
                let work = work.clone();
                calls.push(tokio::spawn(async move {
                    client
                        .mutate_manifest_work(to("p", mutate_request("c1", work)))
                        .await
                        .map(drop)
                        .map_err(|e| e.code())
                }));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let mut answered = 0;
        let mut refused = 0;
        for call in calls {
            match call.await.unwrap() {
                Ok(()) => answered += 1,
                Err(tonic::Code::ResourceExhausted) => refused += 1,
                Err(code) => panic!("{code:?}"),
            }
        }
        let peak = peak_mib(pid);
        eprintln!(
            "slow plugin, 4 connections x 15 calls of 15.9 MiB: peak RSS {peak} MiB; {answered} answered, {refused} refused"
        );
        assert!(answered > 0);
        assert!(
            peak < POOL_MIB + OVERHEAD_MIB,
            "peak resident memory {peak} MiB"
        );
    }

    /// A socket whose reads stop (for good) once `paused` is set.
    struct Pausable {
        tcp: TcpStream,
        paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl tokio::io::AsyncRead for Pausable {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            if self.paused.load(std::sync::atomic::Ordering::Relaxed) {
                return std::task::Poll::Pending;
            }
            std::pin::Pin::new(&mut self.tcp).poll_read(cx, buf)
        }
    }

    impl tokio::io::AsyncWrite for Pausable {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            std::pin::Pin::new(&mut self.tcp).poll_write(cx, buf)
        }
        fn poll_flush(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.tcp).poll_flush(cx)
        }
        fn poll_shutdown(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::pin::Pin::new(&mut self.tcp).poll_shutdown(cx)
        }
    }

    /// Answers a caller grants every window for and then never reads from
    /// its socket: 2 connections × 20 MutateManifestWork calls of 15.9 MiB,
    /// one every 100 ms, to a plugin that answers after 3 s; the callers
    /// stop reading at 2.5 s. With the default limits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_to_a_socket_never_read_stay_within_the_pools() {
        use rollout_proto::v1alpha1::MutateManifestWorkRequest;
        let p = plugin(Behaviour::new("p")).await;
        p.set(|b| b.delay = Duration::from_secs(3));
        let (_registry, gw, addr) = spawn_over(&p, &[]);
        let pid = gw.0.id();
        let request = framed(&MutateManifestWorkRequest {
            rollout: Some(rollout("c1")),
            manifest_work: work(15 * MIB + 900 * 1024),
        });
        let paused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut held = Vec::new();
        for _ in 0..2 {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let io = Pausable {
                tcp,
                paused: paused.clone(),
            };
            let (send, conn) = h2::client::Builder::new()
                .initial_window_size(i32::MAX as u32)
                .initial_connection_window_size(i32::MAX as u32)
                .handshake::<_, Bytes>(io)
                .await
                .unwrap();
            held.push(tokio::spawn(conn));
            let request = request.clone();
            held.push(tokio::spawn(async move {
                let mut answers = Vec::new();
                for _ in 0..20 {
                    let Ok(mut send) = send.clone().ready().await else {
                        break;
                    };
                    let (answer, mut body) = send
                        .send_request(grpc_request(MUTATE, Some("p")), false)
                        .unwrap();
                    let _ = body.send_data(request.clone(), true);
                    answers.push((answer, body));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                // Kept: the streams stay open.
                std::future::pending::<()>().await;
                drop(answers);
                Ok(())
            }));
        }
        tokio::time::sleep(Duration::from_millis(2500)).await;
        paused.store(true, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs(12)).await;
        let peak = peak_mib(pid);
        for h in held {
            h.abort();
        }
        eprintln!("answers to sockets never read, 2 connections x 20: peak RSS {peak} MiB");
        assert!(
            peak < POOL_MIB + OVERHEAD_MIB,
            "peak resident memory {peak} MiB"
        );
    }

    /// Answers a caller never reads stay within the pools on any number of
    /// connections: 2 connections × 20 unread answers of 15.9 MiB, with
    /// the default limits (pools of 64 MiB a connection, 256 MiB in all).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unread_answers_on_several_connections_stay_within_the_pools() {
        let (peak, waiting, refused) = unread_answers_peak(2, 20, &[]).await;
        eprintln!(
            "unread answers, 2 connections x 20: peak RSS {peak} MiB; {waiting} waiting, {refused} refused"
        );
        assert!(
            peak < POOL_MIB + OVERHEAD_MIB,
            "peak resident memory {peak} MiB"
        );
    }

    /// The framed 15.9 MiB MutateManifestWork request these attacks send.
    fn large_mutate() -> Bytes {
        use rollout_proto::v1alpha1::MutateManifestWorkRequest;
        framed(&MutateManifestWorkRequest {
            rollout: Some(rollout("c1")),
            manifest_work: work(15 * MIB + 900 * 1024),
        })
    }

    /// Once an attack is over, `n` calls of 15.9 MiB at once, each on a
    /// connection of its own, are all answered within 15 s: the pools have
    /// room for their requests and answers again (and the plugin's circuit
    /// stayed closed).
    async fn later_calls_succeed(addr: SocketAddr, n: usize) {
        let work = work(15 * MIB + 900 * 1024);
        let started = Instant::now();
        loop {
            let calls = (0..n).map(|_| {
                let work = work.clone();
                async move {
                    let mut c = client(addr).await;
                    c.mutate_manifest_work(to("p", mutate_request("c1", work)))
                        .await
                        .map(drop)
                }
            });
            let failed: Vec<_> = futures::future::join_all(calls)
                .await
                .into_iter()
                .filter_map(Result::err)
                .collect();
            let Some(first) = failed.first() else {
                return;
            };
            assert_eq!(first.code(), tonic::Code::ResourceExhausted, "{first:?}");
            assert!(
                started.elapsed() < Duration::from_secs(15),
                "the attack's bytes are not given back: {} of {n} later calls refused ({})",
                failed.len(),
                first.message()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Requests that have arrived whole and wait for a slow plugin count
    /// against the pools together with the plugin's answers, which arrive
    /// while the requests are still held: 8 connections × 2
    /// MutateManifestWork calls of 15.9 MiB, all at once, to a plugin that
    /// answers after 3 s, with the default limits. The 16 requests take the
    /// gateway's pool; an answer with no room beside them is refused
    /// `RESOURCE_EXHAUSTED` (and its request given back), not counted
    /// against the plugin. Before answers were held, all 16 answers
    /// arrived beside their 16 requests: twice the pool.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_arriving_beside_waiting_requests_stay_within_the_pools() {
        let p = plugin(Behaviour::new("p")).await;
        p.set(|b| b.delay = Duration::from_secs(3));
        let (_registry, gw, addr) = spawn_over(&p, &[]);
        let pid = gw.0.id();
        let before = rss_mib(pid);
        let work = work(15 * MIB + 900 * 1024);
        let clients = futures::future::join_all((0..8).map(|_| client(addr))).await;
        let mut calls = Vec::new();
        for client in &clients {
            for _ in 0..2 {
                let mut client = client.clone();
                let work = work.clone();
                calls.push(tokio::spawn(async move {
                    client
                        .mutate_manifest_work(to("p", mutate_request("c1", work)))
                        .await
                        .map(drop)
                        .map_err(|e| e.code())
                }));
            }
        }
        let (mut answered, mut refused) = (0, 0);
        for call in calls {
            match call.await.unwrap() {
                Ok(()) => answered += 1,
                Err(tonic::Code::ResourceExhausted) => refused += 1,
                Err(code) => panic!("{code:?}"),
            }
        }
        let peak = peak_mib(pid);
        eprintln!(
            "slow plugin, 8 connections x 2 calls of 15.9 MiB at once: RSS {before} MiB before, peak {peak} MiB; {answered} answered, {refused} refused"
        );
        assert!(answered > 0, "{refused} refused");
        assert!(
            peak < POOL_MIB + OVERHEAD_MIB,
            "peak resident memory {peak} MiB"
        );
        later_calls_succeed(addr, 7).await;
    }

    /// Answers callers never read, on many connections, stay within the
    /// pools, with the plugin's answers that become them: 8 connections
    /// whose stream window is 0 each make 2 calls of 15.9 MiB at once, to a
    /// plugin that answers after 2 s, with the default limits. Once the
    /// callers leave, everything is given back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unread_answers_on_many_connections_stay_within_the_pools() {
        let p = plugin(Behaviour::new("p")).await;
        p.set(|b| b.delay = Duration::from_secs(2));
        let (_registry, gw, addr) = spawn_over(&p, &[]);
        let pid = gw.0.id();
        let request = large_mutate();
        let mut callers = Vec::new();
        for _ in 0..8 {
            let (send, conn) = connect_from("127.0.0.1", addr, 0).await;
            let mut answers = Vec::new();
            for _ in 0..2 {
                let mut send = send.clone().ready().await.unwrap();
                let (answer, mut body) = send
                    .send_request(grpc_request(MUTATE, Some("p")), false)
                    .unwrap();
                body.send_data(request.clone(), true).unwrap();
                answers.push(tokio::spawn(answer));
            }
            callers.push((send, conn, answers));
        }
        let (mut waiting, mut refused) = (0, 0);
        let mut kept = Vec::new();
        for (_, _, answers) in &mut callers {
            for answer in answers.drain(..) {
                match tokio::time::timeout(Duration::from_secs(10), answer).await {
                    Ok(Ok(Ok(answer))) if !answer.headers().contains_key("grpc-status") => {
                        waiting += 1;
                        kept.push(answer);
                    }
                    _ => refused += 1,
                }
            }
        }
        // The answers wait unread (their bytes held) a while.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let peak = peak_mib(pid);
        eprintln!(
            "unread answers, 8 connections of window 0 x 2 calls at once: peak RSS {peak} MiB; {waiting} waiting, {refused} refused"
        );
        assert!(waiting > 0, "{refused} refused");
        assert!(
            peak < POOL_MIB + OVERHEAD_MIB,
            "peak resident memory {peak} MiB"
        );
        for (_, conn, _) in callers {
            conn.abort();
        }
        drop(kept);
        later_calls_succeed(addr, 7).await;
    }

    /// Answers queued in HTTP/2's send buffer for callers that grant every
    /// window and never read their sockets stay counted until written:
    /// 10 connections, opened 1.2 s apart, each make 3 calls of 15.9 MiB
    /// to a plugin that answers after 2 s, and stop reading 1.2 s after
    /// their first call (small socket buffers, so the kernel takes little
    /// of them). With the default limits (a 30 s send timeout): before the
    /// queued answers were counted, each connection's answers left the
    /// pools once queued, and every connection added its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_queued_for_sockets_never_read_stay_within_the_pools() {
        let p = plugin(Behaviour::new("p")).await;
        p.set(|b| b.delay = Duration::from_secs(2));
        let (_registry, gw, addr) = spawn_over(&p, &[]);
        let pid = gw.0.id();
        let request = large_mutate();
        let mut held = Vec::new();
        for _ in 0..10 {
            let socket = TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(64 * 1024).unwrap();
            let paused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let io = Pausable {
                tcp: socket.connect(addr).await.unwrap(),
                paused: paused.clone(),
            };
            let (send, conn) = h2::client::Builder::new()
                .initial_window_size(i32::MAX as u32)
                .initial_connection_window_size(i32::MAX as u32)
                .handshake::<_, Bytes>(io)
                .await
                .unwrap();
            held.push(tokio::spawn(async move {
                let _ = conn.await;
            }));
            let request = request.clone();
            held.push(tokio::spawn(async move {
                let mut streams = Vec::new();
                for _ in 0..3 {
                    let Ok(mut send) = send.clone().ready().await else {
                        break;
                    };
                    let (answer, mut body) = send
                        .send_request(grpc_request(MUTATE, Some("p")), false)
                        .unwrap();
                    let _ = body.send_data(request.clone(), true);
                    streams.push((answer, body));
                }
                // Kept: the streams stay open.
                std::future::pending::<()>().await;
                drop(streams);
            }));
            tokio::time::sleep(Duration::from_millis(1200)).await;
            paused.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let peak = peak_mib(pid);
        eprintln!("answers queued for sockets never read, 10 connections x 3: peak RSS {peak} MiB");
        assert!(
            peak < POOL_MIB + OVERHEAD_MIB,
            "peak resident memory {peak} MiB"
        );
        for h in held {
            h.abort();
        }
        later_calls_succeed(addr, 7).await;
    }
}

mod unread_answers {
    use rollout_proto::v1alpha1::MutateManifestWorkRequest;

    use super::*;

    /// A caller that never reads its answers (its stream window is 0): the
    /// answers waiting for it count against its connection's pending bytes
    /// (those over are refused), and the connection is cut after the send
    /// timeout, giving every byte back.
    #[tokio::test]
    async fn answers_a_caller_does_not_read_are_bounded_and_cut_off() {
        let p = plugin(Behaviour::new("p")).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("p", &p, ""))).unwrap();
        let gw = gateway_with(dir, path, |o: &mut Options| {
            o.max_message_bytes = 5 * MIB;
            o.max_pending_request_bytes_per_connection = 16 * MIB;
            o.max_pending_request_bytes = 64 * MIB;
            o.send_timeout = Duration::from_secs(2);
        })
        .await;
        let pool = gw.running.as_ref().unwrap().pending_requests.clone();
        let (send, conn) = connect_from("127.0.0.1", gw.grpc, 0).await;
        let request = framed(&MutateManifestWorkRequest {
            rollout: Some(rollout("c1")),
            manifest_work: work(4 * MIB),
        });
        let started = Instant::now();
        // One call after another, so that only answers compete for the
        // connection's budget.
        let (mut waiting, mut refused, mut bodies) = (0, 0, Vec::new());
        for _ in 0..8 {
            let mut send = send.clone().ready().await.unwrap();
            let (answer, mut body) = send
                .send_request(grpc_request(MUTATE, Some("p")), false)
                .unwrap();
            body.send_data(request.clone(), true).unwrap();
            let answer = tokio::time::timeout(Duration::from_secs(5), answer)
                .await
                .expect("headers come: they need no window")
                .unwrap();
            match answer.headers().get("grpc-status") {
                // Refused: the answers waiting hold the connection's budget.
                Some(code) => {
                    assert_eq!(code, "8", "{answer:?}");
                    let message = answer.headers()["grpc-message"].to_str().unwrap();
                    assert!(message.contains("this connection"), "{message}");
                    refused += 1;
                }
                None => {
                    waiting += 1;
                    bodies.push(answer.into_body());
                }
            }
        }
        let held = pool.used();
        // Three 4 MiB answers fit in 16 MiB; then the connection is full.
        assert!((1..=3).contains(&waiting), "{waiting} answers waiting");
        assert_eq!(refused, 8 - waiting);
        assert!(held > 0 && held <= 16 * MIB, "held {held} bytes");
        tokio::time::timeout(Duration::from_secs(10), conn)
            .await
            .expect("the connection is cut after the send timeout")
            .unwrap()
            .ok();
        let took = started.elapsed();
        assert!(took >= Duration::from_secs(2), "cut after {took:?}");
        eventually("the answers' bytes are given back", || pool.used() == 0).await;
        gw.stop().await;
    }

    /// Answers larger than what is left of the connection's budget, to
    /// small requests (a plugin that grows the work): the answer that would
    /// go over is refused RESOURCE_EXHAUSTED as it arrives from the plugin,
    /// or dropped and its stream reset with ENHANCE_YOUR_CALM (which gRPC
    /// clients read as RESOURCE_EXHAUSTED) when it is to be sent.
    #[tokio::test]
    async fn an_answer_over_the_connections_budget_is_refused() {
        let p = plugin(Behaviour::new("p")).await;
        p.set(|b| b.mutate = Mutation::Fixed(work(4 * MIB)));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("p", &p, ""))).unwrap();
        let gw = gateway_with(dir, path, |o: &mut Options| {
            o.max_message_bytes = 5 * MIB;
            o.max_pending_request_bytes_per_connection = 16 * MIB;
            o.max_pending_request_bytes = 64 * MIB;
        })
        .await;
        let pool = gw.running.as_ref().unwrap().pending_requests.clone();
        let (send, conn) = connect_from("127.0.0.1", gw.grpc, 0).await;
        let request = framed(&MutateManifestWorkRequest {
            rollout: Some(rollout("c1")),
            manifest_work: work(1024),
        });
        let mut answers = Vec::new();
        for _ in 0..6 {
            let mut send = send.clone().ready().await.unwrap();
            let (answer, mut body) = send
                .send_request(grpc_request(MUTATE, Some("p")), false)
                .unwrap();
            body.send_data(request.clone(), true).unwrap();
            answers.push(tokio::spawn(async move {
                // The reset may come before the headers are written.
                let answer = match answer.await {
                    Ok(answer) => answer,
                    Err(e) => return e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM),
                };
                // Refused as the plugin's answer arrived: RESOURCE_EXHAUSTED.
                if let Some(code) = answer.headers().get("grpc-status") {
                    return code == "8";
                }
                let mut body = answer.into_body();
                tokio::time::timeout(Duration::from_secs(3), body.data())
                    .await
                    .ok()
                    .flatten()
                    .and_then(|d| d.err())
                    .and_then(|e| e.reason())
                    == Some(h2::Reason::ENHANCE_YOUR_CALM)
            }));
        }
        let mut refused = 0;
        for a in answers {
            if a.await.unwrap() {
                refused += 1;
            }
        }
        // Three 4 MiB answers fit in 16 MiB: the others are refused, as
        // they arrive from the plugin or as they are to be sent.
        assert_eq!(refused, 3, "{refused} of 6 refused");
        assert!(pool.used() <= 16 * MIB, "{}", pool.used());
        conn.abort();
        eventually("the answers' bytes are given back", || pool.used() == 0).await;
        gw.stop().await;
    }

    /// A plugin's answer the caller's connection has no room for is the
    /// caller's failure, whatever the plugin's failure policy: refused
    /// RESOURCE_EXHAUSTED naming the connection (never skipped as failed
    /// open, which would pass the work on unmutated), and never counted
    /// against the plugin's circuit.
    #[tokio::test]
    async fn an_answer_with_no_room_fails_the_call_and_not_the_plugin() {
        let p = plugin(Behaviour::new("p")).await;
        p.set(|b| b.mutate = Mutation::Fixed(work(4 * MIB)));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        let entry = insecure_plugin(
            "p",
            &p,
            "    failurePolicy: Ignore\n    circuitBreaker:\n      consecutiveFailures: 2\n      openFor: 1m\n",
        );
        std::fs::write(&path, format!("plugins:\n{entry}")).unwrap();
        let gw = gateway_with(dir, path, |o: &mut Options| {
            o.max_message_bytes = 5 * MIB;
            o.max_pending_request_bytes_per_connection = 16 * MIB;
            o.max_pending_request_bytes = 64 * MIB;
        })
        .await;
        let pool = gw.running.as_ref().unwrap().pending_requests.clone();
        let (send, conn) = connect_from("127.0.0.1", gw.grpc, 0).await;
        let request = framed(&MutateManifestWorkRequest {
            rollout: Some(rollout("c1")),
            manifest_work: work(1024),
        });
        // One after another: three answers wait unread, holding the
        // connection's 16 MiB; the plugin's next answers have no room.
        let (mut waiting, mut refused) = (Vec::new(), 0);
        for _ in 0..6 {
            let mut send = send.clone().ready().await.unwrap();
            let (answer, mut body) = send
                .send_request(grpc_request(MUTATE, Some("p")), false)
                .unwrap();
            body.send_data(request.clone(), true).unwrap();
            let answer = tokio::time::timeout(Duration::from_secs(5), answer)
                .await
                .expect("headers come")
                .unwrap();
            match answer.headers().get("grpc-status") {
                Some(code) => {
                    assert_eq!(code, "8", "{answer:?}");
                    let message = answer.headers()["grpc-message"].to_str().unwrap();
                    assert!(message.contains("this connection"), "{message}");
                    refused += 1;
                }
                None => waiting.push(answer),
            }
        }
        assert_eq!((waiting.len(), refused), (3, 3));
        let debug = gw.debug().await;
        assert_eq!(debug["plugins"][0]["circuit"], "closed", "{debug}");
        assert_eq!(debug["plugins"][0]["consecutiveFailures"], 0, "{debug}");
        conn.abort();
        eventually("the answers' bytes are given back", || pool.used() == 0).await;
        // With its bytes back, the caller's next call is answered.
        let mut client = gw.client().await;
        client
            .mutate_manifest_work(to("p", mutate_request("c1", work(1024))))
            .await
            .expect("answered once the bytes are back");
        gw.stop().await;
    }
}

mod connections {
    use super::*;

    /// Opens a health Watch on a new connection from `from`; returns the
    /// connection's driver, and the answer's body (kept open).
    async fn watch_from(
        from: &str,
        addr: SocketAddr,
    ) -> (
        JoinHandle<Result<(), h2::Error>>,
        h2::RecvStream,
        SendRequest<Bytes>,
    ) {
        let (send, conn) = connect_from(from, addr, 1024 * 1024).await;
        let mut ready = send.clone().ready().await.unwrap();
        let (answer, mut body) = ready
            .send_request(grpc_request(HEALTH_WATCH, None), false)
            .unwrap();
        body.send_data(
            framed(&tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            }),
            true,
        )
        .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), answer)
            .await
            .expect("the Watch answers")
            .unwrap();
        (conn, answer.into_body(), send)
    }

    /// One address holding connections with open Watch streams cannot
    /// lock other peers out: it is bounded by --max-connections-per-ip,
    /// counted once a connection's handshakes are done.
    #[tokio::test]
    async fn one_address_cannot_take_every_connection() {
        let p = plugin(Behaviour::new("p")).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("p", &p, ""))).unwrap();
        let gw = gateway_with(dir, path, |o: &mut Options| {
            o.max_connections = 8;
            o.max_connections_per_ip = 3;
        })
        .await;
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(watch_from("127.0.0.1", gw.grpc).await);
        }
        // A fourth from the same address is closed as its handshake ends.
        let (_send, conn) = connect_from("127.0.0.1", gw.grpc, 1024 * 1024).await;
        let ended = tokio::time::timeout(Duration::from_secs(5), conn).await;
        assert!(ended.is_ok(), "closed after its handshake");
        // Another address still gets in, and is served.
        let (_conn, _body, _send) = watch_from("127.0.0.2", gw.grpc).await;
        gw.stop().await;
    }

    /// An open Watch is not a call in progress: the connection still goes
    /// idle, gets its GOAWAY and is closed.
    #[tokio::test]
    async fn an_open_watch_does_not_keep_a_connection_from_idling() {
        let p = plugin(Behaviour::new("p")).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("p", &p, ""))).unwrap();
        let gw = gateway_with(dir, path, |o: &mut Options| {
            o.idle_timeout = Duration::from_millis(500);
        })
        .await;
        let started = Instant::now();
        let (conn, _body, _send) = watch_from("127.0.0.1", gw.grpc).await;
        tokio::time::timeout(Duration::from_secs(5), conn)
            .await
            .expect("the idle connection is closed despite its Watch")
            .unwrap()
            .ok();
        assert!(started.elapsed() >= Duration::from_millis(500));
        gw.stop().await;
    }

    /// Watch streams open on one connection are bounded (16): one more is
    /// reset, the others go on.
    #[tokio::test]
    async fn watch_streams_per_connection_are_bounded() {
        let p = plugin(Behaviour::new("p")).await;
        let gw = gateway(&format!("plugins:\n{}", insecure_plugin("p", &p, ""))).await;
        let (conn, first, send) = watch_from("127.0.0.1", gw.grpc).await;
        let mut open = vec![first];
        let mut refused = 0;
        for _ in 0..20 {
            let mut ready = send.clone().ready().await.unwrap();
            let (answer, mut body) = ready
                .send_request(grpc_request(HEALTH_WATCH, None), false)
                .unwrap();
            body.send_data(
                framed(&tonic_health::pb::HealthCheckRequest {
                    service: String::new(),
                }),
                true,
            )
            .unwrap();
            let mut answer = answer.await.unwrap().into_body();
            // The first status comes at once on a Watch that is kept.
            match tokio::time::timeout(Duration::from_secs(2), answer.data()).await {
                Ok(Some(Ok(_))) => open.push(answer),
                other => {
                    assert!(matches!(other, Ok(Some(Err(_)) | None)), "{other:?}");
                    refused += 1;
                }
            }
        }
        assert_eq!(open.len(), 16);
        assert_eq!(refused, 5);
        assert!(!conn.is_finished(), "the connection stays");
        gw.stop().await;
    }

    /// A drain does not wait for open Watch streams (they would hold it to
    /// its timeout): they end with the drain.
    #[tokio::test]
    async fn a_drain_does_not_wait_for_open_watches() {
        let p = plugin(Behaviour::new("p")).await;
        let gw = gateway(&format!("plugins:\n{}", insecure_plugin("p", &p, ""))).await;
        let (conn, _body, _send) = watch_from("127.0.0.1", gw.grpc).await;
        let started = Instant::now();
        gw.stop().await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the drain took {:?}",
            started.elapsed()
        );
        tokio::time::timeout(Duration::from_secs(2), conn)
            .await
            .expect("the Watch's connection is closed")
            .unwrap()
            .ok();
    }
}

mod files {
    use super::*;

    /// Polls `/debug/plugins` until its `lastReloadError` contains `want`.
    async fn until_reload_error(gw: &Gateway, want: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let debug = tokio::time::timeout(Duration::from_secs(2), gw.debug())
                .await
                .expect("/debug/plugins answers");
            if let Some(e) = debug["lastReloadError"].as_str()
                && e.contains(want)
            {
                return e.to_string();
            }
            assert!(Instant::now() < deadline, "not reported: {want} ({debug})");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Calls, `/readyz` and `/debug/plugins` still answer, promptly.
    async fn still_serving(gw: &Gateway) {
        for _ in 0..5 {
            let mut client = gw.client().await;
            tokio::time::timeout(
                Duration::from_secs(2),
                client.begin_rollout(to("p", rollout("c1"))),
            )
            .await
            .expect("a call answers")
            .expect("and succeeds");
            let ready = tokio::time::timeout(Duration::from_secs(2), http_get(gw.admin, "/readyz"));
            assert_eq!(ready.await.expect("/readyz answers").0, 200);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn mkfifo(path: &std::path::Path) {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(made.success());
    }

    async fn started(tune: impl FnOnce(&mut Options)) -> (Plugin, Gateway) {
        let p = plugin(Behaviour::new("p")).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("p", &p, ""))).unwrap();
        let gw = gateway_with(dir, path, |o: &mut Options| {
            o.poll_interval = Duration::from_millis(200);
            tune(o);
        })
        .await;
        (p, gw)
    }

    /// A registry file that blocks on read (a FIFO, as a hung mount would):
    /// refused from its metadata, naming it; the gateway keeps serving.
    #[tokio::test]
    async fn a_registry_file_that_is_a_fifo_is_refused_and_nothing_freezes() {
        let (_p, gw) = started(|_| {}).await;
        std::fs::remove_file(&gw.config).unwrap();
        mkfifo(&gw.config);
        let error = until_reload_error(&gw, "not a regular file (a FIFO)").await;
        assert!(error.contains(&gw.config.display().to_string()), "{error}");
        still_serving(&gw).await;
        gw.stop().await;
    }

    /// A registry change naming a `caFile` that is a FIFO is refused like
    /// any bad change, naming the file; the loaded registry keeps serving.
    #[tokio::test]
    async fn a_ca_file_that_is_a_fifo_is_refused_naming_it() {
        let (p, gw) = started(|_| {}).await;
        let fifo = gw.dir.path().join("ca.crt");
        mkfifo(&fifo);
        gw.write_config(&format!(
            "plugins:\n{}  - name: q\n    endpoint: 127.0.0.1:1\n    caCertificate:\n      caFile: {}\n",
            insecure_plugin("p", &p, ""),
            fifo.display()
        ));
        let error = until_reload_error(&gw, "not a regular file (a FIFO)").await;
        assert!(error.contains(&fifo.display().to_string()), "{error}");
        still_serving(&gw).await;
        gw.stop().await;
    }

    /// A registry file over --max-file-bytes is refused, naming the file and
    /// the flag; the loaded registry stays.
    #[tokio::test]
    async fn an_oversized_registry_file_is_refused() {
        let (p, gw) = started(|o| o.file_limits.max_bytes = 4096).await;
        let padding = format!("# {}\n", "x".repeat(8192));
        gw.write_config(&format!(
            "{padding}plugins:\n{}",
            insecure_plugin("p", &p, "")
        ));
        let error = until_reload_error(&gw, "--max-file-bytes").await;
        assert!(error.contains("over the limit of 4096 bytes"), "{error}");
        assert!(error.contains("config.yaml"), "{error}");
        still_serving(&gw).await;
        gw.stop().await;
    }
}
