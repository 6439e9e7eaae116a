//! The orchestration with scripted hooks and the in-memory world: the order
//! of hook calls and writes, the request fields, failures, validation,
//! abort and hold.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;

use rollout_proto::v1alpha1::{
    self as proto, InitializeRequest, InitializeResponse, RolloutPluginRequest, ValidateResponse,
};
use serde_json::{Value, json};

use bytes::Bytes;

mod control;

use super::memory::{MemoryWorld, Write};
use super::*;
use crate::api::annotations::{OWNER_ANNOTATION, SPEC_HASH_ANNOTATION, VALIDATION_ANNOTATION};
use crate::api::labels::{CONTROLLER_HASH_LABEL, MWRS_OWNER_LABEL, PLACEMENT_NAME_LABEL};
use crate::api::{ManifestWork, ManifestWorkSpec};
use crate::hooks::{HookError, HookKind, Hooks, Mutation, PerHook, RolloutRequest, StateDetail};
use crate::revision::{self, AbortAction, Revision, spec_hash};
use crate::rollout::{ClusterGroup, RawStrategy, RolloutStatus, Strategy};

/// Hooks that record every call and answer as scripted.
#[derive(Default)]
struct Script {
    calls: Mutex<Vec<(HookKind, RolloutPluginRequest, Option<Value>)>>,
    /// Per cluster; SUCCEEDED when not set.
    validate: Mutex<HashMap<String, ValidateResponse>>,
    /// `(hook, cluster)` → error; `""` for ProgressRollout.
    fail: Mutex<HashMap<(HookKind, String), tonic::Code>>,
    /// Per cluster, a change MutateManifestWork makes besides its own.
    rewrite: Mutex<HashMap<String, Rewrite>>,
}

/// A change to a mutated work.
type Rewrite = fn(&mut Value);

impl Script {
    fn calls(&self) -> Vec<(HookKind, String)> {
        self.calls
            .lock()
            .expect("lock")
            .iter()
            .map(|(h, r, _)| (*h, r.cluster_name.clone()))
            .collect()
    }

    fn requests(&self, hook: HookKind) -> Vec<RolloutPluginRequest> {
        self.calls
            .lock()
            .expect("lock")
            .iter()
            .filter(|(h, _, _)| *h == hook)
            .map(|(_, r, _)| r.clone())
            .collect()
    }

    fn mutated_inputs(&self) -> Vec<Value> {
        self.calls
            .lock()
            .expect("lock")
            .iter()
            .filter_map(|(_, _, w)| w.clone())
            .collect()
    }

    fn clear(&self) {
        self.calls.lock().expect("lock").clear();
    }

    fn answer(
        &self,
        cluster: &str,
        result: proto::ValidationResult,
        message: &str,
        recheck: Option<i64>,
    ) {
        self.validate.lock().expect("lock").insert(
            cluster.into(),
            ValidateResponse {
                result: result as i32,
                message: message.into(),
                recheck_after: recheck.map(|s| prost_types::Duration {
                    seconds: s,
                    nanos: 0,
                }),
            },
        );
    }

    fn enter(
        &self,
        hook: HookKind,
        request: &RolloutPluginRequest,
        work: Option<Value>,
    ) -> Result<(), HookError> {
        self.calls
            .lock()
            .expect("lock")
            .push((hook, request.clone(), work));
        match self
            .fail
            .lock()
            .expect("lock")
            .get(&(hook, request.cluster_name.clone()))
        {
            Some(code) => Err(HookError {
                hook,
                code: *code,
                message: format!("plugin \"p\": scripted {hook} failure"),
                origin: crate::hooks::Origin::Answer,
            }),
            None => Ok(()),
        }
    }
}

impl PerHook for Script {
    async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, HookError> {
        Ok(InitializeResponse::default())
    }

    async fn begin_rollout(&self, request: RolloutRequest) -> Result<(), HookError> {
        self.enter(HookKind::BeginRollout, &request.decode_full(), None)
    }

    async fn progress_rollout(&self, request: RolloutRequest) -> Result<(), HookError> {
        self.enter(HookKind::ProgressRollout, &request.decode_full(), None)
    }

    async fn validate_rollout_completion(
        &self,
        request: RolloutRequest,
    ) -> Result<ValidateResponse, HookError> {
        let rollout = request.decode_full();
        self.enter(HookKind::ValidateRolloutCompletion, &rollout, None)?;
        Ok(self
            .validate
            .lock()
            .expect("lock")
            .get(&rollout.cluster_name)
            .cloned()
            .unwrap_or(ValidateResponse {
                result: proto::ValidationResult::Succeeded as i32,
                message: "ok".into(),
                recheck_after: None,
            }))
    }

    async fn mutate_manifest_work(
        &self,
        request: RolloutRequest,
        manifest_work: Bytes,
    ) -> Result<Mutation, HookError> {
        let rollout = request.decode_full();
        let mut work: Value = serde_json::from_slice(&manifest_work).expect("JSON work");
        self.enter(HookKind::MutateManifestWork, &rollout, Some(work.clone()))?;
        work["metadata"]["annotations"]["test/cluster-index"] =
            json!(rollout.cluster_index.to_string());
        work["metadata"]["annotations"]["test/aborting"] = json!(rollout.aborting.to_string());
        if let Some(rewrite) = self
            .rewrite
            .lock()
            .expect("lock")
            .get(&rollout.cluster_name)
        {
            rewrite(&mut work);
        }
        Ok(Mutation {
            work: Some(serde_json::to_vec(&work).expect("encodes").into()),
            mutated_by: vec!["p".into()],
            failed_open: Vec::new(),
        })
    }
}

fn template(version: &str) -> ManifestWorkSpec {
    serde_json::from_value(json!({"workload": {"manifests": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"},
         "data": {"version": version}}
    ]}}))
    .expect("a spec")
}

fn strategy(raw: Value) -> Strategy {
    let raw: RawStrategy = serde_json::from_value(raw).expect("raw strategy");
    Strategy::from_raw(&raw).expect("valid")
}

fn groups(clusters: &[&str]) -> Vec<ClusterGroup> {
    vec![ClusterGroup {
        index: 0,
        name: String::new(),
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
    }]
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).expect("time")
}

struct Fixture {
    strategy: Strategy,
    groups: Vec<ClusterGroup>,
    update: Revision,
    current: Option<Revision>,
    aborted_at: Option<Timestamp>,
    hold: Option<String>,
    settings: Settings,
    labels: BTreeMap<String, String>,
    state_detail: StateDetail,
    control: ManualControl,
}

