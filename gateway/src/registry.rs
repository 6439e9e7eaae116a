//! The plugin registry: an immutable [`Snapshot`] behind an `ArcSwap`.
//!
//! Each registry source (a `--config` file, later a watched ConfigMap) holds
//! its last valid [`Config`]. A change to a source is parsed and validated on
//! its own, then every source is combined into a new snapshot (hub scopes,
//! name clashes across files, pipelines naming shared plugins) in three
//! steps: a pure plan (`registry/plan.rs`: what is added, updated, removed, and what
//! is wrong, from the configs and the live snapshot alone), a build
//! (`registry/build.rs`: certificate files read, each plugin's upstream kept when its
//! endpoint and TLS material did not change, else made anew), and only a
//! build without problems is committed — the kept plugins take their new
//! concurrency bound, breaker and budget settings, and the snapshot is
//! stored in one atomic swap. A change that fails changes nothing: the previous snapshot and every
//! plugin's settings stay, and the failure is recorded for `/debug/plugins`
//! and counted. Calls load the snapshot once and finish on it, whatever
//! reloads happen meanwhile.
//!
//! Parsing and planning take time in proportion to the registry (a 50 MB
//! registry takes a good fraction of a second): [`Registry::apply_blocking`]
//! does them on the blocking pool, never on the runtime's workers, and no
//! lock that the call path or the admin endpoints take is held meanwhile.

use rollout_policies::lock;
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use arc_swap::ArcSwapOption;
use rollout_policies::Policy;
use rollout_policies::breaker::BreakerState;

mod build;
mod plan;

use build::{Built, FileCache};

use crate::config::{self, Config, ConfigError, Endpoint, PipelineConfig};
pub(crate) use crate::error::ResolveError;
use crate::files::FileLimits;
use crate::plugin_stack::PluginStack;
use crate::telemetry::{LastReload, PluginMetrics, RegistryState, Telemetry};
use crate::upstream::{ChannelSettings, Upstream};

