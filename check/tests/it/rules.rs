//! `rollout-plugin-check` as a process against real plugins on loopback: the
//! three example plugins pass every rule (plaintext, TLS and mutual TLS),
//! and deliberately broken plugins fail the rule they break, by name.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use rollout_plugin_sdk::prelude::*;
use rollout_plugin_sdk::proto::rollout_plugin_service_server::{
    RolloutPluginService, RolloutPluginServiceServer,
};
use rollout_plugin_sdk::proto::{
    Hook as ProtoHook, InitializeResponse, MutateManifestWorkRequest, MutateManifestWorkResponse,
    ValidateCompletionRequest, ValidateResponse,
};
use rollout_plugin_sdk::test_certs::TestCa;
use rollout_plugin_sdk::{ServeOptions, TlsOptions, testing};
use rollout_test_support::h2_peer;
use tokio::net::TcpListener;
use tokio::process::Command;

/// Runs the checker with `args`; its exit code and stdout.
async fn checker(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rollout-plugin-check"))
        .args(args)
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const ALL_PASS: &str = "PASS initialize\nPASS deadline\nPASS idempotent\nPASS identity\n\
PASS unknown-fields\nPASS large-state\nPASS health\n";

/// A plugin that does not mutate: identity does not apply, and SKIP does
/// not fail.
const ALL_PASS_NO_MUTATE: &str = "PASS initialize\nPASS deadline\nPASS idempotent\n\
SKIP identity: the plugin does not declare MutateManifestWork\n\
PASS unknown-fields\nPASS large-state\nPASS health\n";

#[tokio::test]
async fn the_example_plugins_pass_every_rule() {
    let smoke = smoke_test::SmokeTest::new(smoke_test::Settings {
        soak: Duration::from_secs(30),
        ..Default::default()
    });
    let servers = [
        (testing::spawn(smoke).await.unwrap(), ALL_PASS_NO_MUTATE),
        (
            testing::spawn(traffic_weights::TrafficWeights)
                .await
                .unwrap(),
            ALL_PASS,
        ),
        (
            testing::spawn(rollback_mutator::RollbackMutator)
                .await
                .unwrap(),
            ALL_PASS,
        ),
    ];
    for (server, want) in servers {
        let addr = server.local_addr().to_string();
        let (code, out, err) = checker(&[&addr]).await;
        assert_eq!((code, out.as_str()), (0, want), "{addr}: {err}");
        server.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn tls_and_mutual_tls_with_the_plugins_ca() {
    let ca = TestCa::new("plugins-ca").unwrap();
    let server_cert = ca.server().unwrap();
    let client = ca.leaf("hub").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let ca_file = file("ca.pem", &ca.pem());
    let cert_file = file("client.pem", &client.cert);
    let key_file = file("client-key.pem", &client.key);

    let tls = TlsOptions::from_pem(server_cert.cert.clone(), server_cert.key.clone());
    let server = testing::spawn_with(
        traffic_weights::TrafficWeights,
        ServeOptions::default().tls(tls),
    )
    .await
    .unwrap();
    let addr = server.local_addr().to_string();
    let (code, out, err) = checker(&["--ca-file", &ca_file, &addr]).await;
    assert_eq!((code, out.as_str()), (0, ALL_PASS), "{err}");
    // plaintext to a TLS endpoint cannot reach it
    let (code, out, err) = checker(&[&addr]).await;
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.contains(&format!("no gRPC over HTTP/2 at {addr}")),
        "{err}"
    );
    server.shutdown().await.unwrap();

    let mtls = TlsOptions::from_pem(server_cert.cert, server_cert.key).client_ca_pem(ca.pem());
    let server = testing::spawn_with(
        rollback_mutator::RollbackMutator,
        ServeOptions::default().tls(mtls),
    )
    .await
    .unwrap();
    let addr = server.local_addr().to_string();
    let args = [
        "--ca-file",
        &ca_file,
        "--cert-file",
        &cert_file,
        "--key-file",
        &key_file,
        &addr,
    ];
    let (code, out, err) = checker(&args).await;
    assert_eq!((code, out.as_str()), (0, ALL_PASS), "{err}");
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_flags_and_an_unreachable_endpoint_exit_2() {
    let (code, _, err) = checker(&[]).await;
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = checker(&["--cert-file", "c.pem", "127.0.0.1:1"]).await;
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = checker(&["no-port"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("no-port is not HOST:PORT"), "{err}");
    // a port nothing listens on: bound, then closed
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let (code, out, err) = checker(&[&addr]).await;
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(err.contains(&format!("cannot connect to {addr}")), "{err}");
}

/// Fails the run with the line of `rule`, and checks it is the only failure.
fn assert_fails_only(out: &str, rule: &str, reason: &str) {
    let failures: Vec<_> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert_eq!(failures.len(), 1, "{out}");
    assert!(
        failures[0].starts_with(&format!("FAIL {rule}: ")) && failures[0].contains(reason),
        "{out}"
    );
}

/// Renames the work it mutates. Written on the generated server trait,
/// below the SDK (which refuses to send such an answer).
struct Renamer;

#[tonic::async_trait]
impl RolloutPluginService for Renamer {
    async fn initialize(
        &self,
        _: tonic::Request<InitializeRequest>,
    ) -> Result<tonic::Response<InitializeResponse>, tonic::Status> {
        Ok(tonic::Response::new(InitializeResponse {
            name: "renamer".into(),
            hooks: vec![ProtoHook::MutateManifestWork.into()],
            ..Default::default()
        }))
    }

    async fn begin_rollout(
        &self,
        _: tonic::Request<RolloutPluginRequest>,
    ) -> Result<tonic::Response<()>, tonic::Status> {
        Ok(tonic::Response::new(()))
    }

    async fn progress_rollout(
        &self,
        _: tonic::Request<RolloutPluginRequest>,
    ) -> Result<tonic::Response<()>, tonic::Status> {
        Ok(tonic::Response::new(()))
    }

    async fn validate_rollout_completion(
        &self,
        _: tonic::Request<ValidateCompletionRequest>,
    ) -> Result<tonic::Response<ValidateResponse>, tonic::Status> {
        Ok(tonic::Response::new(ValidateResponse::default()))
    }

    async fn mutate_manifest_work(
        &self,
        request: tonic::Request<MutateManifestWorkRequest>,
    ) -> Result<tonic::Response<MutateManifestWorkResponse>, tonic::Status> {
        let mut work: serde_json::Value =
            serde_json::from_slice(&request.into_inner().manifest_work).unwrap();
        work["metadata"]["name"] = "somewhere-else".into();
        Ok(tonic::Response::new(MutateManifestWorkResponse {
            manifest_work: serde_json::to_vec(&work).unwrap().into(),
        }))
    }
}

/// Serves `service` (with gRPC health when `health`) on 127.0.0.1:0.
async fn serve_raw(
    service: impl RolloutPluginService,
    health: bool,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let (_, health_service) = tonic_health::server::health_reporter();
    let router = tonic::transport::Server::builder()
        .add_service(RolloutPluginServiceServer::new(service))
        .add_optional_service(health.then_some(health_service));
    let task = tokio::spawn(async move {
        router.serve_with_incoming(incoming).await.unwrap();
    });
    (addr, task)
}

/// Refuses any plugin configuration key it does not know, as a pipeline
/// member must not.
struct Strict;

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct StrictConfig {
    threshold: Option<u32>,
}

impl RolloutPlugin for Strict {
    fn info(&self) -> PluginInfo {
        PluginInfo::new("strict", "0.1.0").hooks([ProtoHook::ValidateRolloutCompletion])
    }

    async fn validate_rollout_completion(
        &self,
        request: RolloutPluginRequest,
    ) -> Result<Validation, PluginError> {
        let _config: Option<StrictConfig> = request.plugin_config()?;
        Ok(Validation::succeeded())
    }
}

/// Succeeds and fails by turns.
#[derive(Default)]
struct Flipper(AtomicUsize);

impl RolloutPlugin for Flipper {
    fn info(&self) -> PluginInfo {
        PluginInfo::new("flipper", "0.1.0").hooks([ProtoHook::ValidateRolloutCompletion])
    }

    async fn validate_rollout_completion(
        &self,
        _request: RolloutPluginRequest,
    ) -> Result<Validation, PluginError> {
        Ok(
            if self.0.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
                Validation::succeeded()
            } else {
                Validation::failed("every other call")
            },
        )
    }
}

#[tokio::test]
async fn a_plugin_that_renames_the_work_fails_identity() {
    let (addr, server) = serve_raw(Renamer, true).await;
    let (code, out, _) = checker(&[&addr.to_string()]).await;
    assert_eq!(code, 1, "{out}");
    assert_fails_only(
        &out,
        "identity",
        r#"MutateManifestWork changed metadata.name from "rollout-plugin-check" to "somewhere-else""#,
    );
    server.abort();
}

#[tokio::test]
async fn a_plugin_refusing_other_plugins_config_keys_fails_unknown_fields() {
    let server = testing::spawn(Strict).await.unwrap();
    let (code, out, _) = checker(&[&server.local_addr().to_string()]).await;
    assert_eq!(code, 1, "{out}");
    assert_fails_only(
        &out,
        "unknown-fields",
        "ValidateRolloutCompletion with unknown request fields and another plugin's pluginConfig key ended with InvalidArgument (plugin_config_json",
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_plugin_that_changes_its_mind_fails_idempotent() {
    let server = testing::spawn(Flipper::default()).await.unwrap();
    let (code, out, _) = checker(&[&server.local_addr().to_string()]).await;
    assert_eq!(code, 1, "{out}");
    assert_fails_only(
        &out,
        "idempotent",
        "ValidateRolloutCompletion answered the same request first with",
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_plugin_without_health_fails_health() {
    // the plugin's service alone, without grpc.health.v1.Health
    let (addr, server) = serve_raw(Renamer, false).await;
    let (code, out, _) = checker(&[&addr.to_string()]).await;
    assert_eq!(code, 1, "{out}");
    let health = out
        .lines()
        .find(|l| l.contains(" health"))
        .unwrap_or_default();
    assert_eq!(
        health,
        "FAIL health: grpc.health.v1.Health/Check ended with Unimplemented"
    );
    server.abort();
}

/// How long the deaf plugin's BeginRollout takes, whatever its deadline.
const DEAF_DELAY: Duration = Duration::from_millis(1200);

/// A plugin on raw HTTP/2 that ignores `grpc-timeout`: Initialize and
/// health answer at once, BeginRollout after [`DEAF_DELAY`] whatever the
/// deadline. (tonic's server honours deadlines by itself, so a deaf plugin
/// has to be written below it.)
async fn deaf_plugin() -> SocketAddr {
    h2_peer::serve(answer_deaf).await
}

async fn answer_deaf(
    request: http::Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
) {
    let path = request.uri().path().to_string();
    h2_peer::read_body(&mut request.into_body()).await;
    let message = if path.ends_with("/Initialize") {
        InitializeResponse {
            name: "deaf".into(),
            hooks: vec![ProtoHook::BeginRollout.into()],
            ..Default::default()
        }
        .encode_to_vec()
    } else if path.ends_with("/Check") {
        tonic_health::pb::HealthCheckResponse { status: 1 }.encode_to_vec()
    } else {
        // the misbehaviour itself: slow, and deaf to grpc-timeout
        tokio::time::sleep(DEAF_DELAY).await;
        Vec::new()
    };
    h2_peer::answer_ok(respond, &[], false, &message);
}

#[tokio::test]
async fn a_plugin_deaf_to_deadlines_fails_deadline() {
    let addr = deaf_plugin().await;
    let (code, out, _) = checker(&[&addr.to_string()]).await;
    assert_eq!(code, 1, "{out}");
    assert_fails_only(
        &out,
        "deadline",
        "BeginRollout with a deadline of 200ms ended with no end (the checker stopped waiting)",
    );
}

/// Answers Initialize with a fixed `hooks` list and FAILED to every
/// validation, UNIMPLEMENTED to the other hooks; written on the generated
/// server trait, below the SDK (which declares only real hooks).
struct Declares(Vec<i32>);

#[tonic::async_trait]
impl RolloutPluginService for Declares {
    async fn initialize(
        &self,
        _: tonic::Request<InitializeRequest>,
    ) -> Result<tonic::Response<InitializeResponse>, tonic::Status> {
        Ok(tonic::Response::new(InitializeResponse {
            name: "declares".into(),
            hooks: self.0.clone(),
            ..Default::default()
        }))
    }

    async fn begin_rollout(
        &self,
        _: tonic::Request<RolloutPluginRequest>,
    ) -> Result<tonic::Response<()>, tonic::Status> {
        Err(tonic::Status::unimplemented("no"))
    }

    async fn progress_rollout(
        &self,
        _: tonic::Request<RolloutPluginRequest>,
    ) -> Result<tonic::Response<()>, tonic::Status> {
        Err(tonic::Status::unimplemented("no"))
    }

    async fn validate_rollout_completion(
        &self,
        _: tonic::Request<ValidateCompletionRequest>,
    ) -> Result<tonic::Response<ValidateResponse>, tonic::Status> {
        Ok(tonic::Response::new(ValidateResponse {
            result: 2,
            ..Default::default()
        }))
    }

    async fn mutate_manifest_work(
        &self,
        _: tonic::Request<MutateManifestWorkRequest>,
    ) -> Result<tonic::Response<MutateManifestWorkResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("no"))
    }
}

#[tokio::test]
async fn a_declaration_of_hook_unspecified_fails_initialize_as_the_gateway_reads_it() {
    let (addr, server) = serve_raw(Declares(vec![0]), true).await;
    let (code, out, _) = checker(&[&addr.to_string()]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("FAIL initialize:") && l.contains("not a hook")),
        "{out}"
    );
    server.abort();
}

#[tokio::test]
async fn unimplemented_hooks_pass_only_when_every_hook_was_declared() {
    // Every hook declared: the UNIMPLEMENTED ones are skipped, as the
    // gateway skips them.
    let (addr, server) = serve_raw(Declares(Vec::new()), true).await;
    let (code, out, _) = checker(&[&addr.to_string()]).await;
    assert_eq!(code, 0, "{out}");
    server.abort();
    // BeginRollout named, then answered UNIMPLEMENTED: the plugin's failure.
    let (addr, server) = serve_raw(Declares(vec![1, 3]), true).await;
    let (code, out, _) = checker(&[&addr.to_string()]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("BeginRollout answered UNIMPLEMENTED"), "{out}");
    server.abort();
}

/// Answers every call as a healthy plugin would, but as `text/html`, with
/// `grpc-status` sent twice (0, then 13): an answer gRPC clients read
/// differently, which the gateway refuses and the checker with it.
async fn ambiguous_plugin() -> SocketAddr {
    h2_peer::serve(|request, mut respond| async move {
        let path = request.uri().path().to_string();
        h2_peer::read_body(&mut request.into_body()).await;
        let message = if path.ends_with("/Initialize") {
            InitializeResponse {
                name: "ambiguous".into(),
                ..Default::default()
            }
            .encode_to_vec()
        } else {
            Vec::new()
        };
        let head = http::Response::builder()
            .status(200)
            .header("content-type", "text/html")
            .body(())
            .unwrap();
        let Ok(mut stream) = respond.send_response(head, false) else {
            return;
        };
        let _ = stream.send_data(h2_peer::frame(false, &message), false);
        let mut trailers = http::HeaderMap::new();
        trailers.append("grpc-status", http::HeaderValue::from_static("0"));
        trailers.append("grpc-status", http::HeaderValue::from_static("13"));
        let _ = stream.send_trailers(trailers);
    })
    .await
}

#[tokio::test]
async fn answers_grpc_clients_read_differently_fail_initialize() {
    let addr = ambiguous_plugin().await;
    let (code, out, _) = checker(&[&addr.to_string()]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("FAIL initialize")
            && out.contains("content-type \"text/html\" is not application/grpc"),
        "{out}"
    );
}

/// Refuses every validation with a message that would drive a terminal and
/// forge a line of the checker's own.
struct Hostile;

/// The message [`Hostile`] refuses with.
const HOSTILE: &str = "no\u{1b}[2J\u{1b}]52;c;aGk=\u{7}\r\nPASS identity\u{202e}";

impl RolloutPlugin for Hostile {
    fn info(&self) -> PluginInfo {
        PluginInfo::new("hostile", "0.1.0").hooks([ProtoHook::ValidateRolloutCompletion])
    }

    async fn validate_rollout_completion(
        &self,
        _request: RolloutPluginRequest,
    ) -> Result<Validation, PluginError> {
        Err(PluginError::invalid_argument(HOSTILE))
    }
}

#[tokio::test]
async fn a_plugins_message_is_printed_escaped_on_its_line() {
    let server = testing::spawn(Hostile).await.unwrap();
    let (code, out, _) = checker(&[&server.local_addr().to_string()]).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("no\\x1b[2J\\x1b]52;c;aGk=\\x07\\r\\nPASS identity\\u{202e}"),
        "{out}"
    );
    assert!(
        !out.chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "{out:?}"
    );
    assert!(
        !out.lines().any(|l| l.starts_with("PASS identity")),
        "{out}"
    );
    server.shutdown().await.unwrap();
}
