//! [`RolloutRequest`]: a `RolloutPluginRequest` as the controller sends it,
//! its `rollout_status` already encoded.
//!
//! `rollout_status` lists every cluster of the placement, so building and
//! encoding it for each call of a step made a rollout cost the square of the
//! fleet. The controller encodes the state once per step
//! ([`encode_state`]) and every request of that step holds the same
//! [`Bytes`] (a reference count, not a copy). On the wire a message field
//! and a `bytes` field are both length-delimited, so [`RolloutRequest`]
//! encodes to exactly the bytes of the equivalent `RolloutPluginRequest`;
//! [`RolloutRequest::decode_full`] reads it back as one (for tests and
//! tools). `plugin_config_json` (field 11, the strategy's `pluginConfig`) is
//! shared the same way: encoded once when the strategy is validated.

use bytes::Bytes;
use prost::Message as _;
use rollout_proto::partial::RolloutFields;
use rollout_proto::v1alpha1::{RolloutCounts, RolloutPluginRequest, RolloutState};

/// `RolloutPluginRequest` with `rollout_status` (field 6) as the encoded
/// `RolloutState`. Cheap to clone: the state is shared.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RolloutRequest {
    /// `mwrs_name`.
    #[prost(string, tag = "1")]
    pub mwrs_name: String,
    /// `mwrs_namespace`.
    #[prost(string, tag = "2")]
    pub mwrs_namespace: String,
    /// `placement_name`.
    #[prost(string, tag = "3")]
    pub placement_name: String,
    /// `cluster_name`; empty for ProgressRollout.
    #[prost(string, tag = "4")]
    pub cluster_name: String,
    /// `total_cluster_count`.
    #[prost(int32, tag = "5")]
    pub total_cluster_count: i32,
    /// `rollout_status`, encoded ([`encode_state`]); `None` for a target
    /// that declared it wants the counts only.
    #[prost(bytes = "bytes", optional, tag = "6")]
    pub rollout_status: Option<Bytes>,
    /// `desired_revision`.
    #[prost(string, tag = "7")]
    pub desired_revision: String,
    /// `aborting`.
    #[prost(bool, tag = "8")]
    pub aborting: bool,
    /// `cluster_index`.
    #[prost(int32, tag = "9")]
    pub cluster_index: i32,
    /// `counts`: always set by the controller.
    #[prost(message, optional, tag = "10")]
    pub counts: Option<RolloutCounts>,
    /// `plugin_config_json`: the strategy's `pluginConfig` as JSON text,
    /// encoded once per rollout and shared like the state (a `string` and a
    /// `bytes` field encode alike); `None` when the strategy has none.
    #[prost(bytes = "bytes", optional, tag = "11")]
    pub plugin_config_json: Option<Bytes>,
}

/// The bytes of `state`, to share between the requests of one step.
pub fn encode_state(state: &RolloutState) -> Bytes {
    Bytes::from(state.encode_to_vec())
}

impl RolloutRequest {
    /// The request as the plugin decodes it.
    pub fn decode_full(&self) -> RolloutPluginRequest {
        let bare = RolloutRequest {
            rollout_status: None,
            ..self.clone()
        };
        // Fields the controller itself encoded: they decode.
        let mut full =
            RolloutPluginRequest::decode(bare.encode_to_vec().as_slice()).unwrap_or_default();
        full.rollout_status = self.state();
        full
    }

    /// The decoded `rollout_status`, if it was sent.
    pub(crate) fn state(&self) -> Option<RolloutState> {
        self.rollout_status
            .as_ref()
            .and_then(|b| RolloutState::decode(b.as_ref()).ok())
    }

    /// Who and what the request is about, for spans.
    pub(crate) fn fields(&self) -> RolloutFields {
        RolloutFields {
            mwrs_name: self.mwrs_name.clone(),
            mwrs_namespace: self.mwrs_namespace.clone(),
            placement_name: self.placement_name.clone(),
            cluster_name: self.cluster_name.clone(),
            total_cluster_count: self.total_cluster_count,
            desired_revision: self.desired_revision.clone(),
            aborting: self.aborting,
            cluster_index: self.cluster_index,
        }
    }
}

