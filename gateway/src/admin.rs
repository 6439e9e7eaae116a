//! The admin HTTP endpoints (CONTRACT §4): `/healthz`, `/readyz`,
//! `/metrics`, `/debug/plugins`. Bound to loopback by default.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use serde_json::{Value, json};

use crate::config::{Transport, format_duration};
use crate::registry::Registry;

/// The admin router over the shared registry.
pub fn router(registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/debug/plugins", get(debug_plugins))
        .with_state(registry)
}

async fn readyz(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    if registry.is_ready() {
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

/// The OpenMetrics text format, which Prometheus reads.
const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

async fn metrics(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        registry.telemetry().metrics.encode(),
    )
}

async fn debug_plugins(State(registry): State<Arc<Registry>>) -> Json<Value> {
    Json(debug_json(&registry))
}

/// The `/debug/plugins` document. Never holds certificate or key material.
pub fn debug_json(registry: &Registry) -> Value {
    let snapshot = registry.load();
    let (success, failure) = registry.reload_counts();
    let plugins: Vec<Value> = snapshot
        .iter()
        .flat_map(|s| s.plugins.iter())
        .map(|p| {
            let (circuit, failures) = p.upstream.circuit();
            json!({
                "name": p.name,
                "endpoint": p.endpoint.to_string(),
                "hub": p.hub,
                "circuit": circuit.as_str(),
                "consecutiveFailures": failures,
                "transport": match p.upstream.key().transport {
                    Transport::Plaintext => "plaintext",
                    Transport::Tls { .. } => "tls",
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
                "hooks": p.upstream.known_hooks(),
            })
        })
        .collect();
    let pipelines: Vec<Value> = snapshot
        .iter()
        .flat_map(|s| s.pipelines.iter())
        .map(|(hub, p)| json!({"name": p.name, "hub": hub, "plugins": p.plugins}))
        .collect();
    json!({
        "generation": snapshot.as_ref().map_or(0, |s| s.generation),
        "ready": registry.is_ready(),
        "plugins": plugins,
        "pipelines": pipelines,
        "lastReloadError": registry.last_error(),
        "reloads": {"success": success, "failure": failure},
        "sources": registry.source_labels(),
    })
}
