//! The OTLP protobuf encoding of finished spans, written straight from the
//! SDK's `SpanData` into the bytes of an `ExportTraceServiceRequest`
//! (opentelemetry/proto/collector/trace/v1/trace_service.proto).
//!
//! No intermediate message structs: the generic path (opentelemetry-proto's
//! conversion, then prost) allocates two `String`s per attribute and a `Vec`
//! per id, and frees them all again, which was most of the export's CPU
//! (docs/decisions/0002-own-otlp-exporter.md). Here a batch costs
//! the growth of one output buffer. Fields follow proto3's implicit presence
//! exactly as prost writes them: a scalar or string at its default value is
//! left out; a message that is set (`resource`, `scope`, `status`) and a oneof
//! member (`AnyValue`) are always written, so that a decoder sees the same
//! messages the generic path would have built.

// Why encode here and not through opentelemetry-proto: docs/decisions/0002-own-otlp-exporter.md.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanId, SpanKind, Status};
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanData;

// The wire format itself (keys, varints) is prost's: one source for it.
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};

/// `SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK`.
const FLAG_HAS_IS_REMOTE: u32 = 0x100;
/// `SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK`.
const FLAG_IS_REMOTE: u32 = 0x200;

/// The resource every exported span belongs to, encoded once (as the
/// `resource` field of `ResourceSpans`, and its `schema_url`).
#[derive(Debug, Clone, Default)]
pub(crate) struct EncodedResource {
    /// The `Resource` message's body (its attributes).
    attributes: Vec<u8>,
    schema_url: String,
}

impl EncodedResource {
    /// `resource`'s attributes, in its own iteration order.
    pub(crate) fn new(resource: &Resource) -> EncodedResource {
        let mut attributes = Vec::new();
        for (key, value) in resource.iter() {
            message(&mut attributes, 1, |out| {
                key_value(out, key.as_str(), value);
            });
        }
        EncodedResource {
            attributes,
            schema_url: resource.schema_url().unwrap_or_default().to_owned(),
        }
    }
}

/// Appends to `out` the `ExportTraceServiceRequest` of `spans`: one
/// `ResourceSpans` of `resource`, with a `ScopeSpans` per instrumentation
/// scope in the order scopes first appear, each with its spans in batch
/// order. Nothing for an empty batch but an empty request.
pub(crate) fn export_request(out: &mut Vec<u8>, resource: &EncodedResource, spans: &[SpanData]) {
    if spans.is_empty() {
        return;
    }
    // ExportTraceServiceRequest.resource_spans = 1
    message(out, 1, |out| {
        // ResourceSpans.resource = 1: always set.
        bytes_field_always(out, 1, &resource.attributes);
        // ResourceSpans.scope_spans = 2, grouped by scope. A batch has one
        // scope per tracer; the common case is one, so a linear search.
        let mut scopes: Vec<&InstrumentationScope> = Vec::with_capacity(1);
        for span in spans {
            if !scopes.contains(&&span.instrumentation_scope) {
                scopes.push(&span.instrumentation_scope);
            }
        }
        for scope in scopes {
            message(out, 2, |out| {
                // ScopeSpans.scope = 1: always set.
                message(out, 1, |out| instrumentation_scope(out, scope));
                for span in spans.iter().filter(|s| &s.instrumentation_scope == scope) {
                    // ScopeSpans.spans = 2
                    message(out, 2, |out| span_body(out, span));
                }
                string_field(out, 3, scope.schema_url().unwrap_or_default());
            });
        }
        // ResourceSpans.schema_url = 3
        string_field(out, 3, &resource.schema_url);
    });
}

fn instrumentation_scope(out: &mut Vec<u8>, scope: &InstrumentationScope) {
    string_field(out, 1, scope.name());
    string_field(out, 2, scope.version().unwrap_or_default());
    for attribute in scope.attributes() {
        message(out, 3, |out| attribute_body(out, attribute));
    }
}

