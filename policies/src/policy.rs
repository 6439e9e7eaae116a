//! Typed resilience policy values, as validated from `config.yaml`
//! (`defaults`, overridden field by field per plugin).

use std::time::Duration;

use rollout_proto::v1alpha1::Hook;
use tonic::Code;

/// The largest per-call timeout a plugin may have (the plugin API bounds every
/// call by 30 s).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30);

/// What happens to a pipeline call when a member fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// The member's failure fails the call (the default, as for admission webhooks).
    #[default]
    Fail,
    /// The member is skipped: a mutation passes its input on, a validation vote
    /// is dropped, Begin/Progress succeed without it; the member is named in the
    /// `ocm-rollout-failed-open` trailer.
    Ignore,
}

impl FailurePolicy {
    /// The spelling used in `config.yaml`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

/// Retry in the manner of gRPC's retry design (gRFC A6).
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (1 = no retry).
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    pub backoff_multiplier: f64,
    /// Status codes that are retried; only these.
    pub retryable_codes: Vec<Code>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            backoff_multiplier: 2.0,
            retryable_codes: vec![Code::Unavailable],
        }
    }
}

/// A per-plugin retry budget: retries may add at most `ratio` to the calls,
/// plus `min_per_second` retries a second whatever the traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetPolicy {
    pub ratio: f64,
    pub min_per_second: u32,
}

impl Default for BudgetPolicy {
    fn default() -> Self {
        BudgetPolicy {
            ratio: 0.2,
            min_per_second: 10,
        }
    }
}

/// Circuit breaking in the manner of Linkerd's failure accrual.
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerPolicy {
    /// Failures in a row that open the circuit.
    pub consecutive_failures: u32,
    /// First wait before one probe call; doubles (with jitter) on each failed probe.
    pub open_for: Duration,
    pub max_open_for: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            consecutive_failures: 5,
            open_for: Duration::from_secs(10),
            max_open_for: Duration::from_secs(300),
        }
    }
}

/// Every policy that applies to the calls to one plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Per call, all attempts included; at most [`MAX_TIMEOUT`].
    pub timeout: Duration,
    pub failure_policy: FailurePolicy,
    /// Overrides of `failure_policy` for single hooks (`failurePolicyByHook`).
    pub failure_policy_by_hook: Vec<(Hook, FailurePolicy)>,
    pub retry: RetryPolicy,
    pub retry_budget: BudgetPolicy,
    pub circuit_breaker: BreakerPolicy,
    /// Calls in flight to this plugin at once; over it, RESOURCE_EXHAUSTED at once.
    pub max_concurrent_calls: usize,
}

impl Policy {
    /// The failure policy for a hook: its override if it has one, else the
    /// plugin's (`None` = Initialize, which has no override).
    pub fn failure_policy_for(&self, hook: Option<Hook>) -> FailurePolicy {
        hook.and_then(|h| {
            self.failure_policy_by_hook
                .iter()
                .find(|(k, _)| *k == h)
                .map(|(_, p)| *p)
        })
        .unwrap_or(self.failure_policy)
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            timeout: MAX_TIMEOUT,
            failure_policy: FailurePolicy::Fail,
            failure_policy_by_hook: Vec::new(),
            retry: RetryPolicy::default(),
            retry_budget: BudgetPolicy::default(),
            circuit_breaker: BreakerPolicy::default(),
            max_concurrent_calls: 256,
        }
    }
}
