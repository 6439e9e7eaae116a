//! The I/O half of a reload: a [`Plan`] made real. The certificate files it
//! names are read (each once, bounded in size), the TLS material put into
//! upstream keys, and each plugin given its upstream: the live one when its
//! key did not change, else a new one joining the connection of any upstream
//! of the same key. Nothing live changes here either: the kept upstreams'
//! new settings are in the [`Built`] value, applied on commit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rollout_policies::Policy;

use crate::config::{self, CaSource, ClientCertificate, ConfigError, Problem, Transport};
use crate::files::{self, FileError};
use crate::hub::Hub;
use crate::plugin_stack;
use crate::telemetry::Telemetry;
use crate::upstream::{CaBundle, Channel, ChannelSettings, ClientIdentity, Upstream, UpstreamKey};

use super::plan::{Change, Plan, PluginPlan, SourcePlan};
use super::snapshot::{Plugin, ScopedPipeline, Snapshot, Target};

/// What every build of one registry is made with.
#[derive(Debug)]
pub(super) struct BuildSettings {
    /// The settings of every upstream made.
    pub(super) channel: ChannelSettings,
    /// Where the plugins' stacks report.
    pub(super) telemetry: Telemetry,
    /// Read no certificate file: a plugin naming one is left unbuilt
    /// (`check --skip-files`).
    pub(super) skip_files: bool,
}

/// An upstream a build made, whose own Initialize (for the hub of the file
/// defining its plugin, `None`: shared) is pending.
#[derive(Debug, Clone)]
pub(crate) struct FreshUpstream {
    pub(crate) hub: Option<Hub>,
    pub(crate) upstream: Arc<Upstream>,
}

/// A live upstream a build kept, with what it takes on commit.
pub(super) struct KeptUpstream {
    pub(super) upstream: Arc<Upstream>,
    pub(super) policy: Policy,
    /// The registered hubs that may call it, which share its concurrency
    /// bound.
    pub(super) callers: Vec<Hub>,
}

/// A registry built and not yet live: committing it stores the snapshot and
/// applies the kept plugins' new settings.
pub(super) struct Built {
    pub(super) snapshot: Snapshot,
    /// Upstreams made for it, whose own Initialize is pending.
    pub(super) fresh: Vec<FreshUpstream>,
    /// Kept upstreams, which take their new settings on commit.
    pub(super) kept: Vec<KeptUpstream>,
    /// The live plugins the new registry no longer has.
    pub(super) removed: usize,
}

/// Builds `plan` over the `live` snapshot, reading certificate files
/// through `files`; every problem, the plan's and the build's, at once.
pub(super) fn build(
    settings: &BuildSettings,
    plan: Plan<'_>,
    live: Option<&Snapshot>,
    files: &mut FileCache,
) -> Result<Built, ConfigError> {
    let Plan {
        sources,
        pipelines,
        removed,
        problems,
    } = plan;
    let mut b = Builder {
        settings,
        files,
        channels: live_channels(live),
        snapshot: Snapshot::default(),
        fresh: Vec::new(),
        kept: Vec::new(),
        problems,
    };
    for source in &sources {
        b.source(source);
    }
    for pipeline in pipelines {
        let members = b.members(pipeline.hub.as_ref(), &pipeline.config.plugins);
        let name = pipeline.config.name.clone();
        b.snapshot
            .scopes
            .get_mut(pipeline.hub.as_ref())
            .insert(name.clone(), Target::Pipeline { name, members });
        b.snapshot.pipelines.push(ScopedPipeline {
            hub: pipeline.hub,
            config: pipeline.config.clone(),
        });
    }
    if !b.problems.is_empty() {
        return Err(ConfigError {
            problems: b.problems,
        });
    }
    Ok(Built {
        snapshot: b.snapshot,
        fresh: b.fresh,
        kept: b.kept,
        removed: removed.len(),
    })
}

/// One connection per key: a new upstream joins the channel of any upstream
/// of its key, live or made by this build.
fn live_channels(live: Option<&Snapshot>) -> HashMap<UpstreamKey, Arc<Channel>> {
    live.iter()
        .flat_map(|snap| snap.plugins.iter())
        .map(|p| (p.upstream.key().clone(), p.upstream.channel().clone()))
        .collect()
}

struct Builder<'r, 'f> {
    settings: &'r BuildSettings,
    /// Each certificate file is read once a build: every plugin naming it
    /// sees the same bytes.
    files: &'f mut FileCache,
    channels: HashMap<UpstreamKey, Arc<Channel>>,
    /// The snapshot so far (its generation is set on commit).
    snapshot: Snapshot,
    fresh: Vec<FreshUpstream>,
    kept: Vec<KeptUpstream>,
    problems: Vec<Problem>,
}

