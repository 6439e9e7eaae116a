//! The plugin registry file, `config.yaml` (docs/plugin-api.md §3).
//!
//! Parsing happens in two steps, in the manner of vector's config: serde reads
//! the YAML into lenient raw types (durations and codes as strings, unknown
//! keys collected), then [`validate`] turns them into a typed [`Config`],
//! reporting every problem at once as a list of [`Problem`]s, each naming the
//! place in the file. Nothing here touches the network or the file system
//! beyond what the caller passes in.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::time::Duration;

use base64::Engine as _;
use rollout_policies::policy::MAX_TIMEOUT;
use rollout_policies::{BreakerPolicy, BudgetPolicy, FailurePolicy, Policy, RetryPolicy};
use rollout_proto::HookKind;
use rollout_proto::duration::{self, DurationError, Rules};
use rollout_proto::v1alpha1::Hook;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::IgnoredAny;
use tonic::Code;

/// One problem found in a registry file: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// A path into the file, such as `plugins[2] (smoke-test).timeout`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// A registry file that cannot be used: every problem found in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(f, "{n} problem{}: ", if n == 1 { "" } else { "s" })?;
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl ConfigError {
    fn one(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            problems: vec![Problem {
                path: path.into(),
                message: message.into(),
            }],
        }
    }
}

// ---------------------------------------------------------------------------
// Raw types: what serde reads. Leaves are lenient so validation can name them.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// Typed config: what the gateway uses.
// ---------------------------------------------------------------------------

/// A validated registry file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Every name in this file belongs to this hub (central mode); `None` = shared.
    pub hub: Option<String>,
    pub(crate) client_certificate: Option<ClientCertificate>,
    pub plugins: Vec<PluginConfig>,
    pub pipelines: Vec<PipelineConfig>,
}

/// The gateway's own identity towards plugins (mTLS), as file paths.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct ClientCertificate {
    pub(crate) cert_file: String,
    pub(crate) key_file: String,
}

/// How the gateway reaches a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Plaintext HTTP/2 (h2c); only when `insecure: true` is set explicitly.
    Plaintext,
    /// TLS, verifying the plugin's certificate against this CA bundle alone.
    Tls { ca: CaSource },
}

/// Where a plugin's CA bundle comes from.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum CaSource {
    /// `caBundle`: the PEM bundle, decoded from the file's base64.
    Bundle { pem: Vec<u8> },
    /// `caFile`: a PEM file, read when the registry is planned and again
    /// whenever it changes (the path as written: a relative path is taken
    /// from the gateway's working directory, as `clientCertificate`'s are).
    File { path: String },
}

impl fmt::Debug for CaSource {
    // Never print certificate bodies (they are not secret, but they are noise
    // in logs, and the same rule then holds for everything TLS).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaSource::Bundle { pem } => write!(f, "Bundle {{ {} bytes }}", pem.len()),
            CaSource::File { path } => write!(f, "File {{ {path:?} }}"),
        }
    }
}

/// A plugin's `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// One registered plugin.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginConfig {
    pub name: String,
    pub endpoint: Endpoint,
    pub transport: Transport,
    pub policy: Policy,
    /// Hubs allowed to call it (central mode); `None` = every hub.
    pub hubs: Option<Vec<String>>,
}

/// An ordered list of plugins behind one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineConfig {
    pub name: String,
    pub plugins: Vec<String>,
}

/// The JSON Schema of `config.yaml`, generated from the raw types: what an
/// editor can check as the file is written (`docs/config.schema.json`).
/// [`validate`] remains the judge: it also checks what a schema cannot
/// (durations, endpoints, names across the file).
pub fn json_schema() -> String {
    let schema = schemars::schema_for!(RawConfig);
    let mut text = serde_json::to_string_pretty(&schema).unwrap_or_default();
    text.push('\n');
    text
}

/// Parses and validates one registry file on its own. A hub-scoped file's
/// pipelines may also name shared plugins of other files: the registry checks
/// those when it combines the files.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    // Only the first line of the YAML error: the rest quotes the file around
    // the error, which may hold a CA bundle.
    let raw: RawConfig = serde_saphyr::from_str(text).map_err(|e| {
        let message = e.to_string();
        let first = message
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        ConfigError::one("", format!("not a valid registry file: {first}"))
    })?;
    validate(raw)
}

/// Whether a registry file's text holds nothing (an editor or a plain rewrite
/// may leave one for a moment; it never replaces a loaded registry).
pub fn is_blank(text: &str) -> bool {
    text.lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#') || l == "---")
}

/// Turns raw types into a [`Config`], collecting every problem.
pub(crate) fn validate(raw: RawConfig) -> Result<Config, ConfigError> {
    let mut p = Problems::default();
    p.unknown::<RawConfig>("", &raw.unknown);
    let hub = raw.hub.and_then(|h| {
        p.check_name("hub", &h);
        (!h.is_empty()).then_some(h)
    });
    let client_certificate = raw.client_certificate.and_then(|c| p.client_certificate(c));
    let defaults_raw = raw.defaults.unwrap_or_default();
    p.unknown::<RawPolicy>("defaults", &defaults_raw.unknown);
    let defaults = p.policy("defaults", &defaults_raw, &Policy::default());
    // Every name of the file, plugins' and pipelines'.
    let mut names: HashSet<String> = HashSet::new();
    let (plugins, plugin_names) = p.plugins(raw.plugins, &defaults, &mut names);
    let pipelines = p.pipelines(raw.pipelines, &plugin_names, hub.is_some(), &mut names);
    p.finish(Config {
        hub,
        client_certificate,
        plugins,
        pipelines,
    })
}

