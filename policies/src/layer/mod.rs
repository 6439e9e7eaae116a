//! The tower layers that enforce the policies on the calls to one plugin.
//!
//! The gateway stacks them per plugin, top to bottom:
//!
//! 1. [`ConcurrencyLimitLayer`]: bounds the calls in flight, each counted once
//!    for all its attempts and backoff; over the bound it answers
//!    RESOURCE_EXHAUSTED at once and never queues, so one slow plugin cannot
//!    hold the gateway's callers.
//! 2. [`RetryLayer`]: the attempts of one call and the backoff between them,
//!    inside the call's deadline and the plugin's retry budget. It sits below
//!    the limit so that retries do not take extra slots, and above the breaker
//!    so that each attempt meets the circuit.
//! 3. [`CircuitBreakerLayer`]: per attempt; fails fast while the circuit is
//!    open, and records the outcome of every attempt it lets through. It
//!    makes its refusals with [`PolicyError::circuit_open`], and the retry
//!    layer does not retry them because their [`PolicyError::retry_code`] is
//!    `None`: the gateway's typed error has a variant of its own for them.
//! 4. The upstream call itself, which bounds itself by the request's deadline
//!    and sends the time left on to the plugin as its `grpc-timeout`. That is
//!    why there is no deadline layer: the deadline travels in the request
//!    ([`PolicyRequest::deadline`]) and every layer above reads it there.
//!
//! Every service in the stack has one error type, which implements
//! [`PolicyError`]: the layers make their own refusals with it (open circuit,
//! too many calls in flight) and ask it, never its message, whether an error
//! may be retried and whether it counts against the plugin. The gateway's
//! typed call error implements it; so does `tonic::Status` in this crate's
//! own tests, classified by its code alone.

mod circuit;
mod limit;
mod retry;

use tonic::Code;

use crate::breaker::{CallOutcome, Rejected};

pub use circuit::{CircuitBreaker, CircuitBreakerLayer, ResponseFuture as CircuitResponseFuture};
pub use limit::{ConcurrencyLimit, ConcurrencyLimitLayer, ResponseFuture as LimitResponseFuture};
pub use retry::{
    NoopRetryObserver, ResponseFuture as RetryResponseFuture, Retry, RetryLayer, RetryObserver,
};

/// The metadata key that marks a refusal by an open circuit, in the
/// [`tonic::Status`] form of the errors the tests use.
#[cfg(test)]
pub(crate) const CIRCUIT_METADATA_KEY: &str = "ocm-rollout-circuit";

/// The error of the calls the policy layers guard: how the layers make their
/// own refusals, and what they need to know of every other error. The answers
/// must come from the error's kind, never from its message text.
pub trait PolicyError: Sized + Send + 'static {
    /// A call refused because the circuit of `plugin` is open.
    fn circuit_open(plugin: &str, rejected: Rejected) -> Self;

    /// A call refused because `max` calls are already in flight.
    fn overloaded(max: usize) -> Self;

    /// The code matched against the retry policy's retryable codes; `None`
    /// for an error that is never retried (a refusal by a layer, a deadline
    /// that passed before the call).
    fn retry_code(&self) -> Option<Code>;

    /// What the error says of the plugin's health, for its circuit breaker.
    fn outcome(&self) -> CallOutcome;

    /// Whether the deadline had passed before the plugin was called (the
    /// attempt was never made): a retry that ends so reports the error that
    /// caused it instead.
    fn deadline_before_call(&self) -> bool {
        false
    }
}

/// For the layers' own tests, `Status` as a policy error (the gateway's calls
/// use its typed `CallError`): an open circuit's refusal is UNAVAILABLE marked
/// with [`CIRCUIT_METADATA_KEY`], an overload RESOURCE_EXHAUSTED; every other
/// status is classified by its code ([`crate::breaker::is_failure`]).
#[cfg(test)]
impl PolicyError for tonic::Status {
    fn circuit_open(plugin: &str, rejected: Rejected) -> Self {
        let mut status = tonic::Status::unavailable(circuit_message(plugin, rejected));
        status.metadata_mut().insert(
            CIRCUIT_METADATA_KEY,
            tonic::metadata::MetadataValue::from_static("open"),
        );
        status
    }

    fn overloaded(max: usize) -> Self {
        tonic::Status::resource_exhausted(format!("too many calls in flight (limit {max})"))
    }

    fn retry_code(&self) -> Option<Code> {
        (!is_circuit_rejection(self)).then(|| self.code())
    }

    fn outcome(&self) -> CallOutcome {
        if crate::breaker::is_failure(self.code()) {
            CallOutcome::Failure
        } else {
            CallOutcome::Neutral
        }
    }
}

/// "circuit open: NAME failed repeatedly; …", the message of a refusal by the
/// open circuit of plugin `name`.
pub fn circuit_message(name: &str, rejected: Rejected) -> String {
    if rejected.probing {
        format!("circuit open: {name} failed repeatedly; a probe call is in flight")
    } else {
        // Whole milliseconds, rounded up, read better than nanoseconds.
        let retry_in = std::time::Duration::from_millis(
            u64::try_from(rejected.retry_in.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX),
        );
        format!("circuit open: {name} failed repeatedly; next probe in {retry_in:?}")
    }
}

