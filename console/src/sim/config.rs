//! The simulation's settings, checked: [`StrategyFlags`] become the
//! `rolloutStrategy` a ManifestWorkReplicaSet would carry, validated by the
//! engine's own [`Strategy::from_raw`]; [`Config::check`] refuses a fleet
//! that makes no sense. Every error is one the command reports with exit
//! status 2.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Map, Value, json};
use thiserror::Error;

use super::fleet::cluster_names;
use rollout_controller::api::ManifestWorkSpec;
use rollout_controller::orchestrate::Settings;
use rollout_controller::rollout::{InvalidStrategy, RawStrategy, Strategy};

/// The simulated ManifestWorkReplicaSet's namespace.
pub(crate) const NAMESPACE: &str = "default";
/// Its name.
pub(crate) const NAME: &str = "web";
/// Its owner label value on its works (`namespace.name`).
pub(crate) const OWNER_LABEL: &str = "default.web";
/// Its one placement.
pub(crate) const PLACEMENT: &str = "fleet";
/// The image of the revision the fleet runs before the rollout.
pub(crate) const PREVIOUS_IMAGE: &str = "ghcr.io/example/web:1.0";
/// The image of the revision rolled out.
pub(crate) const UPDATE_IMAGE: &str = "ghcr.io/example/web:1.1";

/// The ManifestWork template of one revision: an Argo Rollout `web` of
/// `image` with a canary of two steps (so the rollback plugin has steps to
/// skip).
pub(crate) fn template(image: &str) -> ManifestWorkSpec {
    let rollout: Map<String, Value> = match json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "metadata": {"name": "web", "namespace": "web"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image, "ports": [{"containerPort": 8080}]}]}
            },
            "strategy": {"canary": {"steps": [
                {"setWeight": 20}, {"pause": {"duration": "1m"}},
                {"setWeight": 50}, {"pause": {"duration": "1m"}}
            ]}}
        }
    }) {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let mut spec = ManifestWorkSpec::default();
    spec.workload.manifests.push(rollout);
    spec
}

/// A flag that makes no sense, or a strategy the engine refuses.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// A flag of another strategy type.
    #[error("{flag} does not apply to strategy {strategy} (only to {only})")]
    NotForStrategy {
        /// The flag.
        flag: &'static str,
        /// The strategy given.
        strategy: String,
        /// The types it applies to.
        only: &'static str,
    },
    /// The engine refuses the strategy.
    #[error(transparent)]
    Strategy(#[from] InvalidStrategy),
    /// `--plugin-config` is not a JSON object.
    #[error("--plugin-config must be a JSON object: {0}")]
    PluginConfig(String),
    /// The flags do not make a `rolloutStrategy`.
    #[error("the rollout strategy cannot be built: {0}")]
    Raw(String),
    /// No cluster.
    #[error("--clusters must be at least 1")]
    NoClusters,
    /// More groups than clusters, or none.
    #[error("--groups {groups}: must be between 1 and the number of clusters ({clusters})")]
    Groups {
        /// The groups asked for.
        groups: usize,
        /// The clusters.
        clusters: usize,
    },
    /// A `--fail` cluster that is not in the fleet.
    #[error("--fail {cluster}: no such cluster in the fleet ({first} … {last})")]
    UnknownCluster {
        /// The name given.
        cluster: String,
        /// The first cluster.
        first: String,
        /// The last cluster.
        last: String,
    },
    /// A jitter outside 0–100 %.
    #[error("--latency-jitter {0}: must be a percentage from 0 to 100")]
    Jitter(f64),
}

/// The strategy flags of `rollout-controller simulate`, as given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StrategyFlags {
    /// `All`, `Progressive` or `ProgressivePerGroup`.
    pub kind: String,
    /// `--max-concurrency`: a count or a percentage (Progressive).
    pub max_concurrency: Option<String>,
    /// `--max-failures`: a count or a percentage.
    pub max_failures: Option<String>,
    /// `--progress-deadline`: a Go duration or `None`.
    pub progress_deadline: Option<String>,
    /// `--min-success-time`: a Go duration.
    pub min_success_time: Option<String>,
    /// `--mandatory-groups`: group names or indices.
    pub mandatory_groups: Vec<String>,
    /// `--plugin`.
    pub plugin: Option<String>,
    /// `--plugin-config`: `pluginConfig` as JSON text.
    pub plugin_config: Option<String>,
    /// `--abort-on-failure`.
    pub abort_on_failure: bool,
    /// `--rollback-pace`: `rollbackPace`, `AtOnce` or `Strategy`.
    pub rollback_pace: Option<String>,
}

