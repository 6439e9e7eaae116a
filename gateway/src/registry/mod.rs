//! The plugin registry: an immutable [`Snapshot`] behind an `ArcSwap`.
//!
//! Each registry source (a `--config` file, a watched ConfigMap), addressed
//! by its name, holds its last valid config ([`sources`]). A change to a
//! source is parsed and validated on its own, then every source is
//! combined into a new snapshot (hub scopes, name clashes across files,
//! pipelines naming shared plugins) in three steps ([`reload`]): a pure plan
//! ([`plan`]: what is added, updated, removed, and what is wrong, from the
//! configs and the live snapshot alone), a build ([`build`]: certificate
//! files read, each plugin's upstream kept when its endpoint and TLS
//! material did not change, else made anew), and only a build without
//! problems is committed — the kept plugins take their new concurrency
//! bound, breaker and budget settings, and the snapshot is stored in one
//! atomic swap. A change that fails changes nothing: the previous snapshot
//! and every plugin's settings stay, and the failure is recorded for
//! `/debug/plugins` and counted ([`record`]). Each change is published to
//! the metrics as a value; they never read the registry. Calls load the
//! snapshot once and finish on it, whatever reloads happen meanwhile.
//! Readiness follows the snapshot and the drain ([`readiness`]).
//!
//! Parsing and planning take time in proportion to the registry (a 50 MB
//! registry takes a good fraction of a second): [`Registry::apply_blocking`]
//! does them on the blocking pool, never on the runtime's workers, and no
//! lock that the call path or the admin endpoints take is held meanwhile.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use rollout_policies::lock;

mod build;
mod plan;
mod readiness;
mod record;
mod reload;
mod snapshot;
mod sources;

use build::BuildSettings;
pub(crate) use build::FreshUpstream;
use readiness::Readiness;
use record::ReloadRecord;
pub(crate) use reload::Applied;
pub use snapshot::{Plugin, Snapshot, Target};
pub use sources::SourceInfo;
use sources::Sources;

use crate::files::FileLimits;
pub use crate::telemetry::ReloadCounts;
use crate::telemetry::Telemetry;
use crate::upstream::ChannelSettings;

/// The registry shared by the gRPC service, the admin endpoints and the watchers.
#[derive(Debug)]
pub struct Registry {
    current: ArcSwapOption<Snapshot>,
    /// Held while a change is checked, planned and committed (the sources'
    /// state); never by the call path or the admin endpoints.
    sources: Mutex<Sources>,
    /// The sources' names, in order, for listing without the lock.
    labels: Vec<String>,
    record: ReloadRecord,
    generation: AtomicU64,
    readiness: Readiness,
    /// What every build is made with.
    build: BuildSettings,
    /// Bounds on the certificate files plans read.
    file_limits: FileLimits,
    /// Upstreams created by the last reload, whose own Initialize is pending.
    fresh: Mutex<Vec<FreshUpstream>>,
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
        let sources = Sources::new(sources);
        Registry {
            current: ArcSwapOption::empty(),
            labels: sources.labels(),
            sources: Mutex::new(sources),
            record: ReloadRecord::default(),
            generation: AtomicU64::new(0),
            readiness: Readiness::default(),
            build: BuildSettings {
                channel: settings,
                telemetry,
                skip_files: false,
            },
            file_limits: FileLimits::default(),
            fresh: Mutex::new(Vec::new()),
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
        self.build.skip_files = true;
        self
    }

    /// The telemetry the plugins' stacks report to.
    pub fn telemetry(&self) -> &Telemetry {
        &self.build.telemetry
    }

    /// The current snapshot, `None` until a valid registry has been loaded.
    pub fn load(&self) -> Option<Arc<Snapshot>> {
        self.current.load_full()
    }

    /// Ready: a registry is loaded and the gateway is not draining.
    pub fn is_ready(&self) -> bool {
        self.readiness.is_ready(self.current.load().is_some())
    }

    /// Follows [`Registry::is_ready`]: the receiver sees each change.
    pub(crate) fn watch_ready(&self) -> tokio::sync::watch::Receiver<bool> {
        self.readiness.watch()
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
        self.load()
            .map(|snapshot| readiness::refused_plugins(&snapshot))
            .unwrap_or_default()
    }

    pub fn set_draining(&self) {
        self.readiness.set_draining();
        self.readiness.publish(self.current.load().is_some());
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.readiness.is_draining()
    }

    /// The last rejected change, until a later change loads.
    pub fn last_error(&self) -> Option<String> {
        self.record.last_error()
    }

    /// Counts of successful and failed reloads.
    pub fn reload_counts(&self) -> ReloadCounts {
        self.record.counts()
    }

    /// The names of the sources, in order.
    pub(crate) fn source_labels(&self) -> Vec<String> {
        self.labels.clone()
    }

    /// The upstreams created by the reloads since the last call (the gateway
    /// sends each its own Initialize to learn its hooks).
    pub(crate) fn take_fresh_upstreams(&self) -> Vec<FreshUpstream> {
        std::mem::take(&mut *lock(&self.fresh))
    }

    fn lock_sources(&self) -> std::sync::MutexGuard<'_, Sources> {
        lock(&self.sources)
    }

    /// Hands the metrics what they export of the registry now: the record
    /// of reloads and the live snapshot's plugins. Called at each change
    /// of either, under the sources' lock (so in order).
    fn publish_state(&self) {
        let live = self.current.load();
        let state = self.record.state(live.as_deref());
        self.build.telemetry.metrics.publish(state);
    }
}

#[cfg(test)]
mod tests;
