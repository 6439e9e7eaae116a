//! What a rollout is judged by: the plugin's flags, its `--config` file
//! over them, and the rollout's `pluginConfig.prometheus` over both,
//! validated into a [`Plan`] that reports every problem at once.
//!
//! The pure part of the plugin: no I/O, every input an argument.

mod layer;

use std::fmt;
use std::time::Duration;

pub use layer::{CheckSpec, Layer, read_layer};

use crate::template::Template;

/// The key of a rollout's pluginConfig this plugin reads; the other keys
/// belong to other plugins.
pub const CONFIG_KEY: &str = "prometheus";

/// The most steps one check may ask Prometheus for (`window / interval`):
/// Prometheus refuses a range query of more than 11,000 points.
pub const MAX_STEPS: u64 = 11_000;

/// How a sample is compared with a check's threshold: it passes when
/// `value OP threshold`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    /// `<`
    Less,
    /// `<=`
    AtMost,
    /// `>`
    Greater,
    /// `>=`
    AtLeast,
}

impl Comparison {
    /// `<`, `<=`, `>` or `>=`.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "<" => Self::Less,
            "<=" => Self::AtMost,
            ">" => Self::Greater,
            ">=" => Self::AtLeast,
            _ => return None,
        })
    }

    /// Whether `value` passes against `threshold`. A NaN never passes.
    pub fn passes(self, value: f64, threshold: f64) -> bool {
        match self {
            Self::Less => value < threshold,
            Self::AtMost => value <= threshold,
            Self::Greater => value > threshold,
            Self::AtLeast => value >= threshold,
        }
    }

    /// The operator as written.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Less => "<",
            Self::AtMost => "<=",
            Self::Greater => ">",
            Self::AtLeast => ">=",
        }
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every problem of a configuration, each with the path of its field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems(Vec<(String, String)>);

impl Problems {
    /// Records that the field at `path` is wrong, and why.
    pub fn push(&mut self, path: &str, why: impl Into<String>) {
        self.0.push((path.to_owned(), why.into()));
    }

    /// Whether nothing is wrong.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `Ok(value)` when nothing is wrong, else the problems, said of
    /// `source` (the file or the rollout's pluginConfig).
    pub fn into_result<T>(self, source: &str, value: T) -> Result<T, ConfigError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError {
                origin: source.to_owned(),
                problems: self.0,
            })
        }
    }
}

/// A configuration that does not make a plan: where it came from and every
/// field that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// `--config FILE`, or `plugin_config_json (the rollout's pluginConfig)`.
    pub origin: String,
    /// `(path, why)` of each problem, in the order of the fields.
    pub problems: Vec<(String, String)>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.origin)?;
        for (i, (path, why)) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            if path.is_empty() {
                f.write_str(why)?;
            } else {
                write!(f, "{path}: {why}")?;
            }
        }
        Ok(())
    }
}

/// The plugin's defaults, from its flags: what a key no layer sets takes.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// `--deadline`.
    pub deadline: Duration,
    /// `--window`.
    pub window: Duration,
    /// `--interval`.
    pub interval: Duration,
    /// `--min-samples`.
    pub min_samples: u32,
}

impl Default for Defaults {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(600),
            window: Duration::from_secs(300),
            interval: Duration::from_secs(30),
            min_samples: 3,
        }
    }
}

/// One check, every value decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// Its name, for messages.
    pub name: String,
    /// The query template.
    pub query: Template,
    /// How a sample compares with the threshold to pass.
    pub comparison: Comparison,
    /// The threshold.
    pub threshold: f64,
    /// How far back from now samples count (never before the cluster's
    /// update).
    pub window: Duration,
    /// The step between two samples.
    pub interval: Duration,
    /// How many finite samples must exist, all passing, to pass.
    pub min_samples: u32,
}

/// What one rollout's clusters are judged by.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The checks, all of which must pass.
    pub checks: Vec<Check>,
    /// How long after the cluster's update the checks may stay undecided
    /// (too few samples, Prometheus unreachable); FAILED after that.
    pub deadline: Duration,
}

