//! `smoke-test`, the rollout plugin of story 2 (stop a rollout when a
//! cluster fails its post-deployment tests): it answers
//! `ValidateRolloutCompletion` as a smoke test that takes a while would.
//!
//! - During the soak (`--soak`, measured from the first validation request
//!   seen for the same MWRS namespace/name, cluster and `desired_revision`)
//!   it answers INPROGRESS, with `recheck_after` set to the soak time left.
//! - After the soak it answers SUCCEEDED, or FAILED for the clusters named
//!   by `--fail` (the message names the cluster, the revision and why).
//! - Each rollout may set both in its plugin configuration
//!   (`rolloutStrategy.pluginConfig`, docs/plugin-api.md §1, "Plugin
//!   configuration"): `soakTime` (a Go duration) replaces `--soak` and
//!   `failClusters` (a list of cluster names) replaces `--fail`, for that
//!   rollout only ([`RolloutConfig`]); a key left out keeps the flag. A
//!   configuration that does not fit is INVALID_ARGUMENT naming the key.
//! - While the rollout aborts (`aborting`: the last good revision is being
//!   restored) `--fail` clusters pass too: the restored revision is the one
//!   that worked. The restored revision has its own soak (another
//!   `desired_revision`).
//!
//! The first-seen times live in memory, at most `--max-tracked` of them
//! (10 000 by default, a few hundred bytes each); when full, the oldest is
//! forgotten, and a cluster asked about again after that starts a new soak.
//! A restart forgets them all, with the same effect. Answers are otherwise
//! idempotent: asking again during or after the soak gives the same answer
//! (with less time left).
//!
//! It declares only the `ValidateRolloutCompletion` hook, and only the
//! rollout counts: it reads its own cluster, revision and `aborting`, never
//! the list of every cluster's status.
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rollout_plugin_sdk::prelude::*;
use rollout_proto::duration::{self, DurationError};
use serde::Deserialize;

/// The plugin's name, as it answers `Initialize` and prints when listening.
pub const NAME: &str = "smoke-test";
/// Default for [`Settings::max_tracked`].
pub const DEFAULT_MAX_TRACKED: usize = 10_000;

/// How the smoke test behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long each (MWRS, cluster, revision) stays INPROGRESS.
    pub soak: Duration,
    /// Clusters that fail once their soak is over (unless aborting).
    pub fail: HashSet<String>,
    /// How many first-seen times to keep (at least 1).
    pub max_tracked: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            soak: Duration::from_secs(10),
            fail: HashSet::new(),
            max_tracked: DEFAULT_MAX_TRACKED,
        }
    }
}

/// The keys smoke-test reads from a rollout's plugin configuration. Each
/// one left out keeps the flag's value; keys of other plugins are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutConfig {
    /// `soakTime`: the soak of this rollout, a Go duration (`300ms`, `5m`),
    /// instead of `--soak`.
    pub soak_time: Option<String>,
    /// `failClusters`: the clusters that fail in this rollout, instead of
    /// `--fail` (an empty list fails none).
    pub fail_clusters: Option<Vec<String>>,
}

/// What one request is judged by: the flags, with its rollout's
/// configuration over them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules<'a> {
    /// How long each (MWRS, cluster, revision) stays INPROGRESS.
    pub soak: Duration,
    /// Clusters that fail once soaked (unless aborting).
    pub fail: Cow<'a, HashSet<String>>,
    /// Where `fail` comes from, for the failure message: `--fail` or
    /// `the rollout's failClusters`.
    pub fail_source: &'static str,
}

impl Settings {
    /// The rules for `request`: `--soak` and `--fail`, each replaced by its
    /// key in the request's plugin configuration when present. Fails with
    /// INVALID_ARGUMENT naming the key when the configuration does not fit.
    pub fn rules(&self, request: &RolloutPluginRequest) -> Result<Rules<'_>, PluginError> {
        let config: RolloutConfig = request.plugin_config()?.unwrap_or_default();
        let soak = match config.soak_time {
            None => self.soak,
            Some(text) => {
                let bad = |why: String| {
                    PluginError::invalid_argument(format!(
                        "plugin_config_json (the rollout's pluginConfig): soakTime: {why}"
                    ))
                };
                duration::parse_duration(&text, duration::Rules::NotNegative)
                    .map_err(|e| bad(e.to_string()))?
            }
        };
        Ok(match config.fail_clusters {
            None => Rules {
                soak,
                fail: Cow::Borrowed(&self.fail),
                fail_source: "--fail",
            },
            Some(list) => Rules {
                soak,
                fail: Cow::Owned(list.into_iter().collect()),
                fail_source: "the rollout's failClusters",
            },
        })
    }
}

