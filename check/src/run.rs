//! Calls a plugin the way the controller and gateway do, and judges each
//! rule on what it saw ([`crate::rules`]).

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint};
use prost_types::Timestamp;
use rollout_proto::v1alpha1::{
    ClusterRolloutStatus, Hook, InitializeRequest, MutateManifestWorkRequest, RolloutCounts,
    RolloutPluginRequest, RolloutState, RolloutStatus, ValidateCompletionRequest,
};
use serde_json::{Value, json};

use crate::client::{ConnectError, Connection, TlsFiles};
use crate::rules::{self, Outcome, Probe, Rule, Verdict};

/// The deadline every ordinary call gets (the gateway's default plugin
/// timeout is of this order).
pub(crate) const DEADLINE: Duration = Duration::from_secs(5);
/// The short deadline of the `deadline` rule.
pub(crate) const SHORT_DEADLINE: Duration = Duration::from_millis(200);
/// How long past a deadline a call may take to end (scheduling, network).
pub(crate) const SLACK: Duration = Duration::from_millis(500);
/// Clusters in the `large-state` rule's rollout.
pub(crate) const LARGE_STATE_CLUSTERS: usize = 10_000;

const SERVICE: &str = "/ocm.rolloutplugin.v1alpha1.RolloutPluginService/";

/// Connects to `target` and checks every rule, in the order of [`Rule`]'s variants.
pub async fn check(target: &str, tls: &TlsFiles) -> Result<Vec<Outcome>, ConnectError> {
    let conn = Connection::open(target, tls).await?;
    let checker = Checker {
        conn,
        target: target.to_owned(),
    };
    checker.run().await
}

struct Checker {
    conn: Connection,
    /// The endpoint as given, for the error when it does not speak gRPC.
    target: String,
}

impl Checker {
    async fn call(&self, path: &str, message: Bytes, deadline: Duration) -> rules::Observed {
        self.conn
            .unary(path, message, Some(deadline), deadline + SLACK)
            .await
    }

    async fn hook(&self, hook: Hook, message: Bytes, deadline: Duration) -> rules::Observed {
        self.call(&format!("{SERVICE}{}", hook.name()), message, deadline)
            .await
    }

    /// Every rule's outcome, one phase per rule in the order of [`Rule`]'s variants;
    /// [`ConnectError::NotGrpc`] when the first call's stream failed (the
    /// endpoint does not speak gRPC over HTTP/2).
    async fn run(&self) -> Result<Vec<Outcome>, ConnectError> {
        let (initialize, probes) = self.initialize().await?;
        let (deadline, hooks) = self.deadline(probes).await;
        Ok(vec![
            initialize,
            deadline,
            self.idempotent(&hooks).await,
            self.identity(&hooks).await,
            self.unknown_fields(&hooks).await,
            self.large_state(&hooks).await,
            self.health().await,
        ])
    }

    /// Initialize, and the hooks its declaration says to probe.
    async fn initialize(&self) -> Result<(Outcome, Vec<Probe>), ConnectError> {
        let initialize = InitializeRequest {
            controller_version: concat!("rollout-plugin-check/", env!("CARGO_PKG_VERSION")).into(),
            hub_name: String::new(),
        };
        let observed = self
            .call(
                &format!("{SERVICE}Initialize"),
                initialize.encode_to_vec().into(),
                DEADLINE,
            )
            .await;
        if let rules::Ended::Transport(why) = observed.ended {
            return Err(ConnectError::NotGrpc {
                target: self.target.clone(),
                why,
            });
        }
        let (verdict, probes) = rules::judge_initialize(&observed);
        let outcome = Outcome {
            rule: Rule::Initialize,
            verdict,
        };
        Ok((outcome, probes))
    }

