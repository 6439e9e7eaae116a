//! Resilience policies of the rollout gateway and the pure merge rules of fan-out.
//!
//! This crate has no I/O of its own. [`policy`] holds the typed, validated
//! policy values a registry entry carries (deadline, retry and its budget,
//! circuit breaker, failure policy, concurrency bound); [`merge`] holds the
//! rules that turn the answers of a pipeline's members into one answer, as
//! CONTRACT §2 defines them. The tower layers that enforce the policies on
//! each upstream call live beside them.

pub mod merge;
pub mod policy;

pub use policy::{BreakerPolicy, BudgetPolicy, FailurePolicy, Policy, RetryPolicy};
