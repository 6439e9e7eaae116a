//! One immutable view of the registry: its plugins and pipelines by scope,
//! and how a caller's name resolves in it. A snapshot is built by a reload
//! ([`super::build`]) and never changes once stored; calls load one and
//! finish on it.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use rollout_policies::Policy;

use crate::config::{Endpoint, PipelineConfig};
use crate::error::ResolveError;
use crate::hub::Hub;
use crate::plugin_stack::PluginStack;
use crate::telemetry::PluginMetrics;
use crate::upstream::Upstream;

/// A registered plugin, as one snapshot sees it.
pub struct Plugin {
    pub(crate) name: String,
    /// The hub whose file defines it; `None` = shared.
    pub(crate) hub: Option<Hub>,
    pub(crate) endpoint: Endpoint,
    pub(crate) policy: Policy,
    pub(crate) hubs: Option<Vec<Hub>>,
    pub upstream: Arc<Upstream>,
    /// The resilience stack every call to the plugin goes through.
    pub(crate) stack: PluginStack,
    /// Its metric handles.
    pub(crate) metrics: Arc<PluginMetrics>,
    /// The files its TLS material was read from (its `caFile`, its file's
    /// `clientCertificate` files), as written in the registry: a change to
    /// one of them rebuilds its upstream.
    pub(crate) certificate_files: Vec<PathBuf>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("hub", &self.hub)
            .field("endpoint", &self.endpoint.to_string())
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Whether `caller` (the calling hub, `None` when the caller has no hub
    /// identity) may call this plugin.
    pub(crate) fn allows(&self, caller: Option<&Hub>) -> bool {
        match (&self.hubs, caller) {
            (None, _) => true,
            (Some(hubs), Some(c)) => hubs.iter().any(|h| h == c),
            (Some(_), None) => false,
        }
    }
}

/// What a name in the registry stands for.
#[derive(Debug, Clone)]
pub enum Target {
    Plugin(Arc<Plugin>),
    /// An ordered list of plugins.
    Pipeline {
        name: String,
        members: Vec<Arc<Plugin>>,
    },
}

impl Target {
    /// The members, in order (one for a plugin).
    pub(crate) fn members(&self) -> &[Arc<Plugin>] {
        match self {
            Target::Plugin(p) => std::slice::from_ref(p),
            Target::Pipeline { members, .. } => members,
        }
    }

    pub(crate) fn is_pipeline(&self) -> bool {
        matches!(self, Target::Pipeline { .. })
    }

    pub(crate) fn name(&self) -> &str {
        match self {
            Target::Plugin(p) => &p.name,
            Target::Pipeline { name, .. } => name,
        }
    }
}

/// A pipeline as its registry file defines it, with the hub of that file
/// (`None`: shared), for listing.
#[derive(Debug, Clone)]
pub(crate) struct ScopedPipeline {
    pub(crate) hub: Option<Hub>,
    pub(crate) config: PipelineConfig,
}

/// The names of a snapshot by scope: the shared scope and each hub's.
#[derive(Debug, Default)]
pub(super) struct Scopes {
    shared: HashMap<String, Target>,
    hubs: HashMap<Hub, HashMap<String, Target>>,
}

impl Scopes {
    /// The names of `hub`'s scope (`None`: the shared one), if it has any.
    pub(super) fn get(&self, hub: Option<&Hub>) -> Option<&HashMap<String, Target>> {
        match hub {
            None => Some(&self.shared),
            Some(hub) => self.hubs.get(hub),
        }
    }

    /// The names of `hub`'s scope, to add to.
    pub(super) fn get_mut(&mut self, hub: Option<&Hub>) -> &mut HashMap<String, Target> {
        match hub {
            None => &mut self.shared,
            Some(hub) => self.hubs.entry(hub.clone()).or_default(),
        }
    }
}

/// One immutable view of the registry.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub generation: u64,
    /// Scope (hub, or shared) → name → target.
    pub(super) scopes: Scopes,
    /// Every plugin, in file order, for listing.
    pub(crate) plugins: Vec<Arc<Plugin>>,
    /// Every pipeline with its scope, for listing.
    pub(crate) pipelines: Vec<ScopedPipeline>,
}

impl Snapshot {
    /// Every certificate file some plugin of this snapshot was built from:
    /// what the watcher watches.
    pub(crate) fn certificate_files(&self) -> BTreeSet<PathBuf> {
        self.plugins
            .iter()
            .flat_map(|p| p.certificate_files.iter().cloned())
            .collect()
    }

    /// The target `name` stands for in the scope of `hub` (`None`: the
    /// shared scope) alone.
    pub(super) fn in_scope(&self, hub: Option<&Hub>, name: &str) -> Option<&Target> {
        self.scopes.get(hub)?.get(name)
    }

    /// Resolves `name` for a caller: in the caller's hub scope first, then the
    /// shared one; then checks that the caller's hub may call every plugin
    /// behind the name.
    pub fn resolve(&self, caller: Option<&Hub>, name: &str) -> Result<&Target, ResolveError> {
        let own = caller.and_then(|hub| self.in_scope(Some(hub), name));
        let target =
            own.or_else(|| self.in_scope(None, name))
                .ok_or_else(|| ResolveError::NotFound {
                    name: name.to_string(),
                    hub: caller.cloned(),
                })?;
        if let Some(denied) = target.members().iter().find(|p| !p.allows(caller)) {
            return Err(ResolveError::PermissionDenied {
                name: name.to_string(),
                plugin: denied.name.clone(),
                hub: caller.cloned(),
            });
        }
        Ok(target)
    }
}

/// The plugins of `snapshot` whose TLS material comes from one of the
/// `changed` files: those a certificate reload rebuilds.
pub(crate) fn affected_plugins<'a>(
    snapshot: &'a Snapshot,
    changed: &[PathBuf],
) -> Vec<&'a Arc<Plugin>> {
    snapshot
        .plugins
        .iter()
        .filter(|p| p.certificate_files.iter().any(|f| changed.contains(f)))
        .collect()
}
