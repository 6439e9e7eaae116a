//! Test harness: scriptable plugin servers (real tonic servers on
//! 127.0.0.1:0) and a real gateway started in-process on port 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rollout_gateway::app::{self, Options, Running};
use rollout_gateway::hooks::HookKind;
use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_proto::v1alpha1::rollout_plugin_service_server::{
    RolloutPluginService, RolloutPluginServiceServer,
};
use rollout_proto::v1alpha1::*;
use serde_json::{Value, json};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};

pub const MIB: usize = 1024 * 1024;

/// How a scripted plugin answers MutateManifestWork.
#[derive(Clone)]
pub enum Mutation {
    /// The input bytes back.
    Echo,
    /// An empty answer ("unchanged").
    #[allow(dead_code, reason = "one of the answers a scripted plugin can give")]
    Empty,
    /// Adds `metadata.annotations[KEY] = VALUE` and appends the plugin's name to
    /// the `test/chain` annotation, so the order of a chain shows in the result.
    Annotate(&'static str, &'static str),
    /// A fixed answer, whatever the input.
    Fixed(Bytes),
    /// Any function of the input.
    With(Arc<dyn Fn(&Value) -> Value + Send + Sync>),
}

/// What a scripted plugin does; changeable while it runs.
#[derive(Clone)]
pub struct Behaviour {
    pub name: String,
    /// Hooks listed in the InitializeResponse (empty = all).
    pub hooks: Vec<Hook>,
    /// How long each hook but Initialize takes.
    pub delay: Duration,
    /// Every hook but Initialize fails with this.
    pub fail: Option<(Code, String)>,
    /// The next this-many calls (any hook but Initialize) fail with this,
    /// then the plugin answers normally.
    pub fail_first: Option<(usize, Code)>,
    /// Hooks answered with UNIMPLEMENTED.
    pub unimplemented: Vec<HookKind>,
    pub validate: ValidateResponse,
    pub mutate: Mutation,
}

impl Behaviour {
    pub fn new(name: &str) -> Behaviour {
        Behaviour {
            name: name.to_string(),
            hooks: Vec::new(),
            delay: Duration::ZERO,
            fail: None,
            fail_first: None,
            unimplemented: Vec::new(),
            validate: ValidateResponse {
                result: ValidationResult::Succeeded as i32,
                message: String::new(),
                recheck_after: None,
            },
            mutate: Mutation::Echo,
        }
    }
}

/// One call a plugin received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub hook: HookKind,
    /// The `grpc-timeout` the plugin was given.
    pub timeout: Option<Duration>,
    pub traceparent: Option<String>,
    pub at: Instant,
    #[allow(dead_code, reason = "recorded for a test to assert on")]
    pub aborting: bool,
    pub cluster: String,
}

#[derive(Clone)]
pub struct Plugin {
    pub addr: SocketAddr,
    pub behaviour: Arc<Mutex<Behaviour>>,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub connections: Arc<AtomicUsize>,
    shutdown: Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>,
}

impl Plugin {
    pub fn set(&self, f: impl FnOnce(&mut Behaviour)) {
        f(&mut self.behaviour.lock().unwrap());
    }

    pub fn calls(&self, hook: HookKind) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.hook == hook)
            .count()
    }

    /// Waits until the plugin has received at least `n` calls of `hook`
    /// (counted on arrival, before any scripted delay): a test acts on a
    /// call in flight only once it is in flight, however slow the machine.
    pub async fn wait_calls(&self, hook: HookKind, n: usize) {
        eventually(&format!("{n} {hook} calls arrived"), || {
            self.calls(hook) >= n
        })
        .await;
    }

    pub fn last(&self, hook: HookKind) -> Option<Seen> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|s| s.hook == hook)
            .cloned()
    }

    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }

    /// The plugin's service, to serve it some other way (over TLS).
    pub fn service(&self) -> Scripted {
        Scripted {
            behaviour: self.behaviour.clone(),
            seen: self.seen.clone(),
        }
    }

    /// What [`Plugin::stop`] signals, for a server started elsewhere.
    pub fn on_stop(&self, tx: tokio::sync::oneshot::Sender<()>) {
        *self.shutdown.lock().unwrap() = Some(tx);
    }

    pub fn stop(&self) {
        if let Some(tx) = self.shutdown.lock().unwrap().take() {
            let _ = tx.send(());
        }
    }
}

