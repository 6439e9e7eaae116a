//! OpenTelemetry spans (docs/plugin-api.md §4): one server span per call from the
//! controller, a child of the caller's W3C `traceparent`; one client span per
//! attempt at a plugin, a child of the server span, whose context the plugin
//! receives as its `traceparent`.
//!
//! Spans are always made, so every plugin sees the gateway's hop in its trace
//! context; how they are exported (never blocking a hook) is
//! `rollout_telemetry`'s.

use std::sync::Arc;

use http::HeaderValue;
use opentelemetry::trace::{Span as _, SpanContext, SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::Span;
use rollout_proto::partial::RolloutFields;
use rollout_proto::v1alpha1::ValidateResponse;
use rollout_telemetry::outcome::{self, FAILURE_IGNORED, FAILURE_POLICY, VALIDATION_FAILED_BY};
use rollout_telemetry::{
    Tracer, TracingError, TracingOptions, finish_server_span, finish_span, parse_traceparent,
    rollout_attributes, semconv,
};
use tonic::Code;

use crate::hooks::HookKind;
use crate::hub::Hub;

/// The gateway's tracer. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Tracing {
    tracer: Tracer,
}

impl Tracing {
    /// A tracer exporting as `options` say.
    pub(crate) fn new(options: &TracingOptions) -> Result<Tracing, TracingError> {
        Ok(Tracing {
            tracer: Tracer::new("rollout-gateway", options)?,
        })
    }

    /// A tracer that exports nothing (spans are still made, for propagation).
    pub(crate) fn disabled() -> Tracing {
        Tracing {
            tracer: Tracer::disabled("rollout-gateway"),
        }
    }

    /// Exports the spans still queued and stops the exporter. Blocks: call it
    /// from a blocking thread (`spawn_blocking`) when on a runtime.
    pub(crate) fn shutdown(&self) {
        self.tracer.shutdown();
    }

    /// Starts the server span of one call, as a child of the caller's
    /// `traceparent` when it is well-formed W3C, or as a new trace.
    pub(crate) fn server_span(&self, hook: HookKind, traceparent: Option<&[u8]>) -> ServerSpan {
        let parent = match traceparent.and_then(parse_traceparent) {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::new(),
        };
        let span = self
            .tracer
            .sdk()
            .span_builder(server_span_name(hook))
            .with_kind(SpanKind::Server)
            .with_attributes(server_attributes(hook))
            .start_with_context(self.tracer.sdk(), &parent);
        ServerSpan { span }
    }

    /// Starts the client span of one attempt at `plugin.name`, a child of
    /// `parent` (the server span's context).
    pub(crate) fn client_span(
        &self,
        parent: &SpanContext,
        plugin: &Peer,
        hook: HookKind,
        attempt: u32,
        rollout: Option<&RolloutFields>,
    ) -> ClientSpan {
        let parent = if parent.is_valid() {
            Context::new().with_remote_span_context(parent.clone())
        } else {
            Context::new()
        };
        // Room for the status code set at the end as well: the span's
        // attributes are this vector, never grown on the hot path.
        let mut attributes = Vec::with_capacity(CLIENT_ATTRIBUTES);
        attributes.extend([
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", rollout_proto::SERVICE_NAME),
            KeyValue::new("rpc.method", hook.as_str()),
            // Shared with the layer: reference counts, not copies.
            KeyValue::new("ocm.rollout.plugin", Arc::clone(&plugin.name)),
            KeyValue::new("ocm.rollout.attempt", i64::from(attempt)),
            KeyValue::new(FAILURE_POLICY, plugin.failure_policy(hook)),
            KeyValue::new(semconv::PEER_SERVICE, Arc::clone(&plugin.name)),
            KeyValue::new(semconv::SERVER_ADDRESS, Arc::clone(&plugin.host)),
            KeyValue::new(semconv::SERVER_PORT, i64::from(plugin.port)),
        ]);
        if let Some(r) = rollout {
            rollout_attributes(&mut attributes, r);
        }
        let mut name = String::with_capacity(8 + plugin.name.len() + hook.as_str().len());
        name.push_str("plugin ");
        name.push_str(&plugin.name);
        name.push(' ');
        name.push_str(hook.as_str());
        let mut span = self
            .tracer
            .sdk()
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(self.tracer.sdk(), &parent);
        if attempt > 1 {
            span.add_event(
                "retry",
                vec![KeyValue::new("ocm.rollout.attempt", i64::from(attempt))],
            );
        }
        ClientSpan { span }
    }
}

/// The most attributes a server span carries: the three of
/// [`server_attributes`], `ocm.rollout.plugin`, `ocm.hub`, the four rollout
/// attributes, `rpc.grpc.status_code`, `ocm.rollout.failed_open`,
/// `ocm.rollout.validation.result` and `ocm.rollout.validation.failed_by`.
const SERVER_ATTRIBUTES: usize = 13;

/// The most attributes a client span carries: nine set at its start, the
/// four rollout attributes, `rpc.grpc.status_code`,
/// `ocm.rollout.validation.result` and `ocm.rollout.failure_ignored`.
const CLIENT_ATTRIBUTES: usize = 16;

/// The plugin an attempt's span names: its name (`ocm.rollout.plugin`,
/// `peer.service`), its endpoint (`server.address`, `server.port`) and its
/// `failurePolicy` for each hook (`ocm.rollout.failure_policy`).
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    name: Arc<str>,
    host: Arc<str>,
    port: u16,
    /// By [`HookKind::ALL`]'s order: whether the hook's policy is `Ignore`.
    ignore: [bool; HookKind::ALL.len()],
}

