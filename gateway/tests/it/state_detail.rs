//! How much rollout state each plugin gets through the gateway: the full list
//! for a plugin that wants it (or never said), the counts only for one that
//! declared `ROLLOUT_STATE_DETAIL_COUNTS`, each member of a pipeline what it
//! declared, and every other byte of the request as the caller sent it.
//!
//! The plugins here are bare HTTP/2 servers that keep each request's message
//! bytes exactly as they arrived.

use crate::common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use common::*;
use prost::Message as _;
use rollout_proto::v1alpha1::*;
use rollout_test_support::h2_peer;

/// A plugin that records every request's message bytes and answers with the
/// neutral message of each hook; its `Initialize` answer declares `detail`
/// (`None`: the field unset, as a plugin written before it existed).
struct Recorder {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<(String, Bytes)>>>,
}

impl Recorder {
    async fn start(detail: Option<RolloutStateDetail>) -> Recorder {
        let seen: Arc<Mutex<Vec<(String, Bytes)>>> = Arc::default();
        let record = seen.clone();
        let addr = h2_peer::serve(move |request, respond| {
            answer(request, respond, detail, record.clone())
        })
        .await;
        Recorder { addr, seen }
    }

    fn config(&self, name: &str) -> String {
        format!(
            "  - name: {name}\n    endpoint: {}\n    insecure: true\n",
            self.addr
        )
    }

    /// The message bytes of every `method` call received, in order.
    fn messages(&self, method: &str) -> Vec<Bytes> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, b)| b.clone())
            .collect()
    }

    fn last(&self, method: &str) -> Bytes {
        self.messages(method)
            .pop()
            .unwrap_or_else(|| panic!("no {method} received"))
    }

    /// Message bytes of every rollout hook received (Initialize left out).
    fn rollout_bytes(&self) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _)| m != "Initialize")
            .map(|(_, b)| b.len())
            .sum()
    }
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    respond: h2::server::SendResponse<Bytes>,
    detail: Option<RolloutStateDetail>,
    record: Arc<Mutex<Vec<(String, Bytes)>>>,
) {
    let method = request.uri().path().rsplit('/').next().unwrap().to_owned();
    let mut body = request.into_body();
    let mut framed = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        framed.extend_from_slice(&chunk);
    }
    let framed = framed.freeze();
    let len = u32::from_be_bytes(framed[1..5].try_into().unwrap()) as usize;
    assert_eq!(framed.len(), 5 + len, "one whole message");
    record
        .lock()
        .unwrap()
        .push((method.clone(), framed.slice(5..)));
    let message = match method.as_str() {
        "Initialize" => InitializeResponse {
            name: "recorder".into(),
            version: "1".into(),
            hooks: vec![],
            state_detail: detail.map_or(0, i32::from),
        }
        .encode_to_vec(),
        "ValidateRolloutCompletion" => ValidateResponse {
            result: ValidationResult::Succeeded.into(),
            ..Default::default()
        }
        .encode_to_vec(),
        // Empty (BeginRollout, ProgressRollout) and "unchanged" (MutateManifestWork).
        _ => Vec::new(),
    };
    h2_peer::answer_ok(respond, &[], false, &message);
}

fn status(name: &str, status: RolloutStatus) -> ClusterRolloutStatus {
    ClusterRolloutStatus {
        cluster_name: name.into(),
        rollout_status: status.into(),
        manifest_revision_name: "web-rev2".into(),
        ..Default::default()
    }
}

/// The request for cluster `index` (1-based) of a rollout of `total` one
/// cluster at a time, as a controller that sends the full state builds it:
/// every earlier cluster completed, this one progressing.
fn rollout_request(index: usize, total: usize) -> RolloutPluginRequest {
    let name = |i: usize| format!("cluster-{i:06}");
    RolloutPluginRequest {
        mwrs_name: "web".into(),
        mwrs_namespace: "default".into(),
        placement_name: "fleet".into(),
        cluster_name: name(index),
        total_cluster_count: total as i32,
        rollout_status: Some(RolloutState {
            completed: (1..index)
                .map(|i| status(&name(i), RolloutStatus::Succeeded))
                .collect(),
            progressing: vec![status(&name(index), RolloutStatus::Progressing)],
            ..Default::default()
        }),
        desired_revision: "web-rev2".into(),
        aborting: false,
        cluster_index: index as i32,
        counts: Some(RolloutCounts {
            to_apply: (total - index) as i32,
            progressing: 1,
            succeeded: (index - 1) as i32,
            ..Default::default()
        }),
        // The rollout's plugin configuration passes through untouched, as
        // every field but the state does.
        plugin_config_json: r#"{"soakTime":"1s","failClusters":["cluster-000002"]}"#.into(),
    }
}

