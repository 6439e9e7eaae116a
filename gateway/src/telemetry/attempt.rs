//! The per-attempt telemetry layer of a plugin's stack: a client span per
//! attempt (with the plugin's validation verdict), its context injected as
//! the plugin's `traceparent`, and the attempt, retry and circuit-rejection
//! counters.
//!
//! It sits below the retry layer (so it sees every attempt, numbered) and above
//! the circuit breaker (so an attempt the open circuit refuses is visible too,
//! as a span with a `circuit open` event and no upstream attempt counted).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::HeaderMap;
use pin_project_lite::pin_project;
use tonic::Code;
use tower::{Layer, Service};

use super::metrics::PluginMetrics;
use super::trace::{ClientSpan, Peer, Tracing, traceparent};
use crate::error::CallError;
use crate::hooks::{HookKind, HookResponse, PluginCall};

/// Applies [`AttemptTelemetry`] for one plugin.
#[derive(Debug, Clone)]
pub(crate) struct AttemptTelemetryLayer {
    tracing: Tracing,
    plugin: Peer,
    metrics: Arc<PluginMetrics>,
}

impl AttemptTelemetryLayer {
    pub(crate) fn new(tracing: Tracing, plugin: Peer, metrics: Arc<PluginMetrics>) -> Self {
        AttemptTelemetryLayer {
            tracing,
            plugin,
            metrics,
        }
    }
}

impl<S> Layer<S> for AttemptTelemetryLayer {
    type Service = AttemptTelemetry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AttemptTelemetry {
            inner,
            layer: self.clone(),
        }
    }
}

/// Wraps each attempt in a client span and counts it.
#[derive(Debug, Clone)]
pub(crate) struct AttemptTelemetry<S> {
    inner: S,
    layer: AttemptTelemetryLayer,
}

impl<S> Service<PluginCall> for AttemptTelemetry<S>
where
    S: Service<PluginCall, Response = HookResponse, Error = CallError>,
{
    type Response = HookResponse;
    type Error = CallError;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut call: PluginCall) -> Self::Future {
        let hook = call.request.kind();
        let span = self.layer.tracing.client_span(
            &call.parent,
            &self.layer.plugin,
            hook,
            call.attempt,
            call.request.rollout(),
        );
        // The plugin's trace context: this attempt's span, with the caller's
        // tracestate (already validated) passed through.
        let mut headers = HeaderMap::with_capacity(2);
        headers.insert("traceparent", traceparent(span.context()));
        if let Some(state) = call.forward.get("tracestate") {
            headers.insert("tracestate", state.clone());
        }
        call.forward = Arc::new(headers);
        let attempt = call.attempt;
        ResponseFuture {
            inner: self.inner.call(call),
            span: Some(span),
            plugin: self.layer.plugin.clone(),
            metrics: self.layer.metrics.clone(),
            hook,
            attempt,
        }
    }
}

pin_project! {
    /// The attempt's future; ends the span and counts the attempt when it
    /// resolves. An attempt dropped unfinished (deadline, caller gone) ends
    /// its span with CANCELLED.
    pub(crate) struct ResponseFuture<F> {
        #[pin]
        inner: F,
        span: Option<ClientSpan>,
        plugin: Peer,
        metrics: Arc<PluginMetrics>,
        hook: HookKind,
        attempt: u32,
    }

    impl<F> PinnedDrop for ResponseFuture<F> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(span) = this.span.take() {
                span.finish(this.plugin, *this.hook, Code::Cancelled, "the attempt was abandoned", false);
            }
        }
    }
}

impl<F> Future for ResponseFuture<F>
where
    F: Future<Output = Result<HookResponse, CallError>>,
{
    type Output = Result<HookResponse, CallError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let result = ready!(this.inner.poll(cx));
        let (code, message, rejected) = match &result {
            Ok(_) => (Code::Ok, String::new(), false),
            Err(error) => (
                error.code(),
                crate::error::bounded(&error.to_string()).into_owned(),
                error.is_circuit_open(),
            ),
        };
        if rejected {
            this.metrics.record_rejection(*this.hook, *this.attempt);
        } else {
            this.metrics.record_attempt(*this.hook, *this.attempt, code);
        }
        if let Some(mut span) = this.span.take() {
            if let Ok(HookResponse::ValidateRolloutCompletion(answer)) = &result {
                span.set_validation(this.plugin.name(), answer);
            }
            span.finish(this.plugin, *this.hook, code, &message, rejected);
        }
        Poll::Ready(result)
    }
}
