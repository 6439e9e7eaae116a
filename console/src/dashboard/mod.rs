//! `rollout-controller dashboard`: every ManifestWorkReplicaSet of the hub
//! (of one namespace, or of all) on one web page, updated live, read-only.
//!
//! For the set chosen, the page shows what `get` shows, from the same
//! model ([`crate::view::View`]): each placement's decision groups as a
//! grid of clusters coloured by rollout status and revision, the plugin's
//! verdicts and messages, the abort and the rollback, what the controller
//! waits for, the conditions and the latest Events.
//!
//! [`fleet`] is pure: everything the hub holds, split into one
//! [`crate::view::Snapshot`] per set by `get`'s rules. [`feed`] is the I/O:
//! one watch per kind, the fleet built again on change and published on a
//! channel that keeps only the latest. [`routes`] serves the page (HTML,
//! CSS and JS in the binary, nothing from elsewhere), the JSON it reads and
//! a server-sent event stream. Nothing is written to the hub.
//!
//! Safe by default: it listens on loopback only ([`check_listen`] refuses
//! another address unless asked to allow it), answers only requests that
//! name a loopback host, sends every text the hub holds as JSON for the
//! page to show as text, with a strict Content-Security-Policy, and holds
//! at most [`Limits::clients`] event streams, each with only the latest
//! frame.

pub(crate) mod feed;
pub(crate) mod fleet;
pub mod routes;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use rollout_controller::kubeconfig::connect;

use crate::view::hub::{GetError, Target};
use feed::{Feed, Scope};
pub use routes::Limits;

/// Where the dashboard listens unless told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3100";

/// The most event streams (open pages) served at once, unless told
/// otherwise.
pub const DEFAULT_MAX_CLIENTS: u16 = 16;

/// Why the dashboard could not start or stopped.
#[derive(Debug, Error)]
pub enum DashboardError {
    /// The listen address is not a loopback one, and that was not allowed.
    #[error(
        "--listen {0} is not a loopback address: anyone who reaches it could read every \
         rollout of the hub, with no login; pass --allow-remote to listen there anyway"
    )]
    NotLoopback(SocketAddr),
    /// The listen address could not be bound.
    #[error("listening on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Serving failed.
    #[error("serving the dashboard: {0}")]
    Serve(#[source] std::io::Error),
    /// The hub could not be read.
    #[error(transparent)]
    Hub(#[from] GetError),
}

/// What `rollout-controller dashboard` shows, and where.
#[derive(Debug, Clone)]
pub struct DashboardOptions {
    /// The kubeconfig file; `None`: in-cluster, else $KUBECONFIG or
    /// ~/.kube/config.
    pub kubeconfig: Option<PathBuf>,
    /// One namespace's sets; `None`: every namespace's.
    pub namespace: Option<String>,
    /// Where to listen.
    pub listen: SocketAddr,
    /// Listen on an address that is not loopback, and answer requests
    /// naming any host.
    pub allow_remote: bool,
    /// The most event streams at once.
    pub max_clients: usize,
    /// How long the first read may take.
    pub request_timeout: Duration,
}

/// Refuses `listen` when it is not a loopback address, unless
/// `allow_remote`.
pub fn check_listen(listen: SocketAddr, allow_remote: bool) -> Result<(), DashboardError> {
    if listen.ip().is_loopback() || allow_remote {
        Ok(())
    } else {
        Err(DashboardError::NotLoopback(listen))
    }
}

/// `rollout-controller dashboard`: checks the address, reads the hub,
/// listens, says where on standard error (`ready` is called with the
/// bound address) and serves until `stop` completes.
pub async fn dashboard(
    options: &DashboardOptions,
    ready: impl FnOnce(SocketAddr),
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DashboardError> {
    check_listen(options.listen, options.allow_remote)?;
    let (client, server, _) = connect(options.kubeconfig.as_deref())
        .await
        .map_err(GetError::from)?;
    let target = Target {
        namespace: options.namespace.clone().unwrap_or_default(),
        name: String::new(),
        server,
        request_timeout: options.request_timeout,
    };
    let scope = Scope {
        namespace: options.namespace.clone(),
    };
    let feed = Feed::start(&client, &scope, &target).await?;
    let listener =
        TcpListener::bind(options.listen)
            .await
            .map_err(|source| DashboardError::Bind {
                addr: options.listen,
                source,
            })?;
    let bound = listener.local_addr().map_err(DashboardError::Serve)?;
    ready(bound);
    let limits = Limits {
        clients: options.max_clients,
        any_host: options.allow_remote,
    };
    serve_feed(feed, listener, limits, stop).await
}

/// Serves the dashboard of `namespace` (`None`: all) on `listener` from
/// the hub `client` reaches, until `stop` completes: for tests, which
/// bring their own client and listener.
pub async fn serve(
    client: &Client,
    namespace: Option<String>,
    listener: TcpListener,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DashboardError> {
    let target = Target {
        namespace: namespace.clone().unwrap_or_default(),
        name: String::new(),
        server: String::new(),
        request_timeout: crate::view::hub::DEFAULT_REQUEST_TIMEOUT,
    };
    let feed = Feed::start(client, &Scope { namespace }, &target).await?;
    serve_feed(feed, listener, limits, stop).await
}

async fn serve_feed(
    feed: Feed,
    listener: TcpListener,
    limits: Limits,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), DashboardError> {
    let (fleet, published) = feed.published();
    let (sender, receiver) = watch::channel(Arc::new(published));
    let (stopping, stopped) = oneshot::channel::<()>();
    let feeding = tokio::spawn(feed.run(fleet, sender, async move {
        let _ = stopped.await;
    }));
    let app = routes::router(receiver, limits);
    // The feed stops first: its channel closes, so every event stream
    // ends and the graceful shutdown has no connection left to wait for.
    let shutdown = async move {
        stop.await;
        let _ = stopping.send(());
        let _ = feeding.await;
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(DashboardError::Serve)
}
