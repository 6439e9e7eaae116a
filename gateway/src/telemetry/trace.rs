//! OpenTelemetry spans (CONTRACT §4): one server span per call from the
//! controller, a child of the caller's W3C `traceparent`; one client span per
//! attempt at a plugin, a child of the server span, whose context the plugin
//! receives as its `traceparent`.
//!
//! Spans are always made, so every plugin sees the gateway's hop in its trace
//! context; they leave the process only when an OTLP endpoint is configured,
//! through the SDK's batch processor: a bounded queue drained by its own
//! thread, which drops spans when full rather than block a hook. The OTLP
//! client's connection runs on a runtime of its own, on its own thread, so
//! exporting never takes the gateway's worker thread from the calls.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderValue;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status as SpanStatus, TraceContextExt, TraceFlags,
    TraceId, TraceState, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, Span,
};
use rollout_proto::v1alpha1::RolloutPluginRequest;
use tonic::Code;

use crate::hooks::HookKind;

/// Where spans go, from the standard `OTEL_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingOptions {
    /// The OTLP/gRPC collector (`http://host:4317`); `None`: nothing is exported.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// The batch processor's export delay (`OTEL_BSP_SCHEDULE_DELAY` when unset here).
    pub schedule_delay: Option<Duration>,
}

impl Default for TracingOptions {
    fn default() -> Self {
        TracingOptions {
            otlp_endpoint: None,
            service_name: "rollout-gateway".into(),
            schedule_delay: None,
        }
    }
}

impl TracingOptions {
    /// Reads `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (unset or empty: no export), and
    /// `OTEL_SERVICE_NAME` (default `rollout-gateway`). `OTEL_SDK_DISABLED=true`
    /// turns export off. The sampler (`OTEL_TRACES_SAMPLER`, `_ARG`) and the
    /// batch settings (`OTEL_BSP_*`) are read by the SDK itself.
    pub fn from_env() -> TracingOptions {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        TracingOptions {
            otlp_endpoint: if disabled {
                None
            } else {
                var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                    .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
            },
            service_name: var("OTEL_SERVICE_NAME").unwrap_or_else(|| "rollout-gateway".into()),
            schedule_delay: None,
        }
    }
}

/// The exporter could not be built (a malformed endpoint).
#[derive(Debug, thiserror::Error)]
#[error("OTLP exporter for {endpoint}: {message}")]
pub struct TracingError {
    endpoint: String,
    message: String,
}

/// The gateway's tracer. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Tracing {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
    /// The exporter's runtime, while exporting.
    export: Option<Arc<ExportRuntime>>,
}

