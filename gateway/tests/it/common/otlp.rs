//! An OTLP/gRPC trace receiver (opentelemetry-proto's TraceService) that
//! keeps every span it is sent, as a collector would.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;

/// An OTLP/gRPC trace receiver that keeps every span it is sent.
#[derive(Clone, Default)]
pub struct Receiver {
    /// (service.name, span), in arrival order.
    pub spans: Arc<Mutex<Vec<(String, Span)>>>,
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| kv.value.as_ref())
                .and_then(|v| match &v.value {
                    Some(AnyValue::StringValue(s)) => Some(s.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for ss in rs.scope_spans {
                spans.extend(ss.spans.into_iter().map(|s| (service.clone(), s)));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Serves a receiver on 127.0.0.1:0.
pub async fn receiver() -> (Receiver, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let receiver = Receiver::default();
    let service = TraceServiceServer::new(receiver.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (receiver, addr)
}

/// A string or integer attribute of `span`, as a string.
pub fn attribute(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(AnyValue::StringValue(s)) => Some(s.clone()),
            Some(AnyValue::IntValue(i)) => Some(i.to_string()),
            _ => None,
        })
}

/// Lowercase hex of an id.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
