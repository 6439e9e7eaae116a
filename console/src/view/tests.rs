//! The view of fixtures: a rollout mid-way (one cluster progressing, one
//! validating), an abort rolling back, a finished rollout; each asserted
//! on what a person reads.

use serde_json::{Value, json};

use super::*;

pub(crate) const NOW: &str = "2025-03-01T12:00:00Z";

pub(crate) fn at(text: &str) -> Timestamp {
    text.parse().expect("a timestamp")
}

fn mwrs(status: Value) -> ManifestWorkReplicaSet {
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
        "metadata": {"name": "hello", "namespace": "default"},
        "spec": {"placementRefs": [{"name": "canary", "rolloutStrategy": {
            "type": "Progressive", "progressive": {"maxConcurrency": 2, "progressDeadline": "60s"}}}]},
        "status": status
    }))
    .expect("a ManifestWorkReplicaSet")
}

fn carrier(plugin: &str, status: Value) -> ManifestWorkReplicaSetRollout {
    serde_json::from_value(json!({
        "apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
        "metadata": {"name": "hello", "namespace": "default"},
        "spec": {"placements": [{"name": "canary", "plugin": plugin, "abortOnFailure": true}]},
        "status": status
    }))
    .expect("a ManifestWorkReplicaSetRollout")
}

/// A work of `revision` on `cluster`: Applied, and Progressing
/// `progressing` since `since`; Degraded when `degraded`.
fn work(
    cluster: &str,
    revision: &str,
    progressing: &str,
    degraded: bool,
    since: &str,
) -> ManifestWork {
    let mut conditions = vec![
        json!({"type": "Applied", "status": "True", "observedGeneration": 1,
               "lastTransitionTime": since, "reason": "", "message": ""}),
        json!({"type": "Progressing", "status": progressing, "observedGeneration": 1,
               "lastTransitionTime": since, "reason": "", "message": ""}),
    ];
    if degraded {
        conditions.push(
            json!({"type": "Degraded", "status": "True", "observedGeneration": 1,
                               "lastTransitionTime": since, "reason": "", "message": ""}),
        );
    }
    serde_json::from_value(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "hello-0", "namespace": cluster, "generation": 1, "labels": {
            "work.open-cluster-management.io/controller-hash": revision,
            "work.open-cluster-management.io/placementname": "canary",
            "work.open-cluster-management.io/manifestworkreplicaset": "default.hello"}},
        "spec": {},
        "status": {"conditions": conditions}
    }))
    .expect("a ManifestWork")
}

fn decisions(clusters: &[&str]) -> Vec<PlacementDecision> {
    let decisions: Vec<Value> = clusters
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    vec![
        serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
            "metadata": {"name": "canary-decision-1", "namespace": "default", "labels": {
                "cluster.open-cluster-management.io/placement": "canary",
                "cluster.open-cluster-management.io/decision-group-index": "0",
                "cluster.open-cluster-management.io/decision-group-name": "canaries"}},
            "status": {"decisions": decisions}
        }))
        .expect("a PlacementDecision"),
    ]
}

fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastTransitionTime": "2025-03-01T11:50:00Z"})
}

const CLUSTERS: [&str; 4] = ["cluster-001", "cluster-002", "cluster-003", "cluster-004"];