#[derive(Clone)]
pub struct Scripted {
    behaviour: Arc<Mutex<Behaviour>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    async fn enter<T>(
        &self,
        hook: HookKind,
        req: &Request<T>,
        rollout: Option<&RolloutPluginRequest>,
    ) -> Result<Behaviour, Status> {
        let md = req.metadata();
        self.seen.lock().unwrap().push(Seen {
            hook,
            timeout: md
                .get("grpc-timeout")
                .and_then(|v| v.to_str().ok())
                .and_then(rollout_gateway::transport::grpc::parse_timeout),
            traceparent: md
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            at: Instant::now(),
            aborting: rollout.is_some_and(|r| r.aborting),
            cluster: rollout.map(|r| r.cluster_name.clone()).unwrap_or_default(),
        });
        let b = {
            let mut current = self.behaviour.lock().unwrap();
            if hook != HookKind::Initialize
                && let Some((n, code)) = current.fail_first
                && n > 0
            {
                current.fail_first = Some((n - 1, code));
                return Err(Status::new(code, format!("failing ({} more)", n - 1)));
            }
            current.clone()
        };
        // The delay models slow hooks: Initialize, which loads the plugin,
        // answers at once.
        if !b.delay.is_zero() && hook != HookKind::Initialize {
            tokio::time::sleep(b.delay).await;
        }
        if b.unimplemented.contains(&hook) {
            return Err(Status::unimplemented("not implemented by this plugin"));
        }
        if hook != HookKind::Initialize
            && let Some((code, msg)) = &b.fail
        {
            return Err(Status::new(*code, msg.clone()));
        }
        Ok(b)
    }
}

pub fn annotate(mut work: Value, plugin: &str, key: &str, value: &str) -> Value {
    let ann = work
        .pointer_mut("/metadata")
        .and_then(Value::as_object_mut)
        .unwrap()
        .entry("annotations")
        .or_insert_with(|| json!({}));
    let ann = ann.as_object_mut().unwrap();
    ann.insert(key.to_string(), json!(value));
    let chain = ann
        .get("test/chain")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let chain = if chain.is_empty() {
        plugin.to_string()
    } else {
        format!("{chain},{plugin}")
    };
    ann.insert("test/chain".into(), json!(chain));
    work
}

#[tonic::async_trait]
impl RolloutPluginService for Scripted {
    async fn initialize(
        &self,
        req: Request<InitializeRequest>,
    ) -> Result<Response<InitializeResponse>, Status> {
        let b = self.enter(HookKind::Initialize, &req, None).await?;
        Ok(Response::new(InitializeResponse {
            name: b.name.clone(),
            version: "1.0.0".into(),
            hooks: b.hooks.iter().map(|h| *h as i32).collect(),
            ..Default::default()
        }))
    }
    async fn begin_rollout(
        &self,
        req: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        let r = req.get_ref().clone();
        self.enter(HookKind::BeginRollout, &req, Some(&r)).await?;
        Ok(Response::new(()))
    }
    async fn progress_rollout(
        &self,
        req: Request<RolloutPluginRequest>,
    ) -> Result<Response<()>, Status> {
        let r = req.get_ref().clone();
        self.enter(HookKind::ProgressRollout, &req, Some(&r))
            .await?;
        Ok(Response::new(()))
    }
    async fn validate_rollout_completion(
        &self,
        req: Request<ValidateCompletionRequest>,
    ) -> Result<Response<ValidateResponse>, Status> {
        let r = req.get_ref().rollout.clone().unwrap_or_default();
        let b = self
            .enter(HookKind::ValidateRolloutCompletion, &req, Some(&r))
            .await?;
        Ok(Response::new(b.validate))
    }
    async fn mutate_manifest_work(
        &self,
        req: Request<MutateManifestWorkRequest>,
    ) -> Result<Response<MutateManifestWorkResponse>, Status> {
        let r = req.get_ref().rollout.clone().unwrap_or_default();
        let b = self
            .enter(HookKind::MutateManifestWork, &req, Some(&r))
            .await?;
        let input = req.into_inner().manifest_work;
        let out = match b.mutate {
            Mutation::Echo => input,
            Mutation::Empty => Bytes::new(),
            Mutation::Fixed(bytes) => bytes,
            Mutation::Annotate(k, v) => {
                let work: Value = serde_json::from_slice(&input)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                Bytes::from(serde_json::to_vec(&annotate(work, &b.name, k, v)).unwrap())
            }
            Mutation::With(f) => {
                let work: Value = serde_json::from_slice(&input)
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                Bytes::from(serde_json::to_vec(&f(&work)).unwrap())
            }
        };
        Ok(Response::new(MutateManifestWorkResponse {
            manifest_work: out,
        }))
    }
}

/// A scripted plugin's state, not yet served (see [`Plugin::service`]).
pub fn plugin_handle(addr: SocketAddr, behaviour: Behaviour) -> Plugin {
    Plugin {
        addr,
        behaviour: Arc::new(Mutex::new(behaviour)),
        seen: Arc::new(Mutex::new(Vec::new())),
        connections: Arc::new(AtomicUsize::new(0)),
        shutdown: Arc::new(Mutex::new(None)),
    }
}

