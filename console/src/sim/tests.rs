//! Whole simulated rollouts with scripted hooks (no gateway): the order
//! and sizes of the batches, the clock, validation, the abort and the
//! rollback, the ends.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rollout_controller::rollout::Strategy;
use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, ValidateResponse, ValidationResult,
};
use serde_json::{Value, json};

use super::report::{Event, Plan};
use super::*;
use rollout_controller::hooks::{Call, HookAnswer, HookRequest, Mutation, RolloutRequest};

/// A plugin in memory: validation INPROGRESS on the first ask of each
/// cluster and revision (recheck after `recheck`), then SUCCEEDED, FAILED
/// for `fail` unless aborting; the mutation stamps the position and the
/// `aborting` flag. A rollout's plugin configuration
/// `{"failClusters": [...]}` replaces `fail`, as smoke-test's does; every
/// hook's configuration is recorded in `configs`.
struct Scripted {
    fail: HashSet<String>,
    recheck: Duration,
    asked: Mutex<HashSet<(String, String)>>,
    down: bool,
    /// `BeginRollout` answers this code, when set.
    refuse: Option<tonic::Code>,
    configs: Arc<Mutex<Vec<SeenConfig>>>,
}

/// A hook call and the plugin configuration it carried.
type SeenConfig = (HookKind, Option<Bytes>);

impl Scripted {
    fn new(fail: &[&str]) -> Scripted {
        Scripted {
            fail: fail.iter().map(|c| c.to_string()).collect(),
            recheck: Duration::from_millis(5),
            asked: Mutex::new(HashSet::new()),
            down: false,
            refuse: None,
            configs: Arc::default(),
        }
    }

    fn record(&self, hook: HookKind, r: &RolloutRequest) {
        self.configs
            .lock()
            .expect("lock")
            .push((hook, r.plugin_config_json.clone()));
    }

    /// Whether `cluster` fails in the rollout of `r`.
    fn fails(&self, r: &RolloutRequest) -> bool {
        let config: Option<Value> = r
            .plugin_config_json
            .as_ref()
            .map(|b| serde_json::from_slice(b).expect("JSON config"));
        match config.as_ref().and_then(|c| c["failClusters"].as_array()) {
            Some(list) => list.iter().any(|c| c == r.cluster_name.as_str()),
            None => self.fail.contains(&r.cluster_name),
        }
    }
}

impl Hooks for Scripted {
    async fn call(&self, _: Call<'_>, request: HookRequest) -> Result<HookAnswer, HookError> {
        Ok(match request {
            HookRequest::Initialize(r) => HookAnswer::Initialized(self.initialize(r).await?),
            HookRequest::BeginRollout(r) => {
                self.begin_rollout(r).await?;
                HookAnswer::Done
            }
            HookRequest::ProgressRollout(r) => {
                self.progress_rollout(r).await?;
                HookAnswer::Done
            }
            HookRequest::ValidateRolloutCompletion(r) => {
                HookAnswer::Validated(self.validate_rollout_completion(r).await?)
            }
            HookRequest::MutateManifestWork(r, work) => {
                HookAnswer::Mutated(self.mutate_manifest_work(r, work).await?)
            }
        })
    }
}

/// One method per hook.
impl Scripted {
    async fn initialize(&self, _: InitializeRequest) -> Result<InitializeResponse, HookError> {
        if self.down {
            return Err(HookError {
                hook: HookKind::Initialize,
                code: tonic::Code::Unavailable,
                message: "tcp connect error: Connection refused".into(),
                origin: rollout_controller::hooks::Origin::Transport,
            });
        }
        Ok(InitializeResponse {
            name: "scripted".into(),
            version: "1".into(),
            hooks: Vec::new(),
            ..Default::default()
        })
    }

    async fn begin_rollout(&self, r: RolloutRequest) -> Result<(), HookError> {
        self.record(HookKind::BeginRollout, &r);
        match self.refuse {
            Some(code) => Err(HookError {
                hook: HookKind::BeginRollout,
                code,
                message: "pluginConfig.weight: expected a number".into(),
                origin: rollout_controller::hooks::Origin::Answer,
            }),
            None => Ok(()),
        }
    }

    async fn progress_rollout(&self, r: RolloutRequest) -> Result<(), HookError> {
        self.record(HookKind::ProgressRollout, &r);
        Ok(())
    }

