//! Assembling the gateway: registry, watchers, gRPC and admin listeners, and
//! an orderly drain. `main.rs` and the tests start it through [`start`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rollout_proto::v1alpha1::InitializeRequest;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::configmap::{self, ConfigMapRef};
use crate::error::{CallError, DeadlineOwner};
use crate::files::{self, FileLimits};
use crate::hooks::HookRequest;
use crate::hub;
use crate::registry::{FreshUpstream, Registry, SourceInfo};
use crate::service::{self, Health, ReceiveLimits};
use crate::telemetry::{Telemetry, Tracing, TracingError, TracingOptions};
use crate::tls::{ServerTls, ServerTlsFiles, TlsError};
use crate::transport::pending::{Pool, Scope};
use crate::transport::server::{self, Handshake, ServerSettings};
use crate::upstream::ChannelSettings;
use crate::{admin, watch as file_watch};

/// Everything the gateway is started with.
#[derive(Debug, Clone)]
pub struct Options {
    /// Registry files (`--config`, repeatable).
    pub configs: Vec<PathBuf>,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    /// Largest gRPC message accepted or sent, both towards the controller and plugins.
    pub max_message_bytes: usize,
    /// How long SIGTERM waits for in-flight calls.
    pub drain_timeout: Duration,
    /// How often files are read again in case a change event was missed.
    pub poll_interval: Duration,
    /// TLS for the gRPC listener (central mode); `None` = plaintext h2c.
    pub tls: Option<ServerTlsFiles>,
    /// ConfigMaps (key `config.yaml`) watched through the Kubernetes API, as
    /// registry sources after the files (`--configmap`, repeatable).
    pub configmaps: Vec<ConfigMapRef>,
    /// Where spans are exported (the `OTEL_*` variables in the binary).
    pub tracing: TracingOptions,
    /// gRPC connections open at once (`--max-connections`), and from one IP
    /// address (`--max-connections-per-ip`).
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// gRPC connections still in their TLS and HTTP/2 handshakes, in all
    /// (`--max-handshakes`: a newcomer over it takes another's place)
    /// and from one IP address (`--max-handshakes-per-ip`); they must be
    /// done within `--handshake-timeout`, and do not count against
    /// `--max-connections`.
    pub max_handshakes: usize,
    pub max_handshakes_per_ip: usize,
    pub handshake_timeout: Duration,
    /// A peer that takes none of its answers for this long is cut off
    /// (`--send-timeout`).
    pub send_timeout: Duration,
    /// A gRPC connection with no call for this long is closed (`--idle-timeout`).
    pub idle_timeout: Duration,
    /// A gRPC connection this old gets a GOAWAY (`--max-connection-age`), and is
    /// closed the grace later (`--max-connection-age-grace`).
    pub max_connection_age: Duration,
    pub max_connection_age_grace: Duration,
    /// Bytes the calls hold (each from its request's first byte until its
    /// answer is written), at once by the whole gateway
    /// (`--max-pending-request-bytes`) and by one connection
    /// (`--max-pending-request-bytes-per-connection`).
    pub max_pending_request_bytes: usize,
    pub max_pending_request_bytes_per_connection: usize,
    /// A request must arrive whole within this, or the caller's deadline if
    /// sooner (`--request-receive-timeout`).
    pub request_receive_timeout: Duration,
    /// An admin request (headers, body and answer) must be done within this
    /// (`--admin-request-timeout`).
    pub admin_request_timeout: Duration,
    /// Every file the gateway reads (registry, certificates) is at most
    /// this large (`--max-file-bytes`) and read within this
    /// (`--file-read-timeout`).
    pub file_limits: FileLimits,
}