/// Mid-rollout of r2 over r1: cluster-001 done, cluster-002 validating,
/// cluster-003 progressing for 18s, cluster-004 still on r1.
pub(crate) fn mid_rollout() -> Snapshot {
    let status = json!({"conditions": [
        condition("PlacementVerified", "True", "AsExpected", ""),
        condition("PluginLoaded", "True", "Available", "Plugin smoke-test is available."),
        condition("Progressing", "True", "NewRevisionCreated", "Rolling out revision r2: 1 of 4 clusters updated.")]});
    let details = json!({"currentRevision": "r1", "updateRevision": "r2", "placements": [{"name": "canary",
        "clusterCounts": {"toApply": 1, "progressing": 1, "validating": 1, "succeeded": 1},
        "clusters": [
            {"clusterName": "cluster-002", "rolloutStatus": "Validating", "groupIndex": 0,
             "lastTransitionTime": "2025-03-01T11:59:30Z", "revision": "r2", "message": "smoke test 3/5"},
            {"clusterName": "cluster-003", "rolloutStatus": "Progressing", "groupIndex": 0,
             "lastTransitionTime": "2025-03-01T11:59:42Z", "revision": "r2"},
            {"clusterName": "cluster-004", "rolloutStatus": "ToApply", "groupIndex": 0}]}]});
    Snapshot {
        mwrs: mwrs(status),
        carrier: Some(carrier("smoke-test", details)),
        works: vec![
            work("cluster-001", "r2", "False", false, "2025-03-01T11:58:00Z"),
            work("cluster-002", "r2", "False", false, "2025-03-01T11:59:30Z"),
            work("cluster-003", "r2", "True", false, "2025-03-01T11:59:42Z"),
            work("cluster-004", "r1", "False", false, "2025-03-01T10:00:00Z"),
        ],
        decisions: decisions(&CLUSTERS),
        events: Vec::new(),
    }
}

/// r2 failed validation on cluster-002 and was aborted at 11:58: two
/// clusters are back on r1, two still to roll back.
pub(crate) fn aborted() -> Snapshot {
    let message = "Rollout of revision r2 aborted: placement canary: cluster-002 Failed (error rate 7%). \
                   Rolling back to revision r1: 2 of 4 clusters restored.";
    let status = json!({"conditions": [
        condition("PlacementRolledOut", "False", "RolloutDegraded", message),
        condition("Progressing", "False", "RolloutAborted", message)]});
    let details = json!({"currentRevision": "r1", "updateRevision": "r2",
        "abortedTime": "2025-03-01T11:58:00Z", "placements": [{"name": "canary",
        "clusterCounts": {"toApply": 2, "succeeded": 2},
        "clusters": [
            {"clusterName": "cluster-001", "rolloutStatus": "ToApply", "groupIndex": 0, "revision": "r2"},
            {"clusterName": "cluster-002", "rolloutStatus": "ToApply", "groupIndex": 0, "revision": "r2"}]}]});
    let event: Event = serde_json::from_value(json!({
        "metadata": {"name": "hello.1", "namespace": "default"},
        "eventTime": "2025-03-01T11:58:00.000000Z", "type": "Warning", "reason": "AbortStarted",
        "action": "Abort", "reportingController": "rollout-controller", "reportingInstance": "x",
        "note": "Rollout of revision r2 aborted: placement canary: cluster-002 Failed (error rate 7%). Rolling back to revision r1."
    }))
    .expect("an Event");
    Snapshot {
        mwrs: mwrs(status),
        carrier: Some(carrier("smoke-test", details)),
        works: vec![
            work("cluster-001", "r2", "False", false, "2025-03-01T11:57:00Z"),
            work("cluster-002", "r2", "False", true, "2025-03-01T11:57:30Z"),
            work("cluster-003", "r1", "False", false, "2025-03-01T11:59:00Z"),
            work("cluster-004", "r1", "False", false, "2025-03-01T10:00:00Z"),
        ],
        decisions: decisions(&CLUSTERS),
        events: vec![event],
    }
}

fn cluster<'v>(view: &'v View, name: &str) -> &'v ClusterView {
    view.placements[0].groups[0]
        .clusters
        .iter()
        .find(|c| c.name == name)
        .expect("the cluster is in the view")
}

