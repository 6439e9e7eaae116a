//! The rollout strategy: its raw Kubernetes form and the validated, typed form
//! the engine runs.
//!
//! [`RawStrategy`] is the `rolloutStrategy` field of a placement reference as
//! it appears in a ManifestWorkReplicaSet (camelCase, `type` plus one of
//! `all`, `progressive`, `progressivePerGroup`), with the design's additions
//! `plugin`, `pluginConfig`, `abortOnFailure` and its other spelling
//! `failureStrategy: AbortAll`. [`Strategy::from_raw`] checks every field at
//! once and returns either a [`Strategy`] or every problem found, each naming
//! its field and the bad value. Unknown fields are ignored, as the API server
//! prunes them.
//!
//! Validation follows what a hub would accept: `progressDeadline` must match
//! the CRD pattern and be a Go duration; a count-or-percentage must be an
//! integer or a string `N%` with N from 0 to 100 (the CRD pattern, restricted
//! to the strings OCM's `parseRolloutSize` accepts); `minSuccessTime` must be a
//! Go duration.

use std::fmt;

use bytes::Bytes;
use jiff::SignedDuration;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};
use thiserror::Error;

use super::duration::{DeadlineError, DurationError, parse_go_duration, parse_progress_deadline};

/// A Kubernetes `IntOrString` as written, before validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IntOrString {
    /// A JSON number.
    Int(i64),
    /// A JSON string, such as `"25%"`.
    String(String),
}

impl fmt::Display for IntOrString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrString::Int(v) => write!(f, "{v}"),
            IntOrString::String(s) => write!(f, "{s:?}"),
        }
    }
}

impl Serialize for IntOrString {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrString::Int(v) => serializer.serialize_i64(*v),
            IntOrString::String(s) => serializer.serialize_str(s),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct IntOrStringVisitor;

        impl Visitor<'_> for IntOrStringVisitor {
            type Value = IntOrString;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or a percentage string such as \"25%\"")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrString, E> {
                Ok(IntOrString::Int(v))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrString, E> {
                i64::try_from(v)
                    .map(IntOrString::Int)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrString, E> {
                Ok(IntOrString::String(v.to_owned()))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<IntOrString, E> {
                Ok(IntOrString::String(v))
            }
        }

        deserializer.deserialize_any(IntOrStringVisitor)
    }
}

/// The `rolloutStrategy` field exactly as Kubernetes spells it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawStrategy {
    /// `All`, `Progressive` or `ProgressivePerGroup`; absent means `All`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    /// Settings of type `All`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) all: Option<RawRolloutConfig>,
    /// Settings of type `Progressive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) progressive: Option<RawProgressive>,
    /// Settings of type `ProgressivePerGroup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) progressive_per_group: Option<RawProgressivePerGroup>,
    /// The design's additions: the plugin, its settings and the abort.
    #[serde(flatten)]
    pub additions: RawAdditions,
}

/// The design's additions to a placement's `rolloutStrategy`, which OCM's
/// own schema does not have: on a hub whose ManifestWorkReplicaSet CRD is
/// OCM's they live in a ManifestWorkReplicaSetRollout instead
/// (`crate::api::manifestworkreplicasetrollout`), with the same spelling.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RawAdditions {
    /// The design's rollout plugin (or gateway pipeline) name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) plugin: Option<String>,
    /// Free-form settings for the plugin, sent with every hook call of the
    /// rollout (docs/plugin-api.md §1, "Plugin configuration").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) plugin_config: Option<Map<String, Value>>,
    /// The design's automatic abort on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) abort_on_failure: Option<bool>,
    /// The rollback design's spelling of the abort: `AbortAll`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failure_strategy: Option<String>,
    /// How an abort restores the updated clusters: `AtOnce` (the default)
    /// or `Strategy` (at the rollout strategy's pace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rollback_pace: Option<String>,
}

