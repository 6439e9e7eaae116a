//! One plugin as the gateway reaches it: an HTTP/2 connection (plaintext, or
//! TLS trusting the plugin's own CA bundle alone), and what the gateway has
//! learned of the hooks it implements. Calls are framed by [`crate::grpc`]
//! and queued on an `h2` stream whole, so a request leaves in one write.
//!
//! An [`Upstream`] outlives registry reloads for as long as its
//! [`UpstreamKey`] (endpoint and TLS settings) does not change, so the
//! connection, and the knowledge gathered on it, is kept.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwapOption;
use std::time::Duration;

use h2::client::SendRequest;
use http::{HeaderMap, HeaderValue};
use rollout_proto::v1alpha1::{
    Hook, InitializeResponse, MutateManifestWorkResponse, ValidateResponse,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tonic::{Code, Status};

use rollout_policies::breaker::{Breaker, BreakerState};
use rollout_policies::budget::RetryBudget;
use rollout_policies::layer::ConcurrencyLimitLayer;
use rollout_policies::{BudgetPolicy, Policy};

use crate::error::{CallError, DeadlineOwner};
use crate::grpc::{self, Payload};

use crate::config::{Endpoint, Transport};
use crate::hooks::{HookKind, HookRequest, HookResponse};

/// What makes two registry entries the same connection: a plugin whose key did
/// not change across a reload keeps its [`Upstream`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamKey {
    pub endpoint: Endpoint,
    pub transport: Transport,
    /// The gateway's client certificate and key (PEM), when it presents one.
    pub client_identity: Option<ClientIdentity>,
}

/// A client certificate chain and key, as PEM bytes read from the configured files.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClientIdentity {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl std::fmt::Debug for ClientIdentity {
    // The key is a secret: never print it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ClientIdentity {{ cert: {} bytes, key: <redacted> }}",
            self.cert_pem.len()
        )
    }
}

/// Settings shared by every upstream connection.
#[derive(Debug, Clone)]
pub struct ChannelSettings {
    /// Largest message sent to or accepted from a plugin.
    pub max_message_bytes: usize,
    pub connect_timeout: Duration,
}

