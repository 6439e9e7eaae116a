//! The plugin: the plan of each request, its queries asked at once, the
//! verdict made of the answers.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use rollout_plugin_sdk::prelude::*;

use crate::config::{self, Defaults, Layer, Plan};
use crate::prometheus::{Prometheus, RangeQuery};
use crate::since::{self, FirstSeen};
use crate::template::Values;
use crate::verdict::{self, Asked};

/// The plugin's name, as it answers `Initialize` and prints when listening.
pub const NAME: &str = "prometheus-analysis";
/// How many first-seen times are kept for requests without the cluster's
/// update time.
pub const FIRST_SEEN_CAPACITY: usize = 10_000;

/// The Prometheus analysis plugin.
#[derive(Debug)]
pub struct Analysis {
    defaults: Defaults,
    file: Layer,
    prometheus: Prometheus,
    first_seen: Mutex<FirstSeen>,
}

impl Analysis {
    /// A plugin asking `prometheus`, with the flags' `defaults` and the
    /// `--config` file's layer over them.
    pub fn new(defaults: Defaults, file: Layer, prometheus: Prometheus) -> Self {
        Self {
            defaults,
            file,
            prometheus,
            first_seen: Mutex::new(FirstSeen::new(FIRST_SEEN_CAPACITY)),
        }
    }

    /// The plan of `request`'s rollout; INVALID_ARGUMENT naming every field
    /// that is wrong.
    pub fn plan(&self, request: &RolloutPluginRequest) -> Result<Plan, PluginError> {
        let rollout = config::rollout_layer(&request.plugin_config_json)
            .map_err(PluginError::invalid_argument)?;
        config::plan(
            &self.defaults,
            &[&self.file, &rollout],
            config::ROLLOUT_SOURCE,
        )
        .map_err(PluginError::invalid_argument)
    }

    /// The answer for `request` at `now`.
    pub async fn validate_at(
        &self,
        request: &RolloutPluginRequest,
        now: SystemTime,
    ) -> Result<Validation, PluginError> {
        if request.cluster_name.is_empty() {
            return Err(PluginError::invalid_argument(
                "ValidateRolloutCompletion without a cluster_name",
            ));
        }
        let plan = self.plan(request)?;
        let since = match since::from_request(request) {
            Some(at) => at,
            None => self
                .first_seen
                .lock()
                .map_err(|_| PluginError::internal("state poisoned by an earlier panic"))?
                .first_seen(request, now),
        };
        let values = Values {
            cluster: &request.cluster_name,
            revision: &request.desired_revision,
            mwrs_name: &request.mwrs_name,
            mwrs_namespace: &request.mwrs_namespace,
            placement: &request.placement_name,
        };
        let asks = plan.checks.iter().map(|check| async move {
            let query = check.query.render(&values);
            let end = unix(now);
            let start = unix(since).max(end - check.window.as_secs_f64());
            // No step yet since the update: nothing to ask.
            let answer = if start > end {
                Ok(None)
            } else {
                let range = RangeQuery {
                    query: query.clone(),
                    start,
                    end,
                    step: check.interval,
                };
                self.prometheus.query_range(&range).await
            };
            Asked {
                check,
                query,
                answer,
            }
        });
        let asked = futures::future::join_all(asks).await;
        let target = format!(
            "{} (revision {})",
            request.cluster_name, request.desired_revision
        );
        Ok(verdict::decide(&plan, asked, &target, since, now))
    }
}

fn unix(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl RolloutPlugin for Analysis {
    fn info(&self) -> PluginInfo {
        // The full state: the cluster's entry carries its update time.
        PluginInfo::new(NAME, env!("CARGO_PKG_VERSION"))
            .hooks([Hook::BeginRollout, Hook::ValidateRolloutCompletion])
            .state_detail(RolloutStateDetail::Full)
    }

    /// Refuses a rollout whose configuration makes no plan before its
    /// first cluster is touched.
    async fn begin_rollout(&self, request: RolloutPluginRequest) -> Result<(), PluginError> {
        self.plan(&request).map(|_| ())
    }

    async fn validate_rollout_completion(
        &self,
        request: RolloutPluginRequest,
    ) -> Result<Validation, PluginError> {
        let validation = self.validate_at(&request, SystemTime::now()).await?;
        tracing::info!(
            cluster = %request.cluster_name,
            revision = %request.desired_revision,
            result = validation.result.as_str_name(),
            message = %validation.message,
            "validated"
        );
        Ok(validation)
    }
}
