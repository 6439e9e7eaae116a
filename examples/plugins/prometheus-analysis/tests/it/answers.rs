//! The plugin against a fake Prometheus written on the wire: each way an
//! answer can be wrong, and what it makes of it. None of them is ever
//! SUCCEEDED; the transient ones are INPROGRESS until the deadline, then
//! FAILED.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rollout_plugin_sdk::proto::ValidationResult;

use crate::common::{FakeHttp, Reply, one_check, plugin, request, settle};

const QUERY: &str = r#"app_success_ratio{cluster="{{cluster}}"}"#;

fn matrix(result: &str) -> String {
    format!(r#"{{"status":"success","data":{{"resultType":"matrix","result":{result}}}}}"#)
}

/// A series of `values`, one a second up to now.
fn series(values: &[&str]) -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("[{}, \"{v}\"]", now - (values.len() - i) as u64))
        .collect();
    matrix(&format!(
        r#"[{{"metric":{{"cluster":"c1"}},"values":[{}]}}]"#,
        points.join(",")
    ))
}

/// The verdict of one validation against a Prometheus answering `reply`,
/// the cluster updated 5 s ago, with a deadline of `deadline`.
async fn verdict_of(reply: Reply, deadline: &str) -> rollout_plugin_sdk::Validation {
    let fake = FakeHttp::start(Arc::new(move |_| reply.clone())).await;
    let analysis = plugin(&fake.url(), Duration::from_millis(500));
    let since = SystemTime::now() - Duration::from_secs(5);
    let config = one_check(QUERY, ">=", 0.99, deadline);
    analysis
        .validate_at(&request("c1", since, &config), SystemTime::now())
        .await
        .unwrap()
}

#[tokio::test]
async fn each_wrong_answer_has_its_result_and_none_succeeds() {
    use ValidationResult::{Failed, Inprogress, Succeeded};
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(2 << 20));
    let slow = Reply {
        delay: Duration::from_secs(2),
        ..Reply::json(200, series(&["1", "1", "1"]))
    };
    let table = [
        (
            "healthy",
            Reply::json(200, series(&["1", "0.995", "1"])),
            Succeeded,
            "all 1 checks passed",
        ),
        (
            "failing",
            Reply::json(200, series(&["1", "0.9", "1"])),
            Failed,
            "value 0.9 at",
        ),
        (
            "HTTP 500",
            Reply::json(500, "oops"),
            Inprogress,
            "Prometheus answered HTTP 500: oops",
        ),
        (
            "HTTP 503 status:error",
            Reply::json(
                503,
                r#"{"status":"error","errorType":"unavailable","error":"restarting"}"#,
            ),
            Inprogress,
            "HTTP 503 (unavailable): restarting",
        ),
        (
            "status:error bad_data",
            Reply::json(
                400,
                r#"{"status":"error","errorType":"bad_data","error":"1:10: parse error"}"#,
            ),
            Failed,
            "HTTP 400 (bad_data): 1:10: parse error",
        ),
        (
            "status:error under 200",
            Reply::json(
                200,
                r#"{"status":"error","errorType":"execution","error":"boom"}"#,
            ),
            Failed,
            "(execution): boom",
        ),
        (
            "garbage",
            Reply::json(200, "<html>hello</html>"),
            Failed,
            "not a range query result: not JSON",
        ),
        (
            "HTML error page",
            Reply::json(502, "<html>Bad Gateway</html>"),
            Inprogress,
            "HTTP 502: <html>Bad Gateway</html>",
        ),
        (
            "empty result",
            Reply::json(200, matrix("[]")),
            Inprogress,
            "0 of 3 samples",
        ),
        (
            "NaN",
            Reply::json(200, series(&["NaN", "NaN", "NaN", "1"])),
            Inprogress,
            "1 of 3 samples >= 0.99 (3 NaN or infinite, not counted)",
        ),
        (
            "+Inf",
            Reply::json(200, series(&["+Inf", "+Inf", "+Inf"])),
            Inprogress,
            "(3 NaN or infinite, not counted)",
        ),
        (
            "several series",
            Reply::json(
                200,
                matrix(
                    r#"[{"metric":{"pod":"a"},"values":[[1,"1"]]},{"metric":{"pod":"b"},"values":[[1,"1"]]}]"#,
                ),
            ),
            Failed,
            "gives 2 series where one is compared ({pod=\"a\"}, {pod=\"b\"}, …)",
        ),
        (
            "a vector",
            Reply::json(
                200,
                r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
            ),
            Failed,
            "resultType is \"vector\"",
        ),
        (
            "too large",
            Reply::json(200, big),
            Failed,
            "larger than 1048576 bytes",
        ),
        ("slow", slow, Inprogress, "did not answer within 500ms"),
    ];
    for (what, reply, want, says) in table {
        let v = verdict_of(reply, "1m").await;
        assert_eq!(v.result, want, "{what}: {}", v.message);
        assert!(v.message.contains(says), "{what}: {}", v.message);
        assert!(
            v.message
                .contains(r#"(query: app_success_ratio{cluster="c1"})"#),
            "{what}: {}",
            v.message
        );
    }
}

