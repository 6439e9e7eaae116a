//! The demo's rollout traced into a real Jaeger v2 (in-memory storage,
//! OTLP receivers, on loopback), and found again as a user finds it: by
//! Jaeger's own query API, the HTTP API its UI uses.
//!
//! Needs the built Jaeger: `ROLLOUT_HOOKS_JAEGER=$(test-support/jaeger/build)`.
//! Skipped without it, unless `ROLLOUT_HOOKS_E2E=1` (then it fails).
//! `ROLLOUT_HOOKS_JAEGER_UI` may name a built Jaeger UI for Jaeger to
//! serve (the Go module has only a placeholder page).

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::time::Duration;

use rollout_demo::jaeger::{self, Jaeger};
use rollout_demo::{RolloutParams, Stack, StackOptions, simulate_args};
use serde_json::Value;

use crate::e2e::{binaries, tempdir};

const SERVICES: [&str; 5] = [
    "rollout-controller",
    "rollout-gateway",
    "traffic-weights",
    "smoke-test",
    "rollback-mutator",
];

fn jaeger_binary() -> Option<PathBuf> {
    let found = jaeger::binary_from_env();
    if found.is_none() {
        assert_ne!(
            std::env::var("ROLLOUT_HOOKS_E2E").as_deref(),
            Ok("1"),
            "{} is not set",
            jaeger::JAEGER_VAR
        );
        eprintln!(
            "{} names no built Jaeger (ROLLOUT_HOOKS_JAEGER=$(test-support/jaeger/build)): skipped",
            jaeger::JAEGER_VAR
        );
    }
    found
}

/// A span's tag `key`, as text.
fn tag(span: &Value, key: &str) -> Option<String> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| match &t["value"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
}

