use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rollout_plugin_sdk::proto::ValidationResult;

use super::*;
use crate::template::Template;

const T0: u64 = 1_780_000_000;

type Answer = Result<Option<Series>, QueryError>;

fn check(name: &str, op: &str, threshold: f64) -> Check {
    Check {
        name: name.into(),
        query: Template::parse("up").unwrap(),
        comparison: Comparison::parse(op).unwrap(),
        threshold,
        window: Duration::from_secs(60),
        interval: Duration::from_secs(5),
        min_samples: 3,
    }
}

fn plan(checks: Vec<Check>) -> Plan {
    Plan {
        checks,
        deadline: Duration::from_secs(120),
    }
}

fn series(values: &[f64]) -> Result<Option<Series>, QueryError> {
    Ok(Some(Series {
        labels: "{}".into(),
        samples: values
            .iter()
            .enumerate()
            .map(|(i, v)| ((T0 + 5 * i as u64) as f64, *v))
            .collect(),
    }))
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(T0 + secs)
}

/// The verdict of `plan` with one answer per check, `secs` after the update.
fn verdict(plan: &Plan, answers: Vec<Result<Option<Series>, QueryError>>, secs: u64) -> Validation {
    let asked = plan
        .checks
        .iter()
        .zip(answers)
        .map(|(check, answer)| Asked {
            check,
            query: format!("q_{}", check.name),
            answer,
        })
        .collect();
    decide(plan, asked, "c1 (revision r1)", at(0), at(secs))
}

fn refused(code: u16, error_type: Option<&str>) -> Result<Option<Series>, QueryError> {
    Err(QueryError::Refused {
        code,
        error_type: error_type.map(str::to_owned),
        message: "no".into(),
    })
}

#[test]
fn each_answer_gives_its_result() {
    use ValidationResult::{Failed, Inprogress, Succeeded};
    let p = plan(vec![check("ok", ">=", 0.99)]);
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    type Row = (&'static str, Answer, u64, ValidationResult);
    let table: Vec<Row> = vec![
        (
            "enough, all pass",
            series(&[0.995, 1.0, 0.99]),
            10,
            Succeeded,
        ),
        ("one fails", series(&[1.0, 0.5, 1.0]), 10, Failed),
        ("too few", series(&[1.0, 1.0]), 10, Inprogress),
        (
            "too few past the deadline",
            series(&[1.0, 1.0]),
            120,
            Failed,
        ),
        ("no series yet", Ok(None), 10, Inprogress),
        ("no series past the deadline", Ok(None), 121, Failed),
        (
            "NaN counts as no sample",
            series(&[1.0, nan, 1.0]),
            10,
            Inprogress,
        ),
        (
            "+Inf counts as no sample",
            series(&[inf, inf, inf]),
            10,
            Inprogress,
        ),
        (
            "NaN among enough",
            series(&[1.0, nan, 1.0, 1.0]),
            10,
            Succeeded,
        ),
        (
            "Prometheus down",
            Err(QueryError::Timeout(Duration::from_secs(1))),
            10,
            Inprogress,
        ),
        (
            "down past the deadline",
            Err(QueryError::Timeout(Duration::from_secs(1))),
            200,
            Failed,
        ),
        (
            "HTTP 503",
            refused(503, Some("unavailable")),
            10,
            Inprogress,
        ),
        (
            "status:error bad_data",
            refused(400, Some("bad_data")),
            10,
            Failed,
        ),
        ("HTTP 404", refused(404, None), 10, Failed),
        (
            "garbage",
            Err(QueryError::Malformed("x".into())),
            10,
            Failed,
        ),
        (
            "several series",
            Err(QueryError::ManySeries {
                count: 2,
                first: "{a}".into(),
                second: "{b}".into(),
            }),
            10,
            Failed,
        ),
        (
            "too large",
            Err(QueryError::TooLarge { limit: 10 }),
            10,
            Failed,
        ),
    ];
    for (what, answer, secs, want) in table {
        let v = verdict(&p, vec![answer], secs);
        assert_eq!(v.result, want, "{what}: {}", v.message);
    }
}

#[test]
fn a_failure_names_the_query_the_value_and_the_threshold() {
    let p = plan(vec![check("latency", "<=", 0.5), check("ok", ">=", 0.99)]);
    let v = verdict(&p, vec![series(&[0.2, 0.75]), series(&[1.0, 1.0, 1.0])], 10);
    assert_eq!(v.result, ValidationResult::Failed);
    assert_eq!(
        v.message,
        "c1 (revision r1): check \"latency\" failed: value 0.75 at 2026-05-28T20:26:45Z is not <= 0.5 (query: q_latency)"
    );
    // A check that fails decides even while another waits.
    let v = verdict(&p, vec![series(&[0.9]), Ok(None)], 10);
    assert_eq!(v.result, ValidationResult::Failed);
    assert!(
        v.message
            .contains("value 0.9 at 2026-05-28T20:26:40Z is not <= 0.5"),
        "{}",
        v.message
    );
}

#[test]
fn waiting_says_what_is_missing_and_when_to_ask_again() {
    let mut slow = check("ok", ">=", 0.99);
    slow.interval = Duration::from_secs(30);
    let p = plan(vec![check("latency", "<=", 0.5), slow]);
    let v = verdict(&p, vec![series(&[0.1, f64::NAN]), Ok(None)], 100);
    assert_eq!(v.result, ValidationResult::Inprogress);
    assert_eq!(
        v.message,
        "c1 (revision r1): waiting (20s left before the deadline): check \"latency\": 1 of 3 samples <= 0.5 (1 NaN or infinite, not counted) (query: q_latency); check \"ok\": 0 of 3 samples >= 0.99 (query: q_ok)"
    );
    // The shortest interval, but never past the deadline.
    assert_eq!(v.recheck_after, Some(Duration::from_secs(5)));
    let v = verdict(&p, vec![Ok(None), Ok(None)], 118);
    assert_eq!(v.recheck_after, Some(Duration::from_secs(2)));
    let v = verdict(&p, vec![Ok(None), Ok(None)], 130);
    assert_eq!(v.result, ValidationResult::Failed);
    assert!(
        v.message.starts_with(
            "c1 (revision r1): still undecided 130s after the cluster's update (deadline 120s): "
        ),
        "{}",
        v.message
    );
}

#[test]
fn success_needs_every_check() {
    let p = plan(vec![check("latency", "<", 0.5), check("ok", ">", 0.99)]);
    let v = verdict(
        &p,
        vec![series(&[0.1, 0.3, 0.2]), series(&[1.0, 0.995, 1.0])],
        10,
    );
    assert_eq!(v.result, ValidationResult::Succeeded);
    assert_eq!(
        v.message,
        "c1 (revision r1): all 2 checks passed: check \"latency\" passed: 3 samples < 0.5 (worst 0.3) (query: q_latency); check \"ok\" passed: 3 samples > 0.99 (worst 0.995) (query: q_ok)"
    );
    let v = verdict(&p, vec![series(&[0.1, 0.3, 0.2]), Ok(None)], 10);
    assert_eq!(v.result, ValidationResult::Inprogress);
}

#[test]
fn a_clock_behind_the_update_waits() {
    let p = plan(vec![check("ok", ">=", 0.99)]);
    let asked = vec![Asked {
        check: &p.checks[0],
        query: "q".into(),
        answer: Ok(None),
    }];
    let v = decide(&p, asked, "c", at(10), at(0));
    assert_eq!(v.result, ValidationResult::Inprogress);
}
