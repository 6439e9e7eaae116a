//! The gateway client against a real in-process gateway and a scripted
//! plugin: the plugin key, the deadline, the trace context, typed answers,
//! trailers, errors and the call counters.

use crate::common;

use rollout_plugin_sdk::test_certs::{TestCa, TestCert};
use std::time::Duration;

use common::*;
use opentelemetry::trace::TraceContextExt;
use rollout_controller::hooks::{
    Call, GatewayHooks, GatewayOptions, GatewayTls, HookCalls, HookKind, RolloutRequest,
    encode_state,
};
use rollout_controller::telemetry::Tracing;
use rollout_proto::v1alpha1::*;
use serde_json::json;

/// A request whose state (one cluster completed) is encoded ahead, as the
/// orchestration shares it between calls.
fn rollout(cluster: &str) -> RolloutRequest {
    let state = RolloutState {
        completed: vec![ClusterRolloutStatus {
            cluster_name: "c0".into(),
            rollout_status: RolloutStatus::Succeeded as i32,
            manifest_revision_name: "r1".into(),
            ..ClusterRolloutStatus::default()
        }],
        ..RolloutState::default()
    };
    RolloutRequest {
        mwrs_name: "hello".into(),
        mwrs_namespace: "default".into(),
        placement_name: "p".into(),
        cluster_name: cluster.into(),
        total_cluster_count: 4,
        cluster_index: 2,
        rollout_status: Some(encode_state(&state)),
        counts: Some(RolloutCounts {
            succeeded: 1,
            to_apply: 3,
            ..RolloutCounts::default()
        }),
        ..RolloutRequest::default()
    }
}

#[tokio::test]
async fn every_hook_through_the_gateway() {
    let (plugin, addr) = plugin().await;
    plugin.answer("c1", ValidationResult::Inprogress, "soaking", Some(7));
    let gw = gateway(&[("canary", addr)]).await;
    let telemetry = Tracing::disabled();
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: gw.url.clone(),
            timeout: Duration::from_secs(8),
            tls: None,
        },
        telemetry.clone(),
    )
    .unwrap();
    let trace = telemetry.reconcile_span("default", "hello");
    let call = Call {
        plugin: "canary",
        trace: &trace,
    };

    let init = hooks
        .initialize(
            call,
            InitializeRequest {
                controller_version: "test".into(),
                hub_name: "hub".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(init.name, "canary");
    hooks.begin_rollout(call, rollout("c1")).await.unwrap();
    hooks.progress_rollout(call, rollout("")).await.unwrap();
    let validation = hooks
        .validate_rollout_completion(call, rollout("c1"))
        .await
        .unwrap();
    assert_eq!(validation.result, ValidationResult::Inprogress as i32);
    assert_eq!(validation.message, "soaking");
    assert_eq!(validation.recheck_after.map(|d| d.seconds), Some(7));
    let work = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                      "metadata": {"name": "w", "namespace": "c1"}, "spec": {}});
    let mutation = hooks
        .mutate_manifest_work(
            call,
            rollout("c1"),
            serde_json::to_vec(&work).unwrap().into(),
        )
        .await
        .unwrap();
    let mutated: serde_json::Value = serde_json::from_slice(&mutation.work.unwrap()).unwrap();
    assert_eq!(mutated["metadata"]["annotations"]["canary/weight"], "20");
    assert_eq!(mutation.mutated_by, ["canary"], "the gateway's trailer");
    assert!(mutation.failed_open.is_empty());

    // What the plugin decoded: the full request, the pre-encoded state
    // spliced in as the message it stands for, the counts with it.
    for hook in [
        HookKind::BeginRollout,
        HookKind::ValidateRolloutCompletion,
        HookKind::MutateManifestWork,
    ] {
        let seen = plugin.requests(hook);
        assert_eq!(seen, [rollout("c1").decode_full()], "{hook}");
        assert_eq!(
            seen[0].rollout_status.as_ref().unwrap().completed[0].cluster_name,
            "c0"
        );
        assert_eq!(seen[0].counts.unwrap().to_apply, 3);
    }
    assert_eq!(
        plugin.requests(HookKind::ProgressRollout),
        [rollout("").decode_full()]
    );

    // What the plugin saw: the same trace, a deadline within ours.
    let trace_id = format!("{:032x}", trace.span().span_context().trace_id());
    let seen = plugin.seen();
    assert_eq!(seen.len(), 5);
    for s in &seen {
        let parent = s.traceparent.as_deref().expect("traceparent");
        assert_eq!(&parent[3..35], trace_id, "{:?}", s.hook);
        let timeout = s
            .timeout
            .as_deref()
            .and_then(rollout_gateway::transport::grpc::parse_timeout)
            .expect("grpc-timeout");
        assert!(
            timeout <= Duration::from_secs(8),
            "{:?}: {timeout:?}",
            s.hook
        );
    }
    let counts = hooks.counts();
    for hook in [
        HookKind::Initialize,
        HookKind::BeginRollout,
        HookKind::ProgressRollout,
        HookKind::ValidateRolloutCompletion,
        HookKind::MutateManifestWork,
    ] {
        assert_eq!(counts.get(hook), 1, "{hook}");
    }
    gw.running.shutdown().await;
}

