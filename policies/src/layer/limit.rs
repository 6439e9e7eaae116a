//! A bound on the calls in flight to one plugin that sheds instead of queueing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;
use tower::{Layer, Service};

/// Applies [`ConcurrencyLimit`]. Every service this layer makes shares one
/// bound: build one layer per plugin.
#[derive(Debug, Clone)]
pub struct ConcurrencyLimitLayer {
    semaphore: Arc<Semaphore>,
    max: usize,
}

impl ConcurrencyLimitLayer {
    /// At most `max` calls in flight at once through the services of this
    /// layer (`max` is capped at [`Semaphore::MAX_PERMITS`]; 0 refuses every
    /// call).
    pub fn new(max: usize) -> Self {
        let max = max.min(Semaphore::MAX_PERMITS);
        ConcurrencyLimitLayer {
            semaphore: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> usize {
        self.max - self.semaphore.available_permits()
    }
}

impl<S> Layer<S> for ConcurrencyLimitLayer {
    type Service = ConcurrencyLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit {
            inner,
            semaphore: self.semaphore.clone(),
            max: self.max,
        }
    }
}

/// Lets at most a fixed number of calls be in flight through it; a call over
/// the bound is answered at once with RESOURCE_EXHAUSTED and never reaches the
/// inner service. A call holds its place from `call` until its response future
/// completes or is dropped.
#[derive(Debug, Clone)]
pub struct ConcurrencyLimit<S> {
    inner: S,
    semaphore: Arc<Semaphore>,
    max: usize,
}

impl<S, R> Service<R> for ConcurrencyLimit<S>
where
    S: Service<R, Error = Status>,
{
    type Response = S::Response;
    type Error = Status;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Status>> {
        // Readiness is the inner service's: waiting for a place would queue.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        match self.semaphore.clone().try_acquire_owned() {
            Ok(permit) => ResponseFuture {
                inner: Some(self.inner.call(request)),
                permit: Some(permit),
                shed: None,
            },
            Err(_) => ResponseFuture {
                inner: None,
                permit: None,
                shed: Some(Status::resource_exhausted(format!(
                    "too many calls in flight (limit {})",
                    self.max
                ))),
            },
        }
    }
}

pin_project! {
    /// The response of [`ConcurrencyLimit`]: the inner call holding its place,
    /// or the refusal.
    pub struct ResponseFuture<F> {
        #[pin]
        inner: Option<F>,
        permit: Option<OwnedSemaphorePermit>,
        shed: Option<Status>,
    }
}

impl<F, T> Future for ResponseFuture<F>
where
    F: Future<Output = Result<T, Status>>,
{
    type Output = Result<T, Status>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.inner.as_pin_mut() {
            Some(inner) => {
                let output = std::task::ready!(inner.poll(cx));
                // The call is over: free its place now, not when the future
                // is dropped.
                this.permit.take();
                Poll::Ready(output)
            }
            None => Poll::Ready(Err(this
                .shed
                .take()
                .unwrap_or_else(|| Status::internal("response polled after completion")))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic::Code;
    use tower::{Layer, Service, ServiceExt};

    use super::ConcurrencyLimitLayer;
    use crate::layer::test_support::{Req, assert_no_request, finish, next, upstream};

    const SEC: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn sheds_at_once_when_full_and_frees_the_place_when_a_response_completes() {
        let (upstream, mut handle) = upstream();
        let layer = ConcurrencyLimitLayer::new(2);
        let mut service = layer.layer(upstream);

        // Kept here, not spawned: its place must be freed when it completes,
        // while the future itself lives on.
        let mut first = Box::pin(service.ready().await.expect("ready").call(Req::within(SEC)));
        let second = tokio::spawn(service.ready().await.expect("ready").call(Req::within(SEC)));
        let (_, reply_first) = next(&mut handle).await;
        let (_, reply_second) = next(&mut handle).await;
        assert_eq!(layer.in_flight(), 2);

        let status = service
            .ready()
            .await
            .expect("ready")
            .call(Req::within(SEC))
            .await
            .expect_err("shed");
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(status.message(), "too many calls in flight (limit 2)");
        assert_no_request(&mut handle);

        reply_first.send_response("one");
        assert_eq!(first.as_mut().await.expect("ok"), "one");
        assert_eq!(layer.in_flight(), 1);
        let third = tokio::spawn(service.ready().await.expect("ready").call(Req::within(SEC)));
        let (_, reply_third) = next(&mut handle).await;
        reply_third.send_response("three");
        reply_second.send_error(tonic::Status::unavailable("down"));
        assert_eq!(finish(third).await.expect("ok"), "three");
        assert!(finish(second).await.is_err());
        assert_eq!(layer.in_flight(), 0, "an error frees the place too");
        drop(first);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_call_frees_its_place() {
        let (upstream, mut handle) = upstream();
        let layer = ConcurrencyLimitLayer::new(1);
        let mut service = layer.layer(upstream);

        let first = service.ready().await.expect("ready").call(Req::within(SEC));
        let _ = next(&mut handle).await;
        let shed = service
            .ready()
            .await
            .expect("ready")
            .call(Req::within(SEC))
            .await;
        assert_eq!(shed.expect_err("shed").code(), Code::ResourceExhausted);
        drop(first);
        assert_eq!(layer.in_flight(), 0);

        let second = tokio::spawn(service.ready().await.expect("ready").call(Req::within(SEC)));
        let (_, reply) = next(&mut handle).await;
        reply.send_response("two");
        assert_eq!(finish(second).await.expect("ok"), "two");
    }

    #[tokio::test(start_paused = true)]
    async fn the_services_of_one_layer_share_the_bound() {
        let (upstream_a, mut handle_a) = upstream();
        let (upstream_b, mut handle_b) = upstream();
        let layer = ConcurrencyLimitLayer::new(1);
        let mut a = layer.layer(upstream_a);
        let mut b = layer.layer(upstream_b);
        let _first = a.ready().await.expect("ready").call(Req::within(SEC));
        let _ = next(&mut handle_a).await;
        let shed = b.ready().await.expect("ready").call(Req::within(SEC)).await;
        assert_eq!(shed.expect_err("shed").code(), Code::ResourceExhausted);
        assert_no_request(&mut handle_b);
    }

    #[tokio::test(start_paused = true)]
    async fn a_bound_of_zero_refuses_everything() {
        let (upstream, mut handle) = upstream();
        let mut service = ConcurrencyLimitLayer::new(0).layer(upstream);
        let shed = service
            .ready()
            .await
            .expect("ready")
            .call(Req::within(SEC))
            .await;
        assert_eq!(
            shed.expect_err("shed").message(),
            "too many calls in flight (limit 0)"
        );
        assert_no_request(&mut handle);
    }
}