impl Default for Options {
    fn default() -> Self {
        let server = ServerSettings::default();
        Options {
            configs: vec![PathBuf::from("/var/run/config/work/config.yaml")],
            listen: SocketAddr::from(([127, 0, 0, 1], 10843)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 10844)),
            max_message_bytes: 16 * 1024 * 1024,
            drain_timeout: server.drain_timeout,
            poll_interval: Duration::from_secs(2),
            tls: None,
            configmaps: Vec::new(),
            tracing: TracingOptions::new("rollout-gateway"),
            max_connections: server.max_connections,
            max_connections_per_ip: server.max_connections_per_ip,
            max_handshakes: server.max_handshakes,
            max_handshakes_per_ip: server.max_handshakes_per_ip,
            handshake_timeout: server.handshake_timeout,
            send_timeout: server.send_timeout,
            idle_timeout: server.idle_timeout,
            max_connection_age: server.max_connection_age,
            max_connection_age_grace: server.max_connection_age_grace,
            max_pending_request_bytes: 256 * 1024 * 1024,
            max_pending_request_bytes_per_connection: server.max_pending_bytes_per_connection,
            request_receive_timeout: service::DEFAULT_RECEIVE_TIMEOUT,
            admin_request_timeout: admin::DEFAULT_REQUEST_TIMEOUT,
            file_limits: FileLimits::default(),
        }
    }
}