/// A plugin's CA bundle (`None`: plaintext), and the files it came from.
struct CaMaterial {
    bundle: Option<CaBundle>,
    files: Vec<PathBuf>,
}

impl Builder<'_, '_> {
    /// Builds one source's plugins, with its file's client certificate. A
    /// plugin left unbuilt (its own problem reported, or its files skipped)
    /// is left out of the pipelines naming it without a further problem.
    fn source(&mut self, source: &SourcePlan<'_>) {
        let config = source.config;
        let identity = match &config.client_certificate {
            None => None,
            Some(_) if self.settings.skip_files => return,
            Some(cc) => match read_identity(cc, self.files) {
                Ok(id) => Some(id),
                Err(e) => {
                    self.problems.push(Problem {
                        path: format!("{}: clientCertificate", source.label),
                        message: e.to_string(),
                    });
                    return;
                }
            },
        };
        // The key holds the identity whatever the transport: the files it
        // came from are each plugin's too.
        let identity_files: Vec<PathBuf> = config
            .client_certificate
            .iter()
            .flat_map(|cc| [PathBuf::from(&cc.cert_file), PathBuf::from(&cc.key_file)])
            .collect();
        for plugin in &source.plugins {
            let Some(CaMaterial {
                bundle,
                files: mut certificate_files,
            }) = self.ca_bundle(plugin)
            else {
                continue;
            };
            certificate_files.extend(identity_files.iter().cloned());
            let key = UpstreamKey {
                endpoint: plugin.config.endpoint.clone(),
                ca_bundle: bundle,
                client_identity: identity.clone(),
            };
            let hub = config.hub.as_ref();
            if let Some(upstream) = self.upstream(plugin, hub, key, &certificate_files) {
                self.add(plugin, hub, upstream, certificate_files);
            }
        }
    }

    /// The plugin's CA material; `None` when it is not built (its `caFile`
    /// skipped, or unusable: a problem).
    fn ca_bundle(&mut self, plugin: &PluginPlan<'_>) -> Option<CaMaterial> {
        let path = match &plugin.config.transport {
            Transport::Plaintext => {
                return Some(CaMaterial {
                    bundle: None,
                    files: Vec::new(),
                });
            }
            Transport::Tls {
                ca: CaSource::Bundle { pem },
            } => {
                return Some(CaMaterial {
                    bundle: Some(CaBundle::new(pem.as_slice().into())),
                    files: Vec::new(),
                });
            }
            Transport::Tls { .. } if self.settings.skip_files => return None,
            Transport::Tls {
                ca: CaSource::File { path },
            } => path,
        };
        match read_ca_bundle(self.files, path) {
            Ok(bundle) => Some(CaMaterial {
                bundle: Some(bundle),
                files: vec![PathBuf::from(path)],
            }),
            Err(e) => {
                self.problems.push(Problem {
                    path: format!("{}.caCertificate.caFile", plugin.at),
                    message: e.to_string(),
                });
                None
            }
        }
    }

    /// The plugin's upstream: the live one if its key is the same, else a
    /// new one (`None`, a problem, when it cannot be made).
    fn upstream(
        &mut self,
        plugin: &PluginPlan<'_>,
        hub: Option<&Hub>,
        key: UpstreamKey,
        certificate_files: &[PathBuf],
    ) -> Option<Arc<Upstream>> {
        let policy = &plugin.config.policy;
        if let Change::Update(live) = &plugin.change
            && *live.key() == key
        {
            self.kept.push(KeptUpstream {
                upstream: live.clone(),
                policy: policy.clone(),
                callers: plugin.hubs.clone(),
            });
            return Some(live.clone());
        }
        let channel = self.channels.entry(key.clone()).or_default().clone();
        let settings = &self.settings.channel;
        match Upstream::sharing(key, settings, policy, channel, hub) {
            Ok(u) => {
                u.set_callers(&plugin.hubs);
                let u = Arc::new(u);
                self.fresh.push(FreshUpstream {
                    hub: hub.cloned(),
                    upstream: u.clone(),
                });
                Some(u)
            }
            Err(e) => {
                let message = if certificate_files.is_empty() {
                    e.to_string()
                } else {
                    let names: Vec<String> = certificate_files
                        .iter()
                        .map(|f| f.display().to_string())
                        .collect();
                    format!("{e} (read from {})", names.join(", "))
                };
                self.problems.push(Problem {
                    path: plugin.at.clone(),
                    message,
                });
                None
            }
        }
    }