/// `plugins[I] (NAME)`, or `plugins[I]` while the name is missing.
fn entry_path(list: &str, i: usize, name: &str) -> String {
    if name.is_empty() {
        format!("{list}[{i}]")
    } else {
        format!("{list}[{i}] ({name})")
    }
}

#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    fn finish<T>(self, value: T) -> Result<T, ConfigError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError { problems: self.0 })
        }
    }

    /// Every key of `unknown` (a `T`'s fields that no field took) is a
    /// problem, suggesting `T`'s field nearest a typo.
    fn unknown<T: JsonSchema>(&mut self, at: &str, unknown: &BTreeMap<String, IgnoredAny>) {
        if unknown.is_empty() {
            return;
        }
        let known = known_fields::<T>();
        for key in unknown.keys() {
            // A key that would not read as a place (empty, or with dots or
            // spaces) is quoted, so the path always names something.
            let plain = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            let shown = if plain {
                key.clone()
            } else {
                format!("{key:?}")
            };
            let path = if at.is_empty() {
                shown
            } else {
                format!("{at}.{shown}")
            };
            match nearest_field(key, &known) {
                Some(near) => self.push(path, format!("unknown field; did you mean `{near}`?")),
                None => self.push(path, "unknown field"),
            }
        }
    }

    /// Names go into gRPC metadata and Kubernetes fields: DNS-1123 subdomains.
    fn check_name(&mut self, at: &str, name: &str) {
        if let Err(why) = check_dns_subdomain(name) {
            self.push(at, format!("\"{name}\" {why}"));
        }
    }

    fn duration(&mut self, at: String, text: &Option<String>, default: Duration) -> Duration {
        match text {
            None => default,
            Some(t) => match parse_duration(t) {
                Ok(d) => d,
                Err(why) => {
                    self.push(at, format!("\"{t}\" is not a duration ({why})"));
                    default
                }
            },
        }
    }

    fn failure_policy(&mut self, at: String, text: &str) -> Option<FailurePolicy> {
        match text {
            "Fail" => Some(FailurePolicy::Fail),
            "Ignore" => Some(FailurePolicy::Ignore),
            other => {
                self.push(at, format!("\"{other}\" is not Fail or Ignore"));
                None
            }
        }
    }

    fn positive_int(
        &mut self,
        at: String,
        value: Option<i64>,
        default: u32,
        min: i64,
        max: i64,
    ) -> u32 {
        match value {
            None => default,
            Some(v) if (min..=max).contains(&v) => v as u32,
            Some(v) => {
                self.push(at, format!("{v} is out of range ({min} to {max})"));
                default
            }
        }
    }

    /// The file's `clientCertificate`, both files required.
    fn client_certificate(&mut self, c: RawClientCertificate) -> Option<ClientCertificate> {
        self.unknown::<RawClientCertificate>("clientCertificate", &c.unknown);
        let cert = c.cert_file.unwrap_or_default();
        let key = c.key_file.unwrap_or_default();
        if cert.is_empty() {
            self.push("clientCertificate.certFile", "is required");
        }
        if key.is_empty() {
            self.push("clientCertificate.keyFile", "is required");
        }
        (!cert.is_empty() && !key.is_empty()).then_some(ClientCertificate {
            cert_file: cert,
            key_file: key,
        })
    }

    /// The file's valid plugins, and the names of all of them (valid or
    /// not), each name also added to `names`.
    fn plugins(
        &mut self,
        raw: Vec<RawPlugin>,
        defaults: &Policy,
        names: &mut HashSet<String>,
    ) -> (Vec<PluginConfig>, HashSet<String>) {
        let mut plugin_names: HashSet<String> = HashSet::new();
        let mut plugins = Vec::with_capacity(raw.len());
        for (i, rp) in raw.into_iter().enumerate() {
            let name = rp.name.clone().unwrap_or_default();
            let at = entry_path("plugins", i, &name);
            // Names are checked for clashes whether or not the rest of the
            // entry is valid, so a duplicate is reported even next to other
            // problems.
            if !name.is_empty() && !names.insert(name.clone()) {
                self.push(format!("{at}.name"), format!("\"{name}\" is defined twice"));
            }
            plugin_names.insert(name);
            if let Some(plugin) = self.plugin(&at, rp, defaults) {
                plugins.push(plugin);
            }
        }
        (plugins, plugin_names)
    }

    /// The file's pipelines: named apart from every plugin and pipeline,
    /// listing plugins only, each once; in a shared file (`hub_scoped`
    /// false) only plugins of this file.
    fn pipelines(
        &mut self,
        raw: Vec<RawPipeline>,
        plugin_names: &HashSet<String>,
        hub_scoped: bool,
        names: &mut HashSet<String>,
    ) -> Vec<PipelineConfig> {
        let mut named = Vec::with_capacity(raw.len());
        let mut pipeline_names: HashSet<String> = HashSet::new();
        for (i, rp) in raw.into_iter().enumerate() {
            let name = rp.name.clone().unwrap_or_default();
            let at = entry_path("pipelines", i, &name);
            self.unknown::<RawPipeline>(&at, &rp.unknown);
            if name.is_empty() {
                self.push(format!("{at}.name"), "is required");
                continue;
            }
            self.check_name(&format!("{at}.name"), &name);
            if !names.insert(name.clone()) {
                self.push(
                    format!("{at}.name"),
                    format!("\"{name}\" is already the name of a plugin or pipeline"),
                );
            } else {
                pipeline_names.insert(name.clone());
            }
            named.push((at, name, rp.plugins.unwrap_or_default()));
        }
        // Members after every name: a member may name a later pipeline.
        named
            .into_iter()
            .map(|(at, name, members)| {
                self.members(&at, &members, plugin_names, &pipeline_names, hub_scoped);
                PipelineConfig {
                    name,
                    plugins: members,
                }
            })
            .collect()
    }

    /// The members of the pipeline at `at`.
    fn members(
        &mut self,
        at: &str,
        members: &[String],
        plugin_names: &HashSet<String>,
        pipeline_names: &HashSet<String>,
        hub_scoped: bool,
    ) {
        if members.is_empty() {
            self.push(format!("{at}.plugins"), "lists no plugin");
        }
        let mut seen = HashSet::new();
        for (j, member) in members.iter().enumerate() {
            let why = if !seen.insert(member.as_str()) {
                "is listed twice"
            } else if pipeline_names.contains(member) {
                "is a pipeline; a pipeline may only list plugins"
            } else if !plugin_names.contains(member) && !hub_scoped {
                // A hub-scoped file may also name shared plugins of other
                // files: the registry checks those when it combines the files.
                "is not a plugin defined in this file"
            } else {
                continue;
            };
            self.push(format!("{at}.plugins[{j}]"), format!("\"{member}\" {why}"));
        }
    }

    /// How the plugin at `at` is reached: plaintext only with `insecure:
    /// true`, else TLS with exactly one CA source.
    fn transport(
        &mut self,
        at: &str,
        ca: Option<RawCaCertificate>,
        insecure: bool,
    ) -> Option<Transport> {
        match (ca, insecure) {
            (Some(_), true) => {
                self.push(
                    format!("{at}.insecure"),
                    "insecure: true and caCertificate exclude each other",
                );
                None
            }
            (None, true) => Some(Transport::Plaintext),
            (None, false) => {
                self.push(
                    format!("{at}.caCertificate"),
                    "is required (or set insecure: true explicitly for plaintext)",
                );
                None
            }
            (Some(ca), false) => self.ca_source(at, ca).map(|ca| Transport::Tls { ca }),
        }
    }

    /// The plugin's `caCertificate`: a bundle or a file, not both.
    fn ca_source(&mut self, at: &str, ca: RawCaCertificate) -> Option<CaSource> {
        self.unknown::<RawCaCertificate>(&format!("{at}.caCertificate"), &ca.unknown);
        match (ca.ca_bundle, ca.ca_file) {
            (Some(b64), None) => match decode_ca_bundle(&b64) {
                Ok(pem) => Some(CaSource::Bundle { pem }),
                Err(why) => {
                    self.push(format!("{at}.caCertificate.caBundle"), why.to_string());
                    None
                }
            },
            (None, Some(path)) if path.trim().is_empty() => {
                self.push(format!("{at}.caCertificate.caFile"), "is empty");
                None
            }
            (None, Some(path)) => Some(CaSource::File { path }),
            (Some(_), Some(_)) | (None, None) => {
                self.push(
                    format!("{at}.caCertificate"),
                    "set exactly one of caBundle and caFile",
                );
                None
            }
        }
    }

    /// Validates a policy block over `base` (field-by-field override).
    fn policy(&mut self, at: &str, raw: &RawPolicy, base: &Policy) -> Policy {
        let timeout = self.duration(field(at, "timeout"), &raw.timeout, base.timeout);
        if raw.timeout.is_some() && (timeout.is_zero() || timeout > MAX_TIMEOUT) {
            self.push(
                field(at, "timeout"),
                format!("must be more than 0 and at most {}s", MAX_TIMEOUT.as_secs()),
            );
        }
        let failure_policy = match raw.failure_policy.as_deref() {
            None => base.failure_policy,
            Some(text) => self
                .failure_policy(field(at, "failurePolicy"), text)
                .unwrap_or(base.failure_policy),
        };
        let max_concurrent_calls = self.positive_int(
            field(at, "maxConcurrentCalls"),
            raw.max_concurrent_calls,
            base.max_concurrent_calls as u32,
            1,
            100_000,
        ) as usize;
        Policy {
            timeout,
            failure_policy,
            failure_policy_by_hook: self.failure_policy_by_hook(at, raw, base),
            retry: self.retry(at, raw.retry.as_ref(), &base.retry),
            retry_budget: self.retry_budget(at, raw.retry_budget.as_ref(), &base.retry_budget),
            circuit_breaker: self.circuit_breaker(
                at,
                raw.circuit_breaker.as_ref(),
                &base.circuit_breaker,
            ),
            max_concurrent_calls,
        }
    }

    /// Per-hook failure policies: the block's entries replace `base`'s for
    /// the same hook.
    fn failure_policy_by_hook(
        &mut self,
        at: &str,
        raw: &RawPolicy,
        base: &Policy,
    ) -> Vec<(Hook, FailurePolicy)> {
        let mut by_hook = base.failure_policy_by_hook.clone();
        for (hook_name, text) in raw.failure_policy_by_hook.iter().flatten() {
            let at = field(at, &format!("failurePolicyByHook.{hook_name}"));
            let hook = HookKind::from_name(hook_name).and_then(HookKind::proto_hook);
            if hook.is_none() {
                self.push(
                    at.clone(),
                    "is not a hook (BeginRollout, ProgressRollout, ValidateRolloutCompletion or MutateManifestWork)",
                );
            }
            if let (Some(hook), Some(policy)) = (hook, self.failure_policy(at, text)) {
                by_hook.retain(|(h, _)| *h != hook);
                by_hook.push((hook, policy));
            }
        }
        by_hook
    }

    /// The `retry` block over `base`.
    fn retry(&mut self, at: &str, raw: Option<&RawRetry>, base: &RetryPolicy) -> RetryPolicy {
        let r = raw.cloned().unwrap_or_default();
        if raw.is_some() {
            self.unknown::<RawRetry>(&field(at, "retry"), &r.unknown);
        }
        let backoff_multiplier = match r.backoff_multiplier {
            None => base.backoff_multiplier,
            Some(m) if m.is_finite() && (1.0..=100.0).contains(&m) => m,
            Some(m) => {
                self.push(
                    field(at, "retry.backoffMultiplier"),
                    format!("{m} is out of range (1 to 100)"),
                );
                base.backoff_multiplier
            }
        };
        let retry = RetryPolicy {
            max_attempts: self.positive_int(
                field(at, "retry.maxAttempts"),
                r.max_attempts,
                base.max_attempts,
                1,
                10,
            ),
            initial_backoff: self.duration(
                field(at, "retry.initialBackoff"),
                &r.initial_backoff,
                base.initial_backoff,
            ),
            max_backoff: self.duration(
                field(at, "retry.maxBackoff"),
                &r.max_backoff,
                base.max_backoff,
            ),
            backoff_multiplier,
            retryable_codes: match &r.retryable_status_codes {
                None => base.retryable_codes.clone(),
                Some(codes) => self.retryable_codes(at, codes),
            },
        };
        if retry.initial_backoff.is_zero() {
            self.push(field(at, "retry.initialBackoff"), "must be more than 0");
        }
        if retry.max_backoff < retry.initial_backoff {
            self.push(
                field(at, "retry.maxBackoff"),
                "must be at least initialBackoff",
            );
        }
        retry
    }

    /// `retry.retryableStatusCodes`: gRPC code names, `OK` excluded.
    fn retryable_codes(&mut self, at: &str, codes: &[String]) -> Vec<Code> {
        codes
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match parse_code(c) {
                Some(code) if code != Code::Ok => Some(code),
                _ => {
                    self.push(
                        field(at, &format!("retry.retryableStatusCodes[{i}]")),
                        format!("\"{c}\" is not a gRPC status code name such as UNAVAILABLE"),
                    );
                    None
                }
            })
            .collect()
    }

    /// The `retryBudget` block over `base`.
    fn retry_budget(
        &mut self,
        at: &str,
        raw: Option<&RawBudget>,
        base: &BudgetPolicy,
    ) -> BudgetPolicy {
        let b = raw.cloned().unwrap_or_default();
        if raw.is_some() {
            self.unknown::<RawBudget>(&field(at, "retryBudget"), &b.unknown);
        }
        BudgetPolicy {
            ratio: match b.ratio {
                None => base.ratio,
                Some(r) if r.is_finite() && (0.0..=1000.0).contains(&r) => r,
                Some(r) => {
                    self.push(
                        field(at, "retryBudget.ratio"),
                        format!("{r} is out of range (0 to 1000)"),
                    );
                    base.ratio
                }
            },
            min_per_second: self.positive_int(
                field(at, "retryBudget.minPerSecond"),
                b.min_per_second,
                base.min_per_second,
                0,
                1_000_000,
            ),
        }
    }

    /// The `circuitBreaker` block over `base`.
    fn circuit_breaker(
        &mut self,
        at: &str,
        raw: Option<&RawBreaker>,
        base: &BreakerPolicy,
    ) -> BreakerPolicy {
        let c = raw.cloned().unwrap_or_default();
        if raw.is_some() {
            self.unknown::<RawBreaker>(&field(at, "circuitBreaker"), &c.unknown);
        }
        let breaker = BreakerPolicy {
            consecutive_failures: self.positive_int(
                field(at, "circuitBreaker.consecutiveFailures"),
                c.consecutive_failures,
                base.consecutive_failures,
                1,
                1_000_000,
            ),
            open_for: self.duration(
                field(at, "circuitBreaker.openFor"),
                &c.open_for,
                base.open_for,
            ),
            max_open_for: self.duration(
                field(at, "circuitBreaker.maxOpenFor"),
                &c.max_open_for,
                base.max_open_for,
            ),
        };
        if breaker.open_for.is_zero() {
            self.push(field(at, "circuitBreaker.openFor"), "must be more than 0");
        }
        if breaker.max_open_for < breaker.open_for {
            self.push(
                field(at, "circuitBreaker.maxOpenFor"),
                "must be at least openFor",
            );
        }
        breaker
    }

    fn plugin(&mut self, at: &str, raw: RawPlugin, defaults: &Policy) -> Option<PluginConfig> {
        // The flattened policy block also collected the plugin's unknown keys.
        self.unknown::<RawPlugin>(at, &raw.policy.unknown);
        let name = raw.name.unwrap_or_default();
        if name.is_empty() {
            self.push(format!("{at}.name"), "is required");
        } else {
            self.check_name(&format!("{at}.name"), &name);
        }
        let endpoint = match raw.endpoint.as_deref() {
            None | Some("") => {
                self.push(format!("{at}.endpoint"), "is required");
                None
            }
            Some(e) => match parse_endpoint(e) {
                Ok(ep) => Some(ep),
                Err(why) => {
                    self.push(format!("{at}.endpoint"), format!("\"{e}\" {why}"));
                    None
                }
            },
        };
        let transport = self.transport(at, raw.ca_certificate, raw.insecure.unwrap_or(false));
        let policy = self.policy(at, &raw.policy, defaults);
        let hubs = raw.hubs.inspect(|hubs| {
            if hubs.is_empty() {
                self.push(
                    format!("{at}.hubs"),
                    "is empty: no hub could call the plugin (leave it out to allow every hub)",
                );
            }
            for (i, h) in hubs.iter().enumerate() {
                self.check_name(&format!("{at}.hubs[{i}]"), h);
            }
        });
        Some(PluginConfig {
            name,
            endpoint: endpoint?,
            transport: transport?,
            policy,
            hubs,
        })
    }
}