impl Fixture {
    fn new(strategy: Strategy, clusters: &[&str]) -> Fixture {
        Fixture {
            strategy,
            groups: groups(clusters),
            update: Revision::of(&template("v2")),
            current: None,
            aborted_at: None,
            hold: None,
            settings: Settings::default(),
            labels: BTreeMap::new(),
            state_detail: StateDetail::Full,
            control: ManualControl::default(),
        }
    }

    async fn step<H: Hooks>(
        &self,
        hooks: &H,
        world: &MemoryWorld,
        now: Timestamp,
    ) -> DeployOutcome {
        let works = world.list_works("default.hello").await.expect("list");
        let targets = [PlacementTarget {
            name: "p",
            strategy: &self.strategy,
            groups: &self.groups,
            hold: self.hold.as_deref(),
            state_detail: self.state_detail,
        }];
        let trace = opentelemetry::Context::new();
        let current_hash = self.current.as_ref().map(|c| c.hash.clone());
        let input = DeployInput {
            owner: Owner {
                namespace: "default",
                name: "hello",
                label: "default.hello",
                labels: &self.labels,
            },
            spec_placements: &["p".to_owned()],
            placements: &targets,
            works: &works,
            update: &self.update,
            current_hash: current_hash.as_deref(),
            current: self.current.as_ref(),
            aborted_at: self.aborted_at,
            clock: &now,
            settings: &self.settings,
            trace: &trace,
            control: self.control.clone(),
        };
        deploy(hooks, world, &input).await
    }
}

/// Plays the work agent: the cluster's work observed, with `progressing`
/// (and Degraded True when `degraded`), its conditions changed at `since`.
fn agent(world: &MemoryWorld, cluster: &str, progressing: &str, degraded: bool, since: Timestamp) {
    let work = world
        .all()
        .into_iter()
        .find(|w| w.namespace().as_deref() == Some(cluster))
        .expect("the cluster has a work");
    let generation = work.metadata.generation.unwrap_or(0);
    let time = since.to_string();
    let mut conditions = vec![
        json!({"type": "Applied", "status": "True", "observedGeneration": generation,
               "lastTransitionTime": time, "reason": "", "message": ""}),
        json!({"type": "Available", "status": "True", "observedGeneration": generation,
               "lastTransitionTime": time, "reason": "", "message": ""}),
        json!({"type": "Progressing", "status": progressing, "observedGeneration": generation,
               "lastTransitionTime": time, "reason": "", "message": ""}),
    ];
    if degraded {
        conditions.push(
            json!({"type": "Degraded", "status": "True", "observedGeneration": generation,
               "lastTransitionTime": time, "reason": "", "message": ""}),
        );
    }
    world.update(cluster, &work.name_any(), |w| {
        w.status = serde_json::from_value(json!({"conditions": conditions})).ok();
    });
}

fn applies(world: &MemoryWorld) -> Vec<String> {
    world
        .writes()
        .into_iter()
        .filter_map(|w| match w {
            Write::Apply(ns, _) => Some(ns),
            _ => None,
        })
        .collect()
}

use HookKind::{
    BeginRollout as Begin, MutateManifestWork as Mutate, ProgressRollout as Progress,
    ValidateRolloutCompletion as Validate,
};

fn call(hook: HookKind, cluster: &str) -> (HookKind, String) {
    (hook, cluster.to_owned())
}

#[tokio::test]
async fn without_a_plugin_no_hook_is_called() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(strategy(json!({"type": "All"})), &["c1", "c2", "c3"]);
    f.labels.insert("team".into(), "blue".into());
    let out = f.step(&hooks, &world, at(0)).await;
    assert!(hooks.calls().is_empty());
    assert_eq!(applies(&world), ["c1", "c2", "c3"]);
    assert_eq!(out.placements[0].applied, ["c1", "c2", "c3"]);
    let work = &world.all()[0];
    assert_eq!(work.name_any(), work_name("default", "hello", "p"));
    let labels = work.labels();
    assert_eq!(labels[MWRS_OWNER_LABEL], "default.hello");
    assert_eq!(labels[PLACEMENT_NAME_LABEL], "p");
    assert_eq!(labels[CONTROLLER_HASH_LABEL], f.update.hash);
    assert_eq!(labels["team"], "blue");
    assert_eq!(work.annotations()[OWNER_ANNOTATION], "default/hello");
    assert_eq!(
        work.annotations()[SPEC_HASH_ANNOTATION],
        spec_hash(&f.update.template)
    );
    assert_eq!(work.spec, f.update.template);

    // Done progressing: Succeeded at once (never Validating), nothing
    // written again.
    for c in ["c1", "c2", "c3"] {
        agent(&world, c, "False", false, at(10));
    }
    let before = world.writes().len();
    let out = f.step(&hooks, &world, at(20)).await;
    assert_eq!(world.writes().len(), before);
    let p = &out.placements[0];
    assert!(p.complete());
    assert_eq!((p.updated, p.works.total, p.works.available), (3, 3, 3));
    assert!(hooks.calls().is_empty());
}

