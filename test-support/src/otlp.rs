//! An OTLP/gRPC trace receiver (opentelemetry-proto's `TraceService`) on
//! 127.0.0.1 that keeps every span it is sent, as a collector would, and
//! readers of what a span carries.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

/// Every span received, with its resource's `service.name`, in arrival
/// order.
#[derive(Clone, Default)]
pub struct Receiver {
    received: Arc<Mutex<Vec<(String, Span)>>>,
}

impl Receiver {
    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<Span> {
        self.spans_with_service()
            .into_iter()
            .map(|(_, span)| span)
            .collect()
    }

    /// Every span received so far as (`service.name`, span), in arrival
    /// order.
    pub fn spans_with_service(&self) -> Vec<(String, Span)> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut received = self.received.lock().unwrap_or_else(PoisonError::into_inner);
        for rs in request.into_inner().resource_spans {
            let service = service_name(rs.resource.as_ref()).unwrap_or_default();
            for ss in rs.scope_spans {
                received.extend(ss.spans.into_iter().map(|s| (service.clone(), s)));
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Serves a receiver on 127.0.0.1:0.
pub async fn receiver() -> (Receiver, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds 127.0.0.1:0");
    let addr = listener.local_addr().expect("a bound address");
    let receiver = Receiver::default();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (receiver, addr)
}

fn service_name(resource: Option<&Resource>) -> Option<String> {
    value(&resource?.attributes, "service.name")
}

fn value(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(AnyValue::StringValue(s)) => Some(s.clone()),
            Some(AnyValue::IntValue(i)) => Some(i.to_string()),
            Some(AnyValue::BoolValue(b)) => Some(b.to_string()),
            _ => None,
        })
}

/// A string, integer or boolean attribute of `span`, as a string.
pub fn attribute(span: &Span, key: &str) -> Option<String> {
    value(&span.attributes, key)
}

/// An attribute of `span`'s event `name`.
pub fn event_attribute(span: &Span, name: &str, key: &str) -> Option<String> {
    span.events
        .iter()
        .find(|e| e.name == name)
        .and_then(|e| value(&e.attributes, key))
}

/// `span`'s status: its code and description.
pub fn status(span: &Span) -> (StatusCode, String) {
    let status = span.status.clone().unwrap_or_default();
    (
        StatusCode::try_from(status.code).unwrap_or(StatusCode::Unset),
        status.message,
    )
}

/// Lowercase hex of a trace or span id.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
