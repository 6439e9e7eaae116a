//! Leader election against kube's mock API: one replica's acquire, renew,
//! lost race, loss and release, each request checked; then two replicas
//! (two clients) against one fake Lease store: exactly one leads, and the
//! moment it loses the lease its controller future is dropped.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use http::{Method, Request, Response, StatusCode};
use jiff::Timestamp;
use kube::client::Body;
use rollout_controller::leader::{
    Attempt, LeaderElection, LeaseConfig, LeaseTimings, run_when_leading,
};
use rollout_controller::metrics::ControllerMetrics;
use rollout_controller::probes::Readiness;
use serde_json::{Value, json};

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/hub/leases";

fn lease_path() -> String {
    format!("{LEASES}/rollout-controller")
}

fn config(identity: &str, timings: LeaseTimings) -> LeaseConfig {
    LeaseConfig {
        namespace: "hub".into(),
        name: "rollout-controller".into(),
        identity: identity.into(),
        timings,
    }
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).expect("time")
}

fn status(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("scripted {reason}"), "reason": reason, "code": code})
}

fn lease(holder: &str, version: &str, renewed: Timestamp) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": "rollout-controller", "namespace": "hub", "resourceVersion": version},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                    "acquireTime": at(0).to_string(), "renewTime": renewed.to_string(),
                    "leaseTransitions": 2}})
}

/// Answers with the request body, stored at `version`.
fn stored(status: StatusCode, version: &'static str) -> impl FnOnce(&Value) -> (StatusCode, Value) {
    move |body| {
        let mut body = body.clone();
        body["metadata"]["resourceVersion"] = json!(version);
        (status, body)
    }
}

#[tokio::test]
async fn acquire_renew_lose_and_release_against_the_api() {
    let t1 = at(100);
    let (client, requests) = api_server(vec![
        // Acquire: no Lease yet, so it is created.
        Expect::new(Method::GET, lease_path(), |_| {
            (StatusCode::NOT_FOUND, status(404, "NotFound"))
        }),
        Expect::new(Method::POST, LEASES, stored(StatusCode::CREATED, "1")),
        // Renew: replaced, guarded by the version read.
        Expect::ok(Method::GET, lease_path(), lease("a", "1", t1)),
        Expect::new(Method::PUT, lease_path(), stored(StatusCode::OK, "2")),
        // Lost: another replica holds it now (a new version).
        Expect::ok(Method::GET, lease_path(), lease("b", "3", at(104))),
        // Still held by b and unchanged, 16 s after first seeing it: expired
        // on our clock, so taken; but b renewed first (409): no leader.
        Expect::ok(Method::GET, lease_path(), lease("b", "3", at(104))),
        Expect::new(Method::PUT, lease_path(), |_| {
            (StatusCode::CONFLICT, status(409, "Conflict"))
        }),
        // Taken back, then released on shutdown.
        Expect::ok(Method::GET, lease_path(), lease("b", "4", at(130))),
        Expect::ok(Method::GET, lease_path(), lease("b", "4", at(130))),
        Expect::new(Method::PUT, lease_path(), stored(StatusCode::OK, "5")),
        Expect::new(Method::PUT, lease_path(), stored(StatusCode::OK, "6")),
    ]);
    let mut election = LeaderElection::new(client, config("a", LeaseTimings::default()));
    assert_eq!(
        election.try_acquire_or_renew(at(100)).await.unwrap(),
        Attempt::Leading
    );
    assert_eq!(
        election.try_acquire_or_renew(at(102)).await.unwrap(),
        Attempt::Leading
    );
    assert_eq!(
        election.try_acquire_or_renew(at(105)).await.unwrap(),
        Attempt::Following {
            holder: Some("b".into())
        }
    );
    assert_eq!(
        election.try_acquire_or_renew(at(121)).await.unwrap(),
        Attempt::Following { holder: None }
    );
    // Version 4 is first seen at 131; at 146 it has lasted its 15 s.
    assert_eq!(
        election.try_acquire_or_renew(at(131)).await.unwrap(),
        Attempt::Following {
            holder: Some("b".into())
        }
    );
    assert_eq!(
        election.try_acquire_or_renew(at(146)).await.unwrap(),
        Attempt::Leading
    );
    election.release().await.unwrap();
    drop(election);

    let requests = requests.await.unwrap();
    let spec = |i: usize| requests[i].body["spec"].clone();
    // Created by a, at 100, no transition yet.
    assert_eq!(spec(1)["holderIdentity"], "a");
    assert_eq!(spec(1)["leaseDurationSeconds"], 15);
    assert_eq!(spec(1)["leaseTransitions"], 0);
    assert_eq!(requests[1].body["metadata"].get("resourceVersion"), None);
    // Renewed: the version read, acquire time kept, renew time moved.
    assert_eq!(requests[3].body["metadata"]["resourceVersion"], "1");
    assert_eq!(spec(3)["holderIdentity"], "a");
    assert_eq!(
        spec(3)["acquireTime"],
        at(0).to_string().replace('Z', ".000000Z")
    );
    assert_eq!(
        spec(3)["renewTime"],
        at(102).to_string().replace('Z', ".000000Z")
    );
    // The lost race: a tried to take b's expired lease at version 3.
    assert_eq!(requests[6].body["metadata"]["resourceVersion"], "3");
    assert_eq!(spec(6)["leaseTransitions"], 3);
    // Taken at 146; released with no holder, at the version written.
    assert_eq!(spec(9)["holderIdentity"], "a");
    assert_eq!(requests[10].body["metadata"]["resourceVersion"], "5");
    assert_eq!(spec(10).get("holderIdentity"), None);
    assert_eq!(spec(10)["leaseDurationSeconds"], 1);
}

