//! The five hooks of `RolloutPluginService` as values, so one code path can
//! carry any of them from the controller to a plugin and back.

use std::sync::Arc;

use bytes::Bytes;
use prost::Message as _;
use rollout_proto::partial::{self, MutateParts, RolloutFields, ValidateView};
use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, MutateManifestWorkResponse, RolloutPluginRequest,
    RolloutStateDetail, ValidateResponse,
};

use http::HeaderMap;
use opentelemetry::trace::SpanContext;
use rollout_policies::layer::PolicyRequest;
use tokio::time::Instant;

use crate::error::DeadlineOwner;
use crate::hub::Hub;
use crate::transport::grpc::{self, FrameError};
use crate::transport::pending::CallBytes;

pub use rollout_proto::HookKind;

/// One call to one plugin, as it travels down the plugin's stack (cloned per
/// attempt).
#[derive(Debug, Clone)]
pub(crate) struct PluginCall {
    pub(crate) request: HookRequest,
    /// Every attempt and every backoff fits before it.
    pub(crate) deadline: Instant,
    /// Whose deadline `deadline` is: the caller's, or the plugin's own
    /// `timeout` (only the latter passing counts against the plugin).
    pub(crate) owner: DeadlineOwner,
    /// Caller headers passed on to the plugin (trace context); each attempt
    /// replaces the `traceparent` with its own span's.
    pub(crate) forward: Arc<HeaderMap>,
    /// The server span of the gateway call: each attempt's span is its child.
    pub(crate) parent: SpanContext,
    /// 1-based attempt number, set by the retry layer.
    pub(crate) attempt: u32,
    /// The calling hub (central mode: the one its certificate names), whose
    /// declaration the plugin's Initialize answer is recorded under.
    pub(crate) hub: Option<Hub>,
    /// The bytes the caller's call holds, which the plugin's answer joins
    /// while it lives (none: a call of the gateway's own).
    pub(crate) held: Option<CallBytes>,
}

impl PolicyRequest for PluginCall {
    fn deadline(&self) -> Instant {
        self.deadline
    }

    fn set_attempt(&mut self, attempt: u32) {
        self.attempt = attempt;
    }

    fn scope(&self) -> Option<&str> {
        self.hub.as_ref().map(Hub::as_str)
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
    pub(crate) message: Bytes,
    pub(crate) rollout: Option<Arc<RolloutFields>>,
}

impl Forwarded {
    /// A `RolloutPluginRequest` (BeginRollout, ProgressRollout).
    pub(crate) fn rollout_request(message: Bytes) -> Result<Forwarded, FrameError> {
        let fields: RolloutFields = grpc::decode_message(message.clone())?;
        Ok(Forwarded {
            message,
            rollout: Some(Arc::new(fields)),
        })
    }

    /// A `ValidateCompletionRequest`.
    pub(crate) fn validate_request(message: Bytes) -> Result<Forwarded, FrameError> {
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
    pub(crate) rollout: Option<Bytes>,
    pub(crate) fields: Option<Arc<RolloutFields>>,
    pub(crate) manifest_work: Bytes,
}

impl MutateStep {
    /// A `MutateManifestWorkRequest`.
    pub(crate) fn decode(message: Bytes) -> Result<MutateStep, FrameError> {
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
    pub(crate) fn kind(&self) -> HookKind {
        match self {
            HookRequest::Initialize(_) => HookKind::Initialize,
            HookRequest::BeginRollout(_) => HookKind::BeginRollout,
            HookRequest::ProgressRollout(_) => HookKind::ProgressRollout,
            HookRequest::ValidateRolloutCompletion(_) => HookKind::ValidateRolloutCompletion,
            HookRequest::MutateManifestWork(_) => HookKind::MutateManifestWork,
        }
    }

    /// The size of the request's message as the caller sent it (the
    /// ManifestWork and rollout of a mutation): what a plugin's answer grows
    /// from.
    pub(crate) fn message_len(&self) -> usize {
        match self {
            HookRequest::Initialize(m) => m.encoded_len(),
            HookRequest::BeginRollout(f)
            | HookRequest::ProgressRollout(f)
            | HookRequest::ValidateRolloutCompletion(f) => f.message.len(),
            HookRequest::MutateManifestWork(m) => {
                m.manifest_work.len() + m.rollout.as_ref().map_or(0, Bytes::len)
            }
        }
    }

    /// The rollout fields of the request, if the hook has them.
    pub(crate) fn rollout(&self) -> Option<&RolloutFields> {
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
    pub(crate) fn payload(&self) -> grpc::Payload {
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

impl HookRequest {
    /// The framed message for a plugin that declared `detail`: as
    /// [`HookRequest::payload`] for `Full`; for `Counts`, without
    /// `rollout_status` (only the top-level fields of the rollout request
    /// are walked, every other byte is kept, the ManifestWork is not copied).
    pub(crate) fn payload_for(&self, detail: RolloutStateDetail) -> grpc::Payload {
        if detail != RolloutStateDetail::Counts {
            return self.payload();
        }
        let counts_only = match self {
            HookRequest::Initialize(_) => return self.payload(),
            HookRequest::BeginRollout(f) | HookRequest::ProgressRollout(f) => {
                partial::without_rollout_status(&f.message).map(grpc::frame)
            }
            HookRequest::ValidateRolloutCompletion(f) => {
                partial::validate_without_rollout_status(&f.message).map(grpc::frame)
            }
            HookRequest::MutateManifestWork(m) => m
                .rollout
                .as_ref()
                .map(partial::without_rollout_status)
                .transpose()
                .map(|rollout| grpc::frame_mutate(rollout, m.manifest_work.clone())),
        };
        counts_only.unwrap_or_else(|error| {
            // Unreachable for a request the gateway decoded (prost walked the
            // same fields); should it happen, the list is a superset of what
            // the plugin asked for, so the caller's bytes still serve it.
            tracing::warn!(hook = %self.kind(), %error, "cannot take rollout_status out; forwarding the request whole");
            self.payload()
        })
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
