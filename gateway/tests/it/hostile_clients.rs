//! Hostile and careless clients, on the wire: an HTTP/2 client (the `h2`
//! crate) that declares large messages and stops sending, leaves connections
//! idle, opens too many, or keeps one open forever; a half-sent admin
//! request; and a drain with such connections still open. Each test runs a
//! real gateway in-process on 127.0.0.1:0 and watches what a client sees.

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use h2::client::{ResponseFuture, SendRequest};
use rollout_gateway::app::Options;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tonic::Code;

/// A gateway with one plugin, `p`, tuned by `tune`.
async fn gateway_tuned(tune: impl FnOnce(&mut Options)) -> (Plugin, Gateway) {
    let p = plugin(Behaviour::new("p")).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("p", &p, ""))).unwrap();
    (p, gateway_with(dir, path, tune).await)
}

/// An HTTP/2 connection to `addr`, its driver running in a task whose end
/// is the connection's end.
async fn h2_connect(addr: SocketAddr) -> (SendRequest<Bytes>, JoinHandle<Result<(), h2::Error>>) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(16 * MIB as u32)
        .initial_connection_window_size(64 * MIB as u32)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    (send, tokio::spawn(conn))
}

/// A BeginRollout request to plugin `p`, with `grpc-timeout` when given.
fn begin_rollout(timeout: Option<&str>) -> http::Request<()> {
    let mut b = http::Request::builder()
        .method("POST")
        .uri("http://gateway/ocm.rolloutplugin.v1alpha1.RolloutPluginService/BeginRollout")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("ocm-rollout-plugin", "p");
    if let Some(t) = timeout {
        b = b.header("grpc-timeout", t);
    }
    b.body(()).unwrap()
}

/// A message prefix declaring `len` bytes, followed by `sent` bytes of it.
fn partial_message(len: usize, sent: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + sent);
    b.put_u8(0);
    b.put_u32(len as u32);
    b.put_bytes(b'x', sent);
    b.freeze()
}

/// Opens a stream and sends `body` on it without ending it: a request that
/// stops arriving. The send half is returned so the stream stays open.
async fn stalled(
    send: &SendRequest<Bytes>,
    request: http::Request<()>,
    body: Bytes,
) -> (ResponseFuture, h2::SendStream<Bytes>) {
    let mut send = send.clone().ready().await.unwrap();
    let (response, mut stream) = send.send_request(request, false).unwrap();
    stream.send_data(body, false).unwrap();
    (response, stream)
}

/// The gRPC status of an answer (trailers-only, or in the trailers).
async fn status_of(response: ResponseFuture) -> (Code, String) {
    let response = response.await.expect("an answer");
    let (parts, mut body) = response.into_parts();
    let headers = if parts.headers.contains_key("grpc-status") {
        parts.headers
    } else {
        while let Some(chunk) = body.data().await {
            chunk.expect("the body");
        }
        body.trailers().await.unwrap().expect("trailers")
    };
    let code = headers["grpc-status"]
        .to_str()
        .unwrap()
        .parse::<i32>()
        .unwrap();
    let message = headers
        .get("grpc-message")
        .map(|m| rollout_gateway::transport::grpc::percent_decode(m.to_str().unwrap()))
        .unwrap_or_default();
    (Code::from_i32(code), message)
}

