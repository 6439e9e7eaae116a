//! smoke-test through a real tonic client: in-process on 127.0.0.1:0 with a
//! short soak, and as its binary (flags, listening line, SIGTERM drain).

use std::time::{Duration, Instant};

use rollout_plugin_sdk::proto::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_plugin_sdk::proto::{
    Hook, InitializeRequest, RolloutStateDetail, ValidateResponse, ValidationResult,
};
use rollout_plugin_sdk::testing::{self, PluginProcess};
use rollout_plugin_sdk::tonic::transport::Channel;
use smoke_test::{Settings, SmokeTest};

async fn validate(
    client: &mut RolloutPluginServiceClient<Channel>,
    cluster: &str,
    aborting: bool,
) -> ValidateResponse {
    let mut rollout = testing::rollout(cluster, 1, 3);
    rollout.aborting = aborting;
    if aborting {
        rollout.desired_revision = "rev-0".into();
    }
    client
        .validate_rollout_completion(testing::validate_request(rollout))
        .await
        .unwrap()
        .into_inner()
}

/// Polls until the answer is not INPROGRESS, within 10 s, sleeping as the
/// plugin suggests.
async fn settle(
    client: &mut RolloutPluginServiceClient<Channel>,
    cluster: &str,
) -> ValidateResponse {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = validate(client, cluster, false).await;
        if v.result() != ValidationResult::Inprogress {
            return v;
        }
        assert!(Instant::now() < deadline, "{cluster} still in progress");
        let hint = Duration::try_from(v.recheck_after.expect("a recheck hint")).unwrap();
        assert!(hint <= Duration::from_millis(300), "{hint:?}");
        tokio::time::sleep(hint).await;
    }
}

