//! The reconcile, end to end: the Kubernetes API through kube's mock
//! service (every request checked in order, any other request fails the
//! test) and the hooks through a real in-process rollout gateway to a
//! scripted plugin.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use http::Method;
use kube::runtime::controller::Action;
use rollout_controller::hooks::HookKind;
use rollout_controller::orchestrate::work_name;
use rollout_controller::reconcile::reconcile;
use rollout_controller::revision::spec_hash;
use rollout_proto::v1alpha1::{RolloutStatus as ProtoStatus, ValidationResult};
use serde_json::{Value, json};

use HookKind::{
    BeginRollout as Begin, Initialize, MutateManifestWork as Mutate, ProgressRollout as Progress,
    ValidateRolloutCompletion as Validate,
};

const OWNER: &str = "work.open-cluster-management.io/manifestworkreplicaset";
const PLACEMENT_NAME: &str = "work.open-cluster-management.io/placementname";
const HASH: &str = "work.open-cluster-management.io/controller-hash";

fn call(hook: HookKind, cluster: &str) -> (HookKind, String) {
    (hook, cluster.to_owned())
}

fn trace_id(traceparent: &Option<String>) -> String {
    traceparent.as_deref().expect("a traceparent")[3..35].to_owned()
}

/// A work of the MWRS in `cluster` as the controller applies it, at
/// `generation`, with `extra` annotations and `status`.
fn stored_work(
    cluster: &str,
    template: &Value,
    generation: i64,
    extra: Value,
    status: Value,
) -> Value {
    let mut annotations = json!({
        "rollout.open-cluster-management.io/owner": "default/hello",
        "rollout.open-cluster-management.io/spec-hash": spec_hash(&spec(template)),
    });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        annotations[k] = v;
    }
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": work_name(NS, MWRS, PLACEMENT), "namespace": cluster,
                     "generation": generation, "resourceVersion": "5",
                     "labels": {OWNER: "default.hello", PLACEMENT_NAME: PLACEMENT, HASH: hash_of(template)},
                     "annotations": annotations},
        "spec": template,
        "status": status
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

/// The merge patch that records the revisions on the set `obj`, answered
/// with `obj` so annotated; `check` looks at the annotations.
fn record_patch(obj: &Value, check: impl FnOnce(&Value) + Send + 'static) -> Expect {
    let obj = obj.clone();
    Expect::new(Method::PATCH, mwrs_path(), move |patch| {
        let annotations = &patch["metadata"]["annotations"];
        check(annotations);
        // A merge patch's nulls remove the keys.
        let kept: serde_json::Map<String, Value> = annotations
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut stored = obj;
        stored["metadata"]["annotations"] = Value::Object(kept);
        (http::StatusCode::OK, stored)
    })
}

/// The abort of `update`'s rollout recorded on the set `obj`: the revision
/// it restores, and when it started.
fn recorded_abort(obj: &Value, current: &Value, update: &Value) -> Expect {
    let (current, update) = (hash_of(current), hash_of(update));
    record_patch(obj, move |annotations| {
        assert_eq!(
            annotations["rollout-hooks.io/current-revision"],
            json!(current)
        );
        assert_eq!(
            annotations["rollout-hooks.io/update-revision"],
            json!(update)
        );
        assert!(
            annotations["rollout-hooks.io/aborted-time"].is_string(),
            "{annotations}"
        );
    })
}

fn verdict(result: &str, template: &Value, generation: i64) -> Value {
    json!({
        "rollout.open-cluster-management.io/validation": result,
        "rollout.open-cluster-management.io/validation-message": "all checks passed",
        "rollout.open-cluster-management.io/validation-revision": hash_of(template),
        "rollout.open-cluster-management.io/validation-generation": generation.to_string(),
    })
}

