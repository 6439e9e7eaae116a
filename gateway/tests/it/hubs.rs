//! Central mode: one hub cannot hurt another through a shared plugin. What
//! one hub's Initialize says decides only that hub's calls, and the hub a
//! plugin is told is the one the caller's certificate names; one hub's
//! failures do not open another hub's circuit; one hub's slow calls do not
//! take another hub's places in the plugin's concurrency bound. Real TLS
//! with client certificates made at test time.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rollout_gateway::app::{self, Options};
use rollout_gateway::tls::ServerTlsFiles;
use rollout_plugin_sdk::test_certs::{TestCa as Ca, TestCert as Leaf};
use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_proto::v1alpha1::rollout_plugin_service_server::{
    RolloutPluginService, RolloutPluginServiceServer,
};
use rollout_proto::v1alpha1::*;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Certificate, ClientTlsConfig, Identity};
use tonic::{Request, Response, Status};

use common::{rollout, to, validate_request};

/// Validates for hub-b only (declares MutateManifestWork instead to any
/// other hub; BeginRollout to all), and answers every validation FAILED. Keeps the `hub_name` of
/// each Initialize.
#[derive(Clone, Default)]
struct PerHub {
    hubs: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl RolloutPluginService for PerHub {
    async fn initialize(
        &self,
        request: Request<InitializeRequest>,
    ) -> Result<Response<InitializeResponse>, Status> {
        let hub = request.into_inner().hub_name;
        let hook = if hub == "hub-b" {
            Hook::ValidateRolloutCompletion
        } else {
            Hook::MutateManifestWork
        };
        self.hubs.lock().unwrap().push(hub);
        Ok(Response::new(InitializeResponse {
            name: "per-hub".into(),
            hooks: vec![hook as i32, Hook::BeginRollout as i32],
            ..Default::default()
        }))
    }

    /// Fails for cluster "bad"; takes 1.5 s for cluster "slow".
    async fn begin_rollout(
        &self,
        request: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        match request.into_inner().cluster_name.as_str() {
            "bad" => Err(Status::unavailable("this cluster's checks are down")),
            "slow" => {
                tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
                Ok(Response::new(()))
            }
            _ => Ok(Response::new(())),
        }
    }

    async fn progress_rollout(
        &self,
        _: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }

    async fn validate_rollout_completion(
        &self,
        _: Request<ValidateCompletionRequest>,
    ) -> Result<Response<ValidateResponse>, Status> {
        Ok(Response::new(ValidateResponse {
            result: ValidationResult::Failed as i32,
            message: "hub-b's checks failed".into(),
            recheck_after: None,
        }))
    }

    async fn mutate_manifest_work(
        &self,
        _: Request<MutateManifestWorkRequest>,
    ) -> Result<Response<MutateManifestWorkResponse>, Status> {
        Ok(Response::new(MutateManifestWorkResponse::default()))
    }
}

async fn serve(plugin: PerHub) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(RolloutPluginServiceServer::new(plugin))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    addr
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

async fn hub_channel(
    addr: SocketAddr,
    server_ca: &Ca,
    identity: &Leaf,
) -> tonic::transport::Channel {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(server_ca.pem()))
        .domain_name("localhost")
        .identity(Identity::from_pem(&identity.cert, &identity.key));
    tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A central gateway: the plugin at `plugin_addr` registered in the shared
/// file with `extra` settings, and two hubs' (empty) registry files; hub
/// clients for hub-a and hub-b.
async fn central(
    plugin_addr: SocketAddr,
    extra: &str,
) -> (
    rollout_gateway::app::Running,
    RolloutPluginServiceClient<tonic::transport::Channel>,
    RolloutPluginServiceClient<tonic::transport::Channel>,
    tempfile::TempDir,
) {
    let (running, a, b, dir) = central_channels(plugin_addr, extra).await;
    (
        running,
        RolloutPluginServiceClient::new(a),
        RolloutPluginServiceClient::new(b),
        dir,
    )
}

/// [`central`], with the hubs' channels rather than clients.
async fn central_channels(
    plugin_addr: SocketAddr,
    extra: &str,
) -> (
    rollout_gateway::app::Running,
    tonic::transport::Channel,
    tonic::transport::Channel,
    tempfile::TempDir,
) {
    let c = central_cas(plugin_addr, extra).await;
    let addr = c.running.grpc_addr;
    let a = hub_channel(addr, &c.server_ca, &c.hubs_ca.leaf("hub-a").unwrap()).await;
    let b = hub_channel(addr, &c.server_ca, &c.hubs_ca.leaf("hub-b").unwrap()).await;
    (c.running, a, b, c.dir)
}

/// A central gateway as [`central`] makes it, and the CAs to make more
/// callers with.
struct Central {
    running: rollout_gateway::app::Running,
    server_ca: Ca,
    hubs_ca: Ca,
    dir: tempfile::TempDir,
}

async fn central_cas(plugin_addr: SocketAddr, extra: &str) -> Central {
    let server_ca = Ca::new("gateway-server").unwrap();
    let hubs_ca = Ca::new("hubs").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let server = server_ca.server().unwrap();
    let running = app::start(Options {
        configs: vec![
            write(
                dir.path(),
                "shared.yaml",
                &format!(
                    "plugins:\n  - name: gatekeeper\n    endpoint: {plugin_addr}\n    insecure: true\n{extra}"
                ),
            ),
            write(dir.path(), "hub-a.yaml", "hub: hub-a\nplugins: []\n"),
            write(dir.path(), "hub-b.yaml", "hub: hub-b\nplugins: []\n"),
        ],
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        tls: Some(ServerTlsFiles {
            cert: write(dir.path(), "tls.crt", &server.cert),
            key: write(dir.path(), "tls.key", &server.key),
            client_ca: Some(write(dir.path(), "hubs-ca.crt", &hubs_ca.pem())),
        }),
        ..Options::default()
    })
    .await
    .expect("central gateway starts");
    Central {
        running,
        server_ca,
        hubs_ca,
        dir,
    }
}

#[tokio::test]
async fn one_hubs_failures_do_not_open_another_hubs_circuit() {
    let plugin_addr = serve(PerHub::default()).await;
    let (running, mut a, mut b, _dir) = central(
        plugin_addr,
        "    retry:\n      maxAttempts: 1\n    circuitBreaker:\n      consecutiveFailures: 2\n      openFor: 1m\n",
    )
    .await;
    for _ in 0..3 {
        let _ = a.begin_rollout(to("gatekeeper", rollout("bad"))).await;
    }
    let refused = a
        .begin_rollout(to("gatekeeper", rollout("good")))
        .await
        .expect_err("hub A's circuit is open");
    assert!(
        refused.message().contains("circuit open"),
        "{}",
        refused.message()
    );
    for _ in 0..5 {
        b.begin_rollout(to("gatekeeper", rollout("good")))
            .await
            .expect("hub B's circuit is its own");
    }
    running.shutdown().await;
}

#[tokio::test]
async fn one_hubs_slow_calls_do_not_take_another_hubs_places() {
    let plugin_addr = serve(PerHub::default()).await;
    let (running, a, b, _dir) = central(plugin_addr, "    maxConcurrentCalls: 20\n").await;
    // Hub A: 300 slow calls at once; at most its share get a place: 6 of
    // 20, a third (hub A, hub B, and every other caller together).
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut a = a.clone();
        slow.push(tokio::spawn(async move {
            a.begin_rollout(to("gatekeeper", rollout("slow"))).await
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Meanwhile every one of hub B's 6 calls gets a place.
    let mut calls = Vec::new();
    for _ in 0..6 {
        let mut b = b.clone();
        calls.push(tokio::spawn(async move {
            b.begin_rollout(to("gatekeeper", rollout("slow"))).await
        }));
    }
    for call in calls {
        call.await.unwrap().expect("hub B's call has its place");
    }
    let mut refused = 0;
    for call in slow {
        if let Err(e) = call.await.unwrap() {
            assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
            refused += 1;
        }
    }
    assert!(
        refused >= 290,
        "hub A held more than its share: {refused} refused"
    );
    running.shutdown().await;
}

/// Certificates naming hubs that have no registry file, one naming no hub,
/// and hub-a spelt `HUB-A.` hold slow calls by the hundred; hub-b, which
/// is registered, still gets every one of its share's places. The
/// strangers share one share, and `HUB-A.` is hub-a.
#[tokio::test]
async fn unregistered_identities_cannot_starve_a_registered_hub() {
    let plugin_addr = serve(PerHub::default()).await;
    let c = central_cas(plugin_addr, "    maxConcurrentCalls: 21\n").await;
    let addr = c.running.grpc_addr;
    let mut no_hub =
        rollout_plugin_sdk::test_certs::rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap();
    no_hub.distinguished_name = rollout_plugin_sdk::test_certs::rcgen::DistinguishedName::new();
    let mut strangers = vec![
        c.hubs_ca.sign(no_hub).unwrap(),
        c.hubs_ca.leaf("HUB-A.").unwrap(),
    ];
    strangers.extend((0..5).map(|i| c.hubs_ca.leaf(&format!("stranger-{i}")).unwrap()));
    let mut slow = Vec::new();
    for leaf in &strangers {
        let client = RolloutPluginServiceClient::new(hub_channel(addr, &c.server_ca, leaf).await);
        for _ in 0..60 {
            let mut client = client.clone();
            slow.push(tokio::spawn(async move {
                client
                    .begin_rollout(to("gatekeeper", rollout("slow")))
                    .await
            }));
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // 21 places: 7 for hub-a, 7 for hub-b, 7 for every other caller.
    let b = RolloutPluginServiceClient::new(
        hub_channel(addr, &c.server_ca, &c.hubs_ca.leaf("hub-b").unwrap()).await,
    );
    let mut calls = Vec::new();
    for _ in 0..7 {
        let mut b = b.clone();
        calls.push(tokio::spawn(async move {
            b.begin_rollout(to("gatekeeper", rollout("slow"))).await
        }));
    }
    let mut through = 0;
    for call in calls {
        if call.await.unwrap().is_ok() {
            through += 1;
        }
    }
    let held = futures::future::join_all(slow)
        .await
        .into_iter()
        .filter(|r| matches!(r, Ok(Ok(_))))
        .count();
    assert_eq!(through, 7, "hub-b's calls that got a place, of 7");
    assert!(held <= 14, "hub-a and the strangers held {held} places");
    c.running.shutdown().await;
}

#[tokio::test]
async fn one_hubs_initialize_does_not_change_what_another_hub_is_answered() {
    let plugin = PerHub::default();
    let plugin_addr = serve(plugin.clone()).await;
    let (running, mut a, mut b, _dir) = central(plugin_addr, "").await;

    let result =
        |r: Result<Response<ValidateResponse>, Status>| r.expect("answered").into_inner().result;
    let failed = ValidationResult::Failed as i32;
    let succeeded = ValidationResult::Succeeded as i32;
    assert_eq!(
        result(
            b.validate_rollout_completion(to("gatekeeper", validate_request("c1")))
                .await
        ),
        failed
    );
    // Hub A claims to be hub B in the request: the plugin is told hub-a,
    // and learns hub A's declaration alone.
    let init = a
        .initialize(to(
            "gatekeeper",
            InitializeRequest {
                controller_version: "test".into(),
                hub_name: "hub-b".into(),
            },
        ))
        .await
        .expect("initialized")
        .into_inner();
    assert_eq!(
        init.hooks,
        vec![Hook::MutateManifestWork as i32, Hook::BeginRollout as i32]
    );
    assert_eq!(
        plugin.hubs.lock().unwrap().last().map(String::as_str),
        Some("hub-a")
    );
    assert_eq!(
        result(
            b.validate_rollout_completion(to("gatekeeper", validate_request("c1")))
                .await
        ),
        failed,
        "hub A's Initialize changed hub B's answer"
    );
    // Hub A's own declaration leaves validation out: neutral for it.
    assert_eq!(
        result(
            a.validate_rollout_completion(to("gatekeeper", validate_request("c1")))
                .await
        ),
        succeeded
    );
    running.shutdown().await;
}

mod state_per_hub {
    //! What a plugin asked for (the clusters' states, or their counts) is
    //! learned per hub, and so is whether the caller's `rollout_status`
    //! reaches it: the gateway checks that field for the caller's own hub.

    use bytes::{Buf, BufMut, Bytes};
    use prost::Message;
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

    use super::*;

    /// Asks for the counts when the gateway loads it for the shared file
    /// (no hub), and for the full state when hub-a's calls load it.
    #[derive(Clone, Default)]
    struct CountsButForHubA;

    #[tonic::async_trait]
    impl RolloutPluginService for CountsButForHubA {
        async fn initialize(
            &self,
            request: Request<InitializeRequest>,
        ) -> Result<Response<InitializeResponse>, Status> {
            let detail = if request.into_inner().hub_name == "hub-a" {
                RolloutStateDetail::Full
            } else {
                RolloutStateDetail::Counts
            };
            Ok(Response::new(InitializeResponse {
                name: "counts-but-for-hub-a".into(),
                hooks: vec![Hook::BeginRollout as i32],
                state_detail: detail as i32,
                ..Default::default()
            }))
        }

        async fn begin_rollout(
            &self,
            _: Request<RolloutPluginRequest>,
        ) -> Result<Response<()>, Status> {
            Ok(Response::new(()))
        }

        async fn progress_rollout(
            &self,
            _: Request<RolloutPluginRequest>,
        ) -> Result<Response<()>, Status> {
            Ok(Response::new(()))
        }

        async fn validate_rollout_completion(
            &self,
            _: Request<ValidateCompletionRequest>,
        ) -> Result<Response<ValidateResponse>, Status> {
            Err(Status::unimplemented("not declared"))
        }

        async fn mutate_manifest_work(
            &self,
            _: Request<MutateManifestWorkRequest>,
        ) -> Result<Response<MutateManifestWorkResponse>, Status> {
            Err(Status::unimplemented("not declared"))
        }
    }

    /// Sends a message's bytes as they are, so a test can write what no
    /// generated client would.
    #[derive(Clone, Copy, Default)]
    struct Raw;

    impl Codec for Raw {
        type Encode = Bytes;
        type Decode = Bytes;
        type Encoder = Raw;
        type Decoder = Raw;

        fn encoder(&mut self) -> Raw {
            Raw
        }

        fn decoder(&mut self) -> Raw {
            Raw
        }
    }

    impl Encoder for Raw {
        type Item = Bytes;
        type Error = Status;

        fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
            dst.put(item);
            Ok(())
        }
    }

    impl Decoder for Raw {
        type Item = Bytes;
        type Error = Status;

        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
            Ok(Some(src.copy_to_bytes(src.remaining())))
        }
    }

    /// A BeginRollout request whose `rollout_status` (field 6) is cut short
    /// inside a cluster's status.
    fn truncated_state() -> Bytes {
        let state = RolloutState {
            completed: vec![ClusterRolloutStatus {
                cluster_name: "c0".into(),
                last_transition_time: Some(prost_types::Timestamp {
                    seconds: 5,
                    nanos: 0,
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
        .encode_to_vec();
        let mut message = rollout("c1").encode_to_vec();
        message.extend_from_slice(&[0x32, state.len() as u8]);
        message.extend_from_slice(&state[..state.len() - 3]);
        message.extend_from_slice(&[0, 0, 0]);
        message.into()
    }

    #[tokio::test]
    async fn a_hubs_rollout_status_is_checked_when_the_plugin_asked_that_hub_for_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let plugin_addr = listener.local_addr().unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RolloutPluginServiceServer::new(CountsButForHubA))
                .serve_with_incoming(TcpListenerStream::new(listener)),
        );
        let (running, channel, _b, _dir) = central_channels(plugin_addr, "").await;
        let mut a = RolloutPluginServiceClient::new(channel.clone());
        // Loaded for the shared file (counts), then for hub-a (full state).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while rollout_gateway::admin::debug_json(&running.registry)["plugins"][0]["stateDetail"]
            != "counts"
        {
            assert!(std::time::Instant::now() < deadline, "never loaded");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        a.begin_rollout(to("gatekeeper", rollout("c1")))
            .await
            .expect("loaded for hub-a");

        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.unwrap();
        let mut request = Request::new(truncated_state());
        request
            .metadata_mut()
            .insert("ocm-rollout-plugin", "gatekeeper".parse().unwrap());
        let e = grpc
            .unary(
                request,
                http::uri::PathAndQuery::from_static(
                    "/ocm.rolloutplugin.v1alpha1.RolloutPluginService/BeginRollout",
                ),
                Raw,
            )
            .await
            .expect_err("the caller's malformed state is refused");
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("rollout_status"), "{}", e.message());
        running.shutdown().await;
    }
}
