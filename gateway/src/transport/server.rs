//! The gRPC listener: an HTTP/2 accept loop (the `h2` crate) that drives any
//! service of [`Call`] to [`Answer`].
//!
//! The gateway runs its own loop rather than tonic's `Server`: an expired
//! `grpc-timeout` must answer DEADLINE_EXCEEDED (tonic's server layer answers
//! CANCELLED), central mode needs the peer certificate of each connection to
//! know the calling hub, draining on SIGTERM must be bounded, and an answer
//! should leave in one write ([`super::send`] queues headers, data and
//! trailers together). A bad connection (garbage bytes, a failed handshake)
//! only ends that connection.
//!
//! What a call means is the service's business: this loop only knows
//! streams, bytes and time. It hands each stream to the service with its
//! connection's [`Peer`] (identity and pending-bytes budget), queues the
//! answer, and bounds what a peer can hold: connections (in all and per IP
//! address), idle time (a long-lived answer stream, such as a health `Watch`,
//! does not count as activity), age, and a peer that stops reading.

// Why our own loop and not tonic's server: docs/decisions/0001-grpc-framing-on-h2.md;
// why calls are polled in the connection's task: docs/decisions/0004-calls-in-the-connection-task.md.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use rustls_pki_types::CertificateDer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::hub::Hub;

use super::accept::{self, Accepted};
use super::admission::{Admission, Bound, Established, Place};
use super::grpc::Payload;
use super::io::{Coalesce, READ_BUFFER};
use super::pending::{CallBytes, PendingBudget, Pool, Scope};
use super::reclaim;
use super::send::{self, Answer, Sent};

/// HTTP/2 settings and limits of the gRPC listener.
#[derive(Debug, Clone)]
pub(crate) struct ServerSettings {
    /// How long a drain waits for in-flight calls before closing connections.
    pub(crate) drain_timeout: Duration,
    pub(crate) max_concurrent_streams: u32,
    /// A connection that has not completed its TLS and HTTP/2 handshakes
    /// this long after it was accepted is closed.
    pub(crate) handshake_timeout: Duration,
    /// Connections still in their handshakes, in all (a newcomer over it
    /// takes the oldest one's place) and from one IP address (one more is
    /// closed at once): [`Admission`]. They do not count against
    /// `max_connections`.
    pub(crate) max_handshakes: usize,
    pub(crate) max_handshakes_per_ip: usize,
    /// Connections past their handshakes open at once; one more is closed
    /// as its handshakes end.
    pub(crate) max_connections: usize,
    /// Connections past their handshakes open at once from one IP address,
    /// so that one peer cannot take every connection.
    pub(crate) max_connections_per_ip: usize,
    /// A connection without a call in progress for this long gets a GOAWAY
    /// and is closed (zero: never). Long-lived answer streams (a health
    /// `Watch`) are not calls in progress.
    pub(crate) idle_timeout: Duration,
    /// A connection this old gets a GOAWAY (no new calls), and is closed
    /// `max_connection_age_grace` later whatever is still running on it: a
    /// client certificate is checked only at the handshake, so this bounds
    /// how long a revoked one keeps working (zero: never).
    pub(crate) max_connection_age: Duration,
    pub(crate) max_connection_age_grace: Duration,
    /// Bytes one connection's calls may hold, from each request's first
    /// byte until its answer is written to the socket ([`CallBytes`]).
    pub(crate) max_pending_bytes_per_connection: usize,
    /// A peer that takes none of an answer (or of the connection's writes)
    /// for this long is cut off: its connection is closed.
    pub(crate) send_timeout: Duration,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            drain_timeout: Duration::from_secs(10),
            max_concurrent_streams: 1024,
            handshake_timeout: Duration::from_secs(10),
            max_handshakes: 256,
            max_handshakes_per_ip: 32,
            max_connections: 1024,
            max_connections_per_ip: 256,
            idle_timeout: Duration::from_secs(300),
            max_connection_age: Duration::from_secs(3600),
            max_connection_age_grace: Duration::from_secs(30),
            max_pending_bytes_per_connection: 64 * 1024 * 1024,
            send_timeout: Duration::from_secs(30),
        }
    }
}

/// What the server knows of the connection a call came on.
#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) addr: SocketAddr,
    /// The identity its verified client certificate names ([`Handshake::identify`]).
    pub(crate) identity: Option<Hub>,
    /// The pools the connection's buffered bytes are held against.
    pub(crate) budget: PendingBudget,
}

