//! The demo's rollout (20 clusters, Progressive 25 %, cluster-008's smoke
//! test FAILED, the abort and the rollback) as Jaeger holds it: one trace
//! per step joining controller → gateway → every plugin called, no span
//! orphaned; the abort by `error=true` and by `ocm.rollout.aborted=true`;
//! the FAILED validation by its verdict, naming the plugin and the
//! cluster; the slowest plugin call by Jaeger's minDuration; the RPC
//! conventions' attributes on every call's spans; and, when a built Jaeger
//! UI is given, the abort's trace page in a real Chromium.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use rollout_demo::{RolloutParams, StackOptions};
use rollout_test_support::chromium::{self, Browser};
use serde_json::Value;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_step_is_one_joined_trace_and_the_abort_the_failed_validation_and_the_slowest_call_are_found()
 {
    let Some(binary) = jaeger_binary() else {
        return;
    };
    let ui = std::env::var_os("ROLLOUT_HOOKS_JAEGER_UI")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let run = traced_rollout(
        &binary,
        ui.as_deref(),
        StackOptions::default(),
        20,
        &RolloutParams::default(),
        &[],
    )
    .await;
    assert_eq!(run.summary["result"], "Aborted", "{}", run.summary);
    let abort_trace = run.summary["abort"]["traceId"]
        .as_str()
        .expect("the abort's trace")
        .to_owned();
    let traces = settled(&run.jaeger, &SERVICES, Duration::from_secs(30)).await;

    one_joined_trace_per_step(&run, &traces);
    the_abort_is_found(&run, &abort_trace).await;
    the_failed_validation_is_found(&run).await;
    the_slowest_plugin_call_is_found(&run, &traces).await;
    the_spans_follow_the_rpc_conventions(&run, &traces);
    if ui.is_some() {
        the_ui_shows_the_abort(&run, &abort_trace).await;
    } else {
        eprintln!("ROLLOUT_HOOKS_JAEGER_UI names no built Jaeger UI: the UI's page is not checked");
    }
}

/// Exactly one trace per step (the trace id each step's line names), rooted
/// at the step's reconcile span; each hook span of the controller has
/// exactly one gateway server span below it, each attempt the gateway made
/// that reached a plugin has exactly that plugin's server span below it;
/// no span's parent is missing. The only other trace is the controller's
/// `Initialize`, before the first step.
fn one_joined_trace_per_step(run: &Traced, traces: &[Value]) {
    let step_ids: Vec<&str> = run
        .steps
        .iter()
        .map(|s| s["traceId"].as_str().expect("a step's traceId"))
        .collect();
    let found: BTreeSet<&str> = traces
        .iter()
        .filter_map(|t| t["traceID"].as_str())
        .collect();
    assert_eq!(
        step_ids.iter().copied().collect::<BTreeSet<_>>().len(),
        step_ids.len(),
        "a trace of its own per step"
    );
    for id in &step_ids {
        assert!(found.contains(id), "the trace of a step is in Jaeger: {id}");
    }
    let mut hook_calls = 0;
    let mut plugin_calls = 0;
    for trace in traces {
        let tree = Tree::of(trace);
        tree.assert_no_orphan();
        let roots: Vec<&Value> = spans(trace)
            .iter()
            .filter(|s| parent_id(s).is_none())
            .collect();
        let [root] = roots[..] else {
            panic!("one root per trace: {}", roots.len())
        };
        assert_eq!(root["operationName"], RECONCILE, "{root}");
        let hooks = tree.of_kind("rollout-controller", "client");
        if !step_ids.contains(&trace["traceID"].as_str().unwrap_or_default()) {
            let methods: Vec<Option<String>> = hooks.iter().map(|h| tag(h, "rpc.method")).collect();
            assert_eq!(
                methods,
                [Some("Initialize".to_owned())],
                "not a step's trace"
            );
        }
        for hook in hooks {
            hook_calls += usize::from(tag(hook, "rpc.method").as_deref() != Some("Initialize"));
            let below = tree.children(hook);
            let [("rollout-gateway", server)] = below[..] else {
                panic!("one gateway span below {hook}: {below:?}")
            };
            for (service, attempt) in tree.children(server) {
                assert_eq!(service, "rollout-gateway");
                let plugin = tag(attempt, "ocm.rollout.plugin").expect("the plugin");
                let reached: Vec<&str> = tree.children(attempt).iter().map(|(s, _)| *s).collect();
                if tag(attempt, "rpc.grpc.status_code").as_deref() == Some("0") {
                    assert_eq!(reached, [plugin.as_str()], "{attempt}");
                    plugin_calls += 1;
                }
            }
        }
    }
    assert_eq!(
        traces.len(),
        step_ids.len() + 1,
        "the steps' and Initialize's"
    );
    let counted: u64 = run.summary["hookCalls"]
        .as_object()
        .expect("hookCalls")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    assert_eq!(
        hook_calls as u64, counted,
        "every hook call the controller counted is in a step's trace"
    );
    assert!(plugin_calls > 0, "the plugins were called");
}