/// The fields of a `Span` message, in prost's order (by field number).
fn span_body(out: &mut Vec<u8>, span: &SpanData) {
    let context = &span.span_context;
    bytes_field(out, 1, &context.trace_id().to_bytes());
    bytes_field(out, 2, &context.span_id().to_bytes());
    trace_state(out, 3, context.trace_state());
    if span.parent_span_id != SpanId::INVALID {
        bytes_field(out, 4, &span.parent_span_id.to_bytes());
    }
    string_field(out, 5, &span.name);
    varint_field(out, 6, span_kind(&span.span_kind));
    fixed64_field(out, 7, unix_nanos(span.start_time));
    fixed64_field(out, 8, unix_nanos(span.end_time));
    for attribute in &span.attributes {
        message(out, 9, |out| attribute_body(out, attribute));
    }
    varint_field(out, 10, span.dropped_attributes_count.into());
    for event in span.events.iter() {
        message(out, 11, |out| {
            fixed64_field(out, 1, unix_nanos(event.timestamp));
            string_field(out, 2, &event.name);
            for attribute in &event.attributes {
                message(out, 3, |out| attribute_body(out, attribute));
            }
            varint_field(out, 4, event.dropped_attributes_count.into());
        });
    }
    varint_field(out, 12, span.events.dropped_count.into());
    for link in span.links.iter() {
        message(out, 13, |out| {
            let context = &link.span_context;
            bytes_field(out, 1, &context.trace_id().to_bytes());
            bytes_field(out, 2, &context.span_id().to_bytes());
            trace_state(out, 3, context.trace_state());
            for attribute in &link.attributes {
                message(out, 4, |out| attribute_body(out, attribute));
            }
            varint_field(out, 5, link.dropped_attributes_count.into());
            fixed32_field(
                out,
                6,
                span_flags(context.is_remote(), context.trace_flags().to_u8().into()),
            );
        });
    }
    varint_field(out, 14, span.links.dropped_count.into());
    // Span.status = 15: always set.
    message(out, 15, |out| match &span.status {
        Status::Error { description } => {
            string_field(out, 2, description);
            varint_field(out, 3, 2);
        }
        Status::Ok => varint_field(out, 3, 1),
        Status::Unset => {}
    });
    fixed32_field(
        out,
        16,
        span_flags(
            span.parent_span_is_remote,
            context.trace_flags().to_u8().into(),
        ),
    );
}

/// OTLP's span flags: the W3C flags, and whether the parent is remote.
fn span_flags(parent_is_remote: bool, trace_flags: u32) -> u32 {
    let mut flags = trace_flags | FLAG_HAS_IS_REMOTE;
    if parent_is_remote {
        flags |= FLAG_IS_REMOTE;
    }
    flags
}

/// `Span.SpanKind`'s number.
fn span_kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn trace_state(out: &mut Vec<u8>, field: u32, state: &opentelemetry::trace::TraceState) {
    // Most spans carry none: no header to build.
    if *state != opentelemetry::trace::TraceState::NONE {
        string_field(out, field, &state.header());
    }
}

fn attribute_body(out: &mut Vec<u8>, attribute: &KeyValue) {
    key_value(out, attribute.key.as_str(), &attribute.value);
}

/// A `KeyValue` message's fields.
fn key_value(out: &mut Vec<u8>, key: &str, value: &Value) {
    string_field(out, 1, key);
    // KeyValue.value = 2: always set.
    message(out, 2, |out| any_value(out, value));
}

/// An `AnyValue` message's fields: its oneof member, written even at its
/// default value (a oneof member has presence).
fn any_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::String(s) => bytes_field_always(out, 1, s.as_str().as_bytes()),
        Value::Bool(b) => {
            tag(out, 2, WireType::Varint);
            varint(out, u64::from(*b));
        }
        Value::I64(i) => {
            tag(out, 3, WireType::Varint);
            varint(out, *i as u64);
        }
        Value::F64(f) => {
            tag(out, 4, WireType::SixtyFourBit);
            out.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        // AnyValue.array_value = 5, an ArrayValue of AnyValues (values = 1).
        Value::Array(array) => message(out, 5, |out| match array {
            Array::Bool(values) => array_values(out, values, |v| Value::Bool(*v)),
            Array::I64(values) => array_values(out, values, |v| Value::I64(*v)),
            Array::F64(values) => array_values(out, values, |v| Value::F64(*v)),
            Array::String(values) => {
                for v in values {
                    message(out, 1, |out| {
                        bytes_field_always(out, 1, v.as_str().as_bytes())
                    });
                }
            }
            // A kind of array this encoder does not know (the API may add
            // some): an empty array rather than a wrong value.
            _ => {}
        }),
        // A kind of value this encoder does not know: an AnyValue with no
        // value set, which OTLP reads as empty.
        _ => {}
    }
}

