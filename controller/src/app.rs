//! `rollout-controller run`, assembled: the Kubernetes client, trace
//! export, the gateway client, the probes and metrics, plugin registration
//! and leader election around the reconcile loop. The binary only turns
//! flags into [`RunOptions`]; everything here can be started from a test
//! with a mock client.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kube::Client;
use thiserror::Error;

use crate::events::{EventGate, Events};
use crate::guard;
use crate::hooks::{GatewayError, GatewayHooks, GatewayOptions};
use crate::leader::{self, LeaderElection, LeaseConfig};
use crate::metrics::ControllerMetrics;
use crate::probes::{self, Readiness};
use crate::reconcile::{self, Context, Stop, Tunables};
use crate::registration;
use crate::telemetry::{DEFAULT_SERVICE_NAME, Tracing, TracingError, TracingOptions};

/// Everything `run` is told.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The gateway and how to reach it.
    pub gateway: GatewayOptions,
    /// The reconcile's tunables (and `InitializeRequest.hub_name`).
    pub reconcile: Tunables,
    /// Also keep the gateway's registry ConfigMap in this namespace up to
    /// date.
    pub register_plugins_namespace: Option<String>,
    /// Serve `/healthz`, `/readyz` and `/metrics` here.
    pub health_listen: Option<SocketAddr>,
    /// Reconcile only while holding this Lease; `None`: always (one
    /// replica).
    pub leader_election: Option<LeaseConfig>,
}

/// Why `run` could not start.
#[derive(Debug, Error)]
pub enum RunError {
    /// The kubeconfig could not be read or used.
    #[error("{path}: {source}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No in-cluster or default configuration.
    #[error(
        "no Kubernetes API server to talk to: {0}. Run it in a pod, or name a kubeconfig \
         with --kubeconfig PATH (or KUBECONFIG)"
    )]
    Client(#[source] kube::Error),
    /// Trace export could not be set up.
    #[error(transparent)]
    Tracing(#[from] TracingError),
    /// The gateway options are unusable.
    #[error("--gateway: {0}")]
    Gateway(#[from] GatewayError),
    /// The probe address could not be bound.
    #[error("--health-listen {addr}: {source}")]
    Health {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The hub's client: from `kubeconfig` if given, else in-cluster, else
/// `$KUBECONFIG` or `~/.kube/config`.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, RunError> {
    let Some(path) = kubeconfig else {
        return Client::try_default().await.map_err(RunError::Client);
    };
    let fail = |source: Box<dyn std::error::Error + Send + Sync>| RunError::Kubeconfig {
        path: path.display().to_string(),
        source,
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| fail(Box::new(e)))?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| fail(Box::new(e)))?;
    Client::try_from(config).map_err(|e| fail(Box::new(e)))
}

/// A running controller's shared parts, for tests and the binary.
#[derive(Debug, Clone)]
pub struct Running {
    /// The probe address actually bound, if any.
    pub health: Option<SocketAddr>,
}

/// How long the controller may go on after `shutdown` fires: in-flight
/// reconciles finish and the lease is released within it, else they are
/// dropped. An API server that does not answer must not hold a stop.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// How long flushing trace export may take on the way out.
const FLUSH_LIMIT: Duration = Duration::from_secs(2);

/// Runs the controller over `client` until `shutdown` fires (the binary
/// passes [`signal`]), in every phase: electing a leader, starting the
/// watches, reconciling, registering. Serves the probes and metrics, keeps
/// the registry ConfigMap if asked, and reconciles, under leader election
/// if configured. After `shutdown` the work gets [`SHUTDOWN_GRACE`] to
/// finish, then is dropped. `started` is told the bound addresses once
/// serving. Trace export is flushed (bounded) before it returns.
pub async fn run(
    client: Client,
    options: RunOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
    started: impl FnOnce(&Running),
) -> Result<(), RunError> {
    let stop: Stop = shutdown.boxed().shared();
    let telemetry = Tracing::new(&TracingOptions::from_env(DEFAULT_SERVICE_NAME))?;
    let hooks = GatewayHooks::new(&options.gateway, telemetry.clone())?;
    let readiness = Readiness::default();
    let metrics = Arc::new(ControllerMetrics::new());
    let context = Arc::new(context(&client, hooks, &telemetry, &options, &metrics));
    readiness.hold_with(context.guard.clone());
    let health = serve_health(options.health_listen, &readiness, &metrics).await?;
    started(&Running { health });

    tracing::info!(gateway = %options.gateway.url, "rollout-controller running");
    let register = options.register_plugins_namespace.clone();
    let lead = || lead(&context, &readiness, &client, register.clone(), &stop);
    if options.leader_election.is_none() {
        metrics.set_leader(true);
    }
    let work = async {
        match options.leader_election {
            None => lead().await,
            Some(lease) => {
                let election = LeaderElection::new(client.clone(), lease);
                let candidate = stop.clone();
                leader::run_when_leading(
                    election,
                    metrics.clone(),
                    readiness.clone(),
                    candidate,
                    lead,
                )
                .await;
            }
        }
    };
    let overdue = stop.clone().then(|()| tokio::time::sleep(SHUTDOWN_GRACE));
    tokio::select! {
        () = work => {}
        () = overdue => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "stopping: the work did not finish within the grace period");
        }
    }
    metrics.set_leader(false);
    tracing::info!("rollout-controller stopped");
    let flush = tokio::task::spawn_blocking(move || telemetry.shutdown());
    if tokio::time::timeout(FLUSH_LIMIT, flush).await.is_err() {
        tracing::warn!(limit = ?FLUSH_LIMIT, "trace export not flushed in time");
    }
    Ok(())
}

