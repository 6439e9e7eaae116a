//! `rollout-controller get` against an API server in the mock-service
//! pattern: a fake hub that stores objects as a real one does (pruned
//! against OCM's CRDs, the design's additions in the
//! ManifestWorkReplicaSetRollout), answers gets, lists with label and field
//! selectors, and watches (holding each watch open until the test changes
//! an object). A rollout mid-way, mid-validation and aborted; not found;
//! an unreachable API server and the kubectl plugin name through the real
//! binary.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Hub, api_status};
use http::{Request, Response, StatusCode};
use kube::client::Body;
use rollout_controller::view::hub::{self, GetError, Output, Target};
use rollout_controller::view::{build, render};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

const NS: &str = "default";
const NAME: &str = "hello";
const MWRS: &str =
    "/apis/work.open-cluster-management.io/v1alpha1/namespaces/default/manifestworkreplicasets";
const CARRIERS: &str =
    "/apis/rollout-hooks.io/v1alpha1/namespaces/default/manifestworkreplicasetrollouts";
const WORKS: &str = "/apis/work.open-cluster-management.io/v1/manifestworks";
const DECISIONS: &str =
    "/apis/cluster.open-cluster-management.io/v1beta1/namespaces/default/placementdecisions";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

// ---------------------------------------------------------------------------
// The fake hub.

type Responder = tower_test::mock::SendResponse<Response<Body>>;

/// Objects by collection path, in the order stored.
#[derive(Default)]
struct Store {
    objects: BTreeMap<&'static str, Vec<Value>>,
    version: u64,
    /// Watches held open, by collection.
    watches: HashMap<String, Vec<Responder>>,
    /// Whether every watch is refused, as by an API server going away.
    broken: bool,
    /// Collections the reader may not read (403).
    forbidden: Vec<&'static str>,
}

/// Whether `object` matches a `k=v,k2` label selector.
fn labels_match(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        let labels = &object["metadata"]["labels"];
        match term.split_once('=') {
            Some((k, v)) => labels[k] == v,
            None => labels.get(term).is_some(),
        }
    })
}

/// Whether `object` matches a `a.b=v,…` field selector.
fn fields_match(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        let Some((path, want)) = term.split_once('=') else {
            return false;
        };
        let got = path.split('.').fold(object, |v, step| &v[step]);
        got == want
    })
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == key).then(|| {
            v.replace("%3D", "=")
                .replace("%2C", ",")
                .replace("%2F", "/")
                .replace('+', " ")
        })
    })
}

fn respond(send: Responder, status: StatusCode, body: Vec<u8>) {
    send.send_response(
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap(),
    );
}

/// What the test does to the hub.
enum Command {
    /// Store `object` in place of the one of the same name and send it to
    /// the watches of `collection`.
    Change {
        collection: &'static str,
        object: Value,
    },
    /// Refuse every watch, those held open included, with a 503.
    Break,
}

struct FakeHub {
    client: kube::Client,
    changes: mpsc::UnboundedSender<Command>,
    /// Every request, as `METHOD path?query`.
    requests: Arc<Mutex<Vec<String>>>,
}

impl FakeHub {
    /// A hub holding `objects` (collection, object), stored as OCM's CRDs
    /// keep them.
    fn start(objects: Vec<(&'static str, Value)>) -> FakeHub {
        FakeHub::start_forbidding(objects, Vec::new())
    }

    /// [`FakeHub::start`], answering 403 to every request on `forbidden`.
    fn start_forbidding(
        objects: Vec<(&'static str, Value)>,
        forbidden: Vec<&'static str>,
    ) -> FakeHub {
        let hub = Hub::ocm();
        let mut store = Store {
            forbidden,
            ..Store::default()
        };
        for (collection, object) in objects {
            store
                .objects
                .entry(collection)
                .or_default()
                .push(hub.stored(object));
        }
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, NS);
        let (changes, mut incoming) = mpsc::unbounded_channel::<Command>();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    request = handle.next_request() => {
                        let Some((request, send)) = request else { return };
                        let line = format!("{} {}?{}", request.method(), request.uri().path(),
                                           request.uri().query().unwrap_or_default());
                        seen.lock().unwrap().push(line);
                        store.answer(&request, send);
                    }
                    Some(command) = incoming.recv() => match command {
                        Command::Change { collection, object } => store.change(&hub, collection, object),
                        Command::Break => store.break_watches(),
                    },
                }
            }
        });
        FakeHub {
            client,
            changes,
            requests,
        }
    }

    fn change(&self, collection: &'static str, object: Value) {
        self.changes
            .send(Command::Change { collection, object })
            .unwrap();
    }

    fn break_watches(&self) {
        self.changes.send(Command::Break).unwrap();
    }
}

