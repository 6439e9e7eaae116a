use std::time::Duration;

use super::*;

const CHECK: &str =
    r#"{"name":"success-rate","query":"up{c=\"{{cluster}}\"}","comparison":">=","threshold":0.99}"#;

fn rollout(json: &str) -> Result<Plan, ConfigError> {
    let layer = rollout_layer(json)?;
    plan(&Defaults::default(), &[&layer], ROLLOUT_SOURCE)
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn a_rollout_plan_takes_each_key_from_the_highest_layer() {
    let file = file_layer(
        &format!(r#"{{"checks":[{CHECK}],"window":"2m","minSamples":2}}"#),
        "--config f.json",
    )
    .unwrap();
    let defaults = Defaults::default();
    // The file alone: its keys over the flags.
    let p = plan(&defaults, &[&file], "x").unwrap();
    assert_eq!(p.deadline, defaults.deadline);
    let c = &p.checks[0];
    assert_eq!(
        (c.name.as_str(), c.window, c.interval, c.min_samples),
        ("success-rate", secs(120), secs(30), 2)
    );
    assert_eq!((c.comparison, c.threshold), (Comparison::AtLeast, 0.99));
    // A rollout that sets only `interval` and `deadline` keeps the file's
    // checks; its interval reaches them.
    let r =
        rollout_layer(r#"{"prometheus":{"interval":"10s","deadline":"3m"},"other":1}"#).unwrap();
    let p = plan(&defaults, &[&file, &r], ROLLOUT_SOURCE).unwrap();
    assert_eq!((p.deadline, p.checks[0].interval), (secs(180), secs(10)));
    // A check's own keys win over every layer's defaults; `checks` replaces
    // the file's list.
    let r = rollout_layer(
        r#"{"prometheus":{"interval":"10s","checks":[{"query":"x{a='{{revision}}'}","comparison":"<","threshold":5,"interval":"1s","window":"20s","minSamples":4}]}}"#,
    )
    .unwrap();
    let p = plan(&defaults, &[&file, &r], ROLLOUT_SOURCE).unwrap();
    let c = &p.checks[0];
    assert_eq!(
        (c.name.as_str(), c.window, c.interval, c.min_samples),
        ("checks[0]", secs(20), secs(1), 4)
    );
}

#[test]
fn no_config_and_other_plugins_keys_are_an_empty_layer() {
    for json in ["", "  ", "{}", r#"{"soakTime":"5m"}"#] {
        assert_eq!(rollout_layer(json).unwrap(), Layer::default(), "{json:?}");
    }
    // ... and with no file, that is no check at all: refused, not passed.
    let err = rollout("").unwrap_err();
    assert_eq!(err.problems[0].0, "checks");
}

#[test]
fn every_problem_is_reported_with_its_path() {
    let err = rollout(
        r#"{"prometheus":{"checks":[
            {"query":"up{c={{cluster}}}","comparison":"=","threshold":"high","window":"soon","treshold":1},
            {"name":"a","query":7,"comparison":"<"},
            {"name":"a","query":"up","comparison":"<","threshold":1,"minSamples":0}
        ],"deadline":"-1s","windows":"5m"}}"#,
    )
    .unwrap_err();
    assert_eq!(err.origin, ROLLOUT_SOURCE);
    let paths: Vec<&str> = err.problems.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            "prometheus.windows",
            "prometheus.checks[0].treshold",
            "prometheus.checks[0].query",
            "prometheus.checks[0].comparison",
            "prometheus.checks[0].threshold",
            "prometheus.checks[0].window",
            "prometheus.checks[1].query",
            "prometheus.checks[1].threshold",
            "prometheus.checks[2].minSamples",
            "prometheus.deadline",
        ]
    );
    let text = err.to_string();
    assert!(
        text.starts_with("plugin_config_json (the rollout's pluginConfig): prometheus.windows: unknown key (known: checks, deadline, window, interval, minSamples); "),
        "{text}"
    );
    assert!(
        text.contains("prometheus.checks[0].comparison: expected one of \"<\", \"<=\", \">\", \">=\", found \"=\""),
        "{text}"
    );
    assert!(
        text.contains("prometheus.checks[1].threshold: required"),
        "{text}"
    );
    assert!(
        text.contains("prometheus.deadline: \"-1s\" is negative"),
        "{text}"
    );
}

#[test]
fn two_checks_of_one_name_and_an_empty_list_are_refused() {
    let err = rollout(&format!(
        r#"{{"prometheus":{{"checks":[{CHECK},{CHECK}]}}}}"#
    ))
    .unwrap_err();
    assert_eq!(
        err.problems,
        [(
            "prometheus.checks[1].name".to_owned(),
            "\"success-rate\" names two checks".to_owned()
        )]
    );
    let err = rollout(r#"{"prometheus":{"checks":[]}}"#).unwrap_err();
    assert_eq!(err.problems[0].0, "prometheus.checks");
}

#[test]
fn checks_that_could_never_pass_are_refused() {
    let with = |keys: &str| {
        rollout(&format!(
            r#"{{"prometheus":{{{keys},"checks":[{CHECK}]}}}}"#
        ))
    };
    let said = |keys: &str| with(keys).unwrap_err().problems[0].1.clone();
    assert_eq!(
        said(r#""window":"1m","interval":"30s","minSamples":4"#),
        "minSamples 4 one interval (30s) apart need 90s, more than the window (60s)"
    );
    assert_eq!(
        said(r#""window":"10m","interval":"1m","minSamples":6,"deadline":"4m""#),
        "minSamples 6 one interval (60s) apart need 300s, more than the deadline (240s)"
    );
    assert!(said(r#""window":"24h","interval":"1s""#).contains("86400 steps"));
    // Exactly enough: the window holds minSamples samples.
    with(r#""window":"1m","interval":"30s","minSamples":3"#).unwrap();
}

#[test]
fn a_config_that_is_not_an_object_says_so() {
    for (json, why) in [
        ("[1]", "expected a JSON object"),
        (
            "{",
            "not JSON: EOF while parsing an object at line 1 column 1",
        ),
    ] {
        let err = rollout_layer(json).unwrap_err();
        assert_eq!(err.problems, [(String::new(), why.to_owned())], "{json}");
    }
    let err = rollout_layer(r#"{"prometheus":[]}"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin_config_json (the rollout's pluginConfig): prometheus: expected an object, found a list"
    );
    let err = file_layer(r#"{"checks":{}}"#, "--config /etc/p.json").unwrap_err();
    assert_eq!(
        err.to_string(),
        "--config /etc/p.json: checks: expected a list, found an object"
    );
}

#[test]
fn comparisons_compare_and_nan_never_passes() {
    let table = [
        ("<", 1.0, 2.0, true),
        ("<", 2.0, 2.0, false),
        ("<=", 2.0, 2.0, true),
        (">", 2.0, 2.0, false),
        (">", 3.0, 2.0, true),
        (">=", 2.0, 2.0, true),
        (">=", 1.9, 2.0, false),
    ];
    for (op, value, threshold, passes) in table {
        let c = Comparison::parse(op).unwrap();
        assert_eq!(
            c.passes(value, threshold),
            passes,
            "{value} {op} {threshold}"
        );
        assert_eq!(c.as_str(), op);
        assert!(!c.passes(f64::NAN, threshold));
    }
    assert_eq!(Comparison::parse("=="), None);
}