/// The path of `name` inside the block at `at` (the file's top: `name`).
fn field(at: &str, name: &str) -> String {
    if at.is_empty() {
        name.to_string()
    } else {
        format!("{at}.{name}")
    }
}

/// Parses a registry duration: Go's syntax (`500ms`, `10s`, `2m`, `1h30m`,
/// `1.5s`; units ns, us (µs), ms, s, m, h; a bare `0`), with no sign and at
/// most 10^9 s, blanks around it ignored ([`Rules::Registry`]).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    duration::parse_duration(text, Rules::Registry)
}

/// Formats a duration the way the config spells it (`500ms`, `10s`, `2m`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Parses a gRPC status code name (`UNAVAILABLE`, case-insensitive) or number.
pub fn parse_code(text: &str) -> Option<Code> {
    if let Ok(n) = text.parse::<i32>() {
        return (0..=16).contains(&n).then(|| Code::from_i32(n));
    }
    rollout_wire::code_from_name(text)
}

/// `host:port`, `[v6]:port`. No scheme: the transport comes from
/// `caCertificate` / `insecure`.
pub fn parse_endpoint(text: &str) -> Result<Endpoint, EndpointError> {
    if text.contains("://") {
        return Err(EndpointError::Scheme);
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (h, p) = rest
            .split_once("]:")
            .ok_or(EndpointError::NotBracketedPort)?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(EndpointError::Ipv6(h.to_string()));
        }
        (h, p)
    } else {
        let (h, p) = text.rsplit_once(':').ok_or(EndpointError::NotHostPort)?;
        if h.contains(':') {
            return Err(EndpointError::UnbracketedIpv6);
        }
        check_host_name(h)?;
        (h, p)
    };
    let port: u16 = port.parse().map_err(|_| EndpointError::Port)?;
    if port == 0 {
        return Err(EndpointError::PortZero);
    }
    Ok(Endpoint {
        host: host.to_string(),
        port,
    })
}

