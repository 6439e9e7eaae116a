//! `rollout-controller simulate --template FILE` as a plugin author runs it:
//! the user's own ManifestWork rolled out through a real gateway to a
//! mutating plugin, and what the plugin changed shown per work, as a diff
//! in the terminal and as a JSON Patch and diff in the JSON lines.

use crate::common;

use std::process::Output;

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_rollout-controller");

/// The user's ManifestWork: an Argo Rollout whose canary starts at 20 %.
const WORK: &str = "\
apiVersion: work.open-cluster-management.io/v1
kind: ManifestWork
metadata:
  name: checkout
spec:
  workload:
    manifests:
    - apiVersion: argoproj.io/v1alpha1
      kind: Rollout
      metadata:
        name: checkout
        namespace: shop
      spec:
        replicas: 4
        strategy:
          canary:
            steps:
            - setWeight: 20
            - pause: {duration: 5m}
";

async fn simulate(dir: &std::path::Path, url: &str, extra: &[&str]) -> Output {
    let template = dir.join("checkout.yaml");
    std::fs::write(&template, WORK).unwrap();
    tokio::process::Command::new(BIN)
        .arg("simulate")
        .args([
            "--clusters",
            "3",
            "--strategy",
            "Progressive",
            "--max-concurrency",
            "1",
        ])
        .args(["--plugin", "canary", "--gateway", url, "--template"])
        .arg(&template)
        .args(extra)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .await
        .unwrap()
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn json_lines_carry_each_works_patch_and_diff() {
    let (plugin, addr) = common::plugin().await;
    let gateway = common::gateway(&[("canary", addr)]).await;
    let dir = tempfile::tempdir().unwrap();
    let output = simulate(dir.path(), &gateway.url, &["--json"]).await;
    let lines: Vec<Value> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let summary = lines.last().unwrap();
    assert_eq!(summary["result"], "Succeeded");
    // The user's template: the fleet started empty.
    assert_eq!(summary["previousRevision"], Value::Null);
    let mutations: Vec<&Value> = lines
        .iter()
        .filter_map(|l| l["mutations"].as_array())
        .flatten()
        .collect();
    let clusters: Vec<&str> = mutations
        .iter()
        .map(|m| m["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(clusters, ["cluster-001", "cluster-002", "cluster-003"]);
    let first = mutations[0];
    // Shown with --nocapture: the JSON the docs quote.
    println!("{first}");
    assert_eq!(first["mutatedBy"], json!(["canary"]));
    assert_eq!(
        first["patch"],
        json!([
            {"op": "add", "path": "/metadata/annotations/canary~1aborting", "value": "false"},
            {"op": "add", "path": "/metadata/annotations/canary~1weight", "value": "10"}
        ])
    );
    let diff = first["diff"].as_str().unwrap();
    let added: Vec<&str> = diff.lines().filter(|l| l.starts_with('+')).collect();
    assert_eq!(added.len(), 2, "{diff}");
    assert!(added.iter().any(|l| l.contains("canary/weight")), "{diff}");
    assert!(!diff.lines().any(|l| l.starts_with('-')), "{diff}");
    // What the plugin was sent is the user's template.
    let sent = plugin
        .seen()
        .into_iter()
        .find_map(|s| s.work)
        .expect("a MutateManifestWork");
    assert_eq!(
        sent["spec"]["workload"]["manifests"][0]["spec"]["strategy"]["canary"]["steps"][0]["setWeight"],
        20
    );
}

#[tokio::test]
async fn the_terminal_shows_each_change_under_its_step() {
    let (_plugin, addr) = common::plugin().await;
    let gateway = common::gateway(&[("canary", addr)]).await;
    let dir = tempfile::tempdir().unwrap();
    let previous = dir.path().join("previous.json");
    // The previous revision: the same Rollout, at 50 %, as JSON.
    let mut earlier: Value = serde_saphyr::from_str(WORK).unwrap();
    earlier["spec"]["workload"]["manifests"][0]["spec"]["strategy"]["canary"]["steps"][0]["setWeight"] =
        json!(50);
    std::fs::write(&previous, serde_json::to_string(&earlier["spec"]).unwrap()).unwrap();
    let output = simulate(
        dir.path(),
        &gateway.url,
        &["--previous-template", previous.to_str().unwrap()],
    )
    .await;
    let text = stdout(&output);
    // Shown with --nocapture: the output the docs quote.
    println!("{text}");
    assert!(text.contains("the template in "), "{text}");
    assert!(text.contains("checkout.yaml) replaces"), "{text}");
    for cluster in ["cluster-001", "cluster-002", "cluster-003"] {
        assert!(
            text.contains(&format!("{cluster} · changed by canary:")),
            "{cluster}\n{text}"
        );
    }
    assert!(
        text.contains("+    canary/weight: '20'") || text.contains("+    canary/weight: \"20\""),
        "{text}"
    );
    assert!(text.contains("@@ "), "{text}");
}

#[tokio::test]
async fn a_template_that_is_no_manifestwork_is_refused_with_status_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("deployment.yaml");
    std::fs::write(&bad, "apiVersion: apps/v1\nkind: Deployment\n").unwrap();
    let output = tokio::process::Command::new(BIN)
        .args(["simulate", "--template"])
        .arg(&bad)
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("deployment.yaml: kind \"Deployment\""),
        "{stderr}"
    );
}