impl Default for ChannelSettings {
    fn default() -> Self {
        ChannelSettings {
            max_message_bytes: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Bit set in [`Upstream::hooks`] once an `InitializeResponse` has been seen.
const HOOKS_KNOWN: u8 = 1 << 7;

/// A connection to one plugin: one HTTP/2 connection, dialled on first use
/// and again whenever it has closed, shared by every call.
pub struct Upstream {
    key: UpstreamKey,
    settings: ChannelSettings,
    /// The URI of each method, built once: `SCHEME://HOST:PORT/SERVICE/METHOD`.
    uris: MethodUris,
    tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// The current connection; read on every call, so lock-free.
    conn: ArcSwapOption<Conn>,
    /// Held while dialling, so concurrent calls share one new connection.
    dialling: tokio::sync::Mutex<()>,
    /// `HOOKS_KNOWN` plus one bit per implemented `Hook` (bit = enum value).
    hooks: AtomicU8,
    /// The concurrency bound, circuit breaker and retry budget of the plugin:
    /// they live as long as its connection settings do, across reloads.
    limit: ConcurrencyLimitLayer,
    breaker: Arc<Mutex<Breaker>>,
    budget: Arc<Mutex<RetryBudget>>,
    budget_policy: Mutex<BudgetPolicy>,
}

impl std::fmt::Debug for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstream")
            .field("endpoint", &self.key.endpoint.to_string())
            .finish_non_exhaustive()
    }
}

/// An upstream could not be set up (bad TLS material).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UpstreamError(String);

impl Upstream {
    /// Prepares the upstream; nothing is dialled until the first call.
    pub fn new(
        key: UpstreamKey,
        settings: &ChannelSettings,
        policy: &Policy,
    ) -> Result<Upstream, UpstreamError> {
        let tls = match &key.transport {
            Transport::Plaintext => None,
            Transport::Tls { ca_bundle_pem } => {
                let config =
                    tls_config(ca_bundle_pem, key.client_identity.as_ref()).map_err(|e| {
                        UpstreamError(format!("TLS settings for {}: {e}", key.endpoint))
                    })?;
                let name = ServerName::try_from(key.endpoint.host.clone()).map_err(|e| {
                    UpstreamError(format!(
                        "{} is not a valid TLS server name: {e}",
                        key.endpoint.host
                    ))
                })?;
                Some((Arc::new(config), name))
            }
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let uris = MethodUris::new(&format!("{scheme}://{}", key.endpoint))
            .map_err(|e| UpstreamError(format!("invalid endpoint {}: {e}", key.endpoint)))?;
        Ok(Upstream {
            uris,
            key,
            settings: settings.clone(),
            tls,
            conn: ArcSwapOption::empty(),
            dialling: tokio::sync::Mutex::new(()),
            hooks: AtomicU8::new(0),
            limit: ConcurrencyLimitLayer::new(policy.max_concurrent_calls),
            breaker: Arc::new(Mutex::new(Breaker::new(&policy.circuit_breaker))),
            budget: Arc::new(Mutex::new(RetryBudget::new(&policy.retry_budget, now()))),
            budget_policy: Mutex::new(policy.retry_budget.clone()),
        })
    }

    /// Applies the policy of a new registry snapshot to the state this
    /// upstream keeps: the concurrency bound is resized and keeps counting
    /// the calls in flight; the breaker keeps its state under new thresholds;
    /// the budget starts over only if its own settings changed. Called only
    /// once the snapshot is committed.
    pub fn update_policy(&self, policy: &Policy) {
        self.limit.set_max(policy.max_concurrent_calls);
        lock(&self.breaker).set_policy(&policy.circuit_breaker);
        let mut current = lock(&self.budget_policy);
        if *current != policy.retry_budget {
            *lock(&self.budget) = RetryBudget::new(&policy.retry_budget, now());
            *current = policy.retry_budget.clone();
        }
    }

    /// The plugin's concurrency bound (shared with its stack).
    pub fn limit(&self) -> ConcurrencyLimitLayer {
        self.limit.clone()
    }

    /// The settings of the state kept across reloads, for `/debug/plugins`
    /// and tests: the concurrency bound, and the breaker's and budget's
    /// policies.
    pub fn kept_settings(&self) -> (usize, rollout_policies::BreakerPolicy, BudgetPolicy) {
        (
            self.limit.max(),
            lock(&self.breaker).policy().clone(),
            lock(&self.budget_policy).clone(),
        )
    }

    /// The plugin's circuit breaker (shared with its stack).
    pub fn breaker(&self) -> Arc<Mutex<Breaker>> {
        self.breaker.clone()
    }

    /// The plugin's retry budget (shared with its stack).
    pub fn retry_budget(&self) -> Arc<Mutex<RetryBudget>> {
        self.budget.clone()
    }

    /// The circuit's state now, and the failures in a row so far.
    pub fn circuit(&self) -> (BreakerState, u32) {
        let breaker = lock(&self.breaker);
        (breaker.state(now()), breaker.consecutive_failures())
    }

    pub fn key(&self) -> &UpstreamKey {
        &self.key
    }

    /// Whether the plugin is known to leave `kind` out. Unknown (no
    /// `InitializeResponse` seen yet) means it is called, and an UNIMPLEMENTED
    /// answer skips it then.
    pub fn skips(&self, kind: HookKind) -> bool {
        let Some(hook) = kind.proto_hook() else {
            return false;
        };
        let bits = self.hooks.load(Ordering::Relaxed);
        bits & HOOKS_KNOWN != 0 && bits & (1 << hook as u8) == 0
    }

    /// Records the hooks of the latest `InitializeResponse` seen from the plugin.
    pub fn learn(&self, answer: &InitializeResponse) {
        let mut bits = HOOKS_KNOWN;
        if answer.hooks.is_empty() {
            for h in Hook::ALL {
                bits |= 1 << h as u8;
            }
        } else {
            for h in &answer.hooks {
                if let Ok(h) = Hook::try_from(*h)
                    && h != Hook::Unspecified
                {
                    bits |= 1 << h as u8;
                }
            }
        }
        self.hooks.store(bits, Ordering::Relaxed);
    }

    /// The hooks learned so far, by name; `None` when none was learned.
    pub fn known_hooks(&self) -> Option<Vec<&'static str>> {
        let bits = self.hooks.load(Ordering::Relaxed);
        (bits & HOOKS_KNOWN != 0).then(|| {
            Hook::ALL
                .iter()
                .filter(|h| bits & (1 << **h as u8) != 0)
                .map(|h| h.name())
                .collect()
        })
    }

