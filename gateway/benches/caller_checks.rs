//! What the checks on a caller's request cost per call: the wire check of
//! the fields the gateway forwards without decoding
//! (`rollout_proto::partial::check_validate_request`: `rollout_status` with every
//! cluster, or framed only for a target whose plugins get the counts,
//! `counts`, `plugin_config_json` as UTF-8) and the JSON check of
//! `plugin_config_json` (`manifest::check_object`), next to the decoding of
//! the few fields spans need that every call already paid and to the full
//! decode a plugin pays, on a request of 10 and of 1,000 clusters.
//!
//! `cargo bench -p rollout-gateway --bench caller_checks`

#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

use criterion::{Criterion, criterion_group, criterion_main};
use prost::Message;
use rollout_gateway::manifest;
use rollout_proto::partial::{self, ValidateView};
use rollout_proto::v1alpha1::{
    ClusterRolloutStatus, RolloutPluginRequest, RolloutState, ValidateCompletionRequest,
};
use std::hint::black_box;

/// A validation request for a placement of `clusters` clusters, all
/// completed but one.
fn request(clusters: usize) -> bytes::Bytes {
    let status = |i: usize| ClusterRolloutStatus {
        cluster_name: format!("cluster-{i:05}"),
        rollout_status: 3,
        manifest_revision_name: "rev-7".into(),
        last_transition_time: Some(prost_types::Timestamp {
            seconds: 1_700_000_000 + i as i64,
            nanos: 0,
        }),
        group_index: 0,
        group_name: String::new(),
    };
    let rollout = RolloutPluginRequest {
        mwrs_name: "web".into(),
        mwrs_namespace: "default".into(),
        placement_name: "all".into(),
        cluster_name: "cluster-00000".into(),
        total_cluster_count: clusters as i32,
        rollout_status: Some(RolloutState {
            completed: (1..clusters).map(status).collect(),
            progressing: vec![status(0)],
            ..Default::default()
        }),
        desired_revision: "rev-7".into(),
        cluster_index: 1,
        plugin_config_json: r#"{"soakTime":"5m","threshold":0.99}"#.into(),
        ..Default::default()
    };
    ValidateCompletionRequest {
        rollout: Some(rollout),
    }
    .encode_to_vec()
    .into()
}

fn bench(c: &mut Criterion) {
    for clusters in [10, 1000] {
        let message = request(clusters);
        let mut group = c.benchmark_group(format!("{clusters} clusters, {} bytes", message.len()));
        group.bench_function("decode the span fields (paid before)", |b| {
            b.iter(|| ValidateView::decode(black_box(message.clone())).map(drop))
        });
        group.bench_function("wire check of the whole request", |b| {
            b.iter(|| partial::check_validate_request(black_box(&message), true).map(<[u8]>::len))
        });
        group.bench_function("wire check, rollout_status framed only", |b| {
            b.iter(|| partial::check_validate_request(black_box(&message), false).map(<[u8]>::len))
        });
        group.bench_function("full decode (what a plugin pays)", |b| {
            b.iter(|| ValidateCompletionRequest::decode(black_box(message.clone())).map(drop))
        });
        let config = partial::check_validate_request(&message, true)
            .unwrap_or_default()
            .to_vec();
        group.bench_function("plugin_config_json is a JSON object", |b| {
            b.iter(|| manifest::check_object(black_box(&config)))
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
