//! traffic-weights through a real tonic client: in-process on 127.0.0.1:0,
//! and as its binary (listening line, TLS flags, SIGTERM drain).

use rollout_plugin_sdk::proto::{Hook, InitializeRequest, RolloutStateDetail};
use rollout_plugin_sdk::testing::{self, PluginProcess};
use rollout_plugin_sdk::tonic::Code;
use serde_json::Value;
use traffic_weights::{POSITION_ANNOTATION, TrafficWeights, WEIGHT_ANNOTATION};

fn annotations(work: &Value) -> Vec<(String, String)> {
    work["spec"]["workload"]["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let a = &m["metadata"]["annotations"];
            (
                a[POSITION_ANNOTATION].as_str().unwrap().to_string(),
                a[WEIGHT_ANNOTATION].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn annotates_each_cluster_by_its_position() {
    let server = testing::spawn(TrafficWeights).await.unwrap();
    let mut client = testing::connect(server.local_addr()).await.unwrap();

    let init = client
        .initialize(InitializeRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(init.name, "traffic-weights");
    assert_eq!(init.hooks().collect::<Vec<_>>(), [Hook::MutateManifestWork]);
    assert_eq!(init.state_detail(), RolloutStateDetail::Counts);

    for (index, weight) in [(1, "25"), (2, "50"), (3, "75"), (4, "100")] {
        let cluster = format!("cluster{index}");
        let out = client
            .mutate_manifest_work(testing::mutate_request(
                testing::rollout(&cluster, index, 4),
                &testing::sample_work(&cluster),
            ))
            .await
            .unwrap()
            .into_inner();
        let work: Value = serde_json::from_slice(&out.manifest_work).unwrap();
        let want = (format!("{index}/4"), weight.to_string());
        assert_eq!(annotations(&work), vec![want; 3]);
        assert_eq!(work["metadata"]["namespace"], cluster.as_str());
    }

    let mut aborting = testing::rollout("cluster2", 2, 4);
    aborting.aborting = true;
    let out = client
        .mutate_manifest_work(testing::mutate_request(
            aborting,
            &testing::sample_work("cluster2"),
        ))
        .await
        .unwrap()
        .into_inner();
    let work: Value = serde_json::from_slice(&out.manifest_work).unwrap();
    assert_eq!(
        annotations(&work)[0],
        ("2/4".to_string(), "100".to_string())
    );

    let e = client
        .mutate_manifest_work(testing::mutate_request(
            testing::rollout("cluster9", 9, 4),
            &testing::sample_work("cluster9"),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_binary_prints_its_address_serves_and_drains_on_sigterm() {
    let plugin = PluginProcess::start(
        env!("CARGO_BIN_EXE_traffic-weights"),
        ["--listen", "127.0.0.1:0"],
    )
    .await
    .unwrap();
    assert_ne!(plugin.addr().port(), 0);
    let mut client = testing::connect(plugin.addr()).await.unwrap();
    let out = client
        .mutate_manifest_work(testing::mutate_request(
            testing::rollout("cluster3", 3, 10),
            &testing::sample_work("cluster3"),
        ))
        .await
        .unwrap()
        .into_inner();
    let work: Value = serde_json::from_slice(&out.manifest_work).unwrap();
    assert_eq!(
        annotations(&work)[0],
        ("3/10".to_string(), "30".to_string())
    );
    // The client keeps its (idle) connection open, as the gateway does: the
    // drain closes it rather than wait for the drain timeout.
    let started = std::time::Instant::now();
    let status = plugin.terminate().await.unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    drop(client);
}

#[tokio::test]
async fn the_binary_rejects_half_a_tls_configuration() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_traffic-weights"))
        .args(["--listen", "127.0.0.1:0", "--tls-cert", "/nonexistent.crt"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--tls-key"));
}