    /// One call to the plugin, bounded by `deadline` (whose deadline it is:
    /// `owner`), whose remaining time is sent on as the plugin's
    /// `grpc-timeout`. `forward` holds the caller's headers to pass on (trace
    /// context).
    ///
    /// Errors: the plugin's own status ([`CallError::Plugin`]);
    /// [`CallError::Expired`] when the deadline passes first or the plugin
    /// says it did; [`CallError::DeadlineBeforeCall`];
    /// [`CallError::Unreachable`] when the plugin cannot be reached (the
    /// message says why: connection refused, TLS certificate verification…);
    /// [`CallError::Undecodable`] / [`CallError::TooLarge`] for an answer the
    /// gateway cannot take.
    pub async fn call(
        &self,
        request: HookRequest,
        deadline: Instant,
        owner: DeadlineOwner,
        forward: &HeaderMap,
    ) -> Result<HookResponse, CallError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(CallError::DeadlineBeforeCall);
        }
        let expired = || CallError::Expired {
            owner,
            message: format!("no answer within {} ms", remaining.as_millis()),
        };
        let call = async {
            let kind = request.kind();
            let payload = request.payload();
            match kind {
                HookKind::Initialize => self
                    .unary::<InitializeResponse>(kind, payload, deadline, forward)
                    .await
                    .map(HookResponse::Initialize),
                HookKind::BeginRollout | HookKind::ProgressRollout => self
                    .unary::<()>(kind, payload, deadline, forward)
                    .await
                    .map(|()| HookResponse::Empty),
                HookKind::ValidateRolloutCompletion => self
                    .unary::<ValidateResponse>(kind, payload, deadline, forward)
                    .await
                    .map(HookResponse::ValidateRolloutCompletion),
                HookKind::MutateManifestWork => self
                    .unary::<MutateManifestWorkResponse>(kind, payload, deadline, forward)
                    .await
                    .map(HookResponse::MutateManifestWork),
            }
        };
        match tokio::time::timeout_at(deadline, call).await {
            Ok(Ok(answer)) => {
                if let HookResponse::Initialize(init) = &answer {
                    self.learn(init);
                }
                Ok(answer)
            }
            Ok(Err(Failed::Call(error))) => Err(error),
            // A plugin server that gave up on the forwarded `grpc-timeout`
            // answers DEADLINE_EXCEEDED (or CANCELLED, as tonic's does): that
            // is the deadline passing, whoever's it was.
            Ok(Err(Failed::Plugin(status)))
                if matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled) =>
            {
                Err(CallError::Expired {
                    owner,
                    message: status.message().to_string(),
                })
            }
            Ok(Err(Failed::Plugin(status))) => Err(CallError::Plugin(status)),
            Err(_) => Err(expired()),
        }
    }

    async fn unary<Resp: prost::Message + Default>(
        &self,
        method: HookKind,
        payload: Payload,
        deadline: Instant,
        forward: &HeaderMap,
    ) -> Result<Resp, Failed> {
        let sender = self.sender(deadline).await?;
        let unavailable = |e: h2::Error| {
            Failed::Call(CallError::Unreachable(format!(
                "request to {} failed: {e}",
                self.key.endpoint
            )))
        };
        // Waits while the plugin's stream limit is reached.
        let mut sender = sender.ready().await.map_err(unavailable)?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let mut request = http::Request::new(());
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.uris.get(method);
        let headers = request.headers_mut();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(grpc::CONTENT_TYPE),
        );
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
        headers.insert("grpc-timeout", grpc::encode_timeout(remaining));
        headers.insert(
            http::header::USER_AGENT,
            HeaderValue::from_static(USER_AGENT),
        );
        // What the gateway can read: gzip is what gRPC libraries send when
        // compression is switched on.
        headers.insert(
            "grpc-accept-encoding",
            HeaderValue::from_static(grpc::ACCEPT_ENCODING),
        );
        for (k, v) in forward {
            headers.insert(k.clone(), v.clone());
        }
        // Headers and the whole message queued together: one write.
        let (response, mut body) = sender.send_request(request, false).map_err(unavailable)?;
        body.send_data(payload, true).map_err(unavailable)?;
        let response = response.await.map_err(unavailable)?;
        let (parts, mut body) = response.into_parts();
        // A trailers-only answer: the status is in the headers.
        if let Some(status) = grpc::status_from_headers(&parts.headers) {
            return Err(if status.code() == Code::Ok {
                undecodable("answered OK without a message".into())
            } else {
                Failed::Plugin(status)
            });
        }
        if parts.status != http::StatusCode::OK {
            return Err(Failed::Plugin(grpc::status_from_http(parts.status)));
        }
        let limit = self.settings.max_message_bytes;
        let (data, trailers) =
            grpc::collect(&mut body, limit)
                .await
                .map_err(|s| match s.code() {
                    Code::Unavailable => {
                        Failed::Call(CallError::Unreachable(s.message().to_string()))
                    }
                    Code::ResourceExhausted => {
                        Failed::Call(CallError::TooLarge(s.message().to_string()))
                    }
                    _ => undecodable(s.message().to_string()),
                })?;
        match trailers.as_ref().and_then(grpc::status_from_headers) {
            Some(status) if status.code() == Code::Ok => {
                let encoding = parts
                    .headers
                    .get("grpc-encoding")
                    .map(|v| v.to_str().unwrap_or("(not text)"));
                let message = grpc::uncompressed(data, encoding, limit).map_err(|e| match e {
                    grpc::Unreadable::TooLarge(why) => Failed::Call(CallError::TooLarge(why)),
                    grpc::Unreadable::Invalid(why) => undecodable(why),
                })?;
                grpc::decode_message(message).map_err(|s| undecodable(s.message().to_string()))
            }
            Some(status) => Err(Failed::Plugin(status)),
            None => Err(undecodable("answer ended without a grpc-status".into())),
        }
    }

    /// The shared connection, dialled (once, for all waiting calls) if there
    /// is none or it has closed.
    async fn sender(&self, deadline: Instant) -> Result<SendRequest<Payload>, Failed> {
        if let Some(s) = self.current() {
            return Ok(s);
        }
        // Waiting for another call's dial: the deadline passing here is the
        // call's own timer's (see `call`), whose owner it knows.
        let Ok(_dialling) = tokio::time::timeout_at(deadline, self.dialling.lock()).await else {
            return std::future::pending().await;
        };
        if let Some(s) = self.current() {
            return Ok(s);
        }
        let limit = deadline.min(Instant::now() + self.settings.connect_timeout);
        let conn = match tokio::time::timeout_at(limit, self.dial()).await {
            Ok(Ok(c)) => c,
            Ok(Err(message)) => return Err(Failed::Call(CallError::Unreachable(message))),
            Err(_) if Instant::now() >= deadline => return std::future::pending().await,
            Err(_) => {
                return Err(Failed::Call(CallError::Unreachable(format!(
                    "connecting to {} timed out",
                    self.key.endpoint
                ))));
            }
        };
        let sender = conn.sender.clone();
        self.conn.store(Some(Arc::new(conn)));
        Ok(sender)
    }

    fn current(&self) -> Option<SendRequest<Payload>> {
        let guard = self.conn.load();
        guard
            .as_ref()
            .filter(|c| !c.closed.load(Ordering::Relaxed))
            .map(|c| c.sender.clone())
    }

    async fn dial(&self) -> Result<Conn, String> {
        let endpoint = &self.key.endpoint;
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(|e| format!("cannot connect to {endpoint}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let label = endpoint.to_string();
        // A read buffer in front of the socket: a whole small answer arrives
        // in one read instead of two.
        let read_buffer = crate::io::READ_BUFFER;
        match &self.tls {
            None => handshake(tokio::io::BufReader::with_capacity(read_buffer, tcp), label).await,
            Some((config, name)) => {
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name.clone(), tcp)
                    .await
                    .map_err(|e| format!("TLS handshake with {endpoint} failed: {}", chain(&e)))?;
                handshake(tokio::io::BufReader::with_capacity(read_buffer, tls), label).await
            }
        }
    }
}