/// What a soak is measured for: one revision of one MWRS on one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SoakKey {
    /// `mwrs_namespace`.
    pub namespace: String,
    /// `mwrs_name`.
    pub name: String,
    /// `cluster_name`.
    pub cluster: String,
    /// `desired_revision`.
    pub revision: String,
}

impl SoakKey {
    /// The key of a request.
    pub fn of(request: &RolloutPluginRequest) -> Self {
        Self {
            namespace: request.mwrs_namespace.clone(),
            name: request.mwrs_name.clone(),
            cluster: request.cluster_name.clone(),
            revision: request.desired_revision.clone(),
        }
    }
}

/// When each key was first seen, at most `capacity` of them, forgetting the
/// oldest first.
#[derive(Debug)]
pub struct FirstSeen {
    at: HashMap<SoakKey, Instant>,
    order: VecDeque<SoakKey>,
    capacity: usize,
}

impl FirstSeen {
    /// An empty table holding at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            at: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// When `key` was first seen; `now` if it is new (recorded, forgetting
    /// the oldest key when full).
    pub fn first_seen(&mut self, key: &SoakKey, now: Instant) -> Instant {
        if let Some(at) = self.at.get(key) {
            return *at;
        }
        while self.order.len() >= self.capacity {
            if let Some(oldest) = self.order.pop_front() {
                self.at.remove(&oldest);
            }
        }
        self.at.insert(key.clone(), now);
        self.order.push_back(key.clone());
        now
    }

    /// How many keys it holds.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

/// The answer for `request` under `rules`, first seen at `first_seen`, at
/// `now`.
pub fn decide(
    rules: &Rules<'_>,
    request: &RolloutPluginRequest,
    first_seen: Instant,
    now: Instant,
) -> Validation {
    let cluster = &request.cluster_name;
    let revision = &request.desired_revision;
    let elapsed = now.saturating_duration_since(first_seen);
    if let Some(left) = rules.soak.checked_sub(elapsed).filter(|d| !d.is_zero()) {
        return Validation::in_progress(format!(
            "smoke test soaking on {cluster} (revision {revision}): {} of {} left",
            millis(left),
            millis(rules.soak)
        ))
        .recheck_after(left);
    }
    if rules.fail.contains(cluster) && !request.aborting {
        return Validation::failed(format!(
            "smoke test failed on {cluster} (revision {revision}): the cluster is listed by {}",
            rules.fail_source
        ));
    }
    Validation::succeeded().with_message(format!(
        "smoke test passed on {cluster} (revision {revision}) after a {} soak",
        millis(rules.soak)
    ))
}

/// A duration rounded up to whole milliseconds, for messages (`1.5s`, `250ms`).
fn millis(d: Duration) -> String {
    let ms = d.as_nanos().div_ceil(1_000_000);
    format!(
        "{:?}",
        Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
    )
}

/// Why `--soak` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SoakError {
    /// A duration below zero.
    #[error(transparent)]
    Negative(DurationError),
    /// Not a Go duration at all.
    #[error("{text:?} is not a duration like 500ms, 10s or 2m: {source}")]
    Unreadable {
        /// The flag's value as given.
        text: String,
        /// What the parser found wrong.
        #[source]
        source: DurationError,
    },
}

/// Parses a Go duration (`500ms`, `10s`, `2m`, `1h30m`), not negative, for
/// `--soak`: the workspace's one Go duration parser, as for `soakTime`.
pub fn parse_duration(text: &str) -> Result<Duration, SoakError> {
    duration::parse_duration(text, duration::Rules::NotNegative).map_err(|e| match e {
        DurationError::Negative(_) => SoakError::Negative(e),
        _ => SoakError::Unreadable {
            text: text.to_owned(),
            source: e,
        },
    })
}