/// A current-thread runtime on a thread of its own that drives the OTLP
/// client's connection, until stopped.
#[derive(Debug)]
struct ExportRuntime {
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl ExportRuntime {
    /// Builds the runtime, makes `build` run inside it (so the client's
    /// background tasks are spawned there), and starts its thread.
    fn start<T>(build: impl FnOnce() -> T) -> std::io::Result<(ExportRuntime, T)> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let built = {
            let _entered = runtime.enter();
            build()
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok((
            ExportRuntime {
                stop: Mutex::new(Some(stop)),
                thread: Mutex::new(Some(thread)),
            },
            built,
        ))
    }

    fn stop(&self) {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

impl Tracing {
    /// A tracer exporting as `options` say.
    pub fn new(options: &TracingOptions) -> Result<Tracing, TracingError> {
        let resource = Resource::builder()
            .with_service_name(options.service_name.clone())
            .build();
        let mut builder = SdkTracerProvider::builder().with_resource(resource);
        let mut export = None;
        if let Some(endpoint) = &options.otlp_endpoint {
            use opentelemetry_otlp::WithExportConfig;
            let failed = |message: String| TracingError {
                endpoint: endpoint.clone(),
                message,
            };
            let (runtime, exporter) = ExportRuntime::start(|| {
                opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(endpoint.clone())
                    .build()
            })
            .map_err(|e| failed(format!("cannot start its thread: {e}")))?;
            let exporter = exporter.map_err(|e| failed(e.to_string()))?;
            export = Some(Arc::new(runtime));
            let mut batch = BatchConfigBuilder::default();
            if let Some(delay) = options.schedule_delay {
                batch = batch.with_scheduled_delay(delay);
            }
            builder = builder.with_span_processor(
                BatchSpanProcessor::builder(exporter)
                    .with_batch_config(batch.build())
                    .build(),
            );
        }
        let provider = builder.build();
        Ok(Tracing {
            tracer: provider.tracer("rollout-gateway"),
            provider,
            export,
        })
    }

    /// A tracer that exports nothing (spans are still made, for propagation).
    pub fn disabled() -> Tracing {
        let provider = SdkTracerProvider::builder().build();
        Tracing {
            tracer: provider.tracer("rollout-gateway"),
            provider,
            export: None,
        }
    }

    /// Whether spans leave the process.
    pub fn is_exporting(&self) -> bool {
        self.export.is_some()
    }

    /// Exports the spans still queued and stops the exporter. Blocks: call it
    /// from a blocking thread (`spawn_blocking`) when on a runtime.
    pub fn shutdown(&self) {
        if let Some(export) = &self.export {
            if let Err(error) = self.provider.shutdown() {
                tracing::warn!(%error, "exporting the last spans failed");
            }
            export.stop();
        }
    }

    /// Starts the server span of one call, as a child of the caller's
    /// `traceparent` (already validated as W3C) or as a new trace.
    pub fn server_span(&self, hook: HookKind, traceparent: Option<&[u8]>) -> ServerSpan {
        let parent = match traceparent.and_then(parse_traceparent) {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::new(),
        };
        let span = self
            .tracer
            .span_builder(server_span_name(hook))
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", rollout_proto::SERVICE_NAME),
                KeyValue::new("rpc.method", hook.as_str()),
            ])
            .start_with_context(&self.tracer, &parent);
        ServerSpan { span }
    }

    /// Starts the client span of one attempt at `plugin`, a child of `parent`
    /// (the server span's context).
    pub fn client_span(
        &self,
        parent: &SpanContext,
        plugin: &str,
        hook: HookKind,
        attempt: u32,
        rollout: Option<&RolloutPluginRequest>,
    ) -> ClientSpan {
        let parent = if parent.is_valid() {
            Context::new().with_remote_span_context(parent.clone())
        } else {
            Context::new()
        };
        let mut attributes = Vec::with_capacity(9);
        attributes.extend([
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", rollout_proto::SERVICE_NAME),
            KeyValue::new("rpc.method", hook.as_str()),
            KeyValue::new("ocm.rollout.plugin", plugin.to_string()),
            KeyValue::new("ocm.rollout.attempt", i64::from(attempt)),
        ]);
        if let Some(r) = rollout {
            rollout_attributes(&mut attributes, r);
        }
        let mut span = self
            .tracer
            .span_builder(format!("plugin {plugin} {}", hook.as_str()))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        if attempt > 1 {
            span.add_event(
                "retry",
                vec![KeyValue::new("ocm.rollout.attempt", i64::from(attempt))],
            );
        }
        ClientSpan { span }
    }
}

/// `ocm.mwrs.namespace`, `ocm.mwrs.name`, `ocm.placement` and, when set,
/// `ocm.cluster`.
fn rollout_attributes(attributes: &mut Vec<KeyValue>, r: &RolloutPluginRequest) {
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

fn server_span_name(hook: HookKind) -> &'static str {
    match hook {
        HookKind::Initialize => "ocm.rolloutplugin.v1alpha1.RolloutPluginService/Initialize",
        HookKind::BeginRollout => "ocm.rolloutplugin.v1alpha1.RolloutPluginService/BeginRollout",
        HookKind::ProgressRollout => {
            "ocm.rolloutplugin.v1alpha1.RolloutPluginService/ProgressRollout"
        }
        HookKind::ValidateRolloutCompletion => {
            "ocm.rolloutplugin.v1alpha1.RolloutPluginService/ValidateRolloutCompletion"
        }
        HookKind::MutateManifestWork => {
            "ocm.rolloutplugin.v1alpha1.RolloutPluginService/MutateManifestWork"
        }
    }
}

/// Reads a `traceparent` that `service::valid_traceparent` accepted.
pub fn parse_traceparent(v: &[u8]) -> Option<SpanContext> {
    let text = std::str::from_utf8(v).ok()?;
    let trace_id = TraceId::from_hex(text.get(3..35)?).ok()?;
    let span_id = SpanId::from_hex(text.get(36..52)?).ok()?;
    let flags = u8::from_str_radix(text.get(53..55)?, 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        TraceState::NONE,
    );
    context.is_valid().then_some(context)
}

/// The `traceparent` header that makes a plugin's spans children of `context`.
pub fn traceparent(context: &SpanContext) -> HeaderValue {
    let text = format!(
        "00-{:032x}-{:016x}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags() & TraceFlags::SAMPLED
    );
    // Lowercase hex and dashes only: always a valid header value.
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn set_outcome(span: &mut Span, code: Code, message: &str) {
    span.set_attribute(KeyValue::new("rpc.grpc.status_code", code as i64));
    if code != Code::Ok {
        span.set_status(SpanStatus::error(Cow::Owned(message.to_string())));
    }
}

/// The span of one call from the controller; ends when dropped if
/// [`ServerSpan::finish`] was not called (the caller went away).
#[derive(Debug)]
pub struct ServerSpan {
    span: Span,
}

impl ServerSpan {
    /// The context plugins' client spans descend from.
    pub fn context(&self) -> SpanContext {
        self.span.span_context().clone()
    }

    /// Adds `ocm.rollout.plugin`: the target the caller named.
    pub fn set_target(&mut self, target: &str) {
        self.span
            .set_attribute(KeyValue::new("ocm.rollout.plugin", target.to_string()));
    }

    /// Adds the hub of a central-mode caller.
    pub fn set_hub(&mut self, hub: &str) {
        self.span
            .set_attribute(KeyValue::new("ocm.hub", hub.to_string()));
    }

    /// Adds the rollout attributes of the request.
    pub fn set_rollout(&mut self, rollout: &RolloutPluginRequest) {
        let mut attributes = Vec::with_capacity(4);
        rollout_attributes(&mut attributes, rollout);
        self.span.set_attributes(attributes);
    }

    /// Ends the span with the call's answer; each member that failed open is
    /// an event and is listed in `ocm.rollout.failed_open`.
    pub fn finish(mut self, code: Code, message: &str, failed_open: &[&str]) {
        if !failed_open.is_empty() {
            for name in failed_open {
                self.span.add_event(
                    "fail-open",
                    vec![KeyValue::new("ocm.rollout.plugin", name.to_string())],
                );
            }
            self.span.set_attribute(KeyValue::new(
                "ocm.rollout.failed_open",
                failed_open.join(","),
            ));
        }
        set_outcome(&mut self.span, code, message);
        self.span.end();
    }
}

/// The span of one attempt at a plugin.
#[derive(Debug)]
pub struct ClientSpan {
    span: Span,
}

impl ClientSpan {
    /// The context the plugin receives as its `traceparent`.
    pub fn context(&self) -> &SpanContext {
        self.span.span_context()
    }

    /// Ends the span with the attempt's status. An attempt refused by the
    /// open circuit (nothing was sent) carries a `circuit open` event.
    pub fn finish(mut self, code: Code, message: &str, circuit_open: bool) {
        if circuit_open {
            self.span.add_event("circuit open", Vec::new());
        }
        set_outcome(&mut self.span, code, message);
        self.span.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_round_trips() {
        let header = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let context = parse_traceparent(header).expect("valid");
        assert!(context.is_remote() && context.is_sampled());
        assert_eq!(traceparent(&context).as_bytes(), header);
        // Unknown flag bits are not passed on.
        let context = parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-fe")
            .expect("valid");
        assert!(!context.is_sampled());
        assert_eq!(
            traceparent(&context).as_bytes(),
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
        );
    }

    #[test]
    fn a_client_span_descends_from_the_server_span() {
        let tracing = Tracing::disabled();
        let server = tracing.server_span(
            HookKind::BeginRollout,
            Some(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        let parent = server.context();
        assert_eq!(
            format!("{:032x}", parent.trace_id()),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        let client = tracing.client_span(&parent, "p", HookKind::BeginRollout, 1, None);
        assert_eq!(client.context().trace_id(), parent.trace_id());
        assert_ne!(client.context().span_id(), parent.span_id());
        client.finish(Code::Ok, "", false);
        server.finish(Code::Ok, "", &[]);
    }
}