/// Starts a scripted plugin on 127.0.0.1:0.
/// Waits (polling every 10 ms, for at most 10 s) until `done` holds.
pub async fn eventually(what: &str, done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting until {what}");
}

pub async fn plugin(behaviour: Behaviour) -> Plugin {
    plugin_on("127.0.0.1:0".parse().unwrap(), behaviour).await
}

/// Starts a scripted plugin on a given address (to bring one back on its old port).
pub async fn plugin_on(addr: SocketAddr, behaviour: Behaviour) -> Plugin {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let behaviour = Arc::new(Mutex::new(behaviour));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let connections = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let svc = RolloutPluginServiceServer::new(Scripted {
        behaviour: behaviour.clone(),
        seen: seen.clone(),
    })
    .max_decoding_message_size(64 * MIB)
    .max_encoding_message_size(64 * MIB);
    let counter = connections.clone();
    let incoming = TcpListenerStream::new(listener).map(move |s| {
        counter.fetch_add(1, Ordering::SeqCst);
        s
    });
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, async {
                let _ = rx.await;
            })
            .await;
    });
    Plugin {
        addr,
        behaviour,
        seen,
        connections,
        shutdown: Arc::new(Mutex::new(Some(tx))),
    }
}

pub struct Gateway {
    pub running: Option<Running>,
    pub grpc: SocketAddr,
    pub admin: SocketAddr,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
}

impl Gateway {
    pub async fn client(&self) -> RolloutPluginServiceClient<Channel> {
        client(self.grpc).await
    }

    /// Rewrites the registry file in place (not atomically, as an editor would).
    pub fn write_config(&self, text: &str) {
        std::fs::write(&self.config, text).unwrap();
    }

    /// Waits until the registry generation reaches `generation`.
    pub async fn wait_generation(&self, generation: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let g = self.debug().await["generation"].as_u64().unwrap_or(0);
            if g >= generation {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "generation {generation} not reached (at {g})"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn debug(&self) -> Value {
        serde_json::from_str(&http_get(self.admin, "/debug/plugins").await.1).unwrap()
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
    }
}

/// Starts a real gateway in-process on port 0 over a registry file holding `config`.
pub async fn gateway(config: &str) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).unwrap();
    gateway_with(dir, path, |_| {}).await
}

pub async fn gateway_with(
    dir: tempfile::TempDir,
    path: PathBuf,
    tune: impl FnOnce(&mut Options),
) -> Gateway {
    let mut options = Options {
        configs: vec![path.clone()],
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        poll_interval: Duration::from_millis(500),
        ..Options::default()
    };
    tune(&mut options);
    let running = app::start(options).await.expect("gateway starts");
    Gateway {
        grpc: running.grpc_addr,
        admin: running.admin_addr,
        running: Some(running),
        dir,
        config: path,
    }
}

pub async fn client(addr: SocketAddr) -> RolloutPluginServiceClient<Channel> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    RolloutPluginServiceClient::new(channel)
        .max_decoding_message_size(64 * MIB)
        .max_encoding_message_size(64 * MIB)
}

/// A request naming its target.
pub fn to<T>(target: &str, message: T) -> Request<T> {
    let mut r = Request::new(message);
    if !target.is_empty() {
        r.metadata_mut()
            .insert("ocm-rollout-plugin", target.parse().unwrap());
    }
    r
}

pub fn insecure_plugin(name: &str, p: &Plugin, extra: &str) -> String {
    format!(
        "  - name: {name}\n    endpoint: {}\n    insecure: true\n{extra}",
        p.endpoint()
    )
}

/// The request about `cluster`, cluster 1 of 3 of MWRS `default/hello`:
/// the SDK's request fixture, which plugin authors' tests send too.
pub fn rollout(cluster: &str) -> RolloutPluginRequest {
    rollout_plugin_sdk::testing::rollout(cluster, 1, 3)
}

/// A ManifestWork of roughly `size` bytes.
pub fn work(size: usize) -> Bytes {
    let mut w = json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": "hello", "namespace": "cluster1"},
        "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "payload", "namespace": "default"}, "data": {"blob": ""}}]}}
    });
    let base = serde_json::to_vec(&w).unwrap().len();
    let pad: String = (0..size.saturating_sub(base))
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    w["spec"]["workload"]["manifests"][0]["data"]["blob"] = json!(pad);
    Bytes::from(serde_json::to_vec(&w).unwrap())
}

pub fn mutate_request(cluster: &str, work: Bytes) -> MutateManifestWorkRequest {
    MutateManifestWorkRequest {
        rollout: Some(rollout(cluster)),
        manifest_work: work,
    }
}

pub fn validate_request(cluster: &str) -> ValidateCompletionRequest {
    ValidateCompletionRequest {
        rollout: Some(rollout(cluster)),
    }
}

