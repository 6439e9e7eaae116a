//! `rollout-controller simulate` as a user runs it, without a plugin (so
//! without a gateway): the JSON lines of docs/plugin-api.md §5, OCM's own rollout
//! over the simulated fleet, the terminal's output, and the exit statuses
//! of bad flags, of a gateway that is not there and of one reached with
//! the wrong scheme. The rollout through
//! the real gateway and plugins is `demo/tests/e2e.rs`.

use std::process::{Command, Output};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_rollout-controller");

fn simulate(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("simulate")
        .args(args)
        .env_remove("ROLLOUT_CONTROLLER_GATEWAY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("runs rollout-controller")
}

fn json_lines(output: &Output) -> (Vec<Value>, Value) {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let summary = lines.pop().expect("a summary line");
    (lines, summary)
}

fn applied(step: &Value) -> Vec<String> {
    step["applied"]
        .as_array()
        .expect("applied")
        .iter()
        .map(|a| a["cluster"].as_str().expect("cluster").to_owned())
        .collect()
}

#[test]
fn json_lines_follow_the_contract() {
    let output = simulate(&[
        "--clusters",
        "30",
        "--groups",
        "3",
        "--strategy",
        "Progressive",
        "--max-concurrency",
        "10%",
        "--json",
    ]);
    let (steps, summary) = json_lines(&output);
    for (k, step) in steps.iter().enumerate() {
        assert_eq!(step["step"], k + 1);
        let clusters = step["clusters"].as_object().expect("clusters");
        let keys: Vec<&str> = clusters.keys().map(String::as_str).collect();
        for status in [
            "ToApply",
            "Progressing",
            "Validating",
            "Succeeded",
            "Failed",
            "TimeOut",
        ] {
            assert!(keys.contains(&status), "{status} in {keys:?}");
        }
        let total: u64 = clusters.values().filter_map(Value::as_u64).sum();
        assert_eq!(total, 30);
    }
    assert_eq!(summary["result"], "Succeeded");
    assert_eq!(summary["clusters"], 30);
    assert_eq!(summary["steps"], steps.len());
    let calls = summary["hookCalls"].as_object().expect("hookCalls");
    assert_eq!(calls.len(), 4);
    assert!(
        calls.values().all(|n| n == 0),
        "no plugin, no hook: {calls:?}"
    );

    // 10% of 30: three at a time, in the rollout order, a new batch once
    // the previous one is done.
    let batches: Vec<Vec<String>> = steps
        .iter()
        .map(applied)
        .filter(|a| !a.is_empty())
        .collect();
    assert_eq!(batches.len(), 10);
    let order: Vec<String> = batches.concat();
    let expected: Vec<String> = (1..=30).map(|i| format!("cluster-{i:03}")).collect();
    assert_eq!(order, expected);
    assert!(batches.iter().all(|b| b.len() == 3));
    assert_eq!(summary["currentRevision"], summary["updateRevision"]);
    assert_eq!(
        summary["works"]["byRevision"][summary["updateRevision"].as_str().expect("hash")],
        30
    );
}

#[test]
fn a_degraded_cluster_aborts_and_rolls_back_without_hooks() {
    let output = simulate(&[
        "--clusters",
        "8",
        "--strategy",
        "Progressive",
        "--max-concurrency",
        "2",
        "--abort-on-failure",
        "--fail",
        "cluster-003",
        "--json",
    ]);
    let (steps, summary) = json_lines(&output);
    assert_eq!(summary["result"], "Aborted");
    let abort = steps
        .iter()
        .position(|s| {
            s["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["type"] == "abort"))
        })
        .expect("an abort");
    let events = steps[abort]["events"].as_array().expect("events");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "workDegraded" && e["cluster"] == "cluster-003")
    );
    // Every updated cluster is restored in the abort's step, the failing
    // one first, whatever maxConcurrency says.
    let rolled_back: Vec<String> = steps[abort..].iter().flat_map(applied).collect();
    assert_eq!(
        rolled_back,
        ["cluster-003", "cluster-001", "cluster-002", "cluster-004"]
    );
    assert_eq!(applied(&steps[abort]), rolled_back);
    assert_eq!(summary["rollbackApplies"], 4);
    assert_eq!(summary["currentRevision"], summary["previousRevision"]);
}

#[test]
fn without_abort_a_failure_beyond_max_failures_ends_failed() {
    let output = simulate(&[
        "--clusters",
        "6",
        "--strategy",
        "ProgressivePerGroup",
        "--groups",
        "3",
        "--fail",
        "cluster-001",
        "--json",
    ]);
    let (_, summary) = json_lines(&output);
    assert_eq!(summary["result"], "Failed");
    // The first group failed: the others never started.
    assert_eq!(summary["applies"], 2);
}

#[test]
fn the_terminal_shows_a_table_and_the_result() {
    let output = simulate(&["--clusters", "5", "--strategy", "All", "--list-works"]);
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    for expected in [
        "Simulated rollout of ManifestWorkReplicaSet default/web to placement fleet",
        "5 clusters, cluster-001 … cluster-005",
        "plugin      none: no hook is called",
        " step       time  ToApply Progressing Validating Succeeded Failed TimeOut",
        "applied 5: cluster-001 … cluster-005",
        "Result: Succeeded after 3 steps: 30s simulated",
        "cluster-005",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in\n{stdout}"
        );
    }
}

