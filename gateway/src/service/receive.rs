//! Receive limits and deadline, the first layer under the rescue: the
//! caller's `grpc-timeout` read strictly, then the request message received
//! whole within the sooner of that deadline and the receive timeout, what is
//! buffered meanwhile held against the connection's and the gateway's
//! pending-bytes pools. Every service on the port sits below it. A call
//! refused here is counted by reason (`rollout_gateway_calls_refused`), as
//! it never reaches the layers that observe calls.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{HeaderMap, StatusCode};
use tokio::time::Instant;
use tower::Service;

use super::Received;
use crate::error::{CallFailure, GatewayError};
use crate::telemetry::Metrics;
use crate::telemetry::metrics::Refused;
use crate::transport::grpc::{self, FrameError, ReceiveError};
use crate::transport::send::Answer;
use crate::transport::server::Call;

/// How large a request may be and how long it may take to arrive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReceiveLimits {
    pub(crate) max_message_bytes: usize,
    /// A request must arrive whole within this, or the caller's deadline if sooner.
    pub(crate) receive_timeout: Duration,
}

/// See the module doc.
#[derive(Debug, Clone)]
pub(crate) struct ReceiveLayer {
    limits: ReceiveLimits,
    metrics: Arc<Metrics>,
}

impl ReceiveLayer {
    /// Refusals are counted in `metrics`.
    pub(crate) fn new(limits: ReceiveLimits, metrics: Arc<Metrics>) -> ReceiveLayer {
        ReceiveLayer { limits, metrics }
    }
}

impl<S> tower::Layer<S> for ReceiveLayer {
    type Service = Receive<S>;

    fn layer(&self, inner: S) -> Receive<S> {
        Receive {
            inner,
            limits: self.limits,
            metrics: self.metrics.clone(),
        }
    }
}

/// See the module doc.
#[derive(Debug, Clone)]
pub(crate) struct Receive<S> {
    inner: S,
    limits: ReceiveLimits,
    metrics: Arc<Metrics>,
}

impl<S> Service<Call> for Receive<S>
where
    S: Service<Received, Response = Answer, Error = CallFailure> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Answer;
    type Error = CallFailure;
    type Future = BoxFuture<'static, Result<Answer, CallFailure>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), CallFailure>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: Call) -> Self::Future {
        let mut inner = self.inner.clone();
        let limits = self.limits;
        let metrics = self.metrics.clone();
        Box::pin(async move {
            match receive(call, limits).await {
                Ok(received) => inner.call(received).await,
                Err(refusal) => {
                    // Counted here: a refused call never reaches the layers
                    // that observe calls.
                    metrics.record_refused(refusal.reason);
                    refusal.answer
                }
            }
        })
    }
}

/// A call refused before its request arrived whole: why (a metric label),
/// and what the caller is answered.
struct Refusal {
    reason: Refused,
    answer: Result<Answer, CallFailure>,
}

impl Refusal {
    fn failed(reason: Refused, error: GatewayError) -> Refusal {
        Refusal {
            reason,
            answer: Err(error.into()),
        }
    }
}

impl From<ReceiveError> for Refusal {
    fn from(e: ReceiveError) -> Refusal {
        let reason = match &e {
            ReceiveError::Frame(FrameError::TooLarge { .. }) => Refused::TooLarge,
            ReceiveError::Frame(_) => Refused::Malformed,
            ReceiveError::Stream { .. } => Refused::Stream,
            ReceiveError::Held(_) => Refused::PendingBytes,
        };
        Refusal::failed(reason, e.into())
    }
}

