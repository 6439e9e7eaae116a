//! OTLP export over both transports, to real receivers on loopback: an
//! OTLP/HTTP one (hyper, decoding `ExportTraceServiceRequest` with prost and
//! gunzipping when `Content-Encoding` says so) and an OTLP/gRPC one
//! (opentelemetry-proto's TraceService, accepting gzip).

use std::io::Read;
use std::net::SocketAddr;

use http_body_util::BodyExt;
use opentelemetry::trace::{Span as _, Tracer as _};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use rollout_telemetry::{Tracer, TracingOptions};
use tokio::sync::mpsc;

/// One export request as the receiver saw it.
#[derive(Debug)]
struct Received {
    path: String,
    content_type: Option<String>,
    /// `Content-Encoding` over HTTP, `grpc-encoding` over gRPC.
    encoding: Option<String>,
    span_names: Vec<String>,
    service: Option<String>,
}

fn summarize(
    path: String,
    content_type: Option<String>,
    encoding: Option<String>,
    request: ExportTraceServiceRequest,
) -> Received {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let service = request
        .resource_spans
        .iter()
        .flat_map(|rs| rs.resource.iter().flat_map(|r| r.attributes.iter()))
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s.clone()),
            _ => None,
        });
    let span_names = request
        .resource_spans
        .into_iter()
        .flat_map(|rs| rs.scope_spans)
        .flat_map(|ss| ss.spans)
        .map(|s| s.name)
        .collect();
    Received {
        path,
        content_type,
        encoding,
        span_names,
        service,
    }
}

fn header(headers: &http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// An OTLP/HTTP receiver on 127.0.0.1:0: each POST is decoded and sent on.
async fn http_receiver() -> (SocketAddr, mpsc::UnboundedReceiver<Received>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let tx = tx.clone();
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await?.to_bytes();
                            let encoding = header(&parts.headers, "content-encoding");
                            let body = if encoding.as_deref() == Some("gzip") {
                                let mut plain = Vec::new();
                                flate2::read::GzDecoder::new(&body[..])
                                    .read_to_end(&mut plain)
                                    .expect("a gzip body");
                                plain
                            } else {
                                body.to_vec()
                            };
                            let request = ExportTraceServiceRequest::decode(&body[..])
                                .expect("an ExportTraceServiceRequest");
                            let _ = tx.send(summarize(
                                parts.uri.path().to_string(),
                                header(&parts.headers, "content-type"),
                                encoding,
                                request,
                            ));
                            let answer = ExportTraceServiceResponse::default().encode_to_vec();
                            Ok::<_, hyper::Error>(
                                http::Response::builder()
                                    .header("content-type", "application/x-protobuf")
                                    .body(http_body_util::Full::new(bytes::Bytes::from(answer)))
                                    .unwrap(),
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, rx)
}

/// Makes one span named `name`, then shuts the tracer down, which exports
/// it (off the runtime: shutdown blocks).
async fn export_one_span(tracer: Tracer, name: &'static str) {
    let mut span = tracer.sdk().start(name);
    span.end();
    tokio::task::spawn_blocking(move || tracer.shutdown())
        .await
        .unwrap();
}

fn env(pairs: &'static [(&'static str, String)]) -> impl Fn(&str) -> Option<String> {
    move |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.clone())
    }
}

async fn export_over_http(compression: &str) -> Received {
    let (addr, mut rx) = http_receiver().await;
    let vars: &'static [(&'static str, String)] = Box::leak(Box::new([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_string()),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", compression.to_string()),
        ("OTEL_SERVICE_NAME", "otlp-http-test".to_string()),
    ]));
    let options = TracingOptions::from_lookup("unused", env(vars));
    let tracer = Tracer::new("test", &options).expect("the exporter builds");
    assert!(tracer.is_exporting());
    export_one_span(tracer, "over-http").await;
    received(&mut rx).await
}

/// The receiver's first request; the exporter gave up after its 10 s
/// timeout when nothing came in 20 s.
async fn received(rx: &mut mpsc::UnboundedReceiver<Received>) -> Received {
    tokio::time::timeout(std::time::Duration::from_secs(20), rx.recv())
        .await
        .expect("an export request within 20 s")
        .expect("the receiver got the export")
}

