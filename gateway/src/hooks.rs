//! The five hooks of `RolloutPluginService` as values, so one code path can
//! carry any of them from the controller to a plugin and back.

use rollout_proto::v1alpha1::{
    Hook, InitializeRequest, InitializeResponse, MutateManifestWorkRequest,
    MutateManifestWorkResponse, RolloutPluginRequest, ValidateCompletionRequest, ValidateResponse,
};

/// Which hook a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum HookKind {
    Initialize,
    BeginRollout,
    ProgressRollout,
    ValidateRolloutCompletion,
    MutateManifestWork,
}

impl HookKind {
    /// The rpc's name, as in the proto and in span names and metric labels.
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
    pub fn proto_hook(self) -> Option<Hook> {
        match self {
            HookKind::Initialize => None,
            HookKind::BeginRollout => Some(Hook::BeginRollout),
            HookKind::ProgressRollout => Some(Hook::ProgressRollout),
            HookKind::ValidateRolloutCompletion => Some(Hook::ValidateRolloutCompletion),
            HookKind::MutateManifestWork => Some(Hook::MutateManifestWork),
        }
    }
}

/// A request for one hook.
#[derive(Debug, Clone)]
pub enum HookRequest {
    Initialize(InitializeRequest),
    BeginRollout(RolloutPluginRequest),
    ProgressRollout(RolloutPluginRequest),
    ValidateRolloutCompletion(ValidateCompletionRequest),
    MutateManifestWork(MutateManifestWorkRequest),
}

impl HookRequest {
    pub fn kind(&self) -> HookKind {
        match self {
            HookRequest::Initialize(_) => HookKind::Initialize,
            HookRequest::BeginRollout(_) => HookKind::BeginRollout,
            HookRequest::ProgressRollout(_) => HookKind::ProgressRollout,
            HookRequest::ValidateRolloutCompletion(_) => HookKind::ValidateRolloutCompletion,
            HookRequest::MutateManifestWork(_) => HookKind::MutateManifestWork,
        }
    }

    /// The rollout fields of the request, if the hook has them.
    pub fn rollout(&self) -> Option<&RolloutPluginRequest> {
        match self {
            HookRequest::Initialize(_) => None,
            HookRequest::BeginRollout(r) | HookRequest::ProgressRollout(r) => Some(r),
            HookRequest::ValidateRolloutCompletion(r) => r.rollout.as_ref(),
            HookRequest::MutateManifestWork(r) => r.rollout.as_ref(),
        }
    }
}

/// A plugin's answer to one hook.
#[derive(Debug, Clone, PartialEq)]
pub enum HookResponse {
    Initialize(InitializeResponse),
    /// BeginRollout and ProgressRollout answer `google.protobuf.Empty`.
    Empty,
    ValidateRolloutCompletion(ValidateResponse),
    MutateManifestWork(MutateManifestWorkResponse),
}
