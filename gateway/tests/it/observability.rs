//! What an operator sees: spans exported over OTLP/gRPC to an in-process
//! receiver, the exact counters on /metrics after a scripted sequence, and the
//! gRPC health service on the gRPC port.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use rollout_gateway::hooks::HookKind;
use rollout_gateway::telemetry::TracingOptions;
use rollout_proto::v1alpha1::{ValidateResponse, ValidationResult};
use rollout_test_support::metrics::{
    self as lint, OPENMETRICS, PROMETHEUS_ACCEPT, PROMETHEUS_TEXT, scrape_each,
};
use rollout_test_support::otlp::{attribute, hex, receiver};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_mutate_is_one_server_span_with_a_client_span_per_attempt() {
    let (otlp, otlp_addr) = receiver().await;
    let a = plugin(Behaviour::new("weights")).await;
    a.set(|b| {
        b.mutate = Mutation::Annotate("weight", "10");
        b.fail_first = Some((1, Code::Unavailable));
    });
    let b = plugin(Behaviour::new("smoke")).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(
        &path,
        format!(
            "plugins:\n{}{}pipelines:\n  - name: canary\n    plugins: [weights, smoke]\n",
            insecure_plugin(
                "weights",
                &a,
                "    retry:\n      maxAttempts: 2\n      initialBackoff: 1ms\n    retryBudget:\n      ratio: 10\n      minPerSecond: 100000\n"
            ),
            insecure_plugin("smoke", &b, ""),
        ),
    )
    .unwrap();
    let gw = gateway_with(dir, path, |o| {
        o.tracing = TracingOptions {
            otlp_endpoint: Some(format!("http://{otlp_addr}")),
            service_name: "gateway-under-test".into(),
            schedule_delay: Some(Duration::from_millis(50)),
            ..TracingOptions::new("gateway-under-test")
        };
    })
    .await;
    // Let the gateway's own Initialize of each plugin pass (it has no span).
    // The retry does not wait on time: the budget refills at 100,000 a second.
    a.wait_calls(HookKind::Initialize, 1).await;
    b.wait_calls(HookKind::Initialize, 1).await;

    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{caller_trace}-{caller_span}-01");
    let mut request = mutate_request("cluster-7", work(512));
    if let Some(r) = request.rollout.as_mut() {
        r.mwrs_namespace = "default".into();
        r.mwrs_name = "app".into();
        r.placement_name = "canary-placement".into();
    }
    let mut request = to("canary", request);
    request
        .metadata_mut()
        .insert("traceparent", traceparent.parse().unwrap());
    gw.client()
        .await
        .mutate_manifest_work(request)
        .await
        .expect("the retried chain succeeds");
    // Shutting down exports the last spans.
    gw.stop().await;

    let spans: Vec<(String, Span)> = otlp.spans_with_service();
    assert!(
        spans
            .iter()
            .all(|(service, _)| service == "gateway-under-test")
    );
    let spans: Vec<Span> = spans.into_iter().map(|(_, s)| s).collect();
    let server: Vec<&Span> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server as i32)
        .collect();
    assert_eq!(server.len(), 1, "{spans:#?}");
    let server = server[0];
    assert_eq!(
        server.name,
        "ocm.rolloutplugin.v1alpha1.RolloutPluginService/MutateManifestWork"
    );
    assert_eq!(hex(&server.trace_id), caller_trace);
    assert_eq!(hex(&server.parent_span_id), caller_span);
    for (key, value) in [
        ("rpc.system", "grpc"),
        ("rpc.method", "MutateManifestWork"),
        ("ocm.rollout.plugin", "canary"),
        ("ocm.mwrs.namespace", "default"),
        ("ocm.mwrs.name", "app"),
        ("ocm.placement", "canary-placement"),
        ("ocm.cluster", "cluster-7"),
        ("rpc.grpc.status_code", "0"),
    ] {
        assert_eq!(
            attribute(server, key).as_deref(),
            Some(value),
            "server span {key}"
        );
    }

    let mut clients: Vec<&Span> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Client as i32)
        .collect();
    clients.sort_by_key(|s| s.start_time_unix_nano);
    let summary: Vec<(String, Option<String>, Option<String>)> = clients
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                attribute(s, "ocm.rollout.attempt"),
                attribute(s, "rpc.grpc.status_code"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "plugin weights MutateManifestWork".to_string(),
                Some("1".into()),
                Some((Code::Unavailable as i32).to_string())
            ),
            (
                "plugin weights MutateManifestWork".to_string(),
                Some("2".into()),
                Some("0".into())
            ),
            (
                "plugin smoke MutateManifestWork".to_string(),
                Some("1".into()),
                Some("0".into())
            ),
        ]
    );
    for client in &clients {
        assert_eq!(client.trace_id, server.trace_id);
        assert_eq!(client.parent_span_id, server.span_id);
        for (key, value) in [
            ("rpc.system", "grpc"),
            ("rpc.method", "MutateManifestWork"),
            ("ocm.mwrs.namespace", "default"),
            ("ocm.mwrs.name", "app"),
            ("ocm.placement", "canary-placement"),
            ("ocm.cluster", "cluster-7"),
        ] {
            assert_eq!(attribute(client, key).as_deref(), Some(value), "{key}");
        }
    }
    assert_eq!(
        attribute(clients[0], "ocm.rollout.plugin").as_deref(),
        Some("weights")
    );
    assert_eq!(
        attribute(clients[2], "ocm.rollout.plugin").as_deref(),
        Some("smoke")
    );
    assert!(clients[1].events.iter().any(|e| e.name == "retry"));

    // Each plugin got its own attempt's span as parent, in the caller's trace.
    let expected = |span: &Span| format!("00-{caller_trace}-{}-01", hex(&span.span_id));
    let seen_a: Vec<String> = a
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.hook == HookKind::MutateManifestWork)
        .filter_map(|s| s.traceparent.clone())
        .collect();
    // The first attempt failed in the plugin itself, so it was seen too.
    assert_eq!(seen_a, vec![expected(clients[0]), expected(clients[1])]);
    assert_eq!(
        b.last(HookKind::MutateManifestWork).unwrap().traceparent,
        Some(expected(clients[2]))
    );
}