#[tokio::test]
async fn a_progressive_rollout_calls_the_hooks_in_order() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let f = Fixture::new(
        strategy(
            json!({"type": "Progressive", "plugin": "p", "progressive": {"maxConcurrency": 1}}),
        ),
        &["c3", "c1", "c2"],
    );

    let out = f.step(&hooks, &world, at(0)).await;
    assert_eq!(
        hooks.calls(),
        [call(Progress, ""), call(Begin, "c1"), call(Mutate, "c1")]
    );
    let begin = &hooks.requests(Begin)[0];
    assert_eq!((begin.cluster_index, begin.total_cluster_count), (1, 3));
    assert_eq!(begin.desired_revision, f.update.hash);
    assert!(!begin.aborting);
    let state = begin.rollout_status.as_ref().expect("state");
    assert_eq!(state.progressing.len(), 1);
    assert_eq!(state.progressing[0].cluster_name, "c1");
    assert_eq!(
        state.progressing[0].rollout_status,
        proto::RolloutStatus::ToApply as i32
    );
    // The plugin saw the desired work and its mutation was applied.
    let input = &hooks.mutated_inputs()[0];
    assert_eq!(input["metadata"]["namespace"], "c1");
    assert_eq!(
        input["metadata"]["labels"][CONTROLLER_HASH_LABEL],
        json!(f.update.hash)
    );
    let work = &world.all()[0];
    assert_eq!(work.annotations()["test/cluster-index"], "1");
    assert_eq!(out.placements[0].applied, ["c1"]);

    // Applied but not yet seen by the agent: waiting, not begun again.
    hooks.clear();
    f.step(&hooks, &world, at(5)).await;
    assert_eq!(hooks.calls(), [call(Progress, "")]);
    assert_eq!(applies(&world), ["c1"]);

    // Done progressing: validated, the verdict persisted, the next cluster
    // begins.
    agent(&world, "c1", "False", false, at(10));
    hooks.clear();
    let out = f.step(&hooks, &world, at(20)).await;
    assert_eq!(
        hooks.calls(),
        [
            call(Validate, "c1"),
            call(Progress, ""),
            call(Begin, "c2"),
            call(Mutate, "c2")
        ]
    );
    let progress = &hooks.requests(Progress)[0];
    let state = progress.rollout_status.as_ref().expect("state");
    assert_eq!(state.completed[0].cluster_name, "c1");
    assert_eq!(hooks.requests(Begin)[0].cluster_index, 2);
    assert!(
        world
            .writes()
            .contains(&Write::Annotate("c1".into(), work.name_any()))
    );
    let c1 = world.get("c1", &work.name_any()).expect("c1's work");
    assert_eq!(c1.annotations()[VALIDATION_ANNOTATION], "Succeeded");
    assert_eq!(
        out.placements[0].clusters[0].status,
        RolloutStatus::Succeeded
    );
    assert_eq!(out.placements[0].clusters[0].message.as_deref(), Some("ok"));

    // The verdict sticks: c1 is not validated again.
    hooks.clear();
    f.step(&hooks, &world, at(30)).await;
    assert_eq!(hooks.calls(), [call(Progress, "")]);
}

#[tokio::test]
async fn a_failed_hook_stops_its_cluster() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let f = Fixture::new(
        strategy(json!({"type": "All", "plugin": "p"})),
        &["c1", "c2"],
    );
    hooks
        .fail
        .lock()
        .expect("lock")
        .insert((Begin, "c1".into()), tonic::Code::Unavailable);
    let out = f.step(&hooks, &world, at(0)).await;
    assert_eq!(
        hooks.calls(),
        [
            call(Progress, ""),
            call(Begin, "c1"),
            call(Begin, "c2"),
            call(Mutate, "c2")
        ]
    );
    assert_eq!(applies(&world), ["c2"]);
    let p = &out.placements[0];
    assert_eq!(p.hook_errors.len(), 1);
    assert_eq!(p.hook_errors[0].cluster.as_deref(), Some("c1"));
    assert_eq!(p.hook_errors[0].error.code, tonic::Code::Unavailable);
    assert!(
        p.clusters[0]
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("scripted")
    );
    assert_eq!(out.requeue_after, Some(f.settings.error_requeue));

    // A failed ProgressRollout stops the whole placement.
    let world = MemoryWorld::new();
    let hooks = Script::default();
    hooks
        .fail
        .lock()
        .expect("lock")
        .insert((Progress, String::new()), tonic::Code::DeadlineExceeded);
    let out = f.step(&hooks, &world, at(0)).await;
    assert_eq!(hooks.calls(), [call(Progress, "")]);
    assert!(world.writes().is_empty());
    assert_eq!(out.placements[0].hook_errors[0].error.hook, Progress);
}

#[tokio::test]
async fn a_mutation_that_changes_the_executor_is_refused() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let f = Fixture::new(
        strategy(json!({"type": "All", "plugin": "p"})),
        &["c1", "c2"],
    );
    hooks
        .rewrite
        .lock()
        .expect("lock")
        .insert("c1".into(), |w| {
            w["spec"]["executor"] = json!({"subject": {"type": "ServiceAccount",
            "serviceAccount": {"namespace": "kube-system", "name": "admin"}}});
        });
    let out = f.step(&hooks, &world, at(0)).await;
    // Never applied as the plugin's account; the other cluster goes on.
    assert_eq!(applies(&world), ["c2"]);
    let p = &out.placements[0];
    assert_eq!(p.hook_errors.len(), 1);
    assert_eq!(p.hook_errors[0].cluster.as_deref(), Some("c1"));
    assert_eq!(p.hook_errors[0].error.hook, Mutate);
    assert_eq!(p.hook_errors[0].error.code, tonic::Code::Internal);
    let message = p.clusters[0].message.as_deref().unwrap_or_default();
    assert!(
        message.contains("changes spec.executor from nothing to {"),
        "{message}"
    );
}

#[tokio::test]
async fn validation_is_polled_until_the_deadline() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let f = Fixture::new(
        strategy(json!({"type": "All", "plugin": "p", "all": {"progressDeadline": "60s"}})),
        &["c1"],
    );
    f.step(&hooks, &world, at(0)).await;
    agent(&world, "c1", "False", false, at(10));
    hooks.answer(
        "c1",
        proto::ValidationResult::Inprogress,
        "soaking",
        Some(7),
    );
    hooks.clear();
    let out = f.step(&hooks, &world, at(20)).await;
    assert_eq!(hooks.calls(), [call(Validate, "c1"), call(Progress, "")]);
    let p = &out.placements[0];
    assert_eq!(p.clusters[0].status, RolloutStatus::Validating);
    assert_eq!(p.clusters[0].message.as_deref(), Some("soaking"));
    // The plugin's hint wins over the poll interval and the deadline (50 s away).
    assert_eq!(out.requeue_after, Some(Duration::from_secs(7)));

    // No hint: the poll interval, but never past the deadline.
    hooks.answer("c1", proto::ValidationResult::Inprogress, "", None);
    let out = f.step(&hooks, &world, at(65)).await;
    assert_eq!(out.requeue_after, Some(Duration::from_secs(5)));

    // At the deadline: not asked again, timed out.
    hooks.clear();
    let out = f.step(&hooks, &world, at(70)).await;
    assert_eq!(hooks.calls(), [call(Progress, "")]);
    let p = &out.placements[0];
    assert_eq!(p.clusters[0].status, RolloutStatus::TimeOut);
    let state = hooks.requests(Progress)[0]
        .rollout_status
        .clone()
        .expect("state");
    assert_eq!(state.timed_out[0].cluster_name, "c1");
    assert!(state.progressing.is_empty());
}