/// A registered plugin, as one snapshot sees it.
pub struct Plugin {
    pub(crate) name: String,
    /// The hub whose file defines it; `None` = shared.
    pub(crate) hub: Option<String>,
    pub(crate) endpoint: Endpoint,
    pub(crate) policy: Policy,
    pub(crate) hubs: Option<Vec<String>>,
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
    pub(crate) fn allows(&self, caller: Option<&str>) -> bool {
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

/// One immutable view of the registry.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub generation: u64,
    /// Scope (hub, or `None` for shared) → name → target.
    scopes: HashMap<Option<String>, HashMap<String, Target>>,
    /// Every plugin, in file order, for listing.
    pub(crate) plugins: Vec<Arc<Plugin>>,
    /// Every pipeline with its scope, for listing.
    pub(crate) pipelines: Vec<(Option<String>, PipelineConfig)>,
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

    /// Resolves `name` for a caller: in the caller's hub scope first, then the
    /// shared one; then checks that the caller's hub may call every plugin
    /// behind the name.
    pub fn resolve(&self, caller: Option<&str>, name: &str) -> Result<&Target, ResolveError> {
        let own = caller.and_then(|hub| {
            self.scopes
                .get(&Some(hub.to_string()))
                .and_then(|s| s.get(name))
        });
        let target = own
            .or_else(|| self.scopes.get(&None).and_then(|s| s.get(name)))
            .ok_or_else(|| ResolveError::NotFound {
                name: name.to_string(),
                hub: caller.map(str::to_string),
            })?;
        if let Some(denied) = target.members().iter().find(|p| !p.allows(caller)) {
            return Err(ResolveError::PermissionDenied {
                name: name.to_string(),
                plugin: denied.name.clone(),
                hub: caller.map(str::to_string),
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

/// The label of certificate reloads in messages (they belong to no source).
pub(crate) const CERTIFICATE_FILES: &str = "certificate files";

/// Where a source's text came from, for messages and listings.
#[derive(Debug, Clone)]
pub struct SourceInfo {
    pub label: String,
}

#[derive(Debug, Default)]
struct SourceState {
    label: String,
    /// The last valid config of this source.
    config: Option<Config>,
    /// The text last applied (valid or not), to ignore events that changed nothing.
    last_text: Option<String>,
    /// When `last_text` was refused at planning (a `caFile` not written
    /// yet, say): the certificate files that plan read, with what they held
    /// then (`None`: it could not be read). Once one of them holds
    /// something else, the text is planned again
    /// ([`Registry::retry_waiting`]). Empty otherwise.
    waiting_on: HashMap<String, Option<Arc<[u8]>>>,
}

#[derive(Debug, Default)]
struct Inner {
    sources: Vec<SourceState>,
}

/// What became of a change to a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Applied {
    /// A new snapshot was stored with this generation.
    Loaded(u64),
    /// The text is the same as last time: nothing to do.
    Unchanged,
    /// The text is blank: it never replaces a loaded registry.
    Blank,
}

/// A change that was rejected: the previous snapshot stays.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{source_label}: {error}")]
pub(crate) struct ReloadError {
    pub(crate) source_label: String,
    pub(crate) error: ConfigError,
}

/// The registry shared by the gRPC service, the admin endpoints and the watchers.
#[derive(Debug)]
pub struct Registry {
    current: ArcSwapOption<Snapshot>,
    /// Held while a change is checked, planned and committed (the sources'
    /// state); never by the call path or the admin endpoints.
    inner: Mutex<Inner>,
    labels: Vec<String>,
    last_error: Mutex<Option<String>>,
    /// The last error of a certificate reload, if it is still `last_error`:
    /// a certificate file put back as it was clears it.
    last_certificate_error: Mutex<Option<String>>,
    generation: AtomicU64,
    reload_success: AtomicU64,
    reload_failure: AtomicU64,
    /// When a registry was last loaded.
    loaded_at: Mutex<Option<SystemTime>>,
    draining: AtomicBool,
    settings: ChannelSettings,
    /// Bounds on the certificate files plans read.
    file_limits: FileLimits,
    telemetry: Telemetry,
    /// Readiness ([`Registry::is_ready`]), for those who follow its changes.
    ready: tokio::sync::watch::Sender<bool>,
    /// Upstreams created by the last reload, whose own Initialize is pending.
    fresh: Mutex<Vec<(Option<String>, Arc<Upstream>)>>,
    /// Check everything but the certificate files (`check --skip-files`).
    skip_files: bool,
}

impl Registry {
    /// A registry with one slot per source, nothing loaded, exporting no
    /// spans and with metrics nobody scrapes.
    pub fn new(sources: Vec<SourceInfo>, settings: ChannelSettings) -> Registry {
        Registry::with_telemetry(sources, settings, Telemetry::disabled())
    }

    /// The same, with the plugins' spans and metrics going to `telemetry`.
    pub(crate) fn with_telemetry(
        sources: Vec<SourceInfo>,
        settings: ChannelSettings,
        telemetry: Telemetry,
    ) -> Registry {
        Registry {
            current: ArcSwapOption::empty(),
            labels: sources.iter().map(|s| s.label.clone()).collect(),
            inner: Mutex::new(Inner {
                sources: sources
                    .into_iter()
                    .map(|s| SourceState {
                        label: s.label,
                        ..Default::default()
                    })
                    .collect(),
            }),
            last_error: Mutex::new(None),
            last_certificate_error: Mutex::new(None),
            generation: AtomicU64::new(0),
            reload_success: AtomicU64::new(0),
            reload_failure: AtomicU64::new(0),
            loaded_at: Mutex::new(None),
            draining: AtomicBool::new(false),
            settings,
            file_limits: FileLimits::default(),
            telemetry,
            ready: tokio::sync::watch::Sender::new(false),
            fresh: Mutex::new(Vec::new()),
            skip_files: false,
        }
    }

    /// The same, with the files it and its watchers read bounded by `limits`.
    pub(crate) fn with_file_limits(mut self, limits: FileLimits) -> Registry {
        self.file_limits = limits;
        self
    }

    /// The bounds on the files the registry and its watchers read.
    pub(crate) fn file_limits(&self) -> FileLimits {
        self.file_limits
    }

    /// A registry that reads no certificate file (`caFile`,
    /// `clientCertificate`): a plugin naming one is checked for everything
    /// else (its name, clashes, the pipelines naming it) but not built, so
    /// its texts are for checking only, never for serving.
    pub(crate) fn skipping_files(mut self) -> Registry {
        self.skip_files = true;
        self
    }

    /// The telemetry the plugins' stacks report to.
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Follows [`Registry::is_ready`]: the receiver sees each change.
    pub(crate) fn watch_ready(&self) -> tokio::sync::watch::Receiver<bool> {
        self.ready.subscribe()
    }

    fn publish_readiness(&self) {
        self.ready.send_if_modified(|ready| {
            let now = self.is_ready();
            std::mem::replace(ready, now) != now
        });
    }

    /// The current snapshot, `None` until a valid registry has been loaded.
    pub fn load(&self) -> Option<Arc<Snapshot>> {
        self.current.load_full()
    }

    /// Ready: a registry is loaded and the gateway is not draining.
    pub fn is_ready(&self) -> bool {
        self.current.load().is_some() && !self.draining.load(Ordering::Relaxed)
    }

    /// Serving, what `/readyz` and the gRPC health service both report:
    /// ready, and no registry entry names a server that answered it is no
    /// plugin (`Registry::refused_plugins`).
    pub(crate) fn is_serving(&self) -> bool {
        self.is_ready() && self.refused_plugins().is_empty()
    }

    /// `plugin "NAME" (hub H): WHY` for each plugin of the current snapshot
    /// whose own Initialize (for its registry file's hub) was answered with
    /// a refusal: UNIMPLEMENTED or an invalid declaration. Such an entry is
    /// a configuration error, as a bad registry is; a plugin merely out of
    /// reach is not one.
    pub(crate) fn refused_plugins(&self) -> Vec<String> {
        let Some(snapshot) = self.load() else {
            return Vec::new();
        };
        snapshot
            .plugins
            .iter()
            .filter_map(|p| match p.upstream.load_state(p.hub.as_deref()) {
                crate::upstream::Load::NotLoaded {
                    why: Some(why),
                    refused: true,
                } => Some(match &p.hub {
                    Some(hub) => format!("plugin \"{}\" (hub {hub}): {why}", p.name),
                    None => format!("plugin \"{}\": {why}", p.name),
                }),
                _ => None,
            })
            .collect()
    }

    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.publish_readiness();
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The last rejected change, until a later change loads.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.last_error).clone()
    }

    fn set_last_error(&self, error: Option<String>) {
        *lock(&self.last_error) = error;
        *lock(&self.last_certificate_error) = None;
    }

    /// Counts of successful and failed reloads.
    pub fn reload_counts(&self) -> (u64, u64) {
        (
            self.reload_success.load(Ordering::Relaxed),
            self.reload_failure.load(Ordering::Relaxed),
        )
    }

    /// The labels of the sources.
    pub(crate) fn source_labels(&self) -> Vec<String> {
        self.labels.clone()
    }

    /// The upstreams created by the reloads since the last call (the gateway
    /// sends each its own Initialize to learn its hooks).
    pub(crate) fn take_fresh_upstreams(&self) -> Vec<(Option<String>, Arc<Upstream>)> {
        std::mem::take(&mut *lock(&self.fresh))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Records that a source could not be read (missing file, API error).
    pub(crate) fn source_failed(&self, source: usize, message: String) {
        let mut inner = self.lock();
        let label = inner
            .sources
            .get(source)
            .map(|s| s.label.clone())
            .unwrap_or_default();
        self.set_last_error(Some(format!("{label}: {message}")));
        // Reading it again later must apply even identical text.
        if let Some(s) = inner.sources.get_mut(source) {
            s.last_text = None;
        }
        self.reload_failure.fetch_add(1, Ordering::Relaxed);
    }

    /// [`Registry::apply`] on the blocking pool, for the watchers: a large
    /// registry is parsed and planned there, and the runtime's workers go on
    /// serving calls meanwhile. Text that did not change is told at once,
    /// without a thread (the watchers poll).
    pub(crate) async fn apply_blocking(
        self: &Arc<Self>,
        source: usize,
        text: String,
    ) -> Result<Applied, ReloadError> {
        // The common case on every poll, text that did not change, needs no
        // thread (and never waits for another source's reload).
        let unchanged = match self.inner.try_lock() {
            Ok(inner) => {
                inner
                    .sources
                    .get(source)
                    .and_then(|s| s.last_text.as_deref())
                    == Some(text.as_str())
            }
            Err(_) => false,
        };
        if unchanged {
            return Ok(Applied::Unchanged);
        }
        let registry = self.clone();
        match tokio::task::spawn_blocking(move || registry.apply(source, &text)).await {
            Ok(applied) => applied,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // The runtime is shutting down: nothing was applied.
                Err(_) => Ok(Applied::Unchanged),
            },
        }
    }

    /// Applies new text for `source`: parse and validate it, plan the whole
    /// new registry with the other sources, and commit the plan only if it
    /// has no problem. On error nothing changes: the previous snapshot and
    /// every plugin's settings stay. Blocking: see [`Registry::apply_blocking`].
    pub(crate) fn apply(&self, source: usize, text: &str) -> Result<Applied, ReloadError> {
        self.apply_locked(&mut self.lock(), source, text)
    }

    /// [`Registry::apply`] under the registry's lock, held by the caller.
    fn apply_locked(
        &self,
        inner: &mut Inner,
        source: usize,
        text: &str,
    ) -> Result<Applied, ReloadError> {
        let label = inner
            .sources
            .get(source)
            .map(|s| s.label.clone())
            .unwrap_or_default();
        if inner
            .sources
            .get(source)
            .and_then(|s| s.last_text.as_deref())
            == Some(text)
        {
            return Ok(Applied::Unchanged);
        }
        if config::is_blank(text) {
            return Ok(Applied::Blank);
        }
        if let Some(s) = inner.sources.get_mut(source) {
            s.last_text = Some(text.to_string());
        }
        let mut files = FileCache::new(self.file_limits.max_bytes);
        let result = config::parse(text).and_then(|cfg| {
            let mut configs: Vec<Option<&Config>> =
                inner.sources.iter().map(|s| s.config.as_ref()).collect();
            configs[source] = Some(&cfg);
            let built = self.prepare(&configs, &inner.sources, &mut files)?;
            Ok((cfg, built))
        });
        match result {
            Ok((cfg, built)) => {
                inner.sources[source].config = Some(cfg);
                inner.sources[source].waiting_on.clear();
                Ok(self.commit_accepted(built))
            }
            Err(error) => {
                if let Some(s) = inner.sources.get_mut(source) {
                    s.waiting_on = files
                        .read
                        .into_iter()
                        .map(|(path, read)| (path, read.ok()))
                        .collect();
                }
                Err(self.record_rejected(label, error))
            }
        }
    }

    /// The certificate files refused registry texts wait on (see
    /// [`Registry::retry_waiting`]): the watcher watches them too.
    pub(crate) fn waiting_files(&self) -> BTreeSet<PathBuf> {
        self.lock()
            .sources
            .iter()
            .flat_map(|s| s.waiting_on.keys().map(PathBuf::from))
            .collect()
    }

    /// Plans again each source whose last text was refused while one of the
    /// certificate files its plan read now holds something else (a `caFile`
    /// written after the registry that names it): that text is applied as
    /// if it had just arrived. Files unchanged since the refusal are not
    /// retried, so a refusal is reported and counted once. Blocking (it
    /// reads files).
    pub(crate) fn retry_waiting(&self) -> Vec<Result<Applied, ReloadError>> {
        // One lock throughout: a newer text of the source (another watcher)
        // cannot land between the check and the retry and be overwritten.
        let mut inner = self.lock();
        let mut now = FileCache::new(self.file_limits.max_bytes);
        let mut results = Vec::new();
        for index in 0..inner.sources.len() {
            let s = &mut inner.sources[index];
            let changed = s
                .waiting_on
                .iter()
                .any(|(path, then)| now.read(path).ok() != *then);
            if changed && let Some(text) = s.last_text.take() {
                results.push(self.apply_locked(&mut inner, index, &text));
            }
        }
        results
    }

    /// [`Registry::retry_waiting`] on the blocking pool, for the watcher;
    /// no thread when no text waits (the common case, on every poll).
    pub(crate) async fn retry_waiting_blocking(
        self: &Arc<Self>,
    ) -> Vec<Result<Applied, ReloadError>> {
        if self.lock().sources.iter().all(|s| s.waiting_on.is_empty()) {
            return Vec::new();
        }
        let registry = self.clone();
        match tokio::task::spawn_blocking(move || registry.retry_waiting()).await {
            Ok(results) => results,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => Vec::new(),
            },
        }
    }

    /// Commits a plan that passed, and records the reload as a success.
    fn commit_accepted(&self, built: Built) -> Applied {
        self.set_last_error(None);
        let generation = self.commit(built);
        *lock(&self.loaded_at) = Some(SystemTime::now());
        self.reload_success.fetch_add(1, Ordering::Relaxed);
        Applied::Loaded(generation)
    }

    /// Records a rejected reload of `source_label` (the live snapshot
    /// stays): the last error and the failure count.
    fn record_rejected(&self, source_label: String, error: ConfigError) -> ReloadError {
        let err = ReloadError {
            source_label,
            error,
        };
        self.set_last_error(Some(err.to_string()));
        self.reload_failure.fetch_add(1, Ordering::Relaxed);
        err
    }

    /// [`Registry::refresh_certificates`] on the blocking pool, for the watcher.
    pub(crate) async fn refresh_certificates_blocking(
        self: &Arc<Self>,
        changed: Vec<PathBuf>,
    ) -> Result<Applied, ReloadError> {
        let registry = self.clone();
        match tokio::task::spawn_blocking(move || registry.refresh_certificates(&changed)).await {
            Ok(applied) => applied,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => Ok(Applied::Unchanged),
            },
        }
    }

    /// Reads the certificate files again after `changed` (paths as the
    /// registry names them) changed: the registry is planned anew from the
    /// sources' current configs, so every plugin whose TLS material differs
    /// gets a new upstream and the others keep theirs, and a plan that makes
    /// a new upstream is committed in one swap (calls in flight finish on
    /// the old connections). A file that is unreadable or holds no
    /// certificate is rejected as a bad registry change is: the previous
    /// snapshot and material stay, and the error is recorded and counted.
    /// Blocking (it reads files).
    pub(crate) fn refresh_certificates(&self, changed: &[PathBuf]) -> Result<Applied, ReloadError> {
        let inner = self.lock();
        let Some(current) = self.load() else {
            return Ok(Applied::Unchanged);
        };
        if affected_plugins(&current, changed).is_empty() {
            return Ok(Applied::Unchanged);
        }
        let configs: Vec<Option<&Config>> =
            inner.sources.iter().map(|s| s.config.as_ref()).collect();
        match self.prepare(
            &configs,
            &inner.sources,
            &mut FileCache::new(self.file_limits.max_bytes),
        ) {
            Ok(built) if built.fresh.is_empty() => {
                // The files hold what the live upstreams were built from
                // (a file put back after a bad rotation, or a rewrite of the
                // same bytes): nothing to swap.
                let mut last = lock(&self.last_error);
                let mut cert = lock(&self.last_certificate_error);
                if cert.is_some() && *cert == *last {
                    *last = None;
                    *cert = None;
                }
                Ok(Applied::Unchanged)
            }
            Ok(built) => Ok(self.commit_accepted(built)),
            Err(error) => {
                let err = self.record_rejected(CERTIFICATE_FILES.to_string(), error);
                // Remembered apart, so that files put right clear it (above).
                *lock(&self.last_certificate_error) = Some(err.to_string());
                Err(err)
            }
        }
    }

    /// Makes a plan live: the kept plugins take their new settings, then the
    /// snapshot is stored, in one swap. Returns its generation.
    fn commit(&self, built: Built) -> u64 {
        let Built {
            mut snapshot,
            fresh,
            kept,
            removed,
        } = built;
        tracing::debug!(
            plugins = snapshot.plugins.len(),
            new_upstreams = fresh.len(),
            kept_upstreams = kept.len(),
            removed,
            "registry committed"
        );
        for (upstream, policy, hubs) in kept {
            upstream.update_policy(&policy);
            upstream.set_callers(&hubs);
        }
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        snapshot.generation = generation;
        self.current.store(Some(Arc::new(snapshot)));
        self.publish_readiness();
        lock(&self.fresh).extend(fresh);
        generation
    }

    /// The registry combining the sources' `configs`, planned against the
    /// live snapshot ([`plan::plan`], pure), then built ([`build::build`]:
    /// the certificate files read through `files`, the upstreams made or
    /// kept). Changes nothing live: that is [`Registry::commit`].
    fn prepare(
        &self,
        configs: &[Option<&Config>],
        sources: &[SourceState],
        files: &mut FileCache,
    ) -> Result<Built, ConfigError> {
        let live = self.current.load_full();
        let labels: Vec<&str> = sources.iter().map(|s| s.label.as_str()).collect();
        let plan = plan::plan(configs, &labels, live.as_deref());
        build::build(self, plan, live.as_deref(), files)
    }
}

impl RegistryState for Registry {
    fn circuits(&self) -> Vec<(String, Option<String>, BreakerState)> {
        self.load()
            .iter()
            .flat_map(|s| s.plugins.iter())
            .map(|p| (p.name.clone(), p.hub.clone(), p.upstream.circuit().0))
            .collect()
    }