#[tokio::test]
async fn soaks_then_passes_or_fails_the_named_clusters() {
    let plugin = SmokeTest::new(Settings {
        soak: Duration::from_millis(300),
        fail: ["cluster-002".to_string()].into(),
        ..Settings::default()
    });
    let server = testing::spawn(plugin).await.unwrap();
    let mut client = testing::connect(server.local_addr()).await.unwrap();

    let init = client
        .initialize(InitializeRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(init.name, "smoke-test");
    assert_eq!(
        init.hooks().collect::<Vec<_>>(),
        [Hook::ValidateRolloutCompletion]
    );
    assert_eq!(init.state_detail(), RolloutStateDetail::Counts);

    let first = validate(&mut client, "cluster-001", false).await;
    assert_eq!(first.result(), ValidationResult::Inprogress);
    assert!(
        first.message.contains("soaking on cluster-001"),
        "{}",
        first.message
    );

    let started = Instant::now();
    let ok = settle(&mut client, "cluster-001").await;
    assert!(started.elapsed() >= Duration::from_millis(250), "soaked");
    assert_eq!(ok.result(), ValidationResult::Succeeded);
    let failed = settle(&mut client, "cluster-002").await;
    assert_eq!(failed.result(), ValidationResult::Failed);
    assert_eq!(
        failed.message,
        "smoke test failed on cluster-002 (revision rev-1): the cluster is listed by --fail"
    );
    // asking again gives the same answer
    assert_eq!(
        validate(&mut client, "cluster-002", false).await.result(),
        ValidationResult::Failed
    );

    // the rollback's revision soaks anew and passes even on a --fail cluster
    assert_eq!(
        validate(&mut client, "cluster-002", true).await.result(),
        ValidationResult::Inprogress
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        validate(&mut client, "cluster-002", true).await.result(),
        ValidationResult::Succeeded
    );

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_binary_takes_its_flags_and_drains_on_sigterm() {
    let plugin = PluginProcess::start(
        env!("CARGO_BIN_EXE_smoke-test"),
        [
            "--listen",
            "127.0.0.1:0",
            "--soak",
            "200ms",
            "--fail",
            "cluster-003",
            "--fail",
            "cluster-004,cluster-005",
        ],
    )
    .await
    .unwrap();
    let mut client = testing::connect(plugin.addr()).await.unwrap();
    for (cluster, want) in [
        ("cluster-001", ValidationResult::Succeeded),
        ("cluster-003", ValidationResult::Failed),
        ("cluster-005", ValidationResult::Failed),
    ] {
        assert_eq!(
            settle(&mut client, cluster).await.result(),
            want,
            "{cluster}"
        );
    }
    drop(client);
    let status = plugin.terminate().await.unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn each_rollout_reads_its_own_config_over_grpc() {
    // The flags: a long soak, no failing cluster.
    let plugin = SmokeTest::new(Settings {
        soak: Duration::from_secs(3600),
        ..Settings::default()
    });
    let server = testing::spawn(plugin).await.unwrap();
    let mut client = testing::connect(server.local_addr()).await.unwrap();
    let ask = |mwrs: &str, config: &str| {
        let mut rollout = testing::rollout("cluster-001", 1, 3);
        rollout.mwrs_name = mwrs.into();
        rollout.plugin_config_json = config.into();
        testing::validate_request(rollout)
    };

    // This rollout's config: no soak, cluster-001 fails.
    let v = client
        .validate_rollout_completion(ask(
            "configured",
            r#"{"soakTime":"0s","failClusters":["cluster-001"]}"#,
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.result(), ValidationResult::Failed, "{}", v.message);
    assert!(
        v.message.ends_with("listed by the rollout's failClusters"),
        "{}",
        v.message
    );
    // Another rollout of the same plugin: the flags.
    let v = client
        .validate_rollout_completion(ask("plain", ""))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.result(), ValidationResult::Inprogress, "{}", v.message);
    // A config that does not fit: INVALID_ARGUMENT naming the key.
    let status = client
        .validate_rollout_completion(ask("broken", r#"{"soakTime":"soon"}"#))
        .await
        .unwrap_err();
    assert_eq!(
        status.code(),
        rollout_plugin_sdk::tonic::Code::InvalidArgument
    );
    assert!(
        status
            .message()
            .contains("soakTime: invalid duration \"soon\""),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn the_binary_rejects_a_bad_soak() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_smoke-test"))
        .args(["--listen", "127.0.0.1:0", "--soak", "soon"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a duration"));
}

#[tokio::test]
async fn json_logs_carry_the_callers_trace_and_a_plaintext_health_port_answers() {
    use rollout_plugin_sdk::tonic;
    use rollout_plugin_sdk::tonic::transport::Endpoint;

    let plugin = PluginProcess::start(
        env!("CARGO_BIN_EXE_smoke-test"),
        [
            "--listen",
            "127.0.0.1:0",
            "--soak",
            "0s",
            "--log-format",
            "json",
            "--health-listen",
            "127.0.0.1:0",
        ],
    )
    .await
    .unwrap();
    let health_addr = plugin
        .health_addr()
        .expect("health=ADDR on the listening line");
    assert_ne!(health_addr, plugin.addr());

    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut request = tonic::Request::new(testing::validate_request(testing::rollout(
        "cluster-json",
        1,
        1,
    )));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace}-00f067aa0ba902b7-01").parse().unwrap(),
    );
    let mut client = testing::connect(plugin.addr()).await.unwrap();
    client.validate_rollout_completion(request).await.unwrap();

    // The health port: health alone, in plaintext.
    let channel = Endpoint::from_shared(format!("http://{health_addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: rollout_plugin_sdk::SERVICE_NAME.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status();
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );
    let elsewhere = RolloutPluginServiceClient::new(channel)
        .initialize(InitializeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(elsewhere.code(), tonic::Code::Unimplemented);

    // The call's log line, as JSON, carries the caller's trace id.
    let deadline = Instant::now() + Duration::from_secs(10);
    let line = loop {
        let logs = plugin.stderr();
        if let Some(line) = logs.lines().find(|l| l.contains("cluster-json")) {
            break line.to_string();
        }
        assert!(Instant::now() < deadline, "no log line of the call: {logs}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let json: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(json["trace_id"], trace, "{line}");
    assert_eq!(json["message"], "validated", "{line}");
    let status = plugin.terminate().await.unwrap();
    assert!(status.success(), "{status:?}");
}
