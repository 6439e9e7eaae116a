//! The five hooks of `RolloutPluginService` as values, so one code path can
//! carry any of them from the controller to a plugin and back.

use std::sync::Arc;

use bytes::Bytes;
use prost::Message as _;
use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, MutateManifestWorkResponse, RolloutPluginRequest,
    ValidateResponse,
};
use rollout_proto::view::{MutateParts, RolloutFields, ValidateView};
use tonic::Status;

use http::HeaderMap;
use opentelemetry::trace::SpanContext;
use rollout_policies::layer::PolicyRequest;
use tokio::time::Instant;

use crate::error::DeadlineOwner;
use crate::grpc;

pub use rollout_proto::HookKind;

/// One call to one plugin, as it travels down the plugin's stack (cloned per
/// attempt).
#[derive(Debug, Clone)]
pub struct PluginCall {
    pub request: HookRequest,
    /// Every attempt and every backoff fits before it.
    pub deadline: Instant,
    /// Whose deadline `deadline` is: the caller's, or the plugin's own
    /// `timeout` (only the latter passing counts against the plugin).
    pub owner: DeadlineOwner,
    /// Caller headers passed on to the plugin (trace context); each attempt
    /// replaces the `traceparent` with its own span's.
    pub forward: Arc<HeaderMap>,
    /// The server span of the gateway call: each attempt's span is its child.
    pub parent: SpanContext,
    /// 1-based attempt number, set by the retry layer.
    pub attempt: u32,
}

impl PolicyRequest for PluginCall {
    fn deadline(&self) -> Instant {
        self.deadline
    }

    fn set_attempt(&mut self, attempt: u32) {
        self.attempt = attempt;
    }
}

/// A request for one hook.
///
/// The gateway is a proxy: a rollout request goes to each plugin as the
/// caller encoded it, fields this gateway does not know included. Only the
/// fields spans need are decoded ([`RolloutFields`]); `rollout_status`, which
/// lists every cluster of the placement, is never decoded nor copied, so a
/// call costs the gateway the same for 10 clusters or 10,000.
#[derive(Debug, Clone)]
pub enum HookRequest {
    Initialize(InitializeRequest),
    BeginRollout(Forwarded),
    ProgressRollout(Forwarded),
    ValidateRolloutCompletion(Forwarded),
    MutateManifestWork(MutateStep),
}

/// A request message as the caller encoded it (without the gRPC prefix),
/// sent on unchanged, and its rollout fields.
#[derive(Debug, Clone)]
pub struct Forwarded {
    pub message: Bytes,
    pub rollout: Option<Arc<RolloutFields>>,
}

impl Forwarded {
    /// A `RolloutPluginRequest` (BeginRollout, ProgressRollout).
    pub fn rollout_request(message: Bytes) -> Result<Forwarded, Status> {
        let fields: RolloutFields = grpc::decode_message(message.clone())?;
        Ok(Forwarded {
            message,
            rollout: Some(Arc::new(fields)),
        })
    }

    /// A `ValidateCompletionRequest`.
    pub fn validate_request(message: Bytes) -> Result<Forwarded, Status> {
        let view: ValidateView = grpc::decode_message(message.clone())?;
        Ok(Forwarded {
            message,
            rollout: view.rollout.map(Arc::new),
        })
    }
}

/// One MutateManifestWork call of a chain: the caller's encoded `rollout`,
/// sent on unchanged to every member, and the ManifestWork this member gets.
#[derive(Debug, Clone)]
pub struct MutateStep {
    pub rollout: Option<Bytes>,
    pub fields: Option<Arc<RolloutFields>>,
    pub manifest_work: Bytes,
}

impl MutateStep {
    /// A `MutateManifestWorkRequest`.
    pub fn decode(message: Bytes) -> Result<MutateStep, Status> {
        let parts: MutateParts = grpc::decode_message(message)?;
        let fields = match &parts.rollout {
            Some(r) => Some(Arc::new(grpc::decode_message::<RolloutFields>(r.clone())?)),
            None => None,
        };
        Ok(MutateStep {
            rollout: parts.rollout,
            fields,
            manifest_work: parts.manifest_work,
        })
    }
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
    pub fn rollout(&self) -> Option<&RolloutFields> {
        match self {
            HookRequest::Initialize(_) => None,
            HookRequest::BeginRollout(f)
            | HookRequest::ProgressRollout(f)
            | HookRequest::ValidateRolloutCompletion(f) => f.rollout.as_deref(),
            HookRequest::MutateManifestWork(m) => m.fields.as_deref(),
        }
    }

    /// A BeginRollout request from a message (the gateway's tests and tools).
    pub fn begin_rollout(request: &RolloutPluginRequest) -> HookRequest {
        HookRequest::BeginRollout(Forwarded {
            message: Bytes::from(request.encode_to_vec()),
            rollout: Some(Arc::new(RolloutFields::from(request))),
        })
    }

    /// The framed message for the plugin; nothing large is copied.
    pub fn payload(&self) -> grpc::Payload {
        match self {
            HookRequest::Initialize(m) => grpc::encode(m),
            HookRequest::BeginRollout(f)
            | HookRequest::ProgressRollout(f)
            | HookRequest::ValidateRolloutCompletion(f) => grpc::frame(f.message.clone()),
            HookRequest::MutateManifestWork(m) => {
                grpc::frame_mutate(m.rollout.clone(), m.manifest_work.clone())
            }
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