    fn loaded(&self) -> Vec<(String, Option<String>, bool)> {
        self.load()
            .iter()
            .flat_map(|s| s.plugins.iter())
            .map(|p| {
                let load = p.upstream.load_state(p.hub.as_deref());
                (
                    p.name.clone(),
                    p.hub.clone(),
                    matches!(load, crate::upstream::Load::Loaded { .. }),
                )
            })
            .collect()
    }

    fn reload_counts(&self) -> (u64, u64) {
        Registry::reload_counts(self)
    }

    fn generation(&self) -> u64 {
        self.load().map_or(0, |s| s.generation)
    }

    fn last_reload(&self) -> LastReload {
        LastReload {
            successful: self.last_error().is_none(),
            success_at: *lock(&self.loaded_at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(n: usize) -> Registry {
        Registry::new(
            (0..n)
                .map(|i| SourceInfo {
                    label: format!("file{i}"),
                })
                .collect(),
            ChannelSettings::default(),
        )
    }

    const SHARED: &str = "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    insecure: true\n  - name: b\n    endpoint: 127.0.0.1:7002\n    insecure: true\n    hubs: [hub-b]\n";
    const HUB_A: &str = "hub: hub-a\nplugins:\n  - name: mine\n    endpoint: 127.0.0.1:7003\n    insecure: true\npipelines:\n  - name: p\n    plugins: [mine, a]\n";

    #[tokio::test]
    async fn hub_scopes_resolve_own_first_then_shared() {
        let r = registry(2);
        r.apply(0, SHARED).expect("shared");
        r.apply(1, HUB_A).expect("hub-a");
        let snap = r.load().expect("loaded");
        assert_eq!(snap.generation, 2);
        assert!(matches!(
            snap.resolve(Some("hub-a"), "mine"),
            Ok(Target::Plugin(_))
        ));
        assert_eq!(
            snap.resolve(Some("hub-a"), "p").map(|t| t.members().len()),
            Ok(2)
        );
        assert!(snap.resolve(Some("hub-a"), "a").is_ok());
        assert_eq!(
            snap.resolve(Some("hub-b"), "mine").map(|_| ()),
            Err(ResolveError::NotFound {
                name: "mine".into(),
                hub: Some("hub-b".into())
            })
        );
        assert!(matches!(
            snap.resolve(Some("hub-a"), "b"),
            Err(ResolveError::PermissionDenied { .. })
        ));
        assert!(snap.resolve(Some("hub-b"), "b").is_ok());
        // No hub identity: only shared names, and `hubs:` plugins are denied.
        assert!(matches!(
            snap.resolve(None, "mine"),
            Err(ResolveError::NotFound { .. })
        ));
        assert!(matches!(
            snap.resolve(None, "b"),
            Err(ResolveError::PermissionDenied { .. })
        ));
    }

    #[tokio::test]
    async fn a_bad_change_keeps_the_previous_snapshot_and_is_recorded() {
        let r = registry(1);
        r.apply(0, SHARED).expect("ok");
        let before = r.load().expect("loaded");
        let err = r
            .apply(0, "plugins:\n  - name: a\n    endpoint: x\n")
            .expect_err("bad");
        assert!(err.to_string().starts_with("file0: "), "{err}");
        assert!(Arc::ptr_eq(&before, &r.load().expect("still loaded")));
        assert!(r.last_error().is_some());
        assert_eq!(r.reload_counts(), (1, 1));
        // Blank text never replaces a registry; identical text is a no-op.
        assert_eq!(r.apply(0, "\n").ok(), Some(Applied::Blank));
        assert_eq!(r.apply(0, SHARED).ok(), Some(Applied::Loaded(2)));
        assert_eq!(r.apply(0, SHARED).ok(), Some(Applied::Unchanged));
        assert!(r.last_error().is_none());
    }

    #[tokio::test]
    async fn unchanged_endpoints_keep_their_upstream() {
        let r = registry(1);
        r.apply(0, SHARED).expect("ok");
        let s1 = r.load().expect("loaded");
        let changed = SHARED.replace("127.0.0.1:7002", "127.0.0.1:7009");
        r.apply(0, &changed).expect("ok");
        let s2 = r.load().expect("loaded");
        let up = |s: &Snapshot, n: &str| match s.resolve(Some("hub-b"), n) {
            Ok(Target::Plugin(p)) => p.upstream.clone(),
            other => panic!("{other:?}"),
        };
        assert!(Arc::ptr_eq(&up(&s1, "a"), &up(&s2, "a")));
        assert!(!Arc::ptr_eq(&up(&s1, "b"), &up(&s2, "b")));
    }

    #[tokio::test]
    async fn clashes_across_files_and_unknown_members_are_rejected() {
        let r = registry(2);
        r.apply(0, SHARED).expect("ok");
        let err = r.apply(1, SHARED).expect_err("clash");
        assert!(
            err.to_string()
                .contains("\"a\" is already defined by file0 for the same hub"),
            "{err}"
        );
        let err = r
            .apply(
                1,
                "hub: hub-a\npipelines:\n  - name: p\n    plugins: [ghost]\n",
            )
            .expect_err("unknown member");
        assert!(
            err.to_string()
                .contains("\"ghost\" is not a plugin of hub hub-a or a shared plugin"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn a_large_registry_is_parsed_and_planned_off_the_runtime() {
        let mut text = String::from("plugins:\n");
        for i in 0..2_000 {
            text.push_str(&format!(
                "  - name: p{i}\n    endpoint: 127.0.0.1:{}\n    insecure: true\n",
                1_000 + i
            ));
        }
        let r = Arc::new(registry(1));
        // This test's runtime has one thread: a parse on it would let nothing
        // else run until it is done.
        let ticks = Arc::new(AtomicU64::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    ticks.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            })
        };
        tokio::task::yield_now().await;
        let before = ticks.load(Ordering::Relaxed);
        assert_eq!(
            r.apply_blocking(0, text).await.expect("valid"),
            Applied::Loaded(1)
        );
        ticker.abort();
        assert!(
            ticks.load(Ordering::Relaxed) > before,
            "the runtime was held during the reload"
        );
        assert_eq!(r.load().expect("loaded").plugins.len(), 2_000);
    }

    #[tokio::test]
    async fn a_change_rejected_across_files_leaves_the_kept_plugins_settings() {
        let r = registry(2);
        let with = |failures: u32, max: u32, per_second: u32| {
            format!(
                "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    insecure: true\n    maxConcurrentCalls: {max}\n    circuitBreaker:\n      consecutiveFailures: {failures}\n    retryBudget:\n      minPerSecond: {per_second}\n"
            )
        };
        r.apply(0, &with(7, 4, 3)).expect("ok");
        r.apply(
            1,
            "plugins:\n  - name: b\n    endpoint: 127.0.0.1:7002\n    insecure: true\n",
        )
        .expect("ok");
        let settings = |r: &Registry| match r.load().expect("loaded").resolve(None, "a") {
            Ok(Target::Plugin(p)) => p.upstream.kept_settings(),
            other => panic!("{other:?}"),
        };
        let before = settings(&r);
        assert_eq!(before.0, 4);
        // New settings for "a", and a name the other file defines.
        let clash = format!(
            "{}  - name: b\n    endpoint: 127.0.0.1:7003\n    insecure: true\n",
            with(2, 9, 50)
        );
        let err = r.apply(0, &clash).expect_err("clash");
        assert!(err.to_string().contains("already defined"), "{err}");
        assert_eq!(settings(&r), before);
        // Accepted, the same settings do apply to the kept upstream.
        r.apply(0, &with(2, 9, 50)).expect("ok");
        let after = settings(&r);
        assert_eq!(after.0, 9);
        assert_eq!(after.1.consecutive_failures, 2);
        assert_eq!(after.2.min_per_second, 50);
    }

    fn plugin_named<'a>(s: &'a Snapshot, name: &str) -> &'a Arc<Plugin> {
        s.plugins.iter().find(|p| p.name == name).expect(name)
    }

    #[tokio::test]
    async fn the_plugins_affected_by_a_file_are_those_built_from_it() {
        use rollout_plugin_sdk::test_certs::TestCa;
        let dir = tempfile::tempdir().expect("dir");
        let ca = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, TestCa::new(name).expect("ca").pem()).expect("write");
            path
        };
        let (one, two) = (ca("one.crt"), ca("two.crt"));
        let clients = TestCa::new("clients").expect("ca");
        let me = clients.leaf("gateway").expect("leaf");
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        std::fs::write(&cert, &me.cert).expect("write");
        std::fs::write(&key, &me.key).expect("write");
        let r = registry(2);
        r.apply(
            0,
            &format!(
                "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    caCertificate:\n      caFile: {}\n  - name: b\n    endpoint: 127.0.0.1:7002\n    caCertificate:\n      caFile: {}\n  - name: c\n    endpoint: 127.0.0.1:7003\n    insecure: true\n",
                one.display(),
                two.display()
            ),
        )
        .expect("file 0");
        r.apply(
            1,
            &format!(
                "hub: hub-a\nclientCertificate:\n  certFile: {}\n  keyFile: {}\nplugins:\n  - name: d\n    endpoint: 127.0.0.1:7004\n    caCertificate:\n      caFile: {}\n",
                cert.display(),
                key.display(),
                one.display()
            ),
        )
        .expect("file 1");
        let snap = r.load().expect("loaded");
        assert_eq!(
            snap.certificate_files(),
            BTreeSet::from([one.clone(), two.clone(), cert.clone(), key.clone()])
        );
        let names = |changed: &[PathBuf]| -> Vec<String> {
            affected_plugins(&snap, changed)
                .iter()
                .map(|p| p.name.clone())
                .collect()
        };
        assert_eq!(names(std::slice::from_ref(&one)), vec!["a", "d"]);
        assert_eq!(names(std::slice::from_ref(&two)), vec!["b"]);
        assert_eq!(names(std::slice::from_ref(&key)), vec!["d"]);
        assert_eq!(names(&[dir.path().join("other.crt")]), Vec::<String>::new());
        assert_eq!(names(&[]), Vec::<String>::new());
    }