impl Store {
    fn answer(&mut self, request: &Request<Body>, send: Responder) {
        let path = request.uri().path();
        let query = request.uri().query().unwrap_or_default();
        let collection = self
            .objects
            .keys()
            .chain([MWRS, CARRIERS, WORKS, DECISIONS, EVENTS].iter())
            .find(|c| path == **c || path.strip_prefix(**c).is_some_and(|r| r.starts_with('/')))
            .copied();
        let Some(collection) = collection else {
            return respond(
                send,
                StatusCode::NOT_FOUND,
                api_status(404, "NotFound").to_string().into(),
            );
        };
        if self.forbidden.contains(&collection) {
            let refused = api_status(403, "Forbidden").to_string();
            return respond(send, StatusCode::FORBIDDEN, refused.into());
        }
        let items = self.objects.get(collection).cloned().unwrap_or_default();
        if let Some(name) = path
            .strip_prefix(collection)
            .and_then(|r| r.strip_prefix('/'))
        {
            return match items.iter().find(|o| o["metadata"]["name"] == name) {
                Some(object) => respond(send, StatusCode::OK, object.to_string().into()),
                None => respond(
                    send,
                    StatusCode::NOT_FOUND,
                    api_status(404, "NotFound").to_string().into(),
                ),
            };
        }
        if query_param(query, "watch").as_deref() == Some("true") {
            if self.broken {
                let refused = api_status(503, "ServiceUnavailable").to_string();
                return respond(send, StatusCode::SERVICE_UNAVAILABLE, refused.into());
            }
            self.watches
                .entry(collection.to_owned())
                .or_default()
                .push(send);
            return;
        }
        let labels = query_param(query, "labelSelector").unwrap_or_default();
        let fields = query_param(query, "fieldSelector").unwrap_or_default();
        let items: Vec<Value> = items
            .into_iter()
            .filter(|o| labels_match(o, &labels) && fields_match(o, &fields))
            .collect();
        let list = json!({"apiVersion": "v1", "kind": "List",
                          "metadata": {"resourceVersion": self.version.to_string()}, "items": items});
        respond(send, StatusCode::OK, list.to_string().into());
    }

    fn break_watches(&mut self) {
        self.broken = true;
        let refused = api_status(503, "ServiceUnavailable").to_string();
        for send in self.watches.drain().flat_map(|(_, held)| held) {
            respond(
                send,
                StatusCode::SERVICE_UNAVAILABLE,
                refused.clone().into(),
            );
        }
    }

    fn change(&mut self, hub: &Hub, collection: &'static str, object: Value) {
        self.version += 1;
        let mut object = hub.stored(object);
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
        let list = self.objects.entry(collection).or_default();
        list.retain(|o| o["metadata"]["name"] != object["metadata"]["name"]);
        list.push(object.clone());
        let event = json!({"type": "MODIFIED", "object": object});
        // Each open watch gets the event; the watcher then watches again.
        for send in self.watches.remove(collection).unwrap_or_default() {
            respond(send, StatusCode::OK, format!("{event}\n").into_bytes());
        }
    }
}

// ---------------------------------------------------------------------------
// Objects: ManifestWorkReplicaSet default/hello over placement canary, four
// clusters, revision r2 replacing r1, plugin smoke-test (in the carrier).

const CLUSTERS: [&str; 4] = ["cluster-001", "cluster-002", "cluster-003", "cluster-004"];

fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2025-03-01T11:50:00Z"})
}

