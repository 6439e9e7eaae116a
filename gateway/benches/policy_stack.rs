//! What the resilience stack costs a call that succeeds: the gateway's
//! per-plugin stack (concurrency bound, retry with budget, circuit breaker)
//! over the error calls have in production (`CallError`), around a service
//! that answers at once, against that service alone, in the
//! same process. The difference is the policies' overhead per call, to set
//! against the gateway's added latency (docs/performance.md).

#![allow(
    clippy::disallowed_methods,
    reason = "criterion's iter_custom wants the wall-clock time of the iterations"
)]
#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use rollout_gateway::error::CallError;
use rollout_policies::layer::{
    CircuitBreakerLayer, ConcurrencyLimitLayer, PolicyRequest, RetryLayer,
};
use rollout_policies::{Breaker, Policy, RetryBudget};
use tower::{Service, ServiceBuilder, ServiceExt};

#[derive(Clone)]
struct Call {
    deadline: tokio::time::Instant,
    attempt: u32,
}

impl PolicyRequest for Call {
    fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }
    fn set_attempt(&mut self, attempt: u32) {
        self.attempt = attempt;
    }
}

/// Runs `iters` calls through `svc` on a current-thread runtime; the time of
/// the calls alone.
fn drive<S>(rt: &tokio::runtime::Runtime, svc: S, iters: u64) -> Duration
where
    S: Service<Call, Response = u32, Error = CallError> + Clone,
{
    rt.block_on(async move {
        let call = Call {
            deadline: tokio::time::Instant::now() + Duration::from_secs(3600),
            attempt: 0,
        };
        let started = Instant::now();
        for _ in 0..iters {
            let answer = svc.clone().oneshot(call.clone()).await;
            std::hint::black_box(answer.ok());
        }
        started.elapsed()
    })
}

fn stack(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let bare = tower::service_fn(|call: Call| async move { Ok::<u32, CallError>(call.attempt) });
    let policy = Policy::default();
    let budget = Arc::new(Mutex::new(RetryBudget::new(
        &policy.retry_budget,
        Instant::now(),
    )));
    let breaker = Arc::new(Mutex::new(Breaker::new(&policy.circuit_breaker)));
    let stacked = ServiceBuilder::new()
        .layer(ConcurrencyLimitLayer::new(policy.max_concurrent_calls))
        .layer(RetryLayer::new(policy.retry.clone(), budget))
        .layer(CircuitBreakerLayer::new("bench".into(), breaker))
        .service(bare);

    let mut group = c.benchmark_group("policy-stack");
    group.bench_function("bare service", |b| b.iter_custom(|n| drive(&rt, bare, n)));
    group.bench_function("limit + retry + breaker", |b| {
        b.iter_custom(|n| drive(&rt, stacked.clone(), n))
    });
    group.finish();
}

criterion_group!(benches, stack);
criterion_main!(benches);
