//! One call, one trace: a test client's span, the gateway's server and
//! client spans, and the SDK plugin's server span, exported by three
//! processes' worth of tracers to one in-process OTLP receiver, share a
//! trace id and chain parent to child.

use crate::common;

use std::time::Duration;

use common::*;
use opentelemetry::trace::{Span as _, SpanKind as OtelKind, Tracer as _};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use rollout_plugin_sdk::prelude::*;
use rollout_plugin_sdk::{ServeOptions, testing};
use rollout_telemetry::{Tracer, TracingOptions};
use rollout_test_support::otlp::{attribute, hex, receiver};

struct Validator;

impl RolloutPlugin for Validator {
    fn info(&self) -> PluginInfo {
        PluginInfo::new("validator", "0.1.0").hooks([Hook::ValidateRolloutCompletion])
    }
}

fn exporting(service: &str, otlp: std::net::SocketAddr) -> TracingOptions {
    TracingOptions {
        otlp_endpoint: Some(format!("http://{otlp}")),
        schedule_delay: Some(Duration::from_millis(50)),
        ..TracingOptions::new(service)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_the_gateways_and_the_plugins_spans_are_one_trace() {
    let (otlp, otlp_addr) = receiver().await;
    let plugin_tracer = Tracer::new(
        "rollout-plugin-sdk",
        &exporting("plugin-under-test", otlp_addr),
    )
    .unwrap();
    let plugin = testing::spawn_with(
        Validator,
        ServeOptions::default().tracer(plugin_tracer.clone()),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "plugins:\n  - name: validator\n    endpoint: {}\n    insecure: true\n",
            plugin.local_addr()
        ),
    )
    .unwrap();
    let gw = gateway_with(dir, path, |o| {
        o.tracing = exporting("gateway-under-test", otlp_addr)
    })
    .await;

    let client_tracer = Tracer::new("test-client", &exporting("test-client", otlp_addr)).unwrap();
    let mut span = client_tracer
        .sdk()
        .span_builder("test-client validate")
        .with_kind(OtelKind::Client)
        .start(client_tracer.sdk());
    let ids = span.span_context().clone();
    let mut request = to("validator", validate_request("cluster-3"));
    request.metadata_mut().insert(
        "traceparent",
        rollout_telemetry::traceparent(&ids).parse().unwrap(),
    );
    let answer = gw
        .client()
        .await
        .validate_rollout_completion(request)
        .await
        .unwrap();
    assert_eq!(answer.into_inner().result(), ValidationResult::Succeeded);
    span.end();
    // Stopping exports the spans still queued.
    gw.stop().await;
    plugin.shutdown().await.unwrap();
    tokio::task::spawn_blocking(move || {
        plugin_tracer.shutdown();
        client_tracer.shutdown();
    })
    .await
    .unwrap();

    let trace = format!("{:032x}", ids.trace_id());
    let spans: Vec<(String, Span)> = otlp
        .spans_with_service()
        .into_iter()
        .filter(|(_, s)| hex(&s.trace_id) == trace)
        .collect();
    let find = |service: &str, kind: SpanKind| {
        let found: Vec<&Span> = spans
            .iter()
            .filter(|(svc, s)| svc == service && s.kind == kind as i32)
            .map(|(_, s)| s)
            .collect();
        assert_eq!(found.len(), 1, "one {kind:?} span of {service}: {spans:#?}");
        found[0].clone()
    };
    let client = find("test-client", SpanKind::Client);
    let gateway_server = find("gateway-under-test", SpanKind::Server);
    let gateway_client = find("gateway-under-test", SpanKind::Client);
    let plugin_server = find("plugin-under-test", SpanKind::Server);
    assert_eq!(hex(&gateway_server.parent_span_id), hex(&client.span_id));
    assert_eq!(
        hex(&gateway_client.parent_span_id),
        hex(&gateway_server.span_id)
    );
    assert_eq!(
        hex(&plugin_server.parent_span_id),
        hex(&gateway_client.span_id)
    );
    // Each hop says the verdict it saw.
    for span in [&gateway_server, &gateway_client] {
        assert_eq!(
            attribute(span, "ocm.rollout.validation.result").as_deref(),
            Some("SUCCEEDED"),
            "{span:#?}"
        );
    }
    assert_eq!(
        plugin_server.name,
        "ocm.rolloutplugin.v1alpha1.RolloutPluginService/ValidateRolloutCompletion"
    );
    for (key, value) in [
        ("rpc.system", "grpc"),
        (
            "rpc.service",
            "ocm.rolloutplugin.v1alpha1.RolloutPluginService",
        ),
        ("rpc.method", "ValidateRolloutCompletion"),
        ("ocm.rollout.plugin", "validator"),
        ("ocm.cluster", "cluster-3"),
        ("rpc.grpc.status_code", "0"),
        ("ocm.rollout.validation.result", "SUCCEEDED"),
    ] {
        assert_eq!(
            attribute(&plugin_server, key).as_deref(),
            Some(value),
            "plugin span {key}"
        );
    }
}
