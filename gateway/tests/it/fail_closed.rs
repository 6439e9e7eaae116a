//! A SUCCEEDED validation reaches the caller only from a plugin's own
//! SUCCEEDED, or from a loaded plugin that does not validate: every other
//! answer (no plugin behind the endpoint, a declaration naming no hook,
//! UNIMPLEMENTED for a declared hook, an answer that is no verdict) is the
//! plugin's failure under its failure policy. Real gateways over real
//! plugin servers on 127.0.0.1.

use crate::common;

use std::time::Duration;

use common::*;
use rollout_gateway::hooks::HookKind;
use rollout_proto::v1alpha1::{Hook, InitializeRequest, ValidateResponse, ValidationResult};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

async fn validate(gw: &Gateway, target: &str) -> Result<(i32, Option<String>), tonic::Status> {
    let answer = gw
        .client()
        .await
        .validate_rollout_completion(to(target, validate_request("cluster1")))
        .await?;
    let failed_open = trailer(answer.metadata(), "ocm-rollout-failed-open");
    Ok((answer.into_inner().result, failed_open))
}

fn failing() -> ValidateResponse {
    ValidateResponse {
        result: ValidationResult::Failed as i32,
        message: "smoke test failed".into(),
        recheck_after: None,
    }
}

/// A tonic server of another service (an OTLP trace collector): every
/// method of the plugin API answers UNIMPLEMENTED.
async fn not_a_plugin() -> std::net::SocketAddr {
    rollout_test_support::otlp::receiver().await.1
}

fn entry(name: &str, endpoint: &str, policy: &str) -> String {
    format!(
        "  - name: {name}\n    endpoint: {endpoint}\n    insecure: true\n    failurePolicy: {policy}\n"
    )
}

#[tokio::test]
async fn a_declaration_of_hook_unspecified_is_no_declaration_and_the_validation_fails() {
    let mut behaviour = Behaviour::new("odd");
    behaviour.hooks = vec![Hook::Unspecified];
    behaviour.validate = failing();
    let p = plugin(behaviour).await;
    let gw = gateway(&format!(
        "plugins:\n{}",
        entry("odd", &p.endpoint(), "Fail")
    ))
    .await;
    for _ in 0..3 {
        let err = validate(&gw, "odd").await.expect_err("not SUCCEEDED");
        assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
        assert!(
            err.message().contains("plugin \"odd\""),
            "{}",
            err.message()
        );
        assert!(err.message().contains("not a hook"), "{}", err.message());
    }
    let debug = gw.debug().await;
    assert_eq!(debug["plugins"][0]["loaded"], false, "{debug}");
    gw.stop().await;
}

#[tokio::test]
async fn a_server_that_is_not_a_plugin_fails_every_hook_under_fail() {
    let addr = not_a_plugin().await;
    let gw = gateway(&format!(
        "plugins:\n{}",
        entry("typo", &addr.to_string(), "Fail")
    ))
    .await;
    let err = validate(&gw, "typo").await.expect_err("not SUCCEEDED");
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains("plugin \"typo\""),
        "{}",
        err.message()
    );
    assert!(err.message().contains("UNIMPLEMENTED"), "{}", err.message());
    let mutate = gw
        .client()
        .await
        .mutate_manifest_work(to("typo", mutate_request("cluster1", work(200))))
        .await
        .expect_err("no plugin mutated nothing");
    assert_eq!(mutate.code(), Code::FailedPrecondition);
    // Initialize through the gateway does not make up an answer for it.
    let init = gw
        .client()
        .await
        .initialize(to("typo", InitializeRequest::default()))
        .await
        .expect_err("not a plugin");
    assert_eq!(init.code(), Code::FailedPrecondition);
    assert!(
        init.message().contains("plugin \"typo\""),
        "{}",
        init.message()
    );

    // The admin endpoints say so, and the gRPC health service with them.
    eventually_async("/readyz names the plugin", || async {
        let (status, body) = http_get(gw.admin, "/readyz").await;
        status == 503 && body.contains("plugin \"typo\"")
    })
    .await;
    eventually_async("the gRPC health service is NOT_SERVING", || async {
        grpc_health(gw.grpc).await == ServingStatus::NotServing
    })
    .await;
    let debug = gw.debug().await;
    let entry = &debug["plugins"][0];
    assert_eq!(entry["loaded"], false, "{debug}");
    assert!(
        entry["initializeError"]
            .as_str()
            .is_some_and(|e| e.contains("UNIMPLEMENTED")),
        "{debug}"
    );
    let metrics = http_get(gw.admin, "/metrics").await.1;
    assert!(
        metrics.contains("rollout_gateway_plugin_loaded{plugin=\"typo\",hub=\"\"} 0"),
        "{metrics}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_server_that_is_not_a_plugin_fails_open_visibly_under_ignore() {
    let addr = not_a_plugin().await;
    let gw = gateway(&format!(
        "plugins:\n{}",
        entry("typo", &addr.to_string(), "Ignore")
    ))
    .await;
    let (result, failed_open) = validate(&gw, "typo").await.expect("fails open");
    assert_eq!(result, ValidationResult::Succeeded as i32);
    assert_eq!(failed_open.as_deref(), Some("typo"));
    gw.stop().await;
}

