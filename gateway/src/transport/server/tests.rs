//! One connection of the listener over an in-memory pipe, on paused time:
//! the idle timeout, the maximum age and its grace, the drain, and the send
//! timeout, each at the instant it is due and not before.

use std::net::{IpAddr, Ipv4Addr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::{HeaderMap, HeaderValue};
use tokio::io::{DuplexStream, ReadBuf};
use tokio::task::JoinHandle;

use super::*;
use crate::transport::pending::Scope;

const PEER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 40_000);

/// The settings of these tests: every bound far away unless a test sets it.
fn settings() -> ServerSettings {
    ServerSettings {
        idle_timeout: Duration::ZERO,
        max_connection_age: Duration::ZERO,
        send_timeout: Duration::from_secs(3),
        ..ServerSettings::default()
    }
}

/// Serves one connection on one end of a pipe, as the listener serves a
/// socket past its TLS handshake. Returns the other end, the drain switch
/// and the connection's task.
fn serve_one<S: CallService>(
    settings: ServerSettings,
    service: S,
) -> (
    DuplexStream,
    watch::Sender<bool>,
    JoinHandle<Result<(), ConnectionError>>,
) {
    let (client, server) = tokio::io::duplex(16 * 1024);
    let (drain, draining) = watch::channel(false);
    let handshakes = Admission::new(4, 4);
    let place = handshakes.admit(PEER.ip()).expect("a handshake place");
    let conn = Connection {
        builder: h2_builder(&settings),
        settings,
        draining,
        tls: None,
        pending: Arc::new(Pool::new(usize::MAX / 2, Scope::Gateway)),
        established: Established::default(),
        peer: PEER,
    };
    let task = tokio::spawn(async move {
        let _handshakes = handshakes;
        conn.admitted(server, None, place, Instant::now(), service)
            .await
    });
    (client, drain, task)
}

/// A service whose every call waits `wait` (forever when `None`), then
/// answers `bytes` of message and status OK.
fn answering(
    wait: Option<Duration>,
    bytes: usize,
) -> impl CallService<Answering = BoxFuture<'static, Result<Answer, Infallible>>> {
    tower::service_fn(
        move |_call: Call| -> BoxFuture<'static, Result<Answer, Infallible>> {
            Box::pin(async move {
                match wait {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => std::future::pending::<()>().await,
                }
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                let message = Bytes::from(vec![0u8; bytes]);
                Ok(Answer::Message {
                    message: Bytes::new()
                        .chain(message)
                        .chain(Bytes::new().chain(Bytes::new())),
                    trailers,
                })
            })
        },
    )
}

/// A client on `io`: its request sender and the task driving its
/// connection (which ends when the gateway closes it).
async fn client<T>(
    io: T,
) -> (
    h2::client::SendRequest<Bytes>,
    JoinHandle<Result<(), h2::Error>>,
)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = h2::client::handshake(io).await.expect("h2 handshake");
    (send, tokio::spawn(conn))
}

/// One unary call, sent whole; the answer's future.
async fn call(send: &mut h2::client::SendRequest<Bytes>) -> h2::client::ResponseFuture {
    let request = http::Request::post(
        "http://gateway/rollout.plugin.v1alpha1.RolloutPluginService/BeginRollout",
    )
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .expect("request");
    let mut ready = send.clone().ready().await.expect("ready");
    let (answer, mut body) = ready.send_request(request, false).expect("sent");
    body.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .expect("body");
    answer
}

/// When `task` ends, counted from `since`.
async fn ends_after<T>(task: JoinHandle<T>, since: Instant) -> (T, Duration) {
    let out = task.await.expect("task");
    (out, since.elapsed())
}

