//! The OTLP span exporter: each batch the SDK's batch processor hands over is
//! encoded straight into the protobuf bytes of an `ExportTraceServiceRequest`
//! ([`encode`]) and sent over OTLP/gRPC (tonic, a pass-through codec) or
//! OTLP/HTTP (hyper), on a runtime of its own thread (`otlp-export`).
//!
//! The export threads keep the process's CPU priority. A lower one (nice 10)
//! made no measurable difference to the calls' latency, and the lowest (nice
//! 19) starved them on a saturated machine: the queue overflowed and 46 % of
//! the spans were dropped (docs/decisions/0002-own-otlp-exporter.md).

// Why our own exporter and not opentelemetry-otlp, and when to go back:
// docs/decisions/0002-own-otlp-exporter.md.

mod encode;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tonic::codec::CompressionEncoding;

use encode::EncodedResource;

/// Retries of an export the collector answered with a retryable failure
/// (OTLP: UNAVAILABLE and the like over gRPC, 429/502/503/504 over HTTP),
/// after 100, 200 and 400 ms.
const RETRIES: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The gRPC method spans are exported with.
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Where and how batches are sent.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// OTLP/gRPC to this endpoint (`http://` or `https://`).
    Grpc { endpoint: String },
    /// OTLP/HTTP: protobuf bodies posted to this URL.
    Http { url: String },
}

