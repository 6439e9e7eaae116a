use std::time::Duration;

use super::*;
use crate::orchestrate::{AbortReport, PlacementOutcome, WorkCounts};
use crate::rollout::RolloutResult;

fn placement(aborting: bool, stopped: bool, complete: bool) -> PlacementOutcome {
    use crate::orchestrate::ClusterReport;
    use crate::rollout::RolloutStatus;
    PlacementOutcome {
        name: "p".into(),
        desired_revision: "r".into(),
        aborting,
        stopped,
        held: false,
        paused: Vec::new(),
        promoted: Vec::new(),
        clusters: vec![ClusterReport {
            cluster: "c1".into(),
            status: if complete {
                RolloutStatus::Succeeded
            } else {
                RolloutStatus::Progressing
            },
            group_index: 0,
            group_name: String::new(),
            last_transition_time: None,
            revision: None,
            message: None,
        }],
        result: RolloutResult::default(),
        works: WorkCounts::default(),
        updated: 0,
        at_update: 0,
        hook_errors: Vec::new(),
        world_errors: Vec::new(),
        conflicts: Vec::new(),
        applied: Vec::new(),
        deleted: Vec::new(),
        requeue_after: None,
    }
}

fn outcome(p: PlacementOutcome, abort: Option<AbortAction>) -> DeployOutcome {
    DeployOutcome {
        abort: abort.map(|action| AbortReport {
            requested: None,
            placement: "p".into(),
            action,
            failures: Vec::new(),
        }),
        placements: vec![p],
        aborted_at: None,
        deleted_stale: Vec::new(),
        world_errors: Vec::new(),
        requeue_after: None,
    }
}

#[test]
fn phases_of_an_outcome() {
    use RolloutPhase::*;
    let phase = |a, s, c| RolloutPhase::of(&outcome(placement(a, s, c), None));
    assert_eq!(phase(false, false, false), RollingOut);
    assert_eq!(phase(false, false, true), Idle);
    assert_eq!(phase(true, false, false), RollingBack);
    assert_eq!(phase(true, false, true), Idle);
    assert_eq!(phase(true, true, false), Idle);
}