#[tokio::test]
async fn transient_failures_fail_at_the_deadline() {
    for reply in [
        Reply::json(500, "oops"),
        Reply::json(200, matrix("[]")),
        Reply {
            delay: Duration::from_secs(2),
            ..Reply::json(200, series(&["1", "1", "1"]))
        },
    ] {
        // Updated 5 s ago, a deadline of 4 s: past it.
        let v = verdict_of(reply, "4s").await;
        assert_eq!(v.result, ValidationResult::Failed, "{}", v.message);
        assert!(
            v.message.starts_with("c1 (revision rev-1): still undecided 5s after the cluster's update (deadline 4s): check \"check\": "),
            "{}",
            v.message
        );
    }
}

#[tokio::test]
async fn prometheus_down_waits_then_fails() {
    // A port that was free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let analysis = plugin(&format!("http://{port}"), Duration::from_millis(500));
    let config = one_check(QUERY, ">=", 0.99, "3s");
    let r = request("c1", SystemTime::now(), &config);
    let first = analysis.validate_at(&r, SystemTime::now()).await.unwrap();
    assert_eq!(
        first.result,
        ValidationResult::Inprogress,
        "{}",
        first.message
    );
    assert!(
        first
            .message
            .contains(&format!("cannot connect to Prometheus at {port}")),
        "{}",
        first.message
    );
    assert_eq!(first.recheck_after, Some(Duration::from_secs(1)));
    let (last, waited) = settle(&analysis, &r, Duration::from_secs(10)).await;
    assert_eq!(last.result, ValidationResult::Failed, "{}", last.message);
    assert!(last.message.contains("still undecided"), "{}", last.message);
    assert!(!waited.is_empty());
}

#[tokio::test]
async fn the_range_asked_starts_at_the_cluster_s_update() {
    let fake = FakeHttp::start(Arc::new(|_| Reply::json(200, matrix("[]")))).await;
    let analysis = plugin(&fake.url(), Duration::from_secs(1));
    let since = SystemTime::now() - Duration::from_secs(4);
    let config = one_check(QUERY, ">=", 0.99, "1m");
    analysis
        .validate_at(&request("c1", since, &config), SystemTime::now())
        .await
        .unwrap();
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    let s = &seen[0];
    assert_eq!(
        (s.method.as_str(), s.path.as_str()),
        ("POST", "/api/v1/query_range")
    );
    assert_eq!(
        s.form("query").unwrap(),
        r#"app_success_ratio{cluster="c1"}"#
    );
    assert_eq!(s.form("step").unwrap(), "1");
    let start: f64 = s.form("start").unwrap().parse().unwrap();
    let end: f64 = s.form("end").unwrap().parse().unwrap();
    let since = since
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((start - since).abs() < 0.01, "{start} {since}");
    assert!((end - start - 4.0).abs() < 0.5, "{start} {end}");
    // Updated 30 s ago with a 10 s window: the last 10 s.
    let since = SystemTime::now() - Duration::from_secs(30);
    analysis
        .validate_at(&request("c1", since, &config), SystemTime::now())
        .await
        .unwrap();
    let s = &fake.seen()[1];
    let start: f64 = s.form("start").unwrap().parse().unwrap();
    let end: f64 = s.form("end").unwrap().parse().unwrap();
    assert!((end - start - 10.0).abs() < 0.01, "{start} {end}");
}