/// The gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A registry file is invalid (the binary exits 64).
    #[error("invalid registry: {}", .0.join("; "))]
    Config(Vec<String>),
    /// `--configmap` was given but no Kubernetes client could be configured.
    #[error("--configmap: no Kubernetes API client: {0}")]
    Kubernetes(#[source] kube::Error),
    /// The listener's certificate, key or client CA is unusable.
    #[error("{0}")]
    Tls(#[from] TlsError),
    /// The limits contradict each other (a message of the largest size
    /// could never be received).
    #[error(
        "--max-pending-request-bytes ({total}) must be at least --max-pending-request-bytes-per-connection \
         ({per_connection}), which must be at least --max-message-bytes ({message}) plus 5"
    )]
    Limits {
        total: usize,
        per_connection: usize,
        message: usize,
    },
    /// The OTLP exporter could not be built.
    #[error("{0}")]
    Tracing(#[from] TracingError),
    #[error("cannot listen on {addr} ({flag}): {source}")]
    Bind {
        flag: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A started gateway.
#[derive(Debug)]
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub registry: Arc<Registry>,
    /// The gateway-wide pool of the bytes calls hold.
    pub pending_requests: Arc<Pool>,
    stop: watch::Sender<bool>,
    grpc: JoinHandle<()>,
    /// Resolves once the admin listener's thread is done.
    admin: tokio::sync::oneshot::Receiver<()>,
    watcher: JoinHandle<()>,
    configmap_watchers: Vec<JoinHandle<()>>,
    tls_reload: Option<JoinHandle<()>>,
    health: JoinHandle<()>,
}

impl Running {
    /// Drains: readiness goes to 503, no new connections are accepted, calls in
    /// flight finish (up to the drain timeout); then every task stops.
    pub async fn shutdown(self) {
        self.registry.set_draining();
        let _ = self.stop.send(true);
        let _ = self.grpc.await;
        self.watcher.abort();
        for w in &self.configmap_watchers {
            w.abort();
        }
        if let Some(t) = &self.tls_reload {
            t.abort();
        }
        self.health.abort();
        let _ = self.admin.await;
        // The last spans leave before the process does; the exporter blocks.
        let tracing = self.registry.telemetry().tracing.clone();
        let _ = tokio::task::spawn_blocking(move || tracing.shutdown()).await;
    }
}

/// Loads the registry files, binds both listeners and starts serving.
///
/// A missing or empty file is not fatal (the gateway waits for it, not
/// ready); an invalid one is ([`StartError::Config`]).
pub async fn start(options: Options) -> Result<Running, StartError> {
    check_limits(&options)?;
    let registry = new_registry(&options, Tracing::new(&options.tracing)?);
    load_files(&registry, &options).await?;
    // ConfigMap sources: their first load arrives asynchronously (readiness
    // waits for it); a client that cannot be configured is a start-up error.
    let kube_client = if options.configmaps.is_empty() {
        None
    } else {
        Some(
            kube::Client::try_default()
                .await
                .map_err(StartError::Kubernetes)?,
        )
    };
    let tls = match options.tls.clone() {
        Some(files) => Some(Arc::new(ServerTls::load(files, options.file_limits).await?)),
        None => None,
    };
    let (grpc_listener, grpc_addr) = bind("--listen", options.listen).await?;
    let (admin_listener, admin_addr) = bind("--admin-listen", options.admin_listen).await?;

    initialize_fresh(&registry);
    let watcher = {
        let r = registry.clone();
        file_watch::spawn(
            registry.clone(),
            options.configs.clone(),
            options.poll_interval,
            move || initialize_fresh(&r),
        )
    };
    let health_service = Health::new().await;
    let health = health_service.track(&registry);
    let (stop, stopped) = watch::channel(false);
    let pending_requests = Arc::new(Pool::new(options.max_pending_request_bytes, Scope::Gateway));
    let admin = admin::spawn(
        admin_listener,
        admin::router(registry.clone(), options.admin_request_timeout),
        options.admin_request_timeout,
        wait_for(stopped.clone()),
    )
    .map_err(|source| StartError::Bind {
        flag: "--admin-listen",
        addr: admin_addr,
        source,
    })?;
    let grpc = tokio::spawn(server::serve(
        grpc_listener,
        server_stack(&registry, &options, health_service),
        server_settings(&options),
        tls.clone().map(|t| t as Arc<dyn Handshake>),
        pending_requests.clone(),
        wait_for(stopped.clone()),
    ));
    let configmap_watchers = match kube_client {
        None => Vec::new(),
        Some(client) => watch_configmaps(&client, &registry, &options),
    };
    let tls_reload = tls.map(|tls| reload_tls(tls, options.poll_interval));
    Ok(Running {
        grpc_addr,
        admin_addr,
        registry,
        pending_requests,
        stop,
        grpc,
        admin,
        watcher,
        configmap_watchers,
        tls_reload,
        health,
    })
}

/// Refuses limits that contradict each other.
fn check_limits(options: &Options) -> Result<(), StartError> {
    // A message being received holds its whole size (plus its 5-byte prefix).
    let largest = options.max_message_bytes.saturating_add(5);
    if options.max_pending_request_bytes_per_connection < largest
        || options.max_pending_request_bytes < options.max_pending_request_bytes_per_connection
    {
        return Err(StartError::Limits {
            total: options.max_pending_request_bytes,
            per_connection: options.max_pending_request_bytes_per_connection,
            message: options.max_message_bytes,
        });
    }
    Ok(())
}

/// The registry, one source per registry file then per ConfigMap, with its
/// telemetry.
fn new_registry(options: &Options, tracing: Tracing) -> Arc<Registry> {
    let sources: Vec<SourceInfo> = options
        .configs
        .iter()
        .map(|p| SourceInfo::file(p))
        .chain(options.configmaps.iter().map(|cm| SourceInfo {
            label: cm.source_label(),
        }))
        .collect();
    let settings = ChannelSettings {
        max_message_bytes: options.max_message_bytes,
        ..ChannelSettings::default()
    };
    Arc::new(
        Registry::with_telemetry(sources, settings, Telemetry::new(tracing))
            .with_file_limits(options.file_limits),
    )
}

/// The first load of every registry file: an invalid one is a start-up
/// error, one that cannot be read yet is waited for.
async fn load_files(registry: &Registry, options: &Options) -> Result<(), StartError> {
    let mut problems = Vec::new();
    for path in &options.configs {
        let source = SourceInfo::file(path).label;
        let read = files::read(path, options.file_limits, None).await;
        match read.map(|r| r.map(|(bytes, _)| String::from_utf8(bytes))) {
            Ok(Some(Ok(text))) => {
                if let Err(e) = registry.apply(&source, &text) {
                    problems.push(e.to_string());
                }
            }
            Ok(Some(Err(_))) => problems.push(format!("{}: not UTF-8 text", path.display())),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "registry file not readable; waiting for it");
                registry.source_failed(&source, format!("cannot read: {e}"));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(StartError::Config(problems))
    }
}

/// A listener on `addr` (given by `flag`), and the address it is bound to.
async fn bind(
    flag: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let failed = |source| StartError::Bind { flag, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(failed)?;
    let bound = listener.local_addr().map_err(failed)?;
    Ok((listener, bound))
}

/// The server stack every call on the gRPC port goes through.
fn server_stack(
    registry: &Arc<Registry>,
    options: &Options,
    health: Health,
) -> service::ServerStack {
    let limits = ReceiveLimits {
        max_message_bytes: options.max_message_bytes,
        receive_timeout: options.request_receive_timeout,
    };
    service::server_stack(registry.clone(), limits, health)
}

/// The gRPC server's settings, from the flags.
fn server_settings(options: &Options) -> ServerSettings {
    ServerSettings {
        drain_timeout: options.drain_timeout,
        max_connections: options.max_connections,
        max_connections_per_ip: options.max_connections_per_ip,
        max_handshakes: options.max_handshakes,
        max_handshakes_per_ip: options.max_handshakes_per_ip,
        handshake_timeout: options.handshake_timeout,
        send_timeout: options.send_timeout,
        idle_timeout: options.idle_timeout,
        max_connection_age: options.max_connection_age,
        max_connection_age_grace: options.max_connection_age_grace,
        max_pending_bytes_per_connection: options.max_pending_request_bytes_per_connection,
        ..ServerSettings::default()
    }
}

/// A watcher per ConfigMap source, after the file sources.
fn watch_configmaps(
    client: &kube::Client,
    registry: &Arc<Registry>,
    options: &Options,
) -> Vec<JoinHandle<()>> {
    options
        .configmaps
        .iter()
        .map(|cm| {
            let r = registry.clone();
            configmap::spawn(client.clone(), registry.clone(), cm.clone(), move || {
                initialize_fresh(&r)
            })
        })
        .collect()
}

/// Reads the listener's certificate files again `every` so often; a bad
/// change keeps the previous certificate.
fn reload_tls(tls: Arc<ServerTls>, every: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match tls.reload().await {
                Ok(true) => tracing::info!("listener certificate reloaded"),
                Ok(false) => {}
                Err(error) => {
                    tracing::error!(%error, "listener certificate reload failed; keeping the previous one")
                }
            }
        }
    })
}

