//! The Observe layer, the plugin service's first: each hook call traced
//! (its server span, a child of the caller's `traceparent`), its log lines
//! carrying that trace, and the call counted by hook, resolved target and
//! code.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use rollout_proto::FAILED_OPEN_METADATA_KEY;
use tonic::Code;
use tower::Service;
use tracing::Instrument;

use super::{Answered, HookCall, PATH_PREFIX, Received, Traced};
use crate::error::{CallFailure, GatewayError};
use crate::hooks::HookKind;
use crate::registry::Registry;
use crate::transport::send::Answer;

/// See [`Observe`].
#[derive(Debug, Clone)]
pub(crate) struct ObserveLayer {
    registry: Arc<Registry>,
}

impl ObserveLayer {
    pub(crate) fn new(registry: Arc<Registry>) -> ObserveLayer {
        ObserveLayer { registry }
    }
}

impl<S> tower::Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            inner,
            registry: self.registry.clone(),
        }
    }
}

/// One server span per hook call (a child of the caller's `traceparent`),
/// log lines that carry its trace, and the call counted by hook, resolved
/// target and code.
#[derive(Debug, Clone)]
pub(crate) struct Observe<S> {
    inner: S,
    registry: Arc<Registry>,
}

impl<S> Service<Received> for Observe<S>
where
    S: Service<HookCall, Response = Traced, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = CallFailure;
    type Future = BoxFuture<'static, Result<Answer, CallFailure>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), CallFailure>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: Received) -> Self::Future {
        let path = call.head.uri.path();
        let Some(hook) = path.strip_prefix(PATH_PREFIX).and_then(HookKind::from_name) else {
            let unknown = GatewayError::UnknownMethod(path.to_string());
            return Box::pin(async move { Err(unknown.into()) });
        };
        let registry = self.registry.clone();
        let traceparent = call.head.headers.get("traceparent").map(|v| v.as_bytes());
        let span = registry.telemetry().tracing.server_span(hook, traceparent);
        let context = span.context();
        // Log lines of this call carry its trace, to go from a log to Jaeger.
        let log_span = tracing::info_span!(
            "call",
            hook = hook.as_str(),
            trace_id = %context.trace_id(),
            span_id = %context.span_id()
        );
        let began = call.began;
        let answering = self.inner.call(HookCall { hook, call, span });
        Box::pin(
            async move {
                let Ok(traced) = answering.await;
                let Traced {
                    outcome,
                    span,
                    target,
                } = traced;
                let (code, message, failed_open) = summary(&outcome);
                // Only resolved names become label values: a caller cannot
                // grow the metrics with names of its own invention.
                registry.telemetry().metrics.record_call(
                    hook,
                    target.as_deref().unwrap_or(""),
                    code,
                    began.elapsed(),
                );
                let failed_open = failed_open.unwrap_or_default();
                let names: Vec<&str> = if failed_open.is_empty() {
                    Vec::new()
                } else {
                    failed_open.split(',').collect()
                };
                span.finish(code, &message, &names);
                outcome.map(|Answered { message, trailers }| Answer::Message { message, trailers })
            }
            .instrument(log_span),
        )
    }
}

/// The code, message and failed-open members of an outcome.
fn summary(outcome: &Result<Answered, CallFailure>) -> (Code, String, Option<String>) {
    match outcome {
        Ok(Answered { trailers, .. }) => (
            Code::Ok,
            String::new(),
            trailers
                .get(FAILED_OPEN_METADATA_KEY)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        ),
        Err(failure) => (
            failure.code(),
            crate::error::bounded(&failure.error.to_string()).into_owned(),
            (!failure.failed_open.is_empty()).then(|| failure.failed_open.join(",")),
        ),
    }
}
