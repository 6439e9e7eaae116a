//! A do-nothing OTLP/gRPC trace receiver: `gwbench` points a traced gateway
//! at it (`OTEL_EXPORTER_OTLP_ENDPOINT`) to measure what exporting spans
//! costs. It counts the spans and export requests it is sent and discards
//! them, like a collector whose pipeline drops everything.
//!
//! It runs on the machine being measured, where a real collector would run
//! elsewhere, so it does as little as it can: it does not decode the spans
//! into messages (prost decoding cost about 3.4 µs of CPU per span, as much
//! as the gateway's whole export), it walks the protobuf of each
//! `ExportTraceServiceRequest` and counts the `spans` fields of its
//! `ScopeSpans`.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::server::TcpIncoming;

/// The largest export request accepted. The SDK's batches (512 spans by
/// default) are far below it.
const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// What a receiver got so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpanCounts {
    /// Spans, over every resource and scope.
    pub spans: u64,
    /// `Export` calls (batches).
    pub exports: u64,
}

/// The counters of a receiver; cheap to clone, shared with its server.
#[derive(Debug, Clone, Default)]
pub struct SpanCounter {
    spans: Arc<AtomicU64>,
    exports: Arc<AtomicU64>,
}

impl SpanCounter {
    /// The counts so far.
    pub fn counts(&self) -> SpanCounts {
        SpanCounts {
            spans: self.spans.load(Ordering::Relaxed),
            exports: self.exports.load(Ordering::Relaxed),
        }
    }

    /// Counts one export request, `ExportTraceServiceRequest` bytes.
    fn record(&self, request: &[u8]) -> Result<(), WireError> {
        let spans = count_spans(request)?;
        self.spans.fetch_add(spans, Ordering::Relaxed);
        self.exports.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The gRPC method spans are exported with.
const EXPORT_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// The receiver's gRPC service: `TraceService/Export`, over the bytes of
/// each request.
#[derive(Debug, Clone)]
struct TraceService(SpanCounter);

impl tonic::server::NamedService for TraceService {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<B> tower::Service<http::Request<B>> for TraceService
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let counter = self.0.clone();
        Box::pin(async move {
            if request.uri().path() != EXPORT_PATH {
                return Ok(
                    tonic::Status::unimplemented(request.uri().path().to_owned()).into_http(),
                );
            }
            let mut grpc =
                tonic::server::Grpc::new(Raw).max_decoding_message_size(MAX_MESSAGE_BYTES);
            Ok(grpc.unary(Export(counter), request).await)
        })
    }
}

/// `Export` itself.
struct Export(SpanCounter);

impl tonic::server::UnaryService<Bytes> for Export {
    type Response = ();
    type Future = BoxFuture<Result<tonic::Response<()>, tonic::Status>>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        // Counted before answering: once the exporter has its answer (and
        // the gateway has exited after its final flush), the count is final.
        let counted = self.0.record(request.get_ref());
        Box::pin(async move {
            counted
                .map(|()| tonic::Response::new(()))
                .map_err(|e| tonic::Status::invalid_argument(e.to_string()))
        })
    }
}

/// A codec that hands over each request's bytes and answers an empty
/// `ExportTraceServiceResponse` (no bytes: every field at its default).
#[derive(Debug, Clone, Copy)]
struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = ();
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = ();
    type Error = tonic::Status;

    fn encode(
        &mut self,
        (): (),
        _dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

/// A request that is not well-formed protobuf.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// It ends inside a field.
    #[error("the request ends inside a field")]
    Truncated,
    /// A wire type protobuf does not have (or the deprecated groups).
    #[error("wire type {0} is not supported")]
    WireType(u8),
}

/// The spans of an `ExportTraceServiceRequest`: the `spans` (2) of every
/// `scope_spans` (2) of every `resource_spans` (1), counted without
/// decoding them.
pub fn count_spans(request: &[u8]) -> Result<u64, WireError> {
    let mut spans = 0;
    for_each_field(request, |field, body| {
        if field == 1 {
            for_each_field(body, |field, body| {
                if field == 2 {
                    for_each_field(body, |field, _| {
                        if field == 2 {
                            spans += 1;
                        }
                        Ok(())
                    })?;
                }
                Ok(())
            })?;
        }
        Ok(())
    })?;
    Ok(spans)
}