#[tokio::test]
async fn a_loaded_plugin_declaring_every_hook_that_answers_unimplemented_is_skipped() {
    let mut behaviour = Behaviour::new("partial");
    behaviour.unimplemented = vec![HookKind::ValidateRolloutCompletion];
    let p = plugin(behaviour).await;
    let gw = gateway(&format!(
        "plugins:\n{}",
        entry("partial", &p.endpoint(), "Fail")
    ))
    .await;
    let (result, failed_open) = validate(&gw, "partial").await.expect("neutral");
    assert_eq!(result, ValidationResult::Succeeded as i32);
    assert_eq!(failed_open, None);
    gw.stop().await;
}

#[tokio::test]
async fn unimplemented_for_a_hook_the_plugin_named_is_its_failure() {
    let mut behaviour = Behaviour::new("liar");
    behaviour.hooks = vec![Hook::ValidateRolloutCompletion];
    behaviour.unimplemented = vec![HookKind::ValidateRolloutCompletion];
    let p = plugin(behaviour).await;
    let gw = gateway(&format!(
        "plugins:\n{}",
        entry("liar", &p.endpoint(), "Fail")
    ))
    .await;
    let err = validate(&gw, "liar")
        .await
        .expect_err("declared, so not skipped");
    assert_eq!(err.code(), Code::Unimplemented);
    assert!(
        err.message().contains("plugin \"liar\""),
        "{}",
        err.message()
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_hook_left_out_of_a_declaration_is_skipped_without_a_call() {
    let mut behaviour = Behaviour::new("mutator");
    behaviour.hooks = vec![Hook::MutateManifestWork];
    behaviour.validate = failing();
    let p = plugin(behaviour).await;
    let gw = gateway(&format!(
        "plugins:\n{}",
        entry("mutator", &p.endpoint(), "Fail")
    ))
    .await;
    let (result, _) = validate(&gw, "mutator").await.expect("neutral");
    assert_eq!(result, ValidationResult::Succeeded as i32);
    assert_eq!(p.calls(HookKind::ValidateRolloutCompletion), 0);
    gw.stop().await;
}

#[tokio::test]
async fn an_answer_that_is_no_verdict_is_the_plugins_failure() {
    let mut behaviour = Behaviour::new("vague");
    behaviour.validate.result = ValidationResult::Unspecified as i32;
    let p = plugin(behaviour).await;
    let gw = gateway(&format!(
        "plugins:\n{}",
        entry("vague", &p.endpoint(), "Fail")
    ))
    .await;
    let err = validate(&gw, "vague").await.expect_err("no verdict");
    assert_eq!(err.code(), Code::Internal);
    assert!(err.message().contains("no verdict"), "{}", err.message());
    p.set(|b| b.validate.result = 9);
    let err = validate(&gw, "vague").await.expect_err("no verdict");
    assert!(err.message().contains("is 9"), "{}", err.message());
    gw.stop().await;
}

#[tokio::test]
async fn a_plugin_down_at_start_is_loaded_by_the_first_call_once_it_is_up() {
    // A port that refuses, then a plugin started on it.
    let spare = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = spare.local_addr().unwrap();
    drop(spare);
    let gw = gateway(&format!(
        "plugins:\n{}",
        entry("late", &addr.to_string(), "Ignore")
    ))
    .await;
    // Down: not skipped, failed open and named.
    let (_, failed_open) = validate(&gw, "late").await.expect("fails open");
    assert_eq!(failed_open.as_deref(), Some("late"));
    let mut behaviour = Behaviour::new("late");
    behaviour.validate = failing();
    let p = plugin_on(addr, behaviour).await;
    // The gateway's own Initialize at load gave up; the call loads it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (result, failed_open) = validate(&gw, "late").await.expect("answered");
    assert_eq!(result, ValidationResult::Failed as i32);
    assert_eq!(failed_open, None);
    assert!(p.calls(HookKind::Initialize) >= 1);
    gw.stop().await;
}

/// The gateway's overall status by its gRPC health service.
async fn grpc_health(addr: std::net::SocketAddr) -> ServingStatus {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest::default())
        .await
        .expect("health check answered");
    ServingStatus::try_from(answer.into_inner().status).unwrap()
}

/// Polls `done` every 20 ms for at most 10 s.
async fn eventually_async<F, Fut>(what: &str, done: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..500 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting until {what}");
}
