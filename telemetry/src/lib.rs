//! What the gateway and the controller share to be observable: an
//! OpenTelemetry tracer configured by the standard `OTEL_*` variables
//! ([`TracingOptions`], [`Tracer`]), the W3C `traceparent` they pass along
//! ([`traceparent`], [`parse_traceparent`]), the span attributes of a rollout
//! request ([`rollout_attributes`]), what a span says about a hook's
//! outcome ([`outcome`]: codes, verdicts, fail-opens), the remote side of a
//! client span and the server-span error rule of OpenTelemetry's RPC
//! conventions ([`semconv`]), log set-up whose JSON
//! lines carry the trace ids ([`logs`]), and the `/metrics` exposition,
//! negotiated between OpenMetrics and the Prometheus text, with the
//! `process_*` and `*_build_info` series ([`metrics`]), and a [`throttle`]
//! for log lines that repeat with every call.
//!
//! Spans are always made, so the trace context always propagates; they leave
//! the process only when an OTLP endpoint is configured, through the SDK's
//! batch processor: a bounded queue, which drops spans when full rather than
//! block the caller, drained by its own thread. Ending a span is a send on
//! that queue and nothing more (no wakeup: the batch thread is woken once
//! per full batch, or by its timer). The batch thread hands each batch to
//! the exporter's own runtime and thread (`otlp-export`), which encodes the
//! spans straight into OTLP protobuf bytes (no intermediate structures) and
//! sends them over the OTLP client's connection: exporting never takes a
//! worker thread from the work being traced.

#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]
// A `pub` item must be reachable from the crate root; anything else is
// `pub(crate)`.
#![warn(unreachable_pub)]

pub mod logs;
pub mod metrics;
mod otlp;
pub mod outcome;
pub mod semconv;
pub mod throttle;

pub use outcome::{finish_server_span, finish_span};

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use rollout_proto::partial::RolloutFields;

/// The OTLP transport (`OTEL_EXPORTER_OTLP_PROTOCOL`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum OtlpProtocol {
    /// OTLP/gRPC (`grpc`, port 4317): the default.
    #[default]
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`, port 4318), over
    /// plaintext HTTP.
    HttpProtobuf,
    /// A value this build cannot export with (`http/json`, a typo):
    /// [`Tracer::new`] refuses it, naming the value.
    Unsupported(String),
}

/// The compression of OTLP requests (`OTEL_EXPORTER_OTLP_COMPRESSION`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum OtlpCompression {
    /// Uncompressed (`none`): the default.
    #[default]
    None,
    /// gzip (`gzip`): `Content-Encoding: gzip` over HTTP, `grpc-encoding:
    /// gzip` over gRPC.
    Gzip,
    /// A value this build cannot compress with (`zstd`, a typo):
    /// [`Tracer::new`] refuses it, naming the value.
    Unsupported(String),
}

/// How long one export request may take
/// (`OTEL_EXPORTER_OTLP_TIMEOUT`, milliseconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OtlpTimeout {
    /// A timeout above zero; OTLP's default is 10 s.
    Set(Duration),
    /// Not a whole number of milliseconds above zero: [`Tracer::new`]
    /// refuses it, naming the value.
    Unsupported(String),
}

/// OTLP's default export timeout.
pub const DEFAULT_OTLP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where spans go, from the standard `OTEL_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingOptions {
    /// The collector: for OTLP/gRPC its address (`http://host:4317`), for
    /// OTLP/HTTP the full URL spans are posted to
    /// (`http://host:4318/v1/traces`); `None`: nothing is exported.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// The batch processor's export delay (`OTEL_BSP_SCHEDULE_DELAY` when unset here).
    pub schedule_delay: Option<Duration>,
    /// The transport to the collector.
    pub otlp_protocol: OtlpProtocol,
    /// The compression of each export request.
    pub otlp_compression: OtlpCompression,
    /// How long one export request may take (each retry has its own).
    pub otlp_timeout: OtlpTimeout,
}

/// The path OTLP/HTTP appends to `OTEL_EXPORTER_OTLP_ENDPOINT` for traces
/// (a `_TRACES_ENDPOINT` is used as it is).
const HTTP_TRACES_PATH: &str = "v1/traces";

impl TracingOptions {
    /// No export, under `service_name`.
    pub fn new(service_name: &str) -> TracingOptions {
        TracingOptions {
            otlp_endpoint: None,
            service_name: service_name.into(),
            schedule_delay: None,
            otlp_protocol: OtlpProtocol::Grpc,
            otlp_compression: OtlpCompression::None,
            otlp_timeout: OtlpTimeout::Set(DEFAULT_OTLP_TIMEOUT),
        }
    }