/// An HTTP/2 connection to a plugin: the handle to open streams, and whether
/// the connection has ended (the next call then dials anew).
struct Conn {
    sender: SendRequest<Payload>,
    closed: Arc<AtomicBool>,
}

/// How often an idle-or-not connection is pinged, and how long a ping may
/// wait for its answer before the connection is given up.
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(10);

async fn handshake<T>(io: T, endpoint: String) -> Result<Conn, String>
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
        .handshake::<_, Payload>(io)
        .await
        .map_err(|e| format!("HTTP/2 handshake with {endpoint} failed: {e}"))?;
    let closed = Arc::new(AtomicBool::new(false));
    let ping = connection.ping_pong();
    let flag = closed.clone();
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
        flag.store(true, Ordering::Relaxed);
        if let Some(error) = ended {
            tracing::debug!(%endpoint, %error, "plugin connection closed");
        }
    });
    Ok(Conn { sender, closed })
}

/// The URI of each method of one plugin, built once.
#[derive(Debug)]
struct MethodUris([http::Uri; 5]);

impl MethodUris {
    fn new(base: &str) -> Result<MethodUris, http::uri::InvalidUri> {
        let uri = |kind: HookKind| {
            format!("{base}/{}/{}", rollout_proto::SERVICE_NAME, kind.as_str()).parse()
        };
        Ok(MethodUris([
            uri(HookKind::Initialize)?,
            uri(HookKind::BeginRollout)?,
            uri(HookKind::ProgressRollout)?,
            uri(HookKind::ValidateRolloutCompletion)?,
            uri(HookKind::MutateManifestWork)?,
        ]))
    }