#[tokio::test]
async fn a_progressive_rollout_issues_writes_and_hook_calls_in_order() {
    let (plugin, addr) = plugin().await;
    plugin.answer(
        "cluster2",
        ValidationResult::Inprogress,
        "soaking 20s",
        Some(20),
    );
    let gw = gateway(&[("canary", addr)]).await;
    let v2 = template("v2");
    let hash = hash_of(&v2);
    let name = work_name(NS, MWRS, PLACEMENT);
    // On a hub with OCM's CRDs the plugin lives in the carrier.
    let strategy = json!({"type": "Progressive", "progressive": {"maxConcurrency": 2}});
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT, "plugin": "canary", "pluginConfig": {"weights": [5, 50, 100]}}]),
        Value::Null,
    );
    let clusters = ["cluster1", "cluster2", "cluster3"];

    // Step 1: nothing exists yet.
    let obj = mwrs(v2.clone(), strategy.clone(), Value::Null);
    let (client, server) = api_server_on(
        hub.clone(),
        vec![
            Expect::ok(Method::GET, works_path(), works(vec![])),
            Expect::ok(Method::GET, revisions_path(), revisions(vec![])),
            Expect::echo(Method::POST, revisions_path()),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(Method::GET, decisions_path(), decisions(&clusters)),
            Expect::echo(Method::PATCH, work_path("cluster1", &name)),
            Expect::echo(Method::PATCH, work_path("cluster2", &name)),
            Expect::status(&obj),
        ],
    );
    let ctx = context(client, &gw.url);
    let action = reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let step1 = server.await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(30 * 60)));

    // The works list and the revision list select by the owner label.
    assert!(
        step1[0].query.contains(
            "labelSelector=work.open-cluster-management.io%2Fmanifestworkreplicaset%3Ddefault.hello"
        ),
        "{}",
        step1[0].query
    );
    assert!(
        step1[4].query.contains(
            "labelSelector=cluster.open-cluster-management.io%2Fplacement%3Dcanary-placement"
        ),
        "{}",
        step1[4].query
    );
    // The revision history: one ControllerRevision owned by the MWRS.
    let revision = &step1[2].body;
    assert_eq!(revision["metadata"]["name"], json!(format!("hello-{hash}")));
    assert_eq!(revision["metadata"]["labels"][HASH], json!(hash));
    assert_eq!(
        revision["metadata"]["ownerReferences"][0]["uid"],
        json!("mwrs-uid")
    );
    assert_eq!(revision["data"]["spec"]["manifestWorkTemplate"], v2);
    assert_eq!(revision["revision"], json!(1));
    // Two works, server-side applied, mutated by the plugin.
    for (record, cluster, weight) in [(&step1[5], "cluster1", "10"), (&step1[6], "cluster2", "20")]
    {
        assert_eq!(record.content_type, "application/apply-patch+yaml");
        // No force: no other manager owns the work, and one that starts
        // writing meanwhile must get a 409, not be overwritten.
        assert_eq!(record.params(), ["fieldManager=rollout-controller"]);
        let work = &record.body;
        assert_eq!(work["metadata"]["namespace"], json!(cluster));
        assert_eq!(work["metadata"]["labels"][OWNER], json!("default.hello"));
        assert_eq!(work["metadata"]["labels"][PLACEMENT_NAME], json!(PLACEMENT));
        assert_eq!(work["metadata"]["labels"][HASH], json!(hash));
        assert_eq!(
            work["metadata"]["annotations"]["canary/weight"],
            json!(weight)
        );
        assert_eq!(work["spec"], v2);
    }
    // The hook calls, in the design's order, through one trace.
    assert_eq!(
        plugin.calls(),
        [
            call(Initialize, ""),
            call(Progress, ""),
            call(Begin, "cluster1"),
            call(Mutate, "cluster1"),
            call(Begin, "cluster2"),
            call(Mutate, "cluster2"),
        ]
    );
    let seen = plugin.seen();
    let trace = trace_id(&seen[0].traceparent);
    for s in &seen {
        assert_eq!(
            trace_id(&s.traceparent),
            trace,
            "{:?} is in the reconcile's trace",
            s.hook
        );
        assert!(s.timeout.is_some(), "{:?} has a deadline", s.hook);
        // Through the gateway, every rollout hook carries the strategy's
        // pluginConfig (Initialize has no such field).
        if let Some(request) = &s.request {
            assert_eq!(
                request.plugin_config_json, r#"{"weights":[5,50,100]}"#,
                "{:?}",
                s.hook
            );
        }
    }
    let begins = plugin.requests(Begin);
    assert_eq!(
        begins
            .iter()
            .map(|r| (r.cluster_index, r.total_cluster_count))
            .collect::<Vec<_>>(),
        [(1, 3), (2, 3)]
    );
    let b = &begins[0];
    assert_eq!(
        (
            b.mwrs_name.as_str(),
            b.mwrs_namespace.as_str(),
            b.placement_name.as_str()
        ),
        (MWRS, NS, PLACEMENT)
    );
    assert_eq!(b.desired_revision, hash);
    assert!(!b.aborting);
    let progressing = &b.rollout_status.as_ref().unwrap().progressing;
    assert_eq!(
        progressing
            .iter()
            .map(|c| c.cluster_name.as_str())
            .collect::<Vec<_>>(),
        ["cluster1", "cluster2"]
    );
    assert_eq!(progressing[0].rollout_status, ProtoStatus::ToApply as i32);
    let mutate = &seen[3].work.as_ref().unwrap();
    assert_eq!(mutate["metadata"]["name"], json!(name));
    assert_eq!(mutate["spec"], v2);
    // The status, patched once.
    let status_patch = &step1[7];
    assert_eq!(
        status_patch.params(),
        ["fieldManager=rollout-controller", "force=true"]
    );
    let status = &status_patch.body["status"];
    assert_eq!(condition(status, "PluginLoaded")["status"], "True");
    assert_eq!(
        condition(status, "PluginLoaded")["message"],
        "canary plugin is available."
    );
    assert_eq!(
        condition(status, "PlacementVerified")["reason"],
        "AsExpected"
    );
    assert_eq!(
        condition(status, "PlacementRolledOut")["reason"],
        "Progressing"
    );
    assert_eq!(
        condition(status, "Progressing")["reason"],
        "NewRevisionCreated"
    );
    assert_eq!(status["summary"]["desiredTotal"], 3);
    assert_eq!(status["summary"]["total"], 2);
    // The status additions went to the carrier, OCM's fields only to the MWRS.
    for addition in ["updateRevision", "currentRevision", "abortedTime"] {
        assert!(status.get(addition).is_none(), "{addition} in {status:#}");
    }
    assert!(status["placementSummary"][0].get("clusterCounts").is_none());
    let details = hub.carrier().unwrap()["status"].clone();
    assert_eq!(details["updateRevision"], json!(hash));
    assert!(details.get("currentRevision").is_none());
    assert_eq!(details["observedGeneration"], json!(1));
    assert_eq!(details["placements"][0]["clusterCounts"]["toApply"], 3);

    // Step 2: the agent finished both works; the plugin passes cluster1
    // and is still soaking cluster2; cluster3 starts.
    plugin.clear();
    let done = |cluster: &str| {
        let mut w = step1
            .iter()
            .find(|r| r.path == work_path(cluster, &name))
            .unwrap()
            .body
            .clone();
        w["metadata"]["generation"] = json!(1);
        w["metadata"]["resourceVersion"] = json!("6");
        w["status"] = json!({"conditions": conditions(1, "False", "2025-01-01T00:00:00Z")});
        w
    };
    let (w1, w2) = (done("cluster1"), done("cluster2"));
    let mut annotated = w1.clone();
    let mut stored_revision = revision.clone();
    stored_revision["metadata"]["resourceVersion"] = json!("3");
    let obj = mwrs(v2.clone(), strategy, status.clone());
    let (client, server) = api_server_on(
        hub.clone(),
        vec![
            Expect::ok(Method::GET, works_path(), works(vec![w1.clone(), w2])),
            Expect::ok(
                Method::GET,
                revisions_path(),
                revisions(vec![stored_revision]),
            ),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(Method::GET, decisions_path(), decisions(&clusters)),
            Expect::new(Method::PATCH, work_path("cluster1", &name), move |patch| {
                for (k, v) in patch["metadata"]["annotations"].as_object().unwrap() {
                    annotated["metadata"]["annotations"][k] = v.clone();
                }
                (http::StatusCode::OK, annotated)
            }),
            Expect::echo(Method::PATCH, work_path("cluster3", &name)),
            Expect::status(&obj),
        ],
    );
    let ctx = context(client, &gw.url);
    let action = reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let step2 = server.await.unwrap();
    // The plugin's recheck hint sets the requeue.
    assert_eq!(action, Action::requeue(Duration::from_secs(20)));
    // (A new Context: Initialize again.) Validation comes before the
    // decision, ProgressRollout before the clusters' hooks.
    assert_eq!(
        plugin.calls(),
        [
            call(Initialize, ""),
            call(Validate, "cluster1"),
            call(Validate, "cluster2"),
            call(Progress, ""),
            call(Begin, "cluster3"),
            call(Mutate, "cluster3"),
        ]
    );
    let seen = plugin.seen();
    assert_ne!(
        trace_id(&seen[0].traceparent),
        trace,
        "a new reconcile, a new trace"
    );
    // The verdict is persisted with a merge patch.
    let verdict_patch = &step2[4];
    assert_eq!(verdict_patch.content_type, "application/merge-patch+json");
    let annotations = &verdict_patch.body["metadata"]["annotations"];
    assert_eq!(
        annotations["rollout.open-cluster-management.io/validation"],
        "Succeeded"
    );
    assert_eq!(
        annotations["rollout.open-cluster-management.io/validation-revision"],
        json!(hash)
    );
    assert_eq!(
        annotations["rollout.open-cluster-management.io/validation-generation"],
        "1"
    );
    let begin = &plugin.requests(Begin)[0];
    assert_eq!(begin.cluster_index, 3);
    let state = begin.rollout_status.as_ref().unwrap();
    assert_eq!(
        state
            .completed
            .iter()
            .map(|c| c.cluster_name.as_str())
            .collect::<Vec<_>>(),
        ["cluster1"]
    );
    assert_eq!(
        state
            .progressing
            .iter()
            .map(|c| (c.cluster_name.as_str(), c.rollout_status))
            .collect::<Vec<_>>(),
        [
            ("cluster2", ProtoStatus::Validating as i32),
            ("cluster3", ProtoStatus::ToApply as i32)
        ]
    );
    assert_eq!(
        step2[5].body["metadata"]["annotations"]["canary/weight"],
        "30"
    );
    let status = &step2[6].body["status"];
    let details = hub.carrier().unwrap()["status"].clone();
    let summary = &details["placements"][0];
    assert_eq!(summary["clusterCounts"]["succeeded"], 1);
    assert_eq!(summary["clusterCounts"]["validating"], 1);
    assert_eq!(summary["clusterCounts"]["toApply"], 1);
    assert_eq!(summary["clusters"][0]["clusterName"], "cluster2");
    assert_eq!(summary["clusters"][0]["rolloutStatus"], "Validating");
    assert_eq!(summary["clusters"][0]["message"], "soaking 20s");
    assert_eq!(status["summary"]["updated"], 1);
    // Unchanged conditions keep their transition time.
    assert_eq!(
        condition(status, "PluginLoaded")["lastTransitionTime"],
        condition(&step1[7].body["status"], "PluginLoaded")["lastTransitionTime"]
    );
    gw.running.shutdown().await;
}

