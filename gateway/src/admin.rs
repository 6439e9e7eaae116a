//! The admin HTTP endpoints (docs/plugin-api.md §4): `/healthz`, `/readyz`,
//! `/metrics`, `/debug/plugins`. Bound to loopback by default.
//!
//! Every request is bounded: its headers must arrive, and the whole exchange
//! end, within the admin request timeout (a peer that sends half a request
//! and stops is cut off, as is a keep-alive connection left idle that long);
//! its header block is at most [`MAX_HEADER_BYTES`] (a larger one gets
//! `431`); bodies are small. Connections hold places in an [`Admission`]:
//! at most [`MAX_CONNECTIONS_PER_IP`] from one address, and past
//! [`MAX_CONNECTIONS`] a newcomer takes the oldest one's place, so slow
//! peers holding the port cannot keep the kubelet's probe out.
//!
//! The listener runs on a thread and runtime of its own ([`spawn`]): no
//! scrape, however large the registry, takes time from the gRPC path.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rollout_proto::v1alpha1::RolloutStateDetail;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tower::ServiceBuilder;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};

use crate::config::format_duration;
use crate::registry::Registry;
use crate::transport::accept::{self, Accepted};
use crate::transport::admission::Admission;
use crate::upstream::Load;

/// The default of `--admin-request-timeout`.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Admin connections open at once; a newcomer past it takes the oldest
/// one's place.
pub(crate) const MAX_CONNECTIONS: usize = 64;

/// Admin connections open at once from one address; one more is closed as
/// it is accepted.
pub(crate) const MAX_CONNECTIONS_PER_IP: usize = 16;

/// The largest admin request header block (hyper's smallest read buffer):
/// a larger one, a 440 KB `Accept` say, gets `431`.
pub(crate) const MAX_HEADER_BYTES: usize = 8 * 1024;

/// The name of the admin listener's thread.
const THREAD_NAME: &str = "gateway-admin";

/// The largest admin request body (the endpoints take none).
const MAX_BODY_BYTES: usize = 16 * 1024;

/// The paths the admin router answers, for `--help` and docs.
pub const ENDPOINTS: [&str; 4] = ["/healthz", "/readyz", "/metrics", "/debug/plugins"];

/// The admin router over the shared registry; a request not answered within
/// `timeout` gets 408, its body too (a body that stops arriving ends there).
pub fn router(registry: Arc<Registry>, timeout: Duration) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/debug/plugins", get(debug_plugins))
        .with_state(registry)
        .layer(
            ServiceBuilder::new()
                .layer(TimeoutLayer::with_status_code(
                    StatusCode::REQUEST_TIMEOUT,
                    timeout,
                ))
                .layer(RequestBodyTimeoutLayer::new(timeout))
                .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES)),
        )
}

/// Serves `router` on `listener` (see [`serve`]) on a thread of its own,
/// with a current-thread runtime of its own; the receiver resolves once it
/// is done. So the admin endpoints never run on the gRPC path's threads,
/// and whatever they cost (a scrape, a large registry's `/debug/plugins`)
/// is theirs.
pub(crate) fn spawn(
    listener: TcpListener,
    router: Router,
    request_timeout: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<tokio::sync::oneshot::Receiver<()>> {
    let listener = listener.into_std()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name(THREAD_NAME)
        .build()?;
    let (done, finished) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .spawn(move || {
            runtime.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(listener) => serve(listener, router, request_timeout, shutdown).await,
                    Err(error) => tracing::error!(%error, "admin listener unusable"),
                }
            });
            let _ = done.send(());
        })?;
    Ok(finished)
}