fn spans(trace: &Value) -> &[Value] {
    trace["spans"].as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// The service of `span`, by its process.
fn service(trace: &Value, span: &Value) -> String {
    let process = span["processID"].as_str().unwrap_or_default();
    trace["processes"][process]["serviceName"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Waits until Jaeger has every service and its span count stops growing.
async fn settled(jaeger: &Jaeger) -> Vec<Value> {
    let mut last = 0;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let services = jaeger.get("/api/services").await.expect("services");
        let names: Vec<&str> = services
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !SERVICES.iter().all(|s| names.contains(s)) {
            continue;
        }
        let traces = jaeger
            .search("rollout-controller", "{}", "")
            .await
            .expect("traces");
        let count: usize = traces.iter().map(|t| spans(t).len()).sum();
        if count == last {
            return traces;
        }
        last = count;
    }
    panic!("Jaeger never had every service: {SERVICES:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_abort_the_failed_validation_and_the_slow_plugin_are_found_in_jaeger() {
    let Some(binary) = jaeger_binary() else {
        return;
    };
    let bins = binaries();
    let dir = tempdir();
    let ui = std::env::var_os("ROLLOUT_HOOKS_JAEGER_UI").map(PathBuf::from);
    let jaeger = Jaeger::start(&binary, dir.path(), ui.as_deref())
        .await
        .expect("Jaeger starts");
    let options = StackOptions {
        otlp_endpoint: Some(jaeger.otlp_grpc.clone()),
        ..StackOptions::default()
    };
    let stack = Stack::start(&bins, dir.path(), &options)
        .await
        .expect("the plugins and the gateway start");
    let mut args = simulate_args(&stack.gateway_url(), 20, &RolloutParams::default());
    args.push("--json".into());
    let output = tokio::process::Command::new(bins.path("rollout-controller").unwrap())
        .args(&args)
        .env("RUST_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &jaeger.otlp_grpc)
        .output()
        .await
        .expect("simulate runs");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let abort_trace = summary["abort"]["traceId"]
        .as_str()
        .expect("the abort's trace")
        .to_owned();
    // The gateway and the plugins export what they hold as they stop.
    drop(stack);
    let traces = settled(&jaeger).await;

    // One trace per step, each joining controller → gateway → plugins,
    // with no span whose parent is missing.
    let steps = stdout.lines().count() - 1;
    // A trace per step at least (a run may carry one more, of its own).
    assert!(
        traces.len() >= steps,
        "{} traces, {steps} steps",
        traces.len()
    );
    let mut joined = 0;
    for trace in &traces {
        let ids: HashSet<&str> = spans(trace)
            .iter()
            .filter_map(|s| s["spanID"].as_str())
            .collect();
        for span in spans(trace) {
            for reference in span["references"].as_array().into_iter().flatten() {
                let parent = reference["spanID"].as_str().unwrap_or_default();
                assert!(ids.contains(parent), "orphan {span}");
            }
        }
        let services: BTreeSet<String> = spans(trace).iter().map(|s| service(trace, s)).collect();
        if services.contains("traffic-weights") {
            assert!(services.contains("rollout-gateway"), "{services:?}");
            joined += 1;
        }
    }
    assert!(
        joined > 0,
        "a step that called the mutators joins every process"
    );

    // The abort, by `ocm.rollout.aborted=true`.
    let aborted = jaeger
        .search(
            "rollout-controller",
            r#"{"ocm.rollout.aborted":"true"}"#,
            "",
        )
        .await
        .unwrap();
    let [abort] = &aborted[..] else {
        panic!("one trace aborted: {}", aborted.len())
    };
    assert_eq!(abort["traceID"], abort_trace.as_str());

    // The FAILED validation names the plugin and the cluster.
    let failed = jaeger
        .search(
            "rollout-controller",
            r#"{"ocm.rollout.validation.result":"FAILED"}"#,
            "",
        )
        .await
        .unwrap();
    let failing: Vec<&Value> = failed
        .iter()
        .flat_map(|t| spans(t).iter().map(move |s| (t, s)))
        // The controller's span names the pipeline it called.
        .filter(|(t, s)| service(t, s) == "rollout-controller")
        .map(|(_, s)| s)
        .filter(|s| tag(s, "ocm.rollout.validation.result").as_deref() == Some("FAILED"))
        .collect();
    assert!(!failing.is_empty());
    for span in failing {
        assert_eq!(tag(span, "ocm.cluster").as_deref(), Some("cluster-008"));
        assert_eq!(
            tag(span, "ocm.rollout.plugin").as_deref(),
            Some("safe-rollout")
        );
        assert_eq!(tag(span, "otel.status_code").as_deref(), Some("ERROR"));
    }

    // The slowest plugin call: minDuration finds its trace and no faster one.
    let (slowest, trace_of_slowest) = traces
        .iter()
        .flat_map(|t| spans(t).iter().map(move |s| (t, s)))
        .filter(|(t, s)| service(t, s) == "smoke-test")
        .map(|(t, s)| (s["duration"].as_u64().unwrap_or(0), t["traceID"].clone()))
        .max_by_key(|(d, _)| *d)
        .expect("smoke-test was called");
    let slow = jaeger
        .search("smoke-test", "{}", &format!("&minDuration={slowest}us"))
        .await
        .unwrap();
    assert!(
        slow.iter().any(|t| t["traceID"] == trace_of_slowest),
        "{slowest} us"
    );
}

/// `demo --jaeger`: the demo starts the Jaeger, every process exports to
/// it, and once the demo is over it says where the abort's trace is, keeps
/// Jaeger up, and Ctrl-C ends it cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_with_jaeger_links_the_aborts_trace_and_stays_up_until_ctrl_c() {
    use tokio::io::AsyncBufReadExt as _;
    let Some(binary) = jaeger_binary() else {
        return;
    };
    binaries();
    let mut demo = tokio::process::Command::new(env!("CARGO_BIN_EXE_demo"))
        .arg("--jaeger")
        .arg(&binary)
        .args(["--rollout-only", "--clusters", "8", "--fail", "cluster-003"])
        .env("RUST_LOG", "warn")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the demo starts");
    let mut lines = tokio::io::BufReader::new(demo.stdout.take().expect("stdout")).lines();
    let mut link = None;
    while let Some(line) = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
        .await
        .expect("the demo goes on")
        .expect("reads")
    {
        if let Some(at) = line.find("the abort's trace: ") {
            link = Some(line[at + "the abort's trace: ".len()..].trim().to_owned());
        }
        if line.contains("Jaeger stays up until Ctrl-C") {
            break;
        }
    }
    let link = link.expect("the abort's trace is linked");
    // The link is the query API's (no UI given): the trace is there, and
    // joins the controller, the gateway and the plugins.
    let url = link.strip_prefix("http://").expect("an http link");
    let (host, path) = url.split_once('/').expect("host/path");
    let mut found = Value::Null;
    for _ in 0..40 {
        let answer = http_get(host, &format!("/{path}")).await;
        if answer["data"][0]["spans"]
            .as_array()
            .is_some_and(|s| !s.is_empty())
        {
            found = answer["data"][0].clone();
            let services: BTreeSet<String> =
                spans(&found).iter().map(|s| service(&found, s)).collect();
            if services.contains("rollout-gateway") && services.contains("smoke-test") {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let services: BTreeSet<String> = spans(&found).iter().map(|s| service(&found, s)).collect();
    assert!(
        services.contains("rollout-controller") && services.contains("rollout-gateway"),
        "{services:?}"
    );
    let exit = crate::e2e::interrupt(&mut demo).await;
    assert_eq!(
        exit.code(),
        Some(0),
        "Ctrl-C after the demo is its normal end"
    );
    assert!(
        tokio::net::TcpStream::connect(host).await.is_err(),
        "Jaeger outlived the demo"
    );
}

/// `GET path` of `host` as JSON; null while it cannot answer.
async fn http_get(host: &str, path: &str) -> Value {
    match jaeger::http_get(host, path).await {
        Ok(body) => serde_json::from_slice(&body).unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}