#[tokio::test]
async fn a_failed_validation_aborts_and_rolls_back_with_aborting_calls() {
    let (plugin, addr) = plugin().await;
    plugin.answer(
        "cluster1",
        ValidationResult::Failed,
        "smoke test failed",
        None,
    );
    let gw = gateway(&[("canary", addr)]).await;
    let (v1, v2) = (template("v1"), template("v2"));
    let (r1, r2) = (hash_of(&v1), hash_of(&v2));
    let name = work_name(NS, MWRS, PLACEMENT);
    let strategy = json!({"type": "Progressive", "progressive": {"maxConcurrency": 1}});
    // The plugin, the abort and the revisions in the carrier, as on a hub with
    // OCM's CRDs.
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT, "plugin": "canary", "abortOnFailure": true}]),
        json!({"currentRevision": r1, "updateRevision": r2}),
    );
    // cluster1 got v2 and finished progressing; cluster2 still runs v1,
    // validated.
    let w1 = stored_work(
        "cluster1",
        &v2,
        2,
        json!({}),
        json!({"conditions": conditions(2, "False", "2025-01-01T00:00:00Z")}),
    );
    let w2 = stored_work(
        "cluster2",
        &v1,
        1,
        verdict("Succeeded", &v1, 1),
        json!({"conditions": conditions(1, "False", "2024-12-01T00:00:00Z")}),
    );
    let mut failed = w1.clone();
    let obj = mwrs(v2.clone(), strategy, Value::Null);
    let (client, server) = api_server_on(
        hub.clone(),
        vec![
            Expect::ok(Method::GET, works_path(), works(vec![w1, w2])),
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
                decisions(&["cluster1", "cluster2"]),
            ),
            Expect::new(Method::PATCH, work_path("cluster1", &name), move |patch| {
                for (k, v) in patch["metadata"]["annotations"].as_object().unwrap() {
                    failed["metadata"]["annotations"][k] = v.clone();
                }
                (http::StatusCode::OK, failed)
            }),
            Expect::echo(Method::PATCH, work_path("cluster1", &name)),
            Expect::status(&obj),
            recorded_abort(&obj, &v1, &v2),
        ],
    );
    let ctx = context(client, &gw.url);
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();

    // The FAILED verdict is persisted: cluster1 is Failed for v2.
    let annotations = &recorded[4].body["metadata"]["annotations"];
    assert_eq!(
        annotations["rollout.open-cluster-management.io/validation"],
        "Failed"
    );
    assert_eq!(
        annotations["rollout.open-cluster-management.io/validation-message"],
        "smoke test failed"
    );
    assert_eq!(
        annotations["rollout.open-cluster-management.io/validation-revision"],
        json!(r2)
    );
    // Then the abort: v1 goes back to cluster1, every call says aborting.
    assert_eq!(
        plugin.calls(),
        [
            call(Initialize, ""),
            call(Validate, "cluster1"),
            call(Progress, ""),
            call(Begin, "cluster1"),
            call(Mutate, "cluster1")
        ]
    );
    let validate = &plugin.requests(Validate)[0];
    assert!(!validate.aborting);
    assert_eq!(validate.desired_revision, r2);
    for hook in [Progress, Begin, Mutate] {
        let request = &plugin.requests(hook)[0];
        assert!(request.aborting, "{hook:?} says aborting");
        assert_eq!(
            request.desired_revision, r1,
            "{hook:?} names the revision restored"
        );
    }
    let old_work = plugin
        .seen()
        .into_iter()
        .find(|s| s.hook == Mutate)
        .unwrap()
        .work
        .unwrap();
    assert_eq!(old_work["spec"], v1, "the plugin mutates the old work");
    let applied = &recorded[5].body;
    assert_eq!(applied["spec"], v1);
    assert_eq!(applied["metadata"]["labels"][HASH], json!(r1));
    assert_eq!(
        applied["metadata"]["annotations"]["canary/aborting"],
        "true"
    );
    let status = &recorded[6].body["status"];
    let details = hub.carrier().unwrap()["status"].clone();
    assert!(details["abortedTime"].is_string(), "{details:#}");
    assert_eq!(details["currentRevision"], json!(r1));
    assert_eq!(details["updateRevision"], json!(r2));
    assert_eq!(
        details["placements"][0]["clusters"][0]["clusterName"],
        "cluster1"
    );
    assert_eq!(
        details["placements"][0]["clusters"][0]["message"],
        "smoke test failed"
    );
    let progressing = condition(status, "Progressing");
    assert_eq!(
        (
            progressing["status"].as_str(),
            progressing["reason"].as_str()
        ),
        (Some("False"), Some("RolloutAborted"))
    );
    assert_eq!(
        progressing["message"],
        json!(format!(
            "Rollout of revision {r2} aborted: placement {PLACEMENT}: cluster1 Failed (smoke test failed). \
             Rolling back to revision {r1}: 1 of 2 clusters restored."
        ))
    );
    assert_eq!(
        condition(status, "PlacementRolledOut")["reason"],
        "RolloutDegraded"
    );
    gw.running.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_plugin_fails_plugin_loaded_and_applies_nothing() {
    let gone = closed_port().await;
    let gw = gateway(&[("gone", gone)]).await;
    let obj = mwrs(template("v1"), json!({"type": "All"}), Value::Null);
    let hub = Hub::ocm().with_carrier(json!([{"name": PLACEMENT, "plugin": "gone"}]), Value::Null);
    let (client, server) = api_server_on(
        hub.clone(),
        vec![
            Expect::ok(Method::GET, works_path(), works(vec![])),
            Expect::ok(Method::GET, revisions_path(), revisions(vec![])),
            Expect::echo(Method::POST, revisions_path()),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(
                Method::GET,
                decisions_path(),
                decisions(&["cluster1", "cluster2"]),
            ),
            // No ManifestWork write: only the status.
            Expect::status(&obj),
        ],
    );
    let ctx = context(client, &gw.url);
    let action = reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    assert_eq!(ctx.hooks.counts().initialize, 1);
    assert_eq!(
        ctx.hooks.counts().begin_rollout + ctx.hooks.counts().progress_rollout,
        0
    );
    drop(ctx);
    let recorded = server.await.unwrap();
    // Asked again soon.
    assert_eq!(action, Action::requeue(Duration::from_secs(10)));
    let status = &recorded[5].body["status"];
    let loaded = condition(status, "PluginLoaded");
    assert_eq!(
        (loaded["status"].as_str(), loaded["reason"].as_str()),
        (Some("False"), Some("Failed"))
    );
    let message = loaded["message"].as_str().unwrap();
    assert!(
        message
            .starts_with("gone plugin: Initialize fails with unavailable plugin server endpoint"),
        "{message}"
    );
    assert_eq!(status["summary"]["total"], 0);
    let details = hub.carrier().unwrap()["status"].clone();
    assert_eq!(details["placements"][0]["clusterCounts"]["toApply"], 2);
    gw.running.shutdown().await;
}

#[tokio::test]
async fn a_removed_clusters_work_is_deleted() {
    let (plugin, addr) = plugin().await;
    let gw = gateway(&[("canary", addr)]).await;
    let v1 = template("v1");
    let r1 = hash_of(&v1);
    let name = work_name(NS, MWRS, PLACEMENT);
    let finished = |cluster: &str| {
        stored_work(
            cluster,
            &v1,
            1,
            verdict("Succeeded", &v1, 1),
            json!({"conditions": conditions(1, "False", "2025-01-01T00:00:00Z")}),
        )
    };
    let gone = finished("cluster2");
    let obj = mwrs(v1.clone(), json!({"type": "All"}), Value::Null);
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT, "plugin": "canary"}]),
        json!({"currentRevision": r1, "updateRevision": r1}),
    );
    let (client, server) = api_server_on(
        hub,
        vec![
            Expect::ok(
                Method::GET,
                works_path(),
                works(vec![finished("cluster1"), gone.clone()]),
            ),
            Expect::ok(
                Method::GET,
                revisions_path(),
                revisions(vec![controller_revision(&v1, 1)]),
            ),
            Expect::ok(Method::GET, placement_path(), placement()),
            // cluster2 left the placement.
            Expect::ok(Method::GET, decisions_path(), decisions(&["cluster1"])),
            Expect::ok(Method::DELETE, work_path("cluster2", &name), gone),
            Expect::status(&obj),
        ],
    );
    let ctx = context(client, &gw.url);
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    assert_eq!(plugin.calls(), [call(Initialize, ""), call(Progress, "")]);
    let state = plugin.requests(Progress)[0].rollout_status.clone().unwrap();
    assert_eq!(state.removed.len(), 1);
    assert_eq!(state.removed[0].cluster_name, "cluster2");
    assert_eq!(state.removed[0].manifest_revision_name, r1);
    assert_eq!(state.completed[0].cluster_name, "cluster1");
    let status = &recorded[5].body["status"];
    assert_eq!(status["summary"]["total"], 1);
    assert_eq!(status["summary"]["desiredTotal"], 1);
    assert_eq!(
        condition(status, "PlacementRolledOut")["reason"],
        "Complete"
    );
    assert_eq!(
        condition(status, "Progressing")["reason"],
        "NewManifestWorkAvailable"
    );
    gw.running.shutdown().await;
}