/// One call: a request whose body may still be arriving, and its connection.
#[derive(Debug)]
pub(crate) struct Call {
    pub(crate) head: http::request::Parts,
    pub(crate) body: h2::RecvStream,
    pub(crate) peer: Arc<Peer>,
    /// The bytes the call holds, until its answer is taken: the request's
    /// as it arrives and while the call runs, the plugins' answers while
    /// they live, then its own answer's (see [`CallBytes`]). Also in the
    /// head's extensions, for the layers that read those answers.
    pub(crate) held: CallBytes,
}

/// The TLS side of the listener, when it serves TLS.
pub(crate) trait Handshake: Send + Sync + 'static {
    /// The acceptor for the next connection (so a reloaded certificate
    /// applies to the next handshake).
    fn acceptor(&self) -> tokio_rustls::TlsAcceptor;
    /// The identity a connection's verified client certificates name, if
    /// client certificates are required.
    fn identify(&self, certificates: Option<&[CertificateDer<'static>]>) -> Option<Hub>;
}

/// The service every call on the listener goes through. It must always be
/// ready (the loop calls it without `poll_ready`, as `tower::util::BoxCloneSyncService`
/// and the gateway's stack are).
pub(crate) trait CallService:
    tower::Service<Call, Response = Answer, Error = Infallible, Future = Self::Answering>
    + Clone
    + Send
    + 'static
{
    type Answering: Future<Output = Result<Answer, Infallible>> + Send + 'static;
}

impl<S> CallService for S
where
    S: tower::Service<Call, Response = Answer, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Answering = S::Future;
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
/// accepting, lets in-flight calls finish (up to the drain timeout) and
/// returns once every connection is closed.
///
/// On drain, a connection that has carried a request gets a GOAWAY and ends
/// when its calls are done; one that never carried a request (still in the
/// handshake, or a peer that connected and said nothing) is closed at once,
/// so a silent peer cannot hold the drain for its whole timeout. At the
/// drain timeout the connections left are closed, and the calls on them
/// dropped. `pending` is the gateway-wide pool of bytes held for peers,
/// shared by every connection.
pub(crate) async fn serve<S: CallService>(
    listener: TcpListener,
    service: S,
    settings: ServerSettings,
    tls: Option<Arc<dyn Handshake>>,
    pending: Arc<Pool>,
    shutdown: impl Future<Output = ()>,
) {
    let (draining_tx, draining) = watch::channel(false);
    // Every connection task, so the drain can wait for them and then end them.
    let mut connections = JoinSet::new();
    let handshakes = Admission::new(settings.max_handshakes, settings.max_handshakes_per_ip);
    let established = Established::default();
    // Every task is a connection in its handshakes or past them.
    let max_tasks = settings
        .max_connections
        .saturating_add(settings.max_handshakes);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = match accept::next(
            &listener,
            &mut connections,
            max_tasks,
            shutdown.as_mut(),
        )
        .await
        {
            Accepted::Open(stream, peer) => (stream, peer),
            Accepted::Refused(peer) => {
                tracing::debug!(%peer, "refusing a connection: --max-connections and --max-handshakes reached");
                continue;
            }
            Accepted::Shutdown => break,
        };
        let Some(place) = handshakes.admit(peer.ip()) else {
            tracing::debug!(%peer, max = settings.max_handshakes_per_ip, "refusing a connection: --max-handshakes-per-ip reached");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let conn = Connection {
            builder: h2_builder(&settings),
            settings: settings.clone(),
            draining: draining.clone(),
            tls: tls.clone(),
            pending: pending.clone(),
            established: established.clone(),
            peer,
        };
        let service = service.clone();
        connections.spawn(async move {
            if let Err(error) = conn.run(stream, place, service).await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = draining_tx.send(true);
    tracing::info!(connections = connections.len(), "draining");
    let all_closed = async { while connections.join_next().await.is_some() {} };
    tokio::select! {
        () = all_closed => tracing::info!("drained"),
        () = tokio::time::sleep(settings.drain_timeout) => {
            tracing::warn!(timeout_secs = settings.drain_timeout.as_secs(), connections = connections.len(), "drain timed out; closing the remaining connections");
        }
    }
    // Ends every connection task left, which drops its socket and its calls.
    connections.shutdown().await;
}

struct Connection {
    builder: h2::server::Builder,
    settings: ServerSettings,
    draining: watch::Receiver<bool>,
    tls: Option<Arc<dyn Handshake>>,
    pending: Arc<Pool>,
    established: Established,
    peer: SocketAddr,
}

/// Why the gateway is closing a connection (for the log).
#[derive(Debug, Clone, Copy)]
enum Closing {
    Idle,
    MaxAge,
}

impl Connection {
    /// The connection's handshakes, in its [`Admission`] place and within
    /// the handshake timeout from when it was accepted; then, in a place
    /// among the established connections, its calls.
    async fn run<S: CallService>(
        self,
        stream: TcpStream,
        place: Place,
        service: S,
    ) -> Result<(), ConnectionError> {
        let accepted = Instant::now();
        // Its first byte moves it behind the silent connections in the
        // order they give way (see `Admission`). A byte seen, not the
        // socket's readiness: `readable()` may resolve with nothing to
        // read, which would let a silent peer pass for one that spoke.
        let mut first = [0u8; 1];
        match self
            .in_handshake(&place, accepted, stream.peek(&mut first))
            .await
        {
            Some(Ok(n)) if n > 0 => place.spoke(),
            // Out of time or place, closed before a byte, or a socket error.
            _ => return Ok(()),
        }
        let Some(tls) = self.tls.clone() else {
            return self.admitted(stream, None, place, accepted, service).await;
        };
        let accept = tls.acceptor().accept(stream);
        let Some(stream) = self.in_handshake(&place, accepted, accept).await else {
            return Ok(());
        };
        let stream = stream.map_err(ConnectionError::Tls)?;
        let identity = tls.identify(stream.get_ref().1.peer_certificates());
        self.admitted(stream, identity, place, accepted, service)
            .await
    }

    /// `step` of the handshakes, or `None` if the handshake timeout passes,
    /// a newer connection takes the place, or a drain starts first (before
    /// the peer even said hello: nothing to finish).
    async fn in_handshake<F: Future>(
        &self,
        place: &Place,
        accepted: Instant,
        step: F,
    ) -> Option<F::Output> {
        let deadline = accepted + self.settings.handshake_timeout;
        tokio::select! {
            done = tokio::time::timeout_at(deadline, step) => done.ok(),
            () = place.evicted() => {
                tracing::debug!(peer = %self.peer, "closing a connection in its handshake: a newer one took its place (--max-handshakes)");
                None
            }
            () = wait_true(self.draining.clone()) => None,
        }
    }

    /// The HTTP/2 handshake in the connection's place; then the place is
    /// given back for one among the established connections, and the
    /// connection served.
    async fn admitted<T, S>(
        self,
        io: T,
        identity: Option<Hub>,
        place: Place,
        accepted: Instant,
        service: S,
    ) -> Result<(), ConnectionError>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: CallService,
    {
        // A read buffer in front of the socket: a whole small request arrives in
        // one read instead of two (h2's own buffer splits at its free space).
        // Writes the peer does not take within the send timeout end the
        // connection.
        let io = Coalesce::new(tokio::io::BufReader::with_capacity(READ_BUFFER, io))
            .with_stall_timeout(self.settings.send_timeout);
        let handshake = self.builder.handshake::<_, Payload>(io);
        let Some(conn) = self.in_handshake(&place, accepted, handshake).await else {
            return Ok(());
        };
        let conn = conn?;
        drop(place);
        let settings = &self.settings;
        let _slot = self
            .established
            .take(
                self.peer.ip(),
                settings.max_connections,
                settings.max_connections_per_ip,
            )
            .map_err(|bound| {
                ConnectionError::Full(match bound {
                    Bound::All => "--max-connections",
                    Bound::PerIp => "--max-connections-per-ip",
                })
            })?;
        self.serve_h2(conn, identity, accepted, service).await
    }

    /// The connection's [`Peer`]: its address, identity and budget of
    /// pending bytes (its own pool, and the gateway's).
    fn peer(&self, identity: Option<Hub>) -> Arc<Peer> {
        Arc::new(Peer {
            addr: self.peer,
            identity,
            budget: PendingBudget {
                connection: Arc::new(Pool::new(
                    self.settings.max_pending_bytes_per_connection,
                    Scope::Connection,
                )),
                gateway: self.pending.clone(),
            },
        })
    }

    /// Serves HTTP/2 on `io` until the peer or the gateway ends it: each
    /// stream is a call driven in this task, and timers close the
    /// connection when idle, too old, or draining.
    async fn serve_h2<T, S>(
        self,
        mut conn: H2Connection<T>,
        identity: Option<Hub>,
        accepted: Instant,
        service: S,
    ) -> Result<(), ConnectionError>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: CallService,
    {
        let mut s = Serving::new(service, self.peer(identity), self.settings.send_timeout);
        // Once the connection ends, whatever its calls held is freed: have
        // it returned to the OS.
        let _reclaim = Reclaim(s.peer.budget.connection.clone());
        let idle_timeout = or_forever(self.settings.idle_timeout);
        // The idle timer is not re-armed per call: when it fires, it is
        // pushed to `idle_since + idle_timeout` if a call came and went in
        // between.
        let idle = tokio::time::sleep(idle_timeout);
        let max_age =
            tokio::time::sleep_until(accepted + or_forever(self.settings.max_connection_age));
        // Armed once the gateway decides to close: the end of the GOAWAY's grace.
        let grace_over = tokio::time::sleep(FOREVER);
        // One waiter for the whole connection, not a new one per poll.
        let draining = wait_true(self.draining.clone());
        tokio::pin!(idle, max_age, grace_over, draining);
        loop {
            let next = tokio::select! {
                // The connection first, then the calls: a call that ends
                // queues its answer and the loop comes straight back here,
                // which flushes it without a wakeup. (The calls first made
                // answers wait for every ready call, and measured fewer
                // calls/s at 32 in flight.)
                biased;
                next = conn.accept() => s.accepted(next),
                Some(sent) = s.calls.next(), if !s.calls.is_empty() => s.call_sent(sent),
                Some(sent) = s.lasting.next(), if !s.lasting.is_empty() => s.lasting_sent(sent),
                () = &mut idle, if s.calls.is_empty() && s.closing.is_none() => {
                    let due = s.idle_since + idle_timeout;
                    if due > Instant::now() {
                        idle.as_mut().reset(due);
                        Next::Continue
                    } else {
                        Next::Close(Closing::Idle, IDLE_GRACE)
                    }
                }
                () = &mut max_age, if s.closing.is_none() => {
                    Next::Close(Closing::MaxAge, self.settings.max_connection_age_grace)
                }
                () = &mut draining, if !s.goaway_sent => s.draining(&mut conn),
                () = &mut grace_over => {
                    tracing::debug!(reason = ?s.closing, open_calls = s.calls.len(), lasting = s.lasting.len(), "closing the connection: its GOAWAY grace is over");
                    Next::End(Ok(()))
                }
            };
            match next {
                Next::Continue => {}
                Next::End(result) => return result,
                Next::Close(reason, grace) => {
                    s.close(&mut conn, reason, grace);
                    grace_over.as_mut().reset(Instant::now() + grace);
                }
            }
        }
    }
}

/// What [`Connection::serve_h2`]'s loop does after one event.
enum Next {
    Continue,
    /// Close the connection for `reason`, giving the calls in flight the
    /// grace.
    Close(Closing, Duration),
    /// The connection is over.
    End(Result<(), ConnectionError>),
}

/// The calls of one connection, and where it stands in closing.
struct Serving<S> {
    service: S,
    peer: Arc<Peer>,
    send_timeout: Duration,
    /// The calls of this connection, driven inside its task rather than
    /// spawned: a call's wakeups (its request, the plugin's answer) are
    /// then polls of this one task, with no task of its own to schedule per
    /// call, and its answer is flushed in the same poll that queued it.
    /// Dropped with the connection, so closing it ends them.
    calls: FuturesUnordered<BoxFuture<'static, Sent>>,
    /// Answer streams that last (a health Watch): driven the same way, but
    /// they do not keep the connection from being idle.
    lasting: FuturesUnordered<BoxFuture<'static, Sent>>,
    /// Whether the connection has carried a request.
    used: bool,
    goaway_sent: bool,
    /// When the connection last became idle.
    idle_since: Instant,
    closing: Option<Closing>,
}

/// What `h2::server::Connection::accept` yields.
type NextStream = Option<Result<(http::Request<h2::RecvStream>, Respond), h2::Error>>;
type Respond = h2::server::SendResponse<Payload>;

impl<S: CallService> Serving<S> {
    fn new(service: S, peer: Arc<Peer>, send_timeout: Duration) -> Serving<S> {
        Serving {
            service,
            peer,
            send_timeout,
            calls: FuturesUnordered::new(),
            lasting: FuturesUnordered::new(),
            used: false,
            goaway_sent: false,
            idle_since: Instant::now(),
            closing: None,
        }
    }

    /// A new stream is a call, started here and driven with the others; the
    /// connection ending ends the loop.
    fn accepted(&mut self, next: NextStream) -> Next {
        let (request, respond) = match next {
            Some(Ok(stream)) => stream,
            Some(Err(e)) => return Next::End(Err(e.into())),
            None => return Next::End(Ok(())),
        };
        self.used = true;
        let (mut head, body) = request.into_parts();
        let held = CallBytes::new(self.peer.budget.clone());
        // For whatever reads messages for the call further down (the
        // plugins' answers), so that they are held with it.
        head.extensions.insert(held.clone());
        let call = Call {
            head,
            body,
            peer: self.peer.clone(),
            held: held.clone(),
        };
        // Called without a clone per call: the services of the stack are
        // always ready.
        let answering = self.service.call(call);
        let driven = send::drive(
            answering,
            respond,
            self.peer.clone(),
            held,
            self.send_timeout,
        );
        // A call that panics ends alone, as a spawned task would (its stream
        // is reset when dropped).
        self.calls.push(
            AssertUnwindSafe(driven)
                .catch_unwind()
                .map(|r| r.unwrap_or(Sent::Done))
                .boxed(),
        );
        Next::Continue
    }

    /// A call's answer is sent (or goes on as a lasting stream, or stalled).
    fn call_sent(&mut self, sent: Sent) -> Next {
        match sent {
            Sent::Done => {}
            Sent::Lasting(rest) if self.lasting.len() < MAX_LASTING => self.lasting.push(rest),
            // Dropped: its stream is reset (CANCEL).
            Sent::Lasting(_) => {
                tracing::debug!(peer = %self.peer.addr, max = MAX_LASTING, "answer stream refused: too many open on this connection");
            }
            Sent::Stalled => return Next::End(Err(ConnectionError::Stalled(self.send_timeout))),
        }
        if self.calls.is_empty() {
            self.idle_since = Instant::now();
            // Draining: answer streams that last are not waited for.
            if self.goaway_sent && self.closing.is_none() && !self.lasting.is_empty() {
                return Next::End(Ok(()));
            }
        }
        Next::Continue
    }

    /// A lasting answer stream ended; a peer that stopped taking it ends the
    /// connection.
    fn lasting_sent(&self, sent: Sent) -> Next {
        match sent {
            Sent::Stalled => Next::End(Err(ConnectionError::Stalled(self.send_timeout))),
            Sent::Done | Sent::Lasting(_) => Next::Continue,
        }
    }

    /// The gateway drains: a connection that never carried a request is
    /// closed at once; others get a GOAWAY (no new streams) and go on so
    /// the calls in flight finish (until the drain timeout).
    fn draining<T>(&mut self, conn: &mut H2Connection<T>) -> Next
    where
        T: AsyncRead + AsyncWrite + Unpin,
    {
        if !self.used {
            return Next::End(Ok(()));
        }
        conn.graceful_shutdown();
        self.goaway_sent = true;
        // Answer streams that last (a Watch) are not waited for.
        if self.calls.is_empty() && !self.lasting.is_empty() {
            return Next::End(Ok(()));
        }
        Next::Continue
    }

    /// GOAWAY now (no new calls; those in flight go on); the caller closes
    /// the socket when they are done or after the grace, whichever comes
    /// first.
    fn close<T>(&mut self, conn: &mut H2Connection<T>, reason: Closing, grace: Duration)
    where
        T: AsyncRead + AsyncWrite + Unpin,
    {
        tracing::debug!(
            ?reason,
            grace_ms = grace.as_millis(),
            "closing the connection: GOAWAY"
        );
        self.closing = Some(reason);
        if !self.goaway_sent {
            conn.graceful_shutdown();
            self.goaway_sent = true;
        }
    }
}

/// A server connection over a socket, as [`Connection::admitted`] makes it.
type H2Connection<T> = h2::server::Connection<Coalesce<tokio::io::BufReader<T>>, Payload>;

/// On drop (the connection is over), returns the memory its calls held
/// to the OS, if they held any.
struct Reclaim(Arc<Pool>);

impl Drop for Reclaim {
    fn drop(&mut self) {
        if self.0.peak() > 0 {
            reclaim::soon();
        }
    }
}

/// A deadline that never comes (a timer not armed yet).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A zero timeout (the flags' "never") as one that never comes.
fn or_forever(d: Duration) -> Duration {
    if d.is_zero() { FOREVER } else { d }
}

/// Answer streams that last (health `Watch`es) open at once on one
/// connection; one more is reset. Each holds a little memory for as long as
/// its connection lives, which nothing else bounds.
const MAX_LASTING: usize = 16;

/// How long an idle connection's peer has, after the GOAWAY, to close it.
const IDLE_GRACE: Duration = Duration::from_secs(1);

/// Why a connection ended badly (logged at debug level: a client's problem).
#[derive(Debug, thiserror::Error)]
enum ConnectionError {
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("HTTP/2: {0}")]
    H2(#[from] h2::Error),
    #[error("the peer took no answer bytes for {0:?} (--send-timeout)")]
    Stalled(Duration),
    #[error("closed after its handshakes: {0} reached")]
    Full(&'static str),
}

async fn wait_true(mut flag: watch::Receiver<bool>) {
    let _ = flag.wait_for(|d| *d).await;
}

#[cfg(test)]
mod tests;