#[tokio::test]
async fn a_failed_validation_aborts_and_rolls_back() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(
        strategy(
            json!({"type": "Progressive", "plugin": "p", "abortOnFailure": true,
                        "pluginConfig": {"soakTime": "1s", "failClusters": ["c1"]},
                        "progressive": {"maxConcurrency": 1}}),
        ),
        &["c1", "c2"],
    );
    let v1 = Revision::of(&template("v1"));
    // Both clusters run v1 (validated); then the template moves to v2.
    f.update = v1.clone();
    for (i, c) in ["c1", "c2"].iter().enumerate() {
        let t = i as i64 * 20;
        f.step(&hooks, &world, at(t)).await;
        agent(&world, c, "False", false, at(t + 10));
    }
    f.step(&hooks, &world, at(40)).await;
    assert!(f.step(&hooks, &world, at(41)).await.placements[0].complete());
    f.update = Revision::of(&template("v2"));
    f.current = Some(v1.clone());
    f.step(&hooks, &world, at(42)).await;
    assert_eq!(
        hooks.requests(Begin).last().map(|r| r.cluster_name.clone()),
        Some("c1".into())
    );
    agent(&world, "c1", "False", false, at(45));

    // The plugin fails c1 on v2: abort, roll c1 back to v1.
    hooks.answer(
        "c1",
        proto::ValidationResult::Failed,
        "smoke test failed",
        None,
    );
    hooks.clear();
    let out = f.step(&hooks, &world, at(50)).await;
    assert_eq!(
        hooks.calls(),
        [
            call(Validate, "c1"),
            call(Progress, ""),
            call(Begin, "c1"),
            call(Mutate, "c1")
        ]
    );
    // Every hook of the rollout, aborting or not, carries the strategy's
    // pluginConfig as JSON text.
    for hook in [Validate, Progress, Begin, Mutate] {
        for r in hooks.requests(hook) {
            assert_eq!(
                r.plugin_config_json, r#"{"failClusters":["c1"],"soakTime":"1s"}"#,
                "{hook} (aborting {})",
                r.aborting
            );
        }
    }
    let validate = &hooks.requests(Validate)[0];
    assert!(!validate.aborting);
    assert_eq!(validate.desired_revision, f.update.hash);
    for hook in [Progress, Begin, Mutate] {
        let r = &hooks.requests(hook)[0];
        assert!(r.aborting, "{hook} says aborting");
        assert_eq!(r.desired_revision, v1.hash, "{hook} names the old revision");
    }
    let rolled_back = hooks.mutated_inputs()[0].clone();
    assert_eq!(
        rolled_back["spec"]["workload"]["manifests"][0]["data"]["version"],
        "v1"
    );
    assert_eq!(out.aborted_at, Some(at(50)));
    let report = out.abort.as_ref().expect("aborted");
    assert_eq!(report.action, AbortAction::RollBack);
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].cluster, "c1");
    assert_eq!(report.failures[0].status, RolloutStatus::Failed);
    assert_eq!(
        report.failures[0].message.as_deref(),
        Some("smoke test failed")
    );
    let p = &out.placements[0];
    assert!(p.aborting && !p.stopped);
    assert_eq!(p.desired_revision, v1.hash);
    let work = world
        .all()
        .into_iter()
        .find(|w| w.namespace().as_deref() == Some("c1"))
        .expect("c1");
    assert_eq!(work.labels()[CONTROLLER_HASH_LABEL], v1.hash);
    assert_eq!(work.spec, v1.template);
    assert_eq!(work.annotations()["test/aborting"], "true");

    // Still aborted next time: v2 is not rolled out again.
    f.aborted_at = Some(at(50));
    agent(&world, "c1", "False", false, at(60));
    hooks.answer("c1", proto::ValidationResult::Succeeded, "v1 is fine", None);
    hooks.clear();
    let out = f.step(&hooks, &world, at(70)).await;
    assert_eq!(hooks.calls(), [call(Validate, "c1"), call(Progress, "")]);
    assert!(hooks.requests(Validate)[0].aborting);
    assert!(
        out.placements[0].complete(),
        "{:?}",
        out.placements[0].clusters
    );
    assert_eq!(out.placements[0].updated, 0);
}

/// A rollback whose plugin keeps failing MutateManifestWork (under
/// `failurePolicy: Fail`) waits for it only until the grace passes, then
/// restores the last good revision as it is, still reporting the failure.
#[tokio::test]
async fn a_rollback_waits_for_a_failing_mutation_only_until_the_grace() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(
        strategy(json!({"type": "All", "plugin": "p", "abortOnFailure": true})),
        &["c1"],
    );
    let v1 = Revision::of(&template("v1"));
    f.update = v1.clone();
    f.step(&hooks, &world, at(0)).await;
    agent(&world, "c1", "False", false, at(10));
    assert!(f.step(&hooks, &world, at(20)).await.placements[0].complete());
    f.update = Revision::of(&template("v2"));
    f.current = Some(v1.clone());
    f.step(&hooks, &world, at(30)).await;
    agent(&world, "c1", "False", false, at(35));
    hooks.answer("c1", proto::ValidationResult::Failed, "broken", None);
    hooks
        .fail
        .lock()
        .expect("lock")
        .insert((Mutate, "c1".into()), tonic::Code::Unavailable);
    // The abort starts at 40; the rollback's mutation fails: c1 waits on v2.
    let out = f.step(&hooks, &world, at(40)).await;
    assert_eq!(out.aborted_at, Some(at(40)));
    f.aborted_at = out.aborted_at;
    let on = |world: &MemoryWorld| {
        world
            .all()
            .into_iter()
            .find(|w| w.namespace().as_deref() == Some("c1"))
            .expect("c1")
            .labels()[CONTROLLER_HASH_LABEL]
            .clone()
    };
    assert_eq!(on(&world), f.update.hash);
    assert_eq!(out.placements[0].hook_errors.len(), 1);
    // Within the grace: still waiting, the call tried again.
    let grace = f.settings.rollback_hook_grace.as_secs() as i64;
    let out = f.step(&hooks, &world, at(40 + grace - 1)).await;
    assert_eq!(on(&world), f.update.hash);
    assert_eq!(out.placements[0].hook_errors[0].error.hook, Mutate);
    // Past it: restored as it is, the failure still reported.
    let out = f.step(&hooks, &world, at(40 + grace)).await;
    assert_eq!(on(&world), v1.hash);
    let p = &out.placements[0];
    assert_eq!(p.applied, ["c1"]);
    assert_eq!(p.hook_errors.len(), 1);
    assert_eq!(p.hook_errors[0].error.code, tonic::Code::Unavailable);
    let work = world
        .all()
        .into_iter()
        .find(|w| w.namespace().as_deref() == Some("c1"));
    let work = work.expect("c1");
    assert_eq!(work.spec, v1.template);
    assert!(
        !work.annotations().contains_key("test/aborting"),
        "not mutated"
    );
}