    /// A CA file named by 200 plugins is read, held and parsed once: one
    /// copy of its bytes, one TLS configuration.
    #[tokio::test]
    async fn a_ca_file_named_by_many_plugins_is_held_and_parsed_once() {
        use rollout_plugin_sdk::test_certs::TestCa;
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("ca.crt");
        std::fs::write(&path, TestCa::new("ca").expect("ca").pem()).expect("write");
        let mut text = String::from("plugins:\n");
        for i in 0..200 {
            text += &format!(
                "  - name: p{i}\n    endpoint: 127.0.0.1:{}\n    caCertificate:\n      caFile: {}\n",
                20000 + i,
                path.display()
            );
        }
        let r = registry(1);
        r.apply(0, &text).expect("valid");
        let snap = r.load().expect("loaded");
        let bundles: Vec<&crate::upstream::CaBundle> = snap
            .plugins
            .iter()
            .filter_map(|p| p.upstream.key().ca_bundle.as_ref())
            .collect();
        assert_eq!(bundles.len(), 200);
        assert!(
            bundles.iter().all(|b| Arc::ptr_eq(&b.pem, &bundles[0].pem)),
            "one copy of the bytes"
        );
        assert_eq!(r.settings.tls_configs.len(), 1, "one TLS configuration");
    }