fn without_state(request: &RolloutPluginRequest) -> RolloutPluginRequest {
    RolloutPluginRequest {
        rollout_status: None,
        ..request.clone()
    }
}

/// Initialize through the gateway (the controller's), so every member's
/// declaration is learned before the rollout calls; the merged answer.
async fn initialize(gw: &Gateway, target: &str) -> InitializeResponse {
    let answer = raw_unary(
        gw.grpc,
        "Initialize",
        &InitializeRequest::default(),
        &[("ocm-rollout-plugin", target)],
    )
    .await;
    assert_eq!(answer.status().as_deref(), Some("0"), "{answer:?}");
    InitializeResponse::decode(answer.body).unwrap()
}

/// BeginRollout, ValidateRolloutCompletion and MutateManifestWork of one
/// request to `target`, each answered OK.
async fn send_each_hook(gw: &Gateway, target: &str, request: &RolloutPluginRequest) {
    let work = work(1024);
    let calls: [(&str, Vec<u8>); 3] = [
        ("BeginRollout", request.encode_to_vec()),
        (
            "ValidateRolloutCompletion",
            ValidateCompletionRequest {
                rollout: Some(request.clone()),
            }
            .encode_to_vec(),
        ),
        (
            "MutateManifestWork",
            MutateManifestWorkRequest {
                rollout: Some(request.clone()),
                manifest_work: work,
            }
            .encode_to_vec(),
        ),
    ];
    for (method, message) in calls {
        let answer = raw_unary(
            gw.grpc,
            method,
            &RawMessage(message),
            &[("ocm-rollout-plugin", target)],
        )
        .await;
        assert_eq!(
            answer.status().as_deref(),
            Some("0"),
            "{method}: {answer:?}"
        );
    }
}

/// What `plugin` received for each hook is `request` as the caller sent it
/// (`full`) or without its state, the counts untouched.
fn assert_received(plugin: &Recorder, request: &RolloutPluginRequest, full: bool, who: &str) {
    let want = if full {
        request.clone()
    } else {
        without_state(request)
    };
    assert_eq!(
        plugin.last("BeginRollout"),
        want.encode_to_vec(),
        "{who}: BeginRollout"
    );
    let validate = ValidateCompletionRequest::decode(plugin.last("ValidateRolloutCompletion"))
        .expect("a ValidateCompletionRequest");
    assert_eq!(
        validate.rollout.as_ref(),
        Some(&want),
        "{who}: ValidateRolloutCompletion"
    );
    let mutate = MutateManifestWorkRequest::decode(plugin.last("MutateManifestWork"))
        .expect("a MutateManifestWorkRequest");
    assert_eq!(
        mutate.rollout.as_ref(),
        Some(&want),
        "{who}: MutateManifestWork"
    );
    assert_eq!(mutate.manifest_work, work(1024), "{who}: the work");
    for rollout in [validate.rollout, mutate.rollout] {
        assert_eq!(rollout.unwrap().counts, request.counts, "{who}: the counts");
    }
}

#[tokio::test]
async fn a_plugin_that_declares_nothing_still_gets_the_full_list() {
    let old = Recorder::start(None).await;
    let gw = gateway(&format!("plugins:\n{}", old.config("old"))).await;
    let init = initialize(&gw, "old").await;
    // A single plugin's answer passes through: the field stays unset.
    assert_eq!(init.state_detail(), RolloutStateDetail::Unspecified);
    assert_eq!(gw.debug().await["plugins"][0]["stateDetail"], "full");
    let request = rollout_request(3, 5);
    send_each_hook(&gw, "old", &request).await;
    assert_received(&old, &request, true, "old");
    // Byte for byte, too.
    assert_eq!(old.last("BeginRollout"), request.encode_to_vec());
    gw.stop().await;
}

