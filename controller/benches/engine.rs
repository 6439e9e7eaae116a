//! One rollout decision at fleet scale: 1k, 10k and 100k clusters in 100
//! groups, 10% of them with an existing status, Progressive with
//! `maxConcurrency: 10%`.
//!
//! The existing statuses are mostly long-succeeded with a tenth still
//! progressing, so every decision walks the whole path: sort the existing,
//! determine each, then pick the next never-seen clusters by name.

#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use jiff::{SignedDuration, Timestamp};
use rollout_controller::rollout::{
    ClusterGroup, ClusterRolloutStatus, RawStrategy, RolloutStatus, Strategy, decide,
};

const GROUPS: usize = 100;

fn fleet(clusters: usize, now: Timestamp) -> (Vec<ClusterGroup>, Vec<ClusterRolloutStatus>) {
    let per_group = clusters / GROUPS;
    let groups: Vec<ClusterGroup> = (0..GROUPS)
        .map(|g| ClusterGroup {
            index: g as i32,
            name: format!("group-{g:03}"),
            clusters: (0..per_group)
                .map(|i| format!("cluster-{:06}", g * per_group + i))
                .collect(),
        })
        .collect();
    // Every tenth cluster (spread over all groups) already has a status.
    let existing = (0..clusters)
        .step_by(10)
        .enumerate()
        .map(|(n, c)| {
            let (status, ago) = if n % 10 == 0 {
                (RolloutStatus::Progressing, 30)
            } else {
                (RolloutStatus::Succeeded, 3600)
            };
            ClusterRolloutStatus::new(format!("cluster-{c:06}"), status)
                .since(now - SignedDuration::from_secs(ago))
                .in_group(
                    (c / per_group) as i32,
                    format!("group-{:03}", c / per_group),
                )
        })
        .collect();
    (groups, existing)
}

fn decide_progressive(c: &mut Criterion) {
    let raw: RawStrategy = serde_json::from_str(
        r#"{"type": "Progressive", "progressive": {"maxConcurrency": "10%", "maxFailures": "5%", "progressDeadline": "10m"}}"#,
    )
    .expect("strategy parses");
    let strategy = Strategy::from_raw(&raw).expect("strategy is valid");
    let now: Timestamp = "2025-01-01T00:00:00Z".parse().expect("time parses");

    let mut group = c.benchmark_group("decide/progressive");
    for clusters in [1_000usize, 10_000, 100_000] {
        let (groups, existing) = fleet(clusters, now);
        group.throughput(Throughput::Elements(clusters as u64));
        group.bench_with_input(BenchmarkId::from_parameter(clusters), &clusters, |b, _| {
            b.iter(|| {
                decide(
                    black_box(&strategy),
                    black_box(&groups),
                    black_box(&existing),
                    now,
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, decide_progressive);
criterion_main!(benches);