#[tokio::test]
async fn an_abort_without_a_revision_to_restore_stops() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let f = Fixture::new(
        strategy(
            json!({"type": "Progressive", "plugin": "p", "failureStrategy": "AbortAll",
                        "progressive": {"maxConcurrency": 1}}),
        ),
        &["c1", "c2"],
    );
    f.step(&hooks, &world, at(0)).await;
    agent(&world, "c1", "True", true, at(10));
    hooks.clear();
    let out = f.step(&hooks, &world, at(20)).await;
    assert_eq!(hooks.calls(), [call(Progress, "")]);
    assert!(hooks.requests(Progress)[0].aborting);
    assert_eq!(applies(&world), ["c1"]);
    assert_eq!(
        out.abort.as_ref().map(|a| a.action),
        Some(AbortAction::Stop)
    );
    assert!(out.placements[0].stopped);
}

#[tokio::test]
async fn a_held_placement_is_only_observed() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(strategy(json!({"type": "All", "plugin": "p"})), &["c1"]);
    f.step(&hooks, &world, at(0)).await;
    agent(&world, "c1", "False", false, at(10));
    f.groups = groups(&["c2"]);
    f.hold = Some("p plugin: Initialize fails with unavailable plugin server endpoint.".into());
    hooks.clear();
    let before = world.writes();
    let out = f.step(&hooks, &world, at(20)).await;
    assert!(hooks.calls().is_empty());
    assert_eq!(
        world.writes(),
        before,
        "nothing written: no apply for c2, no delete of c1"
    );
    assert!(out.placements[0].held);
    assert_eq!(out.placements[0].clusters[0].status, RolloutStatus::ToApply);
}

#[tokio::test]
async fn removed_clusters_and_stale_placements_lose_their_works() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(
        strategy(json!({"type": "All", "plugin": "p"})),
        &["c1", "c2"],
    );
    f.step(&hooks, &world, at(0)).await;
    let mut stale = desired_work(
        &Owner {
            namespace: "default",
            name: "hello",
            label: "default.hello",
            labels: &BTreeMap::new(),
        },
        "gone",
        "c7",
        "hello-gone",
        &f.update,
    );
    stale.metadata.generation = Some(1);
    world.insert(stale);
    f.groups = groups(&["c1"]);
    hooks.clear();
    let out = f.step(&hooks, &world, at(10)).await;
    let c2 = work_name("default", "hello", "p");
    assert!(world.writes().ends_with(&[
        Write::Delete("c7".into(), "hello-gone".into()),
        Write::Delete("c2".into(), c2),
    ]));
    assert_eq!(
        out.deleted_stale,
        [("c7".to_owned(), "hello-gone".to_owned())]
    );
    assert_eq!(out.placements[0].deleted, ["c2"]);
    let state = hooks.requests(Progress)[0]
        .rollout_status
        .clone()
        .expect("state");
    assert_eq!(state.removed.len(), 1);
    assert_eq!(state.removed[0].cluster_name, "c2");
    assert_eq!(state.removed[0].manifest_revision_name, f.update.hash);
    assert_eq!(out.placements[0].works.total, 1);
}

#[test]
fn work_names_are_distinct_and_fit() {
    let a = work_name("default", "hello", "p");
    assert!(
        a.starts_with("hello-") && a.len() == "hello-".len() + 8,
        "{a}"
    );
    assert_eq!(a, work_name("default", "hello", "p"));
    assert_ne!(a, work_name("other", "hello", "p"));
    assert_ne!(a, work_name("default", "hello", "q"));
    let long = work_name("default", &"x".repeat(300), "p");
    assert!(long.len() <= revision::MAX_NAME_LEN);
}

#[test]
fn a_mutation_cannot_change_identity_or_ownership() {
    let owner = Owner {
        namespace: "default",
        name: "hello",
        label: "default.hello",
        labels: &BTreeMap::new(),
    };
    let revision = Revision::of(&template("v1"));
    let desired = desired_work(&owner, "p", "c1", "w", &revision);
    let mut mutated = desired.clone();
    mutated.metadata.name = Some("other".into());
    mutated.metadata.labels = Some(BTreeMap::from([
        (MWRS_OWNER_LABEL.to_owned(), "someone.else".to_owned()),
        ("added".to_owned(), "yes".to_owned()),
    ]));
    mutated.metadata.resource_version = Some("42".into());
    mutated.spec = template("mutated");
    let done = finish_work(&desired, Some(mutated), &owner, "p", &revision.hash);
    assert_eq!(done.metadata.name.as_deref(), Some("w"));
    assert_eq!(done.metadata.namespace.as_deref(), Some("c1"));
    assert_eq!(done.metadata.resource_version, None);
    let labels = done.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels[MWRS_OWNER_LABEL], "default.hello");
    assert_eq!(labels["added"], "yes");
    assert_eq!(done.spec, template("mutated"));
    assert_eq!(
        done.metadata.annotations.unwrap_or_default()[SPEC_HASH_ANNOTATION],
        spec_hash(&template("mutated"))
    );
}

/// `cluster_index` is the position in the order the engine really rolls
/// out: with a mandatory group that is not the lowest index and group names
/// not in index order, the mandatory cluster is 1 and the rest follow by
/// name across groups (Progressive).
#[tokio::test]
async fn cluster_index_is_the_engine_order() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(
        strategy(json!({"type": "Progressive", "plugin": "p",
            "progressive": {"maxConcurrency": 1,
                            "mandatoryDecisionGroups": [{"groupName": "late"}]}})),
        &[],
    );
    let group = |index: i32, name: &str, clusters: &[&str]| ClusterGroup {
        index,
        name: name.into(),
        clusters: clusters.iter().map(|c| c.to_string()).collect(),
    };
    f.groups = vec![
        group(0, "zeta", &["c3", "c1"]),
        group(1, "alpha", &["b2", "a1"]),
        group(2, "late", &["m1"]),
    ];
    let mut begun = Vec::new();
    for step in 0..6i64 {
        let t = step * 20;
        let out = f.step(&hooks, &world, at(t)).await;
        for cluster in &out.placements[0].applied {
            agent(&world, cluster, "False", false, at(t + 1));
        }
        let last = hooks.requests(Begin);
        begun = last
            .iter()
            .map(|r| {
                (
                    r.cluster_name.clone(),
                    r.cluster_index,
                    r.total_cluster_count,
                )
            })
            .collect();
    }
    let want: Vec<(String, i32, i32)> = [("m1", 1), ("a1", 2), ("b2", 3), ("c1", 4), ("c3", 5)]
        .iter()
        .map(|(c, i)| ((*c).to_owned(), *i, 5))
        .collect();
    assert_eq!(begun, want);
    // The mutated works carry the same positions.
    let index_of = |cluster: &str| {
        world
            .all()
            .into_iter()
            .find(|w| w.namespace().as_deref() == Some(cluster))
            .map(|w| w.annotations()["test/cluster-index"].clone())
    };
    assert_eq!(index_of("m1").as_deref(), Some("1"));
    assert_eq!(index_of("c3").as_deref(), Some("5"));
}