/// Why an `endpoint` is not `host:port`; each reads after the endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("must be host:port without a scheme (TLS is chosen by caCertificate or insecure)")]
    Scheme,
    #[error("is not [ipv6]:port")]
    NotBracketedPort,
    #[error("has an invalid IPv6 address {0:?}")]
    Ipv6(String),
    #[error("is not host:port")]
    NotHostPort,
    #[error("has an IPv6 address without brackets: write [address]:port")]
    UnbracketedIpv6,
    #[error("has an invalid port")]
    Port,
    #[error("has port 0")]
    PortZero,
    #[error("has no host")]
    NoHost,
    #[error(
        "has an invalid host {host:?}: {c:?} is not allowed (letters, digits, '-', '_' and '.')"
    )]
    HostCharacter { host: String, c: char },
    #[error("has a host of {0} characters (at most 253)")]
    HostLength(usize),
    #[error("has an invalid host {0:?}: an empty label")]
    EmptyLabel(String),
    #[error("has an invalid host: the label {0:?} is over 63 characters")]
    LabelLength(String),
    #[error("has an invalid host {host:?}: the label {label:?} starts or ends with '-'")]
    LabelDash { host: String, label: String },
    #[error(
        "has an invalid host {0:?}: neither an IPv4 address nor a DNS name (whose last label is not a number)"
    )]
    NumericName(String),
}

