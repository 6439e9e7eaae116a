//! The reload engine: a change to a source (new text, a source that could
//! not be read, certificate files that changed) planned with every other
//! source ([`super::plan`]), built ([`super::build`]), and committed only
//! without problems, in one swap; a refused change changes nothing live and
//! is recorded ([`super::record`]). Each change of what the metrics export
//! is published to them as a value.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rollout_policies::lock;

use crate::config::{self, ConfigError, Problem};

use super::Registry;
use super::build::{self, Built, FileCache, KeptUpstream};
use super::plan;
use super::snapshot::{Snapshot, affected_plugins};
use super::sources::{SourceConfig, Sources};

/// The label of certificate reloads in messages (they belong to no source).
const CERTIFICATE_FILES: &str = "certificate files";

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

/// Runs `work` on the blocking pool; `shut_down` when the runtime is
/// shutting down before it ran (nothing was applied).
async fn on_blocking_pool<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
    shut_down: T,
) -> T {
    match tokio::task::spawn_blocking(work).await {
        Ok(done) => done,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => shut_down,
        },
    }
}

impl Registry {
    /// Records that the source named `source` could not be read (missing
    /// file, API error).
    pub(crate) fn source_failed(&self, source: &str, message: String) {
        let mut sources = self.lock_sources();
        self.record.refused(format!("{source}: {message}"));
        // Reading it again later must apply even identical text.
        if let Some(s) = sources.get_mut(source) {
            s.last_text = None;
        }
        self.publish_state();
    }

    /// [`Registry::apply`] on the blocking pool, for the watchers: a large
    /// registry is parsed and planned there, and the runtime's workers go on
    /// serving calls meanwhile. Text that did not change is told at once,
    /// without a thread (the watchers poll).
    pub(crate) async fn apply_blocking(
        self: &Arc<Self>,
        source: &str,
        text: String,
    ) -> Result<Applied, ReloadError> {
        // The common case on every poll, text that did not change, needs no
        // thread (and never waits for another source's reload).
        let unchanged = match self.sources.try_lock() {
            Ok(sources) => {
                sources.get(source).and_then(|s| s.last_text.as_deref()) == Some(text.as_str())
            }
            Err(_) => false,
        };
        if unchanged {
            return Ok(Applied::Unchanged);
        }
        let registry = self.clone();
        let source = source.to_string();
        on_blocking_pool(
            move || registry.apply(&source, &text),
            Ok(Applied::Unchanged),
        )
        .await
    }

    /// Applies new text for the source named `source`: parse and validate
    /// it, plan the whole new registry with the other sources, and commit
    /// the plan only if it has no problem. On error nothing changes: the
    /// previous snapshot and every plugin's settings stay. Blocking: see
    /// [`Registry::apply_blocking`].
    pub(crate) fn apply(&self, source: &str, text: &str) -> Result<Applied, ReloadError> {
        self.apply_locked(&mut self.lock_sources(), source, text)
    }

    /// [`Registry::apply`] under the registry's lock, held by the caller.
    fn apply_locked(
        &self,
        sources: &mut Sources,
        source: &str,
        text: &str,
    ) -> Result<Applied, ReloadError> {
        let Some(state) = sources.get_mut(source) else {
            return Err(self.record_rejected(source, unknown_source()));
        };
        if state.last_text.as_deref() == Some(text) {
            return Ok(Applied::Unchanged);
        }
        if config::is_blank(text) {
            return Ok(Applied::Blank);
        }
        state.last_text = Some(text.to_string());
        let mut files = FileCache::new(self.file_limits.max_bytes);
        let result = config::parse(text).and_then(|cfg| {
            let built = self.prepare(&sources.configs_with(source, &cfg), &mut files)?;
            Ok((cfg, built))
        });
        let Some(state) = sources.get_mut(source) else {
            return Err(self.record_rejected(source, unknown_source()));
        };
        match result {
            Ok((cfg, built)) => {
                state.config = Some(cfg);
                state.waiting_on.clear();
                Ok(self.commit_accepted(built))
            }
            Err(error) => {
                state.waiting_on = files
                    .read
                    .into_iter()
                    .map(|(path, read)| (path, read.ok()))
                    .collect();
                Err(self.record_rejected(source, error))
            }
        }
    }

