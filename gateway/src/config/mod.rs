//! The plugin registry file, `config.yaml` (docs/plugin-api.md §3).
//!
//! Parsing happens in two steps, in the manner of vector's config: serde reads
//! the YAML into lenient raw types (durations and codes as strings, unknown
//! keys collected), then [`validate`] turns them into a typed [`Config`],
//! reporting every problem at once as a list of [`Problem`]s, each naming the
//! place in the file. Nothing here touches the network or the file system
//! beyond what the caller passes in.
//!
//! [`raw`] holds the serde types, [`validate`] the validator, [`parse`] the
//! leaves' parsers.

mod parse;
mod raw;
mod validate;

use std::collections::HashSet;
use std::fmt;

use rollout_policies::Policy;

use crate::hub::Hub;

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

pub(crate) use parse::holds_pem_certificate;
pub use parse::{
    EndpointError, check_dns_subdomain, format_duration, parse_code, parse_duration, parse_endpoint,
};
pub(crate) use raw::RawConfig;
use raw::RawPolicy;
use validate::Problems;

// ---------------------------------------------------------------------------
// Typed config: what the gateway uses.
// ---------------------------------------------------------------------------

/// A validated registry file.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Every name in this file belongs to this hub (central mode); `None` = shared.
    pub hub: Option<Hub>,
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
    pub hubs: Option<Vec<Hub>>,
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
        (!h.is_empty()).then(|| Hub::new(&h))
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

#[cfg(test)]
mod tests;