/// The plan of `layers` (the lowest first) over `defaults`: each key from
/// the highest layer that sets it, checks resolved against the defaults,
/// and every combination that could never pass refused. Problems are said
/// of `source`.
pub fn plan(defaults: &Defaults, layers: &[&Layer], source: &str) -> Result<Plan, ConfigError> {
    let pick = |get: fn(&Layer) -> Option<Duration>, fallback: Duration| {
        layers.iter().rev().find_map(|l| get(l)).unwrap_or(fallback)
    };
    let deadline = pick(|l| l.deadline, defaults.deadline);
    let window = pick(|l| l.window, defaults.window);
    let interval = pick(|l| l.interval, defaults.interval);
    let min_samples = layers
        .iter()
        .rev()
        .find_map(|l| l.min_samples)
        .unwrap_or(defaults.min_samples);
    let specs = layers
        .iter()
        .rev()
        .find_map(|l| l.checks.as_ref())
        .cloned()
        .unwrap_or_default();
    let mut problems = Problems::default();
    if specs.is_empty() {
        problems.push(
            "checks",
            format!(
                "no checks: set {CONFIG_KEY}.checks in the rollout's pluginConfig, or give the plugin --config with checks"
            ),
        );
    }
    let checks: Vec<Check> = specs
        .into_iter()
        .map(|spec| Check {
            window: spec.window.unwrap_or(window),
            interval: spec.interval.unwrap_or(interval),
            min_samples: spec.min_samples.unwrap_or(min_samples),
            name: spec.name,
            query: spec.query,
            comparison: spec.comparison,
            threshold: spec.threshold,
        })
        .collect();
    for (i, check) in checks.iter().enumerate() {
        reachable(check, deadline, &format!("checks[{i}]"), &mut problems);
    }
    problems.into_result(source, Plan { checks, deadline })
}

/// Refuses a check that could never pass: more steps than Prometheus
/// answers, more samples than its window or the deadline hold.
fn reachable(check: &Check, deadline: Duration, path: &str, problems: &mut Problems) {
    let steps = check.window.as_nanos() / check.interval.as_nanos().max(1);
    if steps > u128::from(MAX_STEPS) {
        problems.push(
            path,
            format!(
                "window {:?} / interval {:?} is {steps} steps, more than Prometheus answers ({MAX_STEPS})",
                check.window, check.interval
            ),
        );
    }
    // Samples at the cluster's update, then one per interval.
    let needed = check.interval * check.min_samples.saturating_sub(1);
    if needed > check.window {
        problems.push(
            path,
            format!(
                "minSamples {} one interval ({:?}) apart need {needed:?}, more than the window ({:?})",
                check.min_samples, check.interval, check.window
            ),
        );
    }
    if needed > deadline {
        problems.push(
            path,
            format!(
                "minSamples {} one interval ({:?}) apart need {needed:?}, more than the deadline ({deadline:?})",
                check.min_samples, check.interval
            ),
        );
    }
}

/// Where a rollout's problems are said to come from.
pub const ROLLOUT_SOURCE: &str = "plugin_config_json (the rollout's pluginConfig)";

/// The layer of a rollout's `plugin_config_json`: its `prometheus` object,
/// or an empty layer when the rollout has no configuration or no such key.
pub fn rollout_layer(plugin_config_json: &str) -> Result<Layer, ConfigError> {
    let mut problems = Problems::default();
    if plugin_config_json.trim().is_empty() {
        return Ok(Layer::default());
    }
    let layer = match serde_json::from_str::<serde_json::Value>(plugin_config_json) {
        Err(e) => {
            problems.push("", format!("not JSON: {e}"));
            Layer::default()
        }
        Ok(serde_json::Value::Object(top)) => match top.get(CONFIG_KEY) {
            None => Layer::default(),
            Some(value) => read_layer(value, CONFIG_KEY, &mut problems),
        },
        Ok(_) => {
            problems.push("", "expected a JSON object");
            Layer::default()
        }
    };
    problems.into_result(ROLLOUT_SOURCE, layer)
}

/// The layer of a `--config` file's text (the keys of
/// `pluginConfig.prometheus`, at the top), said of `source`.
pub fn file_layer(text: &str, source: &str) -> Result<Layer, ConfigError> {
    let mut problems = Problems::default();
    let layer = match serde_json::from_str::<serde_json::Value>(text) {
        Err(e) => {
            problems.push("", format!("not JSON: {e}"));
            Layer::default()
        }
        Ok(value) => read_layer(&value, "", &mut problems),
    };
    problems.into_result(source, layer)
}

#[cfg(test)]
mod tests;
