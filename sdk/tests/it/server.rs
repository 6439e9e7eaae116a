//! The SDK's server through a real tonic client on 127.0.0.1:0: neutral
//! defaults, request checks, errors, patch helpers over the wire, health
//! through the serving lifecycle, graceful drain, bind errors.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rollout_plugin_sdk::prelude::*;
use rollout_plugin_sdk::proto::{
    InitializeRequest, MutateManifestWorkRequest, ValidateCompletionRequest,
};
use rollout_plugin_sdk::{ServingStatus, testing};
use serde_json::{Value, json};
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, health_check_response};

/// Overrides nothing: every hook answers neutrally.
struct Neutral;

impl RolloutPlugin for Neutral {
    fn info(&self) -> PluginInfo {
        PluginInfo::new("neutral", "1.2.3").hooks([Hook::ValidateRolloutCompletion])
    }
}

#[tokio::test]
async fn defaults_answer_neutrally() {
    let server = testing::spawn(Neutral).await.unwrap();
    let mut client = testing::connect(server.local_addr()).await.unwrap();

    let init = client
        .initialize(InitializeRequest {
            controller_version: "v1".into(),
            hub_name: "hub".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(init.name, "neutral");
    assert_eq!(init.version, "1.2.3");
    assert_eq!(
        init.hooks().collect::<Vec<_>>(),
        [Hook::ValidateRolloutCompletion]
    );

    let r = testing::rollout("cluster1", 1, 3);
    client.begin_rollout(r.clone()).await.unwrap();
    client.progress_rollout(r.clone()).await.unwrap();
    let v = client
        .validate_rollout_completion(testing::validate_request(r.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.result(), ValidationResult::Succeeded);
    assert!(v.recheck_after.is_none());
    let m = client
        .mutate_manifest_work(testing::mutate_request(
            r,
            &testing::sample_work("cluster1"),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(m.manifest_work.is_empty(), "empty means unchanged");

    server.shutdown().await.unwrap();
}

/// Annotates every manifest; fails as told by the cluster's name.
struct Annotator {
    calls: AtomicUsize,
}

impl RolloutPlugin for Annotator {
    fn info(&self) -> PluginInfo {
        PluginInfo::new("annotator", "0.1.0").hooks([Hook::MutateManifestWork, Hook::BeginRollout])
    }

    async fn begin_rollout(&self, request: RolloutPluginRequest) -> Result<(), PluginError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        match request.cluster_name.as_str() {
            "flaky" => Err(PluginError::unavailable("mesh API down")),
            "denied" => Err(tonic::Status::permission_denied("not yours").into()),
            _ => Ok(()),
        }
    }

    async fn mutate_manifest_work(
        &self,
        request: RolloutPluginRequest,
        mut work: ManifestWork,
    ) -> Result<Mutation, PluginError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if request.cluster_name == "rename" {
            work.as_value_mut()["metadata"]["name"] = json!("elsewhere");
            return Ok(work.into());
        }
        let position = request
            .position()
            .ok_or_else(|| PluginError::invalid_argument("no cluster position"))?;
        for mut manifest in work.manifests_mut() {
            manifest.set_annotation("example.com/position", position.to_string())?;
        }
        if let Some(mut rollout) = work.find_mut("Rollout", "web") {
            rollout.set(&["spec", "paused"], json!(true))?;
        }
        Ok(Mutation::Changed(work))
    }
}

#[tokio::test]
async fn mutation_travels_as_json_and_keeps_the_rest() {
    let plugin = Arc::new(Annotator {
        calls: AtomicUsize::new(0),
    });
    let server = testing::spawn(plugin.clone()).await.unwrap();
    let mut client = testing::connect(server.local_addr()).await.unwrap();

    let input = testing::sample_work("cluster2");
    let out = client
        .mutate_manifest_work(testing::mutate_request(
            testing::rollout("cluster2", 2, 5),
            &input,
        ))
        .await
        .unwrap()
        .into_inner();
    let out: Value = serde_json::from_slice(&out.manifest_work).unwrap();
    let manifests = out["spec"]["workload"]["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 3);
    for m in manifests {
        assert_eq!(m["metadata"]["annotations"]["example.com/position"], "2/5");
    }
    assert_eq!(manifests[1]["spec"]["paused"], true);
    assert_eq!(
        manifests[2]["data"],
        input["spec"]["workload"]["manifests"][2]["data"]
    );
    assert_eq!(out["metadata"], input["metadata"]);
    assert_eq!(
        plugin.calls.load(Ordering::SeqCst),
        1,
        "the Arc shares the plugin's state"
    );

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn changed_works_come_back_without_a_delayed_ack_stall() {
    // With Nagle on, an answer the server writes in pieces waits for the
    // client's delayed ACK: at least 40 ms per call on Linux. The median of
    // twenty calls that change a work must stay well under that; a median,
    // so that a busy machine's few slow calls do not fail the test.
    let plugin = Arc::new(Annotator {
        calls: AtomicUsize::new(0),
    });
    let server = testing::spawn(plugin.clone()).await.unwrap();
    let mut client = testing::connect(server.local_addr()).await.unwrap();
    let input = testing::sample_work("cluster2");
    let request = || testing::mutate_request(testing::rollout("cluster2", 2, 5), &input);
    // The first call sets the connection up.
    client.mutate_manifest_work(request()).await.unwrap();
    let mut calls = Vec::with_capacity(20);
    for _ in 0..20 {
        let started = Instant::now();
        client.mutate_manifest_work(request()).await.unwrap();
        calls.push(started.elapsed());
    }
    calls.sort_unstable();
    let median = calls[calls.len() / 2];
    assert!(
        median < Duration::from_millis(20),
        "the median mutating call took {median:?} (all: {calls:?}): answers are stalling"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn malformed_requests_and_bad_mutations_are_named() {
    let plugin = Annotator {
        calls: AtomicUsize::new(0),
    };
    let server = testing::spawn(plugin).await.unwrap();
    let mut client = testing::connect(server.local_addr()).await.unwrap();

    // no `rollout`
    let e = client
        .validate_rollout_completion(ValidateCompletionRequest { rollout: None })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("no `rollout`"), "{}", e.message());

    // not JSON, empty, wrong shape
    let cases: [(&[u8], &str); 3] = [
        (b"{nope", "not valid JSON"),
        (b"", "ManifestWork is empty"),
        (
            br#"{"spec": {"workload": {"manifests": 7}}}"#,
            "`spec.workload.manifests` must be an array",
        ),
    ];
    for (bytes, want) in cases {
        let e = client
            .mutate_manifest_work(MutateManifestWorkRequest {
                rollout: Some(testing::rollout("c", 1, 1)),
                manifest_work: bytes::Bytes::copy_from_slice(bytes),
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{want}");
        assert!(
            e.message().contains(want),
            "{:?} lacks {want:?}",
            e.message()
        );
    }

    // the plugin's own error, and a missing position
    let e = client
        .mutate_manifest_work(testing::mutate_request(
            testing::rollout("c", 0, 0),
            &testing::sample_work("c"),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "no cluster position")
    );

    // a mutation that redirects the work
    let e = client
        .mutate_manifest_work(testing::mutate_request(
            testing::rollout("rename", 1, 1),
            &testing::sample_work("rename"),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Internal);
    assert!(e.message().contains("`metadata.name`"), "{}", e.message());

    // error codes pass through
    let e = client
        .begin_rollout(testing::rollout("flaky", 1, 1))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::Unavailable, "mesh API down")
    );
    let e = client
        .begin_rollout(testing::rollout("denied", 1, 1))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::PermissionDenied, "not yours")
    );

    server.shutdown().await.unwrap();
}

async fn health_client(addr: std::net::SocketAddr) -> HealthClient<tonic::transport::Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    HealthClient::new(channel)
}

fn check(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.into(),
    }
}

#[tokio::test]
async fn health_is_serving_then_not_serving_on_shutdown() {
    let server = testing::spawn(Neutral).await.unwrap();
    let mut health = health_client(server.local_addr()).await;
    for service in ["", rollout_plugin_sdk::SERVICE_NAME] {
        let status = health.check(check(service)).await.unwrap().into_inner();
        assert_eq!(
            status.status(),
            health_check_response::ServingStatus::Serving,
            "{service:?}"
        );
    }

    // Watch both, then shut down: each stream sees NOT_SERVING.
    let mut watches = Vec::new();
    for service in ["", rollout_plugin_sdk::SERVICE_NAME] {
        let mut stream = health.watch(check(service)).await.unwrap().into_inner();
        let first = stream.message().await.unwrap().unwrap();
        assert_eq!(
            first.status(),
            health_check_response::ServingStatus::Serving
        );
        watches.push(stream);
    }
    let shutdown = tokio::spawn(server.shutdown());
    for mut stream in watches {
        let next = tokio::time::timeout(Duration::from_secs(5), stream.message())
            .await
            .expect("a status change within 5 s")
            .unwrap()
            .unwrap();
        assert_eq!(
            next.status(),
            health_check_response::ServingStatus::NotServing
        );
    }
    // The watches were the last calls in flight: the drain ends.
    tokio::time::timeout(Duration::from_secs(5), shutdown)
        .await
        .expect("drained within 5 s")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_plugin_can_report_its_own_health() {
    let server = testing::spawn(Neutral).await.unwrap();
    let mut health = health_client(server.local_addr()).await;
    server
        .health()
        .set_service_status(rollout_plugin_sdk::SERVICE_NAME, ServingStatus::NotServing)
        .await;
    let status = health
        .check(check(rollout_plugin_sdk::SERVICE_NAME))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status(),
        health_check_response::ServingStatus::NotServing
    );
    server.shutdown().await.unwrap();
}

/// Takes `delay` to answer BeginRollout.
struct Slow {
    delay: Duration,
    /// Calls that reached the plugin, counted before the delay.
    arrived: Arc<AtomicUsize>,
}

impl Slow {
    fn new(delay: Duration) -> (Slow, Arc<AtomicUsize>) {
        let arrived = Arc::new(AtomicUsize::new(0));
        (
            Slow {
                delay,
                arrived: arrived.clone(),
            },
            arrived,
        )
    }
}

/// Until a call is in flight at the plugin, however slow the machine.
async fn in_flight(arrived: &AtomicUsize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while arrived.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no call arrived in 30 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

impl RolloutPlugin for Slow {
    fn info(&self) -> PluginInfo {
        PluginInfo::new("slow", "0.1.0")
    }

    async fn begin_rollout(&self, _request: RolloutPluginRequest) -> Result<(), PluginError> {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        Ok(())
    }
}

#[tokio::test]
async fn shutdown_lets_calls_in_flight_finish_and_refuses_new_ones() {
    let (slow, arrived) = Slow::new(Duration::from_millis(500));
    let server = testing::spawn(slow).await.unwrap();
    let addr = server.local_addr();
    let mut client = testing::connect(addr).await.unwrap();
    let call = tokio::spawn(async move { client.begin_rollout(testing::rollout("c", 1, 1)).await });
    in_flight(&arrived).await;
    let started = Instant::now();
    server.shutdown().await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "waited for the call"
    );
    call.await.unwrap().expect("the call in flight finished");
    assert!(testing::connect(addr).await.is_err(), "no longer accepting");
}

#[tokio::test]
async fn drain_timeout_bounds_the_shutdown() {
    let options = ServeOptions::default().drain_timeout(Duration::from_millis(200));
    let (slow, arrived) = Slow::new(Duration::from_secs(30));
    let server = testing::spawn_with(slow, options).await.unwrap();
    let mut client = testing::connect(server.local_addr()).await.unwrap();
    let _call =
        tokio::spawn(async move { client.begin_rollout(testing::rollout("c", 1, 1)).await });
    in_flight(&arrived).await;
    let started = Instant::now();
    server.shutdown().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn port_zero_gives_a_real_port_and_a_taken_port_is_an_error() {
    let bound = rollout_plugin_sdk::bind(
        Neutral,
        "127.0.0.1:0".parse().unwrap(),
        ServeOptions::default(),
    )
    .await
    .unwrap();
    let addr = bound.local_addr();
    assert_ne!(addr.port(), 0);
    let err = rollout_plugin_sdk::bind(Neutral, addr, ServeOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ServeError::Bind { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with(&format!("cannot listen on {addr}")),
        "{err}"
    );
    // Connections queue until serving starts.
    let running = bound.spawn();
    let mut client = testing::connect(addr).await.unwrap();
    client
        .begin_rollout(testing::rollout("c", 1, 1))
        .await
        .unwrap();
    running.shutdown().await.unwrap();
}

#[tokio::test]
async fn messages_over_the_limit_are_refused() {
    let options = ServeOptions::default().max_message_bytes(1024);
    let server = testing::spawn_with(Neutral, options).await.unwrap();
    let mut client = testing::connect(server.local_addr()).await.unwrap();
    let mut work = testing::sample_work("c");
    work["spec"]["workload"]["manifests"][2]["data"]["blob"] = json!("x".repeat(4096));
    let e = client
        .mutate_manifest_work(testing::mutate_request(testing::rollout("c", 1, 1), &work))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange);
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn reflection_lists_the_services_and_serves_the_api_file() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let server = testing::spawn(Neutral).await.unwrap();
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{}", server.local_addr()))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let ask = |request: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let requests = tokio_stream::iter([
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(
            "ocm.rolloutplugin.v1alpha1.RolloutPluginService".into(),
        )),
    ]);
    let mut answers = ServerReflectionClient::new(channel)
        .server_reflection_info(requests)
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("not a service list")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for name in [
        rollout_plugin_sdk::SERVICE_NAME,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    let Some(MessageResponse::FileDescriptorResponse(files)) =
        answers.message().await.unwrap().unwrap().message_response
    else {
        panic!("not a file descriptor")
    };
    let needle = b"ocm/rolloutplugin/v1alpha1/rollout_plugin.proto";
    assert!(
        files
            .file_descriptor_proto
            .iter()
            .any(|f| f.windows(needle.len()).any(|w| w == needle)),
        "the API's file"
    );
    server.shutdown().await.unwrap();
}
