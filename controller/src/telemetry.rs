//! OpenTelemetry traces of the controller, consistent with the gateway's
//! (`gateway/src/telemetry/trace.rs`, CONTRACT §4): one span per reconcile of
//! one ManifestWorkReplicaSet, and one client span per hook call, a child of
//! it, whose context travels to the gateway as the W3C `traceparent` header.
//! The gateway makes its server span a child of that one, and each plugin's
//! span a child of the gateway's, so a whole rollout step is one trace.
//!
//! Spans are always made, so the trace context always propagates; they leave
//! the process only when an OTLP endpoint is configured
//! (`OTEL_EXPORTER_OTLP_ENDPOINT`), through the SDK's batch processor.

use std::borrow::Cow;

use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status as SpanStatus, TraceContextExt, TraceFlags,
    Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracer, SdkTracerProvider, Span};
use rollout_proto::v1alpha1::RolloutPluginRequest;
use thiserror::Error;

use crate::hooks::HookKind;

/// The default `service.name`.
pub const DEFAULT_SERVICE_NAME: &str = "rollout-controller";

/// Where spans go, from the standard `OTEL_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingOptions {
    /// The OTLP/gRPC collector (`http://host:4317`); `None`: nothing is
    /// exported.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute.
    pub service_name: String,
}

impl Default for TracingOptions {
    fn default() -> Self {
        TracingOptions {
            otlp_endpoint: None,
            service_name: DEFAULT_SERVICE_NAME.into(),
        }
    }
}

impl TracingOptions {
    /// Reads `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (unset or empty: no export), and
    /// `OTEL_SERVICE_NAME` (default `rollout-controller`);
    /// `OTEL_SDK_DISABLED=true` turns export off. The sampler and batch
    /// settings (`OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`) are read by the SDK.
    pub fn from_env() -> TracingOptions {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(var: impl Fn(&str) -> Option<String>) -> TracingOptions {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        TracingOptions {
            otlp_endpoint: if disabled {
                None
            } else {
                var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                    .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
            },
            service_name: var("OTEL_SERVICE_NAME").unwrap_or_else(|| DEFAULT_SERVICE_NAME.into()),
        }
    }
}

/// The OTLP exporter could not be built (a malformed endpoint).
#[derive(Debug, Error)]
#[error("OTLP exporter for {endpoint}: {message}")]
pub struct TracingError {
    endpoint: String,
    message: String,
}

/// The controller's tracer. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Telemetry {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
    exporting: bool,
}

impl Telemetry {
    /// A tracer exporting as `options` say. Must run inside a Tokio runtime
    /// when exporting (the OTLP client is a tonic channel).
    pub fn new(options: &TracingOptions) -> Result<Telemetry, TracingError> {
        let resource = Resource::builder()
            .with_service_name(options.service_name.clone())
            .build();
        let mut builder = SdkTracerProvider::builder().with_resource(resource);
        if let Some(endpoint) = &options.otlp_endpoint {
            use opentelemetry_otlp::WithExportConfig;
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .build()
                .map_err(|e| TracingError {
                    endpoint: endpoint.clone(),
                    message: e.to_string(),
                })?;
            builder = builder.with_span_processor(BatchSpanProcessor::builder(exporter).build());
        }
        let provider = builder.build();
        Ok(Telemetry {
            tracer: provider.tracer(DEFAULT_SERVICE_NAME),
            provider,
            exporting: options.otlp_endpoint.is_some(),
        })
    }

    /// A tracer that exports nothing (spans are still made, for
    /// propagation).
    pub fn disabled() -> Telemetry {
        let provider = SdkTracerProvider::builder().build();
        Telemetry {
            tracer: provider.tracer(DEFAULT_SERVICE_NAME),
            provider,
            exporting: false,
        }
    }

    /// Whether spans leave the process.
    pub fn is_exporting(&self) -> bool {
        self.exporting
    }

    /// Exports the spans still queued and stops the exporter. Blocks: call
    /// it from a blocking thread when on a runtime.
    pub fn shutdown(&self) {
        if self.exporting
            && let Err(error) = self.provider.shutdown()
        {
            tracing::warn!(%error, "exporting the last spans failed");
        }
    }