/// Receives a call's request whole within the limits, or refuses the call.
async fn receive(call: Call, limits: ReceiveLimits) -> Result<Received, Refusal> {
    let began = Instant::now();
    let Call {
        head,
        mut body,
        peer,
        held,
    } = call;
    if !is_grpc(&head.headers) {
        // Read (a little of) the body first: a body that breaks HTTP/2's
        // rules (a content-length its DATA contradicts) is then a stream
        // error, as RFC 9113 §8.1.1 requires.
        let until = began + limits.receive_timeout;
        drain(&mut body, until)
            .await
            .map_err(|e| Refusal::failed(Refused::Stream, e))?;
        return Err(Refusal {
            reason: Refused::NotGrpc,
            answer: Ok(Answer::Http(StatusCode::UNSUPPORTED_MEDIA_TYPE)),
        });
    }
    // The caller's deadline covers the whole call, receiving the request
    // included: a request that stops arriving cannot hold the stream (and
    // what it sent so far) past it.
    let deadline = caller_timeout(&head.headers)
        .map_err(|e| Refusal::failed(Refused::Header, e))?
        .map(|d| began + d);
    let own = began + limits.receive_timeout;
    let (until, by_caller) = match deadline {
        Some(d) if d <= own => (d, true),
        _ => (own, false),
    };
    let collect = grpc::collect_reserved(&mut body, limits.max_message_bytes, &held);
    let message = match tokio::time::timeout_at(until, collect).await {
        Ok(Ok((message, _))) => message,
        Ok(Err(e)) => {
            if let ReceiveError::Held(exceeded) = &e {
                tracing::warn!(peer = %peer.addr, error = %exceeded, "request refused: too many bytes still arriving");
            }
            return Err(e.into());
        }
        Err(_) => {
            let reason = if by_caller {
                Refused::Deadline
            } else {
                Refused::ReceiveTimeout
            };
            let waited = until.saturating_duration_since(began);
            let error = GatewayError::ReceiveTimeout { waited, by_caller };
            return Err(Refusal::failed(reason, error));
        }
    };
    Ok(Received {
        head,
        message,
        began,
        deadline,
        peer,
    })
}

/// The most bytes of a request that is not gRPC read before it is refused.
const DRAIN_BYTES: usize = 64 * 1024;

/// Reads and drops a body, up to [`DRAIN_BYTES`] and until `until`.
async fn drain(body: &mut h2::RecvStream, until: Instant) -> Result<(), GatewayError> {
    let mut read = 0;
    let reading = async {
        while read <= DRAIN_BYTES {
            match body.data().await {
                Some(Ok(chunk)) => {
                    read += chunk.len();
                    let _ = body.flow_control().release_capacity(chunk.len());
                }
                Some(Err(e)) => return Err(GatewayError::RequestStream(e)),
                None => break,
            }
        }
        Ok(())
    };
    tokio::time::timeout_at(until, reading)
        .await
        .unwrap_or(Ok(()))
}

fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(grpc::CONTENT_TYPE))
}

/// The caller's `grpc-timeout`: absent, or exactly one well-formed value.
fn caller_timeout(headers: &HeaderMap) -> Result<Option<Duration>, GatewayError> {
    let mut values = headers.get_all(grpc::GRPC_TIMEOUT).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = |why| GatewayError::Header {
        name: "grpc-timeout",
        why,
    };
    if values.next().is_some() {
        return Err(bad("is sent more than once"));
    }
    value
        .to_str()
        .ok()
        .and_then(grpc::parse_timeout)
        .map(Some)
        .ok_or(bad("is not up to 8 digits and a unit (H, M, S, m, u, n)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_timeout_is_absent_or_one_well_formed_value() {
        let mut h = HeaderMap::new();
        assert_eq!(caller_timeout(&h).ok(), Some(None));
        h.insert("grpc-timeout", "250m".parse().expect("value"));
        assert_eq!(
            caller_timeout(&h).ok(),
            Some(Some(Duration::from_millis(250)))
        );
        h.append("grpc-timeout", "1S".parse().expect("value"));
        let e = caller_timeout(&h).expect_err("repeated");
        assert!(
            e.to_string()
                .contains("\"grpc-timeout\" is sent more than once"),
            "{e}"
        );
        for bad in ["", "10", "10x", "123456789S", "-1S", "1.5S"] {
            let mut h = HeaderMap::new();
            h.insert("grpc-timeout", bad.parse().expect("value"));
            assert!(caller_timeout(&h).is_err(), "{bad:?}");
        }
    }
}
