//! Bad input from either side: plugins that answer with something that is
//! not the ManifestWork they were given, callers whose requests no plugin
//! could take, garbage on the gRPC port, and messages at and over the size
//! limit.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use prost::Message as _;
use rollout_gateway::hooks::HookKind;
use rollout_proto::v1alpha1::InitializeRequest;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tonic::Code;

async fn one_mutator(mutation: Mutation) -> (Plugin, Gateway) {
    let p = plugin(Behaviour::new("rogue")).await;
    p.set(|b| b.mutate = mutation);
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("rogue", &p, ""))).await;
    (p, gw)
}

#[tokio::test]
async fn answers_that_are_not_json_objects_fail_naming_the_plugin() {
    for (answer, why) in [
        (Bytes::from_static(b"not json at all"), "is not JSON"),
        (
            Bytes::from_static(b"[1,2,3]"),
            "is a JSON array, not an object",
        ),
        (
            Bytes::from_static(b"\"a string\""),
            "is a JSON string, not an object",
        ),
    ] {
        let (_p, gw) = one_mutator(Mutation::Fixed(answer)).await;
        let e = gw
            .client()
            .await
            .mutate_manifest_work(to("rogue", mutate_request("c1", work(512))))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Internal);
        assert!(
            e.message()
                .starts_with("plugin \"rogue\": returned a ManifestWork that "),
            "{}",
            e.message()
        );
        assert!(e.message().contains(why), "{}", e.message());
        gw.stop().await;
    }
}

/// A work that the agent applies as the service account `apps/deployer`.
fn work_with_executor() -> Bytes {
    let mut w: Value = serde_json::from_slice(&work(512)).unwrap();
    w["spec"]["executor"] = executor("deployer");
    Bytes::from(serde_json::to_vec(&w).unwrap())
}

fn executor(name: &str) -> Value {
    json!({"subject": {"type": "ServiceAccount",
                       "serviceAccount": {"namespace": "apps", "name": name}}})
}

#[tokio::test]
async fn answers_that_change_the_identity_fail_naming_the_plugin_and_field() {
    for (field, pointer) in [
        ("apiVersion", "/apiVersion"),
        ("kind", "/kind"),
        ("metadata.name", "/metadata/name"),
        ("metadata.namespace", "/metadata/namespace"),
        ("spec.executor", "/spec/executor"),
    ] {
        let f = Arc::new(move |w: &Value| {
            let mut w = w.clone();
            *w.pointer_mut(pointer).unwrap() = json!("elsewhere");
            w
        });
        let (_p, gw) = one_mutator(Mutation::With(f)).await;
        let e = gw
            .client()
            .await
            .mutate_manifest_work(to("rogue", mutate_request("c1", work_with_executor())))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Internal, "{field}");
        assert!(
            e.message().starts_with("plugin \"rogue\": "),
            "{}",
            e.message()
        );
        assert!(
            e.message().contains(&format!("changes {field} from")),
            "{}",
            e.message()
        );
        assert!(e.message().contains("to \"elsewhere\""), "{}", e.message());
        gw.stop().await;
    }
}