    /// Each probed hook with a generous deadline, then a short one; and the
    /// hooks the plugin implements. A hook it declared with every other (an
    /// empty list) and answers UNIMPLEMENTED is skipped, as the gateway
    /// skips it.
    async fn deadline(&self, probes: Vec<Probe>) -> (Outcome, Vec<Hook>) {
        let mut verdicts = Vec::new();
        let mut hooks = Vec::with_capacity(probes.len());
        for probe in probes {
            let hook = probe.hook;
            // Distinct clusters per rule, so a plugin that keeps state per
            // cluster (a soak) sees each rule's calls as their own.
            let request = hook_request(hook, &rollout("check-deadline", false), None);
            let generous = self.hook(hook, request.clone(), DEADLINE).await;
            match rules::judge_unimplemented(probe, &generous) {
                Some(Verdict::Pass) => continue,
                Some(failed) => {
                    verdicts.push(failed);
                    continue;
                }
                None => hooks.push(hook),
            }
            let short = self.hook(hook, request, SHORT_DEADLINE).await;
            verdicts.push(rules::judge_deadline(
                hook,
                DEADLINE,
                &generous,
                SHORT_DEADLINE,
                &short,
                SLACK,
            ));
        }
        (outcome(Rule::Deadline, verdicts), hooks)
    }

    /// Each hook twice with the same request.
    async fn idempotent(&self, hooks: &[Hook]) -> Outcome {
        let mut verdicts = Vec::new();
        for &hook in hooks {
            let request = hook_request(hook, &rollout("check-idempotent", false), None);
            let first = self.hook(hook, request.clone(), DEADLINE).await;
            let second = self.hook(hook, request, DEADLINE).await;
            verdicts.push(rules::judge_idempotent(hook, &first, &second));
        }
        outcome(Rule::Idempotent, verdicts)
    }

    /// MutateManifestWork keeps the work's identity, in a normal rollout
    /// and a rollback (plugins often mutate only one).
    async fn identity(&self, hooks: &[Hook]) -> Outcome {
        if !hooks.contains(&Hook::MutateManifestWork) {
            return Outcome {
                rule: Rule::Identity,
                verdict: Verdict::Skip("the plugin does not declare MutateManifestWork".into()),
            };
        }
        let mut verdicts = Vec::new();
        for aborting in [false, true] {
            let cluster = "check-identity";
            let work = sample_work(cluster);
            let request = hook_request(
                Hook::MutateManifestWork,
                &rollout(cluster, aborting),
                Some(&work),
            );
            let observed = self.hook(Hook::MutateManifestWork, request, DEADLINE).await;
            verdicts.push(rules::judge_identity(&work, &observed));
        }
        outcome(Rule::Identity, verdicts)
    }

    /// Unknown fields, and a plugin configuration holding only another
    /// plugin's key: a pipeline's members all get the same object.
    async fn unknown_fields(&self, hooks: &[Hook]) -> Outcome {
        let mut verdicts = Vec::new();
        let mut unknown = rollout("check-unknown-fields", false);
        unknown.plugin_config_json = OTHER_PLUGINS_CONFIG.into();
        for &hook in hooks {
            let request = with_unknown_fields(hook, &unknown);
            let observed = self.hook(hook, request, DEADLINE).await;
            verdicts.push(rules::judge_accepted(
                hook,
                "unknown request fields and another plugin's pluginConfig key",
                &observed,
            ));
        }
        outcome(Rule::UnknownFields, verdicts)
    }

    /// Each hook with a rollout state of [`LARGE_STATE_CLUSTERS`] clusters.
    async fn large_state(&self, hooks: &[Hook]) -> Outcome {
        let mut verdicts = Vec::new();
        let large = large_rollout(LARGE_STATE_CLUSTERS);
        for &hook in hooks {
            let request = hook_request(hook, &large, None);
            let observed = self.hook(hook, request, DEADLINE).await;
            verdicts.push(rules::judge_accepted(
                hook,
                &format!("a {LARGE_STATE_CLUSTERS}-cluster rollout state"),
                &observed,
            ));
        }
        outcome(Rule::LargeState, verdicts)
    }

    /// The standard health service's Check.
    async fn health(&self) -> Outcome {
        let health = tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        };
        let observed = self
            .call(
                "/grpc.health.v1.Health/Check",
                health.encode_to_vec().into(),
                DEADLINE,
            )
            .await;
        Outcome {
            rule: Rule::Health,
            verdict: rules::judge_health(&observed),
        }
    }
}

