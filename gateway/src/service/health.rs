//! The standard gRPC health service (`grpc.health.v1.Health`, tonic-health)
//! on the gateway's gRPC port, so a kubelet `grpc` probe or a load balancer
//! can ask the gateway itself.
//!
//! The overall status (`""`) and the `RolloutPluginService` status are
//! SERVING exactly when `/readyz` is 200 ([`Registry::is_serving`]): a
//! registry is loaded, the gateway is not draining, and no registry entry
//! names a server that answered it is no plugin. It sits in the server's stack ([`crate::service`]) below
//! the receive limits like every service on the port: it gets a request
//! message already received whole, and answers a unary `Check`, or a
//! `Watch` stream, which lasts as long as the caller keeps it (or its
//! connection is idle or too old).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, BodyStream, Full};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

use super::Received;
use crate::error::CallFailure;
use crate::registry::Registry;
use crate::transport::grpc;
use crate::transport::send::{Answer, StreamItem};

/// How often the health service reads [`Registry::is_serving`] again
/// between changes of readiness.
const RECHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The path prefix of the health service's methods.
pub(crate) const PATH_PREFIX: &str = "/grpc.health.v1.Health/";

type TonicHealth =
    BoxCloneSyncService<http::Request<Full<Bytes>>, http::Response<tonic::body::Body>, Infallible>;

/// The health service and its reporter.
#[derive(Clone)]
pub(crate) struct Health {
    reporter: HealthReporter,
    service: TonicHealth,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health").finish_non_exhaustive()
    }
}

impl Health {
    /// A health service whose statuses start NOT_SERVING.
    pub(crate) async fn new() -> Health {
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

    /// Follows [`Registry::is_serving`] until the registry is dropped: at
    /// once on a change of readiness (a load, a drain), and within
    /// [`RECHECK_EVERY`] when a plugin's own Initialize says its server is
    /// no plugin (or, once fixed, loads it), which no event announces.
    pub(crate) fn track(&self, registry: &Arc<Registry>) -> tokio::task::JoinHandle<()> {
        let mut ready = registry.watch_ready();
        let registry = Arc::downgrade(registry);
        let health = self.clone();
        tokio::spawn(async move {
            let mut reported = None;
            loop {
                ready.borrow_and_update();
                let Some(serving) = registry.upgrade().map(|r| r.is_serving()) else {
                    return;
                };
                if reported != Some(serving) {
                    health.set(serving).await;
                    reported = Some(serving);
                }
                tokio::select! {
                    changed = ready.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    () = tokio::time::sleep(RECHECK_EVERY) => {}
                }
            }
        })
    }
}

/// The health service as a layer of the server's stack (cheap to clone:
/// the stack above is cloned per call).
#[derive(Debug, Clone)]
pub(crate) struct HealthService(Arc<Health>);

impl HealthService {
    pub(crate) fn new(health: Health) -> HealthService {
        HealthService(Arc::new(health))
    }

    /// Answers one health call whose request has arrived whole.
    pub(crate) fn call(
        &mut self,
        call: Received,
    ) -> BoxFuture<'static, Result<Answer, CallFailure>> {
        let service = self.0.service.clone();
        Box::pin(async move {
            let watch = call.head.uri.path().ends_with("/Watch");
            let request = http::Request::from_parts(call.head, Full::new(call.message));
            let Ok(response) = service.oneshot(request).await;
            let (parts, body) = response.into_parts();
            if parts.headers.contains_key(grpc::GRPC_STATUS) {
                return Ok(Answer::TrailersOnly(parts.headers));
            }
            if watch {
                return Ok(Answer::Stream(items(body).boxed()));
            }
            let collected = body.collect().await;
            Ok(match collected {
                Ok(collected) => {
                    let trailers = collected.trailers().cloned().unwrap_or_default();
                    Answer::Message {
                        message: grpc::raw(collected.to_bytes()),
                        trailers,
                    }
                }
                Err(status) => Answer::TrailersOnly(status_trailers(&status)),
            })
        })
    }
}

/// The frames of a streaming answer as stream items.
fn items(body: tonic::body::Body) -> impl futures::Stream<Item = StreamItem> + Send {
    BodyStream::new(body).map(|frame| match frame {
        Ok(frame) => match frame.into_data() {
            Ok(data) => StreamItem::Message(grpc::raw(data)),
            Err(frame) => StreamItem::Trailers(frame.into_trailers().unwrap_or_default()),
        },
        Err(status) => StreamItem::Trailers(status_trailers(&status)),
    })
}

/// tonic-health's own failure, passed on as it made it.
fn status_trailers(status: &tonic::Status) -> http::HeaderMap {
    let mut trailers = http::HeaderMap::new();
    grpc::put_status(&mut trailers, status.code(), status.message());
    trailers
}
