//! The plugin service's first two layers: [`Observe`] traces and counts
//! each hook call, [`Resolve`] finds what the caller's target name stands
//! for, for the caller's hub, in one registry snapshot.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::HeaderMap;
use rollout_proto::{FAILED_OPEN_METADATA_KEY, PLUGIN_METADATA_KEY};
use tonic::Code;
use tower::Service;
use tracing::Instrument;

use super::{HookCall, PATH_PREFIX, Received, Routed, Traced};
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
                outcome
            }
            .instrument(log_span),
        )
    }
}

/// The code, message and failed-open members of an outcome.
fn summary(outcome: &Result<Answer, CallFailure>) -> (Code, String, Option<String>) {
    match outcome {
        Ok(Answer::Message { trailers, .. }) => (
            Code::Ok,
            String::new(),
            trailers
                .get(FAILED_OPEN_METADATA_KEY)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        ),
        Ok(_) => (Code::Unknown, String::new(), None),
        Err(failure) => (
            failure.code(),
            crate::error::bounded(&failure.error.to_string()).into_owned(),
            (!failure.failed_open.is_empty()).then(|| failure.failed_open.join(",")),
        ),
    }
}

/// See [`Resolve`].
#[derive(Debug, Clone)]
pub(crate) struct ResolveLayer {
    registry: Arc<Registry>,
}

impl ResolveLayer {
    pub(crate) fn new(registry: Arc<Registry>) -> ResolveLayer {
        ResolveLayer { registry }
    }
}

impl<S> tower::Layer<S> for ResolveLayer {
    type Service = Resolve<S>;

    fn layer(&self, inner: S) -> Resolve<S> {
        Resolve {
            inner,
            registry: self.registry.clone(),
        }
    }
}

/// Reads the target name (`ocm-rollout-plugin`) and resolves it for the
/// caller's hub (named by its certificate) in the current snapshot.
#[derive(Debug, Clone)]
pub(crate) struct Resolve<S> {
    inner: S,
    registry: Arc<Registry>,
}

impl<S> Service<HookCall> for Resolve<S>
where
    S: Service<Routed, Response = Traced, Error = std::convert::Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Traced;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<'static, Result<Traced, std::convert::Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), std::convert::Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut call: HookCall) -> Self::Future {
        let resolved = (|| {
            let name = target_name(&call.call.head.headers)?;
            call.span.set_target(&name);
            let hub = call.call.peer.identity.as_deref();
            if let Some(hub) = hub {
                call.span.set_hub(hub);
            }
            let snapshot = self.registry.load().ok_or(GatewayError::NotReady)?;
            let target = snapshot.resolve(hub, &name).map_err(GatewayError::from)?;
            Ok::<_, GatewayError>(target.clone())
        })();
        match resolved {
            Ok(target) => Box::pin(self.inner.call(Routed { call, target })),
            Err(error) => Box::pin(std::future::ready(Ok(Traced {
                outcome: Err(error.into()),
                span: call.span,
                target: None,
            }))),
        }
    }
}

/// The caller's target: exactly one `ocm-rollout-plugin`, a non-empty name
/// of printable ASCII, at most 253 characters.
fn target_name(headers: &HeaderMap) -> Result<String, GatewayError> {
    let mut values = headers.get_all(PLUGIN_METADATA_KEY).iter();
    let value = values.next().ok_or(GatewayError::MissingTarget)?;
    if values.next().is_some() {
        return Err(GatewayError::Header {
            name: PLUGIN_METADATA_KEY,
            why: "is sent more than once: name one plugin or pipeline",
        });
    }
    let name = value
        .to_str()
        .map_err(|_| GatewayError::InvalidTarget("not printable ASCII".into()))?
        .trim();
    if name.is_empty() {
        return Err(GatewayError::MissingTarget);
    }
    if name.len() > 253 {
        return Err(GatewayError::InvalidTarget(
            "longer than 253 characters".into(),
        ));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_one_non_empty_printable_name() {
        let mut h = HeaderMap::new();
        assert!(matches!(target_name(&h), Err(GatewayError::MissingTarget)));
        h.insert(PLUGIN_METADATA_KEY, " p ".parse().expect("value"));
        assert_eq!(target_name(&h).ok().as_deref(), Some("p"));
        h.append(PLUGIN_METADATA_KEY, "q".parse().expect("value"));
        let e = target_name(&h).expect_err("repeated");
        assert!(
            e.to_string()
                .contains("\"ocm-rollout-plugin\" is sent more than once"),
            "{e}"
        );
    }
}
