//! The validator: a raw registry file into a typed [`Config`], every problem
//! found at once, each naming its place.

use rollout_policies::policy::MAX_TIMEOUT;
use rollout_policies::{BreakerPolicy, BudgetPolicy, FailurePolicy, Policy, RetryPolicy};
use rollout_proto::HookKind;
use rollout_proto::v1alpha1::Hook;
use schemars::JsonSchema;
use serde::de::IgnoredAny;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;
use tonic::Code;

use crate::hub::Hub;

use super::parse::{
    check_dns_subdomain, decode_ca_bundle, field, known_fields, nearest_field, parse_code,
    parse_duration, parse_endpoint,
};
use super::raw::{
    RawBreaker, RawBudget, RawCaCertificate, RawClientCertificate, RawPipeline, RawPlugin,
    RawPolicy, RawRetry,
};
use super::{
    CaSource, ClientCertificate, ConfigError, PipelineConfig, PluginConfig, Problem, Transport,
    entry_path,
};

#[derive(Default)]
pub(super) struct Problems(Vec<Problem>);

impl Problems {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    pub(super) fn finish<T>(self, value: T) -> Result<T, ConfigError> {
        if self.0.is_empty() {
            Ok(value)
        } else {
            Err(ConfigError { problems: self.0 })
        }
    }

    /// Every key of `unknown` (a `T`'s fields that no field took) is a
    /// problem, suggesting `T`'s field nearest a typo.
    pub(super) fn unknown<T: JsonSchema>(
        &mut self,
        at: &str,
        unknown: &BTreeMap<String, IgnoredAny>,
    ) {
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
    pub(super) fn check_name(&mut self, at: &str, name: &str) {
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
    pub(super) fn client_certificate(
        &mut self,
        c: RawClientCertificate,
    ) -> Option<ClientCertificate> {
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
    pub(super) fn plugins(
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
    pub(super) fn pipelines(
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
    pub(super) fn policy(&mut self, at: &str, raw: &RawPolicy, base: &Policy) -> Policy {
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
        let hubs = raw.hubs.map(|hubs| {
            if hubs.is_empty() {
                self.push(
                    format!("{at}.hubs"),
                    "is empty: no hub could call the plugin (leave it out to allow every hub)",
                );
            }
            for (i, h) in hubs.iter().enumerate() {
                self.check_name(&format!("{at}.hubs[{i}]"), h);
            }
            hubs.iter().map(|h| Hub::new(h)).collect()
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
