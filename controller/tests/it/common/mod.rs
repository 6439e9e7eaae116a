//! Test harness: a scripted plugin (a real tonic server on 127.0.0.1:0), a
//! real rollout gateway started in-process in front of it, and a scripted
//! Kubernetes API server (kube's mock-service pattern) that answers the
//! expected requests in order and fails the test on any other. Like a real
//! API server it prunes every custom resource it answers with against its
//! CRDs (OCM-shaped by default: OCM's fields only), it keeps the
//! ManifestWorkReplicaSetRollouts itself ([`Hub`]), outside the script, and
//! scripted ManifestWork requests may answer from a store that keeps
//! managedFields and answers 409 Conflict as an API server does
//! ([`fields`], the hub's `works`).

pub mod fields;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use rollout_controller::api::prune::Schemas;
use rollout_controller::api::{CrdShape, crds};
use rollout_controller::hooks::{GatewayHooks, GatewayOptions, HookKind};
use rollout_controller::reconcile::{Context, Tunables};
use rollout_controller::telemetry::Tracing;
use rollout_gateway::app::{self, Running};
use rollout_proto::v1alpha1::rollout_plugin_service_server::{
    RolloutPluginService, RolloutPluginServiceServer,
};
use rollout_proto::v1alpha1::*;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Status, metadata::MetadataMap};

// ---------------------------------------------------------------------------
// The scripted plugin.

/// One call the plugin received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub hook: HookKind,
    /// The rollout request (not for Initialize).
    pub request: Option<RolloutPluginRequest>,
    /// The ManifestWork of a MutateManifestWork.
    pub work: Option<Value>,
    /// Initialize's `controller_version`.
    pub controller_version: Option<String>,
    pub traceparent: Option<String>,
    pub timeout: Option<String>,
}

#[derive(Default)]
pub struct Script {
    /// ValidateRolloutCompletion answers per cluster (SUCCEEDED otherwise).
    pub validate: HashMap<String, ValidateResponse>,
    /// BeginRollout answers this error when set (OK otherwise).
    pub begin_error: Option<(tonic::Code, String)>,
    /// MutateManifestWork also sets the annotation `canary/note` of the
    /// work's first manifest to this.
    pub note: Option<String>,
    /// MutateManifestWork answers the work without its `spec`.
    pub drop_spec: bool,
    pub seen: Vec<Seen>,
}

#[derive(Clone, Default)]
pub struct Plugin {
    pub script: Arc<Mutex<Script>>,
}

impl Plugin {
    pub fn answer(
        &self,
        cluster: &str,
        result: ValidationResult,
        message: &str,
        recheck_secs: Option<i64>,
    ) {
        self.script.lock().unwrap().validate.insert(
            cluster.into(),
            ValidateResponse {
                result: result as i32,
                message: message.into(),
                recheck_after: recheck_secs.map(|s| prost_types::Duration {
                    seconds: s,
                    nanos: 0,
                }),
            },
        );
    }

    /// The calls the controller made (the gateway's own Initialize left
    /// out), in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.script
            .lock()
            .unwrap()
            .seen
            .iter()
            .filter(|s| {
                !s.controller_version
                    .as_deref()
                    .is_some_and(|v| v.starts_with("rollout-gateway"))
            })
            .cloned()
            .collect()
    }

    /// `(hook, cluster)` of each call the controller made.
    pub fn calls(&self) -> Vec<(HookKind, String)> {
        self.seen()
            .iter()
            .map(|s| {
                (
                    s.hook,
                    s.request
                        .as_ref()
                        .map(|r| r.cluster_name.clone())
                        .unwrap_or_default(),
                )
            })
            .collect()
    }

    pub fn requests(&self, hook: HookKind) -> Vec<RolloutPluginRequest> {
        self.seen()
            .into_iter()
            .filter(|s| s.hook == hook)
            .filter_map(|s| s.request)
            .collect()
    }

    pub fn clear(&self) {
        self.script.lock().unwrap().seen.clear();
    }

    fn record(
        &self,
        hook: HookKind,
        md: &MetadataMap,
        request: Option<RolloutPluginRequest>,
        work: Option<Value>,
        version: Option<String>,
    ) {
        let get = |k: &str| md.get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
        self.script.lock().unwrap().seen.push(Seen {
            hook,
            request,
            work,
            controller_version: version,
            traceparent: get("traceparent"),
            timeout: get("grpc-timeout"),
        });
    }
}