fn deleting(policy: &str) -> Value {
    let mut object = mwrs(template("v1"), json!({"type": "All"}), Value::Null);
    object["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
    object["spec"]["cascadeDeletionPolicy"] = json!(policy);
    object
}

#[tokio::test]
async fn foreground_deletion_keeps_the_finalizer_until_the_works_are_gone() {
    let v1 = template("v1");
    let name = work_name(NS, MWRS, PLACEMENT);
    let w1 = stored_work("cluster1", &v1, 1, json!({}), Value::Null);
    let w2 = stored_work("cluster2", &v1, 1, json!({}), Value::Null);
    let mut w2_deleting = w2.clone();
    w2_deleting["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:01Z");

    // Step 1: both works are deleted; the finalizer stays.
    let (client, server) = api_server(vec![
        Expect::ok(
            Method::GET,
            works_path(),
            works(vec![w1.clone(), w2.clone()]),
        ),
        Expect::ok(Method::DELETE, work_path("cluster1", &name), w1),
        Expect::ok(Method::DELETE, work_path("cluster2", &name), w2),
    ]);
    let ctx = context(client, "http://127.0.0.1:1");
    let action = reconcile(object(deleting("Foreground")), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    server.await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));

    // Step 2: one is still going away: nothing to do, the finalizer stays.
    let (client, server) = api_server(vec![Expect::ok(
        Method::GET,
        works_path(),
        works(vec![w2_deleting]),
    )]);
    let ctx = context(client, "http://127.0.0.1:1");
    let action = reconcile(object(deleting("Foreground")), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    server.await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));

    // Step 3: all gone: the finalizer is removed.
    let mut released = deleting("Foreground");
    released["metadata"]["finalizers"] = json!([]);
    let (client, server) = api_server(vec![
        Expect::ok(Method::GET, works_path(), works(vec![])),
        Expect::ok(Method::PATCH, mwrs_path(), released),
    ]);
    let ctx = context(client, "http://127.0.0.1:1");
    let action = reconcile(object(deleting("Foreground")), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(recorded[1].content_type, "application/merge-patch+json");
    assert_eq!(
        recorded[1].body,
        json!({"metadata": {"finalizers": [], "resourceVersion": "10"}})
    );
}

#[tokio::test]
async fn background_deletion_releases_the_finalizer_at_once() {
    let v1 = template("v1");
    let name = work_name(NS, MWRS, PLACEMENT);
    let w1 = stored_work("cluster1", &v1, 1, json!({}), Value::Null);
    let mut released = deleting("Background");
    released["metadata"]["finalizers"] = json!([]);
    let (client, server) = api_server(vec![
        Expect::ok(Method::GET, works_path(), works(vec![w1.clone()])),
        Expect::ok(Method::DELETE, work_path("cluster1", &name), w1),
        Expect::ok(Method::PATCH, mwrs_path(), released),
    ]);
    let ctx = context(client, "http://127.0.0.1:1");
    let action = reconcile(object(deleting("Background")), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(recorded[2].body["metadata"]["finalizers"], json!([]));
}

#[tokio::test]
async fn a_new_mwrs_gets_its_finalizer_first() {
    let mut fresh = mwrs(template("v1"), json!({"type": "All"}), Value::Null);
    fresh["metadata"]["finalizers"] = json!([]);
    let mut with_finalizer = fresh.clone();
    with_finalizer["metadata"]["finalizers"] =
        json!(["work.open-cluster-management.io/manifest-work-cleanup"]);
    with_finalizer["metadata"]["resourceVersion"] = json!("11");
    let name = work_name(NS, MWRS, PLACEMENT);
    let (client, server) = api_server(vec![
        Expect::ok(Method::PATCH, mwrs_path(), with_finalizer),
        Expect::ok(Method::GET, works_path(), works(vec![])),
        Expect::ok(Method::GET, revisions_path(), revisions(vec![])),
        Expect::echo(Method::POST, revisions_path()),
        Expect::ok(Method::GET, placement_path(), placement()),
        Expect::ok(Method::GET, decisions_path(), decisions(&["cluster1"])),
        // No plugin: the work is applied without any hook.
        Expect::echo(Method::PATCH, work_path("cluster1", &name)),
        Expect::status(&fresh),
    ]);
    let ctx = context(client, "http://127.0.0.1:1");
    reconcile(object(fresh.clone()), ctx.clone())
        .await
        .expect("reconciled");
    let counts = ctx.hooks.counts();
    drop(ctx);
    let recorded = server.await.unwrap();
    assert_eq!(
        recorded[0].body,
        json!({"metadata": {"finalizers": ["work.open-cluster-management.io/manifest-work-cleanup"],
                            "resourceVersion": "10"}})
    );
    assert_eq!(counts, Default::default(), "no plugin, no hook call");
    let status = &recorded[7].body["status"];
    assert!(
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["type"] != "PluginLoaded"),
        "no PluginLoaded without a plugin: {status:#}"
    );
}

#[tokio::test]
async fn a_missing_placement_is_reported_and_its_works_kept() {
    let v1 = template("v1");
    let w1 = stored_work("cluster1", &v1, 1, json!({}), Value::Null);
    let obj = mwrs(v1.clone(), json!({"type": "All"}), Value::Null);
    let (client, server) = api_server(vec![
        Expect::ok(Method::GET, works_path(), works(vec![w1])),
        Expect::ok(
            Method::GET,
            revisions_path(),
            revisions(vec![controller_revision(&v1, 1)]),
        ),
        Expect::new(Method::GET, placement_path(), |_| {
            (
                http::StatusCode::NOT_FOUND,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                       "message": "placements.cluster.open-cluster-management.io \"canary-placement\" not found",
                       "reason": "NotFound", "code": 404}),
            )
        }),
        Expect::status(&obj),
    ]);
    let ctx = context(client, "http://127.0.0.1:1");
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    let verified = condition(&recorded[3].body["status"], "PlacementVerified");
    assert_eq!(
        (verified["status"].as_str(), verified["reason"].as_str()),
        (Some("False"), Some("PlacementDecisionNotFound"))
    );
    assert_eq!(verified["message"], "placement canary-placement not found");
}

#[tokio::test]
async fn a_plugin_config_above_the_limit_is_refused_naming_the_limit() {
    let v1 = template("v1");
    let w1 = stored_work("cluster1", &v1, 1, json!({}), Value::Null);
    let big = "x".repeat(70_000);
    let obj = mwrs(v1.clone(), json!({"type": "All"}), Value::Null);
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT, "plugin": "canary", "pluginConfig": {"blob": big}}]),
        Value::Null,
    );
    // No placement read, no plugin call, no work written: only the status.
    let (client, server) = api_server_on(
        hub,
        vec![
            Expect::ok(Method::GET, works_path(), works(vec![w1])),
            Expect::ok(
                Method::GET,
                revisions_path(),
                revisions(vec![controller_revision(&v1, 1)]),
            ),
            Expect::status(&obj),
        ],
    );
    let ctx = context(client, "http://127.0.0.1:1");
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    let verified = condition(&recorded[2].body["status"], "PlacementVerified");
    assert_eq!(
        (verified["status"].as_str(), verified["reason"].as_str()),
        (Some("False"), Some("NotAsExpected"))
    );
    assert_eq!(
        verified["message"],
        "placement canary-placement: invalid rollout strategy: pluginConfig: 70011 bytes of JSON, above the limit of 65536 bytes"
    );
}

