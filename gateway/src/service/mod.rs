//! The gateway's server side: every call on the gRPC port goes down one
//! stack of layers, built in [`server_stack`], health checks included.
//!
//! ```text
//! Rescue     the one place a failure becomes a gRPC status: the
//!            failure of any layer below becomes a trailers-only answer
//! Receive    receive limits and deadline: the caller's grpc-timeout, the
//!            message whole within it, its bytes held against the pools;
//!            what it refuses is counted here, by reason
//! Dispatch   by path: the health service, or the plugin service below
//! Observe    the call's server span, log context and metrics
//! Resolve    the target header and the caller's hub, resolved in one
//!            registry snapshot
//! Route      the caller's request checked and decoded, then the plugins
//!            called through the fan-out
//! ```
//!
//! The transport ([`crate::transport::server`]) drives the stack per HTTP/2
//! stream and sends what it answers. Not made by Rescue: a successful call's
//! OK trailers (Route), the health service's own answers (passed on as
//! tonic-health made them), and HTTP 415 to a request that is not gRPC
//! (Receive).

mod caller_checks;
pub(crate) mod health;
mod observe;
mod receive;
mod rescue;
mod resolve;
mod route;
#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::HeaderMap;
use tokio::time::Instant;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder};

use crate::error::{CallFailure, GatewayError};
use crate::hooks::HookKind;
use crate::registry::{Registry, Target};
use crate::telemetry::trace::ServerSpan;
use crate::transport::grpc::Payload;
use crate::transport::send::Answer;
use crate::transport::server::{Call, Peer};

pub(crate) use health::Health;
pub(crate) use receive::ReceiveLimits;

/// The server's whole stack: a cheap-to-clone service the transport drives.
pub(crate) type ServerStack = BoxCloneSyncService<Call, Answer, Infallible>;

/// The path prefix of every method of the plugin service.
const PATH_PREFIX: &str = "/ocm.rolloutplugin.v1alpha1.RolloutPluginService/";

/// A call whose request message arrived whole.
#[derive(Debug)]
pub(crate) struct Received {
    pub(crate) head: http::request::Parts,
    /// The framed message (with its 5-byte prefix), as it arrived.
    pub(crate) message: Bytes,
    /// When the call began.
    pub(crate) began: Instant,
    /// The caller's deadline (`grpc-timeout`), if it sent one.
    pub(crate) deadline: Option<Instant>,
    pub(crate) peer: Arc<Peer>,
}

/// A plugin-service call on its way down, with its span.
#[derive(Debug)]
pub(crate) struct HookCall {
    hook: HookKind,
    call: Received,
    span: ServerSpan,
}

/// A plugin-service call resolved to its target.
#[derive(Debug)]
pub(crate) struct Routed {
    call: HookCall,
    target: Target,
}

/// A hook call's successful answer: its message, and the trailers that carry
/// its OK status.
#[derive(Debug)]
pub(crate) struct Answered {
    message: Payload,
    trailers: HeaderMap,
}

/// What comes back up to [`observe::Observe`]: the outcome, the span to
/// finish, and the name the call resolved to (a metric label).
pub(crate) struct Traced {
    outcome: Result<Answered, CallFailure>,
    span: ServerSpan,
    target: Option<String>,
}

/// Builds the stack every call on the gRPC port goes through, top to bottom.
pub(crate) fn server_stack(
    registry: Arc<Registry>,
    limits: ReceiveLimits,
    health: Health,
) -> ServerStack {
    let plugins = ServiceBuilder::new()
        // A span and metrics per hook call; outside resolution, so that an
        // unknown name or a refused header is traced and counted too.
        .layer(observe::ObserveLayer::new(registry.clone()))
        // One registry snapshot per call (calls in flight finish on theirs).
        .layer(resolve::ResolveLayer::new(registry.clone()))
        .service(route::Route::new(limits.max_message_bytes));
    let service = ServiceBuilder::new()
        // Outermost: whatever fails below is answered with a status made here.
        .layer(rescue::RescueLayer)
        // Before anything reads a request: every service on the port, health
        // included, gets its message whole within the limits, or not at all.
        .layer(receive::ReceiveLayer::new(
            limits,
            registry.telemetry().metrics.clone(),
        ))
        .service(Dispatch {
            health: health::HealthService::new(health),
            plugins,
        });
    BoxCloneSyncService::new(service)
}

/// Sends each call to the service its path names.
#[derive(Clone)]
struct Dispatch<P> {
    health: health::HealthService,
    plugins: P,
}

impl<P> Service<Received> for Dispatch<P>
where
    P: Service<Received, Response = Answer, Error = CallFailure> + Clone + Send + 'static,
    P::Future: Send + 'static,
{
    type Response = Answer;
    type Error = CallFailure;
    type Future = BoxFuture<'static, Result<Answer, CallFailure>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), CallFailure>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: Received) -> Self::Future {
        let path = call.head.uri.path();
        if path.starts_with(health::PATH_PREFIX) {
            return Box::pin(self.health.call(call));
        }
        if path.starts_with(PATH_PREFIX) {
            return Box::pin(self.plugins.call(call));
        }
        let unknown = GatewayError::UnknownMethod(path.to_string());
        Box::pin(async move { Err(unknown.into()) })
    }
}

/// The receive timeout's default.
pub(crate) const DEFAULT_RECEIVE_TIMEOUT: Duration = Duration::from_secs(30);