#[tonic::async_trait]
impl RolloutPluginService for Plugin {
    async fn initialize(
        &self,
        req: tonic::Request<InitializeRequest>,
    ) -> Result<tonic::Response<InitializeResponse>, Status> {
        let version = req.get_ref().controller_version.clone();
        self.record(
            HookKind::Initialize,
            req.metadata(),
            None,
            None,
            Some(version),
        );
        Ok(tonic::Response::new(InitializeResponse {
            name: "canary".into(),
            version: "1.0.0".into(),
            hooks: Vec::new(),
            ..Default::default()
        }))
    }

    async fn begin_rollout(
        &self,
        req: tonic::Request<RolloutPluginRequest>,
    ) -> Result<tonic::Response<()>, Status> {
        self.record(
            HookKind::BeginRollout,
            req.metadata(),
            Some(req.get_ref().clone()),
            None,
            None,
        );
        if let Some((code, message)) = self.script.lock().unwrap().begin_error.clone() {
            return Err(Status::new(code, message));
        }
        Ok(tonic::Response::new(()))
    }

    async fn progress_rollout(
        &self,
        req: tonic::Request<RolloutPluginRequest>,
    ) -> Result<tonic::Response<()>, Status> {
        self.record(
            HookKind::ProgressRollout,
            req.metadata(),
            Some(req.get_ref().clone()),
            None,
            None,
        );
        Ok(tonic::Response::new(()))
    }

    async fn validate_rollout_completion(
        &self,
        req: tonic::Request<ValidateCompletionRequest>,
    ) -> Result<tonic::Response<ValidateResponse>, Status> {
        let rollout = req.get_ref().rollout.clone().unwrap_or_default();
        self.record(
            HookKind::ValidateRolloutCompletion,
            req.metadata(),
            Some(rollout.clone()),
            None,
            None,
        );
        let answer = self
            .script
            .lock()
            .unwrap()
            .validate
            .get(&rollout.cluster_name)
            .cloned();
        Ok(tonic::Response::new(answer.unwrap_or(ValidateResponse {
            result: ValidationResult::Succeeded as i32,
            message: "all checks passed".into(),
            recheck_after: None,
        })))
    }

    /// Adds `canary/weight: <cluster_index × 10>` and
    /// `canary/aborting: <aborting>` annotations.
    async fn mutate_manifest_work(
        &self,
        req: tonic::Request<MutateManifestWorkRequest>,
    ) -> Result<tonic::Response<MutateManifestWorkResponse>, Status> {
        let rollout = req.get_ref().rollout.clone().unwrap_or_default();
        let mut work: Value = serde_json::from_slice(&req.get_ref().manifest_work)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        self.record(
            HookKind::MutateManifestWork,
            req.metadata(),
            Some(rollout.clone()),
            Some(work.clone()),
            None,
        );
        let annotations = work["metadata"]
            .as_object_mut()
            .unwrap()
            .entry("annotations")
            .or_insert_with(|| json!({}));
        annotations["canary/weight"] = json!((rollout.cluster_index * 10).to_string());
        annotations["canary/aborting"] = json!(rollout.aborting.to_string());
        if let Some(note) = self.script.lock().unwrap().note.clone() {
            let manifest = &mut work["spec"]["workload"]["manifests"][0]["metadata"];
            manifest["annotations"]["canary/note"] = json!(note);
        }
        if self.script.lock().unwrap().drop_spec {
            work.as_object_mut().unwrap().remove("spec");
        }
        Ok(tonic::Response::new(MutateManifestWorkResponse {
            manifest_work: serde_json::to_vec(&work).unwrap().into(),
        }))
    }
}

/// Starts the scripted plugin on 127.0.0.1:0.
pub async fn plugin() -> (Plugin, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let plugin = Plugin::default();
    let service = RolloutPluginServiceServer::new(plugin.clone());
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await;
    });
    (plugin, addr)
}

