//! rollback-mutator through a real tonic client: in-process on 127.0.0.1:0,
//! and as its binary serving mutual TLS from `--tls-cert/--tls-key/--client-ca`
//! (certificates made at test time with rcgen), drained by SIGTERM.

use rollback_mutator::{ROLLBACK_ANNOTATION, RollbackMutator, SKIPPED_STEPS_ANNOTATION};
use rollout_plugin_sdk::proto::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_plugin_sdk::proto::{Hook, InitializeRequest, RolloutStateDetail};
use rollout_plugin_sdk::test_certs::TestCa;
use rollout_plugin_sdk::testing::{self, PluginProcess};
use rollout_plugin_sdk::tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use serde_json::Value;

fn aborting(cluster: &str) -> rollout_plugin_sdk::proto::RolloutPluginRequest {
    let mut r = testing::rollout(cluster, 1, 3);
    r.aborting = true;
    r.desired_revision = "rev-0".into();
    r
}

#[tokio::test]
async fn rewrites_only_while_aborting() {
    let server = testing::spawn(RollbackMutator).await.unwrap();
    let mut client = testing::connect(server.local_addr()).await.unwrap();

    let init = client
        .initialize(InitializeRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(init.name, "rollback-mutator");
    assert_eq!(init.hooks().collect::<Vec<_>>(), [Hook::MutateManifestWork]);
    assert_eq!(init.state_detail(), RolloutStateDetail::Counts);

    let work = testing::sample_work("cluster1");
    let out = client
        .mutate_manifest_work(testing::mutate_request(
            testing::rollout("cluster1", 1, 3),
            &work,
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(out.manifest_work.is_empty(), "not aborting: unchanged");

    let out = client
        .mutate_manifest_work(testing::mutate_request(aborting("cluster1"), &work))
        .await
        .unwrap()
        .into_inner();
    let out: Value = serde_json::from_slice(&out.manifest_work).unwrap();
    let manifests = out["spec"]["workload"]["manifests"].as_array().unwrap();
    assert!(
        manifests
            .iter()
            .all(|m| m["metadata"]["annotations"][ROLLBACK_ANNOTATION] == "true")
    );
    assert_eq!(
        manifests[1]["spec"]["strategy"]["canary"]["steps"],
        serde_json::json!([])
    );
    assert_eq!(
        manifests[1]["metadata"]["annotations"][SKIPPED_STEPS_ANNOTATION],
        "2"
    );

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_binary_serves_mutual_tls_and_drains_on_sigterm() {
    let ca = TestCa::new("plugins-ca").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let server = ca.leaf("localhost").unwrap();
    let (cert, key) = (server.cert, server.key);
    std::fs::write(path("tls.crt"), cert).unwrap();
    std::fs::write(path("tls.key"), key).unwrap();
    std::fs::write(path("ca.crt"), ca.pem()).unwrap();

    let plugin = PluginProcess::start(
        env!("CARGO_BIN_EXE_rollback-mutator"),
        [
            "--listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--tls-cert".as_ref(),
            path("tls.crt").as_os_str(),
            "--tls-key".as_ref(),
            path("tls.key").as_os_str(),
            "--client-ca".as_ref(),
            path("ca.crt").as_os_str(),
        ],
    )
    .await
    .unwrap();

    let connect = |identity: Option<Identity>| {
        let mut tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(ca.pem()))
            .domain_name("localhost");
        if let Some(identity) = identity {
            tls = tls.identity(identity);
        }
        let endpoint = Endpoint::from_shared(format!("https://{}", plugin.addr()))
            .unwrap()
            .tls_config(tls)
            .unwrap();
        async move {
            endpoint
                .connect()
                .await
                .map(RolloutPluginServiceClient::new)
        }
    };

    let client = ca.leaf("rollout-gateway").unwrap();
    let (cert, key) = (client.cert, client.key);
    let mut client = connect(Some(Identity::from_pem(cert, key))).await.unwrap();
    let out = client
        .mutate_manifest_work(testing::mutate_request(
            aborting("c"),
            &testing::sample_work("c"),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!out.manifest_work.is_empty());

    let anonymous = match connect(None).await {
        Ok(mut c) => c.initialize(InitializeRequest::default()).await.is_ok(),
        Err(_) => false,
    };
    assert!(!anonymous, "a client without a certificate is refused");
    let plaintext = match testing::connect(plugin.addr()).await {
        Ok(mut c) => c.initialize(InitializeRequest::default()).await.is_ok(),
        Err(_) => false,
    };
    assert!(!plaintext, "a plaintext client is refused");

    drop(client);
    let status = plugin.terminate().await.unwrap();
    assert!(status.success(), "{status:?}");
}