#[tokio::test]
async fn errors_carry_the_grpc_code_and_message() {
    let gw = gateway(&[]).await;
    let telemetry = Tracing::disabled();
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: gw.url.clone(),
            ..GatewayOptions::default()
        },
        telemetry,
    )
    .unwrap();
    let trace = opentelemetry::Context::new();
    let err = hooks
        .begin_rollout(
            Call {
                plugin: "nobody",
                trace: &trace,
            },
            rollout("c1"),
        )
        .await
        .expect_err("not registered");
    assert_eq!(err.hook, HookKind::BeginRollout);
    assert_eq!(err.code, tonic::Code::NotFound);
    assert!(err.message.contains("nobody"), "{err}");
    assert!(
        err.to_string()
            .starts_with("BeginRollout failed: NOT_FOUND: "),
        "{err}"
    );
    assert_eq!(hooks.counts().begin_rollout, 1, "failed calls count too");
    gw.running.shutdown().await;

    // No gateway at all: UNAVAILABLE, not a hang.
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: format!("http://{}", closed_port().await),
            timeout: Duration::from_secs(2),
            tls: None,
        },
        Tracing::disabled(),
    )
    .unwrap();
    let err = hooks
        .progress_rollout(
            Call {
                plugin: "canary",
                trace: &trace,
            },
            rollout(""),
        )
        .await
        .expect_err("no gateway");
    assert_eq!(err.code, tonic::Code::Unavailable, "{err}");
}

/// A gateway that takes the call and never answers: the controller gives
/// up at the call's deadline, and says the deadline passed
/// (DEADLINE_EXCEEDED), not that it cancelled the call.
#[tokio::test]
async fn a_gateway_that_never_answers_is_deadline_exceeded() {
    let addr = rollout_test_support::h2_peer::serve(|mut request, respond| async move {
        rollout_test_support::h2_peer::read_body(request.body_mut()).await;
        // Held, unanswered, until the test ends.
        std::future::pending::<()>().await;
        drop(respond);
    })
    .await;
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: format!("http://{addr}"),
            timeout: Duration::from_secs(1),
            tls: None,
        },
        Tracing::disabled(),
    )
    .unwrap();
    let trace = opentelemetry::Context::new();
    let started = std::time::Instant::now();
    let err = hooks
        .begin_rollout(
            Call {
                plugin: "canary",
                trace: &trace,
            },
            rollout("c1"),
        )
        .await
        .expect_err("no answer");
    let waited = started.elapsed();
    assert_eq!(err.code, tonic::Code::DeadlineExceeded, "{err}");
    assert!(err.message.contains("deadline passed"), "{err}");
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
}