fn array_values<T>(out: &mut Vec<u8>, values: &[T], scalar: impl Fn(&T) -> Value) {
    for v in values {
        message(out, 1, |out| any_value(out, &scalar(v)));
    }
}

/// A length-delimited field whose body `body` writes: the body goes at the
/// end of `out`, then its length is put in front of it (a move of the body
/// by one to five bytes, cheaper than measuring every message first).
fn message(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    tag(out, field, WireType::LengthDelimited);
    let start = out.len();
    body(out);
    let len = out.len() - start;
    let mut prefix = [0u8; 10];
    let n = encoded_len_varint(len as u64);
    encode_varint(len as u64, &mut &mut prefix[..]);
    out.extend_from_slice(&prefix[..n]);
    out[start..].rotate_right(n);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: WireType) {
    encode_key(field, wire, out);
}

fn varint(out: &mut Vec<u8>, v: u64) {
    encode_varint(v, out);
}

/// A string field, left out when empty (proto3 implicit presence).
fn string_field(out: &mut Vec<u8>, field: u32, s: &str) {
    bytes_field(out, field, s.as_bytes());
}

/// A bytes field, left out when empty.
fn bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    if !bytes.is_empty() {
        bytes_field_always(out, field, bytes);
    }
}

/// A length-delimited field, written even when empty (a set message, a
/// oneof member).
fn bytes_field_always(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, WireType::LengthDelimited);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// A varint field, left out when zero.
fn varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        tag(out, field, WireType::Varint);
        varint(out, v);
    }
}