/// An address nothing listens on.
pub async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

// ---------------------------------------------------------------------------
// The gateway.

pub struct Gateway {
    pub running: Running,
    pub url: String,
    _dir: tempfile::TempDir,
}

/// A real gateway, in-process on port 0, with `plugins` (name, address)
/// registered as plaintext plugins that fail fast.
pub async fn gateway(plugins: &[(&str, SocketAddr)]) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let mut config =
        String::from("defaults:\n  timeout: 5s\n  retry:\n    maxAttempts: 1\nplugins:\n");
    if plugins.is_empty() {
        config.push_str("  []\n");
    }
    for (name, addr) in plugins {
        config.push_str(&format!(
            "  - name: {name}\n    endpoint: {addr}\n    insecure: true\n"
        ));
    }
    std::fs::write(&path, config).unwrap();
    let running = app::start(app::Options {
        configs: vec![path],
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        poll_interval: Duration::from_millis(500),
        ..app::Options::default()
    })
    .await
    .expect("the gateway starts");
    Gateway {
        url: format!("http://{}", running.grpc_addr),
        running,
        _dir: dir,
    }
}

/// The controller's context over `client` and the gateway at `url`.
pub fn context(client: kube::Client, url: &str) -> Arc<Context> {
    let telemetry = Tracing::disabled();
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: url.into(),
            timeout: Duration::from_secs(10),
            tls: None,
        },
        telemetry.clone(),
    )
    .unwrap();
    let mut options = Tunables::default();
    // The scripted API server answers requests in a fixed order, so these
    // tests roll out one cluster at a time; tests/concurrency.rs covers the
    // calls in flight together.
    options.settings.hook_concurrency = 1;
    Arc::new(Context::new(client, hooks, telemetry, options))
}

// ---------------------------------------------------------------------------
// The scripted API server.

/// Makes the answer to a request.
pub type Answer = Box<dyn FnOnce(&Recorded) -> (StatusCode, Value) + Send>;

/// One expected request: its method and path, and the answer (from the
/// request's JSON body; `Value::Null` when it has none).
pub struct Expect {
    pub method: Method,
    pub path: String,
    pub answer: Answer,
}

impl Expect {
    pub fn new(
        method: Method,
        path: impl Into<String>,
        answer: impl FnOnce(&Value) -> (StatusCode, Value) + Send + 'static,
    ) -> Expect {
        Expect::recorded(method, path, move |r: &Recorded| answer(&r.body))
    }

    /// Answers from the whole request (query and content type included).
    pub fn recorded(
        method: Method,
        path: impl Into<String>,
        answer: impl FnOnce(&Recorded) -> (StatusCode, Value) + Send + 'static,
    ) -> Expect {
        Expect {
            method,
            path: path.into(),
            answer: Box::new(answer),
        }
    }

    /// Answers 200 with `value`.
    pub fn ok(method: Method, path: impl Into<String>, value: Value) -> Expect {
        Expect::new(method, path, move |_| (StatusCode::OK, value))
    }

    /// Answers 200 (201 for POST) with the request body, as stored: with a
    /// resourceVersion, a uid and generation 1 unless it has them.
    pub fn echo(method: Method, path: impl Into<String>) -> Expect {
        let created = method == Method::POST;
        Expect::new(method, path, move |body| {
            let mut stored = body.clone();
            if let Some(meta) = stored.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.entry("resourceVersion").or_insert(json!("100"));
                meta.entry("uid").or_insert(json!("uid-new"));
                meta.entry("generation").or_insert(json!(1));
            }
            (
                if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                },
                stored,
            )
        })
    }
}

impl Expect {
    /// The status patch of `object` (a ManifestWorkReplicaSet): answers
    /// `object` with the patched status.
    pub fn status(object: &Value) -> Expect {
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let path = format!(
            "/apis/work.open-cluster-management.io/v1alpha1/namespaces/{NS}/manifestworkreplicasets/{name}/status"
        );
        let mut stored = object.clone();
        Expect::new(Method::PATCH, path, move |body| {
            stored["status"] = body["status"].clone();
            (StatusCode::OK, stored)
        })
    }