#[test]
fn reconciles_hooks_rollouts_and_aborts_are_counted() {
    let m = ControllerMetrics::new();
    let text = m.encode();
    // The gauges exist before anything happened.
    assert_eq!(
        sample(
            &text,
            r#"rollout_controller_rollouts_in_progress{aborting="false"}"#
        ),
        Some(0.0)
    );
    assert_eq!(sample(&text, "rollout_controller_leader"), Some(0.0));
    // So do the reconcile counters, at 0 for every result and cause.
    for result in ["success", "error"] {
        assert_eq!(
            sample(
                &text,
                &format!(r#"rollout_controller_reconciles_total{{result="{result}"}}"#)
            ),
            Some(0.0),
            "{text}"
        );
    }
    for error in ["kube", "manifestwork", "invalid"] {
        assert_eq!(
            sample(
                &text,
                &format!(r#"rollout_controller_reconcile_errors_total{{error="{error}"}}"#)
            ),
            Some(0.0),
            "{text}"
        );
    }

    m.record_reconcile(Duration::from_millis(20), None);
    m.record_reconcile(Duration::from_millis(40), Some(ReconcileErrorKind::Kube));
    m.record_hook(
        HookKind::BeginRollout,
        "canary",
        None,
        Duration::from_millis(3),
    );
    m.record_hook(
        HookKind::BeginRollout,
        "canary",
        Some(&crate::hooks::HookError {
            hook: HookKind::BeginRollout,
            code: tonic::Code::Unavailable,
            message: "circuit open".into(),
            origin: crate::hooks::Origin::Answer,
        }),
        Duration::from_millis(2),
    );
    m.record_rollout("ns/a", &outcome(placement(false, false, false), None));
    m.record_rollout("ns/b", &outcome(placement(false, false, false), None));
    m.record_rollout(
        "ns/b",
        &outcome(placement(true, false, false), Some(AbortAction::RollBack)),
    );
    m.record_rollout(
        "ns/c",
        &outcome(placement(true, true, false), Some(AbortAction::Stop)),
    );
    m.set_leader(true);

    let text = m.encode();
    let value =
        |series: &str| sample(&text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
    assert_eq!(
        value(r#"rollout_controller_reconciles_total{result="success"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_reconciles_total{result="error"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_reconcile_errors_total{error="kube"}"#),
        1.0
    );
    assert_eq!(
        value("rollout_controller_reconcile_duration_seconds_count"),
        2.0
    );
    assert_eq!(
        value(
            r#"rollout_controller_hook_calls_total{hook="BeginRollout",target="canary",code="OK"}"#
        ),
        1.0
    );
    assert_eq!(
        value(
            r#"rollout_controller_hook_calls_total{hook="BeginRollout",target="canary",code="UNAVAILABLE"}"#
        ),
        1.0
    );
    assert_eq!(
        value(
            r#"rollout_controller_hook_call_duration_seconds_count{hook="BeginRollout",target="canary"}"#
        ),
        2.0
    );
    assert_eq!(
        value(r#"rollout_controller_rollouts_in_progress{aborting="false"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_rollouts_in_progress{aborting="true"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_aborts_total{action="RollBack"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_aborts_total{action="Stop"}"#),
        1.0
    );
    assert_eq!(value("rollout_controller_leader"), 1.0);

    // A deleted ManifestWorkReplicaSet no longer counts.
    m.forget_rollout("ns/b");
    m.record_rollout("ns/a", &outcome(placement(false, false, true), None));
    let text = m.encode();
    assert_eq!(
        sample(
            &text,
            r#"rollout_controller_rollouts_in_progress{aborting="true"}"#
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            r#"rollout_controller_rollouts_in_progress{aborting="false"}"#
        ),
        Some(0.0)
    );
}

/// A plugin the gateway serves, for the gateway in
/// [`names_the_gateway_did_not_resolve_make_one_series`].
struct Hello;

impl rollout_plugin_sdk::RolloutPlugin for Hello {
    fn info(&self) -> rollout_plugin_sdk::PluginInfo {
        rollout_plugin_sdk::PluginInfo::new("hello", "0.1.0")
    }
}

/// 18 ManifestWorkReplicaSets naming plugins the gateway does not know
/// (half of them 10,090 characters long) through a real gateway on
/// loopback: their calls count under one `target`, the registered plugin's
/// under its own name.
#[tokio::test]
async fn names_the_gateway_did_not_resolve_make_one_series() {
    use std::sync::Arc;

    use crate::hooks::{Call, GatewayHooks, GatewayOptions, HookCalls};
    use crate::telemetry::Tracing;

    let plugin = rollout_plugin_sdk::testing::spawn(Hello)
        .await
        .expect("the plugin serves");
    let dir = tempfile::tempdir().expect("a directory");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "plugins:\n  - name: hello\n    endpoint: {}\n    insecure: true\n",
            plugin.local_addr()
        ),
    )
    .expect("written");
    let gateway = rollout_gateway::app::start(rollout_gateway::app::Options {
        configs: vec![config],
        listen: "127.0.0.1:0".parse().expect("addr"),
        admin_listen: "127.0.0.1:0".parse().expect("addr"),
        ..rollout_gateway::app::Options::default()
    })
    .await
    .expect("the gateway starts");
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: format!("http://{}", gateway.grpc_addr),
            timeout: Duration::from_secs(5),
            tls: None,
        },
        Tracing::disabled(),
    )
    .expect("a client");
    let metrics = Arc::new(ControllerMetrics::new());
    let metered = Metered::new(hooks, metrics.clone());
    let trace = opentelemetry::Context::new();
    for i in 0..18 {
        let name = if i % 2 == 0 {
            format!("bogus-{i}-{}", "x".repeat(10_090))
        } else {
            format!("bogus-{i}")
        };
        let call = Call {
            plugin: &name,
            trace: &trace,
        };
        let refused = metered.initialize(call, Default::default()).await;
        assert!(refused.is_err(), "{name:.20} is not registered");
    }
    let call = Call {
        plugin: "hello",
        trace: &trace,
    };
    metered
        .initialize(call, Default::default())
        .await
        .expect("hello is registered");

    let text = metrics.encode();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("rollout_controller_hook_calls_total{"))
        .collect();
    let targets: std::collections::BTreeSet<&str> = series
        .iter()
        .filter_map(|l| l.split("target=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(
        targets,
        ["hello", "unregistered"].into_iter().collect(),
        "{series:#?}"
    );
    assert!(
        series
            .iter()
            .any(|l| l.contains(r#"target="hello",code="OK""#)),
        "{series:#?}"
    );
    let refused: f64 = series
        .iter()
        .filter(|l| l.contains(r#"target="unregistered""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(refused, 18.0, "{series:#?}");
    assert!(text.len() < 20_000, "{} bytes of metrics", text.len());
    gateway.shutdown().await;
    plugin.shutdown().await.expect("stops");
}