impl RawAdditions {
    /// Each field of `self`, or of `fallback` where `self` does not set it.
    pub(crate) fn or(&self, fallback: &RawAdditions) -> RawAdditions {
        RawAdditions {
            plugin: self.plugin.clone().or_else(|| fallback.plugin.clone()),
            plugin_config: self
                .plugin_config
                .clone()
                .or_else(|| fallback.plugin_config.clone()),
            abort_on_failure: self.abort_on_failure.or(fallback.abort_on_failure),
            failure_strategy: self
                .failure_strategy
                .clone()
                .or_else(|| fallback.failure_strategy.clone()),
            rollback_pace: self
                .rollback_pace
                .clone()
                .or_else(|| fallback.rollback_pace.clone()),
        }
    }
}

/// `RolloutConfig`: the settings every strategy type carries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawRolloutConfig {
    /// Soak time, a Go duration; default `0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) min_success_time: Option<String>,
    /// `None` or a Go duration matching `^(([0-9])+[h|m|s])|None$`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) progress_deadline: Option<String>,
    /// Count or percentage of clusters allowed to fail; default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_failures: Option<IntOrString>,
}

/// A `mandatoryDecisionGroups` entry: a group name, else a group index.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawMandatoryGroup {
    /// Decision group name; wins over the index when not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) group_name: Option<String>,
    /// Decision group index; default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) group_index: Option<i32>,
}

/// `RolloutProgressive`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawProgressive {
    /// The inlined `RolloutConfig`.
    #[serde(flatten)]
    pub(crate) config: RawRolloutConfig,
    /// Groups rolled out first, tolerating no failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mandatory_decision_groups: Option<Vec<RawMandatoryGroup>>,
    /// Count or percentage of clusters rolled out at once; default all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_concurrency: Option<IntOrString>,
}

/// `RolloutProgressivePerGroup`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RawProgressivePerGroup {
    /// The inlined `RolloutConfig`.
    #[serde(flatten)]
    pub(crate) config: RawRolloutConfig,
    /// Groups rolled out first, tolerating no failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mandatory_decision_groups: Option<Vec<RawMandatoryGroup>>,
}

/// A validated count-or-percentage (`maxFailures`, `maxConcurrency`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threshold {
    /// An absolute number of clusters (may be zero or negative, which
    /// [`Threshold::size`] turns into the default).
    Count(i32),
    /// A percentage, 0 to 100.
    Percent(u8),
}

impl Default for Threshold {
    /// Kubernetes' zero value: the integer 0.
    fn default() -> Self {
        Threshold::Count(0)
    }
}

impl Threshold {
    /// OCM's `calculateRolloutSize`: a count as is, a percentage as
    /// `ceil(pct / 100 × total)` in floating point (so `7%` of 100 is 8, as
    /// in OCM); a result ≤ 0 or > `total` becomes `default`.
    pub(crate) fn size(self, total: usize, default: usize) -> usize {
        let length: i64 = match self {
            Threshold::Count(v) => i64::from(v),
            Threshold::Percent(p) => (f64::from(p) / 100.0 * total as f64).ceil() as i64,
        };
        match usize::try_from(length) {
            Ok(n) if n > 0 && n <= total => n,
            _ => default,
        }
    }
}

/// A mandatory decision group, by name or by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MandatoryGroup {
    /// Every decision group with this name.
    Name(String),
    /// The decision group with this index.
    Index(i32),
}

/// The validated `RolloutConfig`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RolloutConfig {
    /// Soak time after success (ignored by `All`).
    pub min_success_time: SignedDuration,
    /// How long a cluster may stay in flight; `None` waits for ever.
    pub progress_deadline: Option<SignedDuration>,
    /// Failures tolerated (ignored by `All`).
    pub max_failures: Threshold,
}

/// The strategy type with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RolloutKind {
    /// Every cluster at once.
    All(RolloutConfig),
    /// Cluster by cluster, `max_concurrency` at a time.
    Progressive {
        /// Common settings.
        config: RolloutConfig,
        /// Groups rolled out first.
        mandatory: Vec<MandatoryGroup>,
        /// Clusters in flight at once, counted against the non-mandatory
        /// clusters; the default [`Threshold::Count`]`(0)` means all of them.
        max_concurrency: Threshold,
    },
    /// Group by group.
    ProgressivePerGroup {
        /// Common settings; `max_failures` is counted per group.
        config: RolloutConfig,
        /// Groups rolled out first.
        mandatory: Vec<MandatoryGroup>,
    },
}