    /// A merge patch of `object`'s status conditions (a
    /// ManifestWorkReplicaSet): answers `object` with those conditions.
    pub fn conditions(object: &Value) -> Expect {
        let mut stored = object.clone();
        Expect::new(
            Method::PATCH,
            format!("{}/status", mwrs_path()),
            move |patch| {
                stored["status"]["conditions"] = patch["status"]["conditions"].clone();
                (StatusCode::OK, stored)
            },
        )
    }
}

/// A request the API server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub content_type: String,
    pub body: Value,
}

impl Recorded {
    /// The query parameters, sorted.
    pub fn params(&self) -> Vec<String> {
        let mut params: Vec<String> = self
            .query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        params.sort();
        params
    }
}

/// What the scripted API server knows beyond its script, as a real one
/// would: the CRDs it prunes every answer against; the
/// ManifestWorkReplicaSetRollouts of namespace [`NS`], which it stores
/// (create, get, status apply) without a script; and, for the scripted
/// ManifestWork requests that answer from it ([`fields::expect_apply`],
/// [`fields::expect_merge`], [`fields::expect_list`]), ManifestWorks kept
/// with their managedFields, pruned against the same CRDs.
#[derive(Clone)]
pub struct Hub {
    schemas: Arc<Schemas>,
    /// The stored ManifestWorkReplicaSetRollouts, by name.
    pub carriers: Arc<Mutex<BTreeMap<String, Value>>>,
    /// The requests about them, in order.
    pub carrier_requests: Arc<Mutex<Vec<Recorded>>>,
    /// The stored ManifestWorks, with field ownership.
    pub works: fields::Shared,
}

impl Hub {
    fn of(shape: CrdShape) -> Hub {
        let crds: Vec<Value> = crds(shape)
            .iter()
            .map(|crd| serde_json::to_value(crd).unwrap())
            .collect();
        let schemas = Arc::new(Schemas::from_crds(&crds));
        Hub {
            works: fields::Store::shared(Arc::clone(&schemas)),
            schemas,
            carriers: Arc::default(),
            carrier_requests: Arc::default(),
        }
    }

    /// A hub whose OCM CRDs are OCM's own (as its operator keeps them).
    pub fn ocm() -> Hub {
        Hub::of(CrdShape::Ocm)
    }

    /// A hub whose ManifestWorkReplicaSet CRD has the design's fields.
    pub fn design() -> Hub {
        Hub::of(CrdShape::Design)
    }

    /// `object` as this hub stores it: pruned against its CRD.
    pub fn stored(&self, mut object: Value) -> Value {
        self.prune(&mut object);
        object
    }

    fn prune(&self, body: &mut Value) {
        if let Some(items) = body.get_mut("items").and_then(Value::as_array_mut) {
            for item in items {
                self.schemas.prune(item);
            }
        } else {
            self.schemas.prune(body);
        }
    }

    /// The same hub, holding the ManifestWorkReplicaSetRollout of
    /// `default/hello` with `placements` (the design's additions per
    /// placement) and `status`.
    pub fn with_carrier(self, placements: Value, status: Value) -> Hub {
        let carrier = json!({
            "apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
            "metadata": {"name": MWRS, "namespace": NS, "uid": "carrier-uid", "generation": 1,
                         "resourceVersion": "20"},
            "spec": {"placements": placements},
            "status": status
        });
        let stored = self.stored(carrier);
        self.carriers.lock().unwrap().insert(MWRS.into(), stored);
        self
    }

