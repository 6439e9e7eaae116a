//! The demo's rollouts traced into a real Jaeger v2 (in-memory storage,
//! OTLP receivers, on loopback), and found again as a user finds them: by
//! Jaeger's own query API, the HTTP API its UI uses, and by its UI in a
//! real Chromium.
//!
//! - `rollout`: the demo's rollout (20 clusters, the abort): one trace per
//!   step joining every process, no orphan, the abort, the FAILED
//!   validation, the slowest plugin call, the RPC conventions' attributes,
//!   and the abort's trace page in Jaeger's UI.
//! - `fail_open`: a plugin with `failurePolicy: Ignore` that fails, found
//!   by its tags.
//! - `fleet`: 1,000 clusters, every span the processes made held by Jaeger.
//!
//! Needs the built Jaeger: `ROLLOUT_HOOKS_JAEGER=$(test-support/jaeger/build)`.
//! Skipped without it, unless `ROLLOUT_HOOKS_E2E=1` (then it fails).
//! `ROLLOUT_HOOKS_JAEGER_UI` names a built Jaeger UI for Jaeger to serve
//! (`test-support/jaeger/ui`; the Go module has only a placeholder page).

mod fail_open;
mod fleet;
mod rollout;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rollout_demo::jaeger::{self, Jaeger};
use rollout_demo::{RolloutParams, Stack, StackOptions, simulate_args};
use serde_json::Value;

use crate::e2e::binaries;

/// Every process of the demo, by its `service.name`.
const SERVICES: [&str; 5] = [
    "rollout-controller",
    "rollout-gateway",
    "traffic-weights",
    "smoke-test",
    "rollback-mutator",
];

/// The example plugins' services.
const PLUGIN_SERVICES: [&str; 3] = ["traffic-weights", "smoke-test", "rollback-mutator"];

/// The name of the controller's span of one reconcile (one step).
const RECONCILE: &str = "reconcile ManifestWorkReplicaSet";

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

fn span_id(span: &Value) -> &str {
    span["spanID"].as_str().unwrap_or_default()
}

/// The id of `span`'s parent, if it has one.
fn parent_id(span: &Value) -> Option<&str> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")
        .and_then(|r| r["spanID"].as_str())
}

/// Whether Jaeger marks `span` as an error (`error=true`).
fn is_error(span: &Value) -> bool {
    tag(span, "error").as_deref() == Some("true")
}

/// One trace's spans by id, with their service, and each span's children.
struct Tree<'a> {
    spans: Vec<(String, &'a Value)>,
    children: HashMap<&'a str, Vec<usize>>,
}

impl<'a> Tree<'a> {
    fn of(trace: &'a Value) -> Tree<'a> {
        let spans: Vec<(String, &Value)> = spans(trace)
            .iter()
            .map(|s| (service(trace, s), s))
            .collect();
        let mut children: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, (_, span)) in spans.iter().enumerate() {
            if let Some(parent) = parent_id(span) {
                children.entry(parent).or_default().push(i);
            }
        }
        Tree { spans, children }
    }

    /// The children of `span`, with their services.
    fn children(&self, span: &Value) -> Vec<(&str, &'a Value)> {
        self.children
            .get(span_id(span))
            .into_iter()
            .flatten()
            .map(|&i| (self.spans[i].0.as_str(), self.spans[i].1))
            .collect()
    }

    /// Panics naming the first span whose parent is not in the trace.
    fn assert_no_orphan(&self) {
        let ids: BTreeSet<&str> = self.spans.iter().map(|(_, s)| span_id(s)).collect();
        for (service, span) in &self.spans {
            for reference in span["references"].as_array().into_iter().flatten() {
                let parent = reference["spanID"].as_str().unwrap_or_default();
                assert!(
                    ids.contains(parent),
                    "orphan span of {service}: {} (parent {parent} missing)",
                    span["operationName"]
                );
            }
        }
    }

    /// The spans of `service`, of kind `kind` (`span.kind`).
    fn of_kind(&self, service: &str, kind: &str) -> Vec<&'a Value> {
        self.spans
            .iter()
            .filter(|(s, span)| s == service && tag(span, "span.kind").as_deref() == Some(kind))
            .map(|(_, span)| *span)
            .collect()
    }
}

/// Waits until Jaeger has each of `services` and the span count of
/// `service`'s traces stops growing (two reads 500 ms apart agree), for up
/// to `limit`; returns those traces.
async fn settled(jaeger: &Jaeger, services: &[&str], limit: Duration) -> Vec<Value> {
    let deadline = Instant::now() + limit;
    let mut last = usize::MAX;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let known = jaeger.get("/api/services").await.expect("services");
        let names: Vec<&str> = known
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !services.iter().all(|s| names.contains(s)) {
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
    panic!("Jaeger's traces never settled with every service: {services:?}")
}

/// A rollout through the demo's processes, every one exporting to a
/// Jaeger of its own.
struct Traced {
    jaeger: Jaeger,
    /// `simulate --json`'s lines: one per step, then the summary.
    steps: Vec<Value>,
    summary: Value,
    /// The gateway's `host:port`.
    gateway: String,
    /// Each plugin's `host:port`.
    plugins: HashMap<String, String>,
    /// The gateway's `/metrics` as the rollout left it.
    metrics: String,
    /// How long the rollout took, from the first hook to the summary.
    took: Duration,
    _dir: tempfile::TempDir,
}

/// Starts Jaeger (serving `ui` when given), the plugins and the gateway
/// with `options`' extra registry entries, and runs `simulate --json` over
/// `clusters` clusters with `params` and `extra` arguments (flag-value
/// pairs, replacing the demo's value of a flag it sets); stops the
/// plugins and the gateway (which export what they hold as they stop).
async fn traced_rollout(
    binary: &Path,
    ui: Option<&Path>,
    options: StackOptions,
    clusters: usize,
    params: &RolloutParams,
    extra: &[&str],
) -> Traced {
    let bins = binaries();
    let dir = crate::e2e::tempdir();
    let jaeger = Jaeger::start(binary, dir.path(), ui)
        .await
        .expect("Jaeger starts");
    let options = StackOptions {
        otlp_endpoint: Some(jaeger.otlp_grpc.clone()),
        ..options
    };
    let stack = Stack::start(&bins, dir.path(), &options)
        .await
        .expect("the plugins and the gateway start");
    let mut args = simulate_args(&stack.gateway_url(), clusters, params);
    args.push("--json".into());
    // `extra` is flag-value pairs: a flag the demo's arguments have
    // already gets the new value.
    for pair in extra.chunks(2) {
        match args.iter().position(|a| a == pair[0]) {
            Some(at) => args[at + 1] = pair[1].to_owned(),
            None => args.extend(pair.iter().map(|a| a.to_string())),
        }
    }
    let started = Instant::now();
    let output = tokio::process::Command::new(bins.path("rollout-controller").unwrap())
        .args(&args)
        .env("RUST_LOG", "warn")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &jaeger.otlp_grpc)
        .output()
        .await
        .expect("simulate runs");
    let took = started.elapsed();
    assert!(output.status.success(), "{output:?}");
    let mut steps: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let summary = steps.pop().expect("the summary");
    let metrics = jaeger::http_get(&stack.admin, "/metrics")
        .await
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .expect("the gateway's metrics");
    let gateway = stack.gateway.grpc.clone();
    let plugins = stack
        .plugins
        .iter()
        .map(|(name, s)| (name.clone(), s.grpc.clone()))
        .collect();
    drop(stack);
    Traced {
        jaeger,
        steps,
        summary,
        gateway,
        plugins,
        metrics,
        took,
        _dir: dir,
    }
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
