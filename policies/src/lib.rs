//! Resilience policies of the rollout gateway and the pure merge rules of fan-out.
//!
//! This crate has no I/O of its own. [`policy`] holds the typed, validated
//! policy values a registry entry carries; [`merge`] holds the rules that turn
//! the answers of a pipeline's members into one answer, as docs/plugin-api.md §2 defines
//! them. The policies themselves come in two parts: pure state machines that
//! take time and randomness as arguments, and the tower layers that apply them
//! to each upstream call.
//!
//! - Deadline: one per call, carried by the request ([`PolicyRequest`]); every
//!   attempt and backoff fits inside it, and the upstream call sends the time
//!   left on to the plugin.
//! - Retry ([`backoff`], [`RetryLayer`]): gRFC A6 semantics; `max_attempts`
//!   counts the first; exponential backoff with full jitter; only retryable
//!   codes; no attempt the deadline cannot hold.
//! - Retry budget ([`budget`]): retries add at most `ratio` to the calls plus
//!   `min_per_second`, since the budget's creation and over the last 10 s.
//! - Circuit breaker ([`breaker`], [`CircuitBreakerLayer`]): consecutive
//!   failures open it; one probe after `open_for`; a failed probe doubles the
//!   wait with jitter up to `max_open_for`; a good one closes it.
//! - Concurrency bound ([`ConcurrencyLimitLayer`]): calls in flight per plugin;
//!   over it, RESOURCE_EXHAUSTED at once.
//! - Failure policy ([`FailurePolicy`]): applied by the gateway's router with
//!   the [`merge`] rules.
//!
//! The layers stack per plugin, top to bottom: concurrency limit (whole calls,
//! sheds at once) → retry (attempts and backoff inside the deadline, with the
//! budget) → circuit breaker (per attempt; fails fast while open, records each
//! attempt) → the upstream call (bounded by the deadline). See [`layer`].

#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]
// A `pub` item must be reachable from the crate root; anything else is
// `pub(crate)`.
#![warn(unreachable_pub)]

pub mod backoff;
pub mod breaker;
pub mod budget;
pub mod layer;
pub mod merge;
pub mod policy;
mod rng;

pub use backoff::{backoff_delay, should_retry};
pub use breaker::{Breaker, BreakerState, CallOutcome, Permit, Rejected, is_failure};
pub use budget::RetryBudget;
pub use layer::lock;
pub use layer::{
    CircuitBreakerLayer, ConcurrencyLimitLayer, NoopRetryObserver, PolicyError, PolicyRequest,
    RetryLayer, RetryObserver,
};
pub use policy::{BreakerPolicy, BudgetPolicy, FailurePolicy, Policy, RetryPolicy};