#[tokio::test(start_paused = true)]
async fn an_idle_connection_is_closed_at_its_idle_timeout_and_not_before() {
    let settings = ServerSettings {
        idle_timeout: Duration::from_secs(5),
        ..settings()
    };
    let (io, _drain, server) = serve_one(settings, answering(Some(Duration::from_secs(20)), 1));
    let (mut send, conn) = client(io).await;
    let start = Instant::now();
    // A call in progress is not idleness: the 20 s call keeps the
    // connection open past 5 s, and the timeout counts from its end.
    let answer = call(&mut send).await.await.expect("answered");
    assert_eq!(answer.status(), http::StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::from_secs(20));
    let (ended, after) = ends_after(conn, start).await;
    assert!(ended.is_ok(), "a GOAWAY, not an error: {ended:?}");
    // 20 s of call, then 5 s idle, then the GOAWAY's grace.
    assert!(
        after >= Duration::from_secs(25) && after <= Duration::from_secs(25) + IDLE_GRACE,
        "closed after {after:?}"
    );
    // The gateway's side ends too (the peer may have closed first on the
    // GOAWAY, which the pipe reports as a broken pipe).
    let (_, server_after) = ends_after(server, start).await;
    assert!(server_after <= Duration::from_secs(25) + IDLE_GRACE);
}

#[tokio::test(start_paused = true)]
async fn an_old_connection_gets_a_goaway_and_is_closed_after_its_grace_whatever_runs() {
    let settings = ServerSettings {
        max_connection_age: Duration::from_secs(10),
        max_connection_age_grace: Duration::from_secs(2),
        ..settings()
    };
    let (io, _drain, server) = serve_one(settings, answering(None, 1));
    let start = Instant::now();
    let (mut send, conn) = client(io).await;
    let answer = call(&mut send).await;
    let (ended, after) = ends_after(conn, start).await;
    assert!(ended.is_ok(), "{ended:?}");
    assert_eq!(after, Duration::from_secs(12), "the age, then the grace");
    // The call that never ended is cut, not answered.
    assert!(answer.await.is_err());
    assert!(server.await.expect("task").is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_drain_lets_the_call_in_flight_finish_then_closes_the_connection() {
    let (io, drain, server) = serve_one(settings(), answering(Some(Duration::from_secs(4)), 1));
    let start = Instant::now();
    let (mut send, conn) = client(io).await;
    let answer = call(&mut send).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    drain.send(true).expect("drain");
    let answer = answer.await.expect("the call in flight is answered");
    assert_eq!(answer.status(), http::StatusCode::OK);
    let (ended, after) = ends_after(conn, start).await;
    assert!(ended.is_ok(), "{ended:?}");
    assert_eq!(after, Duration::from_secs(4), "closed once its call ended");
    assert!(server.await.expect("task").is_ok());
}

/// A pipe end whose reads stop (pending for ever) once `deaf` is set.
struct Deaf {
    io: DuplexStream,
    deaf: Arc<AtomicBool>,
}

impl AsyncRead for Deaf {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.deaf.load(Ordering::SeqCst) {
            return Poll::Pending;
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Deaf {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[tokio::test(start_paused = true)]
async fn a_peer_that_stops_reading_is_cut_off_at_the_send_timeout() {
    // An answer larger than the pipe and the stream's window: its writes
    // stall once the peer stops reading.
    let (io, _drain, server) =
        serve_one(settings(), answering(Some(Duration::from_secs(1)), 1 << 20));
    let deaf = Arc::new(AtomicBool::new(false));
    let (mut send, _conn) = client(Deaf {
        io,
        deaf: deaf.clone(),
    })
    .await;
    let _answer = call(&mut send).await;
    // The request is out (the call answers 1 s later); from now on the
    // peer reads nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    deaf.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let (ended, after) = ends_after(server, start).await;
    // The answer is ready 0.5 s from now; the peer then has 3 s to take
    // some of it.
    let due = Duration::from_millis(500) + Duration::from_secs(3);
    assert!(
        after >= due && after <= due + Duration::from_millis(100),
        "cut off after {after:?}, due {due:?}"
    );
    // Cut off as stalled: by the send timeout of its answer, or of the
    // connection's writes (which h2 reports as its I/O error).
    let stalled = match &ended {
        Err(ConnectionError::Stalled(_)) => true,
        Err(ConnectionError::H2(e)) => {
            e.get_io().map(std::io::Error::kind) == Some(std::io::ErrorKind::TimedOut)
        }
        _ => false,
    };
    assert!(stalled, "{ended:?}");
}