#[tokio::test]
async fn a_request_that_stops_arriving_ends_at_the_callers_deadline() {
    let (_p, gw) = gateway_tuned(|_| {}).await;
    let (send, _conn) = h2_connect(gw.grpc).await;
    let started = Instant::now();
    // 3 bytes of the message prefix, then nothing, with a 2 s deadline.
    let (response, _stream) = stalled(
        &send,
        begin_rollout(Some("2S")),
        Bytes::from_static(&[0, 0, 0]),
    )
    .await;
    let (code, message) = tokio::time::timeout(Duration::from_secs(10), status_of(response))
        .await
        .expect("answered within 10 s");
    let took = started.elapsed();
    assert_eq!(code, Code::DeadlineExceeded, "{message}");
    assert!(message.contains("caller's deadline"), "{message}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
        "answered after {took:?}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_request_without_a_deadline_must_arrive_within_the_receive_timeout() {
    let (_p, gw) = gateway_tuned(|o| o.request_receive_timeout = Duration::from_millis(500)).await;
    let (send, _conn) = h2_connect(gw.grpc).await;
    let (response, _stream) = stalled(&send, begin_rollout(None), partial_message(100, 10)).await;
    let (code, message) = tokio::time::timeout(Duration::from_secs(10), status_of(response))
        .await
        .expect("answered within 10 s");
    assert_eq!(code, Code::DeadlineExceeded, "{message}");
    assert!(message.contains("--request-receive-timeout"), "{message}");
    assert_eq!(gw.running.as_ref().unwrap().pending_requests.used(), 0);
    gw.stop().await;
}

/// A connection of [`flood`]: its handle, its driver and its open streams.
type Open = (
    SendRequest<Bytes>,
    JoinHandle<Result<(), h2::Error>>,
    Vec<h2::SendStream<Bytes>>,
);

/// Streams that declare `declared`-byte messages and send `sent` bytes of each, on
/// `connections` connections of `streams` streams each; returns each
/// stream's answer (or `None` if it is still waiting after `wait`) and the
/// connections, still open.
async fn flood(
    gw: &Gateway,
    connections: usize,
    streams: usize,
    declared: usize,
    sent: usize,
    wait: Duration,
) -> (Vec<Option<(Code, String)>>, Vec<Open>) {
    let mut open = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..connections {
        let (send, conn) = h2_connect(gw.grpc).await;
        let mut bodies = Vec::new();
        for _ in 0..streams {
            let (response, body) =
                stalled(&send, begin_rollout(None), partial_message(declared, sent)).await;
            bodies.push(body);
            answers.push(tokio::spawn(status_of(response)));
        }
        open.push((send, conn, bodies));
    }
    let deadline = tokio::time::Instant::now() + wait;
    let mut out = Vec::new();
    for a in answers {
        out.push(
            tokio::time::timeout_at(deadline, a)
                .await
                .ok()
                .map(|r| r.unwrap()),
        );
    }
    (out, open)
}

/// Closes the connections of [`flood`] (their sockets, at once).
fn close(open: Vec<Open>) {
    for (_, conn, _) in open {
        conn.abort();
    }
}

#[tokio::test]
async fn bytes_of_requests_still_arriving_are_bounded_per_connection() {
    let (_p, gw) = gateway_tuned(|o| {
        o.max_message_bytes = 4 * MIB;
        o.max_pending_request_bytes_per_connection = 8 * MIB;
        o.max_pending_request_bytes = 1024 * MIB;
    })
    .await;
    let pool = gw.running.as_ref().unwrap().pending_requests.clone();
    // Three 3 MiB messages arriving on one connection: two fit in 8 MiB.
    let (answers, open) = flood(&gw, 1, 3, 3 * MIB, 2 * MIB, Duration::from_secs(3)).await;
    let refused: Vec<_> = answers.iter().flatten().collect();
    assert_eq!(refused.len(), 1, "one stream is refused: {answers:?}");
    for (code, message) in &refused {
        assert_eq!(*code, Code::ResourceExhausted, "{message}");
        assert!(message.contains("this connection"), "{message}");
        assert!(message.contains("8388608"), "names the limit: {message}");
    }
    assert!(
        answers.iter().any(Option::is_none),
        "the streams within the limit are still waiting: {answers:?}"
    );
    assert!(pool.used() > 0 && pool.used() <= 8 * MIB, "{}", pool.used());
    // The memory goes back when the connection closes.
    close(open);
    eventually("the pending bytes are given back", || pool.used() == 0).await;
    gw.stop().await;
}

#[tokio::test]
async fn bytes_of_requests_still_arriving_are_bounded_in_total() {
    // The tester's attack: messages declared at 16 MiB, 15 MiB of each sent,
    // then nothing, on several connections.
    let (_p, gw) = gateway_tuned(|o| {
        o.max_pending_request_bytes_per_connection = 40 * MIB;
        o.max_pending_request_bytes = 40 * MIB;
    })
    .await;
    let pool = gw.running.as_ref().unwrap().pending_requests.clone();
    let (answers, open) = flood(&gw, 3, 2, 16 * MIB, 15 * MIB, Duration::from_secs(5)).await;
    let refused: Vec<_> = answers.iter().flatten().collect();
    assert!(
        refused.len() >= 3,
        "at most two 16 MiB buffers fit in 40 MiB: {answers:?}"
    );
    for (code, message) in &refused {
        assert_eq!(*code, Code::ResourceExhausted, "{message}");
        assert!(message.contains("the gateway"), "{message}");
    }
    assert!(pool.used() <= 40 * MIB, "{}", pool.used());
    close(open);
    eventually("the pending bytes are given back", || pool.used() == 0).await;
    // And the gateway still serves.
    gw.client()
        .await
        .begin_rollout(to("p", rollout("c1")))
        .await
        .unwrap();
    gw.stop().await;
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let (p, gw) = gateway_tuned(|o| o.idle_timeout = Duration::from_millis(400)).await;
    // A call longer than the idle timeout does not count as idle.
    p.set(|b| b.delay = Duration::from_millis(800));
    let (send, conn) = h2_connect(gw.grpc).await;
    let request = rollout_proto::v1alpha1::RolloutPluginRequest::default();
    let message = rollout_gateway::transport::grpc::flatten(
        rollout_gateway::transport::grpc::encode(&request),
    );
    let mut ready = send.clone().ready().await.unwrap();
    let (response, mut body) = ready.send_request(begin_rollout(None), false).unwrap();
    body.send_data(message, true).unwrap();
    let (code, m) = status_of(response).await;
    assert_eq!(code, Code::Ok, "{m}");
    let answered = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(5), conn)
        .await
        .expect("the idle connection is closed");
    let idle_for = answered.elapsed();
    assert!(ended.unwrap().is_ok(), "closed with a GOAWAY, not reset");
    assert!(idle_for >= Duration::from_millis(350), "{idle_for:?}");
    gw.stop().await;
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_at_once() {
    let (_p, gw) = gateway_tuned(|o| o.max_connections = 2).await;
    let first = gw.client().await;
    let mut second = gw.client().await;
    second.begin_rollout(to("p", rollout("c1"))).await.unwrap();
    // The third: closed as soon as its handshakes are done (the server's
    // SETTINGS may come first).
    let mut third = TcpStream::connect(gw.grpc).await.unwrap();
    let _ = third.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await;
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut out))
        .await
        .expect("the third connection is closed");
    assert!(
        out.len() < 64,
        "no more than the server's SETTINGS: {read:?}"
    );
    // Room again once one closes.
    drop(first);
    eventually_async("a new connection is served", || async {
        let Ok(Ok(channel)) = tokio::time::timeout(
            Duration::from_secs(1),
            tonic::transport::Endpoint::from_shared(format!("http://{}", gw.grpc))
                .unwrap()
                .connect(),
        )
        .await
        else {
            return false;
        };
        rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient::new(
            channel,
        )
        .begin_rollout(to("p", rollout("c1")))
        .await
        .is_ok()
    })
    .await;
    second.begin_rollout(to("p", rollout("c1"))).await.unwrap();
    gw.stop().await;
}