#[tokio::test]
async fn a_counts_only_plugin_gets_no_list_and_the_counts_untouched() {
    let lean = Recorder::start(Some(RolloutStateDetail::Counts)).await;
    let gw = gateway(&format!("plugins:\n{}", lean.config("lean"))).await;
    let init = initialize(&gw, "lean").await;
    assert_eq!(init.state_detail(), RolloutStateDetail::Counts);
    assert_eq!(gw.debug().await["plugins"][0]["stateDetail"], "counts");
    let request = rollout_request(3, 5);
    send_each_hook(&gw, "lean", &request).await;
    assert_received(&lean, &request, false, "lean");
    // ProgressRollout, the placement-wide hook, too.
    let progress = RolloutPluginRequest {
        cluster_name: String::new(),
        cluster_index: 0,
        ..request.clone()
    };
    let answer = raw_unary(
        gw.grpc,
        "ProgressRollout",
        &progress,
        &[("ocm-rollout-plugin", "lean")],
    )
    .await;
    assert_eq!(answer.status().as_deref(), Some("0"));
    assert_eq!(
        lean.last("ProgressRollout"),
        without_state(&progress).encode_to_vec()
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_pipeline_gives_each_member_what_it_declared_and_says_full() {
    let old = Recorder::start(None).await;
    let lean = Recorder::start(Some(RolloutStateDetail::Counts)).await;
    let full = Recorder::start(Some(RolloutStateDetail::Full)).await;
    let lean2 = Recorder::start(Some(RolloutStateDetail::Counts)).await;
    let gw = gateway(&format!(
        "plugins:\n{}{}{}{}pipelines:\n  - name: mixed\n    plugins: [old, lean, full]\n  - name: lean-only\n    plugins: [lean, lean2]\n",
        old.config("old"),
        lean.config("lean"),
        full.config("full"),
        lean2.config("lean2"),
    ))
    .await;
    // Any member wanting the list makes the pipeline say FULL; counts only
    // when every member declared it.
    assert_eq!(
        initialize(&gw, "mixed").await.state_detail(),
        RolloutStateDetail::Full
    );
    assert_eq!(
        initialize(&gw, "lean-only").await.state_detail(),
        RolloutStateDetail::Counts
    );
    let request = rollout_request(4, 6);
    send_each_hook(&gw, "mixed", &request).await;
    assert_received(&old, &request, true, "old");
    assert_received(&lean, &request, false, "lean");
    assert_received(&full, &request, true, "full");
    gw.stop().await;
}

/// A request as a newer controller might send it: fields this gateway's proto
/// does not have, before, between and after the ones it knows.
#[derive(Clone, PartialEq, prost::Message)]
struct NewerRequest {
    #[prost(string, tag = "1")]
    mwrs_name: String,
    #[prost(string, tag = "4")]
    cluster_name: String,
    #[prost(message, optional, tag = "6")]
    rollout_status: Option<RolloutState>,
    #[prost(int32, tag = "9")]
    cluster_index: i32,
    #[prost(message, optional, tag = "10")]
    counts: Option<RolloutCounts>,
    #[prost(string, tag = "12")]
    added_later: String,
    #[prost(fixed64, tag = "200")]
    added_much_later: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NewerValidateRequest {
    #[prost(message, optional, tag = "1")]
    rollout: Option<NewerRequest>,
    #[prost(string, tag = "7")]
    added_later: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NewerMutateRequest {
    #[prost(message, optional, tag = "1")]
    rollout: Option<NewerRequest>,
    #[prost(bytes = "bytes", tag = "2")]
    manifest_work: Bytes,
}

#[tokio::test]
async fn dropping_the_list_keeps_every_other_byte_unknown_fields_included() {
    let lean = Recorder::start(Some(RolloutStateDetail::Counts)).await;
    let gw = gateway(&format!("plugins:\n{}", lean.config("lean"))).await;
    initialize(&gw, "lean").await;
    let full = rollout_request(7, 9);
    let request = NewerRequest {
        mwrs_name: "web".into(),
        cluster_name: full.cluster_name.clone(),
        rollout_status: full.rollout_status.clone(),
        cluster_index: 7,
        counts: full.counts,
        added_later: "a field from a later API version".into(),
        added_much_later: 0x0102_0304_0506_0708,
    };
    let lean_request = NewerRequest {
        rollout_status: None,
        ..request.clone()
    };
    let validate = NewerValidateRequest {
        rollout: Some(request.clone()),
        added_later: "outside the rollout".into(),
    };
    let mutate = NewerMutateRequest {
        rollout: Some(request.clone()),
        manifest_work: work(2048),
    };
    let target = [("ocm-rollout-plugin", "lean")];
    for (method, message) in [
        ("BeginRollout", request.encode_to_vec()),
        ("ValidateRolloutCompletion", validate.encode_to_vec()),
        ("MutateManifestWork", mutate.encode_to_vec()),
    ] {
        let answer = raw_unary(gw.grpc, method, &RawMessage(message), &target).await;
        assert_eq!(
            answer.status().as_deref(),
            Some("0"),
            "{method}: {answer:?}"
        );
    }
    // prost encodes in field order, so the newer messages without their state
    // are exactly the bytes the plugin must get.
    assert_eq!(lean.last("BeginRollout"), lean_request.encode_to_vec());
    assert_eq!(
        lean.last("ValidateRolloutCompletion"),
        NewerValidateRequest {
            rollout: Some(lean_request.clone()),
            ..validate
        }
        .encode_to_vec()
    );
    assert_eq!(
        lean.last("MutateManifestWork"),
        NewerMutateRequest {
            rollout: Some(lean_request),
            ..mutate
        }
        .encode_to_vec()
    );
    gw.stop().await;
}

/// Message bytes each plugin of a pipeline `[lean, old]` receives over a
/// rollout of `clusters` (BeginRollout, MutateManifestWork and
/// ValidateRolloutCompletion per cluster, each with the state a full-state
/// controller sends).
async fn rollout_bytes(clusters: usize) -> (usize, usize) {
    let lean = Recorder::start(Some(RolloutStateDetail::Counts)).await;
    let old = Recorder::start(None).await;
    let gw = gateway(&format!(
        "plugins:\n{}{}pipelines:\n  - name: both\n    plugins: [lean, old]\n",
        lean.config("lean"),
        old.config("old"),
    ))
    .await;
    initialize(&gw, "both").await;
    let mut client = gw.client().await;
    for index in 1..=clusters {
        let request = rollout_request(index, clusters);
        client
            .begin_rollout(to("both", request.clone()))
            .await
            .unwrap();
        client
            .mutate_manifest_work(to(
                "both",
                MutateManifestWorkRequest {
                    rollout: Some(request.clone()),
                    manifest_work: work(0),
                },
            ))
            .await
            .unwrap();
        client
            .validate_rollout_completion(to(
                "both",
                ValidateCompletionRequest {
                    rollout: Some(request),
                },
            ))
            .await
            .unwrap();
    }
    gw.stop().await;
    (lean.rollout_bytes(), old.rollout_bytes())
}

#[tokio::test]
async fn bytes_to_a_counts_only_plugin_grow_linearly_with_the_fleet() {
    let (n, four_n) = (50, 200);
    let (lean_n, old_n) = rollout_bytes(n).await;
    let (lean_4n, old_4n) = rollout_bytes(four_n).await;
    let lean_ratio = lean_4n as f64 / lean_n as f64;
    let old_ratio = old_4n as f64 / old_n as f64;
    let report = format!(
        "counts only: {lean_n} → {lean_4n} bytes (×{lean_ratio:.2}); full: {old_n} → {old_4n} bytes (×{old_ratio:.2})"
    );
    // O(N): 4× the clusters, 4× the bytes (the same per call).
    assert!((3.8..=4.3).contains(&lean_ratio), "{report}");
    // The full list makes it O(N²): about 16×, once the list dominates.
    assert!(old_ratio > 10.0, "{report}");
    eprintln!("{report}");
}
