//! The circuit breaker of one plugin as a layer: asks the [`Breaker`] before
//! each attempt and tells it how each attempt ended.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::{PolicyError, lock, now};
use crate::breaker::{Breaker, CallOutcome, Permit};

/// Picks the breaker of a request's scope (in the gateway's central mode,
/// the calling hub), so one scope's failures never open another's circuit.
pub(crate) type ScopedBreakers = Arc<dyn Fn(&str) -> Arc<Mutex<Breaker>> + Send + Sync>;

/// Applies [`CircuitBreaker`]. Every service this layer makes shares the one
/// breaker of the plugin, or, with [`CircuitBreakerLayer::with_scopes`], one
/// per request scope.
#[derive(Clone)]
pub struct CircuitBreakerLayer {
    name: Arc<str>,
    breaker: Arc<Mutex<Breaker>>,
    scoped: Option<ScopedBreakers>,
}

impl std::fmt::Debug for CircuitBreakerLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl CircuitBreakerLayer {
    /// Guards the calls to the plugin `name` (named in refusals) with
    /// `breaker`. Keep the `Arc` to show the breaker's state, or to carry it
    /// over a reload.
    pub fn new(name: String, breaker: Arc<Mutex<Breaker>>) -> Self {
        CircuitBreakerLayer {
            name: name.into(),
            breaker,
            scoped: None,
        }
    }

    /// A request with a scope ([`super::PolicyRequest::scope`]) meets the
    /// breaker `scoped` gives for it; one without, the plugin's breaker.
    pub fn with_scopes(mut self, scoped: ScopedBreakers) -> Self {
        self.scoped = Some(scoped);
        self
    }
}

impl<S> Layer<S> for CircuitBreakerLayer {
    type Service = CircuitBreaker<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker {
            inner,
            name: self.name.clone(),
            breaker: self.breaker.clone(),
            scoped: self.scoped.clone(),
        }
    }
}

/// Makes each call only if the breaker allows it; otherwise answers at once,
/// without calling the inner service, with [`PolicyError::circuit_open`].
///
/// The outcome of each call it makes is recorded when the call ends: `Ok` is a
/// success; an error is what [`PolicyError::outcome`] says; a call dropped
/// before it ended (the caller gave up) is neutral.
#[derive(Clone)]
pub struct CircuitBreaker<S> {
    inner: S,
    name: Arc<str>,
    breaker: Arc<Mutex<Breaker>>,
    scoped: Option<ScopedBreakers>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for CircuitBreaker<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("inner", &self.inner)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl<S, R> Service<R> for CircuitBreaker<S>
where
    S: Service<R>,
    S::Error: PolicyError,
    R: super::PolicyRequest,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let breaker = match (request.scope(), &self.scoped) {
            (Some(scope), Some(scoped)) => scoped(scope),
            _ => self.breaker.clone(),
        };
        let acquired = lock(&breaker).acquire(now());
        match acquired {
            Ok(permit) => ResponseFuture {
                inner: Some(self.inner.call(request)),
                guard: Some(Guard {
                    breaker,
                    permit: Some(permit),
                }),
                rejected: None,
            },
            Err(rejected) => ResponseFuture {
                inner: None,
                guard: None,
                rejected: Some(S::Error::circuit_open(&self.name, rejected)),
            },
        }
    }
}

/// Gives the permit back to the breaker exactly once: with the outcome when
/// the call ends, or as neutral when the call is dropped first.
struct Guard {
    breaker: Arc<Mutex<Breaker>>,
    permit: Option<Permit>,
}