    /// The same hub, holding the ManifestWorkReplicaSetRollout
    /// `default/name` with `spec` and `status`.
    pub fn with_carrier_named(self, name: &str, spec: Value, status: Value) -> Hub {
        let carrier = json!({
            "apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
            "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid"),
                         "generation": 1, "resourceVersion": "20"},
            "spec": spec,
            "status": status
        });
        let stored = self.stored(carrier);
        self.carriers.lock().unwrap().insert(name.into(), stored);
        self
    }

    /// The stored ManifestWorkReplicaSetRollout of `default/hello`.
    pub fn carrier(&self) -> Option<Value> {
        self.carrier_named(MWRS)
    }

    /// The stored ManifestWorkReplicaSetRollout `default/name`.
    pub fn carrier_named(&self, name: &str) -> Option<Value> {
        self.carriers.lock().unwrap().get(name).cloned()
    }

    /// Answers a request about a ManifestWorkReplicaSetRollout.
    fn answer_carrier(&self, record: &Recorded) -> (StatusCode, Value) {
        let collection = format!(
            "{}/namespaces/{NS}/manifestworkreplicasetrollouts",
            CARRIERS
        );
        let rest = record.path.strip_prefix(&collection).unwrap_or_else(|| {
            panic!(
                "a ManifestWorkReplicaSetRollout outside {NS}: {}",
                record.path
            )
        });
        let mut carriers = self.carriers.lock().unwrap();
        let not_found = (StatusCode::NOT_FOUND, api_status(404, "NotFound"));
        match (&record.method, rest.trim_start_matches('/').split_once('/')) {
            (&Method::POST, None) if rest.is_empty() => {
                let mut body = record.body.clone();
                if let Some(prefix) = body["metadata"]["generateName"].as_str() {
                    let generated = format!("{prefix}{}", carriers.len());
                    body["metadata"]["name"] = json!(generated);
                }
                let name = body["metadata"]["name"].as_str().unwrap().to_owned();
                if carriers.contains_key(&name) {
                    return (StatusCode::CONFLICT, api_status(409, "AlreadyExists"));
                }
                let mut stored = self.stored(body);
                stored["metadata"]["uid"] = json!("carrier-uid");
                stored["metadata"]["generation"] = json!(1);
                stored["metadata"]["resourceVersion"] = json!("1");
                carriers.insert(name, stored.clone());
                (StatusCode::CREATED, stored)
            }
            (&Method::GET, None) if rest.is_empty() => (
                StatusCode::OK,
                json!({"apiVersion": "rollout-hooks.io/v1alpha1",
                       "kind": "ManifestWorkReplicaSetRolloutList",
                       "metadata": {"resourceVersion": "1"},
                       "items": carriers.values().cloned().collect::<Vec<_>>()}),
            ),
            (&Method::GET, None) => match carriers.get(rest.trim_start_matches('/')) {
                Some(stored) => (StatusCode::OK, stored.clone()),
                None => not_found,
            },
            // A merge patch of the object (an operator's spec.control): the
            // generation moves with the spec, as for a kind with a status
            // subresource.
            (&Method::PATCH, None) if record.content_type == "application/merge-patch+json" => {
                match carriers.get_mut(rest.trim_start_matches('/')) {
                    Some(stored) => {
                        let before = stored["spec"].clone();
                        let mut patch = record.body.clone();
                        // The status subresource is written apart.
                        patch.as_object_mut().map(|p| p.remove("status"));
                        fields::merge(stored, &patch);
                        let pruned = self.stored(stored.clone());
                        *stored = pruned;
                        let bump = |v: &Value| v.as_i64().unwrap_or(0) + 1;
                        if stored["spec"] != before {
                            stored["metadata"]["generation"] =
                                json!(bump(&stored["metadata"]["generation"]));
                        }
                        let version: i64 = stored["metadata"]["resourceVersion"]
                            .as_str()
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        stored["metadata"]["resourceVersion"] = json!((version + 1).to_string());
                        (StatusCode::OK, stored.clone())
                    }
                    None => not_found,
                }
            }
            (&Method::PATCH, Some((name, "status"))) => match carriers.get_mut(name) {
                Some(stored) => {
                    // One field manager writes the status: an apply sets it whole.
                    stored["status"] = record.body["status"].clone();
                    let pruned = self.stored(stored.clone());
                    *stored = pruned;
                    let version: u64 = stored["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    stored["metadata"]["resourceVersion"] = json!((version + 1).to_string());
                    (StatusCode::OK, stored.clone())
                }
                None => not_found,
            },
            _ => panic!(
                "unexpected ManifestWorkReplicaSetRollout request: {} {}",
                record.method, record.path
            ),
        }
    }
}

/// The group and version of the ManifestWorkReplicaSetRollouts.
pub const CARRIERS: &str = "/apis/rollout-hooks.io/v1alpha1";