    async fn validate_rollout_completion(
        &self,
        r: RolloutRequest,
    ) -> Result<ValidateResponse, HookError> {
        self.record(HookKind::ValidateRolloutCompletion, &r);
        let first = self
            .asked
            .lock()
            .expect("lock")
            .insert((r.cluster_name.clone(), r.desired_revision.clone()));
        let (result, message) = if first {
            (ValidationResult::Inprogress, "soaking")
        } else if self.fails(&r) && !r.aborting {
            (ValidationResult::Failed, "smoke test failed")
        } else {
            (ValidationResult::Succeeded, "passed")
        };
        Ok(ValidateResponse {
            result: result as i32,
            message: format!("scripted: {message} on {}", r.cluster_name),
            recheck_after: first.then(|| prost_types::Duration {
                seconds: 0,
                nanos: i32::try_from(self.recheck.as_nanos()).unwrap_or(0),
            }),
        })
    }

    async fn mutate_manifest_work(
        &self,
        r: RolloutRequest,
        manifest_work: Bytes,
    ) -> Result<Mutation, HookError> {
        self.record(HookKind::MutateManifestWork, &r);
        let mut work: Value = serde_json::from_slice(&manifest_work).expect("JSON");
        for manifest in work["spec"]["workload"]["manifests"]
            .as_array_mut()
            .expect("manifests")
        {
            manifest["metadata"]["annotations"] = json!({
                "test/position": format!("{}/{}", r.cluster_index, r.total_cluster_count),
                "test/aborting": r.aborting.to_string(),
            });
        }
        Ok(Mutation {
            work: Some(serde_json::to_vec(&work).expect("JSON").into()),
            mutated_by: vec!["scripted".into()],
            failed_open: Vec::new(),
        })
    }
}

#[derive(Default)]
struct Collect {
    plan: Option<Plan>,
    steps: Vec<StepReport>,
    summary: Option<Summary>,
}

impl Report for Collect {
    fn begin(&mut self, plan: &Plan) -> std::io::Result<()> {
        self.plan = Some(plan.clone());
        Ok(())
    }

    fn step(&mut self, step: &StepReport) -> std::io::Result<()> {
        self.steps.push(step.clone());
        Ok(())
    }

    fn end(&mut self, summary: &Summary) -> std::io::Result<()> {
        self.summary = Some(summary.clone());
        Ok(())
    }
}

fn strategy(kind: &str, concurrency: Option<&str>, plugin: bool, abort: bool) -> Strategy {
    StrategyFlags {
        kind: kind.into(),
        max_concurrency: concurrency.map(str::to_owned),
        plugin: plugin.then(|| "scripted".to_owned()),
        abort_on_failure: abort,
        ..StrategyFlags::default()
    }
    .strategy()
    .expect("valid")
}

fn config(clusters: usize, strategy: Strategy) -> Config {
    let mut config = Config::new(clusters, strategy);
    config.start = Timestamp::from_second(1_700_000_000).expect("time");
    config.list_works = true;
    config
}

async fn simulate(config: &Config, hooks: Scripted) -> Result<Collect, SimError> {
    let recorder = Recorder::new(hooks);
    let mut collect = Collect::default();
    run(
        config,
        &recorder,
        &Tracing::disabled(),
        Some("http://gateway"),
        &mut collect,
    )
    .await?;
    Ok(collect)
}

fn applied(step: &StepReport) -> Vec<&str> {
    step.applied.iter().map(|a| a.cluster.as_str()).collect()
}

#[tokio::test]
async fn without_a_plugin_all_clusters_at_once_then_done() {
    let config = config(5, strategy("All", None, false, false));
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    let summary = c.summary.expect("summary");
    assert_eq!(summary.result, Outcome::Succeeded);
    // Applied; reported by the agent a second later; done at 30 s.
    let times: Vec<f64> = c.steps.iter().map(|s| s.elapsed_seconds).collect();
    assert_eq!(times, [0.0, 1.0, 30.0]);
    assert_eq!(applied(&c.steps[0]).len(), 5);
    assert_eq!(c.steps[0].clusters.to_apply, 5);
    assert_eq!(c.steps[1].clusters.progressing, 5);
    // The clock jumped to the works' completion.
    assert_eq!(c.steps[1].next_in_seconds, Some(29.0));
    assert!(!c.steps[1].real_wait);
    assert_eq!(c.steps[2].clusters.succeeded, 5);
    assert_eq!(summary.hook_calls, HookCounts::default());
    assert_eq!(
        summary.current_revision,
        Some(summary.update_revision.clone())
    );
    assert_eq!(summary.simulated_seconds, 30.0);
    assert!(summary.wall_seconds < 5.0);
}

