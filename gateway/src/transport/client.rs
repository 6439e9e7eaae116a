//! Connections to plugins: dialling (TCP, then TLS trusting the plugin's own
//! CA bundle when it has one, configured by `rollout_wire::client_config`),
//! the HTTP/2 client handshake, and a keepalive that notices a dead peer. What a plugin's connection is used for, and the
//! state kept per plugin, is the upstream's; this module takes plain values
//! and imports nothing above the transport.

// Why our own client and not tonic's `Channel`: docs/decisions/0001-grpc-framing-on-h2.md.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use h2::client::SendRequest;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

use crate::transport::grpc::Payload;

/// An HTTP/2 connection to a plugin: the handle to open streams, whether
/// the connection has ended, whether it was retired (it refused a stream
/// because it is going away; either way the next call dials anew), and
/// whether the plugin ever answered a stream on it.
pub(crate) struct PluginConnection {
    sender: SendRequest<Payload>,
    closed: Arc<AtomicBool>,
    /// Set (before `closed`) when the connection ended after the plugin's
    /// GOAWAY with NO_ERROR: a graceful stop, not a crash.
    graceful: Arc<AtomicBool>,
    retired: AtomicBool,
    /// Whether its graceful end was noticed.
    noticed: AtomicBool,
    /// Whether the plugin has answered a stream on it (sent response
    /// headers): work was processed on it.
    answered: AtomicBool,
    /// When the connection was made.
    dialled_at: tokio::time::Instant,
}

impl PluginConnection {
    /// The handle to open streams on.
    pub(crate) fn sender(&self) -> SendRequest<Payload> {
        self.sender.clone()
    }

    /// Whether the connection has ended (a new one must be dialled).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Whether the connection has ended after the plugin's graceful GOAWAY,
    /// answered `true` once only.
    pub(crate) fn notice_graceful_end(&self) -> bool {
        self.graceful.load(Ordering::Relaxed) && !self.noticed.swap(true, Ordering::Relaxed)
    }

    /// Takes the connection out of use for new calls; the streams open on
    /// it go on until they end.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }

    /// Whether new calls may use the connection.
    pub(crate) fn is_usable(&self) -> bool {
        !self.is_closed() && !self.retired.load(Ordering::Relaxed)
    }

    /// Records that the plugin answered a stream on this connection.
    pub(crate) fn answered(&self) {
        self.answered.store(true, Ordering::Relaxed);
    }

    /// Whether the plugin has answered any stream on this connection.
    pub(crate) fn has_answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }

    /// When the connection was made.
    pub(crate) fn dialled_at(&self) -> tokio::time::Instant {
        self.dialled_at
    }
}

/// Why a plugin could not be dialled; each names the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: std::io::Error,
    },
    #[error("TLS handshake with {endpoint} failed: {why}")]
    Tls { endpoint: String, why: String },
    #[error("HTTP/2 handshake with {endpoint} failed: {source}")]
    Handshake { endpoint: String, source: h2::Error },
}

/// The largest header block accepted from a plugin, as from callers: a
/// plugin's answer carries a few short headers and trailers.
pub(crate) const MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;

/// How often an idle-or-not connection is pinged, and how long a ping may
/// wait for its answer before the connection is given up.
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Dials `host:port`: TCP, then TLS with `tls` (the client configuration and
/// the name the certificate must carry) when given, then the HTTP/2
/// handshake. The error says which step failed, naming the endpoint.
pub(crate) async fn dial(
    host: &str,
    port: u16,
    tls: Option<&(Arc<rustls::ClientConfig>, ServerName<'static>)>,
) -> Result<Arc<PluginConnection>, DialError> {
    let label = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let tcp = TcpStream::connect((host, port))
        .await
        .map_err(|source| DialError::Connect {
            endpoint: label.clone(),
            source,
        })?;
    let _ = tcp.set_nodelay(true);
    // A read buffer in front of the socket: a whole small answer arrives
    // in one read instead of two.
    let read_buffer = crate::transport::io::READ_BUFFER;
    match tls {
        None => handshake(tokio::io::BufReader::with_capacity(read_buffer, tcp), label).await,
        Some((config, name)) => {
            let tls = tokio_rustls::TlsConnector::from(config.clone())
                .connect(name.clone(), tcp)
                .await
                .map_err(|e| DialError::Tls {
                    endpoint: label.clone(),
                    why: chain(&e),
                })?;
            handshake(tokio::io::BufReader::with_capacity(read_buffer, tls), label).await
        }
    }
}

async fn handshake<T>(io: T, endpoint: String) -> Result<Arc<PluginConnection>, DialError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, mut connection) = h2::client::Builder::new()
        // Large windows: a 64 KiB ManifestWork must not wait for a
        // WINDOW_UPDATE round trip, and multi-MiB ones should stream.
        .initial_window_size(4 * 1024 * 1024)
        .initial_connection_window_size(8 * 1024 * 1024)
        // Large frames: an answer up to 1 MiB arrives in one frame.
        .max_frame_size(1024 * 1024)
        .max_send_buffer_size(4 * 1024 * 1024)
        // A plugin has no business pushing: SETTINGS_ENABLE_PUSH=0, so a
        // PUSH_PROMISE is a protocol error rather than bytes held.
        .enable_push(false)
        // Header blocks bounded as callers' are.
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .handshake::<_, Payload>(io)
        .await
        .map_err(|source| DialError::Handshake {
            endpoint: endpoint.clone(),
            source,
        })?;
    let plugin_connection = Arc::new(PluginConnection {
        sender,
        closed: Arc::new(AtomicBool::new(false)),
        graceful: Arc::new(AtomicBool::new(false)),
        retired: AtomicBool::new(false),
        noticed: AtomicBool::new(false),
        answered: AtomicBool::new(false),
        dialled_at: tokio::time::Instant::now(),
    });
    let ping = connection.ping_pong();
    let flag = plugin_connection.closed.clone();
    let graceful_flag = plugin_connection.graceful.clone();
    // Weak: a connection nobody holds any more closes when idle, as h2
    // closes a client connection whose handles are all dropped.
    let handle = Arc::downgrade(&plugin_connection);
    tokio::spawn(async move {
        let keepalive = async {
            let Some(mut ping) = ping else {
                return std::future::pending::<String>().await;
            };
            loop {
                tokio::time::sleep(PING_EVERY).await;
                match tokio::time::timeout(PING_TIMEOUT, ping.ping(h2::Ping::opaque())).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return format!("keepalive ping failed: {e}"),
                    Err(_) => return "keepalive ping unanswered".to_string(),
                }
            }
        };
        let ended = tokio::select! {
            result = connection => result.err().map(|e| e.to_string()),
            why = keepalive => Some(why),
        };
        // Asked once the connection has ended, a handle answers with the
        // error that ended it: a GOAWAY's when the plugin sent one.
        let probe = handle.upgrade().map(|c| c.sender());
        if let Some(probe) = probe
            && let Err(e) = probe.ready().await
            && e.is_go_away()
            && e.is_remote()
            && e.reason() == Some(h2::Reason::NO_ERROR)
        {
            graceful_flag.store(true, Ordering::Relaxed);
        }
        flag.store(true, Ordering::Relaxed);
        if let Some(error) = ended {
            tracing::debug!(%endpoint, %error, "plugin connection closed");
        }
    });
    Ok(plugin_connection)
}

/// An error with its sources, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