#[tokio::test]
async fn a_long_owner_name_writes_no_work_as_ocm_does() {
    // OCM's controller finds a set's works by the label value
    // `<namespace>.<name>`; over 63 characters no work may carry it, so
    // none is written (no orphan for OCM to miss) and the status says why.
    let long = "a".repeat(60);
    let mut object_json = mwrs(template("v1"), json!({"type": "All"}), Value::Null);
    object_json["metadata"]["name"] = json!(long);
    let (client, server) = api_server(vec![Expect::status(&object_json)]);
    let ctx = context(client, "http://127.0.0.1:1");
    let action = reconcile(object(object_json.clone()), ctx.clone())
        .await
        .expect("reconciled");
    assert_eq!(action, Action::await_change());
    drop(ctx);
    let recorded = server.await.unwrap();
    let applied = condition(&recorded[0].body["status"], "ManifestworkApplied");
    assert_eq!(applied["status"], "False");
    assert_eq!(applied["reason"], "InvalidManifestWorkName");
    assert!(
        applied["message"].as_str().unwrap().contains(&long),
        "{applied}"
    );
}

/// With Events on (as `run` has them): an unreachable plugin gives one
/// `PluginLoadFailed` Event on the ManifestWorkReplicaSet, after the status;
/// the next reconcile, failing the same way, writes no second Event.
#[tokio::test]
async fn an_unreachable_plugin_is_one_event_not_one_per_reconcile() {
    use rollout_controller::events::{EventGate, Events};

    let gone = closed_port().await;
    let gw = gateway(&[("gone", gone)]).await;
    let mut obj = mwrs(template("v1"), json!({"type": "All"}), Value::Null);
    let hub = Hub::ocm().with_carrier(json!([{"name": PLACEMENT, "plugin": "gone"}]), Value::Null);
    let events_path = "/apis/events.k8s.io/v1/namespaces/default/events";
    // The Events go through their own client; exactly one is written.
    let (events_client, events_server) = api_server(vec![
        Expect::echo(Method::POST, events_path),
        Expect::echo(Method::POST, events_path),
    ]);
    let events = Arc::new(Events::new(
        events_client,
        "replica-a",
        EventGate::default(),
    ));
    for round in 0..2 {
        let mut script = vec![
            Expect::ok(Method::GET, works_path(), works(vec![])),
            Expect::ok(Method::GET, revisions_path(), revisions(vec![])),
            Expect::echo(Method::POST, revisions_path()),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(Method::GET, decisions_path(), decisions(&["cluster1"])),
        ];
        if round == 0 {
            script.push(Expect::status(&obj));
        }
        let (client, server) = api_server_on(hub.clone(), script);
        let ctx = Arc::try_unwrap(context(client, &gw.url))
            .unwrap()
            .with_events(events.clone());
        reconcile(object(obj.clone()), Arc::new(ctx))
            .await
            .expect("reconciled");
        let recorded = server.await.unwrap();
        if round == 0 {
            // The next reconcile reads the status this one wrote.
            obj["status"] = recorded[5].body["status"].clone();
        }
    }
    drop(events);
    let written = events_server.await.unwrap();
    // The first says what the set is bound to.
    assert_eq!(written[0].body["reason"], "CarrierBound");
    assert_eq!(written[0].body["type"], "Normal");
    let event = &written[1].body;
    assert_eq!(event["reason"], "PluginLoadFailed");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["action"], "Initialize");
    assert_eq!(event["regarding"]["kind"], "ManifestWorkReplicaSet");
    assert_eq!(event["regarding"]["name"], "hello");
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .starts_with("gone plugin: Initialize fails"),
        "{event}"
    );
    gw.running.shutdown().await;
}

/// A hub whose ManifestWorkReplicaSet CRD has the design's fields: the
/// plugin is read from the MWRS alone; the controller creates the carrier
/// (owned by the MWRS) to keep its status additions in.
#[tokio::test]
async fn a_hub_with_the_design_crd_works_from_the_mwrs_alone() {
    let (plugin, addr) = plugin().await;
    let gw = gateway(&[("canary", addr)]).await;
    let v1 = template("v1");
    let name = work_name(NS, MWRS, PLACEMENT);
    let hub = Hub::design();
    let obj = hub.stored(design_mwrs(
        v1.clone(),
        json!({"type": "All", "plugin": "canary", "pluginConfig": {"weights": [100]}}),
        Value::Null,
    ));
    assert_eq!(
        obj["spec"]["placementRefs"][0]["rolloutStrategy"]["plugin"],
        "canary"
    );
    let (client, server) = api_server_on(
        hub.clone(),
        vec![
            Expect::ok(Method::GET, works_path(), works(vec![])),
            Expect::ok(Method::GET, revisions_path(), revisions(vec![])),
            Expect::echo(Method::POST, revisions_path()),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(Method::GET, decisions_path(), decisions(&["cluster1"])),
            Expect::echo(Method::PATCH, work_path("cluster1", &name)),
            Expect::status(&obj),
        ],
    );
    let ctx = context(client, &gw.url);
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    assert_eq!(
        plugin.calls(),
        [
            call(Initialize, ""),
            call(Progress, ""),
            call(Begin, "cluster1"),
            call(Mutate, "cluster1")
        ]
    );
    assert_eq!(
        plugin.requests(Begin)[0].plugin_config_json,
        r#"{"weights":[100]}"#
    );
    assert_eq!(
        recorded[5].body["metadata"]["annotations"]["canary/weight"],
        "10"
    );
    // The carrier was created empty, owned by the MWRS, and holds the revisions.
    let carrier = hub.carrier().expect("created");
    assert_eq!(carrier["spec"], json!({}));
    assert_eq!(
        carrier["metadata"]["ownerReferences"][0]["uid"],
        json!("mwrs-uid")
    );
    assert_eq!(carrier["status"]["updateRevision"], json!(hash_of(&v1)));
    let methods: Vec<Method> = hub
        .carrier_requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.method.clone())
        .collect();
    assert_eq!(methods, [Method::GET, Method::POST, Method::PATCH]);
    gw.running.shutdown().await;
}

/// The statuses read back are the pruned ones: a reconcile that changes
/// nothing writes neither status again (no write loop on fields OCM's
/// schema drops).
#[tokio::test]
async fn an_unchanged_rollout_writes_no_status_again_under_pruning() {
    let v1 = template("v1");
    let hub = Hub::ocm().with_carrier(json!([{"name": PLACEMENT}]), Value::Null);
    let mut obj = mwrs(v1.clone(), json!({"type": "All"}), Value::Null);
    for round in 0..2 {
        let mut script = vec![
            Expect::ok(Method::GET, works_path(), works(vec![])),
            Expect::ok(Method::GET, revisions_path(), revisions(vec![])),
            Expect::echo(Method::POST, revisions_path()),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(Method::GET, decisions_path(), decisions(&[])),
        ];
        if round == 0 {
            script.push(Expect::status(&obj));
            // v1 became current: recorded on the set.
            let current = hash_of(&v1);
            script.push(record_patch(&obj, move |annotations| {
                assert_eq!(
                    annotations["rollout-hooks.io/current-revision"],
                    json!(current)
                );
            }));
        }
        let (client, server) = api_server_on(hub.clone(), script);
        let ctx = context(client, "http://127.0.0.1:1");
        reconcile(object(obj.clone()), ctx.clone())
            .await
            .expect("reconciled");
        drop(ctx);
        let recorded = server.await.unwrap();
        if round == 0 {
            // What the API server stores and the next reconcile reads.
            let mut stored = obj.clone();
            stored["status"] = recorded[5].body["status"].clone();
            obj = hub.stored(stored);
        }
    }
    let patches = hub
        .carrier_requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.method == Method::PATCH)
        .count();
    assert_eq!(patches, 1, "the carrier's status is written once");
}

