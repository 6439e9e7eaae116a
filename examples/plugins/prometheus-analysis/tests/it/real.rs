//! The plugin against a real Prometheus (Debian's package,
//! `rollout_test_support::prometheus`), scraping every 200 ms an exporter
//! whose values the test drives: healthy, failing, too few samples yet,
//! Prometheus down, Prometheus slow, and a cluster name that tries to
//! inject PromQL.
//!
//! Skipped without a Prometheus (said on stderr), unless
//! `ROLLOUT_HOOKS_E2E=1`: `.ci/run` runs them with
//! `ROLLOUT_HOOKS_PROMETHEUS=$(python3 test-support/prometheus/fetch prometheus)`.

use std::time::{Duration, SystemTime};

use prometheus_analysis::prometheus::{Prometheus, RangeQuery};
use rollout_plugin_sdk::proto::ValidationResult;
use rollout_test_support::prometheus::{self as real, Server};

use crate::common::{Exporter, SlowProxy, one_check, options, plugin, request, settle};

const SCRAPE: Duration = Duration::from_millis(200);

/// The success ratio query of the docs: requests not answered 5xx over all
/// requests, for one cluster.
const SUCCESS_RATE: &str = r#"sum(rate(http_requests_total{cluster="{{cluster}}",code!~"5.."}[2s])) / sum(rate(http_requests_total{cluster="{{cluster}}"}[2s]))"#;

/// An exporter whose text the test sets, and a Prometheus scraping it.
struct Stack {
    exporter: Exporter,
    prometheus: Server,
}

impl Stack {
    async fn start() -> Option<Self> {
        let binary = real::binary_for_tests()?;
        let exporter = Exporter::start(&gauge_text(1.0)).await;
        let prometheus = Server::start(&binary, &[exporter.http.addr], SCRAPE)
            .await
            .unwrap();
        prometheus
            .wait_scraped(1, Duration::from_secs(20))
            .await
            .unwrap();
        Some(Self {
            exporter,
            prometheus,
        })
    }
}

fn gauge_text(ratio: f64) -> String {
    format!(
        "# TYPE app_success_ratio gauge\napp_success_ratio{{cluster=\"c1\"}} {ratio}\napp_success_ratio{{cluster=\"c2\"}} 0.5\n"
    )
}

#[tokio::test]
async fn healthy_waits_for_enough_samples_then_succeeds() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let analysis = plugin(&stack.prometheus.url(), Duration::from_secs(2));
    let config = one_check(
        r#"app_success_ratio{cluster="{{cluster}}"}"#,
        ">=",
        0.99,
        "30s",
    );
    // Just updated: one step so far, fewer than the three needed.
    let r = request("c1", SystemTime::now(), &config);
    let first = analysis.validate_at(&r, SystemTime::now()).await.unwrap();
    assert_eq!(
        first.result,
        ValidationResult::Inprogress,
        "{}",
        first.message
    );
    assert!(
        first.message.contains("1 of 3 samples >= 0.99"),
        "{}",
        first.message
    );
    eprintln!("INPROGRESS message: {}", first.message);
    let (last, waited) = settle(&analysis, &r, Duration::from_secs(15)).await;
    assert_eq!(last.result, ValidationResult::Succeeded, "{}", last.message);
    eprintln!("SUCCEEDED message: {}", last.message);
    assert!(
        waited.len() >= 3,
        "answered INPROGRESS {} times",
        waited.len()
    );
    assert!(
        last.message.starts_with("c1 (revision rev-1): all 1 checks passed: check \"check\" passed: 3 samples >= 0.99 (worst 1)"),
        "{}",
        last.message
    );
}

#[tokio::test]
async fn a_failing_value_fails_with_the_query_the_value_and_the_threshold() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let analysis = plugin(&stack.prometheus.url(), Duration::from_secs(2));
    // The rate query over counters: 2% errors, scraped for real.
    let mut ok = 0u64;
    let mut errors = 0u64;
    let since = SystemTime::now();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let config = serde_json::json!({"prometheus": {"deadline": "30s", "checks": [
        {"name": "success-rate", "query": SUCCESS_RATE, "comparison": ">=", "threshold": 0.99,
         "window": "10s", "interval": "1s", "minSamples": 3}
    ]}})
    .to_string();
    let r = request("c1", since, &config);
    let failed = loop {
        ok += 98;
        errors += 2;
        stack.exporter.set(&format!(
            "# TYPE http_requests_total counter\nhttp_requests_total{{cluster=\"c1\",code=\"200\"}} {ok}\nhttp_requests_total{{cluster=\"c1\",code=\"503\"}} {errors}\n"
        ));
        let v = analysis.validate_at(&r, SystemTime::now()).await.unwrap();
        assert_ne!(v.result, ValidationResult::Succeeded, "{}", v.message);
        if v.result == ValidationResult::Failed {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "{}", v.message);
        tokio::time::sleep(SCRAPE).await;
    };
    let rendered = SUCCESS_RATE.replace("{{cluster}}", "c1");
    let value: f64 = failed
        .message
        .strip_prefix("c1 (revision rev-1): check \"success-rate\" failed: value ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{}", failed.message));
    // 98 of every 100 requests: 0.98, as Prometheus's floating point has it.
    assert!((value - 0.98).abs() < 1e-9, "{}", failed.message);
    assert!(
        failed.message.contains(" is not >= 0.99 (query: "),
        "{}",
        failed.message
    );
    assert!(
        failed.message.ends_with(&format!("(query: {rendered})")),
        "{}",
        failed.message
    );
    eprintln!("FAILED message: {}", failed.message);
}