#[tokio::test]
async fn answers_that_add_or_remove_an_executor_fail() {
    // Who the agent applies a work as is identity: naming an executor where
    // the work had none, another account, or none where it had one.
    type Change = fn(&mut Value);
    let cases: [(Bytes, Change); 3] = [
        (work(512), |w| {
            w["spec"]["executor"] = executor("cluster-admin")
        }),
        (work_with_executor(), |w| {
            w["spec"]["executor"]["subject"]["serviceAccount"]["name"] = json!("cluster-admin");
        }),
        (work_with_executor(), |w| {
            w["spec"].as_object_mut().unwrap().remove("executor");
        }),
    ];
    for (input, change) in cases {
        let f = Arc::new(move |w: &Value| {
            let mut w = w.clone();
            change(&mut w);
            w
        });
        let (_p, gw) = one_mutator(Mutation::With(f)).await;
        let e = gw
            .client()
            .await
            .mutate_manifest_work(to("rogue", mutate_request("c1", input)))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Internal, "{}", e.message());
        assert!(
            e.message().contains("changes spec.executor from"),
            "{}",
            e.message()
        );
        gw.stop().await;
    }
    // Changing the rest of the spec, the executor kept, is a mutation.
    let f = Arc::new(|w: &Value| {
        let mut w = w.clone();
        w["spec"]["deleteOption"] = json!({"propagationPolicy": "Orphan"});
        w
    });
    let (_p, gw) = one_mutator(Mutation::With(f)).await;
    let resp = gw
        .client()
        .await
        .mutate_manifest_work(to("rogue", mutate_request("c1", work_with_executor())))
        .await
        .unwrap();
    assert_eq!(
        trailer(resp.metadata(), "ocm-rollout-mutated-by").as_deref(),
        Some("rogue")
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_same_value_answer_in_other_bytes_is_not_a_mutation() {
    // Re-serialised with other spacing and key order: the same JSON value.
    let f = Arc::new(|w: &Value| w.clone());
    let (_p, gw) = one_mutator(Mutation::With(f)).await;
    let input = Bytes::from(
        serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&work(600)).unwrap()).unwrap(),
    );
    let resp = gw
        .client()
        .await
        .mutate_manifest_work(to("rogue", mutate_request("c1", input)))
        .await
        .unwrap();
    assert_eq!(
        trailer(resp.metadata(), "ocm-rollout-mutated-by").as_deref(),
        Some("")
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_caller_work_that_is_not_a_json_object_is_invalid_argument_and_no_plugin_is_called() {
    let (p, gw) = one_mutator(Mutation::Fixed(Bytes::from_static(b"{\"kind\":\"x\"}"))).await;
    for (work, why) in [
        (&b"{oops"[..], "is not JSON"),
        (b"[1, 2]", "is a JSON array, not an object"),
        (b"", "is not JSON"),
        (b"{} trailing", "is not JSON"),
        // Syntax alone would pass it: the answer's check could not read it.
        (b"{\"n\": 1e400}", "is not JSON"),
    ] {
        let e = gw
            .client()
            .await
            .mutate_manifest_work(to(
                "rogue",
                mutate_request("c1", Bytes::copy_from_slice(work)),
            ))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
        assert!(
            e.message()
                .starts_with(&format!("the ManifestWork to mutate {why}")),
            "{}",
            e.message()
        );
    }
    assert_eq!(
        p.calls(rollout_gateway::hooks::HookKind::MutateManifestWork),
        0,
        "the plugin never saw the caller's bad work"
    );
    gw.stop().await;
}

#[tokio::test]
async fn garbage_on_the_grpc_port_leaves_the_gateway_serving() {
    let p = plugin(Behaviour::new("p")).await;
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("p", &p, ""))).await;
    for garbage in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        &b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\xff\xff\xff\xff\xff\xff"[..],
        &[0u8; 4096][..],
        &(0..2048u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
            .collect::<Vec<_>>()[..],
    ] {
        let mut s = tokio::net::TcpStream::connect(gw.grpc).await.unwrap();
        let _ = s.write_all(garbage).await;
        let _ = s.shutdown().await;
    }
    // Half-open connections that never speak either.
    let _idle: Vec<_> =
        futures::future::join_all((0..20).map(|_| tokio::net::TcpStream::connect(gw.grpc))).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut c = gw.client().await;
    c.initialize(to("p", InitializeRequest::default()))
        .await
        .unwrap();
    gw.stop().await;
}

#[tokio::test]
async fn a_4_mib_manifest_work_passes_a_2_member_chain_intact() {
    let a = plugin(Behaviour::new("a")).await;
    let b = plugin(Behaviour::new("b")).await;
    a.set(|x| x.mutate = Mutation::Annotate("a", "1"));
    b.set(|x| x.mutate = Mutation::Echo);
    let gw = gateway(&format!(
        "plugins:\n{}{}pipelines:\n  - name: p\n    plugins: [a, b]\n",
        insecure_plugin("a", &a, ""),
        insecure_plugin("b", &b, "")
    ))
    .await;
    let input = work(4 * MIB);
    assert!(input.len() >= 4 * MIB);
    let resp = gw
        .client()
        .await
        .mutate_manifest_work(to("p", mutate_request("c1", input.clone())))
        .await
        .unwrap();
    assert_eq!(
        trailer(resp.metadata(), "ocm-rollout-mutated-by").as_deref(),
        Some("a")
    );
    let out: Value = serde_json::from_slice(&resp.into_inner().manifest_work).unwrap();
    let mut expected: Value = serde_json::from_slice(&input).unwrap();
    expected = annotate(expected, "a", "a", "1");
    assert_eq!(
        out, expected,
        "the payload arrived intact, with a's annotation"
    );
    gw.stop().await;
}