/// A rule's outcome from the verdicts of its calls.
fn outcome(rule: Rule, verdicts: Vec<Verdict>) -> Outcome {
    Outcome {
        rule,
        verdict: Verdict::all(verdicts),
    }
}

/// A rollout of MWRS `default/rollout-plugin-check` with `cluster` as the
/// first of 3 clusters (empty for ProgressRollout, see [`hook_request`]).
fn rollout(cluster: &str, aborting: bool) -> RolloutPluginRequest {
    let status = |name: &str, status: RolloutStatus| ClusterRolloutStatus {
        cluster_name: name.into(),
        rollout_status: status.into(),
        manifest_revision_name: "rev-1".into(),
        last_transition_time: Some(Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        group_index: 0,
        group_name: String::new(),
    };
    RolloutPluginRequest {
        mwrs_name: "rollout-plugin-check".into(),
        mwrs_namespace: "default".into(),
        placement_name: "placement".into(),
        cluster_name: cluster.into(),
        total_cluster_count: 3,
        rollout_status: Some(RolloutState {
            completed: vec![status("done-1", RolloutStatus::Succeeded)],
            progressing: vec![
                status(cluster, RolloutStatus::Progressing),
                status("next-1", RolloutStatus::ToApply),
            ],
            ..Default::default()
        }),
        desired_revision: "rev-1".into(),
        aborting,
        cluster_index: 1,
        counts: Some(RolloutCounts {
            succeeded: 1,
            progressing: 1,
            to_apply: 1,
            ..Default::default()
        }),
        // A rollout without a plugin configuration: every plugin must work
        // with its own defaults.
        plugin_config_json: String::new(),
    }
}

/// A rollout of `clusters` clusters, half done and half in flight, about
/// the first one in flight.
fn large_rollout(clusters: usize) -> RolloutPluginRequest {
    let done = clusters / 2;
    let status = |i: usize| ClusterRolloutStatus {
        cluster_name: format!("cluster-{i:05}"),
        rollout_status: if i < done {
            RolloutStatus::Succeeded
        } else {
            RolloutStatus::ToApply
        }
        .into(),
        manifest_revision_name: "rev-1".into(),
        last_transition_time: Some(Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        }),
        group_index: i32::try_from(i / 100).unwrap_or(i32::MAX),
        group_name: String::new(),
    };
    let total = i32::try_from(clusters).unwrap_or(i32::MAX);
    let done_count = i32::try_from(done).unwrap_or(i32::MAX);
    RolloutPluginRequest {
        mwrs_name: "rollout-plugin-check".into(),
        mwrs_namespace: "default".into(),
        placement_name: "placement".into(),
        cluster_name: format!("cluster-{done:05}"),
        total_cluster_count: total,
        rollout_status: Some(RolloutState {
            completed: (0..done).map(status).collect(),
            progressing: (done..clusters).map(status).collect(),
            ..Default::default()
        }),
        desired_revision: "rev-1".into(),
        aborting: false,
        cluster_index: done_count + 1,
        counts: Some(RolloutCounts {
            succeeded: done_count,
            to_apply: total - done_count,
            ..Default::default()
        }),
        plugin_config_json: String::new(),
    }
}

/// The ManifestWork the checker asks to mutate, for `cluster`'s namespace:
/// a Deployment and an Argo Rollout with canary steps.
// Like the SDK's `testing::sample_work`, but the checker's own: it judges
// plugins in any language and depends on no plugin SDK.
fn sample_work(cluster: &str) -> Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {"name": "rollout-plugin-check", "namespace": cluster},
        "spec": {"workload": {"manifests": [
            {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "web", "namespace": "default"},
             "spec": {"replicas": 2}},
            {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
             "metadata": {"name": "web", "namespace": "default"},
             "spec": {"strategy": {"canary": {"steps": [{"setWeight": 20}, {"pause": {}}]}}}}
        ]}}
    })
}

