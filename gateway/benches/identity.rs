//! The check on a changed MutateManifestWork answer (`manifest::check_answer`:
//! a JSON object keeping the identity fields, and whether it changed as a
//! value; `check_answer_to` with the input summarised on arrival, as the
//! gateway calls it), on a 4 KiB and a 64 KiB ManifestWork and the same work with one
//! annotation added (what a mutating plugin answers), and on the same value
//! spelled otherwise (where the full comparison runs); beside the two
//! borrowed trees and the `serde_json::Value` trees of earlier versions, and
//! the syntax pass alone.
//!
//! `cargo bench -p rollout-gateway --bench identity`

#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

use criterion::{Criterion, criterion_group, criterion_main};
use rollout_gateway::manifest;
use serde_json::{Value, json};
use std::hint::black_box;

/// A ManifestWork of about `bytes` bytes: one Deployment, padded with
/// environment variables (the shape of `gwbench`'s works).
fn work(bytes: usize) -> Value {
    let mut env = Vec::new();
    let mut size = 0;
    let mut i = 0;
    while size < bytes.saturating_sub(1200) {
        let value = "x".repeat(200);
        size += value.len() + 40;
        env.push(json!({"name": format!("PAD_{i:04}"), "value": value}));
        i += 1;
    }
    json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": "bench-work", "namespace": "cluster-001",
                     "labels": {"app": "bench"}, "annotations": {}},
        "spec": {"workload": {"manifests": [{
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                                           "ports": [{"containerPort": 80}], "env": env}]}}}
        }]}}
    })
}

/// The check as the gateway did it before: two `Value` trees.
fn with_values(input: &[u8], output: &[u8]) -> bool {
    let (a, b): (Value, Value) = (
        serde_json::from_slice(input).expect("json"),
        serde_json::from_slice(output).expect("json"),
    );
    for pointer in [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/metadata/namespace",
    ] {
        assert_eq!(a.pointer(pointer), b.pointer(pointer));
    }
    a != b
}

/// The check as the gateway once did it: two borrowed trees, compared.
fn with_two_trees(input: &[u8], output: &[u8]) -> bool {
    let out = manifest::parse_object(output).expect("an object");
    let input = manifest::parse_object(input).expect("an object");
    assert_eq!(manifest::identity_change(&input, &out), None);
    input != out
}

fn bench(c: &mut Criterion) {
    for (label, bytes) in [("4KiB", 4096), ("64KiB", 65536)] {
        let input = work(bytes);
        let mut output = input.clone();
        output["metadata"]["annotations"]["echo.rollout-hooks.io/position"] = json!("3 of 20");
        let (input, output) = (
            serde_json::to_vec(&input).expect("json"),
            serde_json::to_vec(&output).expect("json"),
        );
        assert_eq!(manifest::check_answer(&input, &output), Ok(true));
        let mut group = c.benchmark_group(format!("check answer {label}"));
        group.bench_function("one-pass digests of both (check_answer)", |b| {
            b.iter(|| manifest::check_answer(black_box(&input), black_box(&output)))
        });
        // As the gateway calls it: the input summarised on arrival, only
        // the answer read per check.
        let read = manifest::summarise(&input).expect("an object");
        group.bench_function(
            "the answer's digest, input summarised (check_answer_to)",
            |b| b.iter(|| manifest::check_answer_to(black_box(&input), &read, black_box(&output))),
        );
        group.bench_function("summarising a work (summarise, once per call)", |b| {
            b.iter(|| manifest::summarise(black_box(&input)))
        });
        // The same value spelled otherwise: the digests cannot decide, and
        // the full comparison runs after them.
        let respelled =
            serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&input).expect("json"))
                .expect("json");
        assert_eq!(manifest::check_answer(&input, &respelled), Ok(false));
        group.bench_function(
            "same value respelled (check_answer, full comparison)",
            |b| b.iter(|| manifest::check_answer(black_box(&input), black_box(&respelled))),
        );
        group.bench_function("two borrowed trees (before)", |b| {
            b.iter(|| with_two_trees(black_box(&input), black_box(&output)))
        });
        group.bench_function("serde_json::Value trees (before that)", |b| {
            b.iter(|| with_values(black_box(&input), black_box(&output)))
        });
        group.bench_function("syntax pass only (check_object)", |b| {
            b.iter(|| manifest::check_object(black_box(&output)))
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