/// A count (`5`) as a JSON number, anything else (`25%`) as a string, as
/// Kubernetes' IntOrString.
fn int_or_string(text: &str) -> Value {
    match text.trim().parse::<i64>() {
        Ok(n) => json!(n),
        Err(_) => json!(text.trim()),
    }
}

impl StrategyFlags {
    /// The `rolloutStrategy` field these flags describe.
    pub fn raw(&self) -> Result<RawStrategy, ConfigError> {
        let only_progressive = |flag| ConfigError::NotForStrategy {
            flag,
            strategy: self.kind.clone(),
            only: "Progressive",
        };
        let mut config = Map::new();
        if let Some(deadline) = &self.progress_deadline {
            config.insert("progressDeadline".into(), json!(deadline));
        }
        if let Some(soak) = &self.min_success_time {
            config.insert("minSuccessTime".into(), json!(soak));
        }
        if let Some(failures) = &self.max_failures {
            config.insert("maxFailures".into(), int_or_string(failures));
        }
        if !self.mandatory_groups.is_empty() {
            if self.kind == "All" {
                return Err(ConfigError::NotForStrategy {
                    flag: "--mandatory-groups",
                    strategy: self.kind.clone(),
                    only: "Progressive and ProgressivePerGroup",
                });
            }
            let groups: Vec<Value> = self
                .mandatory_groups
                .iter()
                .map(|g| match g.trim().parse::<i32>() {
                    Ok(index) => json!({"groupIndex": index}),
                    Err(_) => json!({"groupName": g.trim()}),
                })
                .collect();
            config.insert("mandatoryDecisionGroups".into(), json!(groups));
        }
        if let Some(concurrency) = &self.max_concurrency {
            if self.kind != "Progressive" {
                return Err(only_progressive("--max-concurrency"));
            }
            config.insert("maxConcurrency".into(), int_or_string(concurrency));
        }
        let field = match self.kind.as_str() {
            "All" => "all",
            "Progressive" => "progressive",
            "ProgressivePerGroup" => "progressivePerGroup",
            // The engine names the unknown type.
            _ => "unknown",
        };
        let mut raw = json!({"type": self.kind, field: config});
        if let Some(plugin) = &self.plugin {
            raw["plugin"] = json!(plugin);
        }
        if let Some(text) = &self.plugin_config {
            match serde_json::from_str::<Value>(text) {
                Ok(config @ Value::Object(_)) => raw["pluginConfig"] = config,
                Ok(other) => return Err(ConfigError::PluginConfig(format!("got {other}"))),
                Err(e) => return Err(ConfigError::PluginConfig(e.to_string())),
            }
        }
        if self.abort_on_failure {
            raw["abortOnFailure"] = json!(true);
        }
        if let Some(pace) = &self.rollback_pace {
            raw["rollbackPace"] = json!(pace);
        }
        serde_json::from_value(raw).map_err(|e| ConfigError::Raw(e.to_string()))
    }

    /// The validated strategy.
    pub fn strategy(&self) -> Result<Strategy, ConfigError> {
        Ok(Strategy::from_raw(&self.raw()?)?)
    }
}