fn mwrs(conditions: Vec<Value>) -> Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
        "metadata": {"name": NAME, "namespace": NS, "uid": "mwrs-uid", "resourceVersion": "1"},
        "spec": {"manifestWorkTemplate": {}, "placementRefs": [{"name": "canary", "rolloutStrategy": {
            "type": "Progressive", "progressive": {"maxConcurrency": 1, "progressDeadline": "10m"},
            // Pruned by OCM's CRD: the carrier holds it.
            "plugin": "pruned-away"}}]},
        "status": {"conditions": conditions, "summary": {"total": 4},
                   "placementSummary": [{"name": "canary", "availableDecisionGroups": "1 (4 / 4 clusters applied)",
                                         "summary": {"total": 4}, "clusters": [{"clusterName": "pruned"}]}]}
    })
}

fn carrier(status: Value) -> Value {
    json!({
        "apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
        "metadata": {"name": NAME, "namespace": NS, "uid": "carrier-uid", "resourceVersion": "1"},
        "spec": {"placements": [{"name": "canary", "plugin": "smoke-test", "abortOnFailure": true}]},
        "status": status
    })
}

fn work(cluster: &str, revision: &str, progressing: &str) -> Value {
    let condition = |kind: &str, status: &str| {
        json!({"type": kind, "status": status, "observedGeneration": 1,
               "lastTransitionTime": "2025-03-01T11:55:00Z", "reason": "", "message": ""})
    };
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "hello-1a2b3c4d", "namespace": cluster, "generation": 1, "labels": {
            "work.open-cluster-management.io/controller-hash": revision,
            "work.open-cluster-management.io/placementname": "canary",
            "work.open-cluster-management.io/manifestworkreplicaset": "default.hello"}},
        "spec": {},
        "status": {"conditions": [condition("Applied", "True"), condition("Progressing", progressing)]}
    })
}

/// A work of another ManifestWorkReplicaSet, which the view must not show.
fn stranger() -> Value {
    let mut w = work("cluster-009", "zz", "True");
    w["metadata"]["labels"]["work.open-cluster-management.io/manifestworkreplicaset"] =
        json!("default.other");
    w
}

fn decision() -> Value {
    let decisions: Vec<Value> = CLUSTERS
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
        "metadata": {"name": "canary-decision-1", "namespace": NS, "labels": {
            "cluster.open-cluster-management.io/placement": "canary",
            "cluster.open-cluster-management.io/decision-group-index": "0",
            "cluster.open-cluster-management.io/decision-group-name": ""}},
        "status": {"decisions": decisions}
    })
}

