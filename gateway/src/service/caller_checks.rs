//! What the gateway forwards without decoding, checked cheaply before any
//! plugin is called: a request a plugin would refuse because of the
//! caller's own bytes must not count against that plugin (its circuit
//! breaker is shared by every caller of a hub). Each check is one pass over
//! the bytes and allocates nothing; `benches/caller_checks.rs` measures it.
//! `rollout_status` is walked only when a plugin of the target gets it
//! (`state`): to plugins that asked for the counts it is never sent.

use rollout_proto::partial::{self, MAX_PLUGIN_CONFIG_DEPTH, RequestError};

use crate::error::GatewayError;
use crate::manifest;

/// A `RolloutPluginRequest` (BeginRollout, ProgressRollout).
pub(crate) fn rollout_request(message: &[u8], state: bool) -> Result<(), GatewayError> {
    config(partial::check_rollout_request(message, state))
}

/// A `ValidateCompletionRequest`.
pub(crate) fn validate_request(message: &[u8], state: bool) -> Result<(), GatewayError> {
    config(partial::check_validate_request(message, state))
}

/// A `MutateManifestWorkRequest` (its ManifestWork is checked apart, off
/// the runtime when large).
pub(crate) fn mutate_request(message: &[u8], state: bool) -> Result<(), GatewayError> {
    config(partial::check_mutate_request(message, state))
}

/// The request's wire check, then its `plugin_config_json`: empty, or a
/// JSON object (as the plugin API defines it) nested at most
/// [`MAX_PLUGIN_CONFIG_DEPTH`] deep (deeper, a plugin's JSON library may
/// fail on it, which would count against that plugin).
fn config(checked: Result<&[u8], RequestError>) -> Result<(), GatewayError> {
    let json =
        checked.map_err(|e| GatewayError::InvalidRequest(format!("malformed request: {e}")))?;
    if json.is_empty() {
        return Ok(());
    }
    // First: one pass that stops early, before the syntax pass.
    if partial::nests_deeper_than(json, MAX_PLUGIN_CONFIG_DEPTH) {
        return Err(GatewayError::InvalidRequest(format!(
            "plugin_config_json nests arrays and objects more than {MAX_PLUGIN_CONFIG_DEPTH} levels deep"
        )));
    }
    manifest::check_object(json)
        .map_err(|why| GatewayError::InvalidRequest(format!("plugin_config_json {why}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;
    use rollout_proto::v1alpha1::{
        ClusterRolloutStatus, MutateManifestWorkRequest, RolloutPluginRequest, RolloutState,
        ValidateCompletionRequest,
    };

    fn request(config: &str) -> RolloutPluginRequest {
        RolloutPluginRequest {
            cluster_name: "c1".into(),
            rollout_status: Some(RolloutState {
                completed: vec![ClusterRolloutStatus {
                    cluster_name: "c0".into(),
                    last_transition_time: Some(prost_types::Timestamp {
                        seconds: 5,
                        nanos: 0,
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            plugin_config_json: config.into(),
            ..Default::default()
        }
    }

    #[test]
    fn well_formed_requests_pass() {
        for config in ["", "{}", r#"{"soakTime":"5m"}"#] {
            let r = request(config);
            rollout_request(&r.encode_to_vec(), true).expect("rollout");
            let v = ValidateCompletionRequest {
                rollout: Some(r.clone()),
            };
            validate_request(&v.encode_to_vec(), true).expect("validate");
            let m = MutateManifestWorkRequest {
                rollout: Some(r),
                manifest_work: b"{}".to_vec().into(),
            };
            mutate_request(&m.encode_to_vec(), true).expect("mutate");
        }
    }

    #[test]
    fn the_callers_junk_is_refused_naming_the_field() {
        let bad_config = |config: &str| rollout_request(&request(config).encode_to_vec(), true);
        for (config, why) in [
            ("not json", "plugin_config_json is not JSON"),
            ("[1]", "plugin_config_json is a JSON array, not an object"),
        ] {
            let e = bad_config(config).expect_err(config);
            assert!(e.to_string().contains(why), "{e}");
        }
        // plugin_config_json (field 11) that is not UTF-8.
        let mut bytes = request("").encode_to_vec();
        bytes.extend_from_slice(&[0x5a, 2, 0xff, 0xfe]);
        let e = rollout_request(&bytes, true).expect_err("not UTF-8");
        assert!(
            e.to_string().contains("plugin_config_json is not UTF-8"),
            "{e}"
        );
        // rollout_status (field 6) cut short inside a cluster's status.
        let state = request("").rollout_status.expect("state").encode_to_vec();
        let mut truncated = vec![0x32, state.len() as u8];
        truncated.extend_from_slice(&state[..state.len() - 3]);
        truncated.extend_from_slice(&[0, 0, 0]);
        let e = rollout_request(&truncated, true).expect_err("truncated");
        assert!(e.to_string().contains("rollout_status"), "{e}");
        // Not walked for a target that never gets it; still one framed field.
        rollout_request(&truncated, false).expect("not walked");
        // The same inside a ValidateCompletionRequest.
        let mut validate = vec![0x0a, truncated.len() as u8];
        validate.extend_from_slice(&truncated);
        let e = validate_request(&validate, true).expect_err("nested");
        assert!(e.to_string().contains("rollout.rollout_status"), "{e}");
        // A string field sent as a varint.
        let e = rollout_request(&[0x20, 1], true).expect_err("wire type");
        assert!(
            e.to_string().contains("cluster_name has wire type 0"),
            "{e}"
        );
    }
}