/// Everything a simulation needs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Clusters in the fleet.
    pub(crate) clusters: usize,
    /// Decision groups.
    pub groups: usize,
    /// The placement's strategy.
    pub(crate) strategy: Strategy,
    /// Clusters whose work of the update revision turns Degraded.
    pub fail: BTreeSet<String>,
    /// From apply to the agent's first report (Applied, Progressing).
    pub agent_delay: Duration,
    /// From apply to done.
    pub apply_latency: Duration,
    /// Whether the agent reports `Progressing` and `Degraded` (the template
    /// has condition rules); without, only `Applied`, and every cluster
    /// counts as progressing until its deadline.
    pub agent_progressing: bool,
    /// Latency variation, 0 to 1.
    pub jitter: f64,
    /// Seeds the variation.
    pub seed: u64,
    /// A fixed simulated time between steps instead of the next event.
    pub tick: Option<Duration>,
    /// No earlier revision: the fleet starts empty (an abort then stops).
    pub first_rollout: bool,
    /// Give up after this many steps.
    pub max_steps: usize,
    /// The orchestration's tunables (`validation_poll`, `error_requeue`).
    pub settings: Settings,
    /// List every work in the summary.
    pub list_works: bool,
    /// The simulated time of the first step.
    pub(crate) start: Timestamp,
    /// Where each step's abort and rollout phase are counted, as `run`
    /// counts them (with the hooks wrapped in
    /// [`Metered`](rollout_controller::metrics::Metered), the hook calls too).
    pub(crate) metrics: Option<std::sync::Arc<rollout_controller::metrics::ControllerMetrics>>,
    /// `--crds`: store the ManifestWorkReplicaSet and its carrier in a
    /// simulated API server that prunes them, and read them back each step;
    /// `None`: use [`Config::strategy`] as given.
    pub api: Option<super::api::ApiConfig>,
    /// The update revision's template (`--template`); the built-in Argo
    /// Rollout of [`UPDATE_IMAGE`] when `None`.
    pub template: Option<super::template::Template>,
    /// The previous revision's template (`--previous-template`); the
    /// built-in one of [`PREVIOUS_IMAGE`] when `None`.
    pub previous_template: Option<super::template::Template>,
}

impl Config {
    /// A fleet of `clusters` in one group, rolled out with `strategy`:
    /// works reported 1 s and done 30 s after their apply, no failure, the fleet on an
    /// earlier revision, validation polled every second when the plugin
    /// gives no `recheck_after`.
    pub fn new(clusters: usize, strategy: Strategy) -> Config {
        Config {
            clusters,
            groups: 1,
            strategy,
            fail: BTreeSet::new(),
            agent_delay: Duration::from_secs(1),
            apply_latency: Duration::from_secs(30),
            agent_progressing: true,
            jitter: 0.0,
            seed: 1,
            tick: None,
            first_rollout: false,
            max_steps: 100_000,
            settings: Settings {
                validation_poll: Duration::from_secs(1),
                ..Settings::default()
            },
            list_works: false,
            start: Timestamp::now(),
            metrics: None,
            api: None,
            template: None,
            previous_template: None,
        }
    }

