//! The controller's probes for the kubelet and its metrics
//! (`run --health-listen ADDR`): `GET /healthz` answers 200 while the
//! process runs; `GET /readyz` answers 200 once the controller has listed
//! the ManifestWorkReplicaSets, 503 before, while shutting down and while
//! another ManifestWorkReplicaSet controller is found at work (saying
//! what showed it: [`crate::guard`]) (and on
//! a replica that is not the leader, 200 while it waits: it is healthy and
//! ready to take over); `GET /metrics` is [`ControllerMetrics`], as
//! OpenMetrics when `Accept` asks for it (as Prometheus does), else as the
//! Prometheus text.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::guard::Guard;
use crate::metrics::ControllerMetrics;

/// Whether the controller is ready; shared with the probe server.
#[derive(Debug, Clone, Default)]
pub struct Readiness {
    ready: Arc<AtomicBool>,
    /// What may hold the reconciles back although listed.
    guard: Arc<OnceLock<Arc<Guard>>>,
}

impl Readiness {
    /// Marks the controller ready (or not).
    pub(crate) fn set(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// Whether it is ready.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Makes `/readyz` fail, saying why, while `guard` finds another
    /// ManifestWorkReplicaSet controller at work.
    pub(crate) fn hold_with(&self, guard: Arc<Guard>) {
        let _ = self.guard.set(guard);
    }

    /// Why the reconciles are held back now, if they are.
    fn held(&self) -> Option<String> {
        let finding = self.guard.get()?.finding(jiff::Timestamp::now())?;
        Some(finding.to_string())
    }
}

/// The paths [`router`] answers, for `--help` and docs.
pub const ENDPOINTS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The probe and metrics routes.
pub(crate) fn router(readiness: Readiness, metrics: Arc<ControllerMetrics>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(readiness)
        .route(
            "/metrics",
            get(move |headers: axum::http::HeaderMap| async move {
                metrics.response(&headers).into_response()
            }),
        )
}

async fn readyz(State(readiness): State<Readiness>) -> (StatusCode, String) {
    if !readiness.is_ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "not ready\n".to_owned());
    }
    match readiness.held() {
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not reconciling: {why}\n"),
        ),
        None => (StatusCode::OK, "ready\n".to_owned()),
    }
}

/// Binds `addr` and serves the probes and metrics in a task; returns the
/// bound address. Fails if the address cannot be bound.
pub(crate) async fn serve(
    addr: SocketAddr,
    readiness: Readiness,
    metrics: Arc<ControllerMetrics>,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router(readiness, metrics)).await {
            tracing::warn!(%error, "health listener stopped");
        }
    });
    Ok(bound)
}

#[cfg(test)]
pub(crate) mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The whole HTTP/1.1 answer to `GET path`.
    pub(crate) async fn get(addr: SocketAddr, path: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        stream
            .write_all(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .expect("writes");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("reads");
        answer
    }

    /// Every path of [`ENDPOINTS`] is routed.
    #[tokio::test]
    async fn every_endpoint_is_routed() {
        let addr = serve(
            "127.0.0.1:0".parse().expect("addr"),
            Readiness::default(),
            Arc::new(ControllerMetrics::new()),
        )
        .await
        .expect("binds");
        for path in ENDPOINTS {
            let answer = get(addr, path).await;
            assert!(!answer.starts_with("HTTP/1.1 404"), "{path}: {answer}");
        }
    }

    #[tokio::test]
    async fn probes() {
        let readiness = Readiness::default();
        let metrics = Arc::new(ControllerMetrics::new());
        let addr = serve(
            "127.0.0.1:0".parse().expect("addr"),
            readiness.clone(),
            metrics.clone(),
        )
        .await
        .expect("binds");
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 503"));
        readiness.set(true);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        let guard = Arc::new(Guard::default());
        readiness.hold_with(guard.clone());
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        guard.set_gate("cluster-manager", Some(true));
        let held = get(addr, "/readyz").await;
        assert!(held.starts_with("HTTP/1.1 503"), "{held}");
        assert!(
            held.contains("not reconciling: ClusterManager cluster-manager enables OCM's own"),
            "{held}"
        );
        guard.set_gate("cluster-manager", None);
        assert!(get(addr, "/readyz").await.starts_with("HTTP/1.1 200"));
        metrics.set_leader(true);
        let scraped = get(addr, "/metrics").await;
        assert!(scraped.starts_with("HTTP/1.1 200"), "{scraped}");
        assert!(
            scraped.contains("\nrollout_controller_leader 1\n"),
            "{scraped}"
        );
    }

    /// `/metrics` answers Prometheus (which asks for OpenMetrics) in
    /// OpenMetrics, and curl, a request without `Accept` or one asking for
    /// the Prometheus text in the Prometheus text 0.0.4; each answer is
    /// read by a strict reader of its format, both carry the same
    /// `rollout_controller_*` samples, with the build info and the
    /// `process_*` series, and promtool passes the Prometheus text.
    #[tokio::test]
    async fn metrics_answer_in_the_format_accept_asks_for() {
        use rollout_test_support::metrics::{
            OPENMETRICS, PROMETHEUS_ACCEPT, PROMETHEUS_TEXT, scrape_each,
        };
        let addr = serve(
            "127.0.0.1:0".parse().expect("addr"),
            Readiness::default(),
            Arc::new(ControllerMetrics::new()),
        )
        .await
        .expect("binds");
        let cases: &[(&[&str], &str)] = &[
            (&[PROMETHEUS_ACCEPT], OPENMETRICS),
            (&["application/openmetrics-text"], OPENMETRICS),
            (&[], PROMETHEUS_TEXT),
            (&["*/*"], PROMETHEUS_TEXT),
            (&["text/plain;version=0.0.4"], PROMETHEUS_TEXT),
        ];
        let scrapes = scrape_each(addr, cases).await;
        scrapes.assert_same_samples(|name| name.starts_with("rollout_controller_"));
        let (om, text) = (&scrapes.openmetrics, &scrapes.prometheus);
        let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
        assert!(
            text.samples
                .iter()
                .any(|(n, l, v)| n == "rollout_controller_build_info"
                    && l.contains(&version)
                    && v == "1"),
            "{}",
            scrapes.prometheus_text
        );
        assert_eq!(om.types["rollout_controller_build"], "info");
        for family in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_virtual_memory_bytes",
            "process_open_fds",
            "process_max_fds",
            "process_start_time_seconds",
        ] {
            assert!(
                text.types.contains_key(family),
                "{family}: {:?}",
                text.types
            );
        }
        scrapes.assert_promtool_passes();
    }
}
