//! Routing, the bottom of the plugin service: the caller's request is
//! checked and decoded (only the few fields spans need, never
//! `rollout_status`), the fan-out calls the target's plugins, and their
//! merged answer goes back with its trailers (`grpc-status`,
//! `ocm-rollout-mutated-by`, `ocm-rollout-failed-open`).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderName, HeaderValue};
use rollout_proto::v1alpha1::{InitializeRequest, MutateManifestWorkResponse, RolloutStateDetail};
use rollout_proto::{FAILED_OPEN_METADATA_KEY, MUTATED_BY_METADATA_KEY};
use tonic::Code;
use tower::Service;

use super::{Answered, HookCall, Routed, Traced, caller_checks};
use crate::error::{CallFailure, GatewayError};
use crate::fanout::{CallContext, OFF_THREAD_BYTES};
use crate::hooks::{Forwarded, HookKind, MutateStep};
use crate::manifest;
use crate::telemetry::trace::ServerSpan;
use crate::transport::grpc::{self, Payload};
use crate::transport::pending::CallBytes;

/// See the module doc.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    max_message_bytes: usize,
}

impl Route {
    pub(crate) fn new(max_message_bytes: usize) -> Route {
        Route { max_message_bytes }
    }
}

impl Service<Routed> for Route {
    type Response = Traced;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Traced, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, routed: Routed) -> Self::Future {
        let limit = self.max_message_bytes;
        Box::pin(async move {
            let Routed {
                call:
                    HookCall {
                        hook,
                        call,
                        mut span,
                    },
                target,
            } = routed;
            let name = target.name().to_string();
            let outcome = route(hook, &call, &target, limit, &mut span)
                .await
                .map(|(message, trailers)| Answered { message, trailers });
            Ok(Traced {
                outcome,
                span,
                target: Some(name),
            })
        })
    }
}

/// The trailers of a successful answer.
fn ok_trailers(extra: Vec<(&'static str, String)>) -> HeaderMap {
    let mut trailers = HeaderMap::with_capacity(1 + extra.len());
    grpc::put_status(&mut trailers, Code::Ok, "");
    for (k, v) in extra {
        if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(v)) {
            // A name as a constant: no copy of it per call.
            trailers.insert(HeaderName::from_static(k), v);
        }
    }
    trailers
}

/// The answer's message and trailers, or why the call failed.
async fn route(
    hook: HookKind,
    call: &super::Received,
    target: &crate::registry::Target,
    limit: usize,
    span: &mut ServerSpan,
) -> Result<(Payload, HeaderMap), CallFailure> {
    let headers = &call.head.headers;
    // Each attempt sends its own span as the plugin's traceparent (the
    // attempt layer); what passes through from the caller is its
    // tracestate, only when well-formed and beside a well-formed
    // traceparent: a plugin never receives a caller's arbitrary bytes.
    let mut forward = HeaderMap::new();
    if let Some(ts) = headers
        .get("traceparent")
        .filter(|v| rollout_telemetry::parse_traceparent(v.as_bytes()).is_some())
        .and_then(|_| headers.get("tracestate"))
        .filter(|v| valid_tracestate(v.as_bytes()))
    {
        forward.insert("tracestate", ts.clone());
    }
    let ctx = CallContext {
        target,
        deadline: call.deadline,
        forward: Arc::new(forward),
        parent: span.context(),
        // The hub its certificate names: whatever `hub_name` the caller
        // writes, plugins are loaded, asked and answered for this one.
        hub: call.peer.identity.clone(),
        // The plugins' answers are held with the call's request.
        held: call.head.extensions.get::<CallBytes>().cloned(),
    };
    let data = grpc::message(call.message.clone(), limit)?;
    // Whether a plugin of the target gets the clusters' states (the others
    // get the counts): only then are they checked. What each asked for is
    // kept per hub, so it is read for the caller's.
    let hub = ctx.hub.as_ref();
    let state = target
        .members()
        .iter()
        .any(|p| p.upstream.state_detail(hub) != RolloutStateDetail::Counts);
    match hook {
        HookKind::Initialize => {
            let merged = ctx
                .initialize(grpc::decode_message::<InitializeRequest>(data)?)
                .await?;
            Ok((
                grpc::encode(&merged.value),
                ok_trailers(failed_open(&merged.failed_open)),
            ))
        }
        HookKind::BeginRollout | HookKind::ProgressRollout => {
            caller_checks::rollout_request(&data, state)?;
            let request = Forwarded::rollout_request(data)?;
            if let Some(rollout) = &request.rollout {
                span.set_rollout(rollout);
            }
            let merged = ctx.ack(hook, request).await?;
            Ok((
                grpc::encode(&()),
                ok_trailers(failed_open(&merged.failed_open)),
            ))
        }
        HookKind::ValidateRolloutCompletion => {
            caller_checks::validate_request(&data, state)?;
            let request = Forwarded::validate_request(data)?;
            if let Some(rollout) = &request.rollout {
                span.set_rollout(rollout);
            }
            let (merged, failed_by) = ctx.validate(request).await?;
            span.set_validation(&failed_by, &merged.value);
            Ok((
                grpc::encode(&merged.value),
                ok_trailers(failed_open(&merged.failed_open)),
            ))
        }
        HookKind::MutateManifestWork => mutate(&ctx, data, state, span).await,
    }
}

