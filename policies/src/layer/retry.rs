//! Retries of one call, in the manner of gRPC's retry design (gRFC A6), inside
//! the call's deadline and the plugin's retry budget.

// Why our own layer and not tower's `Retry`: docs/decisions/0003-retry-and-budget.md.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use tonic::Code;
use tower::{Layer, Service};

use super::{PolicyError, PolicyRequest, lock};
use crate::backoff::{backoff_delay, should_retry};
use crate::budget::RetryBudget;
use crate::policy::RetryPolicy;

/// Hears what the retry layer does, for metrics and traces. Every method does
/// nothing by default. Called from within the call's future, so the caller's
/// span is current.
pub trait RetryObserver: Send + Sync {
    /// Attempt number `attempt` (1 = the first) is about to be sent.
    fn on_attempt(&self, attempt: u32) {
        let _ = attempt;
    }

    /// The previous attempt failed with `code`, and attempt number `attempt`
    /// (2 or more) will be sent after `delay`.
    fn on_retry(&self, attempt: u32, code: Code, delay: Duration) {
        let _ = (attempt, code, delay);
    }

    /// A retry that the policy and the deadline allowed was refused by the
    /// retry budget; the call ends with the last attempt's error.
    fn on_budget_exhausted(&self) {}
}

/// A [`RetryObserver`] that hears nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopRetryObserver;

impl RetryObserver for NoopRetryObserver {}

/// Applies [`Retry`]. Every service this layer makes shares one budget.
#[derive(Clone)]
pub struct RetryLayer {
    policy: RetryPolicy,
    budget: Arc<Mutex<RetryBudget>>,
    observer: Arc<dyn RetryObserver>,
    random: fn() -> f64,
}

impl RetryLayer {
    /// Retries as `policy` says, each retry withdrawn from `budget` (the
    /// plugin's, shared by all its calls), with no observer.
    pub fn new(policy: RetryPolicy, budget: Arc<Mutex<RetryBudget>>) -> Self {
        RetryLayer {
            policy,
            budget,
            observer: Arc::new(NoopRetryObserver),
            random: crate::rng::random,
        }
    }

    /// The same, reporting to `observer`.
    pub fn with_observer(mut self, observer: Arc<dyn RetryObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// The same, with the jitter drawn from `random` (tests only).
    #[cfg(test)]
    pub(crate) fn with_random(mut self, random: fn() -> f64) -> Self {
        self.random = random;
        self
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Retry {
            inner,
            shared: Arc::new(Shared {
                policy: self.policy.clone(),
                budget: self.budget.clone(),
                observer: self.observer.clone(),
                random: self.random,
            }),
        }
    }
}

/// Sends each call as up to `max_attempts` attempts, each on a clone of the
/// request. After a failed attempt it tries again only if all of these hold:
/// the error may be retried at all ([`PolicyError::retry_code`]: not a refusal
/// by an open circuit, for one); its code is retryable and attempts are left
/// ([`should_retry`]); the backoff
/// ([`backoff_delay`]) ends before the request's deadline; and the budget allows
/// a retry. Otherwise the call ends with the last attempt's error.
///
/// Each call deposits once in the budget, when it is made.
#[derive(Clone)]
pub struct Retry<S> {
    inner: S,
    shared: Arc<Shared>,
}

struct Shared {
    policy: RetryPolicy,
    budget: Arc<Mutex<RetryBudget>>,
    observer: Arc<dyn RetryObserver>,
    random: fn() -> f64,
}

impl Shared {
    /// The wait before attempt `attempt + 1`, if there is to be one after
    /// attempt `attempt` failed with `error`.
    fn retry_after<E: PolicyError>(
        &self,
        attempt: u32,
        error: &E,
        deadline: tokio::time::Instant,
    ) -> Option<Duration> {
        let code = error.retry_code()?;
        if !should_retry(&self.policy, attempt, code) {
            return None;
        }
        let delay = backoff_delay(&self.policy, attempt, (self.random)());
        let now = tokio::time::Instant::now();
        // An attempt that would start at the deadline could not finish.
        if now.checked_add(delay).is_none_or(|start| start >= deadline) {
            return None;
        }
        if !lock(&self.budget).try_withdraw(now.into_std()) {
            self.observer.on_budget_exhausted();
            return None;
        }
        self.observer.on_retry(attempt + 1, code, delay);
        Some(delay)
    }

