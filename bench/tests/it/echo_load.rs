//! The load library against a real echo plugin on `127.0.0.1:0`: every hook
//! succeeds, the report adds up, a mutation echoes its ManifestWork, and the
//! mutating plugin changes it but keeps its identity.

use std::net::SocketAddr;
use std::time::Duration;

use rollout_bench::echo::{self, EchoMode};
use rollout_harness::load::{self, LoadConfig, Stop};
use rollout_harness::manifest::manifest_work_json;
use rollout_proto::HookKind;
use rollout_proto::v1alpha1::MutateManifestWorkRequest;
use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Starts the echo plugin; dropping the sender stops it.
async fn start_plugin(mode: EchoMode) -> anyhow::Result<(SocketAddr, oneshot::Sender<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(echo::serve(listener, echo::EchoPlugin::new(mode), async {
        let _ = stopped.await;
    }));
    Ok((address, stop))
}

fn config(address: SocketAddr, hook: HookKind) -> LoadConfig {
    LoadConfig {
        target: format!("http://{address}"),
        hook,
        concurrency: 4,
        connections: 2,
        work_bytes: 4096,
        plugin: Some("echo".to_owned()),
        stop: Stop::Requests(200),
        warmup: Duration::from_millis(20),
        timeout: Duration::from_secs(5),
        latency_of_errors: false,
    }
}

#[tokio::test]
async fn two_hundred_mutations_at_concurrency_four() -> anyhow::Result<()> {
    let (address, _stop) = start_plugin(EchoMode::Echo).await?;
    let report = load::run(&config(address, HookKind::MutateManifestWork)).await?;

    assert_eq!(report.requests, 200);
    assert_eq!(report.errors, 0, "{:?}", report.error_samples);
    assert!(report.error_samples.is_empty());
    assert!(report.warmup_requests > 0);
    assert!(report.duration_seconds > 0.0);
    assert!(report.throughput_rps > 0.0);
    let latency = report.latency_micros;
    assert!(latency.p50 > 0.0);
    assert!(latency.p50 <= latency.p90 && latency.p90 <= latency.p99 && latency.p99 <= latency.max);
    assert!(latency.mean > 0.0 && latency.mean <= latency.max);
    assert_eq!(
        (report.concurrency, report.connections, report.work_bytes),
        (4, 2, 4096)
    );

    // The JSON report has the documented field names.
    let json = serde_json::to_value(&report)?;
    for key in [
        "target",
        "hook",
        "concurrency",
        "connections",
        "workBytes",
        "requests",
        "errors",
        "durationSeconds",
        "throughputRps",
        "latencyMicros",
        "errorSamples",
    ] {
        assert!(json.get(key).is_some(), "missing {key} in {json}");
    }
    assert_eq!(json["hook"], "mutate");
    Ok(())
}

#[tokio::test]
async fn every_hook_succeeds() -> anyhow::Result<()> {
    let (address, _stop) = start_plugin(EchoMode::Empty).await?;
    for hook in [
        HookKind::ValidateRolloutCompletion,
        HookKind::BeginRollout,
        HookKind::ProgressRollout,
        HookKind::Initialize,
        HookKind::MutateManifestWork,
    ] {
        let mut config = config(address, hook);
        config.stop = Stop::Requests(20);
        config.warmup = Duration::ZERO;
        let report = load::run(&config).await?;
        assert_eq!(
            (report.requests, report.errors),
            (20, 0),
            "{hook:?}: {:?}",
            report.error_samples
        );
        assert_eq!(report.warmup_requests, 0);
    }
    Ok(())
}

#[tokio::test]
async fn the_plugin_echoes_or_empties_the_work() -> anyhow::Result<()> {
    let work = bytes::Bytes::from(manifest_work_json(64 << 10));
    for (mode, expected) in [
        (EchoMode::Echo, work.clone()),
        (EchoMode::Empty, bytes::Bytes::new()),
    ] {
        let (address, _stop) = start_plugin(mode).await?;
        let mut client = RolloutPluginServiceClient::connect(format!("http://{address}")).await?;
        let answer = client
            .mutate_manifest_work(MutateManifestWorkRequest {
                rollout: None,
                manifest_work: work.clone(),
            })
            .await?
            .into_inner();
        assert_eq!(answer.manifest_work, expected, "{mode:?}");
    }
    Ok(())
}

#[tokio::test]
async fn the_mutating_plugin_changes_the_work_and_keeps_its_identity() -> anyhow::Result<()> {
    let work = bytes::Bytes::from(manifest_work_json(4 << 10));
    let (address, _stop) = start_plugin(EchoMode::Mutate).await?;
    let mut client = RolloutPluginServiceClient::connect(format!("http://{address}")).await?;
    let answer = client
        .mutate_manifest_work(MutateManifestWorkRequest {
            rollout: None,
            manifest_work: work.clone(),
        })
        .await?
        .into_inner()
        .manifest_work;
    assert_ne!(answer, work);
    let before: serde_json::Value = serde_json::from_slice(&work)?;
    let after: serde_json::Value = serde_json::from_slice(&answer)?;
    for pointer in [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/metadata/namespace",
    ] {
        assert_eq!(after.pointer(pointer), before.pointer(pointer), "{pointer}");
        assert!(after.pointer(pointer).is_some_and(|v| v.is_string()));
    }
    assert_eq!(
        after["metadata"]["annotations"][echo::MUTATIONS_ANNOTATION],
        "1"
    );
    assert_eq!(
        after["spec"]["workload"]["manifests"][0]["metadata"]["annotations"]
            [echo::MUTATED_BY_ANNOTATION],
        echo::PLUGIN_NAME
    );

    // Under load every call succeeds.
    let report = load::run(&config(address, HookKind::MutateManifestWork)).await?;
    assert_eq!(report.errors, 0, "{:?}", report.error_samples);

    // A work that is not JSON is refused, naming why.
    let refused = client
        .mutate_manifest_work(MutateManifestWorkRequest {
            rollout: None,
            manifest_work: bytes::Bytes::from_static(b"<xml/>"),
        })
        .await
        .expect_err("not JSON");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(refused.message().contains("not JSON"), "{refused}");
    Ok(())
}

#[tokio::test]
async fn a_dead_target_fails_to_start() -> anyhow::Result<()> {
    // Bind and drop to get a port with nothing behind it.
    let address = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let result = load::run(&config(address, HookKind::MutateManifestWork)).await;
    assert!(
        matches!(result, Err(load::LoadError::Connect { .. })),
        "{result:?}"
    );
    Ok(())
}