/// A MutateManifestWork call: the caller's request checked, then the chain.
async fn mutate(
    ctx: &CallContext<'_>,
    data: Bytes,
    state: bool,
    span: &mut ServerSpan,
) -> Result<(Payload, HeaderMap), CallFailure> {
    caller_checks::mutate_request(&data, state)?;
    let request = MutateStep::decode(data)?;
    if let Some(rollout) = &request.fields {
        span.set_rollout(rollout);
    }
    // The caller's ManifestWork must be a JSON object before any plugin sees
    // it: a plugin is not blamed for the caller's bytes. What checking the
    // answers needs of it is read in the same pass.
    let summary = check_work(&request.manifest_work)
        .await
        .map_err(|why| GatewayError::InvalidRequest(format!("the ManifestWork to mutate {why}")))?;
    match ctx.mutate(request, summary).await {
        Ok(m) => {
            let mut trailers = vec![(MUTATED_BY_METADATA_KEY, m.mutated_by.join(","))];
            trailers.extend(failed_open(&m.failed_open));
            // The work goes back without a copy (it is the last field).
            let answer =
                grpc::encode_with_tail(&MutateManifestWorkResponse::default(), 1, m.manifest_work);
            Ok((answer, ok_trailers(trailers)))
        }
        Err((error, failed_open)) => Err(CallFailure { error, failed_open }),
    }
}

/// The `ocm-rollout-failed-open` trailer, when members failed open.
fn failed_open(names: &[String]) -> Vec<(&'static str, String)> {
    if names.is_empty() {
        Vec::new()
    } else {
        vec![(FAILED_OPEN_METADATA_KEY, names.join(","))]
    }
}

/// [`manifest::summarise`], on the blocking pool for large works so a
/// multi-MiB work does not stall every other call.
async fn check_work(work: &Bytes) -> Result<manifest::Summary, WorkError> {
    if work.len() < OFF_THREAD_BYTES {
        return Ok(manifest::summarise(work)?);
    }
    let work = work.clone();
    tokio::task::spawn_blocking(move || manifest::summarise(&work))
        .await
        .map_err(WorkError::Unchecked)?
        .map_err(WorkError::Invalid)
}

/// Why the caller's ManifestWork is refused; reads after "the ManifestWork
/// to mutate".
#[derive(Debug, thiserror::Error)]
enum WorkError {
    #[error("{0}")]
    Invalid(#[from] manifest::NotAnObject),
    /// The check's task did not finish (the runtime is shutting down).
    #[error("could not be checked ({0})")]
    Unchecked(#[source] tokio::task::JoinError),
}

/// A W3C `tracestate`: at most 512 bytes of printable ASCII list members.
pub(crate) fn valid_tracestate(v: &[u8]) -> bool {
    v.len() <= 512 && v.iter().all(|b| (0x20..0x7f).contains(b))
}