#[tokio::test]
async fn messages_over_the_limit_are_resource_exhausted() {
    let p = plugin(Behaviour::new("p")).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("p", &p, ""))).unwrap();
    let gw = gateway_with(dir, path, |o| o.max_message_bytes = MIB).await;
    let mut c = gw.client().await;
    // Under the limit: fine.
    c.mutate_manifest_work(to("p", mutate_request("c1", work(MIB / 2))))
        .await
        .unwrap();
    // Over it: RESOURCE_EXHAUSTED, and the gateway keeps serving.
    let e = c
        .mutate_manifest_work(to("p", mutate_request("c1", work(2 * MIB))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    c.mutate_manifest_work(to("p", mutate_request("c1", work(1024))))
        .await
        .unwrap();
    gw.stop().await;
}

/// What a caller sends that a plugin could not take is the caller's error:
/// `INVALID_ARGUMENT` naming what is wrong, before any plugin is called, so
/// a plugin's circuit (which every caller and hub shares) never counts it.
#[tokio::test]
async fn a_callers_malformed_request_is_invalid_argument_and_no_plugin_is_called() {
    let (p, gw) = one_mutator(Mutation::Echo).await;
    let good = rollout("c1").encode_to_vec();
    let with = |extra: &[u8]| [good.as_slice(), extra].concat();
    let target = ("ocm-rollout-plugin", "rogue");
    // (method, message, headers, what the message names)
    type Case<'a> = (&'a str, Vec<u8>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        // plugin_config_json (field 11): not UTF-8, then not JSON.
        (
            "BeginRollout",
            with(&[0x5a, 2, 0xff, 0xfe]),
            vec![target],
            "plugin_config_json is not UTF-8",
        ),
        (
            "ProgressRollout",
            with(&[0x5a, 4, b'n', b'o', b'p', b'e']),
            vec![target],
            "plugin_config_json is not JSON",
        ),
        // rollout_status (field 6) whose first cluster is cut short.
        (
            "BeginRollout",
            with(&[0x32, 3, 0x0a, 5, b'c']),
            vec![target],
            "rollout_status",
        ),
        // Not a protobuf message at all.
        (
            "Initialize",
            vec![0x0a, 50, 1, 2],
            vec![target],
            "cannot decode",
        ),
        (
            "BeginRollout",
            good.clone(),
            vec![target, target],
            "\"ocm-rollout-plugin\" is sent more than once",
        ),
        (
            "BeginRollout",
            good.clone(),
            vec![target, ("grpc-timeout", "soon")],
            "\"grpc-timeout\" is not",
        ),
        (
            "BeginRollout",
            good.clone(),
            vec![target, ("grpc-timeout", "1S"), ("grpc-timeout", "2S")],
            "\"grpc-timeout\" is sent more than once",
        ),
    ];
    // The gateway's own Initialize first, so that none is counted below.
    p.wait_calls(HookKind::Initialize, 1).await;
    let initialized = p.calls(HookKind::Initialize);
    for (method, bytes, headers, why) in cases {
        let answer = raw_unary(gw.grpc, method, &RawMessage(bytes), &headers).await;
        assert_eq!(
            answer.status().as_deref(),
            Some("3"),
            "{method} {why}: {answer:?}"
        );
        assert!(
            answer.message().contains(why),
            "{method}: {}",
            answer.message()
        );
    }
    assert_eq!(p.calls(HookKind::BeginRollout), 0);
    assert_eq!(p.calls(HookKind::ProgressRollout), 0);
    assert_eq!(p.calls(HookKind::Initialize), initialized);
    // The plugin is as healthy as before: a good call goes through.
    let answer = raw_unary(gw.grpc, "BeginRollout", &RawMessage(good), &[target]).await;
    assert_eq!(answer.status().as_deref(), Some("0"), "{answer:?}");
    gw.stop().await;
}

/// A `pluginConfig` nested deeper than the controller could have read it
/// (2,000 levels in 4 KB, inside the 64 KiB the API allows) is the caller's
/// error: a plugin's JSON library could fail on it (Python's recursion
/// limit), which would open that plugin's circuit for every rollout of the
/// hub. The deepest the controller sends is forwarded.
#[tokio::test]
async fn a_plugin_config_nested_too_deep_is_refused_without_calling_the_plugin() {
    let (p, gw) = one_mutator(Mutation::Echo).await;
    let nested = |depth: usize| {
        format!("{}{}", r#"{"a":"#.repeat(depth), "}".repeat(depth)).replacen(
            r#"{"a":}"#,
            r#"{"a":1}"#,
            1,
        )
    };
    let deepest = rollout_proto::partial::MAX_PLUGIN_CONFIG_DEPTH;
    let mut c = gw.client().await;
    for depth in [deepest + 1, 2_000, 100_000] {
        let mut request = rollout("c1");
        request.plugin_config_json = nested(depth);
        for _ in 0..10 {
            let e = c
                .validate_rollout_completion(to(
                    "rogue",
                    rollout_proto::v1alpha1::ValidateCompletionRequest {
                        rollout: Some(request.clone()),
                    },
                ))
                .await
                .expect_err("too deep");
            assert_eq!(e.code(), Code::InvalidArgument, "{depth}: {e:?}");
            assert!(
                e.message().contains(&format!("more than {deepest} levels")),
                "{}",
                e.message()
            );
        }
    }
    assert_eq!(p.calls(HookKind::ValidateRolloutCompletion), 0);
    assert_eq!(gw.debug().await["plugins"][0]["circuit"], "closed");
    // Another rollout, and the deepest config the controller can send.
    let mut request = rollout("c2");
    request.plugin_config_json = nested(deepest);
    c.validate_rollout_completion(to(
        "rogue",
        rollout_proto::v1alpha1::ValidateCompletionRequest {
            rollout: Some(request),
        },
    ))
    .await
    .expect("forwarded");
    c.begin_rollout(to("rogue", rollout("c3")))
        .await
        .expect("another rollout is served");
    assert_eq!(p.calls(HookKind::ValidateRolloutCompletion), 1);
    gw.stop().await;
}