    /// Reads `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (unset or blank: no export; over HTTP
    /// `/v1/traces` is appended to the latter, as OTLP specifies),
    /// `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` else `OTEL_EXPORTER_OTLP_PROTOCOL`
    /// (`grpc`, the default, or `http/protobuf`),
    /// `OTEL_EXPORTER_OTLP_TRACES_COMPRESSION` else
    /// `OTEL_EXPORTER_OTLP_COMPRESSION` (`none`, the default, or `gzip`),
    /// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` else `OTEL_EXPORTER_OTLP_TIMEOUT`
    /// (milliseconds, default 10000), and
    /// `OTEL_SERVICE_NAME` (default `default_service`). `OTEL_SDK_DISABLED=true`
    /// turns export off. The sampler (`OTEL_TRACES_SAMPLER`, `_ARG`) and the
    /// batch settings (`OTEL_BSP_*`) are read by the SDK itself.
    pub fn from_env(default_service: &str) -> TracingOptions {
        Self::from_lookup(default_service, |name| std::env::var(name).ok())
    }

    /// [`TracingOptions::from_env`] over any source of variables.
    pub fn from_lookup(
        default_service: &str,
        var: impl Fn(&str) -> Option<String>,
    ) -> TracingOptions {
        let var = |name: &str| {
            var(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let otlp_protocol = match var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            None => OtlpProtocol::Grpc,
            Some(v) if v.eq_ignore_ascii_case("grpc") => OtlpProtocol::Grpc,
            Some(v) if v.eq_ignore_ascii_case("http/protobuf") => OtlpProtocol::HttpProtobuf,
            Some(v) => OtlpProtocol::Unsupported(v),
        };
        let otlp_compression = match var("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION")
            .or_else(|| var("OTEL_EXPORTER_OTLP_COMPRESSION"))
        {
            None => OtlpCompression::None,
            Some(v) if v.eq_ignore_ascii_case("none") => OtlpCompression::None,
            Some(v) if v.eq_ignore_ascii_case("gzip") => OtlpCompression::Gzip,
            Some(v) => OtlpCompression::Unsupported(v),
        };
        let otlp_timeout = match var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT"))
        {
            None => OtlpTimeout::Set(DEFAULT_OTLP_TIMEOUT),
            Some(v) => match v.parse::<u64>() {
                Ok(ms) if ms > 0 => OtlpTimeout::Set(Duration::from_millis(ms)),
                _ => OtlpTimeout::Unsupported(v),
            },
        };
        let otlp_endpoint = if disabled {
            None
        } else if let Some(traces) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(traces)
        } else {
            var("OTEL_EXPORTER_OTLP_ENDPOINT").map(|base| match otlp_protocol {
                OtlpProtocol::HttpProtobuf => {
                    format!("{}/{HTTP_TRACES_PATH}", base.trim_end_matches('/'))
                }
                _ => base,
            })
        };
        TracingOptions {
            otlp_endpoint,
            service_name: var("OTEL_SERVICE_NAME").unwrap_or_else(|| default_service.into()),
            schedule_delay: None,
            otlp_protocol,
            otlp_compression,
            otlp_timeout,
        }
    }
}

/// The exporter could not be built (a malformed endpoint, no thread).
#[derive(Debug, thiserror::Error)]
#[error("OTLP exporter for {endpoint}: {message}")]
pub struct TracingError {
    endpoint: String,
    message: String,
}

/// A tracer and, when exporting, its exporter. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Tracer {
    tracer: SdkTracer,
    provider: SdkTracerProvider,
    /// The exporter's runtime, while exporting.
    export: Option<Arc<otlp::ExportRuntime>>,
}

