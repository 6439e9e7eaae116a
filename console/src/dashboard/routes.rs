//! The dashboard's HTTP routes, all `GET`, none writing anywhere:
//!
//! | path | answer |
//! |---|---|
//! | `/` | the page (HTML; its script and style below, nothing from elsewhere) |
//! | `/dashboard.js`, `/dashboard.css` | the page's script and style |
//! | `/api/rollouts` | `{"rollouts": [row…], "trouble": null or text}`: every ManifestWorkReplicaSet shown |
//! | `/api/rollouts/{namespace}/{name}` | one set's view, as `get -o json` prints it; 404 when there is none |
//! | `/api/events`, `/api/events/{namespace}/{name}` | server-sent events, one `fleet` event per change: `{"rollouts", "trouble", "view"}` (the view of the set named, else `null`) |
//!
//! Every answer carries a strict Content-Security-Policy (scripts, styles
//! and connections from the page's own origin only; Trusted Types, so no
//! string becomes markup), `X-Content-Type-Options: nosniff`, no framing,
//! no referrer, no caching. A request naming another host than a loopback
//! one is refused (421) unless remote clients are allowed, so that a page
//! elsewhere cannot read the dashboard by pointing a name at 127.0.0.1.
//! At most [`Limits::clients`] event streams are open at once (503
//! beyond); each holds only the latest frame, however slow its reader.

use std::convert::Infallible;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::Stream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::feed::Published;
use super::fleet::Key;

/// The page, its script and its style, in the binary.
const INDEX_HTML: &str = include_str!("assets/index.html");
const DASHBOARD_JS: &str = include_str!("assets/dashboard.js");
const DASHBOARD_CSS: &str = include_str!("assets/dashboard.css");

/// The Content-Security-Policy of every answer.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'; \
     trusted-types 'none'";

/// How often an idle event stream says it is alive (a comment line), so
/// that a reader gone away is noticed and its slot freed.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The paths the dashboard answers, for `--help` and docs.
pub const ENDPOINTS: [&str; 5] = [
    "/",
    "/api/rollouts",
    "/api/rollouts/{namespace}/{name}",
    "/api/events",
    "/api/events/{namespace}/{name}",
];

/// What the dashboard allows its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most event streams open at once.
    pub clients: usize,
    /// Whether a request may name any host (the dashboard listens beyond
    /// loopback); else only `localhost` and loopback addresses.
    pub any_host: bool,
}

#[derive(Clone)]
struct Shared {
    fleet: watch::Receiver<Arc<Published>>,
    clients: Arc<Semaphore>,
}

/// The routes over `fleet` (see the module documentation).
pub(crate) fn router(fleet: watch::Receiver<Arc<Published>>, limits: Limits) -> Router {
    let shared = Shared {
        fleet,
        clients: Arc::new(Semaphore::new(limits.clients)),
    };
    Router::new()
        .route("/", get(|| asset("text/html; charset=utf-8", INDEX_HTML)))
        .route(
            "/dashboard.js",
            get(|| asset("text/javascript; charset=utf-8", DASHBOARD_JS)),
        )
        .route(
            "/dashboard.css",
            get(|| asset("text/css; charset=utf-8", DASHBOARD_CSS)),
        )
        .route("/api/rollouts", get(rollouts))
        .route("/api/rollouts/{namespace}/{name}", get(rollout))
        .route("/api/events", get(events_of_all))
        .route("/api/events/{namespace}/{name}", get(events_of_one))
        .with_state(shared)
        // Before any route: a request naming a foreign host reads nothing.
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            check_host(limits.any_host, request, next)
        }))
        // Outermost: every answer carries the headers, refusals included.
        .layer(middleware::map_response(security_headers))
}

async fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn json(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from(body),
    )
        .into_response()
}

async fn rollouts(State(shared): State<Shared>) -> Response {
    let list = shared.fleet.borrow().list();
    json(StatusCode::OK, list)
}

async fn rollout(
    State(shared): State<Shared>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let view = shared
        .fleet
        .borrow()
        .views
        .get(&(namespace.clone(), name.clone()))
        .cloned();
    match view {
        Some(view) => json(StatusCode::OK, view),
        None => {
            let error = format!("no ManifestWorkReplicaSet {namespace}/{name}");
            json(
                StatusCode::NOT_FOUND,
                serde_json::json!({ "error": error }).to_string(),
            )
        }
    }
}

async fn events_of_all(State(shared): State<Shared>) -> Response {
    events(&shared, None)
}

async fn events_of_one(
    State(shared): State<Shared>,
    Path(key): Path<(String, String)>,
) -> Response {
    events(&shared, Some(key))
}

fn events(shared: &Shared, key: Option<Key>) -> Response {
    let Ok(permit) = shared.clients.clone().try_acquire_owned() else {
        let busy = "too many dashboard clients; close another tab or raise --max-clients\n";
        return (StatusCode::SERVICE_UNAVAILABLE, busy).into_response();
    };
    Sse::new(frames(shared.fleet.clone(), key, permit))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// One reader's frames: the fleet now, then on every change that changes
/// what this reader sees; ends when the feed stops. `permit` is the
/// reader's slot, freed when the stream is dropped.
fn frames(
    fleet: watch::Receiver<Arc<Published>>,
    key: Option<Key>,
    permit: OwnedSemaphorePermit,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let start = (fleet, key, permit, None::<u64>);
    futures::stream::unfold(start, |(mut fleet, key, permit, last)| async move {
        loop {
            if last.is_some() && fleet.changed().await.is_err() {
                return None;
            }
            let frame = fleet.borrow_and_update().frame(key.as_ref());
            let mut hasher = DefaultHasher::new();
            frame.hash(&mut hasher);
            let seen = Some(hasher.finish());
            if seen != last {
                let event = Event::default().event("fleet").data(frame);
                return Some((Ok(event), (fleet, key, permit, seen)));
            }
        }
    })
}

/// Whether `host` (a `Host` header's value) names this machine's
/// loopback: `localhost`, `127.0.0.0/8` or `[::1]`, with any port.
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

async fn check_host(any_host: bool, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if any_host || is_loopback_host(host) {
        return next.run(request).await;
    }
    let refused = "this dashboard answers requests for localhost and loopback addresses only\n";
    (StatusCode::MISDIRECTED_REQUEST, refused).into_response()
}

async fn security_headers(mut response: Response) -> Response {
    let headers: &mut HeaderMap = response.headers_mut();
    let set = [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        (
            header::HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ),
        (
            header::HeaderName::from_static("cross-origin-resource-policy"),
            HeaderValue::from_static("same-origin"),
        ),
    ];
    for (name, value) in set {
        headers.insert(name, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::is_loopback_host;

    #[test]
    fn loopback_hosts_are_localhost_and_loopback_addresses_with_any_port() {
        for (host, loopback) in [
            ("localhost", true),
            ("LOCALHOST:3100", true),
            ("127.0.0.1:3100", true),
            ("127.1.2.3", true),
            ("[::1]:3100", true),
            ("[::1]", true),
            ("", false),
            ("evil.example:3100", false),
            ("localhost.evil.example", false),
            ("10.0.0.1:3100", false),
            ("[::2]:3100", false),
            ("127.0.0.1.nip.io", false),
        ] {
            assert_eq!(is_loopback_host(host), loopback, "{host:?}");
        }
    }
}
