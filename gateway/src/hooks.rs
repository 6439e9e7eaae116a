//! The five hooks of `RolloutPluginService` as values, so one code path can
//! carry any of them from the controller to a plugin and back.

use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, MutateManifestWorkRequest, MutateManifestWorkResponse,
    RolloutPluginRequest, ValidateCompletionRequest, ValidateResponse,
};

pub use rollout_proto::HookKind;

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