    /// Fails on a fleet that makes no sense: no cluster, groups out of
    /// range, an unknown `--fail` cluster, a jitter out of range.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.clusters == 0 {
            return Err(ConfigError::NoClusters);
        }
        if self.groups == 0 || self.groups > self.clusters {
            return Err(ConfigError::Groups {
                groups: self.groups,
                clusters: self.clusters,
            });
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(ConfigError::Jitter(self.jitter * 100.0));
        }
        let names = cluster_names(self.clusters);
        let known: BTreeSet<&String> = names.iter().collect();
        if let Some(unknown) = self.fail.iter().find(|c| !known.contains(c)) {
            return Err(ConfigError::UnknownCluster {
                cluster: unknown.clone(),
                first: names.first().cloned().unwrap_or_default(),
                last: names.last().cloned().unwrap_or_default(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_controller::rollout::{RolloutKind, Threshold};

    fn flags(kind: &str) -> StrategyFlags {
        StrategyFlags {
            kind: kind.into(),
            ..StrategyFlags::default()
        }
    }

    #[test]
    fn flags_make_the_strategy_a_manifestworkreplicaset_would_carry() {
        let strategy = StrategyFlags {
            max_concurrency: Some("25%".into()),
            max_failures: Some("1".into()),
            progress_deadline: Some("10m".into()),
            plugin: Some("safe-rollout".into()),
            abort_on_failure: true,
            mandatory_groups: vec!["0".into(), "canary".into()],
            ..flags("Progressive")
        }
        .strategy()
        .expect("valid");
        assert_eq!(strategy.plugin.as_deref(), Some("safe-rollout"));
        assert_eq!(strategy.plugin_config, None);
        assert!(strategy.abort_on_failure);
        let RolloutKind::Progressive {
            config,
            max_concurrency,
            mandatory,
        } = &strategy.kind
        else {
            panic!("{strategy:?}")
        };
        assert_eq!(*max_concurrency, Threshold::Percent(25));
        assert_eq!(config.max_failures, Threshold::Count(1));
        assert_eq!(mandatory.len(), 2);
        assert_eq!(
            config.progress_deadline,
            Some(jiff::SignedDuration::from_mins(10))
        );

        let all = flags("All").strategy().expect("valid");
        assert_eq!(all.type_name(), "All");
        assert!(!all.abort_on_failure && all.plugin.is_none());
    }

    #[test]
    fn bad_flags_are_refused_with_the_reason() {
        let table = [
            (
                flags("Rolling"),
                "unknown rollout strategy type \"Rolling\"",
            ),
            (
                StrategyFlags {
                    max_concurrency: Some("2".into()),
                    ..flags("All")
                },
                "--max-concurrency does not apply to strategy All",
            ),
            (
                StrategyFlags {
                    max_concurrency: Some("120%".into()),
                    ..flags("Progressive")
                },
                "progressive.maxConcurrency: invalid value \"120%\"",
            ),
            (
                StrategyFlags {
                    progress_deadline: Some("2d".into()),
                    ..flags("ProgressivePerGroup")
                },
                "invalid progressDeadline \"2d\"",
            ),
            (
                StrategyFlags {
                    mandatory_groups: vec!["0".into()],
                    ..flags("All")
                },
                "--mandatory-groups does not apply",
            ),
            (
                StrategyFlags {
                    plugin_config: Some("[1]".into()),
                    ..flags("All")
                },
                "--plugin-config must be a JSON object: got [1]",
            ),
            (
                StrategyFlags {
                    plugin_config: Some("{soak".into()),
                    ..flags("All")
                },
                "--plugin-config must be a JSON object: key must be a string",
            ),
            (
                StrategyFlags {
                    plugin_config: Some(format!(r#"{{"k":"{}"}}"#, "x".repeat(70_000))),
                    ..flags("All")
                },
                "pluginConfig: 70008 bytes of JSON, above the limit of 65536 bytes",
            ),
        ];
        for (flags, want) in table {
            let err = flags.strategy().expect_err("invalid");
            assert!(err.to_string().contains(want), "{err} (want {want})");
        }
    }

    #[test]
    fn the_plugin_config_flag_is_the_strategy_plugin_config() {
        let strategy = StrategyFlags {
            plugin: Some("smoke-test".into()),
            plugin_config: Some(r#" {"soakTime": "2s"} "#.into()),
            ..flags("All")
        }
        .strategy()
        .expect("valid");
        assert_eq!(
            strategy.plugin_config.as_deref(),
            Some(br#"{"soakTime":"2s"}"#.as_slice())
        );
    }

    #[test]
    fn a_fleet_that_makes_no_sense_is_refused() {
        let strategy = flags("All").strategy().expect("valid");
        let mut config = Config::new(20, strategy);
        config.check().expect("fine");
        config.groups = 21;
        assert!(
            config
                .check()
                .expect_err("too many")
                .to_string()
                .contains("--groups 21")
        );
        config.groups = 2;
        config.fail.insert("cluster-021".into());
        let err = config.check().expect_err("unknown").to_string();
        assert!(
            err.contains("cluster-021") && err.contains("cluster-001 … cluster-020"),
            "{err}"
        );
        config.fail.clear();
        config.clusters = 0;
        assert!(config.check().is_err());
    }

    #[test]
    fn the_template_is_an_argo_rollout_of_the_image() {
        let spec = template(UPDATE_IMAGE);
        let manifest = &spec.workload.manifests[0];
        assert_eq!(manifest["kind"], "Rollout");
        assert_eq!(
            manifest["spec"]["template"]["spec"]["containers"][0]["image"],
            UPDATE_IMAGE
        );
        assert_ne!(spec, template(PREVIOUS_IMAGE));
    }
}