#[test]
fn bad_flags_exit_2_with_the_reason() {
    let table: [(&[&str], &str); 6] = [
        (&["--strategy", "Rolling"], "invalid value 'Rolling'"),
        (
            &["--strategy", "Progressive", "--max-concurrency", "120%"],
            "progressive.maxConcurrency: invalid value \"120%\"",
        ),
        (
            &["--max-concurrency", "2"],
            "--max-concurrency does not apply to strategy All",
        ),
        (
            &["--clusters", "20", "--fail", "cluster-021"],
            "--fail cluster-021: no such cluster",
        ),
        (
            &["--progress-deadline", "2d"],
            "invalid progressDeadline \"2d\"",
        ),
        (
            &["--plugin-config", "[\"soakTime\"]"],
            "--plugin-config must be a JSON object",
        ),
    ];
    for (args, reason) in table {
        let output = simulate(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
    }
}

#[test]
fn an_unreachable_gateway_is_named() {
    let output = simulate(&[
        "--clusters",
        "3",
        "--plugin",
        "safe-rollout",
        "--gateway",
        "http://127.0.0.1:1",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot reach the rollout gateway at http://127.0.0.1:1"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "no step was run");
}

/// `https://` to a real gateway that serves plaintext: the handshake gets
/// HTTP/2 frames back, and the error says so and names the `http://` URL
/// instead of calling the gateway unreachable.
#[tokio::test(flavor = "multi_thread")]
async fn an_https_url_for_a_plaintext_gateway_says_it_answered_without_tls() {
    let gateway = crate::common::gateway(&[]).await;
    let plaintext = gateway.url.clone();
    let https = plaintext.replacen("http://", "https://", 1);
    let args = [
        "--clusters",
        "3",
        "--plugin",
        "safe-rollout",
        "--gateway",
        &https,
        "--json",
    ]
    .map(str::to_owned);
    let output = tokio::task::spawn_blocking(move || {
        simulate(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("answered without TLS"), "{stderr}");
    assert!(
        stderr.contains(&format!("use --gateway {plaintext}")),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot reach"), "{stderr}");
    assert!(output.stdout.is_empty(), "no step was run");
}

/// `--metrics FILE`: the run's rollout_controller_* series, as `run` serves
/// them: one reconcile per step, the abort, nothing left in progress.
#[test]
fn metrics_are_written_to_a_file() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("controller.metrics");
    let output = simulate(&[
        "--clusters",
        "8",
        "--strategy",
        "Progressive",
        "--max-concurrency",
        "2",
        "--abort-on-failure",
        "--fail",
        "cluster-003",
        "--json",
        "--metrics",
        file.to_str().expect("a UTF-8 path"),
    ]);
    let (steps, summary) = json_lines(&output);
    assert_eq!(summary["result"], "Aborted");
    let text = std::fs::read_to_string(&file).expect("the metrics file");
    assert!(text.ends_with("# EOF\n"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let value = |series: &str| -> f64 {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{series} in\n{text}"))
            .parse()
            .expect("a number")
    };
    assert_eq!(
        value(r#"rollout_controller_reconciles_total{result="success"}"#),
        steps.len() as f64
    );
    assert_eq!(
        value(r#"rollout_controller_aborts_total{action="RollBack"}"#),
        1.0
    );
    assert_eq!(
        value(r#"rollout_controller_rollouts_in_progress{aborting="true"}"#),
        0.0
    );
}

fn crds(dir: &str) -> String {
    format!("{}/../deploy/crds/{dir}", env!("CARGO_MANIFEST_DIR"))
}

/// A directory with OCM's own ManifestWork and ManifestWorkReplicaSet CRDs,
/// from the `open-cluster-management.io/api` module `localhub/parts/go.mod`
/// pins, as a hub has them.
/// `None` (the test skips) on a machine without Go.
fn ocm_crds() -> Option<tempfile::TempDir> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    rollout_test_support::ocm_api::or_skip(rollout_test_support::ocm_api::copy_work_crds(
        dir.path(),
    ))?;
    Some(dir)
}

/// `--crds` with OCM's own CRDs: the objects are stored as a hub keeps
/// them; the abort still rolls back (its revisions live in the
/// ManifestWorkReplicaSetRollout) and the stored status names the failed
/// cluster, step by step and at the end.
#[test]
fn with_ocm_crds_the_abort_rolls_back_and_the_stored_status_names_the_failed_cluster() {
    let Some(ocm) = ocm_crds() else {
        return;
    };
    let dir = ocm.path().display().to_string();
    let args = [
        "--clusters",
        "6",
        "--strategy",
        "Progressive",
        "--max-concurrency",
        "2",
        "--abort-on-failure",
        "--fail",
        "cluster-003",
        "--crds",
        dir.as_str(),
    ];
    let mut json = args.to_vec();
    json.push("--json");
    let (steps, summary) = json_lines(&simulate(&json));
    assert_eq!(summary["result"], "Aborted");
    assert_eq!(summary["abort"]["action"], "RollBack");
    let abort = steps
        .iter()
        .position(|s| {
            s["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["type"] == "abort"))
        })
        .expect("an abort step");
    assert_eq!(
        steps[abort]["statusClusters"][0]["clusterName"],
        "cluster-003"
    );
    assert_eq!(steps[abort]["statusClusters"][0]["rolloutStatus"], "Failed");
    let status = &summary["rolloutStatus"];
    assert!(status["abortedTime"].is_string(), "{status:#}");
    assert_eq!(status["currentRevision"], summary["previousRevision"]);
    assert_eq!(
        status["placements"][0]["abortFailures"][0]["clusterName"],
        "cluster-003"
    );
    assert!(summary.get("apiWarnings").is_none(), "{summary:#}");

    let output = simulate(&args);
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("status: cluster-003 Failed on "), "{text}");
    assert!(
        text.contains("cluster-003 Failed (aborted the rollout)"),
        "{text}"
    );
}

/// The design's fields written on the ManifestWorkReplicaSet itself are
/// dropped by OCM's CRD, and the simulated API server says so.
#[test]
fn with_ocm_crds_the_design_api_is_pruned_with_a_warning() {
    let Some(ocm) = ocm_crds() else {
        return;
    };
    let dir = ocm.path().display().to_string();
    let output = simulate(&[
        "--clusters",
        "3",
        "--abort-on-failure",
        "--crds",
        dir.as_str(),
        "--design-api",
    ]);
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(
            "warning     the API server: ManifestWorkReplicaSet web: unknown field \"spec.placementRefs[0].rolloutStrategy.abortOnFailure\" dropped"
        ),
        "{text}"
    );
}

/// A directory without the ManifestWorkReplicaSet CRD: the simulated API
/// server refuses the object, naming the kind and the fix.
#[test]
fn crds_without_the_mwrs_crd_are_refused() {
    let dir = crds("");
    let output = simulate(&["--clusters", "3", "--crds", dir.as_str()]);
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr
            .contains("serve no ManifestWorkReplicaSet (work.open-cluster-management.io/v1alpha1)"),
        "{stderr}"
    );
    let missing = simulate(&["--clusters", "3", "--crds", "/nonexistent-crds"]);
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
}

#[test]
fn without_condition_rules_the_deadline_aborts_and_the_rollback_pace_is_a_flag() {
    let output = simulate(&[
        "--clusters",
        "3",
        "--strategy",
        "Progressive",
        "--max-concurrency",
        "3",
        "--progress-deadline",
        "10s",
        "--abort-on-failure",
        "--no-condition-rules",
        "--rollback-pace",
        "Strategy",
        "--json",
    ]);
    let (steps, summary) = json_lines(&output);
    assert_eq!(summary["result"], "Aborted");
    assert_eq!(
        summary["abort"]["failures"].as_array().map(Vec::len),
        Some(3)
    );
    let abort = steps
        .iter()
        .position(|s| {
            s["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["type"] == "abort"))
        })
        .expect("an abort");
    // Applied at 0 s, reported Applied at 1 s, timed out at 11 s.
    assert_eq!(steps[abort]["elapsedSeconds"], 11.0);
    assert_eq!(applied(&steps[abort]).len(), 3, "maxConcurrency 3");

    let bad = simulate(&["--rollback-pace", "Slowly"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("expected AtOnce or Strategy"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// `--rollback-pace Strategy` is the strategy's `rollbackPace`: with
/// `--crds` of OCM's own CRDs it is written to the
/// ManifestWorkReplicaSetRollout and read back from there, and the
/// rollback goes two clusters per step; without it, every updated cluster
/// is restored in the abort's step.
#[test]
fn the_rollback_pace_flag_reaches_the_rollback_through_the_carrier() {
    let Some(ocm) = ocm_crds() else {
        return;
    };
    let dir = ocm.path().display().to_string();
    let run = |pace: Option<&str>| {
        let mut args = vec![
            "--clusters",
            "6",
            "--strategy",
            "Progressive",
            "--max-concurrency",
            "2",
            "--abort-on-failure",
            "--fail",
            "cluster-003",
            "--crds",
            dir.as_str(),
            "--json",
        ];
        if let Some(pace) = pace {
            args.extend(["--rollback-pace", pace]);
        }
        let (steps, summary) = json_lines(&simulate(&args));
        assert_eq!(summary["result"], "Aborted");
        assert!(summary.get("apiWarnings").is_none(), "{summary:#}");
        let abort = steps
            .iter()
            .position(|s| {
                s["events"]
                    .as_array()
                    .is_some_and(|e| e.iter().any(|e| e["type"] == "abort"))
            })
            .expect("an abort");
        steps[abort..]
            .iter()
            .map(applied)
            .filter(|a| !a.is_empty())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        run(None),
        [["cluster-003", "cluster-001", "cluster-002", "cluster-004"]]
    );
    assert_eq!(
        run(Some("Strategy")),
        [
            ["cluster-001", "cluster-002"],
            ["cluster-003", "cluster-004"]
        ]
    );
}
