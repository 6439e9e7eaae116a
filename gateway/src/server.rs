//! The gRPC listener: an HTTP/2 accept loop (the `h2` crate) around the
//! gateway service.
//!
//! The gateway runs its own loop rather than tonic's `Server`: an expired
//! `grpc-timeout` must answer DEADLINE_EXCEEDED (tonic's server layer answers
//! CANCELLED), central mode needs the peer certificate of each connection to
//! know the calling hub, draining on SIGTERM must be bounded, and an answer
//! should leave in one write ([`crate::service`] queues headers, data and
//! trailers together). A bad connection (garbage bytes, a failed handshake)
//! only ends that connection.

use std::future::Future;
use std::time::Duration;

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::grpc::Payload;
use crate::io::{Coalesce, READ_BUFFER};
use crate::service::{CallerHub, GatewayService};
use crate::tls::{ServerTls, hub_of};

/// HTTP/2 settings of the gRPC listener.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// How long a drain waits for in-flight calls before closing connections.
    pub drain_timeout: Duration,
    pub max_concurrent_streams: u32,
    /// A connection that has not completed the HTTP/2 handshake by then is closed.
    pub handshake_timeout: Duration,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            drain_timeout: Duration::from_secs(10),
            max_concurrent_streams: 1024,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// The HTTP/2 settings every connection gets.
fn h2_builder(settings: &ServerSettings) -> h2::server::Builder {
    let mut b = h2::server::Builder::new();
    b.max_concurrent_streams(settings.max_concurrent_streams)
        // Large windows so a 64 KiB ManifestWork arrives without waiting for a
        // WINDOW_UPDATE round trip, and multi-MiB ones stream.
        .initial_window_size(4 * 1024 * 1024)
        .initial_connection_window_size(8 * 1024 * 1024)
        // Large frames: a message up to 1 MiB arrives in one frame, and is
        // decoded where it landed, without a reassembly copy.
        .max_frame_size(1024 * 1024)
        .max_header_list_size(64 * 1024)
        .max_send_buffer_size(4 * 1024 * 1024);
    b
}

/// Serves `service` on `listener` until `shutdown` resolves, then stops
/// accepting, lets in-flight calls finish (up to the drain timeout) and returns.
///
/// On drain, a connection that has carried a request gets a GOAWAY and ends
/// when its calls are done; one that never carried a request (still in the
/// handshake, or a peer that connected and said nothing) is closed at once,
/// so a silent peer cannot hold the drain for its whole timeout.
pub async fn serve(
    listener: TcpListener,
    service: GatewayService,
    settings: ServerSettings,
    tls: Option<Arc<ServerTls>>,
    shutdown: impl Future<Output = ()>,
) {
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
        let conn = Connection {
            service: service.clone(),
            builder: h2_builder(&settings),
            handshake_timeout: settings.handshake_timeout,
            draining: draining.clone(),
            tls: tls.clone(),
        };
        let alive = alive.clone();
        tokio::spawn(async move {
            let _alive = alive;
            if let Err(error) = conn.run(stream).await {
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

struct Connection {
    service: GatewayService,
    builder: h2::server::Builder,
    handshake_timeout: Duration,
    draining: watch::Receiver<bool>,
    tls: Option<Arc<ServerTls>>,
}

impl Connection {
    async fn run(mut self, stream: TcpStream) -> Result<(), ConnectionError> {
        let Some(tls) = self.tls.clone() else {
            return self.serve_h2(stream, None).await;
        };
        // The TLS handshake, bounded, and abandoned if a drain starts.
        let accept = tls.acceptor().accept(stream);
        let stream = tokio::select! {
            done = tokio::time::timeout(self.handshake_timeout, accept) => match done {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return Err(ConnectionError::Tls(e)),
                Err(_) => return Ok(()),
            },
            () = wait_true(&mut self.draining) => return Ok(()),
        };
        // A verified certificate that names no hub can call only shared
        // plugins without `hubs:`.
        let hub = if tls.requires_client_certificate() {
            let peer = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first());
            peer.and_then(hub_of).map(CallerHub)
        } else {
            None
        };
        self.serve_h2(stream, hub).await
    }

    async fn serve_h2<T>(mut self, io: T, hub: Option<CallerHub>) -> Result<(), ConnectionError>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        // A read buffer in front of the socket: a whole small request arrives in
        // one read instead of two (h2's own buffer splits at its free space).
        let io = Coalesce::new(tokio::io::BufReader::with_capacity(READ_BUFFER, io));
        let handshake = self.builder.handshake::<_, Payload>(io);
        let mut conn = tokio::select! {
            done = tokio::time::timeout(self.handshake_timeout, handshake) => match done {
                Ok(conn) => conn?,
                Err(_) => return Ok(()),
            },
            // Draining before the peer even said hello: nothing to finish.
            () = wait_true(&mut self.draining) => return Ok(()),
        };
        let mut used = false;
        let mut goaway_sent = false;
        loop {
            tokio::select! {
                next = conn.accept() => match next {
                    Some(Ok((mut request, respond))) => {
                        used = true;
                        if let Some(hub) = &hub {
                            request.extensions_mut().insert(hub.clone());
                        }
                        tokio::spawn(self.service.clone().serve_stream(request, respond));
                    }
                    Some(Err(e)) => return Err(e.into()),
                    None => return Ok(()),
                },
                () = wait_true(&mut self.draining), if !goaway_sent => {
                    if !used {
                        return Ok(());
                    }
                    // GOAWAY: no new streams; keep driving the connection so
                    // the calls in flight finish, then `accept` ends.
                    conn.graceful_shutdown();
                    goaway_sent = true;
                }
            }
        }
    }
}

/// Why a connection ended badly (logged at debug level: a client's problem).
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("HTTP/2: {0}")]
    H2(#[from] h2::Error),
}

async fn wait_true(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|d| *d).await;
}
