//! The OCM rollout plugin API, `ocm.rolloutplugin.v1alpha1.RolloutPluginService`,
//! generated from `ocm/rolloutplugin/v1alpha1/rollout_plugin.proto` with protox.
//!
//! [`v1alpha1`] holds the messages, the client
//! (`rollout_plugin_service_client::RolloutPluginServiceClient`) and the server
//! trait (`rollout_plugin_service_server::RolloutPluginService`). The constants
//! below are the metadata keys of the gateway contract.

/// Generated code of package `ocm.rolloutplugin.v1alpha1`.
#[allow(clippy::all, missing_docs)]
pub mod v1alpha1 {
    tonic::include_proto!("ocm.rolloutplugin.v1alpha1");
}

/// Request metadata key naming the plugin or pipeline a gateway call targets.
pub const PLUGIN_METADATA_KEY: &str = "ocm-rollout-plugin";
/// Response metadata (trailer) on `MutateManifestWork`: the members that changed the object, in order.
pub const MUTATED_BY_METADATA_KEY: &str = "ocm-rollout-mutated-by";
/// Response metadata (trailer): the members that failed and were skipped under `failurePolicy: Ignore`.
pub const FAILED_OPEN_METADATA_KEY: &str = "ocm-rollout-failed-open";

/// The fully qualified gRPC service name.
pub const SERVICE_NAME: &str = "ocm.rolloutplugin.v1alpha1.RolloutPluginService";

/// The source of the plugin API, for tools that want to show or ship it.
pub const PROTO_SOURCE: &str = include_str!("../ocm/rolloutplugin/v1alpha1/rollout_plugin.proto");

impl v1alpha1::Hook {
    /// Every hook a plugin can implement (all but `HOOK_UNSPECIFIED`).
    pub const ALL: [v1alpha1::Hook; 4] = [
        v1alpha1::Hook::BeginRollout,
        v1alpha1::Hook::ProgressRollout,
        v1alpha1::Hook::ValidateRolloutCompletion,
        v1alpha1::Hook::MutateManifestWork,
    ];
}