/// A validated rollout strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strategy {
    /// The type and its settings.
    pub kind: RolloutKind,
    /// The rollout plugin to call, if any (never empty).
    pub plugin: Option<String>,
    /// `pluginConfig` as compact JSON text, at most
    /// [`MAX_PLUGIN_CONFIG_BYTES`]: encoded once when the strategy is
    /// validated, then shared (a reference count) by every hook request of
    /// the rollout. `None` when the strategy has none.
    pub plugin_config: Option<Bytes>,
    /// Whether a failure aborts the rollout (`abortOnFailure: true` or
    /// `failureStrategy: AbortAll`).
    pub abort_on_failure: bool,
    /// How an abort restores the updated clusters.
    pub(crate) rollback_pace: RollbackPace,
}

/// How an abort restores the previous revision on the clusters already
/// updated (`rollbackPace`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) enum RollbackPace {
    /// Every updated cluster at once, the failing ones first: the rollback
    /// design's abort (restore, not a new rollout), as Argo Rollouts and
    /// Flagger restore.
    #[default]
    AtOnce,
    /// At the rollout strategy's pace (`maxConcurrency`, decision groups),
    /// as a new rollout of the previous revision would go.
    Strategy,
}

impl Default for Strategy {
    /// OCM's default: `{type: All, all: {progressDeadline: None}}`.
    fn default() -> Self {
        Strategy {
            kind: RolloutKind::All(RolloutConfig::default()),
            plugin: None,
            plugin_config: None,
            abort_on_failure: false,
            rollback_pace: RollbackPace::AtOnce,
        }
    }
}

/// One problem with a strategy; the message names the field and the value.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(crate) enum StrategyError {
    /// `type` is not one of the three known types.
    #[error(
        "type: unknown rollout strategy type {0:?} (expected All, Progressive or ProgressivePerGroup)"
    )]
    UnknownType(String),
    /// A `progressDeadline` that OCM would reject.
    #[error("{field}: invalid progressDeadline {value:?}: {source}")]
    ProgressDeadline {
        /// Path of the field, such as `progressive.progressDeadline`.
        field: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        source: DeadlineError,
    },
    /// A `minSuccessTime` that is not a Go duration.
    #[error("{field}: invalid minSuccessTime {value:?}: {source}")]
    MinSuccessTime {
        /// Path of the field.
        field: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        source: DurationError,
    },
    /// A `maxFailures` or `maxConcurrency` that is neither an int32 nor a
    /// percentage from 0% to 100%.
    #[error(
        "{field}: invalid value {value}: expected an integer or a percentage from \"0%\" to \"100%\""
    )]
    Threshold {
        /// Path of the field.
        field: String,
        /// The value as written (strings quoted).
        value: String,
    },
    /// `rollbackPace` other than `AtOnce` and `Strategy`.
    #[error("rollbackPace: unknown value {0:?} (expected AtOnce or Strategy)")]
    RollbackPace(String),
    /// `failureStrategy` other than `AbortAll`.
    #[error("failureStrategy: unknown value {0:?} (expected AbortAll)")]
    FailureStrategy(String),
    /// `abortOnFailure: false` next to `failureStrategy: AbortAll`.
    #[error("abortOnFailure: false contradicts failureStrategy: AbortAll")]
    AbortConflict,
    /// A `pluginConfig` whose JSON is larger than [`MAX_PLUGIN_CONFIG_BYTES`].
    #[error("pluginConfig: {size} bytes of JSON, above the limit of {limit} bytes")]
    PluginConfigTooLarge {
        /// Its size as compact JSON.
        size: usize,
        /// [`MAX_PLUGIN_CONFIG_BYTES`].
        limit: usize,
    },
    /// A `pluginConfig` nesting arrays and objects deeper than the gateway
    /// takes (`rollout_proto::partial::MAX_PLUGIN_CONFIG_DEPTH`).
    #[error("pluginConfig: nests arrays and objects more than {limit} levels deep")]
    PluginConfigTooDeep {
        /// [`rollout_proto::partial::MAX_PLUGIN_CONFIG_DEPTH`].
        limit: usize,
    },
}