/// `ValidateCompletionRequest` over a [`RolloutRequest`].
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ValidateWire {
    #[prost(message, optional, tag = "1")]
    pub(crate) rollout: Option<RolloutRequest>,
}

/// `MutateManifestWorkRequest` over a [`RolloutRequest`].
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct MutateWire {
    #[prost(message, optional, tag = "1")]
    pub(crate) rollout: Option<RolloutRequest>,
    #[prost(bytes = "bytes", tag = "2")]
    pub(crate) manifest_work: Bytes,
}

#[cfg(test)]
mod tests {
    use rollout_proto::v1alpha1::{
        ClusterRolloutStatus, MutateManifestWorkRequest, ValidateCompletionRequest,
    };

    use super::*;

    fn full() -> RolloutPluginRequest {
        let status = |name: &str| ClusterRolloutStatus {
            cluster_name: name.into(),
            manifest_revision_name: "rev".into(),
            rollout_status: 3,
            ..ClusterRolloutStatus::default()
        };
        RolloutPluginRequest {
            mwrs_name: "web".into(),
            mwrs_namespace: "default".into(),
            placement_name: "fleet".into(),
            cluster_name: "c2".into(),
            total_cluster_count: 3,
            rollout_status: Some(RolloutState {
                completed: vec![status("c1")],
                progressing: vec![status("c2")],
                timed_out: vec![],
                removed: vec![status("c9")],
            }),
            desired_revision: "abc".into(),
            aborting: true,
            cluster_index: 2,
            counts: Some(RolloutCounts {
                succeeded: 1,
                progressing: 1,
                to_apply: 1,
                removed: 1,
                ..RolloutCounts::default()
            }),
            plugin_config_json: r#"{"soakTime":"5m"}"#.into(),
        }
    }

    fn shared(full: &RolloutPluginRequest) -> RolloutRequest {
        RolloutRequest {
            mwrs_name: full.mwrs_name.clone(),
            mwrs_namespace: full.mwrs_namespace.clone(),
            placement_name: full.placement_name.clone(),
            cluster_name: full.cluster_name.clone(),
            total_cluster_count: full.total_cluster_count,
            rollout_status: full.rollout_status.as_ref().map(encode_state),
            desired_revision: full.desired_revision.clone(),
            aborting: full.aborting,
            cluster_index: full.cluster_index,
            counts: full.counts,
            plugin_config_json: Some(Bytes::from(full.plugin_config_json.clone())),
        }
    }

    #[test]
    fn the_shared_state_encodes_as_the_full_message() {
        let full = full();
        let request = shared(&full);
        assert_eq!(request.encode_to_vec(), full.encode_to_vec());
        assert_eq!(request.decode_full(), full);
        assert_eq!(request.state(), full.rollout_status);
        // Without the state, the field is absent, not empty.
        let bare = RolloutRequest {
            rollout_status: None,
            ..request.clone()
        };
        assert_eq!(bare.decode_full().rollout_status, None);
        assert_eq!(bare.decode_full().counts, full.counts);

        let validate = ValidateWire {
            rollout: Some(request.clone()),
        };
        assert_eq!(
            validate.encode_to_vec(),
            ValidateCompletionRequest {
                rollout: Some(full.clone())
            }
            .encode_to_vec()
        );
        let work = Bytes::from_static(b"{\"kind\":\"ManifestWork\"}");
        let mutate = MutateWire {
            rollout: Some(request),
            manifest_work: work.clone(),
        };
        assert_eq!(
            mutate.encode_to_vec(),
            MutateManifestWorkRequest {
                rollout: Some(full),
                manifest_work: work,
            }
            .encode_to_vec()
        );
    }
}