/// The spans of one trace, by kind: (server spans, client spans by plugin).
fn trace_spans<'a>(spans: &'a [Span], trace: &str) -> (Vec<&'a Span>, BTreeMap<String, &'a Span>) {
    let of_trace: Vec<&Span> = spans.iter().filter(|s| hex(&s.trace_id) == trace).collect();
    let server = of_trace
        .iter()
        .copied()
        .filter(|s| s.kind == SpanKind::Server as i32)
        .collect();
    let clients = of_trace
        .iter()
        .copied()
        .filter(|s| s.kind == SpanKind::Client as i32)
        .map(|s| (attribute(s, "ocm.rollout.plugin").unwrap_or_default(), s))
        .collect();
    (server, clients)
}

/// A span's status as (code, description).
fn status(span: &Span) -> (StatusCode, String) {
    let status = span.status.clone().unwrap_or_default();
    (
        StatusCode::try_from(status.code).unwrap_or(StatusCode::Unset),
        status.message,
    )
}

/// Failures are searchable: a FAILED validation is an error (naming the
/// plugin that said it and why) on the server span and on that plugin's
/// attempt span, with `ocm.rollout.validation.result`; a fail-open is an
/// attribute on a span that is no error, and its attempt's span an error
/// that says it was ignored; a plugin's error is an error status naming
/// its code on the attempt's span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_validations_fail_opens_and_errors_are_searchable_on_spans() {
    let (otlp, otlp_addr) = receiver().await;
    let smoke = plugin(Behaviour::new("smoke")).await;
    smoke.set(|b| {
        b.validate = ValidateResponse {
            result: ValidationResult::Failed as i32,
            message: "error rate 7% > 1%".into(),
            recheck_after: None,
        };
    });
    let weights = plugin(Behaviour::new("weights")).await;
    let down = plugin(Behaviour::new("down")).await;
    down.set(|b| b.fail = Some((Code::Internal, "lost its database".into())));
    let broken = plugin(Behaviour::new("broken")).await;
    broken.set(|b| b.fail = Some((Code::FailedPrecondition, "not configured".into())));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let once = "    retry:\n      maxAttempts: 1\n";
    std::fs::write(
        &path,
        format!(
            "plugins:\n{}{}{}{}pipelines:\n  - name: canary\n    plugins: [smoke, weights, down]\n  - name: quiet\n    plugins: [weights, down]\n",
            insecure_plugin("smoke", &smoke, once),
            insecure_plugin("weights", &weights, once),
            insecure_plugin("down", &down, &format!("{once}    failurePolicy: Ignore\n")),
            insecure_plugin("broken", &broken, once),
        ),
    )
    .unwrap();
    let gw = gateway_with(dir, path, |o| {
        o.tracing = TracingOptions {
            otlp_endpoint: Some(format!("http://{otlp_addr}")),
            schedule_delay: Some(Duration::from_millis(50)),
            ..TracingOptions::new("gateway-under-test")
        };
    })
    .await;
    for p in [&smoke, &weights, &down, &broken] {
        p.wait_calls(HookKind::Initialize, 1).await;
    }
    let traces = [
        ("canary", "4bf92f3577b34da6a3ce929d0e0e4701"),
        ("quiet", "4bf92f3577b34da6a3ce929d0e0e4702"),
        ("broken", "4bf92f3577b34da6a3ce929d0e0e4703"),
    ];
    let mut client = gw.client().await;
    let mut answers = Vec::new();
    for (target, trace) in traces {
        let mut request = to(target, validate_request("cluster-2"));
        request.metadata_mut().insert(
            "traceparent",
            format!("00-{trace}-00f067aa0ba902b7-01").parse().unwrap(),
        );
        answers.push(client.validate_rollout_completion(request).await);
    }
    let canary = answers[0].as_ref().expect("the pipeline answers");
    assert_eq!(canary.get_ref().result, ValidationResult::Failed as i32);
    assert_eq!(
        trailer(canary.metadata(), "ocm-rollout-failed-open").as_deref(),
        Some("down")
    );
    assert_eq!(
        answers[2].as_ref().expect_err("broken fails").code(),
        Code::FailedPrecondition
    );
    gw.stop().await;
    let spans: Vec<Span> = otlp.spans();

    // The pipeline whose member said FAILED.
    let (server, clients) = trace_spans(&spans, traces[0].1);
    let [server] = server[..] else {
        panic!("one server span: {spans:#?}")
    };
    let (code, description) = status(server);
    assert_eq!(code, StatusCode::Error, "{server:#?}");
    // The description ends with the answer's message: a pipeline's names
    // each member that gave one.
    assert_eq!(
        description,
        "ValidateRolloutCompletion FAILED by plugin \"smoke\": smoke: error rate 7% > 1%"
    );
    for (key, value) in [
        ("ocm.rollout.validation.result", "FAILED"),
        ("ocm.rollout.validation.failed_by", "smoke"),
        ("ocm.rollout.failed_open", "down"),
        ("rpc.grpc.status_code", "0"),
    ] {
        assert_eq!(attribute(server, key).as_deref(), Some(value), "{key}");
    }
    let smoke_span = clients["smoke"];
    assert_eq!(
        status(smoke_span),
        (
            StatusCode::Error,
            "ValidateRolloutCompletion FAILED by plugin \"smoke\": error rate 7% > 1%".into()
        )
    );
    assert_eq!(
        attribute(smoke_span, "ocm.rollout.validation.result").as_deref(),
        Some("FAILED")
    );
    let weights_span = clients["weights"];
    assert_eq!(status(weights_span).0, StatusCode::Unset);
    assert_eq!(
        attribute(weights_span, "ocm.rollout.validation.result").as_deref(),
        Some("SUCCEEDED")
    );
    let down_span = clients["down"];
    assert_eq!(
        status(down_span),
        (StatusCode::Error, "INTERNAL: lost its database".into())
    );
    assert_eq!(attribute(down_span, "ocm.rollout.validation.result"), None);
    // Its policy is Ignore: the span says the failure was ignored; smoke's,
    // under Fail, says its policy and nothing more.
    assert_eq!(
        attribute(down_span, "ocm.rollout.failure_policy").as_deref(),
        Some("Ignore")
    );
    assert_eq!(
        attribute(down_span, "ocm.rollout.failure_ignored").as_deref(),
        Some("true")
    );
    assert_eq!(
        attribute(smoke_span, "ocm.rollout.failure_policy").as_deref(),
        Some("Fail")
    );
    assert_eq!(attribute(smoke_span, "ocm.rollout.failure_ignored"), None);

    // A fail-open alone: the call succeeded, so its span is no error.
    let (server, _) = trace_spans(&spans, traces[1].1);
    let [server] = server[..] else {
        panic!("one server span: {spans:#?}")
    };
    assert_eq!(status(server).0, StatusCode::Unset, "{server:#?}");
    assert_eq!(
        attribute(server, "ocm.rollout.failed_open").as_deref(),
        Some("down")
    );
    assert_eq!(
        attribute(server, "ocm.rollout.validation.result").as_deref(),
        Some("SUCCEEDED")
    );
    assert!(server.events.iter().any(|e| e.name == "fail-open"));

    // A plugin's error under failurePolicy: Fail names its code on its
    // attempt's (client) span; on the server span, a code that is the
    // caller's to judge (FAILED_PRECONDITION) is only `rpc.grpc.status_code`,
    // as OpenTelemetry's RPC conventions say for a gRPC server.
    let (server, clients) = trace_spans(&spans, traces[2].1);
    let [server] = server[..] else {
        panic!("one server span: {spans:#?}")
    };
    assert_eq!(status(server), (StatusCode::Unset, String::new()));
    assert_eq!(
        attribute(server, "rpc.grpc.status_code").as_deref(),
        Some((Code::FailedPrecondition as i32).to_string().as_str())
    );
    assert_eq!(attribute(server, "ocm.rollout.validation.result"), None);
    assert_eq!(
        status(clients["broken"]),
        (
            StatusCode::Error,
            "FAILED_PRECONDITION: not configured".into()
        )
    );
}