/// Serves the probes and metrics on `listen`, if given: the address bound.
async fn serve_health(
    listen: Option<SocketAddr>,
    readiness: &Readiness,
    metrics: &Arc<ControllerMetrics>,
) -> Result<Option<SocketAddr>, RunError> {
    let Some(addr) = listen else {
        return Ok(None);
    };
    let bound = probes::serve(addr, readiness.clone(), metrics.clone())
        .await
        .map_err(|source| RunError::Health { addr, source })?;
    tracing::info!(%bound, "serving /healthz, /readyz and /metrics");
    Ok(Some(bound))
}

/// The reconcile's context: the client, the hooks, metrics, and Events
/// reported as this replica.
fn context(
    client: &Client,
    hooks: GatewayHooks,
    telemetry: &Tracing,
    options: &RunOptions,
    metrics: &Arc<ControllerMetrics>,
) -> Context {
    // The Events' reportingInstance: this replica.
    let instance = options
        .leader_election
        .as_ref()
        .map_or_else(|| DEFAULT_SERVICE_NAME.to_owned(), |l| l.identity.clone());
    Context::new(
        client.clone(),
        hooks,
        telemetry.clone(),
        options.reconcile.clone(),
    )
    .with_metrics(metrics.clone())
    .with_events(Arc::new(Events::new(
        client.clone(),
        &instance,
        EventGate::default(),
    )))
}

/// What the leader does, and only the leader: reconcile (held back while
/// OCM's gate is on, which the ClusterManagers' watch tells), and keep the
/// registry in `register` if given (two replicas must not write it at
/// once, and a follower's view may be stale).
fn lead(
    context: &Arc<Context>,
    readiness: &Readiness,
    client: &Client,
    register: Option<String>,
    stop: &Stop,
) -> impl Future<Output = ()> + use<> {
    let (context, readiness) = (context.clone(), readiness.clone());
    let (client, stop) = (client.clone(), stop.clone());
    let client_for_gates = client.clone();
    async move {
        let registration = async move {
            if let Some(namespace) = register {
                registration::watch_and_register(client, &namespace).await;
            }
            // The watch never ends on its own; if it did, reconciling
            // goes on.
            std::future::pending::<()>().await;
        };
        let gates = guard::watch_gates(client_for_gates, context.guard.clone());
        tokio::select! {
            () = reconcile::run(context, readiness, stop) => {}
            () = registration => {}
            () = gates => {}
        }
    }
}

/// SIGTERM or SIGINT (Ctrl-C). The handlers are installed when this is
/// called, not when first awaited, so a signal that comes before the
/// controller starts waiting is not lost (nor kills the process). Call it
/// inside a Tokio runtime.
pub fn signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(term) => tracing::info!("SIGTERM: stopping"),
                () = wait(int) => tracing::info!("SIGINT: stopping"),
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