fn cluster(name: &str, status: &str, message: Option<&str>) -> Value {
    let mut c = json!({"clusterName": name, "rolloutStatus": status, "groupIndex": 0,
                       "lastTransitionTime": "2025-03-01T11:59:00Z", "revision": "r2"});
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

fn rolling() -> Vec<Value> {
    vec![
        condition(
            "PluginLoaded",
            "True",
            "Available",
            "Plugin smoke-test is available.",
        ),
        condition(
            "Progressing",
            "True",
            "NewRevisionCreated",
            "Rolling out revision r2: 1 of 4 clusters updated.",
        ),
    ]
}

/// Mid-rollout: cluster-001 done, cluster-002 progressing, the rest to do.
fn mid_rollout() -> Vec<(&'static str, Value)> {
    let details = json!({"currentRevision": "r1", "updateRevision": "r2", "placements": [{"name": "canary",
        "clusterCounts": {"toApply": 2, "progressing": 1, "succeeded": 1},
        "clusters": [cluster("cluster-002", "Progressing", None),
                     cluster("cluster-003", "ToApply", None), cluster("cluster-004", "ToApply", None)]}]});
    vec![
        (MWRS, mwrs(rolling())),
        (CARRIERS, carrier(details)),
        (WORKS, work("cluster-001", "r2", "False")),
        (WORKS, work("cluster-002", "r2", "True")),
        (WORKS, work("cluster-003", "r1", "False")),
        (WORKS, work("cluster-004", "r1", "False")),
        (WORKS, stranger()),
        (DECISIONS, decision()),
    ]
}

/// Mid-validation: cluster-002 done progressing, the plugin says INPROGRESS.
fn mid_validation() -> Vec<(&'static str, Value)> {
    let details = json!({"currentRevision": "r1", "updateRevision": "r2", "placements": [{"name": "canary",
        "clusterCounts": {"toApply": 2, "validating": 1, "succeeded": 1},
        "clusters": [cluster("cluster-002", "Validating", Some("smoke test 3/5")),
                     cluster("cluster-003", "ToApply", None), cluster("cluster-004", "ToApply", None)]}]});
    let mut objects = mid_rollout();
    objects[1] = (CARRIERS, carrier(details));
    objects[3] = (WORKS, work("cluster-002", "r2", "False"));
    objects
}

const ABORT_MESSAGE: &str = "Rollout of revision r2 aborted: placement canary: cluster-002 Failed \
    (error rate 7% > 1%). Rolling back to revision r1: 2 of 4 clusters restored.";

/// Aborted: cluster-002 failed validation; cluster-001 and -002 still on r2.
fn aborted() -> Vec<(&'static str, Value)> {
    let details = json!({"currentRevision": "r1", "updateRevision": "r2", "abortedTime": "2025-03-01T11:59:00Z",
        "placements": [{"name": "canary", "clusterCounts": {"toApply": 2, "succeeded": 2}, "clusters": [
            cluster("cluster-001", "ToApply", None), cluster("cluster-002", "ToApply", None)]}]});
    let conditions = vec![
        condition(
            "PlacementRolledOut",
            "False",
            "RolloutDegraded",
            ABORT_MESSAGE,
        ),
        condition("Progressing", "False", "RolloutAborted", ABORT_MESSAGE),
    ];
    let event = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "hello.17f", "namespace": NS},
        "eventTime": "2025-03-01T11:59:00.000000Z", "type": "Warning", "reason": "AbortStarted",
        "action": "Abort", "reportingController": "rollout-controller", "reportingInstance": "rollout-controller-0",
        "regarding": {"kind": "ManifestWorkReplicaSet", "name": NAME, "namespace": NS},
        "note": "Rollout of revision r2 aborted: placement canary: cluster-002 Failed (error rate 7% > 1%). Rolling back to revision r1."
    });
    let mut objects = mid_rollout();
    objects[0] = (MWRS, mwrs(conditions));
    objects[1] = (CARRIERS, carrier(details));
    objects.push((EVENTS, event));
    objects
}

/// The time of the views drawn from the fixtures.
fn now() -> jiff::Timestamp {
    "2025-03-01T12:00:00Z".parse().unwrap()
}

fn target() -> Target {
    Target {
        namespace: NS.into(),
        name: NAME.into(),
        server: "https://hub.example:6443".into(),
        request_timeout: hub::DEFAULT_REQUEST_TIMEOUT,
    }
}

async fn text_of(objects: Vec<(&'static str, Value)>) -> (String, Vec<String>) {
    let fake = FakeHub::start(objects);
    let snapshot = hub::first_snapshot(&fake.client, &target())
        .await
        .expect("the view is read");
    let text = render(&build(&snapshot, now()));
    // Shown with --nocapture: the text the docs quote.
    println!("{text}");
    let requests = fake.requests.lock().unwrap().clone();
    (text, requests)
}

fn assert_has(text: &str, wants: &[&str]) {
    for want in wants {
        assert!(text.contains(want), "{want:?} missing from\n{text}");
    }
}

// ---------------------------------------------------------------------------
// Tests.

#[tokio::test]
async fn mid_rollout_shows_each_cluster_and_what_the_controller_waits_for() {
    let (text, requests) = text_of(mid_rollout()).await;
    assert_has(
        &text,
        &[
            "Status:     ◌ Progressing",
            "Message:    Rolling out revision r2: 1 of 4 clusters updated.",
            "Revisions:  update r2 · current r1",
            "plugin    smoke-test",
            "waiting for cluster-002 to finish progressing (deadline in 9m0s)",
            "2 clusters to apply, as the strategy allows: cluster-003 … cluster-004",
            "cluster-001  ✔ Succeeded",
            "cluster-002  ◌ Progressing  r2 (update)",
            "cluster-003  · ToApply      r1 (current)",
        ],
    );
    assert!(!text.contains("cluster-009"), "{text}");
    // The works by the owner label, across namespaces.
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with(&format!("GET {WORKS}?"))
                && r.contains("manifestworkreplicaset%3Ddefault.hello")),
        "{requests:#?}"
    );
}