/// Why an exporter could not be built or a batch not sent.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExportError {
    #[error("invalid endpoint: {0}")]
    Endpoint(#[source] tonic::transport::Error),
    #[error("the collector answered {0}")]
    Grpc(tonic::Status),
    #[error("the collector answered HTTP {0}")]
    HttpStatus(http::StatusCode),
    #[error("{0}")]
    Http(#[source] opentelemetry_http::HttpError),
    #[error("cannot build the request: {0}")]
    Request(#[source] http::Error),
    #[error("cannot compress the request: {0}")]
    Gzip(#[source] std::io::Error),
}

impl ExportError {
    /// Whether OTLP says to send the same batch again.
    fn is_retryable(&self) -> bool {
        use tonic::Code;
        match self {
            ExportError::Grpc(status) => matches!(
                status.code(),
                Code::Cancelled
                    | Code::DeadlineExceeded
                    | Code::Aborted
                    | Code::OutOfRange
                    | Code::Unavailable
                    | Code::DataLoss
            ),
            ExportError::HttpStatus(code) => matches!(code.as_u16(), 429 | 502 | 503 | 504),
            ExportError::Http(_) => true,
            ExportError::Endpoint(_) | ExportError::Request(_) | ExportError::Gzip(_) => false,
        }
    }
}

/// The OTLP exporter. Must be built on the export runtime (its clients'
/// connections live there) and exports only from it ([`OnExportThread`]).
#[derive(Debug)]
pub(crate) struct OtlpExporter {
    resource: EncodedResource,
    client: Client,
    gzip: bool,
    /// Sent with every request (`OTEL_EXPORTER_OTLP_HEADERS`).
    headers: http::HeaderMap,
    /// The size of the last request, to size the next one's buffer.
    last_size: std::sync::atomic::AtomicUsize,
}

// One per exporter, built once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Client {
    Grpc(tonic::client::Grpc<tonic::transport::Channel>),
    Http {
        client: opentelemetry_http::hyper::HyperClient,
        url: String,
    },
}

impl OtlpExporter {
    /// A lazy client (nothing connects before the first export).
    pub(crate) fn new(
        transport: &Transport,
        gzip: bool,
        headers: http::HeaderMap,
        timeout: Duration,
    ) -> Result<OtlpExporter, ExportError> {
        let client = match transport {
            Transport::Grpc { endpoint } => {
                let mut channel = tonic::transport::Endpoint::from_shared(endpoint.clone())
                    .map_err(ExportError::Endpoint)?
                    .timeout(timeout);
                if endpoint.starts_with("https://") {
                    channel = channel
                        .tls_config(tonic::transport::ClientTlsConfig::new())
                        .map_err(ExportError::Endpoint)?;
                }
                let mut grpc = tonic::client::Grpc::new(channel.connect_lazy());
                if gzip {
                    grpc = grpc
                        .send_compressed(CompressionEncoding::Gzip)
                        .accept_compressed(CompressionEncoding::Gzip);
                }
                Client::Grpc(grpc)
            }
            Transport::Http { url } => Client::Http {
                client: opentelemetry_http::hyper::HyperClient::with_default_connector(
                    timeout, None,
                ),
                url: url.clone(),
            },
        };
        Ok(OtlpExporter {
            resource: EncodedResource::default(),
            client,
            gzip,
            headers,
            last_size: 0.into(),
        })
    }

    /// Sends one encoded request, once.
    async fn send(&self, body: Bytes) -> Result<(), ExportError> {
        match &self.client {
            Client::Grpc(grpc) => {
                let mut grpc = grpc.clone();
                grpc.ready()
                    .await
                    .map_err(|e| ExportError::Grpc(tonic::Status::from_error(e.into())))?;
                let mut request = tonic::Request::new(body);
                *request.metadata_mut() =
                    tonic::metadata::MetadataMap::from_headers(self.headers.clone());
                grpc.unary(
                    request,
                    http::uri::PathAndQuery::from_static(EXPORT_PATH),
                    PassThrough,
                )
                .await
                .map_err(ExportError::Grpc)?;
                Ok(())
            }
            Client::Http { client, url } => {
                use opentelemetry_http::HttpClient as _;
                let mut request = http::Request::post(url.as_str());
                for (name, value) in &self.headers {
                    request = request.header(name, value);
                }
                request = request.header(http::header::CONTENT_TYPE, "application/x-protobuf");
                let body = if self.gzip {
                    request = request.header(http::header::CONTENT_ENCODING, "gzip");
                    gzip(&body).map_err(ExportError::Gzip)?
                } else {
                    body
                };
                let request = request.body(body).map_err(ExportError::Request)?;
                let response = client
                    .send_bytes(request)
                    .await
                    .map_err(ExportError::Http)?;
                if response.status().is_success() {
                    Ok(())
                } else {
                    Err(ExportError::HttpStatus(response.status()))
                }
            }
        }
    }
}

/// The headers of every export request, from
/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`:
/// `key=value` pairs separated by commas, blanks around each trimmed, values
/// percent-decoded. An entry that is not `key=value`, or not a valid header
/// name or value, is refused, naming the variable and the entry.
pub(crate) fn headers(
    var: impl Fn(&str) -> Option<String>,
) -> Result<http::HeaderMap, HeaderEntryError> {
    let mut headers = http::HeaderMap::new();
    let Some((name, list)) = [
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ]
    .into_iter()
    .find_map(|name| var(name).map(|value| (name, value))) else {
        return Ok(headers);
    };
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let refused = || HeaderEntryError {
            variable: name,
            entry: entry.to_owned(),
        };
        let (key, value) = entry.split_once('=').ok_or_else(refused)?;
        let key = http::HeaderName::from_bytes(key.trim().as_bytes()).map_err(|_| refused())?;
        let value =
            http::HeaderValue::from_bytes(&percent_decode(value.trim())).map_err(|_| refused())?;
        headers.append(key, value);
    }
    Ok(headers)
}

/// An entry of an OTLP headers variable that is not a valid `key=value`
/// header.
#[derive(Debug, thiserror::Error)]
#[error("{variable}: {entry:?} is not a valid key=value header")]
pub(crate) struct HeaderEntryError {
    /// The variable it came from.
    variable: &'static str,
    /// The entry as written, trimmed.
    entry: String,
}

/// `%XX` sequences decoded; anything else (a `%` not followed by two hex
/// digits) kept as it is.
fn percent_decode(s: &str) -> Vec<u8> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied().and_then(hex),
            bytes.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

fn gzip(body: &[u8]) -> std::io::Result<Bytes> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 4),
        flate2::Compression::default(),
    );
    encoder.write_all(body)?;
    Ok(encoder.finish()?.into())
}

impl SpanExporter for OtlpExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        use std::sync::atomic::Ordering;
        let mut body = Vec::with_capacity(self.last_size.load(Ordering::Relaxed) + 1024);
        encode::export_request(&mut body, &self.resource, &batch);
        // The spans are freed here, on the thread that encoded them.
        drop(batch);
        self.last_size.store(body.len(), Ordering::Relaxed);
        let body = Bytes::from(body);
        let mut backoff = FIRST_BACKOFF;
        let mut retries = 0;
        loop {
            match self.send(body.clone()).await {
                Ok(()) => return Ok(()),
                Err(error) if error.is_retryable() && retries < RETRIES => {
                    retries += 1;
                    tracing::debug!(%error, retries, "retrying a span export");
                    tokio::time::sleep(backoff).await;
                    backoff *= 2;
                }
                Err(error) => {
                    return Err(OTelSdkError::InternalFailure(format!(
                        "exporting spans: {error}"
                    )));
                }
            }
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = EncodedResource::new(resource);
    }
}

/// A codec that sends bytes already encoded as they are, and reads any
/// answer as success (an `ExportTraceServiceResponse`, whose optional
/// partial-success counts are not looked at).
#[derive(Debug, Clone, Copy)]
struct PassThrough;

impl tonic::codec::Codec for PassThrough {
    type Encode = Bytes;
    type Decode = ();
    type Encoder = PassThrough;
    type Decoder = PassThrough;

    fn encoder(&mut self) -> PassThrough {
        PassThrough
    }

    fn decoder(&mut self) -> PassThrough {
        PassThrough
    }
}

impl tonic::codec::Encoder for PassThrough {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut as _;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for PassThrough {
    type Item = ();
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<()>, tonic::Status> {
        use bytes::Buf as _;
        src.advance(src.remaining());
        Ok(Some(()))
    }
}

/// A current-thread runtime on a thread of its own (`otlp-export`) that
/// encodes and sends the batches, until stopped.
#[derive(Debug)]
pub(crate) struct ExportRuntime {
    pub(crate) handle: tokio::runtime::Handle,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl ExportRuntime {
    /// Builds the runtime, makes `build` run inside it (so the client's
    /// background tasks are spawned there), and starts its thread.
    pub(crate) fn start<T>(build: impl FnOnce() -> T) -> std::io::Result<(ExportRuntime, T)> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let built = {
            let _entered = runtime.enter();
            build()
        };
        let handle = runtime.handle().clone();
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
                handle,
                stop: Mutex::new(Some(stop)),
                thread: Mutex::new(Some(thread)),
            },
            built,
        ))
    }

    pub(crate) fn stop(&self) {
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

/// The exporter, run on the export runtime. The batch processor's thread
/// only hands each batch over; the encoding, the sending and the freeing of
/// the spans all happen on the `otlp-export` thread (split over two
/// threads, every structure was freed by the other thread, and the
/// allocator's slow path was half of the batch thread's time:
/// docs/decisions/0002-own-otlp-exporter.md).
#[derive(Debug)]
pub(crate) struct OnExportThread<E> {
    pub(crate) inner: Arc<E>,
    pub(crate) runtime: tokio::runtime::Handle,
}

impl<E: SpanExporter + 'static> SpanExporter for OnExportThread<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let inner = self.inner.clone();
        self.runtime
            .spawn(async move { inner.export(batch).await })
            .await
            .unwrap_or_else(|e| {
                Err(OTelSdkError::InternalFailure(format!(
                    "the export task ended: {e}"
                )))
            })
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Exports are awaited one at a time by the batch thread, which is
        // also the caller here: no export holds a clone now.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_from_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert!(headers(env(&[])).expect("none").is_empty());
        let parsed = headers(env(&[(
            "OTEL_EXPORTER_OTLP_HEADERS",
            " api-key = secret%20one , x-tenant=a%2Cb,,odd=100%",
        )]))
        .expect("valid");
        assert_eq!(parsed["api-key"], "secret one");
        assert_eq!(parsed["x-tenant"], "a,b");
        assert_eq!(parsed["odd"], "100%");
        // The traces variable wins.
        let traces = headers(env(&[
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "b=2"),
        ]))
        .expect("valid");
        assert_eq!(traces.len(), 1);
        assert_eq!(traces["b"], "2");
        let refused =
            headers(env(&[("OTEL_EXPORTER_OTLP_HEADERS", "a=1,novalue")])).expect_err("refused");
        assert_eq!(refused.variable, "OTEL_EXPORTER_OTLP_HEADERS");
        assert_eq!(refused.entry, "novalue");
        assert!(refused.to_string().contains("novalue"), "{refused}");
        assert!(headers(env(&[("OTEL_EXPORTER_OTLP_HEADERS", "bad name=1")])).is_err());
        assert!(headers(env(&[("OTEL_EXPORTER_OTLP_HEADERS", "a=%0a")])).is_err());
    }

    #[test]
    fn only_what_otlp_says_is_transient_is_retried() {
        assert!(ExportError::Grpc(tonic::Status::unavailable("down")).is_retryable());
        assert!(!ExportError::Grpc(tonic::Status::invalid_argument("bad")).is_retryable());
        assert!(!ExportError::Grpc(tonic::Status::unauthenticated("who")).is_retryable());
        assert!(ExportError::HttpStatus(http::StatusCode::SERVICE_UNAVAILABLE).is_retryable());
        assert!(ExportError::HttpStatus(http::StatusCode::TOO_MANY_REQUESTS).is_retryable());
        assert!(!ExportError::HttpStatus(http::StatusCode::BAD_REQUEST).is_retryable());
    }
}
