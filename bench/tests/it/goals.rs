//! The goals gwbench computes against the yardsticks of the gateway's own
//! dependencies (the minimal `h2` forwarder, the tonic forwarder) and
//! against Envoy, from the medians of a run: met, missed, or not measured
//! with the reason, and how they show in the JSON and the Markdown.

use std::collections::BTreeMap;

use rollout_bench::compare::summary::{
    BenchResults, Environment, Goal, GoalStatus, MemoryReport, RoundRecord, Settings, YardstickRun,
    goals, markdown, summarize,
};
use rollout_bench::compare::{Scenario, TargetKind};
use rollout_harness::load::Report;
use rollout_harness::stats::LatencySummary;
use rollout_proto::HookKind;

/// One round of `scenario` against `target`, costing `cpu` µs per call.
fn record(scenario: &str, target: TargetKind, cpu: Option<f64>) -> RoundRecord {
    RoundRecord {
        round: 1,
        scenario: scenario.to_owned(),
        target,
        report: Report {
            target: "http://127.0.0.1:1".to_owned(),
            hook: HookKind::MutateManifestWork,
            concurrency: 1,
            connections: 1,
            work_bytes: 4096,
            requests: 1000,
            errors: 0,
            warmup_requests: 100,
            duration_seconds: 1.0,
            throughput_rps: 5000.0,
            latency_micros: LatencySummary {
                p50: 200.0,
                p90: 250.0,
                p99: 300.0,
                max: 400.0,
                mean: 210.0,
            },
            error_samples: Vec::new(),
        },
        proxy_cpu_micros_per_call: cpu,
        plugin_cpu_micros_per_call: Some(50.0),
    }
}

/// A run of `scenarios` in which each target of `cpu` cost what it says;
/// the yardsticks absent from it are skipped with `--no-NAME`.
fn run(scenarios: &[&str], cpu: &[(TargetKind, f64)]) -> BenchResults {
    let scenarios: Vec<Scenario> = scenarios
        .iter()
        .map(|name| Scenario::parse(name).expect("valid"))
        .collect();
    let mut targets = vec![TargetKind::Direct];
    targets.extend(cpu.iter().map(|(target, _)| *target));
    let mut rounds = Vec::new();
    for scenario in &scenarios {
        rounds.push(record(&scenario.name, TargetKind::Direct, None));
        for (target, cpu) in cpu {
            rounds.push(record(&scenario.name, *target, Some(*cpu)));
        }
    }
    let yardsticks = TargetKind::YARDSTICKS
        .into_iter()
        .filter(|kind| !targets.contains(kind))
        .map(|kind| {
            let skipped = Some(format!("--no-{kind}"));
            (
                kind,
                YardstickRun {
                    version: None,
                    skipped,
                },
            )
        })
        .collect::<BTreeMap<_, _>>();
    BenchResults {
        settings: Settings {
            hook: HookKind::MutateManifestWork,
            rounds: 1,
            duration_seconds: 1.0,
            warmup_seconds: 0.1,
            connections: 1,
            registered_plugins: 100,
            scenarios: scenarios.clone(),
            targets: targets.clone(),
            traced_scenarios: Vec::new(),
            command_line: vec!["gwbench".to_owned()],
        },
        environment: Environment {
            cpus: 2,
            clock_ticks_per_second: 100,
            yardsticks,
            ..Environment::default()
        },
        summary: summarize(&scenarios, &targets, &rounds),
        memory: MemoryReport::default(),
        spans: None,
        goals: Vec::new(),
        rounds,
    }
}

fn goal<'a>(goals: &'a [Goal], name: &str) -> &'a Goal {
    goals
        .iter()
        .find(|g| g.goal == name)
        .unwrap_or_else(|| panic!("no goal {name:?} in {goals:#?}"))
}

#[test]
fn the_gateway_is_held_to_the_h2_forwarder_plus_15_percent_at_one_call() {
    use TargetKind::*;
    // 114 µs against 100 µs: within 15 %; 116 against 100: not.
    let within = run(&["c1-4k"], &[(Gateway, 114.0), (H2Forwarder, 100.0)]);
    let over = run(&["c1-4k"], &[(Gateway, 116.0), (H2Forwarder, 100.0)]);
    let name = "c1-4k: gateway CPU per call ≤ h2-forwarder's +15.0 %";
    let met = goal(&goals(&within), name).clone();
    assert_eq!(met.status, GoalStatus::Met, "{met:?}");
    assert_eq!((met.figure, met.yardstick), (Some(114.0), Some(115.0)));
    assert_eq!(met.yardstick_name, "h2-forwarder × 1.15");
    assert_eq!(goal(&goals(&over), name).status, GoalStatus::Missed);
}

#[test]
fn at_32_in_flight_the_bound_is_20_percent() {
    use TargetKind::*;
    let results = run(&["c32-4k-mut"], &[(Gateway, 59.0), (H2Forwarder, 50.0)]);
    let found = goals(&results);
    let c32 = goal(
        &found,
        "c32-4k-mut: gateway CPU per call ≤ h2-forwarder's +20.0 %",
    );
    assert_eq!((c32.status, c32.yardstick), (GoalStatus::Met, Some(60.0)));
}