/// The encoded request of `hook` around `rollout`: ProgressRollout is about
/// the placement (no cluster), the others about `rollout.cluster_name`.
fn hook_request(hook: Hook, rollout: &RolloutPluginRequest, work: Option<&Value>) -> Bytes {
    let mut rollout = rollout.clone();
    if hook == Hook::ProgressRollout {
        rollout.cluster_name.clear();
        rollout.cluster_index = 0;
    }
    match hook {
        Hook::ValidateRolloutCompletion => ValidateCompletionRequest {
            rollout: Some(rollout),
        }
        .encode_to_vec(),
        Hook::MutateManifestWork => {
            let work = work
                .cloned()
                .unwrap_or_else(|| sample_work(&rollout.cluster_name));
            MutateManifestWorkRequest {
                rollout: Some(rollout),
                manifest_work: serde_json::to_vec(&work).unwrap_or_default().into(),
            }
            .encode_to_vec()
        }
        _ => rollout.encode_to_vec(),
    }
    .into()
}

/// The `plugin_config_json` of the `unknown-fields` rule: a key no plugin
/// but the checker reads (docs/plugin-api.md §1, "Plugin configuration").
const OTHER_PLUGINS_CONFIG: &str = r#"{"rollout-plugin-check":{"probe":true}}"#;

/// Field numbers no version of the API uses (the API adds fields under new
/// numbers, far below these).
const UNKNOWN_STRING: u32 = 9_001;
const UNKNOWN_VARINT: u32 = 9_002;

/// Appends an unknown string field and an unknown varint field.
fn push_unknown(buf: &mut BytesMut) {
    let mut raw = Vec::new();
    encode_key(UNKNOWN_STRING, WireType::LengthDelimited, &mut raw);
    encode_varint(11, &mut raw);
    raw.extend_from_slice(b"from-future");
    encode_key(UNKNOWN_VARINT, WireType::Varint, &mut raw);
    encode_varint(42, &mut raw);
    buf.put_slice(&raw);
}

/// `hook_request`'s message with unknown fields both in the rollout and (for
/// the hooks that wrap it) in the outer request.
fn with_unknown_fields(hook: Hook, rollout: &RolloutPluginRequest) -> Bytes {
    let mut rollout = rollout.clone();
    if hook == Hook::ProgressRollout {
        rollout.cluster_name.clear();
        rollout.cluster_index = 0;
    }
    let mut inner = BytesMut::from(rollout.encode_to_vec().as_slice());
    push_unknown(&mut inner);
    if matches!(hook, Hook::BeginRollout | Hook::ProgressRollout) {
        return inner.freeze();
    }
    let mut outer = Vec::new();
    // field 1 (rollout) of ValidateCompletionRequest and MutateManifestWorkRequest
    encode_key(1, WireType::LengthDelimited, &mut outer);
    encode_varint(inner.len() as u64, &mut outer);
    outer.extend_from_slice(&inner);
    if hook == Hook::MutateManifestWork {
        let work = serde_json::to_vec(&sample_work(&rollout.cluster_name)).unwrap_or_default();
        encode_key(2, WireType::LengthDelimited, &mut outer);
        encode_varint(work.len() as u64, &mut outer);
        outer.extend_from_slice(&work);
    }
    let mut outer = BytesMut::from(outer.as_slice());
    push_unknown(&mut outer);
    outer.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_decode_as_the_known_request() {
        let rollout = rollout("c1", false);
        let bytes = with_unknown_fields(Hook::MutateManifestWork, &rollout);
        let decoded = MutateManifestWorkRequest::decode(bytes.clone()).unwrap();
        assert_eq!(decoded.rollout.as_ref(), Some(&rollout));
        assert_ne!(
            bytes,
            hook_request(Hook::MutateManifestWork, &rollout, None)
        );
        let progress =
            RolloutPluginRequest::decode(with_unknown_fields(Hook::ProgressRollout, &rollout))
                .unwrap();
        assert_eq!(progress.cluster_name, "");
    }

    #[test]
    fn the_large_state_lists_every_cluster_once() {
        let r = large_rollout(10_000);
        let state = r.rollout_status.unwrap();
        assert_eq!(state.completed.len() + state.progressing.len(), 10_000);
        assert_eq!(r.cluster_name, "cluster-05000");
        assert_eq!(state.progressing[0].cluster_name, r.cluster_name);
    }
}