#[tokio::test]
async fn progressive_batches_follow_max_concurrency() {
    let mut config = config(10, strategy("Progressive", Some("30%"), false, false));
    config.groups = 2;
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    let batches: Vec<Vec<&str>> = c
        .steps
        .iter()
        .map(applied)
        .filter(|a| !a.is_empty())
        .collect();
    assert_eq!(
        batches,
        [
            vec!["cluster-001", "cluster-002", "cluster-003"],
            vec!["cluster-004", "cluster-005", "cluster-006"],
            vec!["cluster-007", "cluster-008", "cluster-009"],
            vec!["cluster-010"],
        ]
    );
    assert_eq!(c.summary.expect("summary").result, Outcome::Succeeded);
    let plan = c.plan.expect("plan");
    assert_eq!(plan.groups, 2);
    assert!(
        plan.strategy.starts_with("Progressive, maxConcurrency 30%"),
        "{}",
        plan.strategy
    );
}

#[tokio::test]
async fn a_degraded_cluster_aborts_and_the_updated_clusters_roll_back() {
    let mut config = config(6, strategy("Progressive", Some("2"), false, true));
    config.fail = BTreeSet::from(["cluster-003".to_owned()]);
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    let summary = c.summary.as_ref().expect("summary");
    assert_eq!(summary.result, Outcome::Aborted);
    let abort_step = c
        .steps
        .iter()
        .position(|s| s.abort().is_some())
        .expect("an abort");
    assert!(
        c.steps[abort_step]
            .events
            .iter()
            .any(|e| matches!(e, Event::WorkDegraded { cluster } if cluster == "cluster-003"))
    );
    // After the abort only rollbacks, of the four updated clusters, all in
    // the abort's step (maxConcurrency 2 notwithstanding), the failing one
    // first.
    let rolled_back: Vec<&str> = c.steps[abort_step..]
        .iter()
        .flat_map(|s| s.applied.iter())
        .inspect(|a| assert!(a.aborting))
        .map(|a| a.cluster.as_str())
        .collect();
    assert_eq!(
        rolled_back,
        ["cluster-003", "cluster-001", "cluster-002", "cluster-004"]
    );
    assert_eq!(applied(&c.steps[abort_step]), rolled_back);
    let previous = summary.previous_revision.clone().expect("previous");
    assert_eq!(summary.works.by_revision.get(&previous), Some(&6));
    assert_eq!(summary.current_revision.as_deref(), Some(previous.as_str()));
    let abort = summary.abort.as_ref().expect("abort");
    assert_eq!(abort.action, "RollBack");
    assert_eq!(abort.failures[0].cluster, "cluster-003");
}

/// `rollbackPace: Strategy` restores at the strategy's pace, both when
/// the strategy is given as is and when it is read back from a
/// ManifestWorkReplicaSetRollout stored under OCM's CRDs (which prune the
/// field from the ManifestWorkReplicaSet).
#[tokio::test]
async fn a_rollback_at_the_strategy_pace_restores_two_clusters_per_step() {
    let flags = StrategyFlags {
        kind: "Progressive".into(),
        max_concurrency: Some("2".into()),
        abort_on_failure: true,
        rollback_pace: Some("Strategy".into()),
        ..StrategyFlags::default()
    };
    let mut direct = config(6, flags.strategy().expect("valid"));
    direct.fail = BTreeSet::from(["cluster-003".to_owned()]);
    let mut carried = direct.clone();
    // The strategy as given has no pace: only the carrier's can set it.
    carried.strategy = Strategy::default();
    carried.api = Some(api_config_of(
        rollout_controller::api::CrdShape::Ocm,
        api::ObjectsShape::Carrier,
        flags,
    ));
    for config in [direct, carried] {
        let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
        assert_eq!(
            c.summary.as_ref().expect("summary").result,
            Outcome::Aborted
        );
        let abort_step = c
            .steps
            .iter()
            .position(|s| s.abort().is_some())
            .expect("an abort");
        let batches: Vec<Vec<&str>> = c.steps[abort_step..]
            .iter()
            .map(applied)
            .filter(|a| !a.is_empty())
            .collect();
        assert_eq!(
            batches,
            [
                vec!["cluster-001", "cluster-002"],
                vec!["cluster-003", "cluster-004"]
            ],
            "with the simulated API server: {}",
            config.api.is_some()
        );
    }
}

/// `All` tolerates no failure when abortOnFailure is on: a degraded
/// cluster aborts and every updated cluster rolls back (as
/// `simulate --clusters 10 --strategy All --fail cluster-003
/// --abort-on-failure` shows).
#[tokio::test]
async fn all_aborts_on_one_degraded_cluster() {
    let mut config = config(10, strategy("All", None, false, true));
    config.fail = BTreeSet::from(["cluster-003".to_owned()]);
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    let summary = c.summary.as_ref().expect("summary");
    assert_eq!(summary.result, Outcome::Aborted);
    let abort = summary.abort.as_ref().expect("abort");
    assert_eq!(abort.action, "RollBack");
    assert_eq!(abort.failures[0].cluster, "cluster-003");
    let previous = summary.previous_revision.clone().expect("previous");
    assert_eq!(summary.works.by_revision.get(&previous), Some(&10));
    assert_eq!(summary.rollback_applies, 10);
}