/// The work counts (and so ManifestworkApplied) count only works of the
/// desired revision: after a template change the old revision's Available
/// works do not count.
#[tokio::test]
async fn work_counts_are_of_the_desired_revision_only() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(
        strategy(json!({"type": "Progressive", "progressive": {"maxConcurrency": 1}})),
        &["c1", "c2", "c3"],
    );
    let v1 = Revision::of(&template("v1"));
    f.update = v1.clone();
    for step in 0..3i64 {
        let out = f.step(&hooks, &world, at(step * 10)).await;
        for cluster in &out.placements[0].applied {
            agent(&world, cluster, "False", false, at(step * 10 + 1));
        }
    }
    let done = f.step(&hooks, &world, at(40)).await;
    assert_eq!(done.placements[0].works.available, 3);

    // The template moves to v2 while the placement is held: no work of v2
    // yet, so nothing counts (upstream's NotAsExpected, not AsExpected on
    // the strength of v1's works).
    f.update = Revision::of(&template("v2"));
    f.current = Some(v1);
    f.hold = Some("plugin not loaded".into());
    let held = f.step(&hooks, &world, at(45)).await;
    assert_eq!(held.placements[0].works, WorkCounts::default());
    // Then one cluster gets it, two keep v1.
    f.hold = None;
    let out = f.step(&hooks, &world, at(50)).await;
    let p = &out.placements[0];
    assert_eq!(p.applied, ["c1"]);
    // c1's work of v2 (its status still the agent's last report), not the
    // two works of v1.
    assert_eq!((p.works.total, p.works.available), (1, 1));
    let status = crate::reconcile::status::placement_summary(p);
    assert_eq!((status.summary.total, status.summary.available), (1, 1));
}

/// Plays an agent that reports no `Progressing` (the template has no
/// condition rules): Applied and Available only, since `since`.
fn agent_applied_only(world: &MemoryWorld, cluster: &str, since: Timestamp) {
    let work = world
        .all()
        .into_iter()
        .find(|w| w.namespace().as_deref() == Some(cluster))
        .expect("the cluster has a work");
    let generation = work.metadata.generation.unwrap_or(0);
    let time = since.to_string();
    let conditions = [
        json!({"type": "Applied", "status": "True", "observedGeneration": generation,
               "lastTransitionTime": time, "reason": "", "message": ""}),
        json!({"type": "Available", "status": "True", "observedGeneration": generation,
               "lastTransitionTime": time, "reason": "", "message": ""}),
    ];
    world.update(cluster, &work.name_any(), |w| {
        w.status = serde_json::from_value(json!({"conditions": conditions})).ok();
    });
}

#[tokio::test]
async fn a_work_without_progressing_times_out_and_aborts() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(
        strategy(json!({"type": "All", "plugin": "p", "abortOnFailure": true,
                        "all": {"progressDeadline": "10s"}})),
        &["c1", "c2"],
    );
    f.current = Some(Revision::of(&template("v1")));
    f.step(&hooks, &world, at(0)).await;
    for c in ["c1", "c2"] {
        agent_applied_only(&world, c, at(1));
    }
    // Progressing (the fallback), from Applied's transition, not ToApply:
    // nothing is applied again and no plugin validates it.
    hooks.clear();
    let out = f.step(&hooks, &world, at(5)).await;
    let p = &out.placements[0];
    assert_eq!(p.count(RolloutStatus::Progressing), 2, "{:?}", p.clusters);
    assert!(
        p.clusters
            .iter()
            .all(|c| c.last_transition_time == Some(at(1)))
    );
    assert!(p.applied.is_empty());
    assert_eq!(hooks.calls(), [call(Progress, "")]);
    assert_eq!(out.abort, None);
    assert_eq!(p.requeue_after, Some(Duration::from_secs(6)));

    // At the deadline (Applied at 1 s + 10 s) both time out: abort, and
    // the previous revision is restored.
    let out = f.step(&hooks, &world, at(11)).await;
    let report = out.abort.as_ref().expect("the time-out aborts");
    assert_eq!(report.action, AbortAction::RollBack);
    assert!(
        report
            .failures
            .iter()
            .all(|c| c.status == RolloutStatus::TimeOut),
        "{:?}",
        report.failures
    );
    assert_eq!(report.failures.len(), 2);
    let p = &out.placements[0];
    assert!(p.aborting);
    assert_eq!(p.applied, ["c1", "c2"]);
}

/// A Progressive rollout (2 at a time) of v2 over four clusters on v1:
/// c1 and c2 done, then c3 degraded and c4 progressing, with the
/// strategy's `rollbackPace` as written (`None`: not set). Returns the
/// outcome of the step that aborts.
async fn abort_after_c3_degrades(
    hooks: &Script,
    world: &MemoryWorld,
    pace: Option<&str>,
) -> DeployOutcome {
    let mut raw = json!({"type": "Progressive", "plugin": "p", "abortOnFailure": true,
                         "progressive": {"maxConcurrency": 2}});
    if let Some(pace) = pace {
        raw["rollbackPace"] = json!(pace);
    }
    let mut f = Fixture::new(strategy(raw), &["c1", "c2", "c3", "c4"]);
    f.current = Some(Revision::of(&template("v1")));
    f.step(hooks, world, at(0)).await;
    for c in ["c1", "c2"] {
        agent(world, c, "False", false, at(10));
    }
    f.step(hooks, world, at(20)).await;
    assert_eq!(applies(world), ["c1", "c2", "c3", "c4"]);
    agent(world, "c3", "True", true, at(30));
    agent(world, "c4", "True", false, at(30));
    hooks.clear();
    f.step(hooks, world, at(40)).await
}