    fn get(&self, kind: HookKind) -> http::Uri {
        self.0[kind as usize].clone()
    }
}

/// The clock the policy layers use (tokio's, so paused-clock tests drive it).
fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// A poisoned lock still holds consistent state (every update is whole).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

const USER_AGENT: &str = concat!("rollout-gateway/", env!("CARGO_PKG_VERSION"));

/// A client TLS configuration trusting only `ca_bundle_pem`, presenting
/// `identity` when given, speaking HTTP/2.
pub fn tls_config(
    ca_bundle_pem: &[u8],
    identity: Option<&ClientIdentity>,
) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_bundle_pem) {
        let cert = cert.map_err(|e| format!("caBundle: {e}"))?;
        roots.add(cert).map_err(|e| format!("caBundle: {e}"))?;
    }
    if roots.is_empty() {
        return Err("caBundle holds no certificate".into());
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let certs = CertificateDer::pem_slice_iter(&id.cert_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("certFile: {e}"))?;
            let key =
                PrivateKeyDer::from_pem_slice(&id.key_pem).map_err(|e| format!("keyFile: {e}"))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("client certificate: {e}"))?
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
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

/// How [`Upstream::unary`] failed: the plugin's own non-OK status (which
/// [`Upstream::call`] reads in the light of the deadline), or anything else.
enum Failed {
    Plugin(Status),
    Call(CallError),
}

fn undecodable(why: String) -> Failed {
    Failed::Call(CallError::Undecodable(why))
}
