//! The controller's spans at a real OTLP/gRPC receiver on 127.0.0.1, from a
//! simulated rollout through a real gateway and a scripted plugin: failures
//! are found as Jaeger finds them, by error status and by attribute.

use std::time::Duration;

use crate::common::*;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use rollout_console::sim::{self, Config, Recorder, StrategyFlags};
use rollout_controller::hooks::{Call, GatewayHooks, GatewayOptions, HookCalls};
use rollout_controller::telemetry::{Tracing, TracingOptions};
use rollout_gateway::app;
use rollout_proto::v1alpha1::{InitializeRequest, ValidationResult};
use rollout_test_support::otlp::{attribute, event_attribute, receiver, status};

/// A controller tracer exporting to `receiver` at once.
fn exporting(receiver: std::net::SocketAddr) -> Tracing {
    Tracing::new(&TracingOptions {
        otlp_endpoint: Some(format!("http://{receiver}")),
        schedule_delay: Some(Duration::from_millis(50)),
        ..TracingOptions::new("controller-under-test")
    })
    .expect("the exporter builds")
}

/// Exports what is queued and stops the exporter.
async fn flush(telemetry: Tracing) {
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .unwrap();
}

/// A gateway whose pipeline `canary` is the scripted plugin `smoke` and
/// `down`, a plugin nothing answers for, whose failures are ignored.
async fn gateway_with_a_fail_open(smoke: std::net::SocketAddr) -> (app::Running, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let down = closed_port().await;
    std::fs::write(
        &path,
        format!(
            "defaults:\n  timeout: 5s\n  retry:\n    maxAttempts: 1\nplugins:\n\
             \x20 - name: smoke\n    endpoint: {smoke}\n    insecure: true\n\
             \x20 - name: down\n    endpoint: {down}\n    insecure: true\n    failurePolicy: Ignore\n\
             pipelines:\n  - name: canary\n    plugins: [smoke, down]\n"
        ),
    )
    .unwrap();
    let running = app::start(app::Options {
        configs: vec![path],
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        ..app::Options::default()
    })
    .await
    .expect("the gateway starts");
    // The registry was read at start; the directory may go.
    drop(dir);
    let url = format!("http://{}", running.grpc_addr);
    (running, url)
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_and_a_failed_validation_are_errors_on_the_controllers_spans() {
    let (otlp, otlp_addr) = receiver().await;
    let (plugin, plugin_addr) = plugin().await;
    plugin.answer(
        "cluster-002",
        ValidationResult::Failed,
        "error rate 7% > 1%",
        None,
    );
    let (gateway, url) = gateway_with_a_fail_open(plugin_addr).await;
    let telemetry = exporting(otlp_addr);
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: url.clone(),
            timeout: Duration::from_secs(10),
            tls: None,
        },
        telemetry.clone(),
    )
    .unwrap();
    let strategy = StrategyFlags {
        kind: "All".into(),
        plugin: Some("canary".into()),
        abort_on_failure: true,
        ..StrategyFlags::default()
    }
    .strategy()
    .unwrap();
    let mut config = Config::new(3, strategy);
    config.max_steps = 50;
    let summary = sim::run(
        &config,
        &Recorder::new(hooks),
        &telemetry,
        Some(&url),
        &mut sim::JsonLines::new(std::io::sink()),
    )
    .await
    .expect("the rollout runs to its end");
    assert_eq!(summary.result, sim::Outcome::Aborted, "{summary:?}");
    flush(telemetry).await;
    gateway.shutdown().await;
    let spans = otlp.spans();

    // The reconcile that started the abort is an error saying why, with
    // what a search needs as attributes and events.
    let reconciles = named(&spans, "reconcile ManifestWorkReplicaSet");
    let aborted: Vec<&Span> = reconciles
        .iter()
        .copied()
        .filter(|s| attribute(s, "ocm.rollout.aborted").as_deref() == Some("true"))
        .collect();
    let [abort] = aborted[..] else {
        panic!("one reconcile starts the abort: {reconciles:#?}")
    };
    let (code, description) = status(abort);
    assert_eq!(code, StatusCode::Error);
    assert!(
        description.contains("aborted: placement")
            && description.contains("cluster-002 Failed (")
            && description.contains("error rate 7% > 1%")
            && description.contains("rolling back to revision"),
        "{description}"
    );
    for (key, value) in [
        ("ocm.rollout.abort.action", "RollBack"),
        ("ocm.rollout.abort.clusters", "cluster-002"),
        ("ocm.rollout.plugin", "canary"),
        ("ocm.rollout.aborting", "true"),
    ] {
        assert_eq!(attribute(abort, key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(
        event_attribute(abort, "rollout aborted", "ocm.rollout.abort.clusters").as_deref(),
        Some("cluster-002")
    );
    assert!(event_attribute(abort, "rollback started", "ocm.rollout.rollback.revision").is_some());
    // The steps of the rollback that follow say so, and are no errors.
    let rolling_back: Vec<&Span> = reconciles
        .iter()
        .copied()
        .filter(|s| {
            attribute(s, "ocm.rollout.aborting").as_deref() == Some("true")
                && attribute(s, "ocm.rollout.aborted").is_none()
        })
        .collect();
    assert!(!rolling_back.is_empty(), "{reconciles:#?}");
    assert!(
        rolling_back
            .iter()
            .all(|s| status(s).0 != StatusCode::Error)
    );

    // The FAILED validation is an error on its hook span; the others say
    // their verdict; every answer names the member that failed open.
    let validations = named(
        &spans,
        "ocm.rolloutplugin.v1alpha1.RolloutPluginService/ValidateRolloutCompletion",
    );
    let failed: Vec<&Span> = validations
        .iter()
        .copied()
        .filter(|s| attribute(s, "ocm.cluster").as_deref() == Some("cluster-002"))
        .collect();
    assert!(!failed.is_empty(), "{validations:#?}");
    for span in &failed {
        assert_eq!(
            status(span),
            (
                StatusCode::Error,
                "ValidateRolloutCompletion FAILED by plugin \"canary\": smoke: error rate 7% > 1%"
                    .into()
            )
        );
        assert_eq!(
            attribute(span, "ocm.rollout.validation.result").as_deref(),
            Some("FAILED")
        );
        assert_eq!(
            attribute(span, "rpc.grpc.status_code").as_deref(),
            Some("0")
        );
    }
    let passed: Vec<&Span> = validations
        .iter()
        .copied()
        .filter(|s| attribute(s, "ocm.cluster").as_deref() != Some("cluster-002"))
        .collect();
    assert!(!passed.is_empty(), "{validations:#?}");
    for span in passed.iter().chain(&failed) {
        assert_eq!(
            attribute(span, "ocm.rollout.failed_open").as_deref(),
            Some("down")
        );
    }
    for span in &passed {
        assert_eq!(status(span).0, StatusCode::Unset, "{span:#?}");
        assert_eq!(
            attribute(span, "ocm.rollout.validation.result").as_deref(),
            Some("SUCCEEDED")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_error_is_an_error_naming_its_code() {
    let (otlp, otlp_addr) = receiver().await;
    let gw = gateway(&[]).await;
    let telemetry = exporting(otlp_addr);
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: gw.url.clone(),
            timeout: Duration::from_secs(10),
            tls: None,
        },
        telemetry.clone(),
    )
    .unwrap();
    let trace = telemetry.reconcile_span("default", "hello");
    let request = InitializeRequest {
        controller_version: "test".into(),
        hub_name: String::new(),
    };
    let call = Call {
        plugin: "nowhere",
        trace: &trace,
    };
    let error = hooks.initialize(call, request).await.expect_err("unknown");
    assert_eq!(error.code, tonic::Code::NotFound);
    drop(trace);
    flush(telemetry).await;
    gw.running.shutdown().await;
    let spans = otlp.spans();
    let [span] = named(
        &spans,
        "ocm.rolloutplugin.v1alpha1.RolloutPluginService/Initialize",
    )[..] else {
        panic!("{spans:#?}")
    };
    let (code, description) = status(span);
    assert_eq!(code, StatusCode::Error);
    assert!(
        description.starts_with("NOT_FOUND: ") && description.contains("nowhere"),
        "{description}"
    );
}