async fn wait_for(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// Sends the gateway's own Initialize to each plugin the latest reloads added,
/// to load it (learn which hooks it implements) for the hub of its registry
/// file. Best effort: a plugin that is not up yet is loaded by the first call
/// that needs it (its Initialize first); one that answers it is no plugin
/// stays not loaded, and its hooks fail under its failure policy.
fn initialize_fresh(registry: &Registry) {
    for FreshUpstream { hub, upstream } in registry.take_fresh_upstreams() {
        let weak = Arc::downgrade(&upstream);
        // Taken before the task runs: a call that arrives first waits for
        // this Initialize rather than sending its own.
        let mut first = upstream.hold_loading();
        drop(upstream);
        tokio::spawn(async move {
            let mut wait = Duration::from_millis(500);
            for attempt in 1..=3 {
                let Some(upstream) = weak.upgrade() else {
                    return;
                };
                let request = HookRequest::Initialize(InitializeRequest {
                    controller_version: crate::fanout::GATEWAY_VERSION.to_string(),
                    hub_name: hub::label(hub.as_ref()).to_owned(),
                });
                let deadline = Instant::now() + Duration::from_secs(5);
                // Calls that need the plugin meanwhile wait for this
                // Initialize instead of sending their own.
                let no_headers = http::HeaderMap::new();
                let initialize = || {
                    upstream.call(
                        request,
                        deadline,
                        DeadlineOwner::Caller,
                        &no_headers,
                        hub.as_ref(),
                    )
                };
                let result = match first.take() {
                    Some(held) => {
                        let result = initialize().await.map(drop);
                        drop(held);
                        result
                    }
                    None => {
                        upstream
                            .ensure_loaded(
                                hub.as_ref(),
                                deadline,
                                DeadlineOwner::Caller,
                                initialize,
                            )
                            .await
                    }
                };
                match result {
                    Ok(_) => {
                        tracing::debug!(endpoint = %upstream.key().endpoint, hooks = ?upstream.known_hooks(hub.as_ref()), "plugin initialized");
                        return;
                    }
                    Err(error) => {
                        tracing::debug!(endpoint = %upstream.key().endpoint, attempt, code = ?error.code(), %error, "gateway's own Initialize failed");
                        if matches!(error, CallError::NotAPlugin(_)) {
                            tracing::warn!(endpoint = %upstream.key().endpoint, %error, "plugin not loaded");
                            return;
                        }
                    }
                }
                drop(upstream);
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
        });
    }
}