/// A DNS name or an IPv4 address, as a connection's authority and a TLS
/// server name both accept it: labels of ASCII letters, digits, `-` and `_`,
/// separated by single dots (one trailing dot allowed), at most 63 characters
/// a label and 253 in all.
fn check_host_name(host: &str) -> Result<(), EndpointError> {
    if host.is_empty() {
        return Err(EndpointError::NoHost);
    }
    if let Some(c) = host
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(EndpointError::HostCharacter {
            host: host.to_string(),
            c,
        });
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.len() > 253 {
        return Err(EndpointError::HostLength(host.len()));
    }
    let mut last = name;
    for label in name.split('.') {
        if label.is_empty() {
            return Err(EndpointError::EmptyLabel(host.to_string()));
        }
        if label.len() > 63 {
            return Err(EndpointError::LabelLength(label.to_string()));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(EndpointError::LabelDash {
                host: host.to_string(),
                label: label.to_string(),
            });
        }
        last = label;
    }
    // A name ending in a number is read as an IPv4 address, or not at all.
    if last.bytes().all(|b| b.is_ascii_digit()) && host.parse::<std::net::Ipv4Addr>().is_err() {
        return Err(EndpointError::NumericName(host.to_string()));
    }
    Ok(())
}

/// The fields `T` takes, read from its JSON schema: the type itself is the
/// one list of its fields.
fn known_fields<T: JsonSchema>() -> Vec<String> {
    let schema = schemars::schema_for!(T);
    schema
        .get("properties")
        .and_then(serde_json::Value::as_object)
        .map(|fields| fields.keys().cloned().collect())
        .unwrap_or_default()
}

/// The field of `known` that `key` most likely misspells, if one is near
/// enough (the measure clap suggests flags by).
fn nearest_field<'a>(key: &str, known: &'a [String]) -> Option<&'a str> {
    let key = key.to_ascii_lowercase();
    known
        .iter()
        .map(|field| {
            let score = strsim::jaro(&key, &field.to_ascii_lowercase());
            (score, field.as_str())
        })
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, field)| field)
}