#[tokio::test]
async fn http_protobuf_posts_spans_to_v1_traces() {
    let got = export_over_http("none").await;
    assert_eq!(got.path, "/v1/traces");
    assert_eq!(got.content_type.as_deref(), Some("application/x-protobuf"));
    assert_eq!(got.encoding, None);
    assert_eq!(got.span_names, ["over-http"]);
    assert_eq!(got.service.as_deref(), Some("otlp-http-test"));
}

#[tokio::test]
async fn http_protobuf_with_gzip_sends_a_gzip_body() {
    let got = export_over_http("gzip").await;
    assert_eq!(got.path, "/v1/traces");
    assert_eq!(got.encoding.as_deref(), Some("gzip"));
    assert_eq!(got.span_names, ["over-http"]);
}

/// An OTLP/gRPC receiver that accepts gzip and reports each request's
/// `grpc-encoding`.
#[derive(Clone)]
struct GrpcReceiver(mpsc::UnboundedSender<Received>);

#[tonic::async_trait]
impl TraceService for GrpcReceiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let encoding = request
            .metadata()
            .get("grpc-encoding")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let _ = self.0.send(summarize(
            String::new(),
            None,
            encoding,
            request.into_inner(),
        ));
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tokio::test]
async fn grpc_with_gzip_sends_gzip_messages() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(
                TraceServiceServer::new(GrpcReceiver(tx))
                    .accept_compressed(tonic::codec::CompressionEncoding::Gzip),
            )
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let vars: &'static [(&'static str, String)] = Box::leak(Box::new([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}")),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip".to_string()),
    ]));
    let options = TracingOptions::from_lookup("otlp-grpc-test", env(vars));
    let tracer = Tracer::new("test", &options).expect("the exporter builds");
    export_one_span(tracer, "over-grpc").await;
    let got = received(&mut rx).await;
    assert_eq!(got.encoding.as_deref(), Some("gzip"));
    assert_eq!(got.span_names, ["over-grpc"]);
    assert_eq!(got.service.as_deref(), Some("otlp-grpc-test"));
}

/// A collector that accepts connections and then says nothing stalls the
/// export on the export thread; the batch queue (2048 spans by default)
/// fills, and ending more spans drops them instead of waiting. If ending a
/// span blocked, this test would never finish.
#[test]
fn a_stalled_collector_drops_spans_and_never_blocks_the_caller() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted_tx, accepted) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            // Kept open and never read: the h2 handshake never completes.
            held.push(stream);
            let _ = accepted_tx.send(());
        }
    });
    let mut options = TracingOptions::new("stalled-test");
    options.otlp_endpoint = Some(format!("http://{addr}"));
    let tracer = Tracer::new("test", &options).expect("the exporter builds");
    let end_spans = |n: usize| {
        for _ in 0..n {
            tracer.sdk().start("hook").end();
        }
    };
    // One full batch makes the batch thread start an export, which connects.
    end_spans(512);
    accepted.recv().expect("the exporter connects");
    // The export is now stuck: four queues' worth must be dropped, not waited for.
    end_spans(4 * 2048);
    // Shutting down would wait for the stuck export's timeout; the test is
    // over once the spans above were ended.
    std::mem::forget(tracer);
}

/// A collector that answers UNAVAILABLE to the first export (a restart, a
/// full pipeline) and takes the second.
#[derive(Clone)]
struct UnavailableOnce {
    sent: mpsc::UnboundedSender<Received>,
    refused: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[tonic::async_trait]
impl TraceService for UnavailableOnce {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let first = !self.refused.swap(true, std::sync::atomic::Ordering::SeqCst);
        let _ = self.sent.send(summarize(
            if first { "refused" } else { "taken" }.to_string(),
            None,
            None,
            request.into_inner(),
        ));
        if first {
            return Err(tonic::Status::unavailable("restarting"));
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tokio::test]
async fn a_batch_the_collector_could_not_take_is_sent_again() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(UnavailableOnce {
                sent: tx,
                refused: Default::default(),
            }))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let mut options = TracingOptions::new("otlp-retry-test");
    options.otlp_endpoint = Some(format!("http://{addr}"));
    let tracer = Tracer::new("test", &options).expect("the exporter builds");
    export_one_span(tracer, "retried").await;
    let refused = received(&mut rx).await;
    assert_eq!(refused.path, "refused");
    assert_eq!(refused.span_names, ["retried"]);
    let taken = received(&mut rx).await;
    assert_eq!(taken.path, "taken");
    assert_eq!(taken.span_names, ["retried"]);
}
