//! ClusterManager (`operator.open-cluster-management.io/v1`, cluster-scoped):
//! the hub's configuration, of which this controller reads only
//! `spec.workConfiguration`, with the design's `plugins`.
//!
//! The registration path ([`crate::registration`]) renders the plugins into
//! the gateway's registry file. Every other field, of the spec and of each
//! plugin, is kept in `extra` as read.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The desired configuration of the hub controllers. (This definition
/// declares `workConfiguration`; it keeps every other field as written.)
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "operator.open-cluster-management.io",
    version = "v1",
    kind = "ClusterManager",
    status = "ClusterManagerStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "ClusterManager configures the hub controllers that govern registration and work distribution, including the rollout plugins of ManifestWorkReplicaSets."
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterManagerSpec {
    /// The configuration of the work controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) work_configuration: Option<WorkConfiguration>,
    /// Upstream fields this crate does not model (images, deployOption,
    /// registrationConfiguration, ...), kept as read.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

/// `workConfiguration`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkConfiguration {
    /// Feature gates of the work controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) feature_gates: Vec<FeatureGate>,
    /// kube, mqtt or grpc. Default kube.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) work_driver: Option<String>,
    /// The rollout plugins ManifestWorkReplicaSets may name in
    /// `rolloutStrategy.plugin`. Rendered into the `config.yaml` of the
    /// ConfigMap `work-controller-config`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub(crate) plugins: Vec<RolloutPlugin>,
    /// Named ordered lists of plugins that `rolloutStrategy.plugin` may name
    /// like a plugin (an addition of this project; see the gateway's
    /// pipelines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub(crate) pipelines: Vec<RolloutPipeline>,
    /// Upstream fields this crate does not model, kept as read.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

/// A feature gate and its mode.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FeatureGate {
    /// The gate, such as `ManifestWorkReplicaSet`.
    pub(crate) feature: String,
    /// Enable or Disable. Default Disable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Enable", "Disable"]))]
    pub(crate) mode: Option<String>,
}

/// A rollout plugin the work controller may call, through the gateway.
///
/// Fields beyond the design's (`insecure`, `timeout`, `failurePolicy`,
/// `retry`, `circuitBreaker`, `hubs`, ... of the gateway's registry format)
/// are kept in `extra` and passed to the registry as written; the gateway
/// validates them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolloutPlugin {
    /// The name ManifestWorkReplicaSets use in `rolloutStrategy.plugin`.
    #[schemars(length(min = 1))]
    pub(crate) name: String,
    /// The plugin's gRPC address, `host:port`.
    #[schemars(length(min = 1))]
    pub(crate) endpoint: String,
    /// The CA that signed the plugin's serving certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ca_certificate: Option<CaCertificate>,
    /// Further registry settings of the plugin, kept as written.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

/// `caCertificate`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CaCertificate {
    /// The base64 encoding of a PEM bundle of CA certificates. Exactly one of
    /// caBundle and caFile.
    // Left out of the registry when empty, so that a caFile alone is one
    // source, as the gateway wants.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("format" = "byte"))]
    pub(crate) ca_bundle: String,
    /// A PEM file of CA certificates in the gateway's container (such as a
    /// mounted cert-manager Secret's ca.crt), watched and reloaded when it
    /// changes. Exactly one of caBundle and caFile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ca_file: Option<String>,
}

/// A named ordered list of plugins.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RolloutPipeline {
    /// The name ManifestWorkReplicaSets use in `rolloutStrategy.plugin`.
    #[schemars(length(min = 1))]
    pub(crate) name: String,
    /// The member plugins, in call order for MutateManifestWork.
    #[serde(default)]
    pub(crate) plugins: Vec<String>,
}

/// What the operator reports about a ClusterManager.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterManagerStatus {
    /// The operator's conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) conditions: Vec<Condition>,
    /// Upstream fields this crate does not model, kept as read.
    #[serde(flatten)]
    pub(crate) extra: BTreeMap<String, Value>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn design_example_round_trips() {
        let original = json!({
            "apiVersion": "operator.open-cluster-management.io/v1",
            "kind": "ClusterManager",
            "metadata": {"name": "cluster-manager"},
            "spec": {
                "workImagePullSpec": "quay.io/open-cluster-management/work:v1.0.0",
                "deployOption": {"mode": "Default"},
                "workConfiguration": {
                    "workDriver": "kube",
                    "featureGates": [{"feature": "ManifestWorkReplicaSet", "mode": "Enable"}],
                    "plugins": [
                        {"name": "my-rollout-1", "endpoint": "my-rollout.my-namespace:10843",
                         "caCertificate": {"caBundle": "REPLACE_WITH_BASE64_CA_CERT"}},
                        {"name": "smoke", "endpoint": "127.0.0.1:7001", "insecure": true,
                         "timeout": "5s", "failurePolicy": "Ignore"}
                    ],
                    "pipelines": [{"name": "safe", "plugins": ["my-rollout-1", "smoke"]}]
                }
            },
            "status": {"conditions": [], "generations": [{"name": "x"}]}
        });
        let cm: ClusterManager = serde_json::from_value(original.clone()).expect("parses");
        let work = cm
            .spec
            .work_configuration
            .as_ref()
            .expect("workConfiguration");
        assert_eq!(work.work_driver.as_deref(), Some("kube"));
        assert_eq!(work.plugins[0].name, "my-rollout-1");
        assert_eq!(
            work.plugins[0]
                .ca_certificate
                .as_ref()
                .map(|c| c.ca_bundle.as_str()),
            Some("REPLACE_WITH_BASE64_CA_CERT")
        );
        assert_eq!(work.plugins[1].extra["insecure"], json!(true));
        assert_eq!(work.pipelines[0].plugins, ["my-rollout-1", "smoke"]);
        assert!(cm.spec.extra.contains_key("workImagePullSpec"));

        let mut want = original;
        // An empty list is omitted on the way out.
        if let Some(status) = want["status"].as_object_mut() {
            status.remove("conditions");
        }
        assert_eq!(serde_json::to_value(&cm).expect("serializes"), want);
    }
}