fn fixed32_field(out: &mut Vec<u8>, field: u32, v: u32) {
    if v != 0 {
        tag(out, field, WireType::ThirtyTwoBit);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn fixed64_field(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        tag(out, field, WireType::SixtyFourBit);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_gets_its_length_in_front() {
        let mut out = vec![0xff];
        message(&mut out, 2, |out| out.extend_from_slice(&[7u8; 200]));
        // Tag (field 2, LEN), length 200 as a two-byte varint, the body.
        assert_eq!(&out[..4], &[0xff, 0x12, 0xc8, 0x01]);
        assert_eq!(out.len(), 4 + 200);
        assert!(out[4..].iter().all(|b| *b == 7));
    }

    /// Spans with every kind of field the SDK can hand over, two scopes.
    fn spans() -> Vec<SpanData> {
        use std::borrow::Cow;
        use std::time::Duration;

        use opentelemetry::StringValue;
        use opentelemetry::trace::{Event, Link, SpanContext, TraceFlags, TraceId, TraceState};
        use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};

        let t0 = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let gateway = InstrumentationScope::builder("rollout-gateway").build();
        let other = InstrumentationScope::builder("other")
            .with_version("1.2.3")
            .with_schema_url("https://opentelemetry.io/schemas/1.21.0")
            .with_attributes([KeyValue::new("scope.attr", true)])
            .build();
        let state = TraceState::from_key_value([("vendor", "value")]).expect("valid");
        let context = |trace: u128, span: u64, flags: u8, remote: bool, state: TraceState| {
            SpanContext::new(
                TraceId::from(trace),
                SpanId::from(span),
                TraceFlags::new(flags),
                remote,
                state,
            )
        };
        let mut events = SpanEvents::default();
        events.events = vec![
            Event::new(
                "fail-open",
                t0 + Duration::from_micros(90),
                vec![KeyValue::new("ocm.rollout.plugin", "smoke-test")],
                1,
            ),
            Event::new("circuit open", t0, Vec::new(), 0),
        ];
        events.dropped_count = 3;
        let mut links = SpanLinks::default();
        links.links = vec![Link::new(
            context(7, 8, 1, true, state.clone()),
            vec![KeyValue::new("link.attr", 9i64)],
            4,
        )];
        links.dropped_count = 5;
        let server = SpanData {
            span_context: context(
                0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
                0xf067,
                1,
                false,
                state,
            ),
            parent_span_id: SpanId::from(0x00f0_67aa_0ba9_02b7),
            parent_span_is_remote: true,
            span_kind: SpanKind::Server,
            name: Cow::Borrowed(
                "ocm.rolloutplugin.v1alpha1.RolloutPluginService/MutateManifestWork",
            ),
            start_time: t0,
            end_time: t0 + Duration::from_micros(180),
            attributes: vec![
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("ocm.rollout.plugin", String::from("mutate")),
                KeyValue::new("ocm.rollout.attempt", 1i64),
                KeyValue::new("negative", -42i64),
                KeyValue::new("zero", 0i64),
                KeyValue::new("empty", ""),
                KeyValue::new("false", false),
                KeyValue::new("ratio", 0.25f64),
                KeyValue::new("bools", Value::Array(Array::Bool(vec![true, false]))),
                KeyValue::new("ints", Value::Array(Array::I64(vec![1, -2, 300]))),
                KeyValue::new("floats", Value::Array(Array::F64(vec![1.5, 0.0]))),
                KeyValue::new(
                    "strings",
                    Value::Array(Array::String(vec![
                        StringValue::from("a"),
                        StringValue::from(""),
                    ])),
                ),
                KeyValue::new("empty-array", Value::Array(Array::I64(Vec::new()))),
            ],
            dropped_attributes_count: 2,
            events,
            links,
            status: Status::error("plugin \"mutate\" failed: UNAVAILABLE"),
            instrumentation_scope: gateway.clone(),
        };
        let client = SpanData {
            span_context: context(
                0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736,
                0xabc,
                1,
                false,
                TraceState::NONE,
            ),
            parent_span_id: SpanId::from(0xf067),
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: Cow::Owned("plugin mutate MutateManifestWork".to_string()),
            start_time: t0 + Duration::from_micros(10),
            end_time: t0 + Duration::from_micros(170),
            attributes: vec![KeyValue::new("rpc.grpc.status_code", 0i64)],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: gateway,
        };
        let root = SpanData {
            span_context: context(99, 100, 0, false, TraceState::NONE),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(""),
            // Before the epoch: written as 0, as the generic path does.
            start_time: UNIX_EPOCH - Duration::from_secs(1),
            end_time: UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Ok,
            instrumentation_scope: other,
        };
        let mut producer = client.clone();
        producer.span_kind = SpanKind::Producer;
        let mut consumer = root.clone();
        consumer.span_kind = SpanKind::Consumer;
        vec![server, root, client, producer, consumer]
    }

    fn resource() -> Resource {
        Resource::builder_empty()
            .with_service_name("rollout-gateway")
            .with_attributes([
                KeyValue::new("host.name", "node-1"),
                KeyValue::new("pid", 4242i64),
            ])
            .with_schema_url(
                [KeyValue::new("unused", "x")],
                "https://opentelemetry.io/schemas/1.20.0",
            )
            .build()
    }

    /// What opentelemetry-proto's generic conversion makes of `spans`.
    fn generic(
        spans: Vec<SpanData>,
        resource: &Resource,
    ) -> opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
        use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
        use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                spans,
                &ResourceAttributesWithSchema::from(resource),
            ),
        }
    }

    #[test]
    fn decodes_to_what_the_generic_conversion_builds() {
        use prost::Message as _;
        let resource = resource();
        let spans = spans();
        let mut out = Vec::new();
        export_request(&mut out, &EncodedResource::new(&resource), &spans);
        let decoded =
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(
                &out[..],
            )
            .expect("a valid ExportTraceServiceRequest");
        let expected = generic(spans, &resource);
        assert_eq!(decoded, expected);
        // Two scopes, in the order they first appear; spans in batch order.
        let scopes = &decoded.resource_spans[0].scope_spans;
        assert_eq!(scopes.len(), 2);
        assert_eq!(scopes[0].spans.len(), 3);
        assert_eq!(scopes[1].spans.len(), 2);
        // Field for field as prost writes them, the same bytes.
        assert_eq!(out, expected.encode_to_vec());
    }

    #[test]
    fn an_empty_batch_is_an_empty_request() {
        let mut out = Vec::new();
        export_request(&mut out, &EncodedResource::new(&resource()), &[]);
        assert!(out.is_empty());
    }
}
