//! The raw registry types: what serde reads. Leaves are lenient (durations
//! and codes as strings, unknown keys collected) so that validation can name
//! each problem's place.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::IgnoredAny;
use std::collections::BTreeMap;

/// `config.yaml` as written.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    title = "rollout-gateway registry (config.yaml)",
    description = "The plugin registry of rollout-gateway: plugins, pipelines and their policies. See docs/configuration.md.",
    deny_unknown_fields
)]
pub(crate) struct RawConfig {
    /// Central mode: every name in this file belongs to this hub (a DNS
    /// subdomain). Without it the file's plugins are shared by every hub.
    pub(crate) hub: Option<String>,
    /// The client certificate the gateway presents to this file's TLS plugins.
    pub(crate) client_certificate: Option<RawClientCertificate>,
    /// Policy defaults for every plugin of this file.
    pub(crate) defaults: Option<RawPolicy>,
    /// The plugins, each reachable by its name.
    #[serde(default)]
    pub(crate) plugins: Vec<RawPlugin>,
    /// Named lists of plugins called as one target.
    #[serde(default)]
    pub(crate) pipelines: Vec<RawPipeline>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub(crate) unknown: BTreeMap<String, IgnoredAny>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub(crate) struct RawClientCertificate {
    /// A PEM certificate file.
    pub(crate) cert_file: Option<String>,
    /// The PEM key file of certFile.
    pub(crate) key_file: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub(crate) unknown: BTreeMap<String, IgnoredAny>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub(crate) struct RawCaCertificate {
    /// The CA bundle that signed the plugin's certificate: PEM, base64-encoded.
    /// Exactly one of caBundle and caFile.
    pub(crate) ca_bundle: Option<String>,
    /// A PEM file holding the CA bundle (such as a mounted Secret's ca.crt),
    /// watched and reloaded when it changes. Exactly one of caBundle and caFile.
    pub(crate) ca_file: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub(crate) unknown: BTreeMap<String, IgnoredAny>,
}

/// The policy fields shared by `defaults` and each plugin.
#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub(crate) struct RawPolicy {
    /// Each call's deadline, a Go duration such as 10s (at most 30s).
    pub(crate) timeout: Option<String>,
    /// What a failed call means for the rollout.
    #[schemars(extend("enum" = ["Fail", "Ignore", null]))]
    pub(crate) failure_policy: Option<String>,
    /// failurePolicy for single hooks, by hook name.
    pub(crate) failure_policy_by_hook: Option<BTreeMap<String, String>>,
    /// Retries of failed attempts.
    pub(crate) retry: Option<RawRetry>,
    /// The share of calls that may be retried.
    pub(crate) retry_budget: Option<RawBudget>,
    /// Failing fast after consecutive failures.
    pub(crate) circuit_breaker: Option<RawBreaker>,
    /// Calls in flight to the plugin at most.
    pub(crate) max_concurrent_calls: Option<i64>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub(crate) unknown: BTreeMap<String, IgnoredAny>,
}

#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub(crate) struct RawRetry {
    /// Attempts in all, the first included.
    pub(crate) max_attempts: Option<i64>,
    /// A Go duration.
    pub(crate) initial_backoff: Option<String>,
    /// A Go duration.
    pub(crate) max_backoff: Option<String>,
    pub(crate) backoff_multiplier: Option<f64>,
    /// gRPC code names, such as UNAVAILABLE.
    pub(crate) retryable_status_codes: Option<Vec<String>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub(crate) unknown: BTreeMap<String, IgnoredAny>,
}

#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub(crate) struct RawBudget {
    pub(crate) ratio: Option<f64>,
    pub(crate) min_per_second: Option<i64>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub(crate) unknown: BTreeMap<String, IgnoredAny>,
}

#[derive(Debug, Default, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(deny_unknown_fields)]
pub(crate) struct RawBreaker {
    pub(crate) consecutive_failures: Option<i64>,
    /// A Go duration.
    pub(crate) open_for: Option<String>,
    /// A Go duration.
    pub(crate) max_open_for: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub(crate) unknown: BTreeMap<String, IgnoredAny>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
/// One plugin: its name, where it is, how to reach it, and its policy.
#[schemars(deny_unknown_fields)]
pub(crate) struct RawPlugin {
    /// The name callers use (a DNS subdomain).
    #[schemars(required)]
    pub(crate) name: Option<String>,
    /// host:port.
    #[schemars(required)]
    pub(crate) endpoint: Option<String>,
    /// TLS to the plugin, with this CA; required unless insecure is true.
    pub(crate) ca_certificate: Option<RawCaCertificate>,
    /// Plaintext, only when said explicitly.
    pub(crate) insecure: Option<bool>,
    /// Central mode: only these hubs may call a shared plugin.
    pub(crate) hubs: Option<Vec<String>>,
    // The policy fields sit on the plugin itself (docs/plugin-api.md §3), so they are
    // flattened in; their unknown-key map also collects the plugin's.
    #[serde(flatten)]
    pub(crate) policy: RawPolicy,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
/// Plugins called as one target: concurrently, or in order for
/// MutateManifestWork.
#[schemars(deny_unknown_fields)]
pub(crate) struct RawPipeline {
    /// The name callers use.
    #[schemars(required)]
    pub(crate) name: Option<String>,
    /// Its members, plugins' names, in order.
    #[schemars(required)]
    pub(crate) plugins: Option<Vec<String>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub(crate) unknown: BTreeMap<String, IgnoredAny>,
}