/// Waits (for at most 10 s) until the async `check` holds.
async fn eventually_async<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting until {what}");
}

#[tokio::test]
async fn a_connection_past_its_max_age_gets_a_goaway_then_is_closed_after_the_grace() {
    let (_p, gw) = gateway_tuned(|o| {
        o.max_connection_age = Duration::from_millis(500);
        o.max_connection_age_grace = Duration::from_millis(500);
    })
    .await;
    // A call still running at the end of the grace is cut with its connection.
    let opened = Instant::now();
    let (send, conn) = h2_connect(gw.grpc).await;
    let (response, _body) = stalled(&send, begin_rollout(None), partial_message(100, 100)).await;
    let ended = tokio::time::timeout(Duration::from_secs(4), conn)
        .await
        .expect("the connection is closed within its age and grace");
    let lived = opened.elapsed();
    assert!(
        lived >= Duration::from_millis(900) && lived < Duration::from_secs(3),
        "lived {lived:?}"
    );
    // The GOAWAY came first: the client was told, then the socket closed.
    drop(ended);
    let after = send.clone().ready().await;
    assert!(after.is_err(), "no new streams after the GOAWAY");
    assert!(
        response.await.is_err(),
        "the call in flight ended with the connection"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_half_sent_admin_request_is_cut_off() {
    let (_p, gw) = gateway_tuned(|o| o.admin_request_timeout = Duration::from_millis(500)).await;
    // Headers that never end.
    let mut half = TcpStream::connect(gw.admin).await.unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), half.read_to_end(&mut out))
        .await
        .expect("the half-sent request is cut off")
        .ok();
    assert!(started.elapsed() >= Duration::from_millis(400));
    // A whole request is answered; the connection left idle is then closed.
    let mut whole = TcpStream::connect(gw.admin).await.unwrap();
    whole
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), whole.read_to_end(&mut out))
        .await
        .expect("the idle keep-alive connection is closed")
        .ok();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.ends_with("ok\n"), "{text}");
    gw.stop().await;
}

