//! The standard gRPC health service (`grpc.health.v1.Health`, tonic-health)
//! on the gateway's gRPC port, so a kubelet `grpc` probe or a load balancer
//! can ask the gateway itself.
//!
//! The overall status (`""`) and the `RolloutPluginService` status are
//! SERVING exactly when `/readyz` is 200: a registry is loaded and the gateway
//! is not draining. The gateway serves HTTP/2 streams itself
//! ([`crate::transport::server`]), so this module carries a stream to tonic's generated
//! `HealthServer` and its answer (a unary `Check` or a streaming `Watch`) back.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

use crate::registry::Registry;
use crate::transport::grpc::Payload;

/// The path prefix of the health service's methods.
pub const PATH_PREFIX: &str = "/grpc.health.v1.Health/";

type HealthService =
    BoxCloneSyncService<http::Request<RecvBody>, http::Response<tonic::body::Body>, Infallible>;

/// The health service and its reporter.
#[derive(Clone)]
pub struct Health {
    reporter: HealthReporter,
    service: HealthService,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health").finish_non_exhaustive()
    }
}

impl Health {
    /// A health service whose statuses start NOT_SERVING.
    pub async fn new() -> Health {
        let (reporter, server) = tonic_health::server::health_reporter();
        let health = Health {
            reporter,
            service: BoxCloneSyncService::new(server),
        };
        health.set(false).await;
        health
    }

    async fn set(&self, serving: bool) {
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        self.reporter.set_service_status("", status).await;
        self.reporter
            .set_service_status(rollout_proto::SERVICE_NAME, status)
            .await;
    }

    /// Follows the registry's readiness until the registry is dropped.
    pub fn track(&self, registry: &Registry) -> tokio::task::JoinHandle<()> {
        let mut ready = registry.watch_ready();
        let health = self.clone();
        tokio::spawn(async move {
            loop {
                let serving = *ready.borrow_and_update();
                health.set(serving).await;
                if ready.changed().await.is_err() {
                    return;
                }
            }
        })
    }

    /// Serves one health call on an HTTP/2 stream, to its end (a `Watch`
    /// lasts until the caller resets it or the connection closes).
    pub async fn serve_stream(
        self,
        request: http::Request<h2::RecvStream>,
        mut respond: h2::server::SendResponse<Payload>,
    ) {
        let request = request.map(RecvBody);
        let Ok(response) = self.service.oneshot(request).await;
        let (parts, mut body) = response.into_parts();
        let head = http::Response::from_parts(parts, ());
        let end_at_head = body.is_end_stream();
        let mut stream = match respond.send_response(head, end_at_head) {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "could not answer a health call");
                return;
            }
        };
        if end_at_head {
            return;
        }
        while let Some(frame) = body.frame().await {
            let sent = match frame {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => stream.send_data(crate::transport::grpc::raw(data), false),
                    Err(frame) => match frame.into_trailers() {
                        Ok(trailers) => stream.send_trailers(trailers),
                        Err(_) => Ok(()),
                    },
                },
                Err(status) => {
                    let mut trailers = http::HeaderMap::new();
                    crate::transport::grpc::put_status(
                        &mut trailers,
                        status.code(),
                        status.message(),
                    );
                    stream.send_trailers(trailers)
                }
            };
            if sent.is_err() {
                // The caller went away (a Watch that was cancelled).
                return;
            }
        }
    }
}

/// An HTTP/2 request body as an `http_body::Body`, returning flow-control
/// credit as data is read.
pub struct RecvBody(h2::RecvStream);

impl Body for RecvBody {
    type Data = Bytes;
    type Error = h2::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, h2::Error>>> {
        match self.0.poll_data(cx) {
            Poll::Ready(Some(Ok(data))) => {
                let _ = self.0.flow_control().release_capacity(data.len());
                return Poll::Ready(Some(Ok(Frame::data(data))));
            }
            Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(error))),
            Poll::Ready(None) => {}
            Poll::Pending => return Poll::Pending,
        }
        match self.0.poll_trailers(cx) {
            Poll::Ready(Ok(Some(trailers))) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Poll::Ready(Ok(None)) => Poll::Ready(None),
            Poll::Ready(Err(error)) => Poll::Ready(Some(Err(error))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }
}
