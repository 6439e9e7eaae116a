//! A 1,000-cluster rollout through the demo's pipeline (three plugins that
//! each declare counts-only state, `ROLLOUT_STATE_DETAIL_COUNTS`), with
//! every process exporting to Jaeger under its default batch settings: no
//! span is dropped. Jaeger must hold a reconcile span per step the
//! controller printed, a hook span per hook call the controller counted,
//! a gateway client span per attempt the gateway counted
//! (`rollout_gateway_upstream_attempts_total`), one gateway span below each
//! hook span and the plugin's span below each attempt that reached it,
//! and no span whose parent is missing: a span lost by any process breaks
//! one of these.
//!
//! The figures (spans, traces, time) are printed:
//! `cargo test -p rollout-demo --test it -- jaeger::fleet --nocapture`.

use std::time::{Duration, Instant};

use rollout_demo::{RolloutParams, StackOptions};
use serde_json::Value;

use super::*;

/// Σ of `family`'s samples in Prometheus text whose `hook` label is not
/// `Initialize`.
fn sum_but_initialize(metrics: &str, family: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter(|l| !l.contains("hook=\"Initialize\""))
        .filter_map(|l| l.rsplit_once(' '))
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_cluster_rollout_loses_no_span() {
    let Some(binary) = jaeger_binary() else {
        return;
    };
    let params = RolloutParams {
        soak: "200ms".into(),
        fail: Vec::new(),
    };
    let run = traced_rollout(
        &binary,
        None,
        StackOptions::default(),
        1000,
        &params,
        &["--validation-poll", "200ms"],
    )
    .await;
    assert_eq!(run.summary["result"], "Succeeded", "{}", run.summary);
    let settling = Instant::now();
    let traces = settled(&run.jaeger, &SERVICES, Duration::from_secs(90)).await;
    let settle = settling.elapsed();

    let step_ids: BTreeSet<&str> = run
        .steps
        .iter()
        .filter_map(|s| s["traceId"].as_str())
        .collect();
    let mut reconciles = 0;
    let mut hook_spans = 0;
    let mut attempts = 0;
    let mut reached = 0;
    let mut total = 0;
    for trace in &traces {
        let tree = Tree::of(trace);
        tree.assert_no_orphan();
        total += spans(trace).len();
        if !step_ids.contains(trace["traceID"].as_str().unwrap_or_default()) {
            // The controller's Initialize, before the first step.
            continue;
        }
        reconciles += spans(trace)
            .iter()
            .filter(|s| s["operationName"] == RECONCILE)
            .count();
        for hook in tree.of_kind("rollout-controller", "client") {
            let initialize = tag(hook, "rpc.method").as_deref() == Some("Initialize");
            hook_spans += usize::from(!initialize);
            let below = tree.children(hook);
            let [("rollout-gateway", server)] = below[..] else {
                panic!("one gateway span below {hook}: {below:?}")
            };
            for (_, attempt) in tree.children(server) {
                attempts += usize::from(!initialize);
                if tag(attempt, "rpc.grpc.status_code").as_deref() == Some("0") {
                    let plugin = tag(attempt, "ocm.rollout.plugin").expect("the plugin");
                    let below: Vec<&str> = tree.children(attempt).iter().map(|(s, _)| *s).collect();
                    assert_eq!(below, [plugin.as_str()], "{attempt}");
                    reached += 1;
                }
            }
        }
    }
    let hook_calls: u64 = run.summary["hookCalls"]
        .as_object()
        .expect("hookCalls")
        .values()
        .filter_map(Value::as_u64)
        .sum();
    let gateway_attempts =
        sum_but_initialize(&run.metrics, "rollout_gateway_upstream_attempts_total");
    eprintln!(
        "1000 clusters: {} steps, {hook_calls} hook calls, {gateway_attempts} plugin attempts; \
         Jaeger holds {total} spans in {} traces; the rollout took {:.1} s, Jaeger had every span {:.1} s later",
        run.steps.len(),
        traces.len(),
        run.took.as_secs_f64(),
        settle.as_secs_f64()
    );
    assert_eq!(reconciles, run.steps.len(), "a reconcile span per step");
    assert_eq!(hook_spans as u64, hook_calls, "a hook span per hook call");
    assert_eq!(
        attempts as u64, gateway_attempts,
        "a gateway client span per attempt the gateway counted"
    );
    assert!(reached > 0 && hook_calls >= 1000, "{reached} {hook_calls}");
}