/// Serves `router` over HTTP/1.1 on `listener` until `shutdown` resolves;
/// then lets requests in progress finish (for at most `request_timeout`)
/// and closes every connection. A connection's request headers must arrive
/// within `request_timeout`, counted from when the connection is ready for
/// them (so an idle keep-alive connection is closed after it as well).
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    request_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let admission = Admission::new(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_IP);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Twice the places: an evicted connection's task may not have
        // ended yet when its successor is accepted.
        let (stream, peer) = match accept::next(
            &listener,
            &mut connections,
            2 * MAX_CONNECTIONS,
            shutdown.as_mut(),
        )
        .await
        {
            Accepted::Open(stream, peer) => (stream, peer),
            Accepted::Refused(peer) => {
                tracing::debug!(%peer, "admin connection refused: too many open");
                continue;
            }
            Accepted::Shutdown => break,
        };
        let Some(place) = admission.admit(peer.ip()) else {
            tracing::debug!(%peer, max = MAX_CONNECTIONS_PER_IP, "admin connection refused: too many open from its address");
            continue;
        };
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(request_timeout)
            .max_buf_size(MAX_HEADER_BYTES)
            .serve_connection(
                TokioIo::new(stream),
                TowerToHyperService::new(router.clone()),
            );
        let conn = graceful.watch(conn);
        connections.spawn(async move {
            tokio::select! {
                done = conn => if let Err(error) = done {
                    tracing::debug!(%peer, %error, "admin connection ended with an error");
                },
                () = place.evicted() => {
                    tracing::debug!(%peer, "admin connection closed: a newer one took its place");
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(request_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("admin requests still running at shutdown; closing them");
    }
    connections.shutdown().await;
}

async fn readyz(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    let refused = registry.refused_plugins();
    if registry.is_ready() && !refused.is_empty() {
        // A registry entry whose server answered that it is no plugin is a
        // configuration error, as a bad registry is: not ready until fixed.
        // A plugin merely out of reach does not make the gateway unready.
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("plugins not loaded:\n{}\n", refused.join("\n")),
        )
    } else if registry.is_ready() {
        (StatusCode::OK, "ready\n".to_string())
    } else if registry.is_draining() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n".to_string())
    } else {
        let why = registry
            .last_error()
            .unwrap_or_else(|| "no registry file has been read yet".into());
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no plugin registry loaded: {why}\n"),
        )
    }
}

fn initialize_error(load: &Load) -> Option<String> {
    match load {
        Load::NotLoaded { why, .. } => why.as_deref().map(str::to_string),
        Load::Loaded { .. } => None,
    }
}

/// Every metric, as OpenMetrics when `Accept` asks for it (as Prometheus
/// does), else as the Prometheus text.
/// Made on the admin runtime's blocking pool, so that `/healthz` is never
/// queued behind a scrape.
async fn metrics(
    State(registry): State<Arc<Registry>>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    let made =
        tokio::task::spawn_blocking(move || registry.telemetry().metrics.response(&headers)).await;
    match made {
        Ok(answer) => answer.into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The most plugins one `/debug/plugins` answer lists: `?limit=` asks for
/// fewer, `?offset=` pages on.
pub(crate) const MAX_DEBUG_PLUGINS: usize = 1000;

/// Which plugins a `/debug/plugins` answer lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Page {
    pub(crate) offset: usize,
    pub(crate) limit: usize,
}

impl Default for Page {
    fn default() -> Page {
        Page {
            offset: 0,
            limit: MAX_DEBUG_PLUGINS,
        }
    }
}

impl Page {
    /// `offset=N&limit=M`, each optional; a limit over
    /// [`MAX_DEBUG_PLUGINS`] is that. Another parameter, or a value that is
    /// no number, is refused, naming it.
    fn from_query(query: Option<&str>) -> Result<Page, String> {
        let mut page = Page::default();
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let number = || {
                value
                    .parse::<usize>()
                    .map_err(|_| format!("{key}: not a number\n"))
            };
            match key {
                "offset" => page.offset = number()?,
                "limit" => page.limit = number()?.min(MAX_DEBUG_PLUGINS),
                _ => return Err("unknown parameter (offset and limit are known)\n".into()),
            }
        }
        Ok(page)
    }
}

