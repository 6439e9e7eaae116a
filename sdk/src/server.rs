//! Serving a plugin: [`bind`] then [`Bound::serve_with_shutdown`] (or
//! [`serve`] for both), with gRPC health, optional TLS and mTLS, and a
//! graceful drain.
//!
//! The server also answers gRPC reflection (`grpc.reflection.v1` and
//! `v1alpha`) for the plugin API, health and reflection itself, so `grpcurl
//! ADDR list` and `grpcurl -d '{}' ADDR ...Initialize` need no .proto.
//!
//! Health (`grpc.health.v1.Health`) reports the plugin service
//! (`ocm.rolloutplugin.v1alpha1.RolloutPluginService`) and the server as a
//! whole (`""`): NOT_SERVING from [`bind`] until serving starts, SERVING
//! while it serves, NOT_SERVING again as soon as the shutdown signal fires,
//! before the drain.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rollout_proto::SERVICE_NAME;
use rollout_telemetry::Tracer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::{Router, TcpIncoming};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::error::ServeError;
use crate::plugin::RolloutPlugin;
use crate::service::PluginService;
use crate::tls::{self, Reloading, TlsFiles, server_config};

/// Default for [`ServeOptions::max_message_bytes`]: 16 MiB, the gateway's
/// default too.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 16 << 20;
/// Default for [`ServeOptions::drain_timeout`].
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How to serve a plugin.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Serve TLS (and require client certificates, with a client CA);
    /// plaintext h2c when `None`.
    pub tls: Option<TlsOptions>,
    /// How long calls in flight may take to finish after the shutdown
    /// signal; connections still open then are abandoned.
    pub drain_timeout: Duration,
    /// Largest gRPC message accepted or sent.
    pub max_message_bytes: usize,
    /// Makes (and exports, as it was configured) a server span per call;
    /// `None`: spans are made for propagation only and never exported.
    /// `cli::run_plugin` sets it from the `OTEL_*` variables.
    pub tracer: Option<Tracer>,
    /// Also serve `grpc.health.v1.Health` alone, in plaintext, on this
    /// address (port 0 picks one): kubelet's gRPC probes cannot speak TLS,
    /// so a plugin served with (m)TLS gets a probe port this way. It reports
    /// the same statuses as the main port.
    pub health_listen: Option<SocketAddr>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            tls: None,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            tracer: None,
            health_listen: None,
        }
    }
}

impl ServeOptions {
    /// Serves TLS with these settings.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets [`ServeOptions::drain_timeout`].
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Sets [`ServeOptions::tracer`].
    pub fn tracer(mut self, tracer: Tracer) -> Self {
        self.tracer = Some(tracer);
        self
    }

    /// Sets [`ServeOptions::health_listen`].
    pub fn health_listen(mut self, addr: SocketAddr) -> Self {
        self.health_listen = Some(addr);
        self
    }

    /// Sets [`ServeOptions::max_message_bytes`].
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }
}