    /// The certificate files refused registry texts wait on (see
    /// [`Registry::retry_waiting`]): the watcher watches them too.
    pub(crate) fn waiting_files(&self) -> BTreeSet<PathBuf> {
        self.lock_sources()
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
        let mut sources = self.lock_sources();
        let mut now = FileCache::new(self.file_limits.max_bytes);
        let mut results = Vec::new();
        for label in sources.waiting() {
            let Some(s) = sources.get_mut(&label) else {
                continue;
            };
            let changed = s
                .waiting_on
                .iter()
                .any(|(path, then)| now.read(path).ok() != *then);
            if changed && let Some(text) = s.last_text.take() {
                results.push(self.apply_locked(&mut sources, &label, &text));
            }
        }
        results
    }

    /// [`Registry::retry_waiting`] on the blocking pool, for the watcher;
    /// no thread when no text waits (the common case, on every poll).
    pub(crate) async fn retry_waiting_blocking(
        self: &Arc<Self>,
    ) -> Vec<Result<Applied, ReloadError>> {
        if self.lock_sources().waiting().is_empty() {
            return Vec::new();
        }
        let registry = self.clone();
        on_blocking_pool(move || registry.retry_waiting(), Vec::new()).await
    }

    /// Commits a plan that passed, and records the reload as a success.
    fn commit_accepted(&self, built: Built) -> Applied {
        self.record.loaded();
        let generation = self.commit(built);
        self.publish_state();
        Applied::Loaded(generation)
    }

    /// Records a rejected reload of `source_label` (the live snapshot
    /// stays): the last error and the failure count.
    fn record_rejected(&self, source_label: &str, error: ConfigError) -> ReloadError {
        let err = ReloadError {
            source_label: source_label.to_string(),
            error,
        };
        self.record.refused(err.to_string());
        self.publish_state();
        err
    }

    /// [`Registry::refresh_certificates`] on the blocking pool, for the watcher.
    pub(crate) async fn refresh_certificates_blocking(
        self: &Arc<Self>,
        changed: Vec<PathBuf>,
    ) -> Result<Applied, ReloadError> {
        let registry = self.clone();
        on_blocking_pool(
            move || registry.refresh_certificates(&changed),
            Ok(Applied::Unchanged),
        )
        .await
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
        let sources = self.lock_sources();
        let Some(current) = self.load() else {
            return Ok(Applied::Unchanged);
        };
        if affected_plugins(&current, changed).is_empty() {
            return Ok(Applied::Unchanged);
        }
        let mut files = FileCache::new(self.file_limits.max_bytes);
        match self.prepare(&sources.configs(), &mut files) {
            Ok(built) if built.fresh.is_empty() => {
                // The files hold what the live upstreams were built from
                // (a file put back after a bad rotation, or a rewrite of the
                // same bytes): nothing to swap.
                self.record.certificates_restored();
                self.publish_state();
                Ok(Applied::Unchanged)
            }
            Ok(built) => Ok(self.commit_accepted(built)),
            Err(error) => {
                let err = ReloadError {
                    source_label: CERTIFICATE_FILES.to_string(),
                    error,
                };
                self.record.certificates_refused(err.to_string());
                self.publish_state();
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
        for KeptUpstream {
            upstream,
            policy,
            callers,
        } in kept
        {
            upstream.update_policy(&policy);
            upstream.set_callers(&callers);
        }
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        snapshot.generation = generation;
        self.current.store(Some(Arc::new(snapshot)));
        self.readiness.publish(true);
        lock(&self.fresh).extend(fresh);
        generation
    }

    /// The registry combining the `sources`' configs, planned against the
    /// live snapshot ([`plan::plan`], pure), then built ([`build::build`]:
    /// the certificate files read through `files`, the upstreams made or
    /// kept). Changes nothing live: that is [`Registry::commit`].
    fn prepare(
        &self,
        sources: &[SourceConfig<'_>],
        files: &mut FileCache,
    ) -> Result<Built, ConfigError> {
        let live: Option<Arc<Snapshot>> = self.current.load_full();
        let plan = plan::plan(sources, live.as_deref());
        build::build(&self.build, plan, live.as_deref(), files)
    }
}

/// The problem of a change to a source the registry does not have.
fn unknown_source() -> ConfigError {
    ConfigError {
        problems: vec![Problem {
            path: String::new(),
            message: "is not a source of this registry".into(),
        }],
    }
}