#[tokio::test]
async fn an_abort_restores_every_updated_cluster_at_once_failing_first() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    // No rollbackPace: AtOnce is the default.
    let out = abort_after_c3_degrades(&hooks, &world, None).await;
    let report = out.abort.as_ref().expect("aborted");
    assert_eq!(report.action, AbortAction::RollBack);
    let p = &out.placements[0];
    assert!(p.aborting);
    // All four in this one step, whatever maxConcurrency says, c3 first.
    assert_eq!(p.applied, ["c3", "c1", "c2", "c4"]);
    let begins: Vec<String> = hooks
        .requests(Begin)
        .into_iter()
        .map(|r| r.cluster_name)
        .collect();
    assert_eq!(begins, ["c3", "c1", "c2", "c4"]);
    assert!(hooks.requests(Begin).iter().all(|r| r.aborting));
    let v1 = Revision::of(&template("v1"));
    for work in world.all() {
        assert_eq!(work.labels()[CONTROLLER_HASH_LABEL], v1.hash);
    }
}

#[tokio::test]
async fn an_abort_at_the_strategy_pace_restores_max_concurrency_per_step() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let out = abort_after_c3_degrades(&hooks, &world, Some("Strategy")).await;
    assert!(out.abort.is_some());
    assert_eq!(out.placements[0].applied, ["c1", "c2"]);
}

/// Plays another writer (as OCM's own controller does): the plain
/// template `spec` over `cluster`'s work, our labels stripped, and the
/// managed fields a real API server would then hold: our apply at 10 s,
/// its merge patch of the spec at 20 s.
fn other_writer(world: &MemoryWorld, cluster: &str, spec: &ManifestWorkSpec) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, Time};
    let entry = |manager: &str, operation: &str, secs: i64| ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some(operation.into()),
        time: Some(Time(at(secs))),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(
            json!({"f:spec": {"f:workload": {"f:manifests": {}}}}),
        )),
        ..ManagedFieldsEntry::default()
    };
    let name = world
        .all()
        .into_iter()
        .find(|w| w.namespace().as_deref() == Some(cluster))
        .expect("the cluster has a work")
        .name_any();
    world.update(cluster, &name, |w| {
        w.spec = spec.clone();
        w.metadata.generation = Some(w.metadata.generation.unwrap_or(0) + 1);
        if let Some(labels) = w.metadata.labels.as_mut() {
            labels.remove(CONTROLLER_HASH_LABEL);
        }
        w.metadata.annotations = None;
        w.metadata.managed_fields = Some(vec![
            entry(FIELD_MANAGER, "Apply", 10),
            entry("work-controller", "Update", 20),
        ]);
    });
}

#[tokio::test]
async fn a_work_another_manager_wrote_is_left_alone_until_the_backoff_ends() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let f = Fixture::new(
        strategy(json!({"type": "All", "plugin": "p"})),
        &["c1", "c2"],
    );
    f.step(&hooks, &world, at(0)).await;
    assert_eq!(applies(&world), ["c1", "c2"]);
    // OCM's controller puts the template before the plugin's mutation
    // back on c1 (here: another spec) and strips our labels.
    other_writer(&world, "c1", &template("v0"));
    for now in [30, 60, 300] {
        hooks.clear();
        let out = f.step(&hooks, &world, at(now)).await;
        let p = &out.placements[0];
        assert!(p.applied.is_empty(), "at {now}: {:?}", p.applied);
        assert!(
            !hooks
                .calls()
                .iter()
                .any(|(h, c)| c == "c1" && *h != Progress),
            "no hook for c1 at {now}: {:?}",
            hooks.calls()
        );
        assert_eq!(p.conflicts.len(), 1);
        let conflict = &p.conflicts[0];
        assert_eq!(
            (conflict.cluster.as_str(), conflict.managers.as_slice()),
            ("c1", ["work-controller".to_owned()].as_slice())
        );
        assert!(conflict.left_alone);
        // Back when the back-off ends, 10 minutes after the write at 20 s.
        assert_eq!(p.requeue_after, Some(Duration::from_secs(620 - now as u64)));
        let message = out.conflict_message().expect("a message");
        assert!(message.contains("\"work-controller\""), "{message}");
        assert!(message.contains("c1/"), "{message}");
    }
    assert_eq!(applies(&world).len(), 2, "c1 was not applied again");
    // Quiet for the back-off (10 minutes after its write): taken over once,
    // with force, and the conflict is gone after.
    hooks.clear();
    let out = f.step(&hooks, &world, at(620)).await;
    assert_eq!(out.placements[0].applied, ["c1"]);
    assert!(!out.placements[0].conflicts[0].left_alone);
    let out = f.step(&hooks, &world, at(621)).await;
    assert!(out.placements[0].conflicts.is_empty());
    assert_eq!(out.conflict_message(), None);
}

#[tokio::test]
async fn a_work_another_manager_wrote_is_taken_over_for_a_new_revision() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(strategy(json!({"type": "All"})), &["c1"]);
    f.step(&hooks, &world, at(0)).await;
    other_writer(&world, "c1", &template("v0"));
    // Our label back on it, of the revision then rolled out: a person
    // edited its spec (kubectl edit keeps labels).
    let v2 = f.update.hash.clone();
    let name = world.all()[0].name_any();
    world.update("c1", &name, |w| {
        w.metadata
            .labels
            .get_or_insert_default()
            .insert(CONTROLLER_HASH_LABEL.into(), v2);
    });
    assert!(
        f.step(&hooks, &world, at(30)).await.placements[0]
            .applied
            .is_empty()
    );
    // The template moves on: a new revision is a new rollout, not a fight.
    f.current = Some(f.update.clone());
    f.update = Revision::of(&template("v3"));
    let out = f.step(&hooks, &world, at(40)).await;
    assert_eq!(out.placements[0].applied, ["c1"]);
}