#[test]
fn the_gateway_must_be_cheaper_than_the_tonic_forwarder() {
    use TargetKind::*;
    let results = run(
        &["c1-4k", "c1-4k-mut"],
        &[(Gateway, 120.0), (TonicForwarder, 150.0)],
    );
    let found = goals(&results);
    assert_eq!(
        goal(&found, "c1-4k: gateway CPU per call ≤ tonic-forwarder's").status,
        GoalStatus::Met
    );
    let dearer = run(&["c1-4k"], &[(Gateway, 151.0), (TonicForwarder, 150.0)]);
    assert_eq!(
        goal(
            &goals(&dearer),
            "c1-4k: gateway CPU per call ≤ tonic-forwarder's"
        )
        .status,
        GoalStatus::Missed
    );
}

#[test]
fn envoy_must_cost_one_and_a_half_times_the_gateway_in_every_scenario() {
    use TargetKind::*;
    let results = run(&["c1-4k", "c8-64k"], &[(Gateway, 100.0), (Envoy, 150.0)]);
    let found = goals(&results);
    for scenario in ["c1-4k", "c8-64k"] {
        let envoy = goal(
            &found,
            &format!("{scenario}: gateway CPU per call ≤ Envoy's ÷ 1.5"),
        );
        assert_eq!(envoy.status, GoalStatus::Met, "{envoy:?}");
        assert_eq!(envoy.yardstick, Some(100.0));
        assert_eq!(envoy.yardstick_name, "envoy ÷ 1.5");
    }
    let close = run(&["c1-4k"], &[(Gateway, 100.0), (Envoy, 140.0)]);
    assert_eq!(
        goal(
            &goals(&close),
            "c1-4k: gateway CPU per call ≤ Envoy's ÷ 1.5"
        )
        .status,
        GoalStatus::Missed
    );
}

#[test]
fn a_yardstick_left_out_leaves_its_goals_not_measured_saying_why() {
    use TargetKind::*;
    let results = run(&["c1-4k"], &[(Gateway, 100.0)]);
    let found = goals(&results);
    for (name, why) in [
        (
            "c1-4k: gateway CPU per call ≤ h2-forwarder's +15.0 %",
            "h2-forwarder skipped (--no-h2-forwarder)",
        ),
        (
            "c1-4k: gateway CPU per call ≤ tonic-forwarder's",
            "tonic-forwarder skipped (--no-tonic-forwarder)",
        ),
        (
            "c1-4k: gateway CPU per call ≤ Envoy's ÷ 1.5",
            "envoy skipped (--no-envoy)",
        ),
        (
            "c1-4k: gateway added p50 ≤ nginx's",
            "nginx skipped (--no-nginx)",
        ),
    ] {
        let goal = goal(&found, name);
        assert_eq!(goal.status, GoalStatus::NotMeasured, "{goal:?}");
        assert_eq!(goal.note.as_deref(), Some(why), "{name}");
    }
    // A scenario that did not run is said so.
    let c32 = goal(
        &found,
        "c32-4k-mut: gateway CPU per call ≤ h2-forwarder's +20.0 %",
    );
    assert_eq!(c32.note.as_deref(), Some("scenario c32-4k-mut did not run"));
}

#[test]
fn the_yardsticks_show_in_the_json_and_the_tables() {
    use TargetKind::*;
    let mut results = run(
        &["c1-4k"],
        &[
            (Gateway, 110.0),
            (H2Forwarder, 100.0),
            (TonicForwarder, 150.0),
            (Nghttpx, 90.0),
            (Envoy, 200.0),
        ],
    );
    results.environment.yardsticks.insert(
        Nghttpx,
        YardstickRun {
            version: Some("nghttpx 1.52.0".to_owned()),
            skipped: None,
        },
    );
    results.goals = goals(&results);
    let json = serde_json::to_value(&results).expect("serializable");
    let targets: Vec<&str> = json["settings"]["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    assert_eq!(
        targets,
        [
            "direct",
            "gateway",
            "h2-forwarder",
            "tonic-forwarder",
            "nghttpx",
            "envoy"
        ]
    );
    assert_eq!(
        json["environment"]["yardsticks"]["nghttpx"]["version"],
        "nghttpx 1.52.0"
    );
    assert_eq!(
        json["environment"]["yardsticks"]["nginx"]["skipped"],
        "--no-nginx"
    );
    let back: BenchResults = serde_json::from_value(json).expect("readable");
    assert_eq!(back, results);

    let table = markdown(&results);
    for row in [
        "| c1-4k | h2-forwarder | 200.0 | 300.0 | 5000 | +0.0 | +0.0 | 1.00× | 100.0 | 0 |",
        "| c1-4k | envoy | 200.0 | 300.0 | 5000 | +0.0 | +0.0 | 1.00× | 200.0 | 0 |",
        "| c1-4k: gateway CPU per call ≤ h2-forwarder's +15.0 % | 110.0 µs | 115.0 µs (h2-forwarder × 1.15) | **met** |",
        "| c1-4k: gateway CPU per call ≤ Envoy's ÷ 1.5 | 110.0 µs | 133.3 µs (envoy ÷ 1.5) | **met** |",
        "nghttpx 1.52.0",
        "nginx skipped (--no-nginx)",
    ] {
        assert!(table.contains(row), "{row}\n{table}");
    }
}
