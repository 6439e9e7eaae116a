//! The resilience stack in front of each plugin, built in one place.
//!
//! Every call to a plugin — from a single target, a fan-out or a chain — goes
//! through its stack, top to bottom:
//!
//! ```text
//! ConcurrencyLimit   bounds this plugin's calls in flight (whole calls, retries
//!                    included); over it, RESOURCE_EXHAUSTED at once, never a queue
//! Retry              attempts and full-jitter backoff inside the call's deadline,
//!                    only on the retryable codes, within the plugin's retry budget
//! AttemptTelemetry   per attempt: a client span whose context the plugin receives,
//!                    and the attempt, retry and circuit-rejection counters
//! CircuitBreaker     per attempt: fails fast while the circuit is open; records
//!                    each attempt's outcome (failure accrual)
//! UpstreamService    one HTTP/2 call, bounded by the deadline, which it sends on
//!                    as the plugin's grpc-timeout
//! ```
//!
//! The concurrency bound, the breaker and the retry budget belong to the
//! plugin's [`Upstream`], so they outlive a reload that keeps the plugin's
//! endpoint and TLS settings (the calls in flight stay counted, the circuit
//! stays open); their settings follow the registry when a reload commits.
//!
//! Every layer speaks [`CallError`]: the layers make their refusals with it and
//! ask it whether an error is retried and whether it counts against the
//! plugin (see its [`rollout_policies::PolicyError`] implementation).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rollout_policies::layer::{CircuitBreakerLayer, RetryLayer, RetryObserver};
use rollout_policies::{FailurePolicy, Policy};
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

use crate::error::CallError;
use crate::hooks::{HookResponse, PluginCall};
use crate::telemetry::attempt::AttemptTelemetryLayer;
use crate::telemetry::trace::Peer;
use crate::telemetry::{PluginMetrics, Telemetry};
use crate::upstream::Upstream;

/// A plugin's stack: a cheap-to-clone service.
pub(crate) type PluginStack = BoxCloneSyncService<PluginCall, HookResponse, CallError>;

/// The bottom of the stack: one call over the plugin's connection.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamService(pub(crate) Arc<Upstream>);

impl tower::Service<PluginCall> for UpstreamService {
    type Response = HookResponse;
    type Error = CallError;
    type Future = Pin<Box<dyn Future<Output = Result<HookResponse, CallError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, call: PluginCall) -> Self::Future {
        let upstream = self.0.clone();
        Box::pin(async move {
            upstream
                .call_held(
                    call.request,
                    call.deadline,
                    call.owner,
                    &call.forward,
                    call.hub.as_ref(),
                    call.held.as_ref(),
                )
                .await
        })
    }
}

/// Builds the stack of one plugin, in the order above. The concurrency bound,
/// the breaker and the budget are the upstream's own, so they carry over from
/// the stack of the previous snapshot; the retry policy is `policy`'s.
pub(crate) fn build(
    name: &str,
    policy: &Policy,
    upstream: &Arc<Upstream>,
    telemetry: &Telemetry,
    metrics: &Arc<PluginMetrics>,
) -> PluginStack {
    let service = ServiceBuilder::new()
        // Outermost: a slow plugin holds at most this many of the gateway's
        // calls; the rest are refused at once rather than queued.
        .layer(upstream.limit())
        // Retries inside the limit (they take no extra slot) and above the
        // breaker (each attempt meets the circuit).
        .layer(
            RetryLayer::new(policy.retry.clone(), upstream.retry_budget())
                .with_observer(Arc::new(BudgetObserver(metrics.clone()))),
        )
        // Below the retries, so each attempt is its own span, numbered; above
        // the breaker, so a refused attempt shows in the trace too.
        .layer(AttemptTelemetryLayer::new(
            telemetry.tracing.clone(),
            peer(name, policy, upstream),
            metrics.clone(),
        ))
        // Per attempt: fail fast while open; every attempt's outcome counts.
        // …per calling hub in central mode: one hub's failures do not
        // open the circuit for another.
        .layer(
            CircuitBreakerLayer::new(name.to_string(), upstream.breaker()).with_scopes({
                let upstream = upstream.clone();
                Arc::new(move |hub: &str| upstream.breaker_for(hub))
            }),
        )
        .service(UpstreamService(upstream.clone()));
    BoxCloneSyncService::new(service)
}

/// What each attempt's span says of the plugin: its name, endpoint and
/// failure policy per hook.
fn peer(name: &str, policy: &Policy, upstream: &Upstream) -> Peer {
    let endpoint = &upstream.key().endpoint;
    Peer::new(name, &endpoint.host, endpoint.port, |hook| {
        policy.failure_policy_for(hook.proto_hook()) == FailurePolicy::Ignore
    })
}

/// Counts the retries a plugin's budget refused.
struct BudgetObserver(Arc<PluginMetrics>);

impl RetryObserver for BudgetObserver {
    fn on_budget_exhausted(&self) {
        self.0.record_budget_exhausted();
    }
}