/// `/metrics` as a map from `name{labels}` (labels sorted) to value, with the
/// names of the families asked for.
/// The samples whose names start with one of `prefixes`, scraped as
/// Prometheus does (OpenMetrics), labels sorted.
async fn scrape(admin: SocketAddr, prefixes: &[&str]) -> BTreeMap<String, f64> {
    let (status, _, text) = lint::get(admin, "/metrics", &[PROMETHEUS_ACCEPT]).await;
    assert_eq!(status, 200);
    assert!(
        text.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| prefixes.iter().any(|p| l.starts_with(p)))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let series = match series.split_once('{') {
                Some((name, labels)) => {
                    let mut labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
                    labels.sort();
                    format!("{name}{{{}}}", labels.join(","))
                }
                None => series.to_string(),
            };
            (series, value.parse().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn metrics_count_exactly_what_happened() {
    let good = plugin(Behaviour::new("good")).await;
    let bad = plugin(Behaviour::new("bad")).await;
    bad.set(|b| b.fail = Some((Code::InvalidArgument, "no such cluster".into())));
    let flaky = plugin(Behaviour::new("flaky")).await;
    let soft = plugin(Behaviour::new("soft")).await;
    soft.set(|b| b.fail = Some((Code::Internal, "smoke test crashed".into())));
    let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone_addr = gone.local_addr().unwrap();
    drop(gone);
    let config = |timeout: &str| {
        format!(
            "plugins:\n{}{}{}{}  - name: gone\n    endpoint: {gone_addr}\n    insecure: true\n    timeout: {timeout}\n    retry:\n      maxAttempts: 1\n    circuitBreaker:\n      consecutiveFailures: 2\n      openFor: 30s\npipelines:\n  - name: p\n    plugins: [good, soft]\n",
            insecure_plugin("good", &good, ""),
            insecure_plugin("bad", &bad, ""),
            insecure_plugin(
                "flaky",
                &flaky,
                "    retry:\n      maxAttempts: 2\n      initialBackoff: 1ms\n    retryBudget:\n      ratio: 10\n      minPerSecond: 100000\n"
            ),
            insecure_plugin("soft", &soft, "    failurePolicy: Ignore\n"),
        )
    };
    let gw = gateway(&config("5s")).await;
    // The gateway's own Initialize of each plugin goes around the stacks and
    // counts nowhere; let it finish before the plugins' behaviour matters.
    for p in [&good, &bad, &flaky, &soft] {
        p.wait_calls(HookKind::Initialize, 1).await;
    }
    flaky.set(|b| b.fail_first = Some((1, Code::Unavailable)));
    let mut c = gw.client().await;

    for _ in 0..2 {
        c.begin_rollout(to("good", rollout("c1"))).await.unwrap();
    }
    let e = c.begin_rollout(to("bad", rollout("c1"))).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    c.begin_rollout(to("flaky", rollout("c1"))).await.unwrap();
    let answer = c.begin_rollout(to("p", rollout("c1"))).await.unwrap();
    assert_eq!(
        trailer(answer.metadata(), "ocm-rollout-failed-open").as_deref(),
        Some("soft")
    );
    for _ in 0..3 {
        let e = c
            .begin_rollout(to("gone", rollout("c1")))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable);
    }
    // A good reload (a changed timeout), then a bad one.
    gw.write_config(&config("4s"));
    gw.wait_generation(2).await;
    gw.write_config("plugins:\n  - name: broken\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gw.debug().await["lastReloadError"].is_null() {
        assert!(std::time::Instant::now() < deadline, "bad reload not seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let m = scrape(gw.admin, &["rollout_gateway_"]).await;
    let counters: BTreeMap<&str, f64> = m
        .iter()
        .filter(|(k, _)| {
            !k.contains("_bucket")
                && !k.contains("_sum")
                && !k.starts_with("rollout_gateway_call_duration")
                // A time and the build's revision: checked on their own.
                && !k.starts_with("rollout_gateway_config_last_reload_success_timestamp")
                && !k.starts_with("rollout_gateway_build_info")
        })
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    let expected: BTreeMap<&str, f64> = [
        // Per plugin call, by the gateway's verdict.
        (r#"rollout_gateway_hook_requests_total{code="OK",hook="BeginRollout",hub="",plugin="good"}"#, 3.0),
        (r#"rollout_gateway_hook_requests_total{code="INVALID_ARGUMENT",hook="BeginRollout",hub="",plugin="bad"}"#, 1.0),
        (r#"rollout_gateway_hook_requests_total{code="OK",hook="BeginRollout",hub="",plugin="flaky"}"#, 1.0),
        (r#"rollout_gateway_hook_requests_total{code="INTERNAL",hook="BeginRollout",hub="",plugin="soft"}"#, 1.0),
        (r#"rollout_gateway_hook_requests_total{code="UNAVAILABLE",hook="BeginRollout",hub="",plugin="gone"}"#, 3.0),
        // Per attempt actually sent.
        (r#"rollout_gateway_upstream_attempts_total{code="OK",hook="BeginRollout",hub="",plugin="good"}"#, 3.0),
        (r#"rollout_gateway_upstream_attempts_total{code="INVALID_ARGUMENT",hook="BeginRollout",hub="",plugin="bad"}"#, 1.0),
        (r#"rollout_gateway_upstream_attempts_total{code="UNAVAILABLE",hook="BeginRollout",hub="",plugin="flaky"}"#, 1.0),
        (r#"rollout_gateway_upstream_attempts_total{code="OK",hook="BeginRollout",hub="",plugin="flaky"}"#, 1.0),
        (r#"rollout_gateway_upstream_attempts_total{code="INTERNAL",hook="BeginRollout",hub="",plugin="soft"}"#, 1.0),
        // A plugin never loaded is sent its Initialize, not the hook.
        (r#"rollout_gateway_upstream_attempts_total{code="UNAVAILABLE",hook="Initialize",hub="",plugin="gone"}"#, 2.0),
        (r#"rollout_gateway_retries_total{hook="BeginRollout",hub="",plugin="flaky"}"#, 1.0),
        (r#"rollout_gateway_fail_open_total{hook="BeginRollout",hub="",plugin="soft"}"#, 1.0),
        (r#"rollout_gateway_circuit_rejections_total{hook="Initialize",hub="",plugin="gone"}"#, 1.0),
        // Histogram counts: one observation per plugin call.
        (r#"rollout_gateway_hook_duration_seconds_count{hook="BeginRollout",hub="",plugin="good"}"#, 3.0),
        (r#"rollout_gateway_hook_duration_seconds_count{hook="BeginRollout",hub="",plugin="bad"}"#, 1.0),
        (r#"rollout_gateway_hook_duration_seconds_count{hook="BeginRollout",hub="",plugin="flaky"}"#, 1.0),
        (r#"rollout_gateway_hook_duration_seconds_count{hook="BeginRollout",hub="",plugin="soft"}"#, 1.0),
        (r#"rollout_gateway_hook_duration_seconds_count{hook="BeginRollout",hub="",plugin="gone"}"#, 3.0),
        // Per call from the controller, by target.
        (r#"rollout_gateway_calls_total{code="OK",hook="BeginRollout",target="good"}"#, 2.0),
        (r#"rollout_gateway_calls_total{code="INVALID_ARGUMENT",hook="BeginRollout",target="bad"}"#, 1.0),
        (r#"rollout_gateway_calls_total{code="OK",hook="BeginRollout",target="flaky"}"#, 1.0),
        (r#"rollout_gateway_calls_total{code="OK",hook="BeginRollout",target="p"}"#, 1.0),
        (r#"rollout_gateway_calls_total{code="UNAVAILABLE",hook="BeginRollout",target="gone"}"#, 3.0),
        // State, read at scrape time.
        (r#"rollout_gateway_circuit_state{hub="",plugin="good"}"#, 0.0),
        (r#"rollout_gateway_circuit_state{hub="",plugin="bad"}"#, 0.0),
        (r#"rollout_gateway_circuit_state{hub="",plugin="flaky"}"#, 0.0),
        (r#"rollout_gateway_circuit_state{hub="",plugin="soft"}"#, 0.0),
        (r#"rollout_gateway_circuit_state{hub="",plugin="gone"}"#, 1.0),
        // One series per state, 1 for the state the circuit is in.
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="good",state="closed"}"#, 1.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="good",state="open"}"#, 0.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="good",state="half-open"}"#, 0.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="bad",state="closed"}"#, 1.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="bad",state="open"}"#, 0.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="bad",state="half-open"}"#, 0.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="flaky",state="closed"}"#, 1.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="flaky",state="open"}"#, 0.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="flaky",state="half-open"}"#, 0.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="soft",state="closed"}"#, 1.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="soft",state="open"}"#, 0.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="soft",state="half-open"}"#, 0.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="gone",state="closed"}"#, 0.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="gone",state="open"}"#, 1.0),
        (r#"rollout_gateway_circuit_breaker_state{hub="",plugin="gone",state="half-open"}"#, 0.0),
        (r#"rollout_gateway_plugin_loaded{hub="",plugin="good"}"#, 1.0),
        (r#"rollout_gateway_plugin_loaded{hub="",plugin="bad"}"#, 1.0),
        (r#"rollout_gateway_plugin_loaded{hub="",plugin="flaky"}"#, 1.0),
        (r#"rollout_gateway_plugin_loaded{hub="",plugin="soft"}"#, 1.0),
        (r#"rollout_gateway_plugin_loaded{hub="",plugin="gone"}"#, 0.0),
        (r#"rollout_gateway_config_reloads_total{result="success"}"#, 2.0),
        (r#"rollout_gateway_config_reloads_total{result="failure"}"#, 1.0),
        // The bad reload is the last: the registry in use is not the file's.
        ("rollout_gateway_config_last_reload_successful", 0.0),
        ("rollout_gateway_config_generation", 2.0),
    ]
    .into_iter()
    .collect();
    assert_eq!(counters, expected);
    let build = scrape(gw.admin, &["rollout_gateway_build_info"]).await;
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(
        build.iter().any(|(k, v)| k.contains(&version) && *v == 1.0),
        "{build:?}"
    );

    let process = scrape(gw.admin, &["process_"]).await;
    assert!(
        process["process_resident_memory_bytes"] > 1e6,
        "{process:?}"
    );
    assert!(process["process_open_fds"] >= 3.0, "{process:?}");
    assert!(process.contains_key("process_cpu_seconds_total"));
    gw.stop().await;
}

async fn health(addr: SocketAddr, service: &str) -> ServingStatus {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .expect("health check answered");
    ServingStatus::try_from(answer.into_inner().status).unwrap()
}

#[tokio::test]
async fn the_grpc_health_service_follows_readiness() {
    let p = plugin(Behaviour::new("p")).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    // No registry yet: the file does not exist.
    let gw = gateway_with(dir, path.clone(), |_| {}).await;
    for service in ["", rollout_proto::SERVICE_NAME] {
        assert_eq!(health(gw.grpc, service).await, ServingStatus::NotServing);
    }
    std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("p", &p, ""))).unwrap();
    gw.wait_generation(1).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while health(gw.grpc, "").await != ServingStatus::Serving {
        assert!(std::time::Instant::now() < deadline, "never SERVING");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        health(gw.grpc, rollout_proto::SERVICE_NAME).await,
        ServingStatus::Serving
    );
    // An unknown service is NOT_FOUND, as the health protocol says.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", gw.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    let e = client
        .check(HealthCheckRequest {
            service: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);

    // Draining: a Watch on an open connection sees NOT_SERVING.
    let mut watch = client
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);
    let registry = gw.running.as_ref().unwrap().registry.clone();
    registry.set_draining();
    let next = tokio::time::timeout(Duration::from_secs(5), watch.message())
        .await
        .expect("the watch hears the drain")
        .unwrap()
        .unwrap();
    assert_eq!(next.status, ServingStatus::NotServing as i32);
    drop(watch);
    gw.stop().await;
}

#[tokio::test]
async fn metric_families_are_typed_and_appear_with_their_first_series() {
    let p = plugin(Behaviour::new("p")).await;
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("p", &p, ""))).await;
    let (_, _, before) = lint::get(gw.admin, "/metrics", &[PROMETHEUS_ACCEPT]).await;
    // Nothing happened yet: event families have no series, so no lines.
    assert!(!before.contains("rollout_gateway_hook_requests"));
    gw.client()
        .await
        .begin_rollout(to("p", rollout("c1")))
        .await
        .unwrap();
    let (status, _, text) = lint::get(gw.admin, "/metrics", &[PROMETHEUS_ACCEPT]).await;
    assert_eq!(status, 200);
    for family in [
        "# TYPE rollout_gateway_hook_requests counter",
        "# TYPE rollout_gateway_hook_duration_seconds histogram",
        "# UNIT rollout_gateway_hook_duration_seconds seconds",
        "# TYPE rollout_gateway_upstream_attempts counter",
        "# TYPE rollout_gateway_calls counter",
        "# TYPE rollout_gateway_circuit_state gauge",
        "# TYPE rollout_gateway_circuit_breaker_state gauge",
        "# TYPE rollout_gateway_config_reloads counter",
        "# TYPE rollout_gateway_config_last_reload_successful gauge",
        "# TYPE rollout_gateway_config_last_reload_success_timestamp_seconds gauge",
        "# TYPE rollout_gateway_build info",
        "# TYPE rollout_gateway_config_generation gauge",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_virtual_memory_bytes gauge",
        "# TYPE process_max_fds gauge",
    ] {
        assert!(text.contains(family), "{family} missing from:\n{text}");
    }
    // The buckets span 1 ms to 30 s.
    assert!(text.contains(r#"rollout_gateway_hook_duration_seconds_bucket{le="0.001",hook="BeginRollout",plugin="p",hub=""}"#), "{text}");
    assert!(text.contains(r#"rollout_gateway_hook_duration_seconds_bucket{le="30.0",hook="BeginRollout",plugin="p",hub=""}"#), "{text}");
    gw.stop().await;
}

/// `/metrics` answers Prometheus (which asks for OpenMetrics) in
/// OpenMetrics, and curl, a request without `Accept` or one asking for the
/// Prometheus text in the Prometheus text 0.0.4; each answer is read by a
/// strict reader of its format, the two carry the same samples, and
/// promtool passes the Prometheus text.
#[tokio::test]
async fn metrics_answer_in_the_format_accept_asks_for() {
    let p = plugin(Behaviour::new("p")).await;
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("p", &p, ""))).await;
    gw.client()
        .await
        .begin_rollout(to("p", rollout("c1")))
        .await
        .unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&[PROMETHEUS_ACCEPT], OPENMETRICS),
        (&["application/openmetrics-text;version=1.0.0"], OPENMETRICS),
        (&[], PROMETHEUS_TEXT),
        (&["*/*"], PROMETHEUS_TEXT),
        (&["text/plain;version=0.0.4"], PROMETHEUS_TEXT),
        (
            &["application/openmetrics-text;q=0.1, text/plain;q=0.9"],
            PROMETHEUS_TEXT,
        ),
    ];
    let scrapes = scrape_each(gw.admin, cases).await;
    // The process's own CPU and memory move between scrapes.
    scrapes.assert_same_samples(|name| name.starts_with("rollout_gateway_"));
    let (om, text) = (&scrapes.openmetrics, &scrapes.prometheus);
    assert_eq!(om.types["rollout_gateway_calls"], "counter");
    assert_eq!(text.types["rollout_gateway_calls_total"], "counter");
    assert_eq!(text.types["rollout_gateway_build_info"], "gauge");
    scrapes.assert_promtool_passes();
    gw.stop().await;
}

/// `rollout_gateway_config_last_reload_successful` is 0 from a rejected
/// registry change for as long as it stays, and 1 again once a good one
/// loads; the success timestamp moves only on a load.
#[tokio::test]
async fn the_last_reload_result_is_a_gauge_until_a_good_registry_loads() {
    let p = plugin(Behaviour::new("p")).await;
    let good = format!("plugins:\n{}", insecure_plugin("p", &p, ""));
    let gw = gateway(&good).await;
    let last = |m: &BTreeMap<String, f64>| {
        (
            m["rollout_gateway_config_last_reload_successful"],
            m["rollout_gateway_config_last_reload_success_timestamp_seconds"],
        )
    };
    let (ok, loaded_at) = last(&scrape(gw.admin, &["rollout_gateway_config_last"]).await);
    assert_eq!(ok, 1.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 60.0..=now).contains(&loaded_at),
        "{loaded_at} vs {now}"
    );

    gw.write_config("plugins:\n  - name: broken\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gw.debug().await["lastReloadError"].is_null() {
        assert!(std::time::Instant::now() < deadline, "bad reload not seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Rejected, and still rejected a while later: no time makes it 1.
    for _ in 0..2 {
        let m = scrape(gw.admin, &["rollout_gateway_config_last"]).await;
        assert_eq!(last(&m), (0.0, loaded_at));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    gw.write_config(&format!(
        "plugins:\n{}",
        insecure_plugin("p", &p, "    timeout: 4s\n")
    ));
    gw.wait_generation(2).await;
    let (ok, reloaded_at) = last(&scrape(gw.admin, &["rollout_gateway_config_last"]).await);
    assert_eq!(ok, 1.0);
    assert!(reloaded_at > loaded_at, "{reloaded_at} after {loaded_at}");
    gw.stop().await;
}

/// A plugin failing open on every call (`failurePolicy: Ignore`) is logged
/// once a minute, not once per call; the counter has every one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_fail_open_warnings_are_written_once_a_minute() {
    let lines = crate::foreign_text::log_lines("json", 20).await;
    let warnings: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["plugin"] == "soft" && v["level"] == "WARN")
        .collect();
    assert_eq!(warnings.len(), 1, "{lines:#?}");
    assert_eq!(warnings[0]["left_out"], 0);
}
