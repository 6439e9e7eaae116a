//! Manual control end to end: `rollout-controller abort|retry|pause|resume`
//! writes the request on the carrier's `spec.control` (through the
//! library the command calls, against the scripted API server), and the
//! next reconcile acts on it and acknowledges it in `status.control`.

use crate::common;

use std::time::Duration;

use common::*;
use http::{Method, StatusCode};
use rollout_controller::control::hub::{ControlOptions, Verb, request_with};
use rollout_controller::orchestrate::work_name;
use rollout_controller::reconcile::reconcile;
use rollout_controller::revision::spec_hash;
use serde_json::{Value, json};

const OWNER: &str = "work.open-cluster-management.io/manifestworkreplicaset";
const PLACEMENT_NAME: &str = "work.open-cluster-management.io/placementname";
const HASH: &str = "work.open-cluster-management.io/controller-hash";
const AT: &str = "2025-01-01T00:00:00Z";

/// A work of `template` on `cluster`, Progressing `progressing`.
fn work(cluster: &str, template: &Value, progressing: &str) -> Value {
    work_since(cluster, template, progressing, AT)
}

/// [`work`], its conditions changed at `at`.
fn work_since(cluster: &str, template: &Value, progressing: &str, at: &str) -> Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": work_name(NS, MWRS, PLACEMENT), "namespace": cluster,
                     "generation": 1, "resourceVersion": "5",
                     "labels": {OWNER: "default.hello", PLACEMENT_NAME: PLACEMENT, HASH: hash_of(template)},
                     "annotations": {
                         "rollout.open-cluster-management.io/owner": "default/hello",
                         "rollout.open-cluster-management.io/spec-hash": spec_hash(&spec(template))}},
        "spec": template,
        "status": {"conditions": conditions(1, progressing, at)}
    })
}

fn controller_revision(template: &Value, number: i64) -> Value {
    let hash = hash_of(template);
    json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": format!("{MWRS}-{hash}"), "namespace": NS,
                     "labels": {OWNER: "default.hello", HASH: hash}},
        "data": {"spec": {"manifestWorkTemplate": template}},
        "revision": number
    })
}

/// The set rolling v2 out over v1, `max` clusters at a time.
fn set(max: i64) -> Value {
    let strategy = json!({"type": "Progressive", "progressive": {"maxConcurrency": max}});
    mwrs(template("v2"), strategy, Value::Null)
}

/// [`set`] one at a time, each cluster soaking an hour once it succeeded.
fn soaking_set() -> Value {
    let strategy = json!({"type": "Progressive",
                          "progressive": {"maxConcurrency": 1, "minSuccessTime": "1h"}});
    mwrs(template("v2"), strategy, Value::Null)
}

/// The API server's answer to a SelfSubjectReview: `user`, or 403.
fn review(user: Option<&str>) -> Expect {
    let user = user.map(str::to_owned);
    Expect::new(
        Method::POST,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        move |_| match user {
            Some(user) => (
                StatusCode::CREATED,
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                       "metadata": {}, "status": {"userInfo": {"username": user}}}),
            ),
            None => (StatusCode::FORBIDDEN, api_status(403, "Forbidden")),
        },
    )
}

/// Runs the command's request of `verb` on `hub`, the API server saying
/// the user is `user` (or refusing to say; then `--by carol`); returns
/// what it printed.
async fn command(hub: &Hub, verb: Verb, user: Option<&str>) -> String {
    let script = vec![review(user), Expect::ok(Method::GET, mwrs_path(), set(1))];
    let (client, server) = api_server_on(hub.clone(), script);
    let options = ControlOptions {
        kubeconfig: None,
        namespace: Some(NS.into()),
        name: MWRS.into(),
        request_timeout: Duration::from_secs(5),
        reason: Some("5xx above 1%".into()),
        by: Some("carol".into()),
    };
    let written = request_with(&client, NS, &options, &verb)
        .await
        .expect("written");
    drop(client);
    server.await.unwrap();
    written.message
}