/// Another field manager (here a person's `kubectl edit`) changes the spec
/// of a work the controller applied. The API server records it in
/// managedFields; the controller says so (condition and one Event naming
/// the manager and the work) and does not apply the work again, reconcile
/// after reconcile.
#[tokio::test]
async fn another_writers_change_is_reported_and_not_fought() {
    use common::fields::{expect_apply, expect_list};
    use rollout_controller::events::{EventGate, Events};

    // One hub for every reconcile: its works keep their managedFields, and
    // it keeps the ManifestWorkReplicaSetRollout the first one creates.
    let hub = Hub::ocm();
    let v1 = template("v1");
    let name = work_name(NS, MWRS, PLACEMENT);
    let mut obj = mwrs(v1.clone(), json!({"type": "All"}), Value::Null);
    let events_path = "/apis/events.k8s.io/v1/namespaces/default/events";
    let (events_client, events_server) = api_server(vec![
        Expect::echo(Method::POST, events_path),
        Expect::echo(Method::POST, events_path),
    ]);
    let events = Arc::new(Events::new(
        events_client,
        "replica-a",
        EventGate::default(),
    ));
    let run = |script: Vec<Expect>, obj: Value| {
        let (events, hub) = (events.clone(), hub.clone());
        async move {
            let (client, server) = api_server_on(hub, script);
            let ctx = Arc::try_unwrap(context(client, "http://127.0.0.1:1"))
                .unwrap()
                .with_events(events);
            reconcile(object(obj), Arc::new(ctx))
                .await
                .expect("reconciled");
            server.await.unwrap()
        }
    };
    let reads = |first: bool| {
        let mut script = vec![
            expect_list(&hub),
            Expect::ok(
                Method::GET,
                revisions_path(),
                revisions(if first {
                    vec![]
                } else {
                    vec![controller_revision(&v1, 1)]
                }),
            ),
        ];
        if first {
            script.push(Expect::echo(Method::POST, revisions_path()));
        }
        script.push(Expect::ok(Method::GET, placement_path(), placement()));
        script.push(Expect::ok(
            Method::GET,
            decisions_path(),
            decisions(&["cluster1"]),
        ));
        script
    };

    // The controller creates the work.
    let mut script = reads(true);
    script.push(expect_apply(&hub, "cluster1", &name));
    script.push(Expect::status(&obj));
    let recorded = run(script, obj.clone()).await;
    obj["status"] = recorded.last().unwrap().body["status"].clone();
    obj = hub.stored(obj);
    let stored = hub.works.lock().unwrap().get("cluster1", &name).unwrap();
    assert_eq!(
        stored["metadata"]["managedFields"][0]["manager"],
        "rollout-controller"
    );

    // A person edits its spec.
    let (code, _) = hub.works.lock().unwrap().merge_patch(
        "cluster1",
        &name,
        "kubectl-edit",
        &json!({"spec": template("hand-made")}),
    );
    assert_eq!(code, http::StatusCode::OK);

    // Reported once, and left alone: no apply, reconcile after reconcile.
    let mut script = reads(false);
    script.push(Expect::status(&obj));
    let recorded = run(script, obj.clone()).await;
    let status = &recorded.last().unwrap().body["status"];
    let conflict = condition(status, "ManifestWorksConflict");
    assert_eq!(conflict["status"], "True");
    assert_eq!(conflict["reason"], "OtherFieldManager");
    let message = conflict["message"].as_str().unwrap();
    assert!(message.contains("\"kubectl-edit\""), "{message}");
    assert!(message.contains(&format!("cluster1/{name}")), "{message}");
    obj["status"] = status.clone();
    obj = hub.stored(obj);
    for _ in 0..3 {
        run(reads(false), obj.clone()).await;
    }
    let stored = hub.works.lock().unwrap().get("cluster1", &name).unwrap();
    assert_eq!(stored["spec"], template("hand-made"), "not overwritten");
    // The carrier was created once and its status written once: the
    // conflict is OCM's field (a condition), the rollout status unchanged.
    let carrier_writes: Vec<Method> = hub
        .carrier_requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.method != Method::GET)
        .map(|r| r.method.clone())
        .collect();
    assert_eq!(carrier_writes, [Method::POST, Method::PATCH]);
    drop(events);
    let written = events_server.await.unwrap();
    assert_eq!(written[0].body["reason"], "CarrierBound");
    let note = written[0].body["note"].as_str().unwrap();
    assert!(note.contains("an empty one was created"), "{note}");
    let event = &written[1].body;
    assert_eq!(event["reason"], "ManifestWorkConflict");
    assert_eq!(event["type"], "Warning");
    assert!(
        event["note"].as_str().unwrap().contains("\"kubectl-edit\""),
        "{event}"
    );
}

/// An apply without force over a field another manager owns is refused
/// with 409 by the API server (the controller's copy did not show the other
/// writer yet): the controller reports it as a conflict, not as a success.
#[tokio::test]
async fn an_apply_refused_with_409_is_a_conflict() {
    use common::fields::expect_apply;

    let (v1, v2) = (template("v1"), template("v2"));
    // v1 is rolled out everywhere, as the carrier's status says.
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT}]),
        json!({"currentRevision": hash_of(&v1), "updateRevision": hash_of(&v1)}),
    );
    let name = work_name(NS, MWRS, PLACEMENT);
    // The controller applied v1; the copy it reads is that one.
    let mut applied = stored_work("cluster1", &v1, 1, json!({}), Value::Null);
    applied["metadata"]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| ["name", "namespace", "labels", "annotations"].contains(&k.as_str()));
    let (code, stale) = hub
        .works
        .lock()
        .unwrap()
        .apply("rollout-controller", false, &applied);
    assert_eq!(code, http::StatusCode::CREATED);
    // Then a GitOps tool applies its own spec, forcing.
    let mut theirs = applied.clone();
    theirs["spec"] = template("from-git");
    let (code, _) = hub
        .works
        .lock()
        .unwrap()
        .apply("argocd-controller", true, &theirs);
    assert_eq!(code, http::StatusCode::OK);

    let obj = mwrs(v2.clone(), json!({"type": "All"}), Value::Null);
    let (client, server) = api_server_on(
        hub.clone(),
        vec![
            Expect::ok(Method::GET, works_path(), works(vec![stale])),
            Expect::ok(
                Method::GET,
                revisions_path(),
                revisions(vec![controller_revision(&v1, 1)]),
            ),
            Expect::echo(Method::POST, revisions_path()),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(Method::GET, decisions_path(), decisions(&["cluster1"])),
            expect_apply(&hub, "cluster1", &name),
            Expect::status(&obj),
        ],
    );
    let ctx = context(client, "http://127.0.0.1:1");
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    assert_eq!(
        recorded[5].params(),
        ["fieldManager=rollout-controller"],
        "no force over a work no one else owned"
    );
    let status = &recorded[6].body["status"];
    let conflict = condition(status, "ManifestWorksConflict");
    let message = conflict["message"].as_str().unwrap();
    assert!(message.contains("refused the apply"), "{message}");
    assert!(message.contains("argocd-controller"), "{message}");
    let stored = hub.works.lock().unwrap().get("cluster1", &name).unwrap();
    assert_eq!(stored["spec"], template("from-git"));
    // The rollout of v2 goes on from v1, the revision read from the carrier.
    let details = hub.carrier().unwrap()["status"].clone();
    assert_eq!(details["currentRevision"], json!(hash_of(&v1)));
    assert_eq!(details["updateRevision"], json!(hash_of(&v2)));
}