    /// The request of attempt `attempt`.
    fn attempt<R: PolicyRequest>(&self, request: &R, attempt: u32) -> R {
        let mut request = request.clone();
        request.set_attempt(attempt);
        self.observer.on_attempt(attempt);
        request
    }
}

impl<S, R> Service<R> for Retry<S>
where
    S: Service<R> + Clone,
    S::Error: PolicyError,
    R: PolicyRequest,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        lock(&self.shared.budget).deposit(super::now());
        // The ready service makes the first attempt and goes with the future
        // for the others; the clone left here must be made ready again.
        let clone = self.inner.clone();
        let mut service = std::mem::replace(&mut self.inner, clone);
        let future = service.call(self.shared.attempt(&request, 1));
        ResponseFuture {
            state: State::Calling { future },
            service,
            request,
            attempt: 1,
            last_error: None,
            shared: self.shared.clone(),
        }
    }
}

pin_project! {
    /// The response of [`Retry`]: the attempts of one call and the waits
    /// between them.
    pub struct ResponseFuture<S, R>
    where
        S: Service<R>,
    {
        #[pin]
        state: State<S::Future>,
        service: S,
        request: R,
        // The number of the attempt in flight or last made.
        attempt: u32,
        // The error of the attempt last made, while waiting for the next.
        last_error: Option<S::Error>,
        shared: Arc<Shared>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // An attempt is in flight.
        Calling { #[pin] future: F },
        // Waiting before the next attempt.
        Backoff { #[pin] sleep: tokio::time::Sleep },
        // Waiting for the service to be ready for the next attempt.
        Ready,
    }
}

impl<S, R> Future for ResponseFuture<S, R>
where
    S: Service<R>,
    S::Error: PolicyError,
    R: PolicyRequest,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Calling { future } => {
                    let error = match ready!(future.poll(cx)) {
                        Ok(response) => return Poll::Ready(Ok(response)),
                        Err(error) => error,
                    };
                    // A retry that the deadline overtook on its way to the
                    // plugin was never made: the call ends with the error
                    // that caused the retry, as the check before the call
                    // below does when it sees the deadline first.
                    if error.deadline_before_call()
                        && let Some(cause) = this.last_error.take()
                    {
                        return Poll::Ready(Err(cause));
                    }
                    let deadline = this.request.deadline();
                    match this.shared.retry_after(*this.attempt, &error, deadline) {
                        Some(delay) => {
                            *this.last_error = Some(error);
                            this.state.set(State::Backoff {
                                sleep: tokio::time::sleep(delay),
                            });
                        }
                        None => return Poll::Ready(Err(error)),
                    }
                }
                StateProj::Backoff { sleep } => {
                    ready!(sleep.poll(cx));
                    this.state.set(State::Ready);
                }
                StateProj::Ready => {
                    ready!(this.service.poll_ready(cx))?;
                    // The backoff ended before the deadline, but a late timer
                    // or a service slow to be ready can push the start past
                    // it: the call then ends with the error that caused the
                    // retry, not a deadline error about an attempt never made.
                    if tokio::time::Instant::now() >= this.request.deadline()
                        && let Some(error) = this.last_error.take()
                    {
                        return Poll::Ready(Err(error));
                    }
                    *this.attempt += 1;
                    let request = this.shared.attempt(this.request, *this.attempt);
                    let future = this.service.call(request);
                    this.state.set(State::Calling { future });
                }
            }
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

    use super::RetryLayer;
    use crate::budget::RetryBudget;
    use crate::layer::test_support::{Counts, Req, assert_no_request, finish, next, upstream};
    use crate::layer::{CircuitBreakerLayer, is_circuit_rejection};
    use crate::policy::{BreakerPolicy, BudgetPolicy, RetryPolicy};
    use crate::{Breaker, RetryObserver};

    const MS: Duration = Duration::from_millis(1);

    fn policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            initial_backoff: 100 * MS,
            max_backoff: 2_000 * MS,
            backoff_multiplier: 2.0,
            retryable_codes: vec![Code::Unavailable],
        }
    }

    fn budget(ratio: f64, min_per_second: u32) -> Arc<Mutex<RetryBudget>> {
        let policy = BudgetPolicy {
            ratio,
            min_per_second,
        };
        Arc::new(Mutex::new(RetryBudget::new(&policy, super::super::now())))
    }

    /// A retry layer that takes every jitter at its middle and reports to the
    /// returned counts; its budget funds ten retries per call.
    fn layer(policy: RetryPolicy) -> (RetryLayer, Arc<Counts>) {
        layer_with(policy, budget(10.0, 0))
    }

    fn layer_with(
        policy: RetryPolicy,
        budget: Arc<Mutex<RetryBudget>>,
    ) -> (RetryLayer, Arc<Counts>) {
        let counts = Arc::new(Counts::default());
        let observer: Arc<dyn RetryObserver> = counts.clone();
        let layer = RetryLayer::new(policy, budget)
            .with_observer(observer)
            .with_random(|| 0.5);
        (layer, counts)
    }

    #[tokio::test(start_paused = true)]
    async fn unavailable_twice_then_ok_takes_three_attempts() {
        let (upstream, mut handle) = upstream();
        let (layer, counts) = layer(policy(3));
        let mut service = layer.layer(upstream);
        let start = Instant::now();
        let call = tokio::spawn(
            service
                .ready()
                .await
                .expect("ready")
                .call(Req::within(10 * 1_000 * MS)),
        );

        for attempt in 1..=2 {
            let (request, reply) = next(&mut handle).await;
            assert_eq!(request.attempt, attempt);
            reply.send_error(Status::unavailable("down"));
        }
        let (request, reply) = next(&mut handle).await;
        assert_eq!(request.attempt, 3);
        reply.send_response("ok");

        assert_eq!(finish(call).await.expect("ok"), "ok");
        assert_eq!(counts.attempts(), [1, 2, 3]);
        // Half of 100 ms, then half of 200 ms.
        assert_eq!(
            counts.retries(),
            [
                (2, Code::Unavailable, 50 * MS),
                (3, Code::Unavailable, 100 * MS)
            ]
        );
        let waited = start.elapsed();
        assert!((150 * MS..152 * MS).contains(&waited), "waited {waited:?}");
        assert_eq!(counts.exhausted(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn non_retryable_code_takes_exactly_one_attempt() {
        let (upstream, mut handle) = upstream();
        let (layer, counts) = layer(policy(3));
        let mut service = layer.layer(upstream);
        let call = tokio::spawn(
            service
                .ready()
                .await
                .expect("ready")
                .call(Req::within(10 * 1_000 * MS)),
        );

        let (_, reply) = next(&mut handle).await;
        reply.send_error(Status::invalid_argument("bad spec"));
        let status = finish(call).await.expect_err("the plugin's answer");
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), "bad spec");
        assert_eq!(counts.attempts(), [1]);
        assert!(counts.retries().is_empty());
        drop(service);
        assert!(handle.next_request().await.is_none(), "no second attempt");
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_run_out_with_the_last_error() {
        let (upstream, mut handle) = upstream();
        let (layer, counts) = layer(policy(2));
        let mut service = layer.layer(upstream);
        let call = tokio::spawn(
            service
                .ready()
                .await
                .expect("ready")
                .call(Req::within(10 * 1_000 * MS)),
        );

        for message in ["first", "second"] {
            let (_, reply) = next(&mut handle).await;
            reply.send_error(Status::unavailable(message));
        }
        let status = finish(call).await.expect_err("attempts ran out");
        assert_eq!(
            (status.code(), status.message()),
            (Code::Unavailable, "second")
        );
        assert_eq!(counts.attempts(), [1, 2]);
        drop(service);
        assert!(handle.next_request().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_that_could_only_start_after_the_deadline_ends_with_its_cause() {
        // The backoff (50 ms) ends well before the deadline (300 ms), but the
        // service is not ready again until after it.
        let (upstream, mut handle) = upstream();
        let (layer, counts) = layer(policy(3));
        let mut service = layer.layer(upstream);
        let call = tokio::spawn(
            service
                .ready()
                .await
                .expect("ready")
                .call(Req::within(300 * MS)),
        );
        let (_, reply) = next(&mut handle).await;
        handle.allow(0);
        reply.send_error(Status::unavailable("down"));
        tokio::time::sleep(400 * MS).await;
        handle.allow(1);
        let status = finish(call).await.expect_err("unavailable");
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.message(), "down");
        assert_eq!(counts.attempts(), [1]);
        drop(service);
        assert!(handle.next_request().await.is_none(), "no second attempt");
    }

    #[tokio::test(start_paused = true)]
    async fn no_attempt_starts_that_the_deadline_cannot_hold() {
        // A 1 s backoff, jittered to 500 ms. (time left at the call, attempts made)
        let table = [(400 * MS, 1), (500 * MS, 1), (501 * MS, 2), (600 * MS, 2)];
        for (left, attempts) in table {
            let policy = RetryPolicy {
                max_attempts: 2,
                initial_backoff: 1_000 * MS,
                max_backoff: 1_000 * MS,
                ..policy(2)
            };
            let (upstream, mut handle) = upstream();
            let (layer, counts) = layer(policy);
            let mut service = layer.layer(upstream);
            let start = Instant::now();
            let call = tokio::spawn(
                service
                    .ready()
                    .await
                    .expect("ready")
                    .call(Req::within(left)),
            );
            for _ in 0..attempts {
                let (_, reply) = next(&mut handle).await;
                reply.send_error(Status::unavailable("down"));
            }
            let status = finish(call).await.expect_err("unavailable");
            assert_eq!(status.code(), Code::Unavailable);
            assert_eq!(counts.attempts().len(), attempts, "with {left:?} left");
            if attempts == 1 {
                assert_eq!(start.elapsed(), Duration::ZERO, "gave up at once");
            }
            drop(service);
            assert!(handle.next_request().await.is_none(), "with {left:?} left");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_exhausted_budget_stops_retries() {
        let (upstream, mut handle) = upstream();
        // One retry per call, nothing for the time that passes.
        let (layer, counts) = layer_with(policy(5), budget(1.0, 0));
        let mut service = layer.layer(upstream);

        let call = tokio::spawn(
            service
                .ready()
                .await
                .expect("ready")
                .call(Req::within(10 * 1_000 * MS)),
        );
        for _ in 0..2 {
            let (_, reply) = next(&mut handle).await;
            reply.send_error(Status::unavailable("down"));
        }
        let status = finish(call).await.expect_err("budget spent");
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(counts.attempts(), [1, 2]);
        assert_eq!(counts.exhausted(), 1);

        // The next call deposits again, which funds one more retry.
        let call = tokio::spawn(
            service
                .ready()
                .await
                .expect("ready")
                .call(Req::within(10 * 1_000 * MS)),
        );
        for _ in 0..2 {
            let (_, reply) = next(&mut handle).await;
            reply.send_error(Status::unavailable("down"));
        }
        assert!(finish(call).await.is_err());
        assert_eq!(counts.attempts(), [1, 2, 1, 2]);
        assert_eq!(counts.exhausted(), 2);
        assert_no_request(&mut handle);
    }

    #[tokio::test(start_paused = true)]
    async fn circuit_rejections_are_not_retried() {
        let (upstream, mut handle) = upstream();
        let breaker = Arc::new(Mutex::new(Breaker::new(&BreakerPolicy {
            consecutive_failures: 2,
            open_for: 10_000 * MS,
            max_open_for: 60_000 * MS,
        })));
        let (layer, counts) = layer(policy(5));
        let mut service =
            layer.layer(CircuitBreakerLayer::new("plug".into(), breaker).layer(upstream));

        let call = tokio::spawn(
            service
                .ready()
                .await
                .expect("ready")
                .call(Req::within(10 * 1_000 * MS)),
        );
        // Two failed attempts open the circuit; the third attempt is refused by
        // it and ends the call, though attempts and budget are left.
        for _ in 0..2 {
            let (_, reply) = next(&mut handle).await;
            reply.send_error(Status::unavailable("down"));
        }
        let status = finish(call).await.expect_err("circuit open");
        assert!(is_circuit_rejection(&status), "{status:?}");
        assert_eq!(counts.attempts(), [1, 2, 3]);
        assert_eq!(counts.retries().len(), 2);
        assert_no_request(&mut handle);

        // While open, a call is refused at once, with one attempt.
        let start = Instant::now();
        let status = service
            .ready()
            .await
            .expect("ready")
            .call(Req::within(10 * 1_000 * MS))
            .await
            .expect_err("circuit open");
        assert!(is_circuit_rejection(&status));
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(counts.attempts(), [1, 2, 3, 1]);
        assert_no_request(&mut handle);
    }

    #[test]
    fn only_marked_statuses_are_circuit_rejections() {
        assert!(!is_circuit_rejection(&Status::unavailable(
            "circuit open: x"
        )));
        let mut status = Status::unavailable("x");
        status.metadata_mut().insert(
            crate::layer::CIRCUIT_METADATA_KEY,
            "closed".parse().expect("ascii"),
        );
        assert!(!is_circuit_rejection(&status));
    }
}