#[tokio::test]
async fn mid_validation_shows_the_plugins_message() {
    let (text, _) = text_of(mid_validation()).await;
    assert_has(
        &text,
        &[
            "validating cluster-002: smoke-test says INPROGRESS: smoke test 3/5",
            "cluster-002  ◷ Validating",
            "smoke test 3/5",
        ],
    );
}

#[tokio::test]
async fn an_abort_shows_the_rollback_and_its_event() {
    let (text, _) = text_of(aborted()).await;
    assert_has(
        &text,
        &[
            "Status:     ↺ RollingBack",
            "aborted at 11:59:00Z (1m0s ago): rolling back 2 clusters to revision r1",
            "rolling back 2 clusters to revision r1",
            "2 clusters to roll back, as the strategy allows: cluster-001 … cluster-002",
            "Aborted:    2025-03-01T11:59:00Z",
            "Warning  AbortStarted",
            "cluster-002 Failed (error rate 7% > 1%)",
        ],
    );
}

#[tokio::test]
async fn json_output_is_the_view_model() {
    let fake = FakeHub::start(aborted());
    let snapshot = hub::first_snapshot(&fake.client, &target()).await.unwrap();
    let mut out = Vec::new();
    hub::write_frame(
        &mut out,
        &build(&snapshot, jiff::Timestamp::now()),
        Output::Json,
        true,
    )
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let view: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(view["phase"], "RollingBack");
    assert_eq!(view["desiredRevision"], "r1");
    assert_eq!(view["placements"][0]["plugin"], "smoke-test");
}

#[tokio::test]
async fn a_missing_mwrs_is_named_with_its_namespace() {
    let fake = FakeHub::start(vec![(DECISIONS, decision())]);
    let err = hub::first_snapshot(&fake.client, &target())
        .await
        .unwrap_err();
    assert!(matches!(err, GetError::NotFound { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("ManifestWorkReplicaSet \"hello\" not found in namespace \"default\""),
        "{text}"
    );
}

/// A writer whose bytes the test reads while the view is drawn.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Shared {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    async fn wait_for(&self, want: &str) {
        for _ in 0..100 {
            if self.text().contains(want) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("{want:?} never drawn:\n{}", self.text());
    }
}

#[tokio::test]
async fn watch_redraws_when_the_rollout_changes_and_stops_on_request() {
    let fake = FakeHub::start(mid_validation());
    let out = Shared::default();
    let (stop, stopped) = oneshot::channel::<()>();
    let client = fake.client.clone();
    let mut writer = out.clone();
    let watching = tokio::spawn(async move {
        hub::watch(&client, &target(), Output::Appended, &mut writer, async {
            let _ = stopped.await;
        })
        .await
    });
    out.wait_for("smoke-test says INPROGRESS: smoke test 3/5")
        .await;
    // Let every watch open before the change.
    for _ in 0..100 {
        let requests = fake.requests.lock().unwrap().clone();
        if requests.iter().filter(|r| r.contains("watch=true")).count() >= 5 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The plugin said FAILED; the controller aborted.
    let aborted = aborted();
    fake.change(CARRIERS, aborted[1].1.clone());
    fake.change(MWRS, aborted[0].1.clone());
    out.wait_for("rolling back 2 clusters to revision r1").await;
    let text = out.text();
    assert!(text.contains("────────"), "frames are separated:\n{text}");
    assert!(!text.contains('\x1b'), "no terminal codes into a pipe");
    // The API server stops serving watches: said at once, nothing changed.
    fake.break_watches();
    out.wait_for("! the watch is interrupted (").await;
    stop.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), watching)
        .await
        .expect("the watch stops when asked")
        .unwrap();
    assert!(result.is_ok(), "{result:?}");
}