    #[tokio::test]
    async fn a_changed_ca_file_rebuilds_only_its_plugins_and_a_bad_one_keeps_the_previous() {
        use rollout_plugin_sdk::test_certs::TestCa;
        let dir = tempfile::tempdir().expect("dir");
        let (one, two) = (dir.path().join("one.crt"), dir.path().join("two.crt"));
        let first = TestCa::new("first").expect("ca").pem();
        std::fs::write(&one, &first).expect("write");
        std::fs::write(&two, TestCa::new("other").expect("ca").pem()).expect("write");
        let r = registry(1);
        r.apply(
            0,
            &format!(
                "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    caCertificate:\n      caFile: {}\n  - name: b\n    endpoint: 127.0.0.1:7002\n    caCertificate:\n      caFile: {}\n",
                one.display(),
                two.display()
            ),
        )
        .expect("valid");
        let s1 = r.load().expect("loaded");
        let _ = r.take_fresh_upstreams();
        // Same bytes: nothing to swap.
        assert_eq!(
            r.refresh_certificates(std::slice::from_ref(&one)).ok(),
            Some(Applied::Unchanged)
        );
        // A new CA in the file: a new upstream for "a" alone.
        std::fs::write(&one, TestCa::new("second").expect("ca").pem()).expect("write");
        assert_eq!(
            r.refresh_certificates(std::slice::from_ref(&one)).ok(),
            Some(Applied::Loaded(2))
        );
        let s2 = r.load().expect("loaded");
        assert!(!Arc::ptr_eq(
            &plugin_named(&s1, "a").upstream,
            &plugin_named(&s2, "a").upstream
        ));
        assert!(Arc::ptr_eq(
            &plugin_named(&s1, "b").upstream,
            &plugin_named(&s2, "b").upstream
        ));
        assert_eq!(r.take_fresh_upstreams().len(), 1);
        // A file without a certificate, then no file: rejected, naming the
        // file, and the previous snapshot stays.
        std::fs::write(&one, "not a certificate\n").expect("write");
        let err = r
            .refresh_certificates(std::slice::from_ref(&one))
            .expect_err("no certificate");
        let text = err.to_string();
        assert!(
            text.contains("plugins[0] (a).caCertificate.caFile")
                && text.contains(&format!("{} holds no PEM CERTIFICATE", one.display())),
            "{text}"
        );
        std::fs::remove_file(&one).expect("remove");
        let err = r
            .refresh_certificates(std::slice::from_ref(&one))
            .expect_err("no file");
        assert!(
            err.to_string()
                .contains(&format!("cannot read {}", one.display())),
            "{err}"
        );
        assert!(Arc::ptr_eq(&s2, &r.load().expect("loaded")));
        assert_eq!(r.last_error(), Some(err.to_string()));
        assert_eq!(r.reload_counts(), (2, 2));
        // The file put back as the live upstream has it clears the error.
        std::fs::write(&one, s2_pem(&s2, "a")).expect("write");
        assert_eq!(
            r.refresh_certificates(std::slice::from_ref(&one)).ok(),
            Some(Applied::Unchanged)
        );
        assert_eq!(r.last_error(), None);
    }

    fn s2_pem(s: &Snapshot, name: &str) -> Vec<u8> {
        plugin_named(s, name)
            .upstream
            .key()
            .ca_bundle
            .as_ref()
            .expect("tls")
            .pem
            .to_vec()
    }
}