/// The plugin.
#[derive(Debug)]
pub struct SmokeTest {
    settings: Settings,
    first_seen: Mutex<FirstSeen>,
}

impl SmokeTest {
    /// A smoke test with these settings and nothing seen yet.
    pub fn new(settings: Settings) -> Self {
        let first_seen = Mutex::new(FirstSeen::new(settings.max_tracked));
        Self {
            settings,
            first_seen,
        }
    }

    /// The answer for `request` at `now` (recording it as first seen if new).
    pub fn validate_at(
        &self,
        request: &RolloutPluginRequest,
        now: Instant,
    ) -> Result<Validation, PluginError> {
        if request.cluster_name.is_empty() {
            return Err(PluginError::invalid_argument(
                "ValidateRolloutCompletion without a cluster_name",
            ));
        }
        let rules = self.settings.rules(request)?;
        let key = SoakKey::of(request);
        let first_seen = self
            .first_seen
            .lock()
            .map_err(|_| PluginError::internal("smoke-test state poisoned by an earlier panic"))?
            .first_seen(&key, now);
        Ok(decide(&rules, request, first_seen, now))
    }
}

impl RolloutPlugin for SmokeTest {
    fn info(&self) -> PluginInfo {
        // It soaks its own cluster: the per-cluster list would only cost bytes.
        PluginInfo::new(NAME, env!("CARGO_PKG_VERSION"))
            .hooks([Hook::ValidateRolloutCompletion])
            .state_detail(RolloutStateDetail::Counts)
    }

    async fn validate_rollout_completion(
        &self,
        request: RolloutPluginRequest,
    ) -> Result<Validation, PluginError> {
        let validation = self.validate_at(&request, tokio::time::Instant::now().into_std())?;
        tracing::info!(
            cluster = %request.cluster_name,
            revision = %request.desired_revision,
            aborting = request.aborting,
            result = validation.result.as_str_name(),
            "validated"
        );
        Ok(validation)
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "an arbitrary origin for a state machine handed its `now`; nothing waits on the clock"
)]
mod tests {
    use super::*;
    use rollout_plugin_sdk::testing;

    fn settings(soak_secs: u64, fail: &[&str]) -> Settings {
        Settings {
            soak: Duration::from_secs(soak_secs),
            fail: fail.iter().map(|s| s.to_string()).collect(),
            max_tracked: 100,
        }
    }

    /// `decide` under the rules `s` gives `request`.
    fn judge(
        s: &Settings,
        request: &RolloutPluginRequest,
        first_seen: Instant,
        now: Instant,
    ) -> Validation {
        decide(&s.rules(request).unwrap(), request, first_seen, now)
    }

    fn configured(cluster: &str, json: &str) -> RolloutPluginRequest {
        RolloutPluginRequest {
            plugin_config_json: json.into(),
            ..testing::rollout(cluster, 1, 2)
        }
    }

