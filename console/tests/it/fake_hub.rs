//! A fake hub in the mock-service pattern, for the readers of the hub
//! (`get`, `get --watch`, `dashboard`): it stores objects as a real one
//! does (pruned against OCM's CRDs, the design's additions in the
//! ManifestWorkReplicaSetRollout), answers gets, lists with label and field
//! selectors, in one namespace or across all, and watches (holding each
//! watch open until the test changes an object); [`http_hub`] serves the
//! same objects over HTTP on 127.0.0.1 for the real binary. Then the
//! objects of one rollout, ManifestWorkReplicaSet default/hello, mid-way,
//! mid-validation and aborted.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::common::{Hub, api_status};

pub const NS: &str = "default";
pub const NAME: &str = "hello";
pub const MWRS: &str =
    "/apis/work.open-cluster-management.io/v1alpha1/namespaces/default/manifestworkreplicasets";
pub const CARRIERS: &str =
    "/apis/rollout-hooks.io/v1alpha1/namespaces/default/manifestworkreplicasetrollouts";
pub const WORKS: &str = "/apis/work.open-cluster-management.io/v1/manifestworks";
pub const DECISIONS: &str =
    "/apis/cluster.open-cluster-management.io/v1beta1/namespaces/default/placementdecisions";
pub const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

// ---------------------------------------------------------------------------
// The fake hub.

type Responder = tower_test::mock::SendResponse<Response<Body>>;

/// A request's path taken apart: the collection across namespaces
/// (`/apis/GROUP/VERSION/RESOURCE`), the namespace if it names one, and
/// the object's name if it names one.
#[derive(Debug, PartialEq)]
struct Path {
    kind: String,
    namespace: Option<String>,
    name: Option<String>,
}

fn parse(path: &str) -> Option<Path> {
    let steps: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group_version, rest) = match steps.as_slice() {
        ["apis", group, version, rest @ ..] => (format!("/apis/{group}/{version}"), rest),
        ["api", version, rest @ ..] => (format!("/api/{version}"), rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", namespace, rest @ ..] if !rest.is_empty() => {
            (Some((*namespace).to_owned()), rest)
        }
        _ => (None, rest),
    };
    let (resource, name) = match rest {
        [resource] => (resource, None),
        [resource, name] => (resource, Some((*name).to_owned())),
        _ => return None,
    };
    Some(Path {
        kind: format!("{group_version}/{resource}"),
        namespace,
        name,
    })
}

/// The collection across namespaces of `collection` (one of the paths
/// above).
fn kind_of(collection: &str) -> String {
    parse(collection).map(|p| p.kind).unwrap_or_default()
}

fn namespace_of(object: &Value) -> Option<&str> {
    object["metadata"]["namespace"].as_str()
}

/// Objects by collection across namespaces, in the order stored.
#[derive(Default)]
struct Store {
    objects: BTreeMap<String, Vec<Value>>,
    version: u64,
    /// Watches held open, by collection across namespaces, with the
    /// namespace each watches (`None`: all).
    watches: HashMap<String, Vec<(Option<String>, Responder)>>,
    /// Whether every watch is refused, as by an API server going away.
    broken: bool,
    /// Collections the reader may not read (403), across namespaces.
    forbidden: Vec<String>,
}

/// Whether `object` matches a `k=v,k2` label selector.
pub fn labels_match(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        let labels = &object["metadata"]["labels"];
        match term.split_once('=') {
            Some((k, v)) => labels[k] == v,
            None => labels.get(term).is_some(),
        }
    })
}

/// Whether `object` matches a `a.b=v,…` field selector.
pub fn fields_match(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|term| {
        let Some((path, want)) = term.split_once('=') else {
            return false;
        };
        let got = path.split('.').fold(object, |v, step| &v[step]);
        got == want
    })
}

pub fn query_param(query: &str, key: &str) -> Option<String> {
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
    /// Store `object` in place of the one of the same namespace and name
    /// and send it to the watches of `collection`.
    Change {
        collection: &'static str,
        object: Value,
    },
    /// Refuse every watch, those held open included, with a 503.
    Break,
}