/// The largest `pluginConfig`, as compact JSON: 64 KiB. It is sent with every
/// hook call of the rollout, so it stays far below a gRPC message's limit
/// (docs/plugin-api.md §1, "Plugin configuration").
pub(crate) const MAX_PLUGIN_CONFIG_BYTES: usize = 64 * 1024;

/// Every problem found in a strategy, at least one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid rollout strategy: {}", join(.problems))]
pub struct InvalidStrategy {
    /// The problems, in field order.
    pub(crate) problems: Vec<StrategyError>,
}

fn join(problems: &[StrategyError]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Strategy {
    /// Validates a raw strategy.
    ///
    /// Every present sub-object is checked (the API server would reject a bad
    /// one even when `type` does not use it), and only the one `type` names is
    /// kept. An absent `type` means `All`; an absent sub-object means its
    /// defaults. Fails with every problem found.
    pub fn from_raw(raw: &RawStrategy) -> Result<Strategy, InvalidStrategy> {
        let mut problems = Vec::new();
        let kind = kind_from_raw(raw, &mut problems);
        let additions = &raw.additions;
        let abort_all = abort_all_from_raw(additions, &mut problems);
        let rollback_pace = rollback_pace_from_raw(additions, &mut problems);
        let plugin_config = plugin_config_from_raw(additions, &mut problems);
        match kind {
            Some(kind) if problems.is_empty() => Ok(Strategy {
                kind,
                plugin: additions.plugin.clone().filter(|p| !p.is_empty()),
                plugin_config,
                abort_on_failure: abort_all || additions.abort_on_failure == Some(true),
                rollback_pace,
            }),
            _ => Err(InvalidStrategy { problems }),
        }
    }

    /// The settings shared by every type.
    pub fn config(&self) -> &RolloutConfig {
        match &self.kind {
            RolloutKind::All(config)
            | RolloutKind::Progressive { config, .. }
            | RolloutKind::ProgressivePerGroup { config, .. } => config,
        }
    }

    /// The type as Kubernetes spells it.
    pub fn type_name(&self) -> &'static str {
        match self.kind {
            RolloutKind::All(_) => "All",
            RolloutKind::Progressive { .. } => "Progressive",
            RolloutKind::ProgressivePerGroup { .. } => "ProgressivePerGroup",
        }
    }
}

impl TryFrom<&RawStrategy> for Strategy {
    type Error = InvalidStrategy;

    fn try_from(raw: &RawStrategy) -> Result<Self, Self::Error> {
        Strategy::from_raw(raw)
    }
}

/// The type `raw` names, with its settings; every present sub-object is
/// checked. `None` for an unknown type (the first problem then).
fn kind_from_raw(raw: &RawStrategy, problems: &mut Vec<StrategyError>) -> Option<RolloutKind> {
    let all = raw
        .all
        .as_ref()
        .map(|c| config_from_raw("all", c, problems))
        .unwrap_or_default();
    let progressive = raw.progressive.as_ref().map(|p| {
        let config = config_from_raw("progressive", &p.config, problems);
        let max_concurrency = p
            .max_concurrency
            .as_ref()
            .map(|v| threshold_from_raw("progressive.maxConcurrency", v, problems))
            .unwrap_or_default();
        (
            config,
            mandatory_from_raw(&p.mandatory_decision_groups),
            max_concurrency,
        )
    });
    let per_group = raw.progressive_per_group.as_ref().map(|p| {
        let config = config_from_raw("progressivePerGroup", &p.config, problems);
        (config, mandatory_from_raw(&p.mandatory_decision_groups))
    });
    match raw.kind.as_deref() {
        None | Some("All") => Some(RolloutKind::All(all)),
        Some("Progressive") => {
            let (config, mandatory, max_concurrency) = progressive.unwrap_or_default();
            Some(RolloutKind::Progressive {
                config,
                mandatory,
                max_concurrency,
            })
        }
        Some("ProgressivePerGroup") => {
            let (config, mandatory) = per_group.unwrap_or_default();
            Some(RolloutKind::ProgressivePerGroup { config, mandatory })
        }
        Some(other) => {
            problems.insert(0, StrategyError::UnknownType(other.to_owned()));
            None
        }
    }
}

