//! One layer of settings as written: the `--config` file, or the
//! `prometheus` object of a rollout's pluginConfig. Both have the same
//! keys, read by [`read_layer`], which reports every problem at once, each
//! with its path (`checks[1].threshold`).

use std::time::Duration;

use rollout_proto::duration::{self, Rules};
use serde_json::{Map, Value};

use super::{Comparison, Problems};
use crate::template::Template;

/// The keys a layer may hold; each one left out keeps the layer below.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layer {
    /// `checks`: replaces the whole list of the layer below.
    pub checks: Option<Vec<CheckSpec>>,
    /// `deadline`: how long after the cluster's update the checks may stay
    /// undecided.
    pub deadline: Option<Duration>,
    /// `window`: the default of each check's `window`.
    pub window: Option<Duration>,
    /// `interval`: the default of each check's `interval`.
    pub interval: Option<Duration>,
    /// `minSamples`: the default of each check's `minSamples`.
    pub min_samples: Option<u32>,
}

/// One check as written; the keys it leaves out come from the layers'
/// defaults when the plan is made.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckSpec {
    /// `name`, or `checks[N]`.
    pub name: String,
    /// `query`.
    pub query: Template,
    /// `comparison`.
    pub comparison: Comparison,
    /// `threshold`.
    pub threshold: f64,
    /// `window`.
    pub window: Option<Duration>,
    /// `interval`.
    pub interval: Option<Duration>,
    /// `minSamples`.
    pub min_samples: Option<u32>,
}

const LAYER_KEYS: [&str; 5] = ["checks", "deadline", "window", "interval", "minSamples"];
const CHECK_KEYS: [&str; 7] = [
    "name",
    "query",
    "comparison",
    "threshold",
    "window",
    "interval",
    "minSamples",
];

/// Reads `value` as a layer; problems are named from `path` (`""` for the
/// top, or `prometheus`).
pub fn read_layer(value: &Value, path: &str, problems: &mut Problems) -> Layer {
    let Some(object) = value.as_object() else {
        problems.push(path, format!("expected an object, found {}", kind(value)));
        return Layer::default();
    };
    unknown_keys(object, &LAYER_KEYS, path, problems);
    let at = |key: &str| join(path, key);
    Layer {
        checks: object
            .get("checks")
            .and_then(|v| read_checks(v, &at("checks"), problems)),
        deadline: object
            .get("deadline")
            .and_then(|v| read_duration(v, &at("deadline"), problems)),
        window: object
            .get("window")
            .and_then(|v| read_duration(v, &at("window"), problems)),
        interval: object
            .get("interval")
            .and_then(|v| read_duration(v, &at("interval"), problems)),
        min_samples: object
            .get("minSamples")
            .and_then(|v| read_count(v, &at("minSamples"), problems)),
    }
}

fn read_checks(value: &Value, path: &str, problems: &mut Problems) -> Option<Vec<CheckSpec>> {
    let Some(list) = value.as_array() else {
        problems.push(path, format!("expected a list, found {}", kind(value)));
        return None;
    };
    if list.is_empty() {
        problems.push(path, "an empty list: nothing would be checked");
    }
    let checks: Vec<_> = list
        .iter()
        .enumerate()
        .map(|(i, v)| read_check(v, i, &format!("{path}[{i}]"), problems))
        .collect();
    let mut names = std::collections::HashSet::new();
    for (i, check) in checks.iter().enumerate() {
        if let Some(check) = check
            && !names.insert(check.name.as_str())
        {
            problems.push(
                &format!("{path}[{i}].name"),
                format!("{:?} names two checks", check.name),
            );
        }
    }
    checks.into_iter().collect()
}

fn read_check(
    value: &Value,
    index: usize,
    path: &str,
    problems: &mut Problems,
) -> Option<CheckSpec> {
    let Some(object) = value.as_object() else {
        problems.push(path, format!("expected an object, found {}", kind(value)));
        return None;
    };
    unknown_keys(object, &CHECK_KEYS, path, problems);
    let at = |key: &str| join(path, key);
    let name = match object.get("name") {
        None => Some(format!("checks[{index}]")),
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        Some(other) => {
            problems.push(
                &at("name"),
                format!("expected a non-empty string, found {}", kind(other)),
            );
            None
        }
    };
    let query = required(object, "query", path, problems).and_then(|v| match v.as_str() {
        None => {
            problems.push(
                &at("query"),
                format!("expected a string, found {}", kind(v)),
            );
            None
        }
        Some(text) => Template::parse(text)
            .map_err(|e| problems.push(&at("query"), e.to_string()))
            .ok(),
    });
    let comparison = required(object, "comparison", path, problems).and_then(|v| {
        let parsed = v.as_str().and_then(Comparison::parse);
        if parsed.is_none() {
            problems.push(
                &at("comparison"),
                format!("expected one of \"<\", \"<=\", \">\", \">=\", found {v}"),
            );
        }
        parsed
    });
    let threshold = required(object, "threshold", path, problems).and_then(|v| {
        let finite = v.as_f64().filter(|f| f.is_finite());
        if finite.is_none() {
            problems.push(
                &at("threshold"),
                format!("expected a number, found {}", kind(v)),
            );
        }
        finite
    });
    let window = object
        .get("window")
        .and_then(|v| read_duration(v, &at("window"), problems));
    let interval = object
        .get("interval")
        .and_then(|v| read_duration(v, &at("interval"), problems));
    let min_samples = object
        .get("minSamples")
        .and_then(|v| read_count(v, &at("minSamples"), problems));
    Some(CheckSpec {
        name: name?,
        query: query?,
        comparison: comparison?,
        threshold: threshold?,
        window,
        interval,
        min_samples,
    })
}

fn required<'v>(
    object: &'v Map<String, Value>,
    key: &str,
    path: &str,
    problems: &mut Problems,
) -> Option<&'v Value> {
    let found = object.get(key);
    if found.is_none() {
        problems.push(&join(path, key), "required");
    }
    found
}

fn read_duration(value: &Value, path: &str, problems: &mut Problems) -> Option<Duration> {
    let Some(text) = value.as_str() else {
        problems.push(
            path,
            format!(
                "expected a duration such as \"30s\" or \"5m\", found {}",
                kind(value)
            ),
        );
        return None;
    };
    match duration::parse_duration(text, Rules::NotNegative) {
        Ok(d) if d.is_zero() => {
            problems.push(path, "must be more than zero");
            None
        }
        Ok(d) => Some(d),
        Err(e) => {
            problems.push(path, e.to_string());
            None
        }
    }
}

fn read_count(value: &Value, path: &str, problems: &mut Problems) -> Option<u32> {
    let count = value
        .as_u64()
        .filter(|n| *n >= 1)
        .and_then(|n| u32::try_from(n).ok());
    if count.is_none() {
        problems.push(
            path,
            format!("expected a whole number of at least 1, found {value}"),
        );
    }
    count
}

fn unknown_keys(object: &Map<String, Value>, known: &[&str], path: &str, problems: &mut Problems) {
    for key in object.keys().filter(|k| !known.contains(&k.as_str())) {
        problems.push(
            &join(path, key),
            format!("unknown key (known: {})", known.join(", ")),
        );
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A JSON value's kind, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