/// A ManifestWork as OCM's own ManifestWorkReplicaSet controller writes
/// it: named from `generateName` (the set's name and 5 characters), the
/// set's labels, its owner and placement labels, no annotation, the plain
/// template, and the agent's report of generation 1 done.
fn ocm_work(cluster: &str, spec: &ManifestWorkSpec) -> ManifestWork {
    let name = format!("hellox7k2{}", &cluster[1..]);
    let mut work = ManifestWork::new(&name, spec.clone());
    work.metadata.namespace = Some(cluster.to_owned());
    work.metadata.generation = Some(1);
    work.metadata.labels = Some(BTreeMap::from([
        (MWRS_OWNER_LABEL.to_owned(), "default.hello".to_owned()),
        (PLACEMENT_NAME_LABEL.to_owned(), "p".to_owned()),
    ]));
    let time = at(-100).to_string();
    work.status = serde_json::from_value(json!({"conditions": [
        {"type": "Applied", "status": "True", "observedGeneration": 1,
         "lastTransitionTime": time, "reason": "", "message": ""},
        {"type": "Progressing", "status": "False", "observedGeneration": 1,
         "lastTransitionTime": time, "reason": "", "message": ""},
    ]}))
    .ok();
    work
}

#[tokio::test]
async fn works_ocm_wrote_for_the_template_are_adopted_and_validated() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let mut f = Fixture::new(
        strategy(
            json!({"type": "Progressive", "plugin": "p", "abortOnFailure": true,
                        "progressive": {"maxConcurrency": 1, "progressDeadline": "10s"}}),
        ),
        &["c1", "c2", "c3"],
    );
    for c in ["c1", "c2", "c3"] {
        world.insert(ocm_work(c, &f.update.template));
    }
    // On the update revision already: no BeginRollout or
    // MutateManifestWork and no apply; but nothing this controller did
    // validated them, so the plugin is asked. Their progress ended long
    // before the 10 s deadline: an adopted work's validation has none.
    hooks.validate.lock().expect("lock").insert(
        "c1".into(),
        ValidateResponse {
            result: proto::ValidationResult::Inprogress as i32,
            message: "warming up".into(),
            recheck_after: None,
        },
    );
    let out = f.step(&hooks, &world, at(0)).await;
    assert_eq!(
        hooks.calls(),
        [
            call(Validate, "c1"),
            call(Validate, "c2"),
            call(Validate, "c3"),
            call(Progress, "")
        ]
    );
    assert!(
        world
            .writes()
            .iter()
            .all(|w| matches!(w, Write::Annotate(..))),
        "{:?}",
        world.writes()
    );
    let p = &out.placements[0];
    assert!(!p.complete(), "{:?}", p.clusters);
    assert!(
        p.clusters
            .iter()
            .all(|c| c.status != RolloutStatus::TimeOut)
    );
    hooks.validate.lock().expect("lock").clear();
    hooks.clear();
    let out = f.step(&hooks, &world, at(30)).await;
    assert_eq!(hooks.calls(), [call(Validate, "c1"), call(Progress, "")]);
    let p = &out.placements[0];
    assert!(p.complete(), "{:?}", p.clusters);
    assert_eq!((p.updated, p.at_update), (3, 3));
    assert!(
        p.clusters
            .iter()
            .all(|c| c.revision.as_deref() == Some(&f.update.hash))
    );
    assert!(p.conflicts.is_empty());

    // A new template: an ordinary rollout through the plugin, keeping the
    // works' names; the adopted revision is the one to go back to.
    let v2 = f.update.clone();
    f.current = Some(v2.clone());
    f.update = Revision::of(&template("v3"));
    hooks.clear();
    let out = f.step(&hooks, &world, at(10)).await;
    assert_eq!(
        hooks.calls(),
        [call(Progress, ""), call(Begin, "c1"), call(Mutate, "c1")]
    );
    assert_eq!(out.placements[0].applied, ["c1"]);
    let c1 = world
        .all()
        .into_iter()
        .find(|w| w.namespace().as_deref() == Some("c1"))
        .expect("c1");
    assert_eq!(c1.name_any(), "hellox7k21");
    assert_eq!(c1.labels()[CONTROLLER_HASH_LABEL], f.update.hash);
}

/// A work this controller applied that another writer stripped of its
/// labels and annotations (OCM's controller does, with a merge patch that
/// leaves no field manager of its own) is not adopted: counting it as
/// validated would skip its plugin. It is rolled out to again.
#[tokio::test]
async fn a_work_this_controller_applied_that_lost_its_labels_is_rolled_out_again() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let f = Fixture::new(
        strategy(
            json!({"type": "Progressive", "plugin": "p", "progressive": {"maxConcurrency": 1}}),
        ),
        &["c1"],
    );
    let mut work = ocm_work("c1", &f.update.template);
    work.metadata.managed_fields = serde_json::from_value(json!([{
        "manager": conflict::FIELD_MANAGER, "operation": "Apply",
        "apiVersion": "work.open-cluster-management.io/v1",
        "time": at(-200).to_string(), "fieldsType": "FieldsV1",
        "fieldsV1": {"f:spec": {"f:workload": {}}}
    }]))
    .ok();
    world.insert(work);
    let out = f.step(&hooks, &world, at(0)).await;
    assert_eq!(
        hooks.calls(),
        [call(Progress, ""), call(Begin, "c1"), call(Mutate, "c1")]
    );
    assert_eq!(out.placements[0].applied, ["c1"]);
}

/// A cluster with two works of the placement, this controller's and the
/// one OCM's controller made beside it while both ran: the other one is
/// deleted, the rollout goes on with this controller's.
#[tokio::test]
async fn a_second_work_for_a_cluster_is_deleted() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let f = Fixture::new(strategy(json!({"type": "All"})), &["c1"]);
    f.step(&hooks, &world, at(0)).await;
    let mut leftover = ocm_work("c1", &f.update.template);
    leftover.metadata.name = Some("hello".into());
    world.insert(leftover);
    let out = f.step(&hooks, &world, at(10)).await;
    assert_eq!(out.deleted_stale, [("c1".to_owned(), "hello".to_owned())]);
    let left: Vec<String> = world.all().iter().map(|w| w.name_any()).collect();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_ne!(left[0], "hello");
    assert!(out.placements[0].applied.is_empty());
}

#[tokio::test]
async fn works_ocm_wrote_for_another_template_are_rolled_out() {
    let hooks = Script::default();
    let world = MemoryWorld::new();
    let f = Fixture::new(strategy(json!({"type": "All", "plugin": "p"})), &["c1"]);
    world.insert(ocm_work("c1", &template("v0")));
    f.step(&hooks, &world, at(0)).await;
    assert_eq!(
        hooks.calls(),
        [call(Progress, ""), call(Begin, "c1"), call(Mutate, "c1")]
    );
}