#[tokio::test]
async fn a_gauge_turning_bad_fails_the_next_validation() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let analysis = plugin(&stack.prometheus.url(), Duration::from_secs(2));
    let config = one_check(
        r#"app_success_ratio{cluster="{{cluster}}"}"#,
        ">=",
        0.99,
        "30s",
    );
    let r = request("c1", SystemTime::now() - Duration::from_secs(1), &config);
    assert_eq!(
        analysis
            .validate_at(&r, SystemTime::now())
            .await
            .unwrap()
            .result,
        ValidationResult::Inprogress
    );
    stack.exporter.set(&gauge_text(0.93));
    let (last, _) = settle(&analysis, &r, Duration::from_secs(10)).await;
    assert_eq!(last.result, ValidationResult::Failed, "{}", last.message);
    assert!(last.message.contains("value 0.93 at"), "{}", last.message);
    assert!(last.message.contains("is not >= 0.99"), "{}", last.message);
}

#[tokio::test]
async fn prometheus_down_is_never_success() {
    let Some(mut stack) = Stack::start().await else {
        return;
    };
    let analysis = plugin(&stack.prometheus.url(), Duration::from_secs(1));
    let config = one_check(
        r#"app_success_ratio{cluster="{{cluster}}"}"#,
        ">=",
        0.99,
        "4s",
    );
    // Healthy data for long enough, then Prometheus goes away.
    let since = SystemTime::now() - Duration::from_secs(2);
    let r = request("c1", since, &config);
    stack.prometheus.stop().await;
    let (last, waited) = settle(&analysis, &r, Duration::from_secs(10)).await;
    assert_eq!(last.result, ValidationResult::Failed, "{}", last.message);
    assert!(!waited.is_empty());
    for v in &waited {
        assert!(
            v.message.contains("cannot connect to Prometheus"),
            "{}",
            v.message
        );
    }
    assert!(last.message.contains("still undecided"), "{}", last.message);
    eprintln!("INPROGRESS message: {}", waited[0].message);
    eprintln!("FAILED message: {}", last.message);
}

#[tokio::test]
async fn prometheus_slow_times_out_and_is_never_success() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let proxy = SlowProxy::start(stack.prometheus.addr(), Duration::ZERO).await;
    let analysis = plugin(&proxy.url(), Duration::from_millis(700));
    let config = one_check(
        r#"app_success_ratio{cluster="{{cluster}}"}"#,
        ">=",
        0.99,
        "4s",
    );
    let r = request("c1", SystemTime::now() - Duration::from_secs(1), &config);
    // Through the proxy without delay: answers.
    let v = analysis.validate_at(&r, SystemTime::now()).await.unwrap();
    assert!(v.message.contains("samples >= 0.99"), "{}", v.message);
    *proxy.delay.lock().unwrap() = Duration::from_secs(3);
    let (last, waited) = settle(&analysis, &r, Duration::from_secs(15)).await;
    assert_eq!(last.result, ValidationResult::Failed, "{}", last.message);
    assert!(!waited.is_empty());
    for v in &waited {
        assert!(
            v.message.contains("did not answer within 700ms"),
            "{}",
            v.message
        );
    }
}

#[tokio::test]
async fn a_cluster_name_cannot_inject_promql() {
    let Some(stack) = Stack::start().await else {
        return;
    };
    let url = stack.prometheus.url();
    let evil = r#"nope"} or vector(1) #"#;
    let template = r#"app_success_ratio{cluster="{{cluster}}"}"#;
    // Pasted as it is, the name would make the query pass: vector(1).
    let pasted = template.replace("{{cluster}}", evil);
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let raw = Prometheus::new(&options(&url, Duration::from_secs(2)))
        .unwrap()
        .query_range(&RangeQuery {
            query: pasted,
            start: now - 2.0,
            end: now,
            step: Duration::from_secs(1),
        })
        .await
        .unwrap()
        .expect("vector(1) answers");
    assert!(raw.samples.iter().all(|(_, v)| *v == 1.0), "{raw:?}");

    // Through the template it stays a label value no series has.
    let analysis = plugin(&url, Duration::from_secs(2));
    let config = one_check(template, ">=", 0.99, "3s");
    let r = request(evil, SystemTime::now() - Duration::from_secs(2), &config);
    let (last, waited) = settle(&analysis, &r, Duration::from_secs(10)).await;
    assert_eq!(last.result, ValidationResult::Failed, "{}", last.message);
    for v in &waited {
        assert!(v.message.contains("0 of 3 samples"), "{}", v.message);
    }
    assert!(
        last.message
            .contains(r#"(query: app_success_ratio{cluster="nope\"} or vector(1) #"})"#),
        "{}",
        last.message
    );
    // A regex matcher quotes it as a regex too: `.` matches only a dot.
    let config = one_check(
        r#"app_success_ratio{cluster=~"{{cluster}}"}"#,
        ">=",
        0.4,
        "3s",
    );
    let r = request("c.", SystemTime::now() - Duration::from_secs(2), &config);
    let v = analysis.validate_at(&r, SystemTime::now()).await.unwrap();
    assert!(v.message.contains("0 of 3 samples"), "{}", v.message);
}