/// The reads of a reconcile of the set: works, revisions v1 and v2, the
/// placement and its decisions over three clusters.
fn reads(works_now: Vec<Value>) -> Vec<Expect> {
    let (v1, v2) = (template("v1"), template("v2"));
    vec![
        Expect::ok(Method::GET, works_path(), works(works_now)),
        Expect::ok(
            Method::GET,
            revisions_path(),
            revisions(vec![
                controller_revision(&v1, 1),
                controller_revision(&v2, 2),
            ]),
        ),
        Expect::ok(Method::GET, placement_path(), placement()),
        Expect::ok(
            Method::GET,
            decisions_path(),
            decisions(&["cluster1", "cluster2", "cluster3"]),
        ),
    ]
}

/// Reconciles `obj` on `hub` with `script`; returns the requests.
async fn reconciled(hub: &Hub, obj: &Value, script: Vec<Expect>) -> Vec<Recorded> {
    let (client, server) = api_server_on(hub.clone(), script);
    let ctx = context(client, "http://127.0.0.1:1");
    reconcile(object(obj.clone()), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    server.await.unwrap()
}

/// The status the set was patched with.
fn set_status(recorded: &[Recorded]) -> Value {
    recorded
        .iter()
        .rev()
        .find(|r| r.path.ends_with("/manifestworkreplicasets/hello/status"))
        .map(|r| r.body["status"].clone())
        .expect("the set's status patched")
}

/// The merge patch recording the revisions on the set.
fn record_patch(obj: &Value) -> Expect {
    let obj = obj.clone();
    Expect::new(Method::PATCH, mwrs_path(), move |_| (StatusCode::OK, obj))
}

fn carrier_status(aborted: Option<&str>) -> Value {
    let mut status = json!({"setUID": "mwrs-uid",
        "updateRevision": hash_of(&template("v2")), "currentRevision": hash_of(&template("v1"))});
    if let Some(at) = aborted {
        status["abortedTime"] = json!(at);
    }
    status
}

#[tokio::test]
async fn an_abort_by_hand_restores_every_updated_cluster_once() {
    let (v1, v2) = (template("v1"), template("v2"));
    let name = work_name(NS, MWRS, PLACEMENT);
    // No abortOnFailure: only the operator aborts.
    let hub = Hub::ocm().with_carrier(json!([{"name": PLACEMENT}]), carrier_status(None));
    let said = command(&hub, Verb::Abort, Some("alice@example.com")).await;
    assert!(
        said.starts_with(&format!(
            "abort of revision {} requested by alice@example.com (5xx above 1%) on ManifestWorkReplicaSetRollout default/hello",
            hash_of(&v2)
        )),
        "{said}"
    );
    let asked = hub.carrier().unwrap()["spec"]["control"]["abort"].clone();
    assert_eq!(asked["by"], "alice@example.com");
    assert_eq!(asked["reason"], "5xx above 1%");
    assert_eq!(asked["revision"], json!(hash_of(&v2)));

    // cluster1 and cluster2 are rolling v2 out; both go back to v1 at once.
    let obj = set(2);
    let mut script = reads(vec![
        work("cluster1", &v2, "True"),
        work("cluster2", &v2, "True"),
        work("cluster3", &v1, "False"),
    ]);
    for cluster in ["cluster1", "cluster2"] {
        script.push(Expect::echo(Method::PATCH, work_path(cluster, &name)));
    }
    script.push(Expect::status(&obj));
    script.push(record_patch(&obj));
    let recorded = reconciled(&hub, &obj, script).await;
    for patch in recorded
        .iter()
        .filter(|r| r.path.contains("/manifestworks/"))
    {
        assert_eq!(patch.body["spec"], v1, "restored to v1: {}", patch.path);
    }
    let progressing = condition(&set_status(&recorded), "Progressing").clone();
    assert_eq!(progressing["reason"], "RolloutAborted");
    assert!(
        progressing["message"]
            .as_str()
            .unwrap()
            .contains("aborted: asked by alice@example.com (5xx above 1%)."),
        "{progressing}"
    );
    let status = hub.carrier().unwrap()["status"].clone();
    assert!(status["abortedTime"].is_string(), "{status:#}");
    let ack = &status["control"]["abort"];
    assert_eq!(ack["result"], "Acted");
    assert_eq!(ack["by"], "alice@example.com");
    assert_eq!(ack["requestedTime"], asked["requestedTime"]);
}

#[tokio::test]
async fn a_retry_starts_the_aborted_rollout_again_and_the_old_abort_stays_read() {
    let (v1, v2) = (template("v1"), template("v2"));
    let name = work_name(NS, MWRS, PLACEMENT);
    let abort =
        json!({"requestedTime": "2025-01-01T00:00:02Z", "by": "alice", "revision": hash_of(&v2)});
    let mut status = carrier_status(Some("2025-01-01T00:00:03Z"));
    status["control"] = json!({"revisionStartTime": "2025-01-01T00:00:01Z",
        "abort": {"requestedTime": "2025-01-01T00:00:02Z", "by": "alice", "observedTime": "2025-01-01T00:00:03Z",
                  "revision": hash_of(&v2), "result": "Acted", "message": "aborted"}});
    let hub = Hub::ocm().with_carrier_named(
        MWRS,
        json!({"placements": [{"name": PLACEMENT}], "control": {"abort": abort}}),
        status,
    );
    let said = command(&hub, Verb::Retry, Some("bob")).await;
    assert!(said.starts_with("retry of revision"), "{said}");

    // Every cluster is back on v1; the retry rolls v2 out again, two at a
    // time, and the abort request read before does not abort it again.
    let mut obj = set(2);
    obj["metadata"]["annotations"] = json!({
        "rollout-hooks.io/update-revision": hash_of(&v2),
        "rollout-hooks.io/current-revision": hash_of(&v1),
        "rollout-hooks.io/aborted-time": "2025-01-01T00:00:03Z",
    });
    let mut script = reads(
        ["cluster1", "cluster2", "cluster3"]
            .map(|c| work(c, &v1, "False"))
            .to_vec(),
    );
    for cluster in ["cluster1", "cluster2"] {
        script.push(Expect::echo(Method::PATCH, work_path(cluster, &name)));
    }
    script.push(Expect::status(&obj));
    let cleared = obj.clone();
    script.push(Expect::new(Method::PATCH, mwrs_path(), move |patch| {
        assert_eq!(
            patch["metadata"]["annotations"]["rollout-hooks.io/aborted-time"],
            Value::Null,
            "the abort is cleared on the set too: {patch}"
        );
        (StatusCode::OK, cleared)
    }));
    let recorded = reconciled(&hub, &obj, script).await;
    for patch in recorded
        .iter()
        .filter(|r| r.path.contains("/manifestworks/"))
    {
        assert_eq!(patch.body["spec"], v2, "v2 again: {}", patch.path);
    }
    let status = hub.carrier().unwrap()["status"].clone();
    assert!(status.get("abortedTime").is_none(), "{status:#}");
    assert_eq!(status["control"]["retry"]["result"], "Acted");
    assert_eq!(status["control"]["retry"]["by"], "bob");
    assert_eq!(
        status["control"]["abort"]["observedTime"],
        "2025-01-01T00:00:03Z"
    );
    assert_eq!(
        condition(&set_status(&recorded), "Progressing")["reason"],
        "NewRevisionCreated"
    );
}

#[tokio::test]
async fn a_pause_holds_the_next_cluster_until_resumed() {
    let (v1, v2) = (template("v1"), template("v2"));
    let name = work_name(NS, MWRS, PLACEMENT);
    let hub = Hub::ocm().with_carrier(json!([{"name": PLACEMENT}]), carrier_status(None));
    // The API server will not say who asks: --by is recorded.
    let said = command(&hub, Verb::Pause, None).await;
    assert!(
        said.starts_with("pause requested by carol (5xx above 1%)"),
        "{said}"
    );

    // cluster1 has v2; cluster2 would be next, and is not.
    let obj = set(1);
    let fleet = || {
        vec![
            work("cluster1", &v2, "False"),
            work("cluster2", &v1, "False"),
            work("cluster3", &v1, "False"),
        ]
    };
    let mut script = reads(fleet());
    script.push(Expect::status(&obj));
    let recorded = reconciled(&hub, &obj, script).await;
    let progressing = condition(&set_status(&recorded), "Progressing").clone();
    assert_eq!(progressing["reason"], "RolloutPaused");
    assert!(
        progressing["message"]
            .as_str()
            .unwrap()
            .contains("paused by carol (5xx above 1%) at "),
        "{progressing}"
    );
    let status = hub.carrier().unwrap()["status"].clone();
    assert_eq!(status["control"]["paused"]["by"], "carol");

    // Resumed: cluster2 starts.
    let said = command(&hub, Verb::Resume, Some("carol")).await;
    assert!(said.starts_with("resume requested by carol"), "{said}");
    assert!(
        hub.carrier().unwrap()["spec"]["control"]
            .get("paused")
            .is_none()
    );
    let mut script = reads(fleet());
    script.push(Expect::echo(Method::PATCH, work_path("cluster2", &name)));
    script.push(Expect::status(&obj));
    let recorded = reconciled(&hub, &obj, script).await;
    let applied: Vec<&str> = recorded
        .iter()
        .filter(|r| r.path.contains("/manifestworks/"))
        .map(|r| r.path.as_str())
        .collect();
    assert_eq!(applied, [work_path("cluster2", &name)]);
    let status = hub.carrier().unwrap()["status"].clone();
    assert!(status["control"].get("paused").is_none(), "{status:#}");
}

#[tokio::test]
async fn a_promotion_ends_the_soak_of_the_cluster_named() {
    let (v1, v2) = (template("v1"), template("v2"));
    let name = work_name(NS, MWRS, PLACEMENT);
    let hub = Hub::ocm().with_carrier(json!([{"name": PLACEMENT}]), carrier_status(None));
    let said = command(&hub, Verb::Promote(vec!["cluster1".into()]), Some("alice")).await;
    assert!(said.starts_with("promote of revision"), "{said}");
    assert_eq!(
        hub.carrier().unwrap()["spec"]["control"]["promote"]["clusters"],
        json!(["cluster1"])
    );

    // cluster1 succeeded a minute ago and soaks for an hour; promoted, it
    // is marked so on its work and cluster2 starts.
    let now = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
    let since = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let obj = soaking_set();
    let mut script = reads(vec![
        work_since("cluster1", &v2, "False", &since),
        work("cluster2", &v1, "False"),
        work("cluster3", &v1, "False"),
    ]);
    let promoted = work_since("cluster1", &v2, "False", &since);
    script.push(Expect::new(
        Method::PATCH,
        work_path("cluster1", &name),
        move |patch| {
            let marker = &patch["metadata"]["annotations"]["rollout-hooks.io/promoted"];
            assert_eq!(
                marker,
                &json!(format!("{}/1", hash_of(&template("v2")))),
                "{patch}"
            );
            (StatusCode::OK, promoted)
        },
    ));
    script.push(Expect::echo(Method::PATCH, work_path("cluster2", &name)));
    script.push(Expect::status(&obj));
    reconciled(&hub, &obj, script).await;
    let ack = hub.carrier().unwrap()["status"]["control"]["promote"].clone();
    assert_eq!(ack["result"], "Acted");
    assert_eq!(ack["message"], "the wait of cluster1 ends");
}
