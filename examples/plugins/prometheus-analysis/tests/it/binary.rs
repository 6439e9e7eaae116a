//! The binary: its flags and `--config` file, the hooks over a real gRPC
//! client, a bad rollout configuration refused at BeginRollout.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rollout_plugin_sdk::proto::{Hook, InitializeRequest, RolloutStateDetail, ValidationResult};
use rollout_plugin_sdk::testing::{self, PluginProcess};
use rollout_plugin_sdk::tonic::Code;

use crate::common::{FakeHttp, Reply, request};

const BIN: &str = env!("CARGO_BIN_EXE_prometheus-analysis");

fn healthy() -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    format!(
        r#"{{"status":"success","data":{{"resultType":"matrix","result":[{{"metric":{{}},"values":[[{},"0.999"],[{},"1"],[{},"1"]]}}]}}}}"#,
        now - 2,
        now - 1,
        now
    )
}

#[tokio::test]
async fn the_binary_reads_its_config_file_and_refuses_a_bad_rollout_config() {
    let fake = FakeHttp::start(Arc::new(|_| Reply::json(200, healthy()))).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("checks.json");
    std::fs::write(
        &file,
        r#"{"checks":[{"name":"success-rate","query":"ratio{cluster=\"{{cluster}}\"}","comparison":">=","threshold":0.99}],
            "interval":"1s","window":"10s"}"#,
    )
    .unwrap();
    let plugin = PluginProcess::start(
        BIN,
        [
            "--listen",
            "127.0.0.1:0",
            "--prometheus-url",
            &fake.url(),
            "--config",
            file.to_str().unwrap(),
        ],
    )
    .await
    .unwrap();
    let mut client = testing::connect(plugin.addr()).await.unwrap();
    let init = client
        .initialize(InitializeRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(init.name, "prometheus-analysis");
    assert_eq!(
        init.hooks().collect::<Vec<_>>(),
        [Hook::BeginRollout, Hook::ValidateRolloutCompletion]
    );
    assert_eq!(init.state_detail(), RolloutStateDetail::Full);

    // The file's check, over gRPC: three samples, all passing.
    let r = request("c1", SystemTime::now() - Duration::from_secs(5), "");
    client.begin_rollout(r.clone()).await.unwrap();
    let v = client
        .validate_rollout_completion(testing::validate_request(r))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(v.result(), ValidationResult::Succeeded, "{}", v.message);
    assert_eq!(
        fake.seen()[0].form("query").unwrap(),
        r#"ratio{cluster="c1"}"#
    );

    // A rollout's configuration that makes no plan: INVALID_ARGUMENT at
    // BeginRollout, naming each field.
    let bad = request(
        "c1",
        SystemTime::now(),
        r#"{"prometheus":{"checks":[{"query":"up","comparison":"=>","threshold":1}],"window":"5"}}"#,
    );
    let status = client.begin_rollout(bad.clone()).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "plugin_config_json (the rollout's pluginConfig): prometheus.checks[0].comparison: expected one of \"<\", \"<=\", \">\", \">=\", found \"=>\"; prometheus.window: missing unit in duration \"5\""
    );
    let status = client
        .validate_rollout_completion(testing::validate_request(bad))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    plugin.terminate().await.unwrap();
}

#[tokio::test]
async fn bad_flags_and_files_stop_the_binary_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("checks.json");
    std::fs::write(
        &file,
        r#"{"checks":[{"query":"up","comparison":">","threshold":1,"minSamples":30}]}"#,
    )
    .unwrap();
    let table: [(Vec<&str>, &str); 4] = [
        (
            vec!["--config", file.to_str().unwrap()],
            "checks[0]: minSamples 30 one interval (30s) apart need 870s, more than the window (300s)",
        ),
        (vec!["--query-timeout", "40s"], "at most 25s"),
        (
            vec!["--prometheus-url", "https://p:9090"],
            "--prometheus-ca-file must name the CA bundle to trust",
        ),
        (vec!["--min-samples", "0"], "--min-samples"),
    ];
    for (args, says) in table {
        let out = tokio::process::Command::new(BIN)
            .args(["--listen", "127.0.0.1:0"])
            .args(&args)
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// The example checks (`checks.json`, which `.ci/plugins.sh` and the
/// README use) make a plan.
#[test]
fn the_example_checks_make_a_plan() {
    use prometheus_analysis::config::{self, Defaults};
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/checks.json");
    let layer = config::file_layer(&std::fs::read_to_string(path).unwrap(), path).unwrap();
    let plan = config::plan(&Defaults::default(), &[&layer], path).unwrap();
    let names: Vec<&str> = plan.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["success-rate", "p99-latency"]);
}