/// A Lease store shared by several clients, as an API server keeps it:
/// create fails if it exists, replace fails unless the version matches.
/// A client can be cut off (every request answers 503).
#[derive(Default)]
struct Store {
    lease: Option<Value>,
    version: u64,
}

fn fake_api(store: Arc<Mutex<Store>>, cut: Arc<AtomicBool>) -> kube::Client {
    fake_api_counting(store, cut, Arc::new(AtomicUsize::new(0)))
}

/// [`fake_api`], counting the requests for ClusterManagers in `registry`.
fn fake_api_counting(
    store: Arc<Mutex<Store>>,
    cut: Arc<AtomicBool>,
    registry: Arc<AtomicUsize>,
) -> kube::Client {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            if request.uri().path().ends_with("/clustermanagers") {
                registry.fetch_add(1, Ordering::SeqCst);
            }
            let lease_api = request.uri().path().starts_with(LEASES);
            let bytes = request.into_body().collect_bytes().await.unwrap();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (code, answer) = if !lease_api {
                // Anything else (the controller's watches): not here.
                (StatusCode::NOT_FOUND, status(404, "NotFound"))
            } else if cut.load(Ordering::SeqCst) {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    status(503, "ServiceUnavailable"),
                )
            } else {
                let mut store = store.lock().unwrap();
                let current = store
                    .lease
                    .as_ref()
                    .map(|l| l["metadata"]["resourceVersion"].clone());
                match method {
                    Method::GET => match &store.lease {
                        Some(lease) => (StatusCode::OK, lease.clone()),
                        None => (StatusCode::NOT_FOUND, status(404, "NotFound")),
                    },
                    Method::POST if store.lease.is_some() => {
                        (StatusCode::CONFLICT, status(409, "AlreadyExists"))
                    }
                    Method::PUT if current != Some(body["metadata"]["resourceVersion"].clone()) => {
                        (StatusCode::CONFLICT, status(409, "Conflict"))
                    }
                    _ => {
                        store.version += 1;
                        let mut lease = body;
                        lease["metadata"]["resourceVersion"] = json!(store.version.to_string());
                        store.lease = Some(lease.clone());
                        (StatusCode::OK, lease)
                    }
                }
            };
            send.send_response(
                Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
    });
    kube::Client::new(service, "default")
}

/// Counts the replicas reconciling; the most at once.
#[derive(Default)]
struct Reconciling {
    now: AtomicUsize,
    most: AtomicUsize,
    by: Mutex<Vec<(String, bool)>>,
}

/// Dropped when the controller's future is: the replica stopped.
struct Stops(Arc<Reconciling>, String);

