//! Resilience policies against real plugin servers on loopback: retries,
//! deadlines, circuit breaking, the retry budget under an outage, the
//! concurrency bound, and breaker state across reloads.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::*;
use rollout_gateway::hooks::HookKind;
use tonic::Code;

/// A budget generous enough that it never refuses a retry in these tests.
const ROOMY_BUDGET: &str = "    retryBudget:\n      ratio: 10\n      minPerSecond: 100000\n";

#[tokio::test]
async fn unavailable_twice_then_ok_takes_three_attempts() {
    let p = plugin(Behaviour::new("flaky")).await;
    p.set(|b| b.fail_first = Some((2, Code::Unavailable)));
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin(
            "flaky",
            &p,
            &format!(
                "    retry:\n      maxAttempts: 3\n      initialBackoff: 10ms\n{ROOMY_BUDGET}"
            )
        )
    ))
    .await;
    let mut c = gw.client().await;
    c.begin_rollout(to("flaky", rollout("c1")))
        .await
        .expect("the third attempt succeeds");
    assert_eq!(p.calls(HookKind::BeginRollout), 3);
    gw.stop().await;
}

#[tokio::test]
async fn invalid_argument_is_not_retried() {
    let p = plugin(Behaviour::new("strict")).await;
    p.set(|b| b.fail = Some((Code::InvalidArgument, "bad cluster".into())));
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin(
            "strict",
            &p,
            &format!("    retry:\n      maxAttempts: 5\n{ROOMY_BUDGET}")
        )
    ))
    .await;
    let e = gw
        .client()
        .await
        .begin_rollout(to("strict", rollout("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(p.calls(HookKind::BeginRollout), 1);
    gw.stop().await;
}

#[tokio::test]
async fn retries_stay_inside_the_deadline() {
    let p = plugin(Behaviour::new("down")).await;
    p.set(|b| b.fail = Some((Code::Unavailable, "down".into())));
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin(
            "down",
            &p,
            &format!("    timeout: 300ms\n    retry:\n      maxAttempts: 10\n      initialBackoff: 200ms\n      maxBackoff: 200ms\n      backoffMultiplier: 1\n{ROOMY_BUDGET}")
        )
    ))
    .await;
    let t = Instant::now();
    let e = gw
        .client()
        .await
        .begin_rollout(to("down", rollout("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    // Ten attempts 200 ms apart would take 1.8 s; the 300 ms deadline
    // stops them (the bound leaves room for a loaded machine).
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // Full jitter under a 300 ms deadline: at most a few attempts, never 10.
    assert!(p.calls(HookKind::BeginRollout) < 10);
    gw.stop().await;
}

fn closed_port() -> std::net::SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

#[tokio::test]
async fn the_circuit_opens_fails_fast_and_closes_when_the_plugin_is_back() {
    let addr = closed_port();
    let config = format!(
        "plugins:\n  - name: gone\n    endpoint: {addr}\n    insecure: true\n    retry:\n      maxAttempts: 1\n    circuitBreaker:\n      consecutiveFailures: 3\n      openFor: 300ms\n      maxOpenFor: 1s\n"
    );
    let gw = gateway(&config).await;
    let mut c = gw.client().await;
    for i in 0..3 {
        let e = c
            .begin_rollout(to("gone", rollout("c1")))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "call {i}: {e:?}");
        assert!(
            !e.message().contains("circuit open"),
            "call {i} still reaches the plugin: {}",
            e.message()
        );
    }
    let debug = gw.debug().await;
    assert_eq!(debug["plugins"][0]["circuit"], "open");
    let mut took = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let e = c
            .begin_rollout(to("gone", rollout("c1")))
            .await
            .unwrap_err();
        took.push(t.elapsed());
        assert_eq!(e.code(), Code::Unavailable);
        assert!(
            e.message().contains("circuit open") && e.message().contains("gone"),
            "{}",
            e.message()
        );
    }
    took.sort();
    // The median, so that one scheduling hiccup of a loaded CI machine does
    // not decide; the slowest must still be far from a real call.
    assert!(
        took[2] < Duration::from_millis(5),
        "fail-fast took {took:?}"
    );
    assert!(
        took[4] < Duration::from_millis(50),
        "fail-fast took {took:?}"
    );
    // The plugin comes back on the same port; after openFor one probe goes
    // through, succeeds, and the circuit closes.
    let back = plugin_on(addr, Behaviour::new("gone")).await;
    tokio::time::sleep(Duration::from_millis(350)).await;
    c.begin_rollout(to("gone", rollout("c1")))
        .await
        .expect("the probe succeeds");
    assert_eq!(gw.debug().await["plugins"][0]["circuit"], "closed");
    c.begin_rollout(to("gone", rollout("c1"))).await.unwrap();
    assert_eq!(back.calls(HookKind::BeginRollout), 2);
    gw.stop().await;
}

#[tokio::test]
async fn an_ignore_plugin_with_an_open_circuit_is_skipped_and_named() {
    let addr = closed_port();
    let ok = plugin(Behaviour::new("ok")).await;
    ok.set(|b| b.mutate = Mutation::Annotate("ok", "1"));
    let config = format!(
        "plugins:\n{}  - name: gone\n    endpoint: {addr}\n    insecure: true\n    failurePolicy: Ignore\n    retry:\n      maxAttempts: 1\n    circuitBreaker:\n      consecutiveFailures: 1\n      openFor: 10s\npipelines:\n  - name: p\n    plugins: [gone, ok]\n",
        insecure_plugin("ok", &ok, "")
    );
    let gw = gateway(&config).await;
    let mut c = gw.client().await;
    for _ in 0..3 {
        let r = c
            .mutate_manifest_work(to("p", mutate_request("c1", work(512))))
            .await
            .unwrap();
        assert_eq!(
            trailer(r.metadata(), "ocm-rollout-failed-open").as_deref(),
            Some("gone")
        );
        assert_eq!(
            trailer(r.metadata(), "ocm-rollout-mutated-by").as_deref(),
            Some("ok")
        );
    }
    assert_eq!(gw.debug().await["plugins"][1]["circuit"], "open");
    gw.stop().await;
}

#[tokio::test]
async fn retries_stay_within_the_budget_under_a_sustained_outage() {
    let p = plugin(Behaviour::new("outage")).await;
    p.set(|b| b.fail = Some((Code::Unavailable, "outage".into())));
    let (ratio, per_second) = (0.2, 10.0);
    let started = Instant::now();
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin(
            "outage",
            &p,
            "    retry:\n      maxAttempts: 5\n      initialBackoff: 1ms\n      maxBackoff: 2ms\n    retryBudget:\n      ratio: 0.2\n      minPerSecond: 10\n    circuitBreaker:\n      consecutiveFailures: 1000000\n"
        )
    ))
    .await;
    let calls = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(2);
    let mut workers = Vec::new();
    for _ in 0..4 {
        let mut c = gw.client().await;
        let calls = calls.clone();
        workers.push(tokio::spawn(async move {
            while Instant::now() < until {
                calls.fetch_add(1, Ordering::Relaxed);
                let e = c
                    .begin_rollout(to("outage", rollout("c1")))
                    .await
                    .unwrap_err();
                assert_eq!(e.code(), Code::Unavailable);
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let seconds = started.elapsed().as_secs_f64();
    let calls = calls.load(Ordering::Relaxed) as f64;
    let attempts = p.calls(HookKind::BeginRollout) as f64;
    // A fresh budget holds one second's minPerSecond in reserve.
    let bound = (1.0 + ratio) * calls + per_second * (seconds + 1.0);
    assert!(
        attempts <= bound,
        "{attempts} attempts for {calls} calls in {seconds:.2} s: over the budget ({bound:.0})"
    );
    // The budget did allow some retries, and did refuse most of the 4 each call could make.
    assert!(
        attempts > calls,
        "no retry at all: {attempts} attempts, {calls} calls"
    );
    assert!(
        attempts < 2.0 * calls,
        "{attempts} attempts for {calls} calls"
    );
    gw.stop().await;
}

#[tokio::test]
async fn over_the_concurrency_bound_calls_are_refused_at_once() {
    let p = plugin(Behaviour::new("slow")).await;
    p.set(|b| b.delay = Duration::from_millis(500));
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin("slow", &p, "    maxConcurrentCalls: 2\n")
    ))
    .await;
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut c = gw.client().await;
        slow.push(tokio::spawn(async move {
            c.begin_rollout(to("slow", rollout("c1"))).await
        }));
    }
    // Both are in flight at the plugin: the bound is full.
    p.wait_calls(HookKind::BeginRollout, 2).await;
    let t = Instant::now();
    let e = gw
        .client()
        .await
        .begin_rollout(to("slow", rollout("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(
        e.message().contains("plugin \"slow\"") && e.message().contains("limit 2"),
        "{}",
        e.message()
    );
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    for s in slow {
        s.await.unwrap().expect("the calls within the bound finish");
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_reload_keeps_the_circuit_of_an_unchanged_endpoint() {
    let addr = closed_port();
    let plugin_yaml = |timeout: &str| {
        format!(
            "plugins:\n  - name: gone\n    endpoint: {addr}\n    insecure: true\n    timeout: {timeout}\n    retry:\n      maxAttempts: 1\n    circuitBreaker:\n      consecutiveFailures: 2\n      openFor: 30s\n"
        )
    };
    let gw = gateway(&plugin_yaml("5s")).await;
    let mut c = gw.client().await;
    for _ in 0..2 {
        c.begin_rollout(to("gone", rollout("c1")))
            .await
            .unwrap_err();
    }
    assert_eq!(gw.debug().await["plugins"][0]["circuit"], "open");
    gw.write_config(&plugin_yaml("6s"));
    gw.wait_generation(2).await;
    assert_eq!(gw.debug().await["plugins"][0]["circuit"], "open");
    let e = c
        .begin_rollout(to("gone", rollout("c1")))
        .await
        .unwrap_err();
    assert!(e.message().contains("circuit open"), "{}", e.message());
    gw.stop().await;
}

#[tokio::test]
async fn the_failure_policy_can_differ_per_hook() {
    let p = plugin(Behaviour::new("notifier")).await;
    p.set(|b| b.fail = Some((Code::Internal, "webhook down".into())));
    let gw = gateway(&format!(
        "plugins:\n{}",
        insecure_plugin(
            "notifier",
            &p,
            "    retry:\n      maxAttempts: 1\n    failurePolicyByHook:\n      BeginRollout: Ignore\n"
        )
    ))
    .await;
    let mut c = gw.client().await;
    // Ignore for BeginRollout: OK, named as failed open.
    let r = c
        .begin_rollout(to("notifier", rollout("c1")))
        .await
        .expect("failed open");
    assert_eq!(
        trailer(r.metadata(), "ocm-rollout-failed-open").as_deref(),
        Some("notifier")
    );
    // The plugin's own policy (Fail) for the other hooks.
    let e = c
        .validate_rollout_completion(to("notifier", validate_request("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Internal);
    assert_eq!(e.message(), "plugin \"notifier\": webhook down");
    assert_eq!(
        gw.debug().await["plugins"][0]["failurePolicyByHook"]["BeginRollout"],
        "Ignore"
    );
    gw.stop().await;
}