/// Decodes the design's `caBundle` (base64 of a PEM bundle) and checks that it
/// holds at least one certificate.
fn decode_ca_bundle(b64: &str) -> Result<Vec<u8>, CaBundleError> {
    if b64.trim().is_empty() {
        return Err(CaBundleError::Missing);
    }
    let cleaned: String = b64.chars().filter(|c| !c.is_whitespace()).collect();
    let pem = base64::engine::general_purpose::STANDARD
        .decode(cleaned.as_bytes())
        .map_err(CaBundleError::Base64)?;
    if !holds_pem_certificate(&pem) {
        return Err(CaBundleError::NoCertificate);
    }
    Ok(pem)
}

/// Why a `caBundle` is unusable.
#[derive(Debug, thiserror::Error)]
enum CaBundleError {
    #[error("is required")]
    Missing,
    #[error("{}", base64_problem(.0))]
    Base64(#[source] base64::DecodeError),
    #[error("does not decode to a PEM bundle holding a CERTIFICATE")]
    NoCertificate,
}

/// What is wrong with a `caBundle` that does not decode, in its user's terms.
fn base64_problem(error: &base64::DecodeError) -> String {
    use base64::DecodeError as E;
    let what = match error {
        E::InvalidByte(offset, byte) => format!(
            "has {:?} at character {}, which base64 does not use",
            char::from(*byte),
            offset + 1
        ),
        E::InvalidLength(length) => {
            format!(
                "is {length} characters long after removing whitespace, which is not a whole base64 text"
            )
        }
        E::InvalidLastSymbol(offset, byte) => format!(
            "ends with {:?} at character {}, which cannot end a base64 text",
            char::from(*byte),
            offset + 1
        ),
        E::InvalidPadding => "has misplaced `=` padding".to_owned(),
    };
    format!(
        "is not base64: it {what}; set it to the output of `base64 -w0 ca.crt`, or name the PEM file with caFile"
    )
}

/// Whether `pem` is text holding at least one PEM `CERTIFICATE` block: the
/// check `caBundle`, `caFile` and `clientCertificate.certFile` all pass.
pub(crate) fn holds_pem_certificate(pem: &[u8]) -> bool {
    std::str::from_utf8(pem).is_ok_and(|text| text.contains("-----BEGIN CERTIFICATE-----"))
}

/// DNS-1123 subdomain: lowercase alphanumerics, `-` and `.`, at most 253
/// characters, starting and ending with an alphanumeric.
pub fn check_dns_subdomain(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("is empty");
    }
    if name.len() > 253 {
        return Err("is longer than 253 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Err("may hold only lowercase letters, digits, '-' and '.'");
    }
    let first = name.as_bytes()[0];
    let last = name.as_bytes()[name.len() - 1];
    if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_proto::v1alpha1::Hook;

    const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn the_designs_configmap_format_is_valid_as_it_stands() {
        let text = format!(
            "plugins:\n  - name: my-rollout-1\n    endpoint: my-rollout.my-namespace:10843\n    caCertificate:\n      caBundle: \"{}\"\n",
            b64(CA_PEM)
        );
        let cfg = parse(&text).expect("valid");
        assert_eq!(cfg.plugins.len(), 1);
        let p = &cfg.plugins[0];
        assert_eq!(p.endpoint.to_string(), "my-rollout.my-namespace:10843");
        assert!(matches!(p.transport, Transport::Tls { .. }));
        assert_eq!(p.policy, Policy::default());
    }

    #[test]
    fn the_contracts_full_example_is_valid_and_overrides_field_by_field() {
        let text = r#"
hub: hub-a
clientCertificate:
  certFile: /var/run/secrets/gateway/tls.crt
  keyFile: /var/run/secrets/gateway/tls.key
defaults:
  timeout: 30s
  failurePolicy: Fail
  retry:
    maxAttempts: 3
    initialBackoff: 100ms
    maxBackoff: 2s
    backoffMultiplier: 2
    retryableStatusCodes: [UNAVAILABLE]
  retryBudget:
    ratio: 0.2
    minPerSecond: 10
  circuitBreaker:
    consecutiveFailures: 5
    openFor: 10s
    maxOpenFor: 5m
plugins:
  - name: smoke-test
    endpoint: 127.0.0.1:7001
    insecure: true
    timeout: 5s
    failurePolicy: Ignore
    retry:
      maxAttempts: 2
    hubs: [hub-a, hub-b]
  - name: traffic-weights
    endpoint: 127.0.0.1:7002
    insecure: true
pipelines:
  - name: safe-canary
    plugins: [traffic-weights, smoke-test]
"#;
        let cfg = parse(text).expect("valid");
        assert_eq!(cfg.hub.as_deref(), Some("hub-a"));
        let smoke = &cfg.plugins[0];
        assert_eq!(smoke.policy.timeout, Duration::from_secs(5));
        assert_eq!(smoke.policy.failure_policy, FailurePolicy::Ignore);
        assert_eq!(smoke.policy.retry.max_attempts, 2);
        // Not overridden: inherited from defaults.
        assert_eq!(smoke.policy.retry.max_backoff, Duration::from_secs(2));
        assert_eq!(
            smoke.policy.circuit_breaker.max_open_for,
            Duration::from_secs(300)
        );
        assert_eq!(
            smoke.hubs.as_deref(),
            Some(&["hub-a".to_string(), "hub-b".to_string()][..])
        );
        assert_eq!(
            cfg.pipelines[0].plugins,
            vec!["traffic-weights", "smoke-test"]
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let text = r#"
plugins:
  - name: a
    endpoint: nohost
    insecure: true
    timeout: 45s
  - name: b
    endpoint: 127.0.0.1:1
  - name: a
    endpoint: 127.0.0.1:2
    insecure: true
    failurePolicy: Maybe
    retry:
      maxAttempts: 0
      retryableStatusCodes: [UNAVAILBLE]
    circuitBreaker:
      openFor: 10x
  - name: Bad_Name
    endpoint: http://x:1
    insecure: true
    colour: blue
pipelines:
  - name: p
    plugins: [a, ghost, p2]
  - name: p2
    plugins: []
  - name: a
    plugins: [a]
"#;
        let err = parse(text).expect_err("invalid");
        let all = err.to_string();
        for needle in [
            "plugins[0] (a).endpoint: \"nohost\" is not host:port",
            "plugins[0] (a).timeout: must be more than 0 and at most 30s",
            "plugins[1] (b).caCertificate: is required",
            "plugins[2] (a).name: \"a\" is defined twice",
            "plugins[2] (a).failurePolicy: \"Maybe\" is not Fail or Ignore",
            "plugins[2] (a).retry.maxAttempts: 0 is out of range",
            "plugins[2] (a).retry.retryableStatusCodes[0]: \"UNAVAILBLE\"",
            "plugins[2] (a).circuitBreaker.openFor: \"10x\" is not a duration",
            "plugins[3] (Bad_Name).name: \"Bad_Name\" may hold only",
            "plugins[3] (Bad_Name).endpoint: \"http://x:1\" must be host:port without a scheme",
            "plugins[3] (Bad_Name).colour: unknown field",
            "pipelines[0] (p).plugins[1]: \"ghost\" is not a plugin defined in this file",
            "pipelines[0] (p).plugins[2]: \"p2\" is a pipeline",
            "pipelines[1] (p2).plugins: lists no plugin",
            "pipelines[2] (a).name: \"a\" is already the name of a plugin or pipeline",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in:\n{all}");
        }
        // A member that is a pipeline is reported once, as a pipeline.
        assert!(!all.contains("\"p2\" is not a plugin defined"), "{all}");
        assert_eq!(err.problems.len(), 15, "{all}");
    }

    #[test]
    fn failure_policies_can_be_set_per_hook() {
        let text = "defaults:\n  failurePolicyByHook:\n    BeginRollout: Ignore\nplugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n    failurePolicyByHook:\n      ValidateRolloutCompletion: Ignore\n      BeginRollout: Fail\n";
        let cfg = parse(text).expect("valid");
        let p = &cfg.plugins[0].policy;
        assert_eq!(
            p.failure_policy_for(Some(Hook::ValidateRolloutCompletion)),
            FailurePolicy::Ignore
        );
        assert_eq!(
            p.failure_policy_for(Some(Hook::BeginRollout)),
            FailurePolicy::Fail,
            "the plugin's entry wins"
        );
        assert_eq!(
            p.failure_policy_for(Some(Hook::MutateManifestWork)),
            FailurePolicy::Fail
        );
        assert_eq!(p.failure_policy_for(None), FailurePolicy::Fail);
        let err = parse("plugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n    failurePolicyByHook:\n      Mutate: Ignore\n      BeginRollout: Maybe\n")
            .expect_err("bad");
        let all = err.to_string();
        assert!(
            all.contains("failurePolicyByHook.Mutate: is not a hook"),
            "{all}"
        );
        assert!(
            all.contains("failurePolicyByHook.BeginRollout: \"Maybe\" is not Fail or Ignore"),
            "{all}"
        );
    }

    #[test]
    fn an_unknown_field_suggests_the_nearest_known_one() {
        let text = "plugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n    timout: 5s\n    retry:\n      maxAtempts: 2\n    colour: red\npipelines:\n  - name: p\n    plugin: [a]\n";
        let all = parse(text).expect_err("unknown fields").to_string();
        for want in [
            "plugins[0] (a).timout: unknown field; did you mean `timeout`?",
            "plugins[0] (a).retry.maxAtempts: unknown field; did you mean `maxAttempts`?",
            "plugins[0] (a).colour: unknown field",
            "pipelines[0] (p).plugin: unknown field; did you mean `plugins`?",
        ] {
            assert!(all.contains(want), "{want} in {all}");
        }
        assert!(!all.contains("colour: unknown field; did"), "{all}");
    }

    #[test]
    fn an_unknown_default_suggests_the_nearest_known_one() {
        let text = "defaults:\n  timout: 5s\n  failurePolicy: Ignore\n  colour: red\n  retry:\n    maxAtempts: 2\nplugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n";
        let all = parse(text).expect_err("unknown fields").to_string();
        for want in [
            "defaults.timout: unknown field; did you mean `timeout`?",
            "defaults.colour: unknown field",
            "defaults.retry.maxAtempts: unknown field; did you mean `maxAttempts`?",
        ] {
            assert!(all.contains(want), "{want} in {all}");
        }
        assert!(!all.contains("colour: unknown field; did"), "{all}");
    }

    #[test]
    fn a_ca_bundle_that_is_not_base64_says_where_and_what_to_do() {
        let text = "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caBundle: \"QUJD!EF\"\n";
        let all = parse(text).expect_err("bad").to_string();
        assert!(
            all.contains("caCertificate.caBundle: is not base64: it has '!' at character 5"),
            "{all}"
        );
        assert!(all.contains("base64 -w0"), "{all}");
        assert!(!all.contains("Invalid symbol"), "{all}");
    }

    #[test]
    fn ca_bundle_must_be_base64_pem() {
        let text = "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caBundle: \"!!!\"\n";
        assert!(
            parse(text)
                .expect_err("bad")
                .to_string()
                .contains("is not base64")
        );
        let text = format!(
            "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caBundle: \"{}\"\n",
            b64("hello")
        );
        assert!(
            parse(&text)
                .expect_err("bad")
                .to_string()
                .contains("PEM bundle")
        );
        let text = format!(
            "plugins:\n  - name: a\n    endpoint: h:1\n    insecure: true\n    caCertificate:\n      caBundle: \"{}\"\n",
            b64(CA_PEM)
        );
        assert!(
            parse(&text)
                .expect_err("bad")
                .to_string()
                .contains("exclude each other")
        );
    }

    #[test]
    fn a_ca_may_come_from_a_file_and_exactly_one_source_is_set() {
        let text = "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caFile: /etc/plugin-ca/ca.crt\n";
        let cfg = parse(text).expect("valid");
        assert_eq!(
            cfg.plugins[0].transport,
            Transport::Tls {
                ca: CaSource::File {
                    path: "/etc/plugin-ca/ca.crt".into()
                }
            }
        );
        let both = format!(
            "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caFile: ca.crt\n      caBundle: \"{}\"\n",
            b64(CA_PEM)
        );
        let neither = "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate: {}\n";
        for text in [both.as_str(), neither] {
            let err = parse(text).expect_err("one source");
            assert_eq!(
                err.problems,
                vec![Problem {
                    path: "plugins[0] (a).caCertificate".into(),
                    message: "set exactly one of caBundle and caFile".into()
                }],
                "{text}"
            );
        }
        let empty =
            "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caFile: \"\"\n";
        assert!(
            parse(empty)
                .expect_err("empty")
                .to_string()
                .contains("plugins[0] (a).caCertificate.caFile: is empty")
        );
    }

    #[test]
    fn yaml_syntax_errors_are_reported() {
        let err = parse("plugins: [\n  - name: a").expect_err("bad yaml");
        assert!(
            err.to_string().contains("not a valid registry file"),
            "{err}"
        );
        let err = parse("plugins:\n  - name: [1, 2]\n").expect_err("bad type");
        assert!(
            err.to_string().contains("not a valid registry file"),
            "{err}"
        );
    }

    #[test]
    fn a_yaml_error_does_not_echo_the_file() {
        let text = "plugins:\n  - name: a\n    endpoint: h:1\n    caCertificate:\n      caBundle: \"SECRETLOOKINGBUNDLE\"\n    hubs: [a, b\n";
        let err = parse(text).expect_err("bad yaml").to_string();
        assert!(err.contains("not a valid registry file"), "{err}");
        assert!(!err.contains("SECRETLOOKINGBUNDLE"), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn durations_parse_go_style() {
        let table = [
            ("500ms", Some(Duration::from_millis(500))),
            ("10s", Some(Duration::from_secs(10))),
            ("2m", Some(Duration::from_secs(120))),
            ("1h30m", Some(Duration::from_secs(5400))),
            ("1.5s", Some(Duration::from_millis(1500))),
            ("250us", Some(Duration::from_micros(250))),
            ("0", Some(Duration::ZERO)),
            ("10", None),
            ("10x", None),
            ("", None),
            ("ms", None),
            ("-1s", None),
        ];
        for (text, want) in table {
            assert_eq!(parse_duration(text).ok(), want, "{text}");
        }
        assert_eq!(format_duration(Duration::from_millis(500)), "500ms");
        assert_eq!(format_duration(Duration::from_secs(10)), "10s");
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
    }

    #[test]
    fn endpoints_parse() {
        assert_eq!(
            parse_endpoint("a.b:10843").map(|e| e.to_string()),
            Ok("a.b:10843".into())
        );
        assert_eq!(parse_endpoint("[::1]:80").map(|e| e.host), Ok("::1".into()));
        assert!(parse_endpoint("a:0").is_err());
        assert!(parse_endpoint("a:99999").is_err());
        assert!(parse_endpoint(":80").is_err());
        // Refused here, with the reason, not later by the connection.
        for (text, reason) in [
            ("a[b:80", "'[' is not allowed"),
            ("a b:80", "' ' is not allowed"),
            ("u@h:1", "'@' is not allowed"),
            ("a..b:80", "an empty label"),
            (".a:80", "an empty label"),
            ("::1:80", "without brackets"),
            ("[::g]:80", "invalid IPv6 address"),
            ("[]:80", "invalid IPv6 address"),
            ("a.0:80", "neither an IPv4 address"),
            ("10.0.0.256:80", "neither an IPv4 address"),
            ("-a.b:80", "starts or ends with '-'"),
        ] {
            let e = parse_endpoint(text).expect_err(text).to_string();
            assert!(e.contains(reason), "{text}: {e}");
        }
        assert_eq!(
            parse_endpoint("plugin.ns.svc.cluster.local.:443").map(|e| e.host),
            Ok("plugin.ns.svc.cluster.local.".into())
        );
        assert!(parse_endpoint(&format!("{}:80", "a".repeat(64))).is_err());
        assert!(parse_endpoint(&format!("{}:80", "a".repeat(63))).is_ok());
    }

    #[test]
    fn blank_files_are_recognised() {
        assert!(is_blank(""));
        assert!(is_blank("\n  \n# only a comment\n---\n"));
        assert!(!is_blank("plugins: []"));
    }

    #[test]
    fn codes_parse_by_name_or_number() {
        assert_eq!(parse_code("unavailable"), Some(Code::Unavailable));
        assert_eq!(parse_code("14"), Some(Code::Unavailable));
        assert_eq!(parse_code("NOPE"), None);
        assert_eq!(parse_code("17"), None);
    }
}