impl Drop for Stops {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
        self.0.by.lock().unwrap().push((self.1.clone(), false));
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn two_replicas_one_reconciles_and_a_lost_lease_stops_it_at_once() {
    let timings = LeaseTimings {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(600),
        retry_period: Duration::from_millis(100),
    };
    timings.check().unwrap();
    let store = Arc::new(Mutex::new(Store::default()));
    let reconciling = Arc::new(Reconciling::default());
    let mut replicas = Vec::new();
    for name in ["a", "b"] {
        let cut = Arc::new(AtomicBool::new(false));
        let metrics = Arc::new(ControllerMetrics::new());
        let election =
            LeaderElection::new(fake_api(store.clone(), cut.clone()), config(name, timings));
        let r = reconciling.clone();
        let task = tokio::spawn(run_when_leading(
            election,
            metrics.clone(),
            Readiness::default(),
            std::future::pending(),
            move || {
                let r = r.clone();
                let name = name.to_owned();
                async move {
                    let now = r.now.fetch_add(1, Ordering::SeqCst) + 1;
                    r.most.fetch_max(now, Ordering::SeqCst);
                    r.by.lock().unwrap().push((name.clone(), true));
                    let _stops = Stops(r, name);
                    // The controller: runs until dropped.
                    std::future::pending::<()>().await;
                }
            },
        ));
        replicas.push((name, cut, metrics, task));
    }

    eventually("a replica leads", || {
        reconciling.now.load(Ordering::SeqCst) == 1
    })
    .await;
    let leader = reconciling.by.lock().unwrap()[0].0.clone();
    // Several renewals later, still one.
    let holder = || {
        store.lock().unwrap().lease.as_ref().unwrap()["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let renewed_from = store.lock().unwrap().version;
    eventually("the leader renews", || {
        store.lock().unwrap().version >= renewed_from + 5
    })
    .await;
    assert_eq!(holder(), leader);
    assert_eq!(reconciling.now.load(Ordering::SeqCst), 1);
    let scrape = |i: usize| {
        let text = replicas[i].2.encode();
        text.lines()
            .find_map(|l| l.strip_prefix("rollout_controller_leader "))
            .map(str::to_owned)
    };
    let (lead_i, follow_i) = if leader == "a" { (0, 1) } else { (1, 0) };
    assert_eq!(scrape(lead_i).as_deref(), Some("1"));
    assert_eq!(scrape(follow_i).as_deref(), Some("0"));

    // The leader is cut off from the API: it stops within its renew
    // deadline, before the lease expires; then the other takes over.
    replicas[lead_i].1.store(true, Ordering::SeqCst);
    let follower = replicas[follow_i].0.to_owned();
    eventually("the other replica leads", || holder() == follower).await;
    eventually("and reconciles", || {
        reconciling
            .by
            .lock()
            .unwrap()
            .iter()
            .any(|(n, started)| *n == follower && *started)
    })
    .await;
    let events = reconciling.by.lock().unwrap().clone();
    assert_eq!(
        events,
        [
            (leader.clone(), true),
            (leader.clone(), false),
            (follower.clone(), true)
        ],
        "the old leader stopped before the new one started"
    );
    assert_eq!(reconciling.most.load(Ordering::SeqCst), 1);
    assert_eq!(scrape(lead_i).as_deref(), Some("0"));
    eventually("the new leader's gauge", || {
        scrape(follow_i).as_deref() == Some("1")
    })
    .await;
    for (_, _, _, task) in replicas {
        task.abort();
    }
}

/// A controller that stops by itself (SIGTERM) releases the lease.
#[tokio::test]
async fn a_clean_stop_releases_the_lease() {
    let timings = LeaseTimings {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(600),
        retry_period: Duration::from_millis(100),
    };
    let store = Arc::new(Mutex::new(Store::default()));
    let election = LeaderElection::new(
        fake_api(store.clone(), Arc::new(AtomicBool::new(false))),
        config("a", timings),
    );
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut stopped = Some(stopped);
    let readiness = Readiness::default();
    let task = tokio::spawn(run_when_leading(
        election,
        Arc::new(ControllerMetrics::new()),
        readiness,
        std::future::pending(),
        move || {
            let stopped = stopped.take();
            async move {
                if let Some(stopped) = stopped {
                    let _ = stopped.await;
                }
            }
        },
    ));
    eventually("a leads", || {
        store
            .lock()
            .unwrap()
            .lease
            .as_ref()
            .is_some_and(|l| l["spec"]["holderIdentity"] == "a")
    })
    .await;
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("returns")
        .unwrap();
    let lease = store.lock().unwrap().lease.clone().unwrap();
    assert_eq!(lease["spec"].get("holderIdentity"), None, "{lease}");
}

/// Two whole controllers (`app::run`, as `rollout-controller run
/// --leader-elect --register-plugins` starts it) against one Lease: exactly
/// one says it leads on its scraped `/metrics`, the other is ready to take
/// over, and only the leader watches ClusterManagers for the registry.
#[tokio::test]
async fn two_controllers_one_leads() {
    let timings = LeaseTimings {
        lease_duration: Duration::from_secs(1),
        renew_deadline: Duration::from_millis(600),
        retry_period: Duration::from_millis(100),
    };
    let store = Arc::new(Mutex::new(Store::default()));
    let mut addrs = Vec::new();
    let registry = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    for (name, registry) in ["a", "b"].into_iter().zip(&registry) {
        let client = fake_api_counting(
            store.clone(),
            Arc::new(AtomicBool::new(false)),
            registry.clone(),
        );
        addrs.push(
            start_controller(
                client,
                Some(config(name, timings)),
                Some("open-cluster-management-hub".into()),
            )
            .await,
        );
    }
    let leader_gauge = |text: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix("rollout_controller_leader "))
            .map(str::to_owned)
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut gauges = Vec::new();
        for addr in &addrs {
            gauges.push(leader_gauge(&get(*addr, "/metrics").await));
        }
        let leading = gauges.iter().filter(|g| g.as_deref() == Some("1")).count();
        if leading == 1 {
            let holder = store.lock().unwrap().lease.as_ref().unwrap()["spec"]["holderIdentity"]
                .as_str()
                .unwrap()
                .to_owned();
            let i = gauges
                .iter()
                .position(|g| g.as_deref() == Some("1"))
                .unwrap();
            assert_eq!(holder, ["a", "b"][i]);
            // The follower is ready: it can take over.
            let other = addrs[1 - i];
            assert!(get(other, "/readyz").await.starts_with("HTTP/1.1 200"));
            // Only the leader keeps the registry.
            eventually("the leader watches ClusterManagers", || {
                registry[i].load(Ordering::SeqCst) > 0
            })
            .await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(
                registry[1 - i].load(Ordering::SeqCst),
                0,
                "the follower does not"
            );
            break;
        }
        assert!(leading < 2, "two leaders: {gauges:?}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "no leader: {gauges:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