/// ManifestWorks as OCM's own ManifestWorkReplicaSet controller writes them
/// (a `generateName` name, the owner and placement labels, no
/// `controller-hash`, no annotation, the plain template) are adopted: no
/// BeginRollout or MutateManifestWork and no apply; but nothing this
/// controller did validated them, so ValidateRolloutCompletion is asked
/// for each and its verdict is the only write; then the set is complete on
/// the template's revision.
#[tokio::test]
async fn works_written_by_ocm_are_adopted_and_validated() {
    let (plugin, addr) = plugin().await;
    let gw = gateway(&[("canary", addr)]).await;
    let v1 = template("v1");
    let ocm_work = |cluster: &str| {
        json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "hellom4xqz", "namespace": cluster, "generation": 1,
                         "resourceVersion": "5",
                         "labels": {OWNER: "default.hello", PLACEMENT_NAME: PLACEMENT},
                         "managedFields": [{"manager": "work", "operation": "Update",
                             "apiVersion": "work.open-cluster-management.io/v1",
                             "time": "2025-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                             "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:workload": {}}}}]},
            "spec": v1,
            "status": {"conditions": conditions(1, "False", "2025-01-01T00:00:00Z")}
        })
    };
    // The verdict's merge patch, answered with the work it makes.
    let annotated = |mut work: Value| {
        let path = work_path(
            work["metadata"]["namespace"].as_str().unwrap(),
            "hellom4xqz",
        );
        Expect::new(Method::PATCH, path, move |patch| {
            work["metadata"]["annotations"] = patch["metadata"]["annotations"].clone();
            (http::StatusCode::OK, work)
        })
    };
    let obj = mwrs(
        v1.clone(),
        json!({"type": "Progressive", "progressive": {"maxConcurrency": 1}}),
        Value::Null,
    );
    // The plugin and the abort in the carrier, as on a hub with OCM's CRDs.
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT, "plugin": "canary", "abortOnFailure": true}]),
        Value::Null,
    );
    let (client, server) = api_server_on(
        hub.clone(),
        vec![
            Expect::ok(
                Method::GET,
                works_path(),
                works(vec![ocm_work("cluster1"), ocm_work("cluster2")]),
            ),
            Expect::ok(Method::GET, revisions_path(), revisions(vec![])),
            Expect::echo(Method::POST, revisions_path()),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(
                Method::GET,
                decisions_path(),
                decisions(&["cluster1", "cluster2"]),
            ),
            annotated(ocm_work("cluster1")),
            annotated(ocm_work("cluster2")),
            Expect::status(&obj),
            record_patch(&obj, |_| {}),
        ],
    );
    let ctx = context(client, &gw.url);
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    assert_eq!(
        plugin.calls(),
        [
            call(Initialize, ""),
            call(Validate, "cluster1"),
            call(Validate, "cluster2"),
            call(Progress, "")
        ]
    );
    for patch in &recorded[5..7] {
        let annotations = &patch.body["metadata"]["annotations"];
        assert_eq!(
            annotations["rollout.open-cluster-management.io/validation"], "Succeeded",
            "{patch:?}"
        );
        assert!(patch.body.get("spec").is_none(), "{patch:?}");
    }
    let state = plugin.requests(Progress)[0].rollout_status.clone().unwrap();
    assert_eq!(state.completed.len(), 2);
    let status = &recorded[7].body["status"];
    assert_eq!(
        condition(status, "PlacementRolledOut")["reason"],
        "Complete"
    );
    assert_eq!(status["summary"]["updated"], 2);
    // The revision the works are on is current, where the carrier keeps it.
    let details = hub.carrier().unwrap()["status"].clone();
    assert_eq!(details["currentRevision"], json!(hash_of(&v1)));
    assert_eq!(details["placements"][0]["clusterCounts"]["succeeded"], 2);
    gw.running.shutdown().await;
}

/// One reconcile of an abort on an OCM-shaped hub: cluster1 to cluster3
/// were updated to v2 (maxConcurrency 2 now), cluster2 is degraded, the
/// others progressing, cluster4 still runs v1; the placement's
/// `rollbackPace` (absent when `None`) is in the carrier, which OCM's schema
/// does not prune. Returns the clusters whose work was applied, in order,
/// after checking that each went back to v1.
async fn rollback_with_pace(pace: Option<&str>, expected: &[&str]) -> Vec<String> {
    let (v1, v2) = (template("v1"), template("v2"));
    let (r1, r2) = (hash_of(&v1), hash_of(&v2));
    let name = work_name(NS, MWRS, PLACEMENT);
    let mut entry = json!({"name": PLACEMENT, "abortOnFailure": true});
    if let Some(pace) = pace {
        entry["rollbackPace"] = json!(pace);
    }
    let hub = Hub::ocm().with_carrier(
        json!([entry]),
        json!({"currentRevision": r1, "updateRevision": r2}),
    );
    let at = "2025-01-01T00:00:00Z";
    let mut degraded = conditions(2, "True", at);
    degraded.as_array_mut().unwrap().push(json!(
        {"type": "Degraded", "status": "True", "observedGeneration": 2,
         "lastTransitionTime": at, "reason": "", "message": ""}));
    let updated = |cluster: &str, conditions: Value| {
        stored_work(
            cluster,
            &v2,
            2,
            json!({}),
            json!({"conditions": conditions}),
        )
    };
    let works_now = vec![
        updated("cluster1", conditions(2, "True", at)),
        updated("cluster2", degraded),
        updated("cluster3", conditions(2, "True", at)),
        stored_work(
            "cluster4",
            &v1,
            1,
            json!({}),
            json!({"conditions": conditions(1, "False", at)}),
        ),
    ];
    let strategy = json!({"type": "Progressive", "progressive": {"maxConcurrency": 2}});
    let obj = mwrs(v2.clone(), strategy, Value::Null);
    let mut script = vec![
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
            decisions(&["cluster1", "cluster2", "cluster3", "cluster4"]),
        ),
    ];
    for cluster in expected {
        script.push(Expect::echo(Method::PATCH, work_path(cluster, &name)));
    }
    script.push(Expect::status(&obj));
    script.push(recorded_abort(&obj, &v1, &v2));
    let (client, server) = api_server_on(hub.clone(), script);
    let ctx = context(client, "http://127.0.0.1:1");
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    let details = hub.carrier().unwrap()["status"].clone();
    assert!(details["abortedTime"].is_string(), "{details:#}");
    recorded
        .iter()
        .filter(|r| r.method == Method::PATCH && r.path.contains("/manifestworks/"))
        .map(|r| {
            assert_eq!(r.body["spec"], v1, "restored to v1");
            r.body["metadata"]["namespace"].as_str().unwrap().to_owned()
        })
        .collect()
}

/// The carrier deleted and made again mid-abort (a GitOps prune, `kubectl
/// replace --force`): its status is empty, and the current revision and
/// the abort come back from what the set records in its annotations, so
/// the failed revision is not rolled out again and the rollback goes on.
#[tokio::test]
async fn an_abort_survives_its_carrier_made_again() {
    let (v1, v2) = (template("v1"), template("v2"));
    let name = work_name(NS, MWRS, PLACEMENT);
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT, "abortOnFailure": true}]),
        Value::Null,
    );
    let at = "2025-01-01T00:00:00Z";
    let updated = |cluster: &str| {
        stored_work(
            cluster,
            &v2,
            2,
            json!({}),
            json!({"conditions": conditions(2, "True", at)}),
        )
    };
    let strategy = json!({"type": "Progressive", "progressive": {"maxConcurrency": 2}});
    let mut obj = mwrs(v2.clone(), strategy, Value::Null);
    obj["metadata"]["annotations"] = json!({
        "rollout-hooks.io/update-revision": hash_of(&v2),
        "rollout-hooks.io/current-revision": hash_of(&v1),
        "rollout-hooks.io/aborted-time": "2025-01-01T00:00:05Z",
    });
    let mut script = vec![
        Expect::ok(
            Method::GET,
            works_path(),
            works(vec![
                updated("cluster1"),
                updated("cluster2"),
                stored_work(
                    "cluster3",
                    &v1,
                    1,
                    json!({}),
                    json!({"conditions": conditions(1, "False", at)}),
                ),
            ]),
        ),
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
    ];
    for cluster in ["cluster1", "cluster2"] {
        script.push(Expect::echo(Method::PATCH, work_path(cluster, &name)));
    }
    script.push(Expect::status(&obj));
    let (client, server) = api_server_on(hub.clone(), script);
    let ctx = context(client, "http://127.0.0.1:1");
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    for patch in recorded
        .iter()
        .filter(|r| r.path.contains("/manifestworks/"))
    {
        assert_eq!(
            patch.body["spec"], v1,
            "restored to v1, never v2: {}",
            patch.path
        );
    }
    let details = hub.carrier().unwrap()["status"].clone();
    assert_eq!(details["currentRevision"], json!(hash_of(&v1)));
    assert_eq!(details["abortedTime"], "2025-01-01T00:00:05Z");
}