/// Whether `failureStrategy` says `AbortAll` (and `abortOnFailure` does
/// not contradict it).
fn abort_all_from_raw(additions: &RawAdditions, problems: &mut Vec<StrategyError>) -> bool {
    let abort_all = match additions.failure_strategy.as_deref() {
        None | Some("") => false,
        Some("AbortAll") => true,
        Some(other) => {
            problems.push(StrategyError::FailureStrategy(other.to_owned()));
            false
        }
    };
    if abort_all && additions.abort_on_failure == Some(false) {
        problems.push(StrategyError::AbortConflict);
    }
    abort_all
}

fn rollback_pace_from_raw(
    additions: &RawAdditions,
    problems: &mut Vec<StrategyError>,
) -> RollbackPace {
    match additions.rollback_pace.as_deref() {
        None | Some("") | Some("AtOnce") => RollbackPace::AtOnce,
        Some("Strategy") => RollbackPace::Strategy,
        Some(other) => {
            problems.push(StrategyError::RollbackPace(other.to_owned()));
            RollbackPace::AtOnce
        }
    }
}

/// `pluginConfig` as compact JSON, within [`MAX_PLUGIN_CONFIG_BYTES`] and
/// nested at most `rollout_proto::partial::MAX_PLUGIN_CONFIG_DEPTH` deep.
fn plugin_config_from_raw(
    additions: &RawAdditions,
    problems: &mut Vec<StrategyError>,
) -> Option<Bytes> {
    let config = additions.plugin_config.as_ref()?;
    // A map of JSON values always serializes; the fallback is never taken.
    let text = serde_json::to_vec(config).unwrap_or_default();
    if text.len() > MAX_PLUGIN_CONFIG_BYTES {
        problems.push(StrategyError::PluginConfigTooLarge {
            size: text.len(),
            limit: MAX_PLUGIN_CONFIG_BYTES,
        });
        return None;
    }
    // The gateway refuses deeper, before any plugin sees it: refused here,
    // the strategy says why, instead of every hook call failing.
    let limit = rollout_proto::partial::MAX_PLUGIN_CONFIG_DEPTH;
    if rollout_proto::partial::nests_deeper_than(&text, limit) {
        problems.push(StrategyError::PluginConfigTooDeep { limit });
        return None;
    }
    Some(Bytes::from(text))
}

fn config_from_raw(
    prefix: &str,
    raw: &RawRolloutConfig,
    problems: &mut Vec<StrategyError>,
) -> RolloutConfig {
    let mut config = RolloutConfig::default();
    if let Some(value) = &raw.min_success_time {
        match parse_go_duration(value) {
            Ok(d) => config.min_success_time = d,
            Err(source) => problems.push(StrategyError::MinSuccessTime {
                field: format!("{prefix}.minSuccessTime"),
                value: value.clone(),
                source,
            }),
        }
    }
    if let Some(value) = &raw.progress_deadline {
        match parse_progress_deadline(value) {
            Ok(d) => config.progress_deadline = d,
            Err(source) => problems.push(StrategyError::ProgressDeadline {
                field: format!("{prefix}.progressDeadline"),
                value: value.clone(),
                source,
            }),
        }
    }
    if let Some(value) = &raw.max_failures {
        config.max_failures = threshold_from_raw(&format!("{prefix}.maxFailures"), value, problems);
    }
    config
}

fn threshold_from_raw(
    field: &str,
    raw: &IntOrString,
    problems: &mut Vec<StrategyError>,
) -> Threshold {
    let parsed = match raw {
        // IntOrString holds an int32.
        IntOrString::Int(v) => i32::try_from(*v).ok().map(Threshold::Count),
        IntOrString::String(s) => parse_percent(s).map(Threshold::Percent),
    };
    parsed.unwrap_or_else(|| {
        problems.push(StrategyError::Threshold {
            field: field.to_owned(),
            value: raw.to_string(),
        });
        Threshold::default()
    })
}

