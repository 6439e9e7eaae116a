//! OpenTelemetry traces of the controller, consistent with the gateway's
//! (`gateway/src/telemetry/trace.rs`, docs/plugin-api.md §4): one span per reconcile of
//! one ManifestWorkReplicaSet, and one client span per hook call, a child of
//! it, whose context travels to the gateway as the W3C `traceparent` header.
//! A hook span carries a validation's verdict and the plugins that failed
//! open (`rollout_telemetry::outcome`); the reconcile span says when an abort
//! starts (`orchestrate::trace`).
//! The gateway makes its server span a child of that one, and each plugin's
//! span a child of the gateway's, so a whole rollout step is one trace.
//!
//! Spans are always made, so the trace context always propagates; they leave
//! the process only when an OTLP endpoint is configured
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`), through the SDK's batch processor.

use opentelemetry::trace::{Span as _, SpanContext, SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::Span;
use rollout_proto::partial::RolloutFields;
use rollout_proto::v1alpha1::ValidateResponse;
use rollout_telemetry::{Tracer, finish_span, outcome, rollout_attributes, semconv};

pub use rollout_telemetry::{TracingError, TracingOptions};

use rollout_proto::HookKind;

/// The default `service.name`.
pub const DEFAULT_SERVICE_NAME: &str = "rollout-controller";

/// The gateway's default `service.name`: the hook spans' `peer.service`.
const GATEWAY_SERVICE_NAME: &str = "rollout-gateway";

/// The controller's tracer. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Tracing {
    tracer: Tracer,
}

impl Tracing {
    /// A tracer exporting as `options` say ([`TracingOptions::from_env`]
    /// with [`DEFAULT_SERVICE_NAME`] in the binary).
    pub fn new(options: &TracingOptions) -> Result<Tracing, TracingError> {
        Ok(Tracing {
            tracer: Tracer::new(DEFAULT_SERVICE_NAME, options)?,
        })
    }

    /// A tracer that exports nothing (spans are still made, for
    /// propagation).
    pub fn disabled() -> Tracing {
        Tracing {
            tracer: Tracer::disabled(DEFAULT_SERVICE_NAME),
        }
    }

    /// Whether spans leave the process.
    pub fn is_exporting(&self) -> bool {
        self.tracer.is_exporting()
    }

    /// Exports the spans still queued and stops the exporter. Blocks: call
    /// it from a blocking thread when on a runtime.
    pub fn shutdown(&self) {
        self.tracer.shutdown();
    }

    /// Starts the span of one reconcile of the ManifestWorkReplicaSet
    /// `namespace/name`, a new trace; it ends when the returned context (and
    /// every clone) is dropped.
    pub fn reconcile_span(&self, namespace: &str, name: &str) -> Context {
        let span = self
            .tracer
            .sdk()
            .span_builder("reconcile ManifestWorkReplicaSet")
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("ocm.mwrs.namespace", namespace.to_owned()),
                KeyValue::new("ocm.mwrs.name", name.to_owned()),
            ])
            .start_with_context(self.tracer.sdk(), &Context::new());
        Context::new().with_span(span)
    }

    /// Starts the client span of one hook call to `plugin` through the
    /// gateway at `gateway` (its URL), a child of the span in `parent`.
    pub(crate) fn hook_span(
        &self,
        parent: &Context,
        hook: HookKind,
        plugin: &str,
        gateway: &str,
        rollout: Option<&RolloutFields>,
    ) -> HookSpan {
        let mut attributes = vec![
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", rollout_proto::SERVICE_NAME),
            KeyValue::new("rpc.method", hook.as_str()),
            KeyValue::new("ocm.rollout.plugin", plugin.to_owned()),
        ];
        semconv::peer_attributes(&mut attributes, GATEWAY_SERVICE_NAME, gateway);
        if let Some(r) = rollout {
            rollout_attributes(&mut attributes, r);
        }
        let span = self
            .tracer
            .sdk()
            .span_builder(format!("{}/{}", rollout_proto::SERVICE_NAME, hook.as_str()))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(self.tracer.sdk(), parent);
        HookSpan { span }
    }
}

/// The span of one hook call.
#[derive(Debug)]
pub(crate) struct HookSpan {
    span: Span,
}

impl HookSpan {
    /// The context the gateway receives as its parent.
    pub(crate) fn context(&self) -> &SpanContext {
        self.span.span_context()
    }

    /// The `traceparent` header value naming this span.
    pub(crate) fn traceparent(&self) -> String {
        rollout_telemetry::traceparent(self.context())
    }

    /// Records a validation answer from `plugin` (the target the call
    /// named): `ocm.rollout.validation.result`, and when it is FAILED an
    /// error status naming the target and the answer's message.
    pub(crate) fn set_validation(&mut self, plugin: &str, answer: &ValidateResponse) {
        outcome::record_validation(&mut self.span, &[plugin], answer);
    }

    /// Records the plugins that failed open (the gateway's
    /// `ocm-rollout-failed-open` trailer) as `ocm.rollout.failed_open`;
    /// nothing when there is none.
    pub(crate) fn set_failed_open(&mut self, plugins: &[String]) {
        let names: Vec<&str> = plugins.iter().map(String::as_str).collect();
        outcome::record_failed_open(&mut self.span, &names);
    }

    /// Ends the span with the call's gRPC status (an error names the code).
    pub(crate) fn finish(mut self, code: tonic::Code, message: &str) {
        finish_span(&mut self.span, code, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_span_is_a_child_of_the_reconcile_span() {
        let telemetry = Tracing::disabled();
        let reconcile = telemetry.reconcile_span("default", "hello");
        let parent = reconcile.span().span_context().clone();
        assert!(parent.is_valid());
        let request = RolloutFields {
            mwrs_name: "hello".into(),
            mwrs_namespace: "default".into(),
            placement_name: "p".into(),
            cluster_name: "c1".into(),
            ..RolloutFields::default()
        };
        let hook = telemetry.hook_span(
            &reconcile,
            HookKind::BeginRollout,
            "canary",
            "http://127.0.0.1:1",
            Some(&request),
        );
        assert_eq!(hook.context().trace_id(), parent.trace_id());
        assert_ne!(hook.context().span_id(), parent.span_id());
        let header = hook.traceparent();
        assert_eq!(header.len(), 55, "{header}");
        assert!(
            header.starts_with(&format!("00-{:032x}-", parent.trace_id())),
            "{header}"
        );
        assert!(header.ends_with("-01"), "sampled by default: {header}");
        hook.finish(tonic::Code::Ok, "");
    }
}