    /// Starts the span of one reconcile of the ManifestWorkReplicaSet
    /// `namespace/name`, a new trace; it ends when the returned context (and
    /// every clone) is dropped.
    pub fn reconcile_span(&self, namespace: &str, name: &str) -> Context {
        let span = self
            .tracer
            .span_builder("reconcile ManifestWorkReplicaSet")
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("ocm.mwrs.namespace", namespace.to_owned()),
                KeyValue::new("ocm.mwrs.name", name.to_owned()),
            ])
            .start_with_context(&self.tracer, &Context::new());
        Context::new().with_span(span)
    }

    /// Starts the client span of one hook call to `plugin`, a child of the
    /// span in `parent`.
    pub fn hook_span(
        &self,
        parent: &Context,
        hook: HookKind,
        plugin: &str,
        rollout: Option<&RolloutPluginRequest>,
    ) -> HookSpan {
        let mut attributes = vec![
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", rollout_proto::SERVICE_NAME),
            KeyValue::new("rpc.method", hook.as_str()),
            KeyValue::new("ocm.rollout.plugin", plugin.to_owned()),
        ];
        if let Some(r) = rollout {
            attributes.push(KeyValue::new(
                "ocm.mwrs.namespace",
                r.mwrs_namespace.clone(),
            ));
            attributes.push(KeyValue::new("ocm.mwrs.name", r.mwrs_name.clone()));
            attributes.push(KeyValue::new("ocm.placement", r.placement_name.clone()));
            if !r.cluster_name.is_empty() {
                attributes.push(KeyValue::new("ocm.cluster", r.cluster_name.clone()));
            }
        }
        let span = self
            .tracer
            .span_builder(format!("{}/{}", rollout_proto::SERVICE_NAME, hook.as_str()))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, parent);
        HookSpan { span }
    }
}

/// The span of one hook call.
#[derive(Debug)]
pub struct HookSpan {
    span: Span,
}

impl HookSpan {
    /// The context the gateway receives as its parent.
    pub fn context(&self) -> &SpanContext {
        self.span.span_context()
    }

    /// The `traceparent` header value naming this span.
    pub fn traceparent(&self) -> String {
        traceparent(self.context())
    }

    /// Ends the span with the call's gRPC status.
    pub fn finish(mut self, code: tonic::Code, message: &str) {
        self.span
            .set_attribute(KeyValue::new("rpc.grpc.status_code", code as i64));
        if code != tonic::Code::Ok {
            self.span
                .set_status(SpanStatus::error(Cow::Owned(message.to_owned())));
        }
        self.span.end();
    }
}

/// The W3C `traceparent` value that makes the callee's spans children of
/// `context`: `00-TRACEID-SPANID-FLAGS`, only the sampled flag passed on.
pub fn traceparent(context: &SpanContext) -> String {
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags() & TraceFlags::SAMPLED
    )
}

/// The trace id of the span in `context`, as 32 hex digits (for logs).
pub fn trace_id(context: &Context) -> String {
    format!("{:032x}", context.span().span_context().trace_id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_from_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            TracingOptions::from_lookup(env(&[])),
            TracingOptions::default()
        );
        let set = TracingOptions::from_lookup(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_SERVICE_NAME", "hub-a-controller"),
        ]));
        assert_eq!(set.otlp_endpoint.as_deref(), Some("http://collector:4317"));
        assert_eq!(set.service_name, "hub-a-controller");
        let traces_first = TracingOptions::from_lookup(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:4317"),
        ]));
        assert_eq!(traces_first.otlp_endpoint.as_deref(), Some("http://b:4317"));
        let disabled = TracingOptions::from_lookup(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
            ("OTEL_SDK_DISABLED", "TRUE"),
        ]));
        assert_eq!(disabled.otlp_endpoint, None);
        let blank = TracingOptions::from_lookup(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]));
        assert_eq!(blank.otlp_endpoint, None);
    }

    #[test]
    fn a_hook_span_is_a_child_of_the_reconcile_span() {
        let telemetry = Telemetry::disabled();
        let reconcile = telemetry.reconcile_span("default", "hello");
        let parent = reconcile.span().span_context().clone();
        assert!(parent.is_valid());
        let request = RolloutPluginRequest {
            mwrs_name: "hello".into(),
            mwrs_namespace: "default".into(),
            placement_name: "p".into(),
            cluster_name: "c1".into(),
            ..RolloutPluginRequest::default()
        };
        let hook =
            telemetry.hook_span(&reconcile, HookKind::BeginRollout, "canary", Some(&request));
        assert_eq!(hook.context().trace_id(), parent.trace_id());
        assert_ne!(hook.context().span_id(), parent.span_id());
        let header = hook.traceparent();
        assert_eq!(header.len(), 55, "{header}");
        assert!(
            header.starts_with(&format!("00-{}-", trace_id(&reconcile))),
            "{header}"
        );
        assert!(header.ends_with("-01"), "sampled by default: {header}");
        hook.finish(tonic::Code::Ok, "");
    }
}