// ---------------------------------------------------------------------------
// The real binary.

fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster: {{server: \"{server}\"}}\n\
             contexts:\n- name: hub\n  context: {{cluster: hub, user: admin, namespace: team-a}}\n\
             current-context: hub\nusers:\n- name: admin\n  user: {{token: t}}\n"
        ),
    )
    .unwrap();
    path
}

#[tokio::test]
async fn an_unreachable_api_server_fails_at_once_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::closed_port().await;
    let config = kubeconfig(dir.path(), &format!("http://{port}"));
    let started = std::time::Instant::now();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args(["get", NAME, "--watch", "--kubeconfig"])
        .arg(&config)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot reach the Kubernetes API server at http://{port}/"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("Connection refused"), "{stderr}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_named_kubectl_mwrs_is_a_kubectl_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("kubectl-mwrs");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rollout-controller"), &link).unwrap();
    let help = std::process::Command::new(&link)
        .args(["get", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Usage: kubectl mwrs get [OPTIONS] <NAME>"),
        "{text}"
    );
    // As kubectl runs it: the arguments after `kubectl mwrs`, and the
    // namespace of the kubeconfig's context by default.
    let port = common::closed_port().await;
    let config = kubeconfig(dir.path(), &format!("http://{port}"));
    let run = std::process::Command::new(&link)
        .args(["get", NAME])
        .env("KUBECONFIG", &config)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains("cannot reach the Kubernetes API server"),
        "{stderr}"
    );
    let plain = std::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args(["get", "--help"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&plain.stdout).contains("Usage: rollout-controller get"),
        "the plain binary keeps its name"
    );
}

