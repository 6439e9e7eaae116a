//! `rollout-controller run`, assembled: the Kubernetes client, trace
//! export, the gateway client, the probes and metrics, plugin registration
//! and leader election around the reconcile loop. The binary only turns
//! flags into [`RunOptions`]; everything here can be started from a test
//! with a mock client.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use kube::Client;
use thiserror::Error;

use crate::events::{EventGate, Events};
use crate::health::{self, Readiness};
use crate::hooks::{GatewayError, GatewayHooks, GatewayOptions};
use crate::leader::{self, LeaderElection, LeaseConfig};
use crate::metrics::ControllerMetrics;
use crate::reconcile::{self, Context, Options};
use crate::registration;
use crate::telemetry::{DEFAULT_SERVICE_NAME, Telemetry, TracingError, TracingOptions};

/// Everything `run` is told.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The gateway and how to reach it.
    pub gateway: GatewayOptions,
    /// The reconcile's tunables (and `InitializeRequest.hub_name`).
    pub reconcile: Options,
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
    /// The metrics `/metrics` serves.
    pub metrics: Arc<ControllerMetrics>,
    /// The readiness `/readyz` answers.
    pub readiness: Readiness,
}

/// Runs the controller over `client` until SIGTERM or Ctrl-C (or, while
/// waiting to lead, until `shutdown`): serves the probes and metrics,
/// keeps the registry ConfigMap if asked, and reconciles, under leader
/// election if configured. `started` is told the bound addresses once
/// serving. Trace export is flushed before it returns.
pub async fn run(
    client: Client,
    options: RunOptions,
    shutdown: impl Future<Output = ()>,
    started: impl FnOnce(&Running),
) -> Result<(), RunError> {
    let telemetry = Telemetry::new(&TracingOptions::from_env(DEFAULT_SERVICE_NAME))?;
    let hooks = GatewayHooks::new(&options.gateway, telemetry.clone())?;
    let readiness = Readiness::default();
    let metrics = Arc::new(ControllerMetrics::new());
    let health = match options.health_listen {
        Some(addr) => {
            let bound = health::serve(addr, readiness.clone(), metrics.clone())
                .await
                .map_err(|source| RunError::Health { addr, source })?;
            tracing::info!(%bound, "serving /healthz, /readyz and /metrics");
            Some(bound)
        }
        None => None,
    };
    started(&Running {
        health,
        metrics: metrics.clone(),
        readiness: readiness.clone(),
    });

    let registration = options.register_plugins_namespace.clone().map(|namespace| {
        let client = client.clone();
        tokio::spawn(async move { registration::watch_and_register(client, &namespace).await })
    });
    tracing::info!(gateway = %options.gateway.url, "rollout-controller running");
    // The Events' reportingInstance: this replica.
    let instance = options
        .leader_election
        .as_ref()
        .map_or_else(|| DEFAULT_SERVICE_NAME.to_owned(), |l| l.identity.clone());
    let context = Arc::new(
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
        ))),
    );
    match options.leader_election {
        None => {
            metrics.set_leader(true);
            reconcile::run(context, readiness).await;
            metrics.set_leader(false);
        }
        Some(lease) => {
            let election = LeaderElection::new(client, lease);
            leader::run_when_leading(election, metrics, readiness.clone(), shutdown, || {
                reconcile::run(context.clone(), readiness.clone())
            })
            .await;
        }
    }
    if let Some(task) = registration {
        task.abort();
    }
    tracing::info!("rollout-controller stopped");
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    Ok(())
}

/// SIGTERM or Ctrl-C.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