/// `All` with a plugin: a FAILED validation aborts.
#[tokio::test]
async fn all_aborts_on_a_failed_validation() {
    let config = config(4, strategy("All", None, true, true));
    let c = simulate(&config, Scripted::new(&["cluster-002"]))
        .await
        .expect("runs");
    let summary = c.summary.as_ref().expect("summary");
    assert_eq!(summary.result, Outcome::Aborted);
    assert_eq!(
        summary.abort.as_ref().expect("abort").failures[0].cluster,
        "cluster-002"
    );
    assert_eq!(summary.aborting_hook_calls.begin_rollout, 4);
}

/// ProgressivePerGroup tolerates a group's maxFailures: one failure in a
/// group of three with maxFailures 1 does not abort, and the rollout ends
/// `Failed` only where the failure stays.
#[tokio::test]
async fn per_group_within_max_failures_does_not_abort() {
    let strategy = StrategyFlags {
        kind: "ProgressivePerGroup".into(),
        max_failures: Some("1".into()),
        abort_on_failure: true,
        ..StrategyFlags::default()
    }
    .strategy()
    .expect("valid");
    let mut config = config(6, strategy);
    config.groups = 2;
    config.fail = BTreeSet::from(["cluster-002".to_owned()]);
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    let summary = c.summary.as_ref().expect("summary");
    assert!(summary.abort.is_none(), "{:?}", summary.abort);
    assert_eq!(summary.rollback_applies, 0);
    assert_eq!(summary.applies, 6);
}