/// A request that the policy layers can carry: cloned for each attempt, with a
/// deadline that every attempt and backoff must fit inside.
pub trait PolicyRequest: Clone + Send + 'static {
    /// The instant by which the whole call must be over, attempts and backoff
    /// included.
    fn deadline(&self) -> tokio::time::Instant;

    /// Called on the request of each attempt before it is sent, with the
    /// attempt's number (1 = the first), so that the inner service can tag its
    /// span or headers. Does nothing by default.
    fn set_attempt(&mut self, attempt: u32) {
        let _ = attempt;
    }

    /// The scope whose circuit breaker the request meets, when the breaker
    /// is kept per scope ([`CircuitBreakerLayer::with_scopes`]); `None` by
    /// default: the plugin's one breaker.
    fn scope(&self) -> Option<&str> {
        None
    }
}

/// Whether `status` is a refusal by an open circuit (made by
/// [`CircuitBreakerLayer`]) rather than an answer of the plugin.
#[cfg(test)]
pub(crate) fn is_circuit_rejection(status: &tonic::Status) -> bool {
    status
        .metadata()
        .get(CIRCUIT_METADATA_KEY)
        .is_some_and(|value| value == "open")
}

/// The time for the pure state machines: tokio's clock, so that tests with a
/// paused clock drive them too.
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// Locks state whose every update is whole (a few plain assignments, as a
/// policy's state and the gateway's tables are): a panic elsewhere while
/// holding the lock cannot leave it inconsistent, so a poisoned lock is used
/// as it is. The one helper for this in the workspace.
pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod test_support;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tonic::{Code, Status};
    use tower::{Service, ServiceBuilder, ServiceExt};

    use super::test_support::{Req, assert_no_request, finish, next, upstream};
    use super::*;
    use crate::breaker::Breaker;
    use crate::budget::RetryBudget;
    use crate::policy::{BreakerPolicy, BudgetPolicy, RetryPolicy};

    const MS: Duration = Duration::from_millis(1);

    fn retry_policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: 100 * MS,
            max_backoff: 2_000 * MS,
            backoff_multiplier: 2.0,
            retryable_codes: vec![Code::Unavailable],
        }
    }

    fn breaker(consecutive_failures: u32) -> Arc<Mutex<Breaker>> {
        Arc::new(Mutex::new(Breaker::new(&BreakerPolicy {
            consecutive_failures,
            open_for: 10_000 * MS,
            max_open_for: 60_000 * MS,
        })))
    }

    fn budget(policy: &BudgetPolicy) -> Arc<Mutex<RetryBudget>> {
        Arc::new(Mutex::new(RetryBudget::new(policy, now())))
    }

    #[tokio::test(start_paused = true)]
    async fn the_stack_opens_the_circuit_mid_call_and_frees_its_place() {
        let (upstream, mut handle) = upstream();
        let limit = ConcurrencyLimitLayer::new(4);
        let generous = BudgetPolicy {
            ratio: 10.0,
            min_per_second: 0,
        };
        let mut service = ServiceBuilder::new()
            .layer(limit.clone())
            .layer(RetryLayer::new(retry_policy(), budget(&generous)))
            .layer(CircuitBreakerLayer::new("plug".into(), breaker(2)))
            .service(upstream);

        let call = tokio::spawn(
            service
                .ready()
                .await
                .expect("ready")
                .call(Req::within(10_000 * MS)),
        );
        for _ in 0..2 {
            let (_, reply) = next(&mut handle).await;
            reply.send_error(Status::unavailable("down"));
        }
        let status = finish(call).await.expect_err("circuit open");
        assert!(is_circuit_rejection(&status));
        assert!(
            status
                .message()
                .starts_with("circuit open: plug failed repeatedly")
        );
        assert_eq!(limit.in_flight(), 0);
        assert_no_request(&mut handle);
    }

    /// The retry budget's bound, through the whole stack: in a
    /// sustained outage (every attempt UNAVAILABLE, circuit never opening),
    /// attempts ≤ (1 + ratio) × calls + min_per_second × (seconds + 1), the
    /// one second being the reserve a fresh budget starts with.
    #[tokio::test(start_paused = true)]
    async fn a_sustained_outage_stays_within_the_budget() {
        let policy = BudgetPolicy {
            ratio: 0.2,
            min_per_second: 2,
        };
        let start = tokio::time::Instant::now();
        let (upstream, mut handle) = upstream();
        let mut service = ServiceBuilder::new()
            .layer(ConcurrencyLimitLayer::new(1_000))
            .layer(RetryLayer::new(retry_policy(), budget(&policy)))
            .layer(CircuitBreakerLayer::new("plug".into(), breaker(u32::MAX)))
            .service(upstream);

        let attempts = Arc::new(AtomicU64::new(0));
        let counted = attempts.clone();
        let plugin = tokio::spawn(async move {
            while let Some((_, reply)) = handle.next_request().await {
                counted.fetch_add(1, Ordering::SeqCst);
                reply.send_error(Status::unavailable("down"));
            }
        });

        let mut calls = Vec::new();
        for _ in 0..600 {
            calls.push(tokio::spawn(
                service
                    .ready()
                    .await
                    .expect("ready")
                    .call(Req::within(5_000 * MS)),
            ));
            tokio::time::sleep(100 * MS).await;
        }
        for call in calls {
            assert_eq!(
                finish(call).await.expect_err("outage").code(),
                Code::Unavailable
            );
        }
        drop(service);
        finish(plugin).await;

        let attempts = attempts.load(Ordering::SeqCst) as f64;
        let seconds = start.elapsed().as_secs_f64();
        let bound = 1.2 * 600.0 + 2.0 * (seconds + 1.0);
        assert!(attempts <= bound, "{attempts} attempts, bound {bound}");
        // Retries did happen: the budget is spent, not shut.
        assert!(
            attempts >= 600.0 + 0.8 * (bound - 600.0),
            "{attempts} attempts, bound {bound}"
        );
    }
}
