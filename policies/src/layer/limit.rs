//! A bound on the calls in flight to one plugin that sheds instead of queueing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::PolicyError;

/// Applies [`ConcurrencyLimit`]. Every service this layer makes (and every
/// clone of the layer) shares one bound: build one layer per plugin, and keep
/// it for as long as the plugin lives, so that the calls in flight stay
/// counted when its stack is rebuilt.
#[derive(Debug, Clone)]
pub struct ConcurrencyLimitLayer {
    bound: Arc<Bound>,
}

/// The calls in flight and the most allowed. The two are read and changed
/// apart: a call takes a place only while `in_flight < max`, in one
/// compare-and-swap; lowering `max` refuses new calls until enough of those
/// in flight end, and cuts none short.
#[derive(Debug)]
struct Bound {
    in_flight: AtomicUsize,
    max: AtomicUsize,
}

impl Bound {
    fn try_acquire(self: &Arc<Self>) -> Result<Place, usize> {
        let max = self.max.load(Ordering::Acquire);
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .map(|_| Place(self.clone()))
            .map_err(|_| max)
    }
}

/// A place taken in the bound, given back when dropped.
#[derive(Debug)]
struct Place(Arc<Bound>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConcurrencyLimitLayer {
    /// At most `max` calls in flight at once through the services of this
    /// layer (0 refuses every call).
    pub fn new(max: usize) -> Self {
        ConcurrencyLimitLayer {
            bound: Arc::new(Bound {
                in_flight: AtomicUsize::new(0),
                max: AtomicUsize::new(max),
            }),
        }
    }

    /// Changes the bound for the calls to come; the calls in flight stay
    /// counted (over a lowered bound, new calls are refused until enough end).
    pub fn set_max(&self, max: usize) {
        self.bound.max.store(max, Ordering::Release);
    }

    /// The bound now.
    pub fn max(&self) -> usize {
        self.bound.max.load(Ordering::Acquire)
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> usize {
        self.bound.in_flight.load(Ordering::Acquire)
    }
}

impl<S> Layer<S> for ConcurrencyLimitLayer {
    type Service = ConcurrencyLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit {
            inner,
            bound: self.bound.clone(),
        }
    }
}

/// Lets at most a bounded number of calls be in flight through it; a call
/// over the bound is answered at once with [`PolicyError::overloaded`] and
/// never reaches the inner service. A call holds its place from `call` until
/// its response future completes or is dropped.
#[derive(Debug, Clone)]
pub struct ConcurrencyLimit<S> {
    inner: S,
    bound: Arc<Bound>,
}

impl<S, R> Service<R> for ConcurrencyLimit<S>
where
    S: Service<R>,
    S::Error: PolicyError,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        // Readiness is the inner service's: waiting for a place would queue.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        match self.bound.try_acquire() {
            Ok(place) => ResponseFuture {
                inner: Some(self.inner.call(request)),
                place: Some(place),
                shed: None,
            },
            Err(max) => ResponseFuture {
                inner: None,
                place: None,
                shed: Some(S::Error::overloaded(max)),
            },
        }
    }
}

pin_project! {
    /// The response of [`ConcurrencyLimit`]: the inner call holding its place,
    /// or the refusal.
    pub struct ResponseFuture<F, E> {
        #[pin]
        inner: Option<F>,
        place: Option<Place>,
        shed: Option<E>,
    }
}

impl<F, T, E> Future for ResponseFuture<F, E>
where
    F: Future<Output = Result<T, E>>,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.inner.as_pin_mut() {
            Some(inner) => {
                let output = std::task::ready!(inner.poll(cx));
                // The call is over: free its place now, not when the future
                // is dropped.
                this.place.take();
                Poll::Ready(output)
            }
            None => match this.shed.take() {
                Some(shed) => Poll::Ready(Err(shed)),
                None => panic!("concurrency limit response polled after completion"),
            },
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

    #[tokio::test(start_paused = true)]
    async fn a_resized_bound_keeps_counting_the_calls_in_flight() {
        let (upstream, mut handle) = upstream();
        let layer = ConcurrencyLimitLayer::new(2);
        let mut service = layer.layer(upstream);
        let first = tokio::spawn(service.ready().await.expect("ready").call(Req::within(SEC)));
        let second = tokio::spawn(service.ready().await.expect("ready").call(Req::within(SEC)));
        let (_, reply_first) = next(&mut handle).await;
        let (_, reply_second) = next(&mut handle).await;

        // Lowered under the calls in flight: none is cut short, new ones are
        // refused until enough end.
        layer.set_max(1);
        let shed = service
            .ready()
            .await
            .expect("ready")
            .call(Req::within(SEC))
            .await;
        assert_eq!(
            shed.expect_err("shed").message(),
            "too many calls in flight (limit 1)"
        );
        reply_first.send_response("one");
        assert_eq!(finish(first).await.expect("ok"), "one");
        let shed = service
            .ready()
            .await
            .expect("ready")
            .call(Req::within(SEC))
            .await;
        assert_eq!(
            shed.expect_err("still full").code(),
            Code::ResourceExhausted
        );
        reply_second.send_response("two");
        assert_eq!(finish(second).await.expect("ok"), "two");
        assert_eq!(layer.in_flight(), 0);

        // Raised: a service made before the change sees it too.
        layer.set_max(3);
        let mut calls = Vec::new();
        for _ in 0..3 {
            calls.push(tokio::spawn(
                service.ready().await.expect("ready").call(Req::within(SEC)),
            ));
        }
        for _ in 0..3 {
            let (_, reply) = next(&mut handle).await;
            reply.send_response("ok");
        }
        for call in calls {
            assert_eq!(finish(call).await.expect("ok"), "ok");
        }
    }
}