/// The server's certificate and key, and optionally a CA that every client
/// certificate must chain to (mTLS), all PEM.
///
/// Options read with [`TlsOptions::from_files`] are re-read when the files
/// change (a rotated certificate, a renewed CA bundle): each new connection
/// re-reads them and, when they changed, gets the new configuration once it
/// is valid (until then, the last good one). Open connections keep theirs.
#[derive(Clone)]
pub struct TlsOptions {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    client_ca_pem: Option<Vec<u8>>,
    files: Option<TlsFiles>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the key.
        f.debug_struct("TlsOptions")
            .field("client_ca", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

impl TlsOptions {
    /// A certificate chain and its private key, PEM. They are checked by
    /// [`bind`].
    pub fn from_pem(cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        Self {
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
            client_ca_pem: None,
            files: None,
        }
    }

    /// Reads the certificate, the key and, when given, the client CA from
    /// PEM files (`--tls-cert`, `--tls-key`, `--client-ca`). Fails with
    /// [`ServeError::ReadTls`] naming the file that cannot be read.
    pub fn from_files(
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
        client_ca: Option<&Path>,
    ) -> Result<Self, ServeError> {
        let read = |what: &'static str, path: &Path| {
            std::fs::read(path).map_err(|source| ServeError::ReadTls {
                what,
                path: path.to_path_buf(),
                source,
            })
        };
        let mut tls = Self::from_pem(
            read("certificate", cert.as_ref())?,
            read("key", key.as_ref())?,
        );
        if let Some(ca) = client_ca {
            tls = tls.client_ca_pem(read("client CA", ca)?);
        }
        tls.files = Some(TlsFiles {
            cert: cert.as_ref().to_path_buf(),
            key: key.as_ref().to_path_buf(),
            client_ca: client_ca.map(Path::to_path_buf),
        });
        Ok(tls)
    }

    /// Requires every client to present a certificate signed by this CA
    /// (PEM).
    pub fn client_ca_pem(mut self, ca_pem: impl Into<Vec<u8>>) -> Self {
        self.client_ca_pem = Some(ca_pem.into());
        self
    }

    /// Whether clients must present a certificate.
    pub fn requires_client_certificate(&self) -> bool {
        self.client_ca_pem.is_some()
    }

    /// The configuration, reloading from the files it was read from.
    fn reloading(&self) -> Result<Reloading, ServeError> {
        let config = server_config(&self.cert_pem, &self.key_pem, self.client_ca_pem.as_deref())
            .map_err(ServeError::Tls)?;
        Ok(Reloading::new(config, self.files.clone()))
    }
}

/// Binds `addr` (port 0 picks a free port) and prepares to serve `plugin`.
/// Nothing is accepted until [`Bound::serve_with_shutdown`] (connections wait
/// in the listen queue meanwhile), so a caller can print
/// [`Bound::local_addr`] first.
///
/// Fails with [`ServeError::Bind`] when the address cannot be bound and
/// [`ServeError::Tls`] when the TLS settings are rejected.
pub async fn bind<P: RolloutPlugin>(
    plugin: P,
    addr: SocketAddr,
    options: ServeOptions,
) -> Result<Bound, ServeError> {
    let mut builder = tonic::transport::Server::builder();
    let tls = options
        .tls
        .as_ref()
        .map(TlsOptions::reloading)
        .transpose()?
        .map(Arc::new);
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let local_addr = listener
        .local_addr()
        .map_err(|source| ServeError::Bind { addr, source })?;

    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, ServingStatus::NotServing).await;
    let health_port = match options.health_listen {
        None => None,
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| ServeError::Bind { addr, source })?;
            let local = listener
                .local_addr()
                .map_err(|source| ServeError::Bind { addr, source })?;
            let router = tonic::transport::Server::builder().add_service(health_service.clone());
            Some(HealthPort {
                listener,
                addr: local,
                router,
            })
        }
    };
    let mut plugin_service = PluginService::new(plugin);
    if let Some(tracer) = &options.tracer {
        plugin_service = plugin_service.with_tracer(tracer.clone());
    }
    let plugin_service = plugin_service
        .into_server()
        .max_decoding_message_size(options.max_message_bytes)
        .max_encoding_message_size(options.max_message_bytes);
    // gRPC reflection (v1, and v1alpha for older clients), so grpcurl and
    // the like work without the .proto.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(rollout_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1().map_err(ServeError::Reflection)?;
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .map_err(ServeError::Reflection)?;
    let router = builder
        .add_service(health_service)
        .add_service(plugin_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha);
    Ok(Bound {
        listener,
        local_addr,
        router,
        health,
        health_port,
        tls,
        drain_timeout: options.drain_timeout,
    })
}

/// The plaintext health-only port ([`ServeOptions::health_listen`]).
struct HealthPort {
    listener: TcpListener,
    addr: SocketAddr,
    router: Router,
}

/// Everything a plugin binary does after parsing its flags: installs the
/// SIGTERM and Ctrl-C handlers ([`shutdown_signal`]), [`bind`]s, prints one
/// line to stdout, `NAME listening grpc=ADDR` (the plugin's name and the
/// bound address, so port 0 works for tests and scripts), then serves and
/// drains on the first signal ([`Bound::serve_with_shutdown`]). With a
/// health port the line goes on: `NAME listening grpc=ADDR health=ADDR`.
pub async fn serve<P: RolloutPlugin>(
    plugin: P,
    addr: SocketAddr,
    options: ServeOptions,
) -> Result<(), ServeError> {
    let signal = shutdown_signal()?;
    let name = plugin.info().name;
    let bound = bind(plugin, addr, options).await?;
    let local_addr = bound.local_addr();
    let health = bound
        .health_addr()
        .map(|addr| format!(" health={addr}"))
        .unwrap_or_default();
    tracing::info!(plugin = %name, addr = %local_addr, health_addr = ?bound.health_addr(), "listening");
    let mut stdout = std::io::stdout().lock();
    // A closed stdout (the reader went away) must not stop the plugin.
    let _ = writeln!(stdout, "{name} listening grpc={local_addr}{health}")
        .and_then(|()| stdout.flush());
    drop(stdout);
    bound.serve_with_shutdown(signal).await
}

/// A plugin server with its port bound, not serving yet.
pub struct Bound {
    listener: TcpListener,
    local_addr: SocketAddr,
    router: Router,
    health: HealthReporter,
    health_port: Option<HealthPort>,
    tls: Option<Arc<Reloading>>,
    drain_timeout: Duration,
}