/// `rollbackPace` reaches the abort from the carrier: by default every
/// updated cluster is restored in the abort's reconcile, the failing one
/// first; with `Strategy`, as many as maxConcurrency allows, in the
/// rollout's order.
#[tokio::test]
async fn the_carriers_rollback_pace_sets_how_an_abort_restores() {
    let at_once = ["cluster2", "cluster1", "cluster3"];
    assert_eq!(rollback_with_pace(None, &at_once).await, at_once);
    assert_eq!(rollback_with_pace(Some("AtOnce"), &at_once).await, at_once);
    let paced = ["cluster1", "cluster2"];
    assert_eq!(rollback_with_pace(Some("Strategy"), &paced).await, paced);
}

/// A plugin that refuses the rollout's input (INVALID_ARGUMENT through the
/// real gateway): the status says so at once, the reconciles that follow at
/// the same generation call no plugin and back off, and a new generation
/// calls it again at once.
#[tokio::test]
async fn a_permanent_plugin_error_backs_off_until_the_spec_changes() {
    let (plugin, addr) = plugin().await;
    plugin.script.lock().unwrap().begin_error = Some((
        tonic::Code::InvalidArgument,
        "pluginConfig.weights: expected a list of numbers".to_owned(),
    ));
    let gw = gateway(&[("canary", addr)]).await;
    let v2 = template("v2");
    let strategy = json!({"type": "All"});
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT, "plugin": "canary", "pluginConfig": {"weights": "x"}}]),
        Value::Null,
    );
    let clusters = ["cluster1", "cluster2"];
    let gen1 = mwrs(v2.clone(), strategy.clone(), Value::Null);
    let mut gen2 = gen1.clone();
    gen2["metadata"]["generation"] = json!(2);
    let (client, server) = api_server_on(
        hub,
        vec![
            // The first reconcile: the hooks fail, the status says why.
            Expect::ok(Method::GET, works_path(), works(vec![])),
            Expect::ok(Method::GET, revisions_path(), revisions(vec![])),
            Expect::echo(Method::POST, revisions_path()),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(Method::GET, decisions_path(), decisions(&clusters)),
            Expect::status(&gen1),
            // The reconcile at generation 2.
            Expect::ok(Method::GET, works_path(), works(vec![])),
            Expect::ok(
                Method::GET,
                revisions_path(),
                revisions(vec![controller_revision(&v2, 1)]),
            ),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(Method::GET, decisions_path(), decisions(&clusters)),
            Expect::status(&gen2),
        ],
    );
    let ctx = context(client, &gw.url);
    let begins = || {
        plugin
            .calls()
            .iter()
            .filter(|(hook, _)| *hook == Begin)
            .count()
    };

    let first = reconcile(object(gen1.clone()), ctx.clone())
        .await
        .expect("reconciled");
    assert_eq!(first, Action::requeue(Duration::from_secs(5)));
    assert_eq!(begins(), 2);
    // Triggers at the same generation (its own status write, a work's
    // status) within the backoff call nothing.
    for _ in 0..20 {
        let again = reconcile(object(gen1.clone()), ctx.clone())
            .await
            .expect("reconciled");
        // Requeued within the backoff, not at the 30-minute resync.
        assert_ne!(again, Action::requeue(Duration::from_secs(30 * 60)));
        assert_ne!(again, Action::await_change());
    }
    assert_eq!(begins(), 2);
    // A fixed spec is tried at once.
    reconcile(object(gen2), ctx.clone())
        .await
        .expect("reconciled");
    assert_eq!(begins(), 4);
    drop(ctx);
    let recorded = server.await.unwrap();
    let status = &recorded[5].body["status"];
    let progressing = condition(status, "Progressing");
    assert_eq!(progressing["status"], json!("False"), "{status}");
    assert_eq!(progressing["reason"], json!("PluginCallFailed"));
    let message = progressing["message"].as_str().unwrap();
    assert!(message.contains("INVALID_ARGUMENT"), "{message}");
    assert!(
        message.contains("pluginConfig.weights: expected a list of numbers"),
        "{message}"
    );
}

/// A mutated work the controller refuses (the gateway passed it: its
/// identity is kept, but it has no `spec`): nothing is applied, and the
/// status says which cluster's MutateManifestWork failed and why.
#[tokio::test]
async fn a_refused_mutation_is_in_the_status() {
    let (plugin, addr) = plugin().await;
    plugin.script.lock().unwrap().drop_spec = true;
    let gw = gateway(&[("canary", addr)]).await;
    let v2 = template("v2");
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT, "plugin": "canary"}]),
        Value::Null,
    );
    let clusters = ["cluster1"];
    let gen1 = mwrs(v2.clone(), json!({"type": "All"}), Value::Null);
    let (client, server) = api_server_on(
        hub,
        vec![
            Expect::ok(Method::GET, works_path(), works(vec![])),
            Expect::ok(Method::GET, revisions_path(), revisions(vec![])),
            Expect::echo(Method::POST, revisions_path()),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(Method::GET, decisions_path(), decisions(&clusters)),
            Expect::status(&gen1),
        ],
    );
    let ctx = context(client, &gw.url);
    reconcile(object(gen1), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    let status = &recorded[5].body["status"];
    let progressing = condition(status, "Progressing");
    assert_eq!(progressing["reason"], json!("PluginCallFailed"), "{status}");
    let message = progressing["message"].as_str().unwrap();
    assert!(
        message.contains(
            "cluster1: MutateManifestWork failed: INTERNAL: the mutated ManifestWork cannot be read"
        ),
        "{message}"
    );
}

/// An OCM upgrade whose CRD adds a defaulted field (1.2's
/// `manifestConfigs[].feedbackScrapeType: Poll`): the stored template
/// gains it, and nothing is rolled out again: the revision and every
/// work's spec hash are the same.
#[tokio::test]
async fn a_field_the_api_server_defaults_after_an_upgrade_rolls_nothing_out() {
    let rule = json!({"type": "CEL", "condition": "Complete", "celExpressions": ["true"]});
    let identifier =
        json!({"group": "", "resource": "configmaps", "name": "cm", "namespace": "default"});
    let mut before = template("v1");
    before["manifestConfigs"] =
        json!([{"resourceIdentifier": identifier, "conditionRules": [rule]}]);
    let mut after = before.clone();
    after["manifestConfigs"][0]["feedbackScrapeType"] = json!("Poll");
    let hash = hash_of(&before);
    let hub = Hub::ocm().with_carrier(
        json!([{"name": PLACEMENT}]),
        json!({"currentRevision": hash, "updateRevision": hash}),
    );
    let at = "2025-01-01T00:00:00Z";
    let clusters = ["cluster1", "cluster2"];
    let stored: Vec<Value> = clusters
        .iter()
        .map(|c| {
            stored_work(
                c,
                &before,
                1,
                json!({}),
                json!({"conditions": conditions(1, "False", at)}),
            )
        })
        .collect();
    let obj = mwrs(after.clone(), json!({"type": "All"}), Value::Null);
    let (client, server) = api_server_on(
        hub.clone(),
        vec![
            Expect::ok(Method::GET, works_path(), works(stored)),
            Expect::ok(
                Method::GET,
                revisions_path(),
                revisions(vec![controller_revision(&before, 1)]),
            ),
            Expect::ok(Method::GET, placement_path(), placement()),
            Expect::ok(Method::GET, decisions_path(), decisions(&clusters)),
            Expect::status(&obj),
        ],
    );
    let ctx = context(client, "http://127.0.0.1:1");
    reconcile(object(obj), ctx.clone())
        .await
        .expect("reconciled");
    drop(ctx);
    let recorded = server.await.unwrap();
    assert!(
        !recorded.iter().any(|r| r.path.contains("/manifestworks/")),
        "no work written again: {:?}",
        recorded
            .iter()
            .map(|r| (&r.method, &r.path))
            .collect::<Vec<_>>()
    );
    let status = &hub.carrier().unwrap()["status"];
    assert_eq!(status["updateRevision"], json!(hash));
    assert_eq!(status["currentRevision"], json!(hash));
}