#[tokio::test]
async fn a_drain_closes_the_connections_left_at_its_deadline() {
    let (p, mut gw) = gateway_tuned(|o| o.drain_timeout = Duration::from_millis(500)).await;
    // A call that outlasts the drain: the plugin takes 10 s.
    p.set(|b| b.delay = Duration::from_secs(10));
    let (send, conn) = h2_connect(gw.grpc).await;
    let request = rollout_proto::v1alpha1::RolloutPluginRequest::default();
    let message = rollout_gateway::transport::grpc::flatten(
        rollout_gateway::transport::grpc::encode(&request),
    );
    let mut ready = send.clone().ready().await.unwrap();
    let (response, mut body) = ready.send_request(begin_rollout(None), false).unwrap();
    body.send_data(message, true).unwrap();
    p.wait_calls(rollout_gateway::hooks::HookKind::BeginRollout, 1)
        .await;
    let started = Instant::now();
    let running = gw.running.take().unwrap();
    tokio::time::timeout(Duration::from_secs(5), running.shutdown())
        .await
        .expect("the drain ends at its timeout");
    let _ = tokio::time::timeout(Duration::from_secs(2), conn)
        .await
        .expect("the connection is closed when the drain ends");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(response.await.is_err(), "the call was cut, not answered");
}

#[tokio::test]
async fn limits_that_could_never_receive_the_largest_message_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "plugins: []\n").unwrap();
    for (message, connection, total) in [(16 * MIB, 16 * MIB, 256 * MIB), (MIB, 64 * MIB, 32 * MIB)]
    {
        let e = rollout_gateway::app::start(Options {
            configs: vec![path.clone()],
            listen: "127.0.0.1:0".parse().unwrap(),
            admin_listen: "127.0.0.1:0".parse().unwrap(),
            max_message_bytes: message,
            max_pending_request_bytes_per_connection: connection,
            max_pending_request_bytes: total,
            ..Options::default()
        })
        .await
        .expect_err("contradictory limits");
        assert!(
            matches!(e, rollout_gateway::app::StartError::Limits { .. }),
            "{e}"
        );
        assert!(e.to_string().contains("--max-message-bytes"), "{e}");
    }
}