impl std::fmt::Debug for Bound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bound")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl Bound {
    /// The address actually bound (the real port when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The plaintext health port's address, when [`ServeOptions::health_listen`]
    /// asked for one.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_port.as_ref().map(|p| p.addr)
    }

    /// The health reporter, for a plugin that wants to report NOT_SERVING
    /// itself (say, while a dependency is down). Its statuses are overwritten
    /// when serving starts and when it stops.
    pub fn health(&self) -> HealthReporter {
        self.health.clone()
    }

    /// Serves until `signal` completes, then drains: health turns
    /// NOT_SERVING, no new connection is accepted, and calls in flight get
    /// up to the drain timeout to finish (each connection is told GOAWAY
    /// and closes once idle). Answers `Ok` when drained or when the drain
    /// timeout passed (connections still open are then abandoned), and
    /// [`ServeError::Serve`] when the server fails.
    pub async fn serve_with_shutdown<F>(self, signal: F) -> Result<(), ServeError>
    where
        F: Future<Output = ()>,
    {
        let Bound {
            listener,
            local_addr,
            router,
            health,
            health_port,
            tls,
            drain_timeout,
        } = self;
        // The health port answers until this function returns (dropping
        // `_health_stop` ends it), so probes see NOT_SERVING during the drain.
        let (_health_stop, health_stopped) = oneshot::channel::<()>();
        if let Some(port) = health_port {
            let incoming = TcpIncoming::from(port.listener).with_nodelay(Some(true));
            let server = port.router.serve_with_incoming_shutdown(incoming, async {
                let _ = health_stopped.await;
            });
            tokio::spawn(async move {
                if let Err(error) = server.await {
                    tracing::warn!(%error, "the health port failed");
                }
            });
        }
        let (drain_tx, drain_rx) = oneshot::channel::<()>();
        // No Nagle: an answer written in pieces (headers, a large message,
        // trailers) would otherwise wait for the peer's delayed ACK, about
        // 40 ms per call.
        // A dropped sender drains too.
        let drained = async {
            let _ = drain_rx.await;
        };
        let server: Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>> =
            match tls {
                Some(tls) => Box::pin(
                    router.serve_with_incoming_shutdown(tls::incoming(listener, tls), drained),
                ),
                None => {
                    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
                    Box::pin(router.serve_with_incoming_shutdown(incoming, drained))
                }
            };
        tokio::pin!(server);
        set_health(&health, ServingStatus::Serving).await;

        tokio::select! {
            result = &mut server => {
                set_health(&health, ServingStatus::NotServing).await;
                return result.map_err(ServeError::Serve);
            }
            () = signal => {}
        }
        tracing::info!(addr = %local_addr, timeout = ?drain_timeout, "draining");
        set_health(&health, ServingStatus::NotServing).await;
        let _ = drain_tx.send(());
        match tokio::time::timeout(drain_timeout, server).await {
            Ok(result) => result.map_err(ServeError::Serve),
            Err(_) => {
                tracing::warn!(addr = %local_addr, timeout = ?drain_timeout, "calls still in flight after the drain timeout; abandoned");
                Ok(())
            }
        }
    }

    /// Serves on a task of its own until [`Running::shutdown`] (handy in
    /// tests).
    pub fn spawn(self) -> Running {
        let local_addr = self.local_addr;
        let health_addr = self.health_addr();
        let health = self.health.clone();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(self.serve_with_shutdown(async {
            let _ = stopped.await;
        }));
        Running {
            local_addr,
            health_addr,
            health,
            stop,
            task,
        }
    }
}

/// A plugin server serving on its own task (see [`Bound::spawn`]).
#[derive(Debug)]
pub struct Running {
    local_addr: SocketAddr,
    health_addr: Option<SocketAddr>,
    health: HealthReporter,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl Running {
    /// The address it serves on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Its plaintext health port (see [`Bound::health_addr`]).
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_addr
    }

    /// Its health reporter (see [`Bound::health`]).
    pub fn health(&self) -> HealthReporter {
        self.health.clone()
    }

    /// Signals shutdown and waits for the drain to end (see
    /// [`Bound::serve_with_shutdown`]).
    pub async fn shutdown(self) -> Result<(), ServeError> {
        let _ = self.stop.send(());
        self.task.await.map_err(ServeError::Task)?
    }
}

async fn set_health(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status(SERVICE_NAME, status).await;
    health.set_service_status("", status).await;
}

/// Installs handlers for SIGTERM and SIGINT (Ctrl-C) now, and answers a
/// future that completes on the first of them. Install it before printing
/// the listening line, so a supervisor that signals right after never kills
/// the process unhandled.
pub fn shutdown_signal() -> Result<impl Future<Output = ()> + Send + 'static, ServeError> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |kind: SignalKind, name: &'static str| {
            signal(kind).map_err(|source| ServeError::Signal {
                signal: name,
                source,
            })
        };
        let mut term = install(SignalKind::terminate(), "SIGTERM")?;
        let mut int = install(SignalKind::interrupt(), "SIGINT")?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutting down"),
                _ = int.recv() => tracing::info!(signal = "SIGINT", "shutting down"),
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            // An error here means no handler could be installed; then no
            // signal can arrive either, so wait forever.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            tracing::info!(signal = "Ctrl-C", "shutting down");
        })
    }
}
