//! The OCM rollout plugin API, `ocm.rolloutplugin.v1alpha1.RolloutPluginService`,
//! generated from `ocm/rolloutplugin/v1alpha1/rollout_plugin.proto` with protox.
//!
//! [`v1alpha1`] holds the messages, the client
//! (`rollout_plugin_service_client::RolloutPluginServiceClient`) and the server
//! trait (`rollout_plugin_service_server::RolloutPluginService`). The constants
//! below are the metadata keys of the gateway contract.

// A `pub` item must be reachable from the crate root; anything else is
// `pub(crate)`.
#![warn(unreachable_pub)]

/// Generated code of package `ocm.rolloutplugin.v1alpha1`.
#[allow(clippy::all, clippy::too_many_lines, missing_docs)]
pub mod v1alpha1 {
    tonic::include_proto!("ocm.rolloutplugin.v1alpha1");
}

pub mod declaration;
pub mod duration;
pub mod verdict;
pub mod view;

/// Request metadata key naming the plugin or pipeline a gateway call targets.
pub const PLUGIN_METADATA_KEY: &str = "ocm-rollout-plugin";
/// Response metadata (trailer) on `MutateManifestWork`: the members that changed the object, in order.
pub const MUTATED_BY_METADATA_KEY: &str = "ocm-rollout-mutated-by";
/// Response metadata (trailer): the members that failed and were skipped under `failurePolicy: Ignore`.
pub const FAILED_OPEN_METADATA_KEY: &str = "ocm-rollout-failed-open";

/// The fully qualified gRPC service name.
pub const SERVICE_NAME: &str = "ocm.rolloutplugin.v1alpha1.RolloutPluginService";

/// The plugin API's file descriptors (with the well-known types it
/// imports), encoded as a `google.protobuf.FileDescriptorSet`: what a gRPC
/// reflection service serves.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/rollout_plugin_fds.bin"));

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

    /// The rpc's name (`BeginRollout`, …), from [`HookKind::as_str`];
    /// `Unspecified` for `HOOK_UNSPECIFIED`.
    pub fn name(self) -> &'static str {
        HookKind::of_hook(self).map_or("Unspecified", HookKind::as_str)
    }
}

/// One of the plugin API's calls (Initialize included) as a value, for code
/// that carries any of them (the gateway's routing, the controller's client,
/// metric labels and span names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[repr(usize)]
pub enum HookKind {
    /// `Initialize`.
    Initialize,
    /// `BeginRollout`.
    BeginRollout,
    /// `ProgressRollout`.
    ProgressRollout,
    /// `ValidateRolloutCompletion`.
    ValidateRolloutCompletion,
    /// `MutateManifestWork`.
    MutateManifestWork,
}

impl HookKind {
    /// Every call, in the proto's order.
    pub const ALL: [HookKind; 5] = [
        HookKind::Initialize,
        HookKind::BeginRollout,
        HookKind::ProgressRollout,
        HookKind::ValidateRolloutCompletion,
        HookKind::MutateManifestWork,
    ];

    /// The call named `name` (the rpc's name, as [`HookKind::as_str`] gives
    /// it), if there is one: the one table of hook names is `as_str`.
    pub fn from_name(name: &str) -> Option<HookKind> {
        HookKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The call of a `Hook` a plugin lists; `None` for `HOOK_UNSPECIFIED`.
    pub fn of_hook(hook: v1alpha1::Hook) -> Option<HookKind> {
        HookKind::ALL
            .into_iter()
            .find(|k| k.proto_hook() == Some(hook))
    }

    /// The rpc's name, as in the proto, span names and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::Initialize => "Initialize",
            HookKind::BeginRollout => "BeginRollout",
            HookKind::ProgressRollout => "ProgressRollout",
            HookKind::ValidateRolloutCompletion => "ValidateRolloutCompletion",
            HookKind::MutateManifestWork => "MutateManifestWork",
        }
    }

    /// The `Hook` a plugin lists in `InitializeResponse.hooks`; `None` for
    /// Initialize, which every plugin implements.
    pub fn proto_hook(self) -> Option<v1alpha1::Hook> {
        match self {
            HookKind::Initialize => None,
            HookKind::BeginRollout => Some(v1alpha1::Hook::BeginRollout),
            HookKind::ProgressRollout => Some(v1alpha1::Hook::ProgressRollout),
            HookKind::ValidateRolloutCompletion => Some(v1alpha1::Hook::ValidateRolloutCompletion),
            HookKind::MutateManifestWork => Some(v1alpha1::Hook::MutateManifestWork),
        }
    }
}

impl std::fmt::Display for HookKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A gRPC code's canonical upper-case name (`OK`, `UNAVAILABLE`, ...), as
/// the gRPC status code documentation spells it: metric labels, messages.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_names_round_trip() {
        for kind in HookKind::ALL {
            assert_eq!(HookKind::from_name(kind.as_str()), Some(kind));
            if let Some(hook) = kind.proto_hook() {
                assert_eq!(HookKind::of_hook(hook), Some(kind));
                assert_eq!(hook.name(), kind.as_str());
            }
        }
        assert_eq!(HookKind::from_name("beginRollout"), None);
        assert_eq!(HookKind::of_hook(v1alpha1::Hook::Unspecified), None);
        assert_eq!(v1alpha1::Hook::Unspecified.name(), "Unspecified");
    }

    #[test]
    fn names_are_the_protos() {
        assert_eq!(
            HookKind::ValidateRolloutCompletion.to_string(),
            "ValidateRolloutCompletion"
        );
        assert_eq!(HookKind::Initialize.proto_hook(), None);
        assert_eq!(
            code_name(tonic::Code::DeadlineExceeded),
            "DEADLINE_EXCEEDED"
        );
        assert_eq!(code_name(tonic::Code::Unauthenticated), "UNAUTHENTICATED");
    }
}