/// Calls `f` with the number and the body of each length-delimited field
/// of the message `buf`, and skips the others.
fn for_each_field(
    mut buf: &[u8],
    mut f: impl FnMut(u64, &[u8]) -> Result<(), WireError>,
) -> Result<(), WireError> {
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let skip = match (key & 7) as u8 {
            0 => {
                varint(&mut buf)?;
                0
            }
            1 => 8,
            5 => 4,
            2 => {
                let len = usize::try_from(varint(&mut buf)?).map_err(|_| WireError::Truncated)?;
                let body = buf.get(..len).ok_or(WireError::Truncated)?;
                f(key >> 3, body)?;
                len
            }
            other => return Err(WireError::WireType(other)),
        };
        buf = buf.get(skip..).ok_or(WireError::Truncated)?;
    }
    Ok(())
}

/// A varint (prost's decoder: one source for the wire format).
fn varint(buf: &mut &[u8]) -> Result<u64, WireError> {
    prost::encoding::decode_varint(buf).map_err(|_| WireError::Truncated)
}

/// A running receiver: its address and counters. It serves on a thread of
/// its own, so it keeps answering while the caller's runtime is blocked
/// (say, in a guard that waits for the gateway to exit, which flushes its
/// spans to this receiver first). Stopped when dropped.
#[derive(Debug)]
pub struct SpanReceiver {
    /// Where it listens (plaintext HTTP/2).
    pub address: SocketAddr,
    /// What it got.
    pub counter: SpanCounter,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SpanReceiver {
    /// Serves a receiver on `address` (`127.0.0.1:0` for any free port).
    pub fn start(address: SocketAddr) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(address)?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let counter = SpanCounter::default();
        let service = TraceService(counter.clone());
        let (shutdown, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("otlp-receiver".to_owned())
            .spawn(move || {
                runtime.block_on(async move {
                    let incoming = match TcpListener::from_std(listener) {
                        Ok(listener) => TcpIncoming::from(listener).with_nodelay(Some(true)),
                        Err(error) => {
                            eprintln!("OTLP receiver failed: {error}");
                            return;
                        }
                    };
                    let server = tonic::transport::Server::builder()
                        .add_service(service)
                        .serve_with_incoming(incoming);
                    // Not a graceful shutdown: that would wait for the
                    // exporters' connections, which stay open.
                    tokio::select! {
                        result = server => {
                            if let Err(error) = result {
                                eprintln!("OTLP receiver failed: {error}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(Self {
            address,
            counter,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// The counts so far.
    pub fn counts(&self) -> SpanCounts {
        self.counter.counts()
    }
}

impl Drop for SpanReceiver {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    use super::*;

    fn request(scopes: &[usize]) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: scopes
                    .iter()
                    .map(|&n| ScopeSpans {
                        spans: vec![Span::default(); n],
                        ..ScopeSpans::default()
                    })
                    .collect(),
                ..ResourceSpans::default()
            }],
        }
    }

    #[test]
    fn counts_spans_without_decoding_them() {
        use prost::Message as _;
        let mut span = Span {
            name: "plugin mutate MutateManifestWork".to_owned(),
            trace_id: vec![7; 16],
            span_id: vec![8; 8],
            start_time_unix_nano: 1_700_000_000_000_000_000,
            ..Span::default()
        };
        span.attributes.push(Default::default());
        let mut request = request(&[3, 0, 2]);
        request.resource_spans[0].scope_spans[0].spans[1] = span;
        request
            .resource_spans
            .push(request.resource_spans[0].clone());
        let bytes = request.encode_to_vec();
        assert_eq!(count_spans(&bytes), Ok(10));
        assert_eq!(count_spans(&[]), Ok(0));
        assert_eq!(
            count_spans(&bytes[..bytes.len() - 1]),
            Err(WireError::Truncated)
        );
        assert_eq!(count_spans(&[0x0b]), Err(WireError::WireType(3)));
    }

    #[tokio::test]
    async fn counts_spans_over_otlp_grpc() {
        let receiver = SpanReceiver::start("127.0.0.1:0".parse().expect("address")).expect("bound");
        assert_eq!(receiver.counts(), SpanCounts::default());
        let mut client = TraceServiceClient::connect(format!("http://{}", receiver.address))
            .await
            .expect("connected");
        client.export(request(&[2, 3])).await.expect("exported");
        client.export(request(&[])).await.expect("exported");
        client.export(request(&[1])).await.expect("exported");
        assert_eq!(
            receiver.counts(),
            SpanCounts {
                spans: 6,
                exports: 3
            }
        );
        // Stopping does not wait for the client's open connection.
        drop(receiver);
        drop(client);
    }
}