pub fn trailer(md: &tonic::metadata::MetadataMap, key: &str) -> Option<String> {
    md.get(key)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// A bare HTTP/1.1 GET to the admin listener: (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).await.unwrap();
    let status = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// What a raw gRPC call returned: the headers, the message bytes and the trailers.
#[derive(Debug)]
pub struct RawAnswer {
    pub headers: http::HeaderMap,
    pub body: Bytes,
    pub trailers: http::HeaderMap,
}

impl RawAnswer {
    /// grpc-status, wherever it came (trailers, or headers of a trailers-only answer).
    pub fn status(&self) -> Option<String> {
        self.trailers
            .get("grpc-status")
            .or_else(|| self.headers.get("grpc-status"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
}

impl RawAnswer {
    /// grpc-message, percent-decoded, wherever it came.
    pub fn message(&self) -> String {
        self.trailers
            .get("grpc-message")
            .or_else(|| self.headers.get("grpc-message"))
            .and_then(|v| v.to_str().ok())
            .map(rollout_gateway::transport::grpc::percent_decode)
            .unwrap_or_default()
    }
}

/// Already encoded message bytes, sent exactly as they are (unknown
/// fields, or a message a correct encoder would never make).
#[derive(Debug)]
pub struct RawMessage(pub Vec<u8>);

impl prost::Message for RawMessage {
    fn encode_raw(&self, buf: &mut impl bytes::BufMut) {
        buf.put_slice(&self.0);
    }
    fn merge_field(
        &mut self,
        _: u32,
        _: prost::encoding::WireType,
        _: &mut impl bytes::Buf,
        _: prost::encoding::DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        unreachable!("only encoded")
    }
    fn encoded_len(&self) -> usize {
        self.0.len()
    }
    fn clear(&mut self) {
        self.0.clear();
    }
}

/// A unary gRPC call over a bare HTTP/2 connection, with the given extra
/// headers. Unlike a tonic client it enforces no deadline of its own, and it
/// shows headers and trailers apart.
pub async fn raw_unary(
    addr: SocketAddr,
    method: &str,
    message: &impl prost::Message,
    headers: &[(&str, &str)],
) -> RawAnswer {
    use http_body_util::{BodyExt, Full};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let payload = message.encode_to_vec();
    let mut frame = Vec::with_capacity(payload.len() + 5);
    frame.push(0);
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    let mut req = http::Request::post(format!(
        "http://{addr}/ocm.rolloutplugin.v1alpha1.RolloutPluginService/{method}"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(req.body(Full::new(Bytes::from(frame))).unwrap())
        .await
        .unwrap();
    let (parts, body) = resp.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned().unwrap_or_default();
    let bytes = collected.to_bytes();
    RawAnswer {
        headers: parts.headers,
        body: if bytes.len() >= 5 {
            bytes.slice(5..)
        } else {
            bytes
        },
        trailers,
    }
}

/// Reads a gateway child process's listening line, `rollout-gateway
/// listening grpc=ADDR admin=ADDR`, and returns both addresses.
pub fn listening(child: &mut std::process::Child) -> (SocketAddr, SocketAddr) {
    use std::io::{BufRead, BufReader};
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("the child's stdout is piped"))
        .read_line(&mut line)
        .unwrap();
    let mut grpc = None;
    let mut admin = None;
    assert!(line.starts_with("rollout-gateway listening "), "{line:?}");
    for word in line.split_whitespace() {
        if let Some(a) = word.strip_prefix("grpc=") {
            grpc = Some(a.parse().unwrap());
        }
        if let Some(a) = word.strip_prefix("admin=") {
            admin = Some(a.parse().unwrap());
        }
    }
    (grpc.expect("grpc="), admin.expect("admin="))
}

/// Holds `per_address` TCP connections from each of 127.0.0.2 ..
/// 127.0.0.`addresses + 1` (tests call from 127.0.0.1) to `addr`, each
/// sending `first` and then nothing more, reopened `reopen` after the
/// gateway closes it, until `stop` is set.
pub fn holding_peers(
    addr: SocketAddr,
    (addresses, per_address): (u8, usize),
    first: &'static [u8],
    reopen: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for a in 2..=addresses + 1 {
        for _ in 0..per_address {
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let socket = tokio::net::TcpSocket::new_v4().unwrap();
                    socket
                        .bind(format!("127.0.0.{a}:0").parse().unwrap())
                        .unwrap();
                    if let Ok(mut tcp) = socket.connect(addr).await {
                        if !first.is_empty() {
                            let _ = tcp.write_all(first).await;
                        }
                        let mut buf = [0u8; 256];
                        while matches!(tcp.read(&mut buf).await, Ok(n) if n > 0) {}
                    }
                    tokio::time::sleep(reopen).await;
                }
            });
        }
    }
}
