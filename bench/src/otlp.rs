//! A do-nothing OTLP/gRPC trace receiver: `gwbench` points a traced gateway
//! at it (`OTEL_EXPORTER_OTLP_ENDPOINT`) to measure what exporting spans
//! costs. It counts the spans and export requests it is sent and discards
//! them, like a collector whose pipeline drops everything.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
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

    /// Counts one export request.
    fn record(&self, request: &ExportTraceServiceRequest) {
        let spans: usize = request
            .resource_spans
            .iter()
            .flat_map(|resource| &resource.scope_spans)
            .map(|scope| scope.spans.len())
            .sum();
        self.spans.fetch_add(spans as u64, Ordering::Relaxed);
        self.exports.fetch_add(1, Ordering::Relaxed);
    }
}

#[tonic::async_trait]
impl TraceService for SpanCounter {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        // Counted before answering: once the exporter has its answer (and
        // the gateway has exited after its final flush), the count is final.
        self.record(request.get_ref());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
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
        let service =
            TraceServiceServer::new(counter.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES);
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