#[tokio::test]
async fn a_central_gateway_over_mutual_tls() {
    use rollout_gateway::app;
    use rollout_gateway::tls::ServerTlsFiles;

    let (plugin, addr) = plugin().await;
    let (server_ca, hubs_ca) = (
        TestCa::new("gateway").unwrap(),
        TestCa::new("hubs").unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let TestCert {
        cert: server_cert,
        key: server_key,
    } = server_ca.leaf("localhost").unwrap();
    let config = write(
        "hub-a.yaml",
        &format!(
            "hub: hub-a\nplugins:\n  - name: canary\n    endpoint: {addr}\n    insecure: true\n"
        ),
    );
    let running = app::start(app::Options {
        configs: vec![config],
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        tls: Some(ServerTlsFiles {
            cert: write("tls.crt", &server_cert),
            key: write("tls.key", &server_key),
            client_ca: Some(write("hubs.crt", &hubs_ca.pem())),
        }),
        ..app::Options::default()
    })
    .await
    .unwrap();
    let url = format!("https://localhost:{}", running.grpc_addr.port());
    let trace = opentelemetry::Context::new();
    let call = Call {
        plugin: "canary",
        trace: &trace,
    };

    // As hub-a, with its certificate: the hub's plugin answers.
    let TestCert { cert, key } = hubs_ca.leaf("hub-a").unwrap();
    let tls = GatewayTls {
        ca_pem: Some(server_ca.pem().into_bytes()),
        identity: Some((cert.into_bytes(), key.into_bytes())),
        domain: None,
    };
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: url.clone(),
            timeout: Duration::from_secs(5),
            tls: Some(tls.clone()),
        },
        Tracing::disabled(),
    )
    .unwrap();
    hooks
        .begin_rollout(call, rollout("c1"))
        .await
        .expect("hub-a may call canary");
    assert_eq!(
        plugin.calls().last().map(|c| c.0),
        Some(HookKind::BeginRollout)
    );

    // Without a client certificate the gateway refuses the connection.
    let anonymous = GatewayHooks::new(
        &GatewayOptions {
            url,
            timeout: Duration::from_secs(5),
            tls: Some(GatewayTls {
                identity: None,
                ..tls
            }),
        },
        Tracing::disabled(),
    )
    .unwrap();
    let before = plugin.calls().len();
    let err = anonymous
        .begin_rollout(call, rollout("c1"))
        .await
        .expect_err("no client certificate");
    // TLS 1.3 rejects the missing certificate after the handshake, which
    // the transport reports as UNKNOWN, or UNAVAILABLE when the connection
    // never comes up.
    assert!(
        matches!(err.code, tonic::Code::Unavailable | tonic::Code::Unknown),
        "{err}"
    );
    assert_eq!(plugin.calls().len(), before, "the plugin was not reached");
    running.shutdown().await;
}

/// A failed TLS handshake is said as one, never as a gateway that cannot be
/// reached: `https://` to a real plaintext gateway (its answer is HTTP/2
/// frames, not TLS), and to a real TLS gateway whose certificate another CA
/// signed.
#[tokio::test]
async fn a_failed_tls_handshake_says_why() {
    use rollout_gateway::app;
    use rollout_gateway::tls::ServerTlsFiles;

    let trace = opentelemetry::Context::new();
    let call = Call {
        plugin: "canary",
        trace: &trace,
    };
    let (ca, other_ca) = (
        TestCa::new("gateway").unwrap(),
        TestCa::new("other").unwrap(),
    );
    let hooks = |url: String, ca: &TestCa| {
        GatewayHooks::new(
            &GatewayOptions {
                url,
                timeout: Duration::from_secs(5),
                tls: Some(GatewayTls {
                    ca_pem: Some(ca.pem().into_bytes()),
                    identity: None,
                    domain: None,
                }),
            },
            Tracing::disabled(),
        )
        .unwrap()
    };

    let plaintext = gateway(&[]).await;
    let https = plaintext.url.replacen("http://", "https://", 1);
    let err = hooks(https, &ca)
        .begin_rollout(call, rollout("c1"))
        .await
        .expect_err("no TLS");
    assert_eq!(err.code, tonic::Code::Unavailable, "{err}");
    assert!(
        err.message.starts_with(
            "the gateway answered without TLS (a plaintext gateway needs an http:// URL): "
        ),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let TestCert { cert, key } = ca.leaf("localhost").unwrap();
    let config = write("config.yaml", "plugins: []\n");
    let running = app::start(app::Options {
        configs: vec![config],
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        tls: Some(ServerTlsFiles {
            cert: write("tls.crt", &cert),
            key: write("tls.key", &key),
            client_ca: None,
        }),
        ..app::Options::default()
    })
    .await
    .unwrap();
    let url = format!("https://localhost:{}", running.grpc_addr.port());
    let err = hooks(url, &other_ca)
        .begin_rollout(call, rollout("c1"))
        .await
        .expect_err("an untrusted certificate");
    assert_eq!(err.code, tonic::Code::Unavailable, "{err}");
    assert!(
        err.message
            .starts_with("the TLS handshake with the gateway failed: "),
        "{err}"
    );
    running.shutdown().await;
}