pub struct FakeHub {
    pub client: kube::Client,
    changes: mpsc::UnboundedSender<Command>,
    /// Every request, as `METHOD path?query`.
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl FakeHub {
    /// A hub holding `objects` (collection, object), stored as OCM's CRDs
    /// keep them.
    pub fn start(objects: Vec<(&'static str, Value)>) -> FakeHub {
        FakeHub::start_forbidding(objects, Vec::new())
    }

    /// [`FakeHub::start`], answering 403 to every request on `forbidden`.
    pub fn start_forbidding(
        objects: Vec<(&'static str, Value)>,
        forbidden: Vec<&'static str>,
    ) -> FakeHub {
        let hub = Hub::ocm();
        let mut store = Store {
            forbidden: forbidden.iter().map(|c| kind_of(c)).collect(),
            ..Store::default()
        };
        for (collection, object) in objects {
            store
                .objects
                .entry(kind_of(collection))
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

    pub fn change(&self, collection: &'static str, object: Value) {
        self.changes
            .send(Command::Change { collection, object })
            .unwrap();
    }

    pub fn break_watches(&self) {
        self.changes.send(Command::Break).unwrap();
    }

    /// How many watches were asked for so far.
    pub fn watches(&self) -> usize {
        let requests = self.requests.lock().unwrap();
        requests.iter().filter(|r| r.contains("watch=true")).count()
    }

    /// Waits until at least `count` watches were asked for.
    pub async fn wait_for_watches(&self, count: usize) {
        for _ in 0..200 {
            if self.watches() >= count {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!(
            "fewer than {count} watches: {:#?}",
            self.requests.lock().unwrap()
        );
    }
}

fn not_found(send: Responder) {
    let body = api_status(404, "NotFound").to_string();
    respond(send, StatusCode::NOT_FOUND, body.into());
}

impl Store {
    fn answer(&mut self, request: &Request<Body>, send: Responder) {
        let query = request.uri().query().unwrap_or_default();
        let Some(path) = parse(request.uri().path()) else {
            return not_found(send);
        };
        let known = [MWRS, CARRIERS, WORKS, DECISIONS, EVENTS].map(kind_of);
        if !self.objects.contains_key(&path.kind) && !known.contains(&path.kind) {
            return not_found(send);
        }
        if self.forbidden.contains(&path.kind) {
            let refused = api_status(403, "Forbidden").to_string();
            return respond(send, StatusCode::FORBIDDEN, refused.into());
        }
        let in_scope =
            |o: &&Value| path.namespace.is_none() || namespace_of(o) == path.namespace.as_deref();
        let items: Vec<Value> = (self.objects.get(&path.kind))
            .into_iter()
            .flatten()
            .filter(in_scope)
            .cloned()
            .collect();
        if let Some(name) = &path.name {
            return match items
                .iter()
                .find(|o| o["metadata"]["name"] == name.as_str())
            {
                Some(object) => respond(send, StatusCode::OK, object.to_string().into()),
                None => not_found(send),
            };
        }
        if query_param(query, "watch").as_deref() == Some("true") {
            if self.broken {
                let refused = api_status(503, "ServiceUnavailable").to_string();
                return respond(send, StatusCode::SERVICE_UNAVAILABLE, refused.into());
            }
            let held = self.watches.entry(path.kind).or_default();
            held.push((path.namespace, send));
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
        for (_, send) in self.watches.drain().flat_map(|(_, held)| held) {
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
        let kind = kind_of(collection);
        let list = self.objects.entry(kind.clone()).or_default();
        let same = |o: &Value| {
            o["metadata"]["name"] == object["metadata"]["name"]
                && namespace_of(o) == namespace_of(&object)
        };
        list.retain(|o| !same(o));
        list.push(object.clone());
        let event = json!({"type": "MODIFIED", "object": object});
        // Each open watch of the object's namespace gets the event; the
        // watcher then watches again.
        let held = self.watches.remove(&kind).unwrap_or_default();
        let (sent, kept): (Vec<_>, Vec<_>) = held.into_iter().partition(|(namespace, _)| {
            namespace.is_none() || namespace.as_deref() == namespace_of(&object)
        });
        for (_, send) in sent {
            respond(send, StatusCode::OK, format!("{event}\n").into_bytes());
        }
        self.watches.insert(kind, kept);
    }
}

/// The fake hub's objects served over HTTP on 127.0.0.1:0, for the real
/// binary: gets and lists as [`FakeHub`] answers them; a watch is held
/// open and never answered.
pub async fn http_hub(objects: Vec<(&'static str, Value)>) -> std::net::SocketAddr {
    let hub = Hub::ocm();
    let mut by_kind: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (collection, object) in objects {
        by_kind
            .entry(kind_of(collection))
            .or_default()
            .push(hub.stored(object));
    }
    let objects = Arc::new(by_kind);
    let app = axum::Router::new().fallback(move |uri: http::Uri| {
        let objects = objects.clone();
        async move { http_answer(&objects, &uri).await }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

async fn http_answer(
    objects: &BTreeMap<String, Vec<Value>>,
    uri: &http::Uri,
) -> (StatusCode, String) {
    let query = uri.query().unwrap_or_default();
    if query_param(query, "watch").as_deref() == Some("true") {
        std::future::pending::<()>().await;
    }
    let not_found = (
        StatusCode::NOT_FOUND,
        api_status(404, "NotFound").to_string(),
    );
    let Some(path) = parse(uri.path()) else {
        return not_found;
    };
    let known = [MWRS, CARRIERS, WORKS, DECISIONS, EVENTS].map(kind_of);
    let none = Vec::new();
    let items = match objects.get(&path.kind) {
        Some(items) => items,
        None if known.contains(&path.kind) => &none,
        None => return not_found,
    };
    let in_scope =
        |o: &&Value| path.namespace.is_none() || namespace_of(o) == path.namespace.as_deref();
    if let Some(name) = &path.name {
        return match items
            .iter()
            .filter(in_scope)
            .find(|o| o["metadata"]["name"] == name.as_str())
        {
            Some(object) => (StatusCode::OK, object.to_string()),
            None => not_found,
        };
    }
    let labels = query_param(query, "labelSelector").unwrap_or_default();
    let fields = query_param(query, "fieldSelector").unwrap_or_default();
    let items: Vec<&Value> = items
        .iter()
        .filter(in_scope)
        .filter(|o| labels_match(o, &labels) && fields_match(o, &fields))
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List",
                      "metadata": {"resourceVersion": "1"}, "items": items});
    (StatusCode::OK, list.to_string())
}

/// A kubeconfig in `dir` for the API server at `server`, whose context's
/// namespace is team-a.
pub fn kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
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

#[test]
fn paths_name_a_collection_across_namespaces() {
    let p = parse("/apis/g.io/v1/namespaces/default/things/hello").unwrap();
    assert_eq!(
        p,
        Path {
            kind: "/apis/g.io/v1/things".into(),
            namespace: Some("default".into()),
            name: Some("hello".into())
        }
    );
    let p = parse("/apis/g.io/v1/things").unwrap();
    assert_eq!(
        p,
        Path {
            kind: "/apis/g.io/v1/things".into(),
            namespace: None,
            name: None
        }
    );
    // A namespace object itself is no namespaced collection.
    let p = parse("/api/v1/namespaces/default").unwrap();
    assert_eq!(
        p,
        Path {
            kind: "/api/v1/namespaces".into(),
            namespace: None,
            name: Some("default".into())
        }
    );
}

// ---------------------------------------------------------------------------
// Objects: ManifestWorkReplicaSet default/hello over placement canary, four
// clusters, revision r2 replacing r1, plugin smoke-test (in the carrier).

pub const CLUSTERS: [&str; 4] = ["cluster-001", "cluster-002", "cluster-003", "cluster-004"];

pub fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2025-03-01T11:50:00Z"})
}

pub fn mwrs(conditions: Vec<Value>) -> Value {
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

pub fn carrier(status: Value) -> Value {
    json!({
        "apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
        "metadata": {"name": NAME, "namespace": NS, "uid": "carrier-uid", "resourceVersion": "1"},
        "spec": {"placements": [{"name": "canary", "plugin": "smoke-test", "abortOnFailure": true}]},
        "status": status
    })
}

pub fn work(cluster: &str, revision: &str, progressing: &str) -> Value {
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
pub fn stranger() -> Value {
    let mut w = work("cluster-009", "zz", "True");
    w["metadata"]["labels"]["work.open-cluster-management.io/manifestworkreplicaset"] =
        json!("default.other");
    w
}

pub fn decision() -> Value {
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

pub fn cluster(name: &str, status: &str, message: Option<&str>) -> Value {
    let mut c = json!({"clusterName": name, "rolloutStatus": status, "groupIndex": 0,
                       "lastTransitionTime": "2025-03-01T11:59:00Z", "revision": "r2"});
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

pub fn rolling() -> Vec<Value> {
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
pub fn mid_rollout() -> Vec<(&'static str, Value)> {
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
pub fn mid_validation() -> Vec<(&'static str, Value)> {
    let details = json!({"currentRevision": "r1", "updateRevision": "r2", "placements": [{"name": "canary",
        "clusterCounts": {"toApply": 2, "validating": 1, "succeeded": 1},
        "clusters": [cluster("cluster-002", "Validating", Some("smoke test 3/5")),
                     cluster("cluster-003", "ToApply", None), cluster("cluster-004", "ToApply", None)]}]});
    let mut objects = mid_rollout();
    objects[1] = (CARRIERS, carrier(details));
    objects[3] = (WORKS, work("cluster-002", "r2", "False"));
    objects
}

pub const ABORT_MESSAGE: &str = "Rollout of revision r2 aborted: placement canary: cluster-002 Failed \
    (error rate 7% > 1%). Rolling back to revision r1: 2 of 4 clusters restored.";

/// Aborted: cluster-002 failed validation; cluster-001 and -002 still on r2.
pub fn aborted() -> Vec<(&'static str, Value)> {
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
pub fn now() -> jiff::Timestamp {
    "2025-03-01T12:00:00Z".parse().unwrap()
}