#[test]
fn mid_rollout_says_which_cluster_is_validated_and_which_progresses() {
    let view = build(&mid_rollout(), at(NOW));
    assert_eq!(view.phase, Phase::Progressing);
    assert_eq!(
        view.waiting,
        vec![
            "validating cluster-002: smoke-test says INPROGRESS: smoke test 3/5",
            "waiting for cluster-003 to finish progressing (deadline in 42s)",
            "1 cluster to apply, as the strategy allows: cluster-004",
        ]
    );
    // Left out of the report, and its work is of r2: it has succeeded.
    assert_eq!(
        cluster(&view, "cluster-001").status,
        RolloutStatus::Succeeded
    );
    assert_eq!(
        cluster(&view, "cluster-004").revision_role,
        RevisionRole::Current
    );
    assert_eq!(
        cluster(&view, "cluster-003").revision_role,
        RevisionRole::Update
    );
    let text = render(&view);
    for want in [
        "Status:     ◌ Progressing",
        "Revisions:  update r2 · current r1",
        "plugin    smoke-test",
        "0 canaries  cluster-001",
        "cluster-002  ◷ Validating",
        "r2 (update)",
        "smoke test 3/5",
        "cluster-004  · ToApply",
        "r1 (current)",
    ] {
        assert!(text.contains(want), "{want:?} missing from\n{text}");
    }
}

#[test]
fn an_abort_says_when_and_how_many_clusters_roll_back() {
    let view = build(&aborted(), at(NOW));
    assert_eq!(view.phase, Phase::RollingBack);
    assert_eq!(view.desired_revision.as_deref(), Some("r1"));
    assert_eq!(
        view.waiting[0],
        "aborted at 11:58:00Z (2m0s ago): rolling back 2 clusters to revision r1"
    );
    assert!(
        view.waiting.contains(
            &"2 clusters to roll back, as the strategy allows: cluster-001 … cluster-002"
                .to_owned()
        ),
        "{:?}",
        view.waiting
    );
    let text = render(&view);
    for want in [
        "↺ RollingBack",
        "Aborted:    2025-03-01T11:58:00Z (2m0s ago)",
        "cluster-003  ✔ Succeeded",
        "Warning  AbortStarted  2m0s ago  Rollout of revision r2 aborted",
        "  Progressing         False  RolloutAborted   Rollout of revision r2 aborted",
    ] {
        assert!(text.contains(want), "{want:?} missing from\n{text}");
    }
}

#[test]
fn a_finished_rollout_has_nothing_to_wait_for() {
    let status = json!({"conditions": [
        condition("Progressing", "True", "NewManifestWorkAvailable", "Revision r2 is rolled out to every cluster.")]});
    let snapshot = Snapshot {
        mwrs: mwrs(status),
        carrier: Some(carrier(
            "",
            json!({"currentRevision": "r2", "updateRevision": "r2"}),
        )),
        works: CLUSTERS
            .iter()
            .map(|c| work(c, "r2", "False", false, "2025-03-01T11:00:00Z"))
            .collect(),
        decisions: decisions(&CLUSTERS),
        events: Vec::new(),
    };
    let mut snapshot = snapshot;
    // No plugin: a work done progressing has succeeded.
    if let Some(c) = snapshot.carrier.as_mut() {
        c.spec.placements.clear();
    }
    let view = build(&snapshot, at(NOW));
    assert_eq!(view.phase, Phase::Healthy);
    assert_eq!(
        view.waiting,
        vec!["nothing: revision r2 runs on every cluster"]
    );
}

#[test]
fn a_passed_deadline_and_a_failure_are_said() {
    let mut snapshot = mid_rollout();
    snapshot.works[1] = work("cluster-002", "r2", "True", true, "2025-03-01T11:59:30Z");
    let view = build(&snapshot, at("2025-03-01T12:01:00Z"));
    assert!(
        view.waiting.contains(
            &"waiting for cluster-003 to finish progressing (deadline passed 18s ago)".to_owned()
        ),
        "{:?}",
        view.waiting
    );
    // The status still lists cluster-002 as Validating: the controller's
    // word stands until its next reconcile.
    assert_eq!(
        cluster(&view, "cluster-002").status,
        RolloutStatus::Validating
    );
}

#[test]
fn the_json_view_names_its_fields_in_camel_case() {
    let value = serde_json::to_value(build(&aborted(), at(NOW))).expect("serializes");
    assert_eq!(value["phase"], "RollingBack");
    assert_eq!(value["abortedTime"], "2025-03-01T11:58:00Z");
    assert_eq!(
        value["placements"][0]["groups"][0]["clusters"][2]["revisionRole"],
        "current"
    );
    assert_eq!(value["events"][0]["reason"], "AbortStarted");
}

