//! The gRPC listener: a hyper HTTP/2 accept loop around the gateway service.
//!
//! The gateway runs its own loop rather than tonic's `Server` for three
//! reasons: an expired `grpc-timeout` must answer DEADLINE_EXCEEDED (tonic's
//! server layer answers CANCELLED), central mode needs the peer certificate of
//! each connection to know the calling hub, and draining on SIGTERM must wait
//! for in-flight calls for a bounded time. The service speaks gRPC's framing
//! itself ([`crate::grpc`]), so an answer leaves in one write. A bad connection (garbage bytes, a
//! failed handshake) only ends that connection.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tower::ServiceBuilder;

use crate::service::GatewayService;

/// HTTP/2 settings of the gRPC listener.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// How long a drain waits for in-flight calls before closing connections.
    pub drain_timeout: Duration,
    pub max_concurrent_streams: u32,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            drain_timeout: Duration::from_secs(10),
            max_concurrent_streams: 1024,
        }
    }
}

/// Serves `service` on `listener` until `shutdown` resolves, then stops
/// accepting, lets in-flight calls finish (up to the drain timeout) and returns.
///
/// On drain, a connection that has carried a request gets a GOAWAY and ends
/// when its calls are done; one that never carried a request (still in the
/// HTTP/2 handshake, or a peer that connected and said nothing) is closed at
/// once, so a silent peer cannot hold the drain for its whole timeout.
pub async fn serve(
    listener: TcpListener,
    service: GatewayService,
    settings: ServerSettings,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.max_concurrent_streams)
        // Large windows so a 64 KiB ManifestWork arrives without waiting for a
        // WINDOW_UPDATE round trip, and multi-MiB ones stream.
        .initial_stream_window_size(4 * 1024 * 1024)
        .initial_connection_window_size(8 * 1024 * 1024)
        .max_frame_size(64 * 1024)
        .max_header_list_size(64 * 1024)
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10));
    let (draining_tx, draining) = watch::channel(false);
    // Each connection task holds a sender; the drain is over when all are gone.
    let (alive, mut all_closed) = mpsc::channel::<()>(1);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    // Out of file descriptors and the like: back off briefly
                    // rather than spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let used = Arc::new(AtomicBool::new(false));
        let svc = {
            let used = used.clone();
            ServiceBuilder::new()
                .map_request(move |req: http::Request<hyper::body::Incoming>| {
                    used.store(true, Ordering::Relaxed);
                    req
                })
                .service(service.clone())
        };
        let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(svc));
        let mut draining = draining.clone();
        let alive = alive.clone();
        tokio::spawn(async move {
            let _alive = alive;
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                () = async { let _ = draining.wait_for(|d| *d).await; } => {
                    if !used.load(Ordering::Relaxed) {
                        return;
                    }
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    drop(alive);
    let _ = draining_tx.send(true);
    tracing::info!("draining");
    tokio::select! {
        _ = all_closed.recv() => tracing::info!("drained"),
        () = tokio::time::sleep(settings.drain_timeout) => {
            tracing::warn!(timeout_secs = settings.drain_timeout.as_secs(), "drain timed out; closing the remaining connections");
        }
    }
}