impl Tracer {
    /// A tracer named `scope`, exporting as `options` say.
    ///
    /// Every export request also carries the headers of
    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`
    /// (`key=value` pairs separated by commas, values percent-encoded, as
    /// OTLP specifies): a malformed one is refused, naming the variable.
    pub fn new(scope: &'static str, options: &TracingOptions) -> Result<Tracer, TracingError> {
        Tracer::with_headers(scope, options, |name| std::env::var(name).ok())
    }

    /// [`Tracer::new`], the headers' variables read from `var`.
    fn with_headers(
        scope: &'static str,
        options: &TracingOptions,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Tracer, TracingError> {
        let resource = Resource::builder()
            .with_service_name(options.service_name.clone())
            .build();
        let mut builder = SdkTracerProvider::builder().with_resource(resource);
        let mut export = None;
        if let Some(endpoint) = &options.otlp_endpoint {
            let failed = |message: String| TracingError {
                endpoint: endpoint.clone(),
                message,
            };
            let (transport, gzip, timeout) =
                export_plan(endpoint, options).map_err(|e| failed(e.to_string()))?;
            let headers = otlp::headers(var).map_err(|e| failed(e.to_string()))?;
            let (runtime, exporter) = otlp::ExportRuntime::start(|| {
                otlp::OtlpExporter::new(&transport, gzip, headers, timeout)
            })
            .map_err(|e| failed(format!("cannot start its thread: {e}")))?;
            let exporter = otlp::OnExportThread {
                inner: Arc::new(exporter.map_err(|e| failed(e.to_string()))?),
                runtime: runtime.handle.clone(),
            };
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
        Ok(Tracer {
            tracer: provider.tracer(scope),
            provider,
            export,
        })
    }

    /// A tracer that exports nothing (spans are still made, for propagation).
    pub fn disabled(scope: &'static str) -> Tracer {
        let provider = SdkTracerProvider::builder().build();
        Tracer {
            tracer: provider.tracer(scope),
            provider,
            export: None,
        }
    }

    /// The SDK tracer spans are started with.
    pub fn sdk(&self) -> &SdkTracer {
        &self.tracer
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
}

/// An OTLP option the exporter cannot use.
#[derive(Debug, thiserror::Error)]
enum ExportOptionError {
    #[error("OTEL_EXPORTER_OTLP_COMPRESSION={0} is not supported (none or gzip)")]
    Compression(String),
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0} is not supported (grpc or http/protobuf)")]
    Protocol(String),
    #[error("OTEL_EXPORTER_OTLP_TIMEOUT={0} is not a timeout (whole milliseconds above zero)")]
    Timeout(String),
    #[error("the endpoint is a URL with its scheme (http:// or https://)")]
    NoScheme,
    #[error("OTLP/HTTP is exported over plaintext http:// only (use grpc for TLS)")]
    HttpOverTls,
}

/// What the OTLP options ask for, checked before anything starts: the
/// transport to the endpoint, whether to gzip, and the export timeout.
fn export_plan(
    endpoint: &str,
    options: &TracingOptions,
) -> Result<(otlp::Transport, bool, Duration), ExportOptionError> {
    let gzip = match &options.otlp_compression {
        OtlpCompression::None => false,
        OtlpCompression::Gzip => true,
        OtlpCompression::Unsupported(v) => return Err(ExportOptionError::Compression(v.clone())),
    };
    let http = match &options.otlp_protocol {
        OtlpProtocol::Grpc => false,
        OtlpProtocol::HttpProtobuf => true,
        OtlpProtocol::Unsupported(v) => return Err(ExportOptionError::Protocol(v.clone())),
    };
    let timeout = match &options.otlp_timeout {
        OtlpTimeout::Set(timeout) => *timeout,
        OtlpTimeout::Unsupported(v) => return Err(ExportOptionError::Timeout(v.clone())),
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(ExportOptionError::NoScheme);
    }
    if http && !endpoint.starts_with("http://") {
        return Err(ExportOptionError::HttpOverTls);
    }
    let transport = if http {
        otlp::Transport::Http {
            url: endpoint.to_owned(),
        }
    } else {
        otlp::Transport::Grpc {
            endpoint: endpoint.to_owned(),
        }
    };
    Ok((transport, gzip, timeout))
}

/// Reads a W3C `traceparent`, strictly: `VERSION-TRACEID-PARENTID-FLAGS`,
/// lowercase hex of 2, 32, 16 and 2 digits, with non-zero ids and a version
/// other than `ff`; version `00` has exactly these fields, a later version
/// may add some after a `-`. `None` for anything else: the one parser of
/// the workspace, so that what is accepted as a parent is what is passed on.
pub fn parse_traceparent(v: &[u8]) -> Option<SpanContext> {
    let hex = |s: &[u8]| {
        s.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    };
    let well_formed = v.len() >= 55
        && v[2] == b'-'
        && v[35] == b'-'
        && v[52] == b'-'
        && hex(&v[0..2])
        && &v[0..2] != b"ff"
        && hex(&v[3..35])
        && hex(&v[36..52])
        && hex(&v[53..55])
        && (v.len() == 55 || (&v[0..2] != b"00" && v[55] == b'-'));
    if !well_formed {
        return None;
    }
    // All ASCII hex, checked above.
    let text = std::str::from_utf8(&v[..55]).ok()?;
    let trace_id = TraceId::from_hex(&text[3..35]).ok()?;
    let span_id = SpanId::from_hex(&text[36..52]).ok()?;
    let flags = u8::from_str_radix(&text[53..55], 16).ok()?;
    let context = SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(flags) & TraceFlags::SAMPLED,
        true,
        TraceState::NONE,
    );
    // Zero ids are invalid.
    context.is_valid().then_some(context)
}

/// The W3C `traceparent` that makes the callee's spans children of
/// `context`: `00-TRACEID-SPANID-FLAGS`, only the sampled flag passed on.
pub fn traceparent(context: &SpanContext) -> String {
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags() & TraceFlags::SAMPLED
    )
}

/// Appends the docs/plugin-api.md §4 attributes of a rollout request:
/// `ocm.mwrs.namespace`, `ocm.mwrs.name`, `ocm.placement` and, when set,
/// `ocm.cluster`.
pub fn rollout_attributes(attributes: &mut Vec<KeyValue>, r: &RolloutFields) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup of variables over `pairs`.
    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn options_from_the_environment() {
        assert_eq!(
            TracingOptions::from_lookup("svc", env(&[])),
            TracingOptions::new("svc")
        );
        let set = TracingOptions::from_lookup(
            "svc",
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
                ("OTEL_SERVICE_NAME", "hub-a"),
            ]),
        );
        assert_eq!(set.otlp_endpoint.as_deref(), Some("http://collector:4317"));
        assert_eq!(set.service_name, "hub-a");
        let traces_first = TracingOptions::from_lookup(
            "svc",
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:4317"),
            ]),
        );
        assert_eq!(traces_first.otlp_endpoint.as_deref(), Some("http://b:4317"));
        let disabled = TracingOptions::from_lookup(
            "svc",
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"),
                ("OTEL_SDK_DISABLED", "TRUE"),
            ]),
        );
        assert_eq!(disabled.otlp_endpoint, None);
        let blank =
            TracingOptions::from_lookup("svc", env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]));
        assert_eq!(blank.otlp_endpoint, None);
    }

    #[test]
    fn protocol_and_compression_from_the_environment() {
        let default = TracingOptions::from_lookup(
            "svc",
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317")]),
        );
        assert_eq!(default.otlp_protocol, OtlpProtocol::Grpc);
        assert_eq!(default.otlp_compression, OtlpCompression::None);
        assert_eq!(default.otlp_endpoint.as_deref(), Some("http://c:4317"));
        // Over HTTP the base endpoint gets the traces path; a traces endpoint
        // is used as it is.
        let http = TracingOptions::from_lookup(
            "svc",
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "GZIP"),
            ]),
        );
        assert_eq!(http.otlp_protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(http.otlp_compression, OtlpCompression::Gzip);
        assert_eq!(
            http.otlp_endpoint.as_deref(),
            Some("http://c:4318/v1/traces")
        );
        let traces = TracingOptions::from_lookup(
            "svc",
            env(&[
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/custom"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_COMPRESSION", "none"),
            ]),
        );
        assert_eq!(traces.otlp_protocol, OtlpProtocol::HttpProtobuf);
        assert_eq!(traces.otlp_compression, OtlpCompression::None);
        assert_eq!(
            traces.otlp_endpoint.as_deref(),
            Some("http://c:4318/custom")
        );
    }

    #[test]
    fn an_unsupported_protocol_or_compression_is_refused_by_name() {
        let mut options = TracingOptions::new("svc");
        options.otlp_endpoint = Some("http://127.0.0.1:9".into());
        options.otlp_protocol = OtlpProtocol::Unsupported("http/json".into());
        let error = Tracer::new("test", &options)
            .expect_err("refused")
            .to_string();
        assert!(
            error.contains("OTEL_EXPORTER_OTLP_PROTOCOL=http/json"),
            "{error}"
        );
        options.otlp_protocol = OtlpProtocol::Grpc;
        options.otlp_compression = OtlpCompression::Unsupported("zstd".into());
        let error = Tracer::new("test", &options)
            .expect_err("refused")
            .to_string();
        assert!(
            error.contains("OTEL_EXPORTER_OTLP_COMPRESSION=zstd"),
            "{error}"
        );
        options.otlp_compression = OtlpCompression::Gzip;
        options.otlp_protocol = OtlpProtocol::HttpProtobuf;
        options.otlp_endpoint = Some("https://collector:4318/v1/traces".into());
        let error = Tracer::new("test", &options)
            .expect_err("refused")
            .to_string();
        assert!(error.contains("plaintext"), "{error}");
    }

    #[test]
    fn the_export_timeout_is_read_in_milliseconds_and_a_bad_one_is_refused() {
        let default = TracingOptions::from_lookup("svc", env(&[]));
        assert_eq!(default.otlp_timeout, OtlpTimeout::Set(DEFAULT_OTLP_TIMEOUT));
        let both = TracingOptions::from_lookup(
            "svc",
            env(&[
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
                ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "750"),
            ]),
        );
        assert_eq!(
            both.otlp_timeout,
            OtlpTimeout::Set(Duration::from_millis(750))
        );
        let general =
            TracingOptions::from_lookup("svc", env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "2500")]));
        assert_eq!(
            general.otlp_timeout,
            OtlpTimeout::Set(Duration::from_millis(2500))
        );
        let bad_values: [&'static [(&str, &str)]; 3] = [
            &[("OTEL_EXPORTER_OTLP_TIMEOUT", "0")],
            &[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")],
            &[("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "-1")],
        ];
        for pairs in bad_values {
            let (variable, bad) = pairs[0];
            let mut options = TracingOptions::from_lookup("svc", env(pairs));
            assert_eq!(options.otlp_timeout, OtlpTimeout::Unsupported(bad.into()));
            options.otlp_endpoint = Some("http://127.0.0.1:9".into());
            let error = Tracer::new("test", &options)
                .expect_err("refused")
                .to_string();
            assert!(
                error.contains(&format!("OTEL_EXPORTER_OTLP_TIMEOUT={bad}")),
                "{variable}: {error}"
            );
        }
    }

    #[test]
    fn an_endpoint_without_a_scheme_is_refused_naming_it() {
        let mut options = TracingOptions::new("svc");
        options.otlp_endpoint = Some("collector:4317".into());
        let error = Tracer::new("test", &options)
            .expect_err("refused")
            .to_string();
        assert!(
            error.contains("collector:4317") && error.contains("scheme"),
            "{error}"
        );
    }

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
            traceparent(&context),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
        );
        assert!(
            parse_traceparent(b"00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none()
        );
    }

    #[test]
    fn only_well_formed_trace_context_parses() {
        for bad in [
            &b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"[..],
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736+00f067aa0ba902b7-01",
            b"garbage",
        ] {
            assert!(
                parse_traceparent(bad).is_none(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(
            parse_traceparent(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future")
                .is_some()
        );
    }

    /// An OTLP/gRPC collector that reports the `x-api-key` of each export.
    struct KeyedCollector(tokio::sync::mpsc::UnboundedSender<Option<String>>);

    #[tonic::async_trait]
    impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService
        for KeyedCollector
    {
        async fn export(
            &self,
            request: tonic::Request<
                opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
            >,
        ) -> Result<
            tonic::Response<
                opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse,
            >,
            tonic::Status,
        > {
            let key = request
                .metadata()
                .get("x-api-key")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let _ = self.0.send(key);
            Ok(tonic::Response::new(Default::default()))
        }
    }

    #[tokio::test]
    async fn the_headers_variable_reaches_the_collector() {
        use opentelemetry::trace::{Span as _, Tracer as _};
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bound");
        let addr = listener.local_addr().expect("address");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(KeyedCollector(tx)))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let mut options = TracingOptions::new("svc");
        options.otlp_endpoint = Some(format!("http://{addr}"));
        let tracer = Tracer::with_headers("test", &options, |name| {
            (name == "OTEL_EXPORTER_OTLP_HEADERS").then(|| "x-api-key=s%3Dcret".to_string())
        })
        .expect("the exporter builds");
        tracer.sdk().start("keyed").end();
        tokio::task::spawn_blocking(move || tracer.shutdown())
            .await
            .expect("shut down");
        let key = tokio::time::timeout(Duration::from_secs(20), rx.recv())
            .await
            .expect("an export within 20 s")
            .expect("the collector got it");
        assert_eq!(key.as_deref(), Some("s=cret"));
        // A malformed variable is refused when the tracer is built.
        let error = Tracer::with_headers("test", &options, |name| {
            (name == "OTEL_EXPORTER_OTLP_TRACES_HEADERS").then(|| "no-equals".to_string())
        })
        .expect_err("refused")
        .to_string();
        assert!(
            error.contains("OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
            "{error}"
        );
    }

    #[test]
    fn an_exporting_tracer_starts_and_stops_its_thread() {
        let mut options = TracingOptions::new("svc");
        options.otlp_endpoint = Some("http://127.0.0.1:9".into());
        let tracer = Tracer::new("test", &options).expect("a lazy client builds");
        assert!(tracer.is_exporting());
        // Nothing listens: the flush fails (logged), and shutdown still ends.
        tracer.shutdown();
        assert!(!Tracer::disabled("test").is_exporting());
    }
}