/// `^(100|[0-9]{1,2})%$`: the CRD pattern's percentage branch. A digit string
/// without `%` matches the CRD pattern but OCM's `parseRolloutSize` rejects
/// it, so it is rejected here too.
fn parse_percent(s: &str) -> Option<u8> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if digits.len() == 3 && digits != "100" {
        return None;
    }
    digits.parse().ok()
}

fn mandatory_from_raw(raw: &Option<Vec<RawMandatoryGroup>>) -> Vec<MandatoryGroup> {
    raw.iter()
        .flatten()
        .map(|g| match g.group_name.as_deref() {
            // The name wins when set, as in OCM's decisionGroupsToGroupKeys.
            Some(name) if !name.is_empty() => MandatoryGroup::Name(name.to_owned()),
            _ => MandatoryGroup::Index(g.group_index.unwrap_or(0)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> RawStrategy {
        serde_json::from_str(json).expect("raw strategy parses")
    }

    fn strategy(json: &str) -> Result<Strategy, InvalidStrategy> {
        Strategy::from_raw(&raw(json))
    }

    #[test]
    fn defaults() {
        assert_eq!(strategy("{}"), Ok(Strategy::default()));
        assert_eq!(strategy(r#"{"type": "All"}"#), Ok(Strategy::default()));
        let s = strategy(r#"{"type": "Progressive"}"#).expect("valid");
        assert_eq!(
            s.kind,
            RolloutKind::Progressive {
                config: RolloutConfig::default(),
                mandatory: vec![],
                max_concurrency: Threshold::Count(0),
            }
        );
        assert_eq!(s.type_name(), "Progressive");
    }

    #[test]
    fn full_progressive() {
        let s = strategy(
            r#"{"type": "Progressive", "plugin": "canary", "abortOnFailure": true,
                "progressive": {"minSuccessTime": "1m", "progressDeadline": "90s",
                  "maxFailures": "10%", "maxConcurrency": 3,
                  "mandatoryDecisionGroups": [{"groupName": "canary"}, {"groupIndex": 2},
                                              {"groupName": "", "groupIndex": 1}, {}]}}"#,
        )
        .expect("valid");
        assert_eq!(s.plugin.as_deref(), Some("canary"));
        assert!(s.abort_on_failure);
        assert_eq!(
            s.kind,
            RolloutKind::Progressive {
                config: RolloutConfig {
                    min_success_time: SignedDuration::from_secs(60),
                    progress_deadline: Some(SignedDuration::from_secs(90)),
                    max_failures: Threshold::Percent(10),
                },
                mandatory: vec![
                    MandatoryGroup::Name("canary".into()),
                    MandatoryGroup::Index(2),
                    MandatoryGroup::Index(1),
                    MandatoryGroup::Index(0),
                ],
                max_concurrency: Threshold::Count(3),
            }
        );
    }

    #[test]
    fn the_plugin_config_is_encoded_once_and_bounded() {
        let s = strategy(
            r#"{"plugin": "smoke-test", "pluginConfig": {"failClusters": ["c1"], "n": 9007199254740993, "soakTime": "5m"}}"#,
        )
        .expect("valid");
        let text = s.plugin_config.expect("a config");
        // Compact JSON, integers exact (2^53 + 1 would be rounded as a double).
        assert_eq!(
            std::str::from_utf8(&text).expect("UTF-8"),
            r#"{"failClusters":["c1"],"n":9007199254740993,"soakTime":"5m"}"#
        );
        assert_eq!(
            strategy(r#"{"plugin": "p"}"#).expect("valid").plugin_config,
            None
        );
        assert_eq!(
            strategy(r#"{"pluginConfig": {}}"#)
                .expect("valid")
                .plugin_config,
            Some(Bytes::from_static(b"{}"))
        );

        // {"k":"…"} is 8 bytes around the string: exactly at the limit, then one over.
        let sized = |n: usize| {
            let mut config = Map::new();
            config.insert("k".into(), Value::String("x".repeat(n - 8)));
            Strategy::from_raw(&RawStrategy {
                additions: RawAdditions {
                    plugin_config: Some(config),
                    ..RawAdditions::default()
                },
                ..RawStrategy::default()
            })
        };
        let at_limit = sized(MAX_PLUGIN_CONFIG_BYTES).expect("at the limit");
        assert_eq!(
            at_limit.plugin_config.map(|b| b.len()),
            Some(MAX_PLUGIN_CONFIG_BYTES)
        );
        let err = sized(MAX_PLUGIN_CONFIG_BYTES + 1).expect_err("over the limit");
        assert_eq!(
            err.problems,
            [StrategyError::PluginConfigTooLarge {
                size: 65_537,
                limit: 65_536
            }]
        );
        assert_eq!(
            err.to_string(),
            "invalid rollout strategy: pluginConfig: 65537 bytes of JSON, above the limit of 65536 bytes"
        );

        // Nested to the gateway's limit, then one deeper.
        let nested = |depth: usize| {
            let mut value = Value::Null;
            for _ in 1..depth {
                value = Value::Array(vec![value]);
            }
            let mut config = Map::new();
            config.insert("k".into(), value);
            Strategy::from_raw(&RawStrategy {
                additions: RawAdditions {
                    plugin_config: Some(config),
                    ..RawAdditions::default()
                },
                ..RawStrategy::default()
            })
        };
        let deepest = rollout_proto::partial::MAX_PLUGIN_CONFIG_DEPTH;
        nested(deepest).expect("at the limit");
        assert_eq!(
            nested(deepest + 1).expect_err("too deep").problems,
            [StrategyError::PluginConfigTooDeep { limit: deepest }]
        );
    }

    #[test]
    fn only_the_named_type_is_kept() {
        let s = strategy(
            r#"{"type": "ProgressivePerGroup", "all": {"progressDeadline": "5s"},
                "progressivePerGroup": {"maxFailures": 2}}"#,
        )
        .expect("valid");
        assert_eq!(
            s.kind,
            RolloutKind::ProgressivePerGroup {
                config: RolloutConfig {
                    max_failures: Threshold::Count(2),
                    ..RolloutConfig::default()
                },
                mandatory: vec![],
            }
        );
        assert_eq!(s.config().progress_deadline, None);
    }

    #[test]
    fn abort_spellings() {
        let abort = |json: &str| strategy(json).map(|s| s.abort_on_failure);
        assert_eq!(abort(r#"{"abortOnFailure": true}"#), Ok(true));
        assert_eq!(abort(r#"{"abortOnFailure": false}"#), Ok(false));
        assert_eq!(abort(r#"{"failureStrategy": "AbortAll"}"#), Ok(true));
        assert_eq!(
            abort(r#"{"failureStrategy": "AbortAll", "abortOnFailure": true}"#),
            Ok(true)
        );
        assert_eq!(
            abort(r#"{"failureStrategy": "AbortAll", "abortOnFailure": false}"#),
            Err(InvalidStrategy {
                problems: vec![StrategyError::AbortConflict]
            })
        );
        assert_eq!(
            abort(r#"{"failureStrategy": "Abort"}"#),
            Err(InvalidStrategy {
                problems: vec![StrategyError::FailureStrategy("Abort".into())]
            })
        );
        assert_eq!(strategy(r#"{"plugin": ""}"#).map(|s| s.plugin), Ok(None));
    }

    #[test]
    fn thresholds() {
        let cases: &[(&str, Option<Threshold>)] = &[
            ("0", Some(Threshold::Count(0))),
            ("5", Some(Threshold::Count(5))),
            ("-1", Some(Threshold::Count(-1))),
            ("2147483647", Some(Threshold::Count(i32::MAX))),
            ("2147483648", None),
            (r#""0%""#, Some(Threshold::Percent(0))),
            (r#""5%""#, Some(Threshold::Percent(5))),
            (r#""05%""#, Some(Threshold::Percent(5))),
            (r#""100%""#, Some(Threshold::Percent(100))),
            (r#""101%""#, None),
            (r#""200%""#, None),
            (r#""1000%""#, None),
            (r#""2.5%""#, None),
            (r#""%""#, None),
            (r#""5""#, None),
            (r#""-5%""#, None),
            (r#""abc""#, None),
        ];
        for (value, want) in cases {
            let json = format!(
                r#"{{"type": "Progressive", "progressive": {{"maxConcurrency": {value}}}}}"#
            );
            let got = strategy(&json).map(|s| match s.kind {
                RolloutKind::Progressive {
                    max_concurrency, ..
                } => max_concurrency,
                _ => unreachable!("type is Progressive"),
            });
            assert_eq!(got.ok(), *want, "maxConcurrency {value}");
        }
    }

    #[test]
    fn threshold_sizes() {
        // (threshold, total, default, want)
        let cases = [
            (Threshold::Count(2), 6, 6, 2),
            (Threshold::Count(0), 6, 6, 6),
            (Threshold::Count(-3), 6, 0, 0),
            (Threshold::Count(7), 6, 0, 0),
            (Threshold::Count(6), 6, 0, 6),
            (Threshold::Percent(50), 6, 6, 3),
            (Threshold::Percent(30), 3, 0, 1),
            (Threshold::Percent(0), 6, 0, 0),
            (Threshold::Percent(100), 6, 0, 6),
            (Threshold::Percent(1), 1000, 0, 10),
            // Floating point as in OCM: 0.07 * 100 = 7.000000000000001.
            (Threshold::Percent(7), 100, 0, 8),
            (Threshold::Percent(10), 0, 0, 0),
        ];
        for (threshold, total, default, want) in cases {
            assert_eq!(
                threshold.size(total, default),
                want,
                "{threshold:?} of {total} (default {default})"
            );
        }
    }

    #[test]
    fn every_problem_is_reported_with_field_and_value() {
        let err = strategy(
            r#"{"type": "Rolling", "all": {"progressDeadline": "2d"},
                "progressive": {"minSuccessTime": "soon", "maxFailures": "5", "maxConcurrency": "150%"},
                "progressivePerGroup": {"progressDeadline": "0"},
                "failureStrategy": "Retry"}"#,
        )
        .expect_err("invalid");
        let messages: Vec<String> = err.problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                r#"type: unknown rollout strategy type "Rolling" (expected All, Progressive or ProgressivePerGroup)"#,
                r#"all.progressDeadline: invalid progressDeadline "2d": does not match the pattern ^(([0-9])+[h|m|s])|None$"#,
                r#"progressive.minSuccessTime: invalid minSuccessTime "soon": invalid duration "soon""#,
                r#"progressive.maxFailures: invalid value "5": expected an integer or a percentage from "0%" to "100%""#,
                r#"progressive.maxConcurrency: invalid value "150%": expected an integer or a percentage from "0%" to "100%""#,
                r#"progressivePerGroup.progressDeadline: invalid progressDeadline "0": does not match the pattern ^(([0-9])+[h|m|s])|None$"#,
                r#"failureStrategy: unknown value "Retry" (expected AbortAll)"#,
            ]
        );
        assert!(
            err.to_string()
                .starts_with("invalid rollout strategy: type: unknown")
        );
    }

    #[test]
    fn empty_type_is_unknown() {
        assert_eq!(
            strategy(r#"{"type": ""}"#),
            Err(InvalidStrategy {
                problems: vec![StrategyError::UnknownType(String::new())]
            })
        );
    }

    #[test]
    fn raw_round_trips() {
        let json = r#"{"type":"Progressive","progressive":{"progressDeadline":"90s","maxFailures":"10%","mandatoryDecisionGroups":[{"groupName":"a"}],"maxConcurrency":2},"plugin":"p","abortOnFailure":true}"#;
        let parsed = raw(json);
        assert_eq!(serde_json::to_string(&parsed).expect("serializes"), json);
    }

    #[test]
    fn fractional_threshold_is_a_parse_error() {
        let err = serde_json::from_str::<RawStrategy>(
            r#"{"type": "Progressive", "progressive": {"maxConcurrency": 1.5}}"#,
        )
        .expect_err("1.5 is not an IntOrString");
        assert!(
            err.to_string().contains("an integer or a percentage"),
            "{err}"
        );
    }
}