/// The abort: the one trace `ocm.rollout.aborted=true` finds, also found by
/// `error=true`, its reconcile span the error.
async fn the_abort_is_found(run: &Traced, abort_trace: &str) {
    let aborted = run
        .jaeger
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
    assert_eq!(abort["traceID"], abort_trace);
    let errors = run
        .jaeger
        .search("rollout-controller", r#"{"error":"true"}"#, "")
        .await
        .unwrap();
    let found = errors
        .iter()
        .find(|t| t["traceID"] == abort_trace)
        .expect("error=true finds the abort");
    let reconcile = spans(found)
        .iter()
        .find(|s| s["operationName"] == RECONCILE)
        .expect("the step's reconcile span");
    assert!(is_error(reconcile), "{reconcile}");
    assert_eq!(
        tag(reconcile, "ocm.rollout.aborted").as_deref(),
        Some("true")
    );
    assert_eq!(
        tag(reconcile, "ocm.rollout.abort.clusters").as_deref(),
        Some("cluster-008")
    );
}

/// The FAILED validation: its controller span names the pipeline and the
/// cluster; the gateway's span below it names the member that said FAILED;
/// smoke-test's own span says FAILED for the cluster.
async fn the_failed_validation_is_found(run: &Traced) {
    let failed = run
        .jaeger
        .search(
            "rollout-controller",
            r#"{"ocm.rollout.validation.result":"FAILED"}"#,
            "",
        )
        .await
        .unwrap();
    assert!(!failed.is_empty(), "the FAILED validation is found");
    for trace in &failed {
        let tree = Tree::of(trace);
        let verdicts: Vec<&Value> = tree
            .of_kind("rollout-controller", "client")
            .into_iter()
            .filter(|s| tag(s, "ocm.rollout.validation.result").as_deref() == Some("FAILED"))
            .collect();
        assert!(!verdicts.is_empty());
        for span in verdicts {
            assert_eq!(tag(span, "ocm.cluster").as_deref(), Some("cluster-008"));
            assert_eq!(
                tag(span, "ocm.rollout.plugin").as_deref(),
                Some("safe-rollout")
            );
            assert!(is_error(span), "{span}");
            let below = tree.children(span);
            let [(_, gateway)] = below[..] else {
                panic!("{below:?}")
            };
            assert_eq!(
                tag(gateway, "ocm.rollout.validation.failed_by").as_deref(),
                Some("smoke-test")
            );
            assert_eq!(tag(gateway, "ocm.cluster").as_deref(), Some("cluster-008"));
            let smoke: Vec<&Value> = tree
                .children(gateway)
                .into_iter()
                .flat_map(|(_, attempt)| tree.children(attempt))
                .filter(|(service, _)| *service == "smoke-test")
                .map(|(_, s)| s)
                .collect();
            let [smoke] = smoke[..] else {
                panic!("smoke-test's span: {smoke:?}")
            };
            assert_eq!(
                tag(smoke, "ocm.rollout.validation.result").as_deref(),
                Some("FAILED")
            );
            assert_eq!(tag(smoke, "ocm.cluster").as_deref(), Some("cluster-008"));
        }
    }
}

/// The slowest plugin call: Jaeger's minDuration with its duration (and
/// the plugin's service) finds its trace, and exactly the plugin's traces
/// that hold a span at least that long (Jaeger's minDuration is a
/// trace's: any span of it, whatever its service).
async fn the_slowest_plugin_call_is_found(run: &Traced, traces: &[Value]) {
    let calls: Vec<(String, u64, &str)> = traces
        .iter()
        .flat_map(|t| spans(t).iter().map(move |s| (service(t, s), s, t)))
        .filter(|(service, _, _)| PLUGIN_SERVICES.contains(&service.as_str()))
        .map(|(service, s, t)| {
            let id = t["traceID"].as_str().unwrap_or_default();
            (service, s["duration"].as_u64().unwrap_or(0), id)
        })
        .collect();
    let (plugin, slowest, slowest_trace) = calls
        .iter()
        .max_by_key(|(_, d, _)| *d)
        .expect("a plugin was called");
    // The plugin's traces, its loading by the gateway (a trace without the
    // controller) included.
    let of_plugin = run.jaeger.search(plugin, "{}", "").await.unwrap();
    let expected: BTreeSet<&str> = of_plugin
        .iter()
        .filter(|t| {
            spans(t)
                .iter()
                .any(|s| s["duration"].as_u64().unwrap_or(0) >= *slowest)
        })
        .filter_map(|t| t["traceID"].as_str())
        .collect();
    let slow = run
        .jaeger
        .search(plugin, "{}", &format!("&minDuration={slowest}us"))
        .await
        .unwrap();
    let found: BTreeSet<&str> = slow.iter().filter_map(|t| t["traceID"].as_str()).collect();
    assert!(
        found.contains(slowest_trace),
        "{plugin}'s slowest call, {slowest} µs"
    );
    assert_eq!(
        found, expected,
        "{plugin}'s traces with a span of {slowest} µs or more"
    );
}

/// OpenTelemetry's RPC conventions on each call's spans (kinds,
/// `rpc.system`, `rpc.service`, `rpc.method`, `rpc.grpc.status_code`,
/// `server.address`/`server.port` and `peer.service` on client spans, an
/// error status only where the conventions make one, or a FAILED
/// validation), and a `service.name` per process.
fn the_spans_follow_the_rpc_conventions(run: &Traced, traces: &[Value]) {
    let (gateway_host, gateway_port) = run.gateway.rsplit_once(':').expect("host:port");
    let mut checked = BTreeSet::new();
    for trace in traces {
        let tree = Tree::of(trace);
        for (service, span) in &tree.spans {
            assert!(SERVICES.contains(&service.as_str()), "{service}");
            if span["operationName"] == RECONCILE {
                continue;
            }
            let kind = tag(span, "span.kind").expect("a kind");
            assert_eq!(tag(span, "rpc.system").as_deref(), Some("grpc"), "{span}");
            assert_eq!(
                tag(span, "rpc.service").as_deref(),
                Some("ocm.rolloutplugin.v1alpha1.RolloutPluginService")
            );
            let method = tag(span, "rpc.method").expect("rpc.method");
            let code: i64 = tag(span, "rpc.grpc.status_code")
                .expect("rpc.grpc.status_code")
                .parse()
                .expect("a number");
            let failed_verdict =
                tag(span, "ocm.rollout.validation.result").as_deref() == Some("FAILED");
            let expected_error = failed_verdict
                || match kind.as_str() {
                    "client" => code != 0,
                    _ => [2, 4, 12, 13, 14, 15].contains(&code),
                };
            assert_eq!(is_error(span), expected_error, "{span}");
            let role = match (service.as_str(), kind.as_str()) {
                ("rollout-controller", "client") => {
                    assert_eq!(
                        span["operationName"],
                        format!("ocm.rolloutplugin.v1alpha1.RolloutPluginService/{method}")
                    );
                    assert_eq!(
                        tag(span, "peer.service").as_deref(),
                        Some("rollout-gateway")
                    );
                    assert_eq!(tag(span, "server.address").as_deref(), Some(gateway_host));
                    assert_eq!(tag(span, "server.port").as_deref(), Some(gateway_port));
                    "controller client"
                }
                ("rollout-gateway", "client") => {
                    let plugin = tag(span, "ocm.rollout.plugin").expect("the plugin");
                    let (host, port) = run.plugins[&plugin].rsplit_once(':').expect("host:port");
                    assert_eq!(tag(span, "peer.service"), Some(plugin.clone()));
                    assert_eq!(tag(span, "server.address").as_deref(), Some(host));
                    assert_eq!(tag(span, "server.port").as_deref(), Some(port));
                    assert_eq!(
                        tag(span, "ocm.rollout.failure_policy").as_deref(),
                        Some("Fail")
                    );
                    // The plugin's own span names itself as the client
                    // span's peer.service does.
                    for (below, _) in tree.children(span) {
                        assert_eq!(below, plugin);
                    }
                    "gateway client"
                }
                (_, "server") => {
                    assert_eq!(
                        span["operationName"],
                        format!("ocm.rolloutplugin.v1alpha1.RolloutPluginService/{method}")
                    );
                    if service == "rollout-gateway" {
                        "gateway server"
                    } else {
                        "plugin server"
                    }
                }
                other => panic!("a span of an unexpected kind: {other:?} {span}"),
            };
            checked.insert(role);
        }
    }
    assert_eq!(
        checked,
        BTreeSet::from([
            "controller client",
            "gateway client",
            "gateway server",
            "plugin server"
        ])
    );
}

/// The abort's trace page in Jaeger's UI, in a real Chromium: the page
/// shows the trace (its id, the step's reconcile span marked as an error,
/// the gateway and the plugins below it) before it is shot; with
/// `ROLLOUT_HOOKS_JAEGER_SCREENSHOT=FILE` the shot is saved there.
async fn the_ui_shows_the_abort(run: &Traced, abort_trace: &str) {
    let Some(chromium) = chromium::binary_for_tests() else {
        return;
    };
    let mut browser = Browser::launch(&chromium, 1400, 900).await;
    browser.navigate(&run.jaeger.trace_link(abort_trace)).await;
    let short = &abort_trace[..7];
    browser
        .wait_for(
            "the abort's trace page is drawn",
            &format!(
                "document.querySelectorAll('.span-row').length > 3 \
                 && document.body.innerText.includes('{short}')"
            ),
            Duration::from_secs(30),
        )
        .await;
    let first = browser
        .eval(
            "(() => { const row = document.querySelector('.span-row .span-name'); \
             return row ? [row.querySelector('.span-svc-name').textContent.trim(), \
             row.querySelector('.endpoint-name').textContent.trim(), \
             !!row.querySelector('.SpanBarRow--errorIcon')] : null })()",
        )
        .await;
    assert_eq!(
        first,
        serde_json::json!(["rollout-controller", RECONCILE, true]),
        "the step's reconcile span first, marked as an error"
    );
    let services = browser
        .eval(
            "[...new Set([...document.querySelectorAll('.span-row .span-svc-name')] \
             .map(e => e.textContent.trim().split(/\\s/)[0]))]",
        )
        .await;
    for service in ["rollout-controller", "rollout-gateway"] {
        assert!(
            services
                .as_array()
                .is_some_and(|a| a.iter().any(|s| s == service)),
            "{service} on the page: {services}"
        );
    }
    let shot = browser.screenshot().await;
    assert!(shot.starts_with(b"\x89PNG"), "a PNG");
    if let Some(path) = std::env::var_os("ROLLOUT_HOOKS_JAEGER_SCREENSHOT") {
        std::fs::write(&path, &shot).expect("the screenshot is written");
    }
    browser.close().await;
}