/// Made on the admin runtime's blocking pool, as `/metrics` is.
async fn debug_plugins(
    State(registry): State<Arc<Registry>>,
    uri: axum::http::Uri,
) -> axum::response::Response {
    let page = match Page::from_query(uri.query()) {
        Ok(page) => page,
        Err(why) => return (StatusCode::BAD_REQUEST, why).into_response(),
    };
    match tokio::task::spawn_blocking(move || debug_page(&registry, page)).await {
        Ok(doc) => Json(doc).into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// The `/debug/plugins` document's first page. Never holds certificate or
/// key material.
pub fn debug_json(registry: &Registry) -> Value {
    debug_page(registry, Page::default())
}

/// The `/debug/plugins` document listing the plugins of `page`, with
/// `pluginsTotal` and `nextOffset` (`null` on the last page).
pub(crate) fn debug_page(registry: &Registry, page: Page) -> Value {
    let snapshot = registry.load();
    let reloads = registry.reload_counts();
    let total = snapshot.as_ref().map_or(0, |s| s.plugins.len());
    let end = page.offset.saturating_add(page.limit).min(total);
    let plugins: Vec<Value> = snapshot
        .iter()
        .flat_map(|s| s.plugins.iter())
        .skip(page.offset)
        .take(page.limit)
        .map(|p| {
            let circuit = p.upstream.circuit();
            json!({
                "name": p.name,
                "endpoint": p.endpoint.to_string(),
                "hub": p.hub,
                "circuit": circuit.state.as_str(),
                "consecutiveFailures": circuit.consecutive_failures,
                // Central mode: other hubs' circuits, each its own.
                "circuitByHub": p.upstream.circuits_by_hub().into_iter()
                    .map(|(hub, state)| (hub.to_string(), Value::from(state.as_str())))
                    .collect::<serde_json::Map<String, Value>>(),
                "transport": match p.upstream.key().ca_bundle {
                    None => "plaintext",
                    Some(_) => "tls",
                },
                "clientCertificate": p.upstream.key().client_identity.is_some(),
                "timeout": format_duration(p.policy.timeout),
                "failurePolicy": p.policy.failure_policy.as_str(),
                "failurePolicyByHook": p
                    .policy
                    .failure_policy_by_hook
                    .iter()
                    .map(|(hook, policy)| (rollout_proto::v1alpha1::Hook::name(*hook).to_string(), Value::from(policy.as_str())))
                    .collect::<serde_json::Map<String, Value>>(),
                "hubs": p.hubs,
                "hooks": p.upstream.known_hooks(p.hub.as_ref()),
                // What its requests carry: "counts" once it declared so.
                "stateDetail": match p.upstream.state_detail(p.hub.as_ref()) {
                    RolloutStateDetail::Counts => "counts",
                    _ => "full",
                },
                "loaded": matches!(p.upstream.load_state(p.hub.as_ref()), Load::Loaded { .. }),
                "initializeError": initialize_error(&p.upstream.load_state(p.hub.as_ref())),
                "byHub": p.upstream.load_states().into_iter().map(|(hub, load)| {
                    (hub, json!({
                        "loaded": matches!(load, Load::Loaded { .. }),
                        "initializeError": initialize_error(&load),
                    }))
                }).collect::<serde_json::Map<String, Value>>(),
            })
        })
        .collect();
    let pipelines: Vec<Value> = snapshot
        .iter()
        .flat_map(|s| s.pipelines.iter())
        .map(|p| json!({"name": p.config.name, "hub": p.hub, "plugins": p.config.plugins}))
        .collect();
    json!({
        "generation": snapshot.as_ref().map_or(0, |s| s.generation),
        "ready": registry.is_ready(),
        "plugins": plugins,
        "pluginsTotal": total,
        "nextOffset": (end < total).then_some(end),
        "pipelines": pipelines,
        "lastReloadError": registry.last_error(),
        "reloads": {"success": reloads.success, "failure": reloads.failure},
        "sources": registry.source_labels(),
    })
}