/// `/metrics` (the text the controller serves there) after a simulated rollout with an abort:
/// the hook calls, the abort and the rollouts in progress match the
/// rollout's own summary.
#[tokio::test]
async fn metrics_scraped_after_an_abort_match_the_rollout() {
    use std::sync::Arc;

    use rollout_controller::metrics::{ControllerMetrics, Metered};

    /// The value of `series` (its name and labels as encoded) in `text`.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .filter_map(|line| line.strip_prefix(series))
            .filter_map(|rest| rest.strip_prefix(' '))
            .find_map(|value| value.split(' ').next()?.parse().ok())
    }

    let metrics = Arc::new(ControllerMetrics::new());
    let mut config = config(8, strategy("Progressive", Some("25%"), true, true));
    config.metrics = Some(metrics.clone());
    let recorder = Recorder::new(Metered::new(
        Scripted::new(&["cluster-004"]),
        metrics.clone(),
    ));
    let mut collect = Collect::default();
    let summary = run(
        &config,
        &recorder,
        &Tracing::disabled(),
        Some("http://gateway"),
        &mut collect,
    )
    .await
    .expect("runs");
    assert_eq!(summary.result, Outcome::Aborted);

    // What `/metrics` answers (the controller's tests serve it over HTTP).
    let text = metrics.encode();
    let calls = |hook: &str| {
        sample(
            &text,
            &format!(
                r#"rollout_controller_hook_calls_total{{hook="{hook}",target="scripted",code="OK"}}"#
            ),
        )
        .unwrap_or_else(|| panic!("{hook} in\n{text}"))
    };
    let counts = summary.hook_calls;
    assert_eq!(calls("Initialize"), 1.0);
    assert_eq!(calls("BeginRollout"), counts.begin_rollout as f64);
    assert_eq!(calls("ProgressRollout"), counts.progress_rollout as f64);
    assert_eq!(
        calls("ValidateRolloutCompletion"),
        counts.validate_rollout_completion as f64
    );
    assert_eq!(
        calls("MutateManifestWork"),
        counts.mutate_manifest_work as f64
    );
    assert_eq!(
        sample(
            &text,
            r#"rollout_controller_aborts_total{action="RollBack"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, r#"rollout_controller_aborts_total{action="Stop"}"#),
        None
    );
    // The rollback is finished: nothing in progress.
    for aborting in ["false", "true"] {
        assert_eq!(
            sample(
                &text,
                &format!(r#"rollout_controller_rollouts_in_progress{{aborting="{aborting}"}}"#)
            ),
            Some(0.0),
            "{text}"
        );
    }
}

/// The JSON's `index` is the cluster_index the plugin saw: with a
/// mandatory group that is not the first, its clusters are 1 and 2.
#[tokio::test]
async fn applied_indexes_are_the_cluster_index_of_the_requests() {
    let strategy = StrategyFlags {
        kind: "ProgressivePerGroup".into(),
        mandatory_groups: vec!["group-1".into()],
        plugin: Some("scripted".into()),
        ..StrategyFlags::default()
    }
    .strategy()
    .expect("valid");
    let mut config = config(4, strategy);
    config.groups = 2;
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    let applied: Vec<(&str, usize, &str)> = c
        .steps
        .iter()
        .flat_map(|s| &s.applied)
        .map(|a| {
            (
                a.cluster.as_str(),
                a.index,
                a.annotations["test/position"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        applied,
        [
            ("cluster-003", 1, "1/4"),
            ("cluster-004", 2, "2/4"),
            ("cluster-001", 3, "3/4"),
            ("cluster-002", 4, "4/4"),
        ]
    );
}

#[tokio::test]
async fn a_failed_validation_aborts_with_aborting_requests() {
    let config = config(8, strategy("Progressive", Some("25%"), true, true));
    let c = simulate(&config, Scripted::new(&["cluster-004"]))
        .await
        .expect("runs");
    let summary = c.summary.as_ref().expect("summary");
    assert_eq!(summary.result, Outcome::Aborted);

    // Validating clusters wait for the plugin in real time.
    let validating = c
        .steps
        .iter()
        .find(|s| s.clusters.validating > 0)
        .expect("a validating step");
    assert!(validating.real_wait, "{validating:?}");
    assert_eq!(
        validating.validations.in_progress_message.as_deref(),
        Some("scripted: soaking on cluster-001")
    );

    let abort_step = c
        .steps
        .iter()
        .position(|s| s.abort().is_some())
        .expect("an abort");
    assert!(c.steps[abort_step].events.iter().any(|e| matches!(
        e,
        Event::ValidationFailed { cluster, message } if cluster == "cluster-004" && message.contains("smoke test failed")
    )));
    for step in &c.steps[..abort_step] {
        assert!(step.applied.iter().all(|a| !a.aborting));
    }
    let rollback: Vec<&report::AppliedWork> = c.steps[abort_step..]
        .iter()
        .flat_map(|s| &s.applied)
        .collect();
    assert_eq!(rollback.len(), 4);
    for work in &rollback {
        assert!(work.aborting);
        assert_eq!(work.annotations["test/aborting"], "true");
        assert_eq!(work.mutated_by, ["scripted"]);
    }
    // Every apply went through BeginRollout and MutateManifestWork; the
    // rollback's said aborting.
    let calls = summary.hook_calls;
    assert_eq!(calls.begin_rollout as usize, summary.applies);
    assert_eq!(calls.mutate_manifest_work as usize, summary.applies);
    assert_eq!(calls.progress_rollout as usize, summary.steps);
    assert_eq!(summary.aborting_hook_calls.begin_rollout, 4);
    assert_eq!(summary.aborting_hook_calls.mutate_manifest_work, 4);
    let per_step: u64 = c
        .steps
        .iter()
        .map(|s| s.hook_calls.validate_rollout_completion)
        .sum();
    assert_eq!(per_step, calls.validate_rollout_completion);
    // Two asks per validation: INPROGRESS, then the verdict; 4 updated and
    // 4 restored.
    assert_eq!(calls.validate_rollout_completion, 16);

    let works = summary.work_list.as_ref().expect("works");
    for w in works {
        let rolled_back = w.cluster.as_str() <= "cluster-004";
        assert_eq!(w.applies, if rolled_back { 2 } else { 0 }, "{w:?}");
        assert_eq!(
            w.revision,
            summary.previous_revision.clone().expect("previous")
        );
        if rolled_back {
            assert_eq!(w.annotations["test/aborting"], "true");
            assert_eq!(w.validation.as_deref(), Some("Succeeded"));
        }
    }
}

#[tokio::test]
async fn the_plugin_config_reaches_every_hook_and_decides_the_failure() {
    // The flags' plugin would fail cluster-002; the rollout's configuration
    // says cluster-003.
    let strategy = StrategyFlags {
        kind: "Progressive".into(),
        max_concurrency: Some("25%".into()),
        plugin: Some("scripted".into()),
        plugin_config: Some(r#"{"failClusters": ["cluster-003"]}"#.into()),
        abort_on_failure: true,
        ..StrategyFlags::default()
    }
    .strategy()
    .expect("valid");
    let hooks = Scripted::new(&["cluster-002"]);
    let configs = Arc::clone(&hooks.configs);
    let c = simulate(&config(8, strategy), hooks).await.expect("runs");
    let summary = c.summary.as_ref().expect("summary");
    assert_eq!(summary.result, Outcome::Aborted);
    let failed: Vec<&str> = c
        .steps
        .iter()
        .flat_map(|s| &s.events)
        .filter_map(|e| match e {
            Event::ValidationFailed { cluster, .. } => Some(cluster.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(failed, ["cluster-003"]);

    let configs = configs.lock().expect("lock");
    for hook in [
        HookKind::BeginRollout,
        HookKind::ProgressRollout,
        HookKind::ValidateRolloutCompletion,
        HookKind::MutateManifestWork,
    ] {
        assert!(configs.iter().any(|(h, _)| *h == hook), "{hook} called");
    }
    // The same bytes on every call, the rollback's included.
    assert!(summary.aborting_hook_calls.begin_rollout > 0);
    for (hook, config) in configs.iter() {
        assert_eq!(
            config.as_deref(),
            Some(br#"{"failClusters":["cluster-003"]}"#.as_slice()),
            "{hook}"
        );
    }
}

#[tokio::test]
async fn a_first_rollout_that_aborts_stops() {
    let mut config = config(4, strategy("Progressive", Some("2"), false, true));
    config.first_rollout = true;
    config.fail = BTreeSet::from(["cluster-002".to_owned()]);
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    let summary = c.summary.expect("summary");
    assert_eq!(summary.result, Outcome::Aborted);
    assert_eq!(summary.abort.expect("abort").action, "Stop");
    assert_eq!(summary.applies, 2);
    assert_eq!(summary.previous_revision, None);
}

#[tokio::test]
async fn failures_beyond_max_failures_without_abort_end_failed() {
    let mut config = config(4, strategy("Progressive", Some("1"), false, false));
    config.fail = BTreeSet::from(["cluster-002".to_owned()]);
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    let summary = c.summary.expect("summary");
    assert_eq!(summary.result, Outcome::Failed);
    // cluster-002 failed: nothing after it was started.
    assert_eq!(summary.applies, 2);
    assert_eq!(c.steps.last().map(|s| s.next_in_seconds), Some(None));
}

#[tokio::test]
async fn a_deadline_times_clusters_out_once() {
    let strategy = |abort| {
        StrategyFlags {
            kind: "All".into(),
            progress_deadline: Some("10s".into()),
            abort_on_failure: abort,
            ..StrategyFlags::default()
        }
        .strategy()
        .expect("valid")
    };
    // Timed out at 11 s (reported at 1 s), done at 30 s all the same: a
    // time-out is not remembered, as in OCM; the rollout completes.
    let c = simulate(&config(3, strategy(false)), Scripted::new(&[]))
        .await
        .expect("runs");
    let timeouts: Vec<&Event> = c
        .steps
        .iter()
        .flat_map(|s| &s.events)
        .filter(|e| matches!(e, Event::TimedOut { .. }))
        .collect();
    assert_eq!(timeouts.len(), 3);
    let at_11 = c
        .steps
        .iter()
        .find(|s| s.elapsed_seconds == 11.0)
        .expect("a step at the deadline");
    assert_eq!(at_11.clusters.time_out, 3);
    assert_eq!(c.summary.expect("summary").result, Outcome::Succeeded);

    // With abort on, the time-out aborts and rolls back.
    let c = simulate(&config(3, strategy(true)), Scripted::new(&[]))
        .await
        .expect("runs");
    let summary = c.summary.expect("summary");
    assert_eq!(summary.result, Outcome::Aborted);
    let abort = summary.abort.expect("abort");
    assert_eq!(abort.failures.len(), 3);
    assert!(
        abort
            .failures
            .iter()
            .all(|f| f.status == RolloutStatus::TimeOut)
    );
}

/// An agent without condition rules reports no `Progressing`: the design's
/// fallback counts every cluster as progressing from its `Applied`, so the
/// deadline times it out and, with abort on, the rollout aborts instead of
/// waiting for ever.
#[tokio::test]
async fn without_progressing_the_deadline_times_out_and_aborts() {
    let strategy = |abort| {
        StrategyFlags {
            kind: "All".into(),
            progress_deadline: Some("10s".into()),
            plugin: Some("scripted".into()),
            abort_on_failure: abort,
            ..StrategyFlags::default()
        }
        .strategy()
        .expect("valid")
    };
    let mut config = config(3, strategy(true));
    config.agent_progressing = false;
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    let summary = c.summary.as_ref().expect("summary");
    assert_eq!(summary.result, Outcome::Aborted);
    let reported = c
        .steps
        .iter()
        .find(|s| s.elapsed_seconds == 1.0)
        .expect("a step at the agent's report");
    assert_eq!(reported.clusters.progressing, 3);
    assert_eq!(reported.clusters.validating, 0);
    let abort_step = c
        .steps
        .iter()
        .find(|s| s.abort().is_some())
        .expect("an abort");
    assert_eq!(abort_step.elapsed_seconds, 11.0, "Applied at 1 s + 10 s");
    let abort = summary.abort.as_ref().expect("abort");
    assert_eq!(abort.action, "RollBack");
    assert_eq!(abort.failures.len(), 3);
    assert!(
        abort
            .failures
            .iter()
            .all(|f| f.status == RolloutStatus::TimeOut)
    );
    assert_eq!(
        summary.hook_calls.validate_rollout_completion, 0,
        "never done progressing"
    );

    // Without abort it ends failed, never succeeded.
    config.strategy = strategy(false);
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    assert_eq!(c.summary.expect("summary").result, Outcome::Failed);
}

#[tokio::test]
async fn an_unreachable_gateway_fails_before_the_first_step() {
    let config = config(3, strategy("All", None, true, false));
    let mut hooks = Scripted::new(&[]);
    hooks.down = true;
    let err = simulate(&config, hooks).await.err().expect("fails");
    match &err {
        SimError::Initialize { plugin, error } => {
            assert_eq!(plugin, "scripted");
            assert!(SimError::is_unreachable(error));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_permanent_hook_error_ends_the_run_at_the_step_that_got_it() {
    let config = config(3, strategy("All", None, true, false));
    let mut hooks = Scripted::new(&[]);
    hooks.refuse = Some(tonic::Code::InvalidArgument);
    let configs = hooks.configs.clone();
    let recorder = Recorder::new(hooks);
    let mut collect = Collect::default();
    let telemetry = Tracing::disabled();
    let err = run(
        &config,
        &recorder,
        &telemetry,
        Some("http://gateway"),
        &mut collect,
    )
    .await
    .expect_err("ends");
    match &err {
        SimError::PluginRefused(error) => {
            assert_eq!(error.code, tonic::Code::InvalidArgument);
            assert!(
                err.to_string()
                    .contains("pluginConfig.weight: expected a number"),
                "{err}"
            );
        }
        other => panic!("{other:?}"),
    }
    // The step that got it is reported, and the plugin is not called again.
    assert_eq!(collect.steps.len(), 1);
    let begins = configs
        .lock()
        .expect("lock")
        .iter()
        .filter(|(hook, _)| *hook == HookKind::BeginRollout)
        .count();
    assert_eq!(begins, 3);
}

#[tokio::test]
async fn a_transient_hook_error_is_retried() {
    let mut config = config(3, strategy("All", None, true, false));
    config.max_steps = 3;
    let mut hooks = Scripted::new(&[]);
    hooks.refuse = Some(tonic::Code::DeadlineExceeded);
    let err = simulate(&config, hooks).await.err().expect("fails");
    assert!(matches!(err, SimError::TooManySteps(3)), "{err:?}");
}

#[tokio::test]
async fn the_step_limit_is_kept() {
    let mut config = config(3, strategy("Progressive", Some("1"), false, false));
    config.max_steps = 2;
    let err = simulate(&config, Scripted::new(&[]))
        .await
        .err()
        .expect("fails");
    assert!(matches!(err, SimError::TooManySteps(2)), "{err:?}");
}

#[tokio::test]
async fn a_fixed_tick_moves_the_clock_evenly() {
    let mut config = config(2, strategy("All", None, false, false));
    config.tick = Some(Duration::from_secs(7));
    let c = simulate(&config, Scripted::new(&[])).await.expect("runs");
    let times: Vec<f64> = c.steps.iter().map(|s| s.elapsed_seconds).collect();
    assert_eq!(times, [0.0, 7.0, 14.0, 21.0, 28.0, 35.0]);
    assert_eq!(c.summary.expect("summary").result, Outcome::Succeeded);
}

/// The CRDs of `shape`, with the project's own, as `--crds` gives them,
/// and a Progressive strategy (2 at a time) with a plugin and the abort.
fn api_config(
    shape: rollout_controller::api::CrdShape,
    objects: api::ObjectsShape,
) -> api::ApiConfig {
    api_config_of(
        shape,
        objects,
        StrategyFlags {
            kind: "Progressive".into(),
            max_concurrency: Some("2".into()),
            plugin: Some("scripted".into()),
            abort_on_failure: true,
            ..StrategyFlags::default()
        },
    )
}

/// [`api_config`] with the strategy of `flags`.
fn api_config_of(
    shape: rollout_controller::api::CrdShape,
    objects: api::ObjectsShape,
    flags: StrategyFlags,
) -> api::ApiConfig {
    let crds: Vec<Value> = rollout_controller::api::crd::ocm_kinds(shape)
        .iter()
        .map(|c| serde_json::to_value(c).expect("a CRD"))
        .collect();
    api::ApiConfig {
        schemas: Arc::new(api::ApiConfig::schemas(
            rollout_controller::api::prune::Schemas::from_crds(&crds),
        )),
        strategy: flags.raw().expect("valid"),
        shape: objects,
    }
}

/// What a rollout did, to compare two runs.
fn fingerprint(
    c: &Collect,
) -> (
    Outcome,
    HookCounts,
    HookCounts,
    usize,
    usize,
    Option<String>,
) {
    let s = c.summary.as_ref().expect("summary");
    (
        s.result,
        s.hook_calls,
        s.aborting_hook_calls,
        s.applies,
        s.rollback_applies,
        s.current_revision.clone(),
    )
}

/// On a hub with OCM's CRDs (which prune the design's fields), the
/// plugin, the abort and the rollback read from the carrier work exactly
/// as when nothing is pruned; the failed cluster's details are in the
/// stored carrier status, step by step and at the end.
#[tokio::test]
async fn under_ocm_crds_the_carrier_keeps_the_abort_and_rollback_with_a_plugin() {
    let base = config(6, strategy("Progressive", Some("2"), true, true));
    let today = simulate(&base, Scripted::new(&["cluster-003"]))
        .await
        .expect("runs");
    let mut pruned = base.clone();
    pruned.api = Some(api_config(
        rollout_controller::api::CrdShape::Ocm,
        api::ObjectsShape::Carrier,
    ));
    let c = simulate(&pruned, Scripted::new(&["cluster-003"]))
        .await
        .expect("runs");
    assert_eq!(fingerprint(&c), fingerprint(&today));
    let summary = c.summary.as_ref().expect("summary");
    assert_eq!(summary.result, Outcome::Aborted);
    assert!(summary.aborting_hook_calls.mutate_manifest_work > 0);
    assert!(
        summary.api_warnings.is_empty(),
        "{:?}",
        summary.api_warnings
    );
    let plan = c.plan.as_ref().expect("plan");
    assert_eq!(plan.plugin.as_ref().map(|p| p.0.as_str()), Some("scripted"));
    // The stored status names the failed cluster with the plugin's message.
    let abort_step = c
        .steps
        .iter()
        .position(|s| s.abort().is_some())
        .expect("abort");
    let failed = &c.steps[abort_step].status_clusters;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].cluster_name, "cluster-003");
    assert_eq!(failed[0].rollout_status, RolloutStatus::Failed);
    assert_eq!(
        failed[0].message.as_deref(),
        Some("scripted: smoke test failed on cluster-003")
    );
    let status = summary.rollout_status.as_ref().expect("the stored status");
    assert!(status["abortedTime"].is_string(), "{status:#}");
    assert_eq!(
        status["currentRevision"].as_str(),
        summary.previous_revision.as_deref()
    );
    // The JSON of the step carries them too.
    let line = serde_json::to_value(&c.steps[abort_step]).expect("JSON");
    assert_eq!(line["statusClusters"][0]["clusterName"], "cluster-003");
}

/// The design's API on OCM's CRDs: the API server drops the plugin and the
/// abort from the ManifestWorkReplicaSet, so no plugin is called and a
/// failure does not abort; the warnings name the dropped fields.
#[tokio::test]
async fn under_ocm_crds_the_design_fields_on_the_mwrs_are_pruned_and_no_plugin_is_called() {
    let mut pruned = config(6, strategy("Progressive", Some("2"), true, true));
    pruned.api = Some(api_config(
        rollout_controller::api::CrdShape::Ocm,
        api::ObjectsShape::DesignApi,
    ));
    let c = simulate(&pruned, Scripted::new(&["cluster-003"]))
        .await
        .expect("runs");
    let summary = c.summary.as_ref().expect("summary");
    assert_eq!(summary.hook_calls, HookCounts::default());
    assert_eq!(summary.plugin, None);
    assert!(summary.abort.is_none());
    assert!(
        summary
            .api_warnings
            .iter()
            .any(|w| w.contains("\"spec.placementRefs[0].rolloutStrategy.plugin\"")),
        "{:?}",
        summary.api_warnings
    );
}

/// A hub whose ManifestWorkReplicaSet CRD has the design's fields works
/// from the ManifestWorkReplicaSet alone, as without pruning.
#[tokio::test]
async fn under_design_crds_the_mwrs_alone_works() {
    let base = config(6, strategy("Progressive", Some("2"), true, true));
    let today = simulate(&base, Scripted::new(&["cluster-003"]))
        .await
        .expect("runs");
    let mut design = base.clone();
    design.api = Some(api_config(
        rollout_controller::api::CrdShape::Design,
        api::ObjectsShape::DesignApi,
    ));
    let c = simulate(&design, Scripted::new(&["cluster-003"]))
        .await
        .expect("runs");
    assert_eq!(fingerprint(&c), fingerprint(&today));
    assert!(c.summary.as_ref().expect("summary").api_warnings.is_empty());
}
