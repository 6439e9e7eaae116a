//! Partial views of the request messages, for code that passes a request on
//! rather than reading all of it: the gateway, and the spans of a client.
//!
//! `RolloutPluginRequest.rollout_status` lists every cluster of the placement
//! (about 55 bytes each, so half a megabyte late in a rollout of 10,000
//! clusters). These views decode the same wire bytes as the full messages but
//! skip that field (protobuf skips fields a message does not declare, without
//! allocating), so reading who a request is about costs the same for 10 or
//! 10,000 clusters. The bytes themselves can then be forwarded untouched.

use bytes::Bytes;

use crate::v1alpha1::RolloutPluginRequest;

/// `RolloutPluginRequest` without `rollout_status` (field 6): who and what a
/// request is about. Decoding a full request's bytes as this skips the state.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct RolloutFields {
    /// `mwrs_name`.
    #[prost(string, tag = "1")]
    pub mwrs_name: String,
    /// `mwrs_namespace`.
    #[prost(string, tag = "2")]
    pub mwrs_namespace: String,
    /// `placement_name`.
    #[prost(string, tag = "3")]
    pub placement_name: String,
    /// `cluster_name`; empty for placement-wide hooks.
    #[prost(string, tag = "4")]
    pub cluster_name: String,
    /// `total_cluster_count`.
    #[prost(int32, tag = "5")]
    pub total_cluster_count: i32,
    /// `desired_revision`.
    #[prost(string, tag = "7")]
    pub desired_revision: String,
    /// `aborting`.
    #[prost(bool, tag = "8")]
    pub aborting: bool,
    /// `cluster_index`.
    #[prost(int32, tag = "9")]
    pub cluster_index: i32,
}

impl From<&RolloutPluginRequest> for RolloutFields {
    fn from(r: &RolloutPluginRequest) -> RolloutFields {
        RolloutFields {
            mwrs_name: r.mwrs_name.clone(),
            mwrs_namespace: r.mwrs_namespace.clone(),
            placement_name: r.placement_name.clone(),
            cluster_name: r.cluster_name.clone(),
            total_cluster_count: r.total_cluster_count,
            desired_revision: r.desired_revision.clone(),
            aborting: r.aborting,
            cluster_index: r.cluster_index,
        }
    }
}

/// `ValidateCompletionRequest`, its `rollout` read as [`RolloutFields`].
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct ValidateView {
    /// `rollout`, without its state.
    #[prost(message, optional, tag = "1")]
    pub rollout: Option<RolloutFields>,
}

/// `MutateManifestWorkRequest` with its `rollout` kept as encoded bytes (a
/// message and a `bytes` field are the same on the wire), so that it can be
/// sent on with each new ManifestWork without being decoded or copied.
/// Encoding this gives the bytes of the equivalent full request.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub struct MutateParts {
    /// `rollout`, the encoded `RolloutPluginRequest`; `None` when absent.
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub rollout: Option<Bytes>,
    /// `manifest_work`, the ManifestWork as JSON.
    #[prost(bytes = "bytes", tag = "2")]
    pub manifest_work: Bytes,
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;
    use crate::v1alpha1::{
        ClusterRolloutStatus, MutateManifestWorkRequest, RolloutState, ValidateCompletionRequest,
    };

    fn request() -> RolloutPluginRequest {
        let status = |name: &str| ClusterRolloutStatus {
            cluster_name: name.into(),
            manifest_revision_name: "rev".into(),
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
            ..Default::default()
        }
    }

    #[test]
    fn fields_are_the_request_without_its_state() {
        let full = request();
        let fields = RolloutFields::decode(full.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(fields, RolloutFields::from(&full));
        // Every field but the state survives the round trip.
        let back = RolloutPluginRequest::decode(fields.encode_to_vec().as_slice()).expect("back");
        assert_eq!(
            back,
            RolloutPluginRequest {
                rollout_status: None,
                ..full
            }
        );
    }

    #[test]
    fn views_read_the_full_messages_bytes() {
        let validate = ValidateCompletionRequest {
            rollout: Some(request()),
        };
        let view = ValidateView::decode(validate.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(view.rollout, Some(RolloutFields::from(&request())));

        let mutate = MutateManifestWorkRequest {
            rollout: Some(request()),
            manifest_work: Bytes::from_static(b"{\"kind\":\"ManifestWork\"}"),
        };
        let wire = mutate.encode_to_vec();
        let parts = MutateParts::decode(wire.as_slice()).expect("decodes");
        assert_eq!(
            parts.rollout.as_deref(),
            Some(request().encode_to_vec().as_slice())
        );
        // Re-encoded, the parts are the full message's bytes.
        assert_eq!(parts.encode_to_vec(), wire);
        // An absent rollout stays absent, an empty one stays present.
        for rollout in [None, Some(RolloutPluginRequest::default())] {
            let m = MutateManifestWorkRequest {
                rollout,
                manifest_work: Bytes::new(),
            };
            let parts = MutateParts::decode(m.encode_to_vec().as_slice()).expect("decodes");
            assert_eq!(parts.encode_to_vec(), m.encode_to_vec());
        }
    }
}