    /// Adds a built plugin to the snapshot, with its stack and metrics.
    fn add(
        &mut self,
        plugin: &PluginPlan<'_>,
        hub: Option<&Hub>,
        upstream: Arc<Upstream>,
        certificate_files: Vec<PathBuf>,
    ) {
        let pc = plugin.config;
        let telemetry = &self.settings.telemetry;
        let metrics = telemetry.metrics.plugin(&pc.name, hub);
        let plugin = Arc::new(Plugin {
            name: pc.name.clone(),
            hub: hub.cloned(),
            endpoint: pc.endpoint.clone(),
            policy: pc.policy.clone(),
            hubs: pc.hubs.clone(),
            stack: plugin_stack::build(&pc.name, &pc.policy, &upstream, telemetry, &metrics),
            upstream,
            metrics,
            certificate_files,
        });
        self.snapshot
            .scopes
            .get_mut(hub)
            .insert(pc.name.clone(), Target::Plugin(plugin.clone()));
        self.snapshot.plugins.push(plugin);
    }

    /// A pipeline's members as built, in order: each of its hub's scope,
    /// else shared. A member left unbuilt is left out (its own problem is
    /// reported, or its files were skipped).
    fn members(&self, hub: Option<&Hub>, names: &[String]) -> Vec<Arc<Plugin>> {
        let snapshot = &self.snapshot;
        names
            .iter()
            .filter_map(|member| {
                let own = snapshot.in_scope(hub, member);
                let found = own.or_else(|| hub.and_then(|_| snapshot.in_scope(None, member)));
                match found {
                    Some(Target::Plugin(p)) => Some(p.clone()),
                    _ => None,
                }
            })
            .collect()
    }
}

/// The certificate files one build has read, by path as written: each is
/// read once, and its bytes shared by every plugin naming it.
pub(super) struct FileCache {
    pub(super) read: HashMap<String, Result<Arc<[u8]>, FileError>>,
    /// The CA bundles made of them, each once.
    bundles: HashMap<String, CaBundle>,
    max_bytes: u64,
}

impl FileCache {
    pub(super) fn new(max_bytes: u64) -> FileCache {
        FileCache {
            read: HashMap::new(),
            bundles: HashMap::new(),
            max_bytes,
        }
    }

    /// The file's bytes, or why it cannot be read (naming it): only a
    /// regular file, at most `max_bytes` (builds run off the runtime).
    pub(super) fn read(&mut self, path: &str) -> Result<Arc<[u8]>, FileError> {
        let max_bytes = self.max_bytes;
        self.read
            .entry(path.to_string())
            .or_insert_with(|| {
                files::read_sync(Path::new(path), max_bytes, None)
                    .map(|read| read.map(|(bytes, _)| bytes).unwrap_or_default().into())
            })
            .clone()
    }
}

/// Why a certificate file cannot be used.
#[derive(Debug, thiserror::Error)]
enum CertificateFileError {
    #[error("{0}")]
    Read(#[from] FileError),
    #[error("{0} holds no PEM CERTIFICATE")]
    NoCertificate(String),
}

/// Why a registry file's `clientCertificate` cannot be used.
#[derive(Debug, thiserror::Error)]
enum IdentityError {
    #[error("certFile: {0}")]
    CertFile(#[source] CertificateFileError),
    #[error("keyFile: {0}")]
    KeyFile(#[source] FileError),
}

/// The file at `path`, which must hold a PEM certificate.
fn read_certificate(files: &mut FileCache, path: &str) -> Result<Arc<[u8]>, CertificateFileError> {
    let pem = files.read(path)?;
    if config::holds_pem_certificate(&pem) {
        Ok(pem)
    } else {
        Err(CertificateFileError::NoCertificate(path.to_string()))
    }
}

/// The CA bundle the file at `path` holds, made (and hashed) once a build.
fn read_ca_bundle(files: &mut FileCache, path: &str) -> Result<CaBundle, CertificateFileError> {
    if let Some(bundle) = files.bundles.get(path) {
        return Ok(bundle.clone());
    }
    let bundle = CaBundle::new(read_certificate(files, path)?);
    files.bundles.insert(path.to_string(), bundle.clone());
    Ok(bundle)
}

fn read_identity(
    cc: &ClientCertificate,
    files: &mut FileCache,
) -> Result<ClientIdentity, IdentityError> {
    let cert_pem = read_certificate(files, &cc.cert_file)
        .map_err(IdentityError::CertFile)?
        .to_vec();
    let key_pem = files
        .read(&cc.key_file)
        .map_err(IdentityError::KeyFile)?
        .to_vec();
    Ok(ClientIdentity { cert_pem, key_pem })
}