/// A Kubernetes `Status` answer.
pub fn api_status(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
           "code": code, "reason": reason, "message": reason})
}

/// A client whose API server ([`Hub::ocm`]) answers `expected` in order.
/// The handle returns every request once the client is dropped; a request
/// beyond the script, or of another method or path, fails the test.
pub fn api_server(expected: Vec<Expect>) -> (kube::Client, JoinHandle<Vec<Recorded>>) {
    api_server_on(Hub::ocm(), expected)
}

/// [`api_server`] on `hub`: every answer pruned against its CRDs, its
/// ManifestWorkReplicaSetRollouts answered from its store, outside the
/// script.
pub fn api_server_on(hub: Hub, expected: Vec<Expect>) -> (kube::Client, JoinHandle<Vec<Recorded>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let task = tokio::spawn(async move {
        let mut recorded: Vec<Recorded> = Vec::new();
        let total = expected.len();
        let mut expected = expected.into_iter().enumerate();
        while let Some((request, send)) = handle.next_request().await {
            let record = read(request).await;
            let (status, body) = if record.path.starts_with(CARRIERS) {
                let answer = hub.answer_carrier(&record);
                hub.carrier_requests.lock().unwrap().push(record);
                answer
            } else {
                let Some((i, expect)) = expected.next() else {
                    panic!(
                        "unexpected request: {} {}?{} {}",
                        record.method, record.path, record.query, record.body
                    );
                };
                assert_eq!(
                    (&record.method, record.path.as_str()),
                    (&expect.method, expect.path.as_str()),
                    "request {} of {total} (earlier: {:#?})",
                    i + 1,
                    recorded
                );
                let (status, mut body) = (expect.answer)(&record);
                hub.prune(&mut body);
                recorded.push(record);
                (status, body)
            };
            send.send_response(
                Response::builder()
                    .status(status)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap(),
            );
        }
        if let Some((i, expect)) = expected.next() {
            panic!(
                "request {} of {total} never came: {} {}; got {recorded:#?}",
                i + 1,
                expect.method,
                expect.path
            );
        }
        recorded
    });
    (client, task)
}

async fn read(request: Request<Body>) -> Recorded {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let query = request.uri().query().unwrap_or_default().to_owned();
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)))
    };
    Recorded {
        method,
        path,
        query,
        content_type,
        body,
    }
}

// ---------------------------------------------------------------------------
// Objects and paths.

pub const NS: &str = "default";
pub const MWRS: &str = "hello";
pub const PLACEMENT: &str = "canary-placement";

pub fn mwrs_path() -> String {
    format!(
        "/apis/work.open-cluster-management.io/v1alpha1/namespaces/{NS}/manifestworkreplicasets/{MWRS}"
    )
}
pub fn works_path() -> String {
    "/apis/work.open-cluster-management.io/v1/manifestworks".into()
}
pub fn work_path(cluster: &str, name: &str) -> String {
    format!("/apis/work.open-cluster-management.io/v1/namespaces/{cluster}/manifestworks/{name}")
}
pub fn revisions_path() -> String {
    format!("/apis/apps/v1/namespaces/{NS}/controllerrevisions")
}
pub fn placement_path() -> String {
    format!(
        "/apis/cluster.open-cluster-management.io/v1beta1/namespaces/{NS}/placements/{PLACEMENT}"
    )
}
pub fn decisions_path() -> String {
    format!("/apis/cluster.open-cluster-management.io/v1beta1/namespaces/{NS}/placementdecisions")
}

/// A template deploying ConfigMap `cm` with `data.version = version`.
pub fn template(version: &str) -> Value {
    json!({"workload": {"manifests": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"},
         "data": {"version": version}}
    ]}})
}

/// The ManifestWorkReplicaSet `default/hello` with the cleanup finalizer,
/// as a hub with OCM's CRDs stores it (the design's fields pruned).
pub fn mwrs(template: Value, strategy: Value, status: Value) -> Value {
    Hub::ocm().stored(design_mwrs(template, strategy, status))
}