impl Guard {
    fn record(&mut self, outcome: CallOutcome) {
        if let Some(permit) = self.permit.take() {
            lock(&self.breaker).record(permit, outcome, now(), crate::rng::random());
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.record(CallOutcome::Neutral);
    }
}

pin_project! {
    /// The response of [`CircuitBreaker`]: the call with its permit, or the
    /// refusal.
    pub struct ResponseFuture<F, E> {
        #[pin]
        inner: Option<F>,
        guard: Option<Guard>,
        rejected: Option<E>,
    }
}

impl<F, T, E> Future for ResponseFuture<F, E>
where
    F: Future<Output = Result<T, E>>,
    E: PolicyError,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.inner.as_pin_mut() {
            Some(inner) => {
                let output = std::task::ready!(inner.poll(cx));
                if let Some(mut guard) = this.guard.take() {
                    guard.record(match &output {
                        Ok(_) => CallOutcome::Success,
                        Err(error) => error.outcome(),
                    });
                }
                Poll::Ready(output)
            }
            None => match this.rejected.take() {
                Some(rejected) => Poll::Ready(Err(rejected)),
                None => panic!("circuit breaker response polled after completion"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tokio::time::Instant;
    use tonic::{Code, Status};
    use tower::{Layer, Service, ServiceExt};

    use super::CircuitBreakerLayer;
    use crate::breaker::{Breaker, BreakerState};
    use crate::layer::test_support::{Req, Upstream, assert_no_request, finish, next, upstream};
    use crate::layer::{CircuitBreaker, is_circuit_rejection};
    use crate::policy::BreakerPolicy;

    const SEC: Duration = Duration::from_secs(1);

    fn breaker() -> Arc<Mutex<Breaker>> {
        Arc::new(Mutex::new(Breaker::new(&BreakerPolicy {
            consecutive_failures: 3,
            open_for: 10 * SEC,
            max_open_for: 60 * SEC,
        })))
    }

    fn state(breaker: &Mutex<Breaker>) -> BreakerState {
        breaker.lock().expect("lock").state(crate::layer::now())
    }

    type Guarded = CircuitBreaker<Upstream>;

    /// Makes one call that the upstream answers with `answer`.
    async fn call_answered(
        service: &mut Guarded,
        handle: &mut crate::layer::test_support::Handle,
        answer: Result<&'static str, Status>,
    ) -> Result<&'static str, Status> {
        let call = tokio::spawn(service.ready().await.expect("ready").call(Req::within(SEC)));
        let (_, reply) = next(handle).await;
        match answer {
            Ok(response) => reply.send_response(response),
            Err(status) => reply.send_error(status),
        }
        finish(call).await
    }

    /// Makes one call that must be refused without reaching the upstream.
    async fn call_refused(
        service: &mut Guarded,
        handle: &mut crate::layer::test_support::Handle,
    ) -> Status {
        let status = service
            .ready()
            .await
            .expect("ready")
            .call(Req::within(SEC))
            .await
            .expect_err("refused");
        assert_no_request(handle);
        assert!(is_circuit_rejection(&status), "{status:?}");
        assert_eq!(status.code(), Code::Unavailable);
        status
    }

    /// A service whose circuit three failures have just opened.
    async fn opened() -> (
        Guarded,
        crate::layer::test_support::Handle,
        Arc<Mutex<Breaker>>,
    ) {
        let (upstream, mut handle) = upstream();
        let breaker = breaker();
        let mut service =
            CircuitBreakerLayer::new("plug-a".into(), breaker.clone()).layer(upstream);
        for _ in 0..3 {
            let result =
                call_answered(&mut service, &mut handle, Err(Status::unavailable("down"))).await;
            assert_eq!(result.expect_err("down").code(), Code::Unavailable);
        }
        assert_eq!(state(&breaker), BreakerState::Open);
        (service, handle, breaker)
    }

    #[tokio::test(start_paused = true)]
    async fn failures_open_the_circuit_and_it_refuses_without_calling() {
        let (mut service, mut handle, _) = opened().await;
        let start = Instant::now();
        let status = call_refused(&mut service, &mut handle).await;
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(
            status.message(),
            "circuit open: plug-a failed repeatedly; next probe in 10s"
        );
        tokio::time::advance(2_500 * Duration::from_millis(1)).await;
        let status = call_refused(&mut service, &mut handle).await;
        assert!(
            status.message().ends_with("next probe in 7.5s"),
            "{}",
            status.message()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_plugins_answers_do_not_open_the_circuit() {
        let (upstream, mut handle) = upstream();
        let breaker = breaker();
        let mut service =
            CircuitBreakerLayer::new("plug-a".into(), breaker.clone()).layer(upstream);
        for code in [
            Code::InvalidArgument,
            Code::NotFound,
            Code::FailedPrecondition,
            Code::ResourceExhausted,
            Code::Cancelled,
        ] {
            let result =
                call_answered(&mut service, &mut handle, Err(Status::new(code, "no"))).await;
            assert_eq!(result.expect_err("answer").code(), code);
        }
        // Neither do they break a run of failures.
        for code in [
            Code::Unavailable,
            Code::InvalidArgument,
            Code::DeadlineExceeded,
            Code::NotFound,
        ] {
            let _ = call_answered(&mut service, &mut handle, Err(Status::new(code, "x"))).await;
        }
        assert_eq!(state(&breaker), BreakerState::Closed);
        let _ = call_answered(&mut service, &mut handle, Err(Status::internal("x"))).await;
        assert_eq!(state(&breaker), BreakerState::Open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_success_resets_the_count() {
        let (upstream, mut handle) = upstream();
        let breaker = breaker();
        let mut service =
            CircuitBreakerLayer::new("plug-a".into(), breaker.clone()).layer(upstream);
        for answer in [
            Err(Status::unavailable("x")),
            Err(Status::unknown("x")),
            Ok("ok"),
        ] {
            let _ = call_answered(&mut service, &mut handle, answer).await;
        }
        for _ in 0..2 {
            let _ = call_answered(&mut service, &mut handle, Err(Status::unavailable("x"))).await;
        }
        assert_eq!(state(&breaker), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn one_probe_after_open_for_and_a_good_one_closes() {
        let (mut service, mut handle, breaker) = opened().await;
        tokio::time::advance(10 * SEC).await;
        assert_eq!(state(&breaker), BreakerState::HalfOpen);

        let probe = tokio::spawn(service.ready().await.expect("ready").call(Req::within(SEC)));
        let (_, reply) = next(&mut handle).await;
        // While the probe is in flight, everyone else is refused.
        let status = call_refused(&mut service, &mut handle).await;
        assert_eq!(
            status.message(),
            "circuit open: plug-a failed repeatedly; a probe call is in flight"
        );
        reply.send_response("ok");
        assert_eq!(finish(probe).await.expect("ok"), "ok");

        assert_eq!(state(&breaker), BreakerState::Closed);
        let result = call_answered(&mut service, &mut handle, Ok("again")).await;
        assert_eq!(result.expect("closed"), "again");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_reopens_for_about_twice_as_long() {
        let (mut service, mut handle, breaker) = opened().await;
        tokio::time::advance(10 * SEC).await;
        let result = call_answered(
            &mut service,
            &mut handle,
            Err(Status::deadline_exceeded("slow")),
        )
        .await;
        assert_eq!(result.expect_err("failed").code(), Code::DeadlineExceeded);
        assert_eq!(state(&breaker), BreakerState::Open);
        // 20 s with jitter: within [16 s, 24 s).
        tokio::time::advance(16 * SEC - Duration::from_millis(1)).await;
        let _ = call_refused(&mut service, &mut handle).await;
        tokio::time::advance(8 * SEC).await;
        let result = call_answered(&mut service, &mut handle, Ok("back")).await;
        assert_eq!(result.expect("probe"), "back");
        assert_eq!(state(&breaker), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_probe_lets_the_next_call_probe() {
        let (mut service, mut handle, breaker) = opened().await;
        tokio::time::advance(10 * SEC).await;
        let probe = service.ready().await.expect("ready").call(Req::within(SEC));
        let (_, _reply) = next(&mut handle).await;
        let _ = call_refused(&mut service, &mut handle).await;
        drop(probe);
        assert_eq!(state(&breaker), BreakerState::HalfOpen);
        let result = call_answered(&mut service, &mut handle, Ok("ok")).await;
        assert_eq!(result.expect("the next probe"), "ok");
        assert_eq!(state(&breaker), BreakerState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_answer_to_the_probe_is_neutral() {
        let (mut service, mut handle, breaker) = opened().await;
        tokio::time::advance(10 * SEC).await;
        let result = call_answered(&mut service, &mut handle, Err(Status::cancelled("gone"))).await;
        assert_eq!(result.expect_err("cancelled").code(), Code::Cancelled);
        assert_eq!(state(&breaker), BreakerState::HalfOpen);
        let result = call_answered(&mut service, &mut handle, Ok("ok")).await;
        assert_eq!(result.expect("the next probe"), "ok");
    }
}