    #[test]
    fn the_rollout_config_replaces_each_flag_it_names() {
        let s = settings(10, &["flagged"]);
        let rules = |json: &str| s.rules(&configured("c", json)).unwrap();
        let set =
            |names: &[&str]| -> HashSet<String> { names.iter().map(|n| n.to_string()).collect() };

        // No config, or one without smoke-test's keys: the flags.
        for json in ["", "{}", r#"{"weights":[5,10]}"#] {
            let r = rules(json);
            assert_eq!(
                (r.soak, r.fail.into_owned(), r.fail_source),
                (Duration::from_secs(10), set(&["flagged"]), "--fail"),
                "{json:?}"
            );
        }
        // soakTime alone keeps --fail; failClusters alone keeps --soak.
        let r = rules(r#"{"soakTime":"1m30s"}"#);
        assert_eq!(
            (r.soak, r.fail.into_owned()),
            (Duration::from_secs(90), set(&["flagged"]))
        );
        let r = rules(r#"{"failClusters":["c2","c3"]}"#);
        assert_eq!(
            (r.soak, r.fail.into_owned(), r.fail_source),
            (
                Duration::from_secs(10),
                set(&["c2", "c3"]),
                "the rollout's failClusters"
            )
        );
        // An empty list fails none, whatever --fail says.
        assert!(
            rules(r#"{"failClusters":[],"soakTime":"0s"}"#)
                .fail
                .is_empty()
        );
        assert_eq!(
            rules(r#"{"soakTime":"250ms"}"#).soak,
            Duration::from_millis(250)
        );
    }

    #[test]
    fn a_config_decides_the_answer_of_its_rollout_only() {
        let s = settings(10, &[]);
        let t0 = Instant::now();
        let bad = configured("bad", r#"{"soakTime":"2s","failClusters":["bad"]}"#);
        let v = judge(&s, &bad, t0, t0 + Duration::from_secs(1));
        assert_eq!(
            (v.result, v.recheck_after),
            (ValidationResult::Inprogress, Some(Duration::from_secs(1)))
        );
        let v = judge(&s, &bad, t0, t0 + Duration::from_secs(2));
        assert_eq!(v.result, ValidationResult::Failed);
        assert_eq!(
            v.message,
            "smoke test failed on bad (revision rev-1): the cluster is listed by the rollout's failClusters"
        );
        // The same cluster in a rollout without the config: the flags.
        let plain = testing::rollout("bad", 1, 2);
        assert_eq!(
            judge(&s, &plain, t0, t0 + Duration::from_secs(2)).result,
            ValidationResult::Inprogress
        );
        assert_eq!(
            judge(&s, &plain, t0, t0 + Duration::from_secs(10)).result,
            ValidationResult::Succeeded
        );
    }

    #[test]
    fn a_config_that_does_not_fit_is_invalid_argument_naming_the_key() {
        let plugin = SmokeTest::new(settings(10, &[]));
        for (json, says) in [
            (
                r#"{"soakTime":"ten"}"#,
                "soakTime: invalid duration \"ten\"",
            ),
            (r#"{"soakTime":"-1s"}"#, "soakTime: \"-1s\" is negative"),
            (
                r#"{"soakTime":10}"#,
                "invalid type: integer `10`, expected a string",
            ),
            (r#"{"failClusters":"bad"}"#, "expected a sequence"),
            (r#""5m""#, "expected struct RolloutConfig"),
        ] {
            let err = plugin
                .validate_at(&configured("c", json), Instant::now())
                .unwrap_err();
            assert_eq!(
                err.code(),
                rollout_plugin_sdk::tonic::Code::InvalidArgument,
                "{json}"
            );
            let message = err.to_string();
            assert!(
                message.starts_with("plugin_config_json (the rollout's pluginConfig)"),
                "{message}"
            );
            assert!(message.contains(says), "{json}: {message}");
        }
    }

    #[test]
    fn soaks_then_passes_or_fails() {
        let s = settings(10, &["bad"]);
        let t0 = Instant::now();
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        let good = testing::rollout("good", 1, 2);
        let bad = testing::rollout("bad", 2, 2);
        let mut aborting = bad.clone();
        aborting.aborting = true;

        // (request, seconds since first seen, result, recheck_after in s)
        let table = [
            (&good, 0, ValidationResult::Inprogress, Some(10)),
            (&good, 4, ValidationResult::Inprogress, Some(6)),
            (&good, 10, ValidationResult::Succeeded, None),
            (&good, 99, ValidationResult::Succeeded, None),
            (&bad, 9, ValidationResult::Inprogress, Some(1)),
            (&bad, 10, ValidationResult::Failed, None),
            (&aborting, 3, ValidationResult::Inprogress, Some(7)),
            (&aborting, 10, ValidationResult::Succeeded, None),
        ];
        for (request, secs, result, recheck) in table {
            let v = judge(&s, request, t0, at(secs));
            assert_eq!(v.result, result, "{} at {secs}s", request.cluster_name);
            assert_eq!(
                v.recheck_after,
                recheck.map(Duration::from_secs),
                "{} at {secs}s",
                request.cluster_name
            );
        }
        let failed = judge(&s, &bad, t0, at(10));
        assert_eq!(
            failed.message,
            "smoke test failed on bad (revision rev-1): the cluster is listed by --fail"
        );
        assert_eq!(
            judge(&s, &good, t0, at(4)).message,
            "smoke test soaking on good (revision rev-1): 6s of 10s left"
        );
    }

    #[test]
    fn no_soak_decides_at_once() {
        let s = settings(0, &["bad"]);
        let t0 = Instant::now();
        assert_eq!(
            judge(&s, &testing::rollout("good", 1, 2), t0, t0).result,
            ValidationResult::Succeeded
        );
        assert_eq!(
            judge(&s, &testing::rollout("bad", 1, 2), t0, t0).result,
            ValidationResult::Failed
        );
    }

    #[test]
    fn the_soak_starts_at_the_first_request_per_revision() {
        let plugin = SmokeTest::new(settings(10, &[]));
        let t0 = Instant::now();
        let r1 = testing::rollout("c1", 1, 1);
        assert_eq!(
            plugin.validate_at(&r1, t0).unwrap().result,
            ValidationResult::Inprogress
        );
        let v = plugin
            .validate_at(&r1, t0 + Duration::from_secs(10))
            .unwrap();
        assert_eq!(v.result, ValidationResult::Succeeded);
        // a new revision soaks again; so does another MWRS
        let mut r2 = r1.clone();
        r2.desired_revision = "rev-2".into();
        let v = plugin
            .validate_at(&r2, t0 + Duration::from_secs(10))
            .unwrap();
        assert_eq!(v.recheck_after, Some(Duration::from_secs(10)));
        let mut other = r1.clone();
        other.mwrs_name = "other".into();
        let v = plugin
            .validate_at(&other, t0 + Duration::from_secs(12))
            .unwrap();
        assert_eq!(v.result, ValidationResult::Inprogress);
        // the first revision is still done
        let v = plugin
            .validate_at(&r1, t0 + Duration::from_secs(13))
            .unwrap();
        assert_eq!(v.result, ValidationResult::Succeeded);
    }

    #[test]
    fn a_request_without_a_cluster_is_rejected() {
        let plugin = SmokeTest::new(Settings::default());
        let err = plugin
            .validate_at(&testing::rollout("", 1, 1), Instant::now())
            .unwrap_err();
        assert_eq!(err.code(), rollout_plugin_sdk::tonic::Code::InvalidArgument);
    }

    #[test]
    fn the_table_is_bounded_and_forgets_the_oldest() {
        let mut seen = FirstSeen::new(2);
        let t0 = Instant::now();
        let key = |c: &str| SoakKey::of(&testing::rollout(c, 1, 1));
        let later = t0 + Duration::from_secs(5);
        assert_eq!(seen.first_seen(&key("a"), t0), t0);
        assert_eq!(seen.first_seen(&key("b"), t0), t0);
        assert_eq!(seen.first_seen(&key("a"), later), t0, "known: unchanged");
        assert_eq!(seen.first_seen(&key("c"), later), later);
        assert_eq!(seen.len(), 2);
        assert_eq!(
            seen.first_seen(&key("a"), later),
            later,
            "a was the oldest: forgotten"
        );
        assert_eq!(seen.first_seen(&key("c"), t0), later, "c kept");
        assert_eq!(FirstSeen::new(0).capacity, 1);
        assert!(FirstSeen::new(3).is_empty());
    }

    #[test]
    fn durations_parse_go_style() {
        let table = [
            ("500ms", Some(Duration::from_millis(500))),
            ("10s", Some(Duration::from_secs(10))),
            ("2m", Some(Duration::from_secs(120))),
            ("1h30m", Some(Duration::from_secs(5400))),
            ("0s", Some(Duration::ZERO)),
            ("-1s", None),
            ("ten", None),
            ("", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_duration(text).ok(), want, "{text:?}");
        }
    }

    /// `--soak`'s refusals, as clap shows them.
    #[test]
    fn refused_durations_say_why() {
        let said = |text: &str| parse_duration(text).expect_err("refused").to_string();
        assert_eq!(said("-1s"), "\"-1s\" is negative");
        assert_eq!(
            said("ten"),
            "\"ten\" is not a duration like 500ms, 10s or 2m: invalid duration \"ten\""
        );
        let unreadable = parse_duration("2d").expect_err("refused");
        assert!(
            matches!(
                std::error::Error::source(&unreadable)
                    .and_then(|e| e.downcast_ref::<DurationError>()),
                Some(DurationError::UnknownUnit { .. })
            ),
            "{unreadable:?}"
        );
    }
}
