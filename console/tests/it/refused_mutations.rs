//! A mutated work the controller refuses (the identity kept, so the gateway
//! passed it, but no `spec`) is reported where the operator looks: in
//! `rollout-controller simulate`'s terminal and JSON lines, as a failed
//! MutateManifestWork of that cluster.

use crate::common;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_rollout-controller");

async fn simulate(url: &str, extra: &[&str]) -> std::process::Output {
    tokio::process::Command::new(BIN)
        .arg("simulate")
        .args(["--clusters", "2", "--strategy", "All"])
        .args(["--plugin", "canary", "--gateway", url, "--max-steps", "4"])
        .args(extra)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_refused_mutation_is_reported_in_simulate() {
    let (plugin, addr) = common::plugin().await;
    plugin.script.lock().unwrap().drop_spec = true;
    let gateway = common::gateway(&[("canary", addr)]).await;
    let output = simulate(&gateway.url, &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        stdout.contains("! MutateManifestWork for cluster-001 failed"),
        "{stdout}"
    );
    let output = simulate(&gateway.url, &["--json"]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let errors: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|l| l["events"].as_array().cloned())
        .flatten()
        .filter(|e| e["hook"] == "MutateManifestWork")
        .collect();
    assert!(!errors.is_empty(), "{stdout}");
}