/// The fake hub's objects served over HTTP on 127.0.0.1:0, for the real
/// binary: gets and lists as [`Store::answer`] does; a watch is held open
/// and never answered.
async fn http_hub(objects: Vec<(&'static str, Value)>) -> std::net::SocketAddr {
    let hub = Hub::ocm();
    let mut by_collection: BTreeMap<&'static str, Vec<Value>> = BTreeMap::new();
    for (collection, object) in objects {
        by_collection
            .entry(collection)
            .or_default()
            .push(hub.stored(object));
    }
    let objects = Arc::new(by_collection);
    let app = axum::Router::new().fallback(move |uri: http::Uri| {
        let objects = objects.clone();
        async move {
            let (path, query) = (uri.path(), uri.query().unwrap_or_default());
            if query_param(query, "watch").as_deref() == Some("true") {
                std::future::pending::<()>().await;
            }
            let not_found = (
                StatusCode::NOT_FOUND,
                api_status(404, "NotFound").to_string(),
            );
            let Some((collection, items)) = objects.iter().find(|(c, _)| {
                path == **c || path.strip_prefix(**c).is_some_and(|r| r.starts_with('/'))
            }) else {
                return not_found;
            };
            if let Some(name) = path
                .strip_prefix(collection)
                .and_then(|r| r.strip_prefix('/'))
            {
                return match items.iter().find(|o| o["metadata"]["name"] == name) {
                    Some(object) => (StatusCode::OK, object.to_string()),
                    None => not_found,
                };
            }
            let labels = query_param(query, "labelSelector").unwrap_or_default();
            let fields = query_param(query, "fieldSelector").unwrap_or_default();
            let items: Vec<&Value> = items
                .iter()
                .filter(|o| labels_match(o, &labels) && fields_match(o, &fields))
                .collect();
            let list = json!({"apiVersion": "v1", "kind": "List",
                              "metadata": {"resourceVersion": "1"}, "items": items});
            (StatusCode::OK, list.to_string())
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

#[cfg(unix)]
#[tokio::test]
async fn get_watch_draws_then_exits_0_on_sigterm() {
    use tokio::io::AsyncBufReadExt;

    let mut objects = mid_validation();
    // Lists see every collection, events included.
    objects.push((EVENTS, aborted().pop().unwrap().1));
    let addr = http_hub(objects).await;
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &format!("http://{addr}"));
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args(["get", NAME, "-n", NS, "--watch", "--kubeconfig"])
        .arg(&config)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let drawn = tokio::time::timeout(Duration::from_secs(10), async {
        let mut text = String::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            text.push_str(&line);
            text.push('\n');
            if line.contains("smoke-test says INPROGRESS: smoke test 3/5") {
                return text;
            }
        }
        panic!("stdout closed before the view:\n{text}");
    })
    .await
    .expect("the first frame is drawn");
    assert!(drawn.contains("Name:       hello"), "{drawn}");
    // Let the watches start, then stop it as a kubelet or Ctrl-C would.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .expect("it exits promptly on SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn an_api_server_that_never_answers_fails_after_the_request_timeout() {
    // Accepts connections, answers nothing.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &format!("http://{addr}"));
    let started = std::time::Instant::now();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_rollout-controller"))
        .args(["get", NAME, "--request-timeout", "1s", "--kubeconfig"])
        .arg(&config)
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "the Kubernetes API server at http://{addr}/ did not answer within 1s"
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn events_the_reader_may_not_list_are_left_out_and_works_are_not() {
    let fake = FakeHub::start_forbidding(aborted(), vec![EVENTS]);
    let snapshot = hub::first_snapshot(&fake.client, &target()).await.unwrap();
    let text = render(&build(&snapshot, now()));
    assert!(
        text.contains("rolling back 2 clusters to revision r1"),
        "{text}"
    );
    assert!(!text.contains("Events:"), "{text}");
    let fake = FakeHub::start_forbidding(aborted(), vec![WORKS]);
    let err = hub::first_snapshot(&fake.client, &target())
        .await
        .unwrap_err();
    assert!(matches!(err, GetError::Api { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("reading the ManifestWorks: "),
        "{err}"
    );
}

/// Text others wrote into the objects the view reads, as a plugin, another
/// controller or a work agent could: escape sequences (clear screen, cursor
/// home, an OSC 52 clipboard write), BEL, a C1 CSI, a bidirectional
/// override, and a CR LF forging a line of the view's own.
const HOSTILE: &str = "\u{1b}[2J\u{1b}[H\u{1b}]52;c;Y3VybCBldmlsIHwgc2g=\u{7}\u{7}\u{9b}31m\u{202e}\r\nStatus:     ✔ Healthy";

/// Whether `text` holds a character a terminal acts on, or one that
/// reorders what it shows; a line's own LF aside.
fn acts_on_a_terminal(text: &str) -> bool {
    text.chars().any(|c| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    })
}

#[tokio::test]
async fn text_others_wrote_is_shown_escaped_on_its_own_line() {
    let mut objects = aborted();
    let mut status = objects[1].1["status"].clone();
    status["placements"][0]["clusters"][1]["message"] = json!(HOSTILE);
    objects[1] = (CARRIERS, carrier(status));
    let mut conditions = vec![condition("Progressing", "False", "RolloutAborted", HOSTILE)];
    conditions.push(condition("PluginLoaded", "True", HOSTILE, "ok"));
    objects[0] = (MWRS, mwrs(conditions));
    let mut agent = work("cluster-002", "r2", "False");
    agent["status"]["conditions"][1]["message"] = json!(HOSTILE);
    objects[3] = (WORKS, agent);
    let event = objects.last_mut().unwrap();
    event.1["note"] = json!(HOSTILE);
    let (text, _) = text_of(objects).await;
    assert!(!acts_on_a_terminal(&text), "{text:?}");
    assert_has(
        &text,
        &[
            "\\x1b[2J\\x1b[H\\x1b]52;c;Y3VybCBldmlsIHwgc2g=\\x07\\x07\\u{9b}31m\\u{202e}\\r\\nStatus:     ✔ Healthy",
            "Warning  AbortStarted",
        ],
    );
    // The only Status line is the view's own.
    let statuses: Vec<&str> = text.lines().filter(|l| l.starts_with("Status:")).collect();
    assert_eq!(statuses, ["Status:     ↺ RollingBack"], "{text}");
}