impl Peer {
    /// The plugin `name` at `host:port`; `ignores(hook)` says whether its
    /// `failurePolicy` for that hook is `Ignore`.
    pub(crate) fn new(
        name: &str,
        host: &str,
        port: u16,
        ignores: impl Fn(HookKind) -> bool,
    ) -> Peer {
        Peer {
            name: Arc::from(name),
            host: Arc::from(host),
            port,
            ignore: HookKind::ALL.map(ignores),
        }
    }

    /// The plugin's name.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn ignores(&self, hook: HookKind) -> bool {
        HookKind::ALL
            .iter()
            .position(|k| *k == hook)
            .is_some_and(|i| self.ignore[i])
    }

    fn failure_policy(&self, hook: HookKind) -> &'static str {
        if self.ignores(hook) { "Ignore" } else { "Fail" }
    }
}

/// The attributes a server span starts with, in a vector with room for all
/// it may get later, so that setting them never reallocates it.
fn server_attributes(hook: HookKind) -> Vec<KeyValue> {
    let mut attributes = Vec::with_capacity(SERVER_ATTRIBUTES);
    attributes.extend([
        KeyValue::new("rpc.system", "grpc"),
        KeyValue::new("rpc.service", rollout_proto::SERVICE_NAME),
        KeyValue::new("rpc.method", hook.as_str()),
    ]);
    attributes
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

/// The `traceparent` header that makes a plugin's spans children of `context`.
pub(crate) fn traceparent(context: &SpanContext) -> HeaderValue {
    // Lowercase hex and dashes only: always a valid header value.
    HeaderValue::from_str(&rollout_telemetry::traceparent(context))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The span of one call from the controller; ends when dropped if
/// [`ServerSpan::finish`] was not called (the caller went away).
#[derive(Debug)]
pub(crate) struct ServerSpan {
    span: Span,
}

impl ServerSpan {
    /// The context plugins' client spans descend from.
    pub(crate) fn context(&self) -> SpanContext {
        self.span.span_context().clone()
    }

    /// Adds `ocm.rollout.plugin`: the target the caller named.
    pub(crate) fn set_target(&mut self, target: &str) {
        self.span
            .set_attribute(KeyValue::new("ocm.rollout.plugin", target.to_string()));
    }

    /// Adds the hub of a central-mode caller.
    pub(crate) fn set_hub(&mut self, hub: &Hub) {
        self.span
            .set_attribute(KeyValue::new("ocm.hub", hub.to_string()));
    }

    /// Adds the rollout attributes of the request.
    pub(crate) fn set_rollout(&mut self, rollout: &RolloutFields) {
        let mut attributes = Vec::with_capacity(4);
        rollout_attributes(&mut attributes, rollout);
        self.span.set_attributes(attributes);
    }

    /// Records the merged validation answer: `ocm.rollout.validation.result`,
    /// and when it is FAILED an error status naming `failed_by` (the members
    /// that answered FAILED), also listed in
    /// `ocm.rollout.validation.failed_by`.
    pub(crate) fn set_validation(&mut self, failed_by: &[String], answer: &ValidateResponse) {
        let names: Vec<&str> = failed_by.iter().map(String::as_str).collect();
        outcome::record_validation(&mut self.span, &names, answer);
        if !names.is_empty() {
            self.span
                .set_attribute(KeyValue::new(VALIDATION_FAILED_BY, names.join(",")));
        }
    }

    /// Ends the span with the call's answer; each member that failed open is
    /// an event and is listed in `ocm.rollout.failed_open` (the status stays
    /// as the code says: the call went on without them).
    pub(crate) fn finish(mut self, code: Code, message: &str, failed_open: &[&str]) {
        for name in failed_open {
            self.span.add_event(
                "fail-open",
                vec![KeyValue::new("ocm.rollout.plugin", name.to_string())],
            );
        }
        outcome::record_failed_open(&mut self.span, failed_open);
        finish_server_span(&mut self.span, code, message);
    }
}

/// The span of one attempt at a plugin.
#[derive(Debug)]
pub(crate) struct ClientSpan {
    span: Span,
}

impl ClientSpan {
    /// The context the plugin receives as its `traceparent`.
    pub(crate) fn context(&self) -> &SpanContext {
        self.span.span_context()
    }

    /// Records the plugin's validation answer: its verdict, and when it is
    /// FAILED an error status naming `plugin` and its message.
    pub(crate) fn set_validation(&mut self, plugin: &str, answer: &ValidateResponse) {
        outcome::record_validation(&mut self.span, &[plugin], answer);
    }

    /// Ends the span with the attempt's status. An attempt refused by the
    /// open circuit (nothing was sent) carries a `circuit open` event; a
    /// failed one of a plugin whose policy for `hook` is `Ignore` says the
    /// failure was ignored.
    pub(crate) fn finish(
        mut self,
        peer: &Peer,
        hook: HookKind,
        code: Code,
        message: &str,
        circuit_open: bool,
    ) {
        if circuit_open {
            self.span.add_event("circuit open", Vec::new());
        }
        if code != Code::Ok && peer.ignores(hook) {
            self.span
                .set_attribute(KeyValue::new(FAILURE_IGNORED, true));
        }
        finish_span(&mut self.span, code, message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let peer = Peer::new("p", "127.0.0.1", 7001, |_| false);
        let client = tracing.client_span(&parent, &peer, HookKind::BeginRollout, 1, None);
        assert_eq!(client.context().trace_id(), parent.trace_id());
        assert_ne!(client.context().span_id(), parent.span_id());
        client.finish(&peer, HookKind::BeginRollout, Code::Ok, "", false);
        server.finish(Code::Ok, "", &[]);
    }
}