#[test]
fn a_big_group_lists_the_clusters_not_done_and_sums_up_the_rest() {
    let names: Vec<String> = (1..=40).map(|i| format!("cluster-{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut snapshot = mid_rollout();
    snapshot.decisions = decisions(&refs);
    snapshot.works = names
        .iter()
        .map(|c| work(c, "r2", "False", false, "2025-03-01T11:00:00Z"))
        .collect();
    if let Some(c) = snapshot.carrier.as_mut() {
        c.spec.placements.clear();
    }
    let text = render(&build(&snapshot, at(NOW)));
    assert!(
        text.contains(
            "group 0 canaries: 37 more; ✔ Succeeded: cluster-001, cluster-005 … cluster-040"
        ),
        "{text}"
    );
}

#[test]
fn the_kubectl_plugin_is_known_by_its_file_name() {
    use std::ffi::OsStr;
    for (argv0, want) in [
        ("kubectl-mwrs", true),
        ("/usr/local/bin/kubectl-mwrs", true),
        ("C:\\bin\\kubectl-mwrs.exe", cfg!(windows)),
        ("kubectl-mwrs.exe", true),
        ("rollout-controller", false),
        ("/opt/kubectl-mwrs/rollout-controller", false),
        ("kubectl-mwrs-old", false),
    ] {
        assert_eq!(is_kubectl_plugin(OsStr::new(argv0)), want, "{argv0}");
    }
}

#[test]
fn failing_hook_calls_and_a_missing_placement_degrade_the_rollout() {
    let mut snapshot = mid_rollout();
    snapshot.mwrs = mwrs(json!({"conditions": [
        condition("PlacementVerified", "False", "PlacementDecisionNotFound", "placement canary not found"),
        condition("Progressing", "False", "PluginCallFailed",
                  "placement canary: BeginRollout for cluster-003 failed: Unavailable: circuit open")]}));
    let view = build(&snapshot, at(NOW));
    assert_eq!(view.phase, Phase::Degraded);
    assert_eq!(
        &view.waiting[..2],
        [
            "placements not usable (PlacementDecisionNotFound): placement canary not found",
            "hook calls failing: placement canary: BeginRollout for cluster-003 failed: Unavailable: circuit open",
        ]
    );
    assert!(render(&view).contains("Status:     ✖ Degraded"));
}

#[test]
fn a_report_without_counts_says_nothing_of_the_clusters_it_leaves_out() {
    // As a hub that pruned the controller's details leaves the status.
    let mut snapshot = mid_rollout();
    if let Some(status) = snapshot.carrier.as_mut().and_then(|c| c.status.as_mut()) {
        status.placements[0].cluster_counts = ClusterCounts::default();
        status.placements[0].clusters.clear();
    }
    let view = build(&snapshot, at(NOW));
    // Done progressing, no verdict persisted: the plugin is validating it.
    assert_eq!(
        cluster(&view, "cluster-001").status,
        RolloutStatus::Validating
    );
    assert_eq!(
        cluster(&view, "cluster-003").status,
        RolloutStatus::Progressing
    );
}

#[test]
fn frames_clear_a_terminal_and_are_separated_in_a_pipe() {
    use super::hub::{Output, write_frame};
    let view = build(&mid_rollout(), at(NOW));
    let frames = |output: Output| {
        let mut out = Vec::new();
        write_frame(&mut out, &view, output, true).expect("writes");
        write_frame(&mut out, &view, output, false).expect("writes");
        String::from_utf8(out).expect("UTF-8")
    };
    let terminal = frames(Output::Terminal);
    assert_eq!(terminal.matches("\x1b[H\x1b[2J").count(), 2);
    assert!(terminal.starts_with("\x1b[H\x1b[2JName:"));
    let piped = frames(Output::Appended);
    assert!(!piped.contains('\x1b'));
    assert_eq!(piped.matches("\n────").count(), 1, "{piped}");
    assert!(piped.starts_with("Name:"));
    let json = frames(Output::Json);
    assert_eq!(json.lines().count(), 2);
    for line in json.lines() {
        let value: serde_json::Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(value["name"], "hello");
    }
}

/// `snapshot` with the carrier's `spec.control` and `status.control` as
/// given.
fn controlled(mut snapshot: Snapshot, spec: Value, status: Value) -> Snapshot {
    let carrier = snapshot.carrier.as_mut().expect("a carrier");
    carrier.spec.control = serde_json::from_value(spec).expect("spec.control");
    carrier.status.as_mut().expect("a status").control =
        serde_json::from_value(status).expect("status.control");
    snapshot
}

#[test]
fn a_pause_says_who_when_and_why_and_a_request_not_read_yet_is_said() {
    let pause = json!({"time": "2025-03-01T11:55:00Z", "by": "alice", "reason": "5xx above 1%"});
    let snapshot = controlled(
        mid_rollout(),
        json!({"paused": pause, "retry": {"requestedTime": "2025-03-01T11:59:50Z", "by": "bob"}}),
        json!({"paused": pause}),
    );
    let view = build(&snapshot, at(NOW));
    assert_eq!(view.phase, Phase::Paused);
    assert_eq!(
        view.waiting[..2],
        [
            "a resume: paused by alice (5xx above 1%) 5m0s ago; no new cluster starts (1 to apply), `rollout-controller resume hello` lifts it",
            "the controller to read the retry requested by bob at 11:59:50Z",
        ]
    );
    assert_eq!(
        view.waiting.last().map(String::as_str),
        Some("1 cluster to apply, once resumed: cluster-004")
    );
    let text = render(&view);
    for want in [
        "Status:     ॥ Paused",
        "Paused:     by alice (5xx above 1%) at 2025-03-01T11:55:00Z (5m0s ago)",
    ] {
        assert!(text.contains(want), "{want:?} missing from\n{text}");
    }
    let json = serde_json::to_value(&view).expect("serializes");
    assert_eq!(json["paused"]["by"], "alice");
    assert_eq!(json["paused"]["observed"], true);
    assert_eq!(json["requests"][0]["kind"], "retry");
}

#[test]
fn an_abort_an_operator_asked_for_names_them_and_an_ignored_request_says_why() {
    let abort =
        json!({"requestedTime": "2025-03-01T11:57:59Z", "by": "alice", "reason": "error rate"});
    let snapshot = controlled(
        aborted(),
        json!({"abort": abort, "promote": {"requestedTime": "2025-03-01T11:59:00Z", "by": "bob"}}),
        json!({"abort": {"requestedTime": "2025-03-01T11:57:59Z", "by": "alice", "reason": "error rate",
                         "observedTime": "2025-03-01T11:58:00Z", "revision": "r2", "result": "Acted",
                         "message": "the rollout of revision r2 is aborted: rolling back to revision r1"},
               "promote": {"requestedTime": "2025-03-01T11:59:00Z", "by": "bob",
                           "observedTime": "2025-03-01T11:59:01Z", "revision": "r1", "result": "Stale",
                           "message": "made for revision r1, not the update revision r2"}}),
    );
    let view = build(&snapshot, at(NOW));
    assert_eq!(view.phase, Phase::RollingBack);
    assert_eq!(
        view.waiting[0],
        "aborted by alice (error rate) at 11:58:00Z (2m0s ago): rolling back 2 clusters to revision r1"
    );
    // The promotion was about another revision: not this rollout's.
    assert_eq!(view.requests.len(), 1);
    let snapshot = controlled(
        aborted(),
        json!({"retry": {"requestedTime": "2025-03-01T11:59:00Z", "by": "bob"}}),
        json!({"retry": {"requestedTime": "2025-03-01T11:59:00Z", "by": "bob",
                         "observedTime": "2025-03-01T11:59:01Z", "revision": "r2", "result": "Unneeded",
                         "message": "the rollout of revision r2 is not aborted"}}),
    );
    let view = build(&snapshot, at(NOW));
    assert!(
        view.waiting.contains(
            &"nothing more for the retry requested by bob at 11:59:00Z: it did nothing, the rollout of revision r2 is not aborted".to_owned()
        ),
        "{:?}",
        view.waiting
    );
}