/// The ManifestWorkReplicaSet `default/hello` with the cleanup finalizer,
/// as written (the design's fields kept).
pub fn design_mwrs(template: Value, strategy: Value, status: Value) -> Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
        "metadata": {"name": MWRS, "namespace": NS, "uid": "mwrs-uid", "generation": 1,
                     "resourceVersion": "10",
                     "finalizers": ["work.open-cluster-management.io/manifest-work-cleanup"]},
        "spec": {"manifestWorkTemplate": template,
                 "placementRefs": [{"name": PLACEMENT, "rolloutStrategy": strategy}]},
        "status": status
    })
}

pub fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": format!("{kind}List"),
           "metadata": {"resourceVersion": "1"}, "items": items})
}

pub fn placement() -> Value {
    json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
           "metadata": {"name": PLACEMENT, "namespace": NS}, "spec": {},
           "status": {"numberOfSelectedClusters": 0}})
}

/// The placement's decisions: one group (index 0) of `clusters`.
pub fn decisions(clusters: &[&str]) -> Value {
    let decisions: Vec<Value> = clusters
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    list(
        "PlacementDecision",
        "cluster.open-cluster-management.io/v1beta1",
        vec![json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
            "metadata": {"name": format!("{PLACEMENT}-decision-1"), "namespace": NS,
                         "labels": {"cluster.open-cluster-management.io/placement": PLACEMENT,
                                    "cluster.open-cluster-management.io/decision-group-index": "0",
                                    "cluster.open-cluster-management.io/decision-group-name": ""}},
            "status": {"decisions": decisions}
        })],
    )
}

pub fn works(items: Vec<Value>) -> Value {
    list("ManifestWork", "work.open-cluster-management.io/v1", items)
}

pub fn revisions(items: Vec<Value>) -> Value {
    list("ControllerRevision", "apps/v1", items)
}

/// Conditions of a work whose agent observed `generation`: Applied,
/// Available, Progressing `progressing`.
pub fn conditions(generation: i64, progressing: &str, at: &str) -> Value {
    json!([
        {"type": "Applied", "status": "True", "observedGeneration": generation,
         "lastTransitionTime": at, "reason": "AppliedManifestComplete", "message": ""},
        {"type": "Available", "status": "True", "observedGeneration": generation,
         "lastTransitionTime": at, "reason": "ResourcesAvailable", "message": ""},
        {"type": "Progressing", "status": progressing, "observedGeneration": generation,
         "lastTransitionTime": at, "reason": "", "message": ""}
    ])
}

/// The condition `kind` of a status.
pub fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or_else(|| panic!("no {kind} condition in {status:#}"))
}

/// The whole HTTP/1.1 answer to `GET path` on `addr` (a probe server's).
pub async fn get(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    answer
}

/// `rollout-controller run` in this process against `client`, with a
/// gateway nobody serves, probes on a free port, and `leader_election`
/// and `register` as given; returns the probes' address once serving.
pub async fn start_controller(
    client: kube::Client,
    leader_election: Option<rollout_controller::leader::LeaseConfig>,
    register: Option<String>,
) -> SocketAddr {
    let options = rollout_controller::app::RunOptions {
        gateway: GatewayOptions {
            url: "http://127.0.0.1:9".into(),
            timeout: Duration::from_secs(1),
            tls: None,
        },
        reconcile: Tunables::default(),
        register_plugins_namespace: register,
        health_listen: Some("127.0.0.1:0".parse().unwrap()),
        leader_election,
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut tx = Some(tx);
        rollout_controller::app::run(client, options, std::future::pending(), move |running| {
            if let Some(tx) = tx.take() {
                let _ = tx.send(running.health.expect("serving"));
            }
        })
        .await
        .expect("runs");
    });
    rx.await.unwrap()
}

/// `template` as a ManifestWork spec.
pub fn spec(template: &Value) -> rollout_controller::api::ManifestWorkSpec {
    serde_json::from_value(template.clone()).unwrap()
}

/// The revision (template hash) of `template`.
pub fn hash_of(template: &Value) -> String {
    rollout_controller::revision::template_hash(&spec(template), 0)
}

/// `value` as the ManifestWorkReplicaSet a reconcile is given.
pub fn object(value: Value) -> Arc<rollout_controller::api::ManifestWorkReplicaSet> {
    Arc::new(serde_json::from_value(value).unwrap())
}
