//! Reloading registry files, and the certificate files the live registry
//! names, when they change.
//!
//! Each file's parent directory is watched (not the file itself): the kubelet
//! updates a mounted ConfigMap or Secret by swapping the `..data` symlink,
//! which a watch on the old file would never see. Events are debounced, then
//! every registry file is read again and applied (the registry ignores text
//! that did not change), and every certificate file of the live snapshot
//! (`caFile`, `clientCertificate` files) is read again: those whose content
//! changed go to [`Registry::refresh_certificates`]. The set of certificate
//! files follows the snapshot, and their directories are watched as they
//! appear. A registry text refused because of a certificate file (a
//! `caFile` not written yet) waits on the files its plan read: they are
//! watched too, and the text is planned again once one of them changes. A
//! slow poll backs the watch up, for file systems that send no events.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::ffi::OsString;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::files::{self, FileLimits, Stamp};
use crate::registry::{Applied, Registry, SourceInfo};

/// How long to wait after an event for the rest of a burst (an editor's save,
/// the kubelet's swap) before reading.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// What the watcher knows of one registry file: the stamp of its last
/// read, and the last read error (not repeated on every poll).
#[derive(Debug, Default)]
pub(crate) struct FileState {
    stamp: Option<Stamp>,
    last_read_error: Option<String>,
}

/// Reads one registry file into the registry, if it changed since the last
/// read ([`files::read`]: bounded, off the worker thread), parsing and
/// planning off the runtime ([`Registry::apply_blocking`]: a large registry
/// must not stall the calls). Returns whether a new snapshot was loaded.
pub(crate) async fn reload_file(
    registry: &Arc<Registry>,
    path: &Path,
    state: &mut FileState,
) -> bool {
    let source = SourceInfo::file(path).label;
    let read = files::read(path, registry.file_limits(), state.stamp).await;
    let text = match read.map(|r| r.map(|(bytes, stamp)| (String::from_utf8(bytes), stamp))) {
        Ok(None) => return false,
        Ok(Some((Ok(text), stamp))) => {
            state.last_read_error = None;
            state.stamp = Some(stamp);
            text
        }
        Ok(Some((Err(_), stamp))) => {
            state.stamp = Some(stamp);
            let message = format!("{}: not UTF-8 text", path.display());
            report_read_error(registry, &source, path, state, message);
            return false;
        }
        Err(error) => {
            // Read again next time, whatever the stamp.
            state.stamp = None;
            let message = if error.is_not_found() {
                format!("cannot read: {error}")
            } else {
                error.to_string()
            };
            report_read_error(registry, &source, path, state, message);
            return false;
        }
    };
    match registry.apply_blocking(&source, text).await {
        Ok(Applied::Loaded(generation)) => {
            tracing::info!(path = %path.display(), generation, "registry loaded");
            true
        }
        Ok(Applied::Unchanged) => false,
        Ok(Applied::Blank) => {
            tracing::warn!(path = %path.display(), "registry file is empty; keeping the loaded registry");
            false
        }
        Err(error) => {
            tracing::error!(path = %path.display(), %error, "registry reload rejected; keeping the loaded registry");
            false
        }
    }
}

/// Records a registry file that could not be read, as a refused change
/// (the loaded registry stays), once per distinct error.
fn report_read_error(
    registry: &Registry,
    source: &str,
    path: &Path,
    state: &mut FileState,
    message: String,
) {
    if state.last_read_error.as_deref() != Some(&message) {
        tracing::warn!(path = %path.display(), error = %message, "cannot read registry file; keeping the loaded registry");
        registry.source_failed(source, message.clone());
        state.last_read_error = Some(message);
    }
}

/// What the certificate files held when last read: their stamp and bytes,
/// or why they could not be read. A file counts as changed when this
/// differs; a file whose stamp did not change is not read again.
#[derive(Debug, Default)]
pub(crate) struct CertificateFiles {
    seen: BTreeMap<PathBuf, Result<(Stamp, Vec<u8>), String>>,
}

impl CertificateFiles {
    /// Reads `wanted` (the live snapshot's certificate files) and returns
    /// those whose content changed since the last read, or that are new
    /// here (the registry then finds whether they differ from what its
    /// upstreams were built from). Forgets files no longer wanted.
    pub(crate) async fn changed(
        &mut self,
        wanted: &BTreeSet<PathBuf>,
        limits: FileLimits,
    ) -> Vec<PathBuf> {
        self.seen.retain(|path, _| wanted.contains(path));
        let mut changed = Vec::new();
        for path in wanted {
            let before = self.seen.get(path);
            let stamp = before.and_then(|b| b.as_ref().ok()).map(|(s, _)| *s);
            let now = match files::read(path, limits, stamp).await {
                Ok(None) => continue,
                Ok(Some((bytes, stamp))) => Ok((stamp, bytes)),
                Err(e) => Err(e.to_string()),
            };
            let same = match (before, &now) {
                (Some(Ok((_, old))), Ok((_, new))) => old == new,
                (Some(Err(old)), Err(new)) => old == new,
                _ => false,
            };
            self.seen.insert(path.clone(), now);
            if !same {
                changed.push(path.clone());
            }
        }
        changed
    }
}

/// Reads `wanted`, the live snapshot's certificate files, and has the
/// registry rebuild the plugins whose files changed. Returns whether a new
/// snapshot was loaded.
pub(crate) async fn reload_certificates(
    registry: &Arc<Registry>,
    files: &mut CertificateFiles,
    wanted: &BTreeSet<PathBuf>,
) -> bool {
    let changed = files.changed(wanted, registry.file_limits()).await;
    if changed.is_empty() {
        return false;
    }
    let paths: Vec<String> = changed.iter().map(|p| p.display().to_string()).collect();
    match registry.refresh_certificates_blocking(changed).await {
        Ok(Applied::Loaded(generation)) => {
            tracing::info!(files = ?paths, generation, "certificate files reloaded");
            true
        }
        Ok(_) => false,
        Err(error) => {
            tracing::error!(files = ?paths, %error, "certificate reload rejected; keeping the previous certificates");
            false
        }
    }
}

/// Plans again the refused registry texts whose certificate files changed
/// since ([`Registry::retry_waiting`]). Returns whether a new snapshot was
/// loaded.
pub(crate) async fn retry_waiting(registry: &Arc<Registry>) -> bool {
    let mut loaded = false;
    for result in registry.retry_waiting_blocking().await {
        match result {
            Ok(Applied::Loaded(generation)) => {
                tracing::info!(
                    generation,
                    "registry loaded: a certificate file it named has changed"
                );
                loaded = true;
            }
            Ok(_) => {}
            Err(error) => {
                tracing::error!(%error, "registry reload rejected; keeping the loaded registry");
            }
        }
    }
    loaded
}

/// Whether an event can have changed one of the files: a change of content or
/// of a directory entry (not a read: the gateway's own reads would otherwise
/// wake it again and again), on a watched file or on one of the kubelet's
/// `..data` / `..<timestamp>` entries.
fn is_relevant(event: &notify::Event, names: &BTreeSet<OsString>) -> bool {
    if matches!(event.kind, EventKind::Access(_) | EventKind::Other) {
        return false;
    }
    event.paths.iter().any(|p| {
        p.file_name().is_some_and(|n| {
            names.iter().any(|w| w == n) || n.to_str().is_some_and(|n| n.starts_with(".."))
        })
    })
}

/// The directory a file's changes show in (`.` for a bare file name).
fn parent_dir(file: &Path) -> PathBuf {
    file.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf()
}

/// The file names events are looked for, and the directories watched: the
/// registry files' for good, the certificate files' as the snapshot names them.
struct Watched {
    watcher: Option<notify::RecommendedWatcher>,
    names: Arc<Mutex<BTreeSet<OsString>>>,
    registry_dirs: BTreeSet<PathBuf>,
    registry_names: BTreeSet<OsString>,
    certificate_dirs: BTreeSet<PathBuf>,
}

impl Watched {
    /// Follows the certificate files of the live snapshot: their names are
    /// looked for, their directories watched (and no longer, once unnamed).
    fn follow(&mut self, certificate_files: &BTreeSet<PathBuf>) {
        let mut names = self.registry_names.clone();
        names.extend(
            certificate_files
                .iter()
                .filter_map(|f| f.file_name().map(OsString::from)),
        );
        *self.names.lock().unwrap_or_else(|e| e.into_inner()) = names;
        let dirs: BTreeSet<PathBuf> = certificate_files
            .iter()
            .map(|f| parent_dir(f))
            .filter(|d| !self.registry_dirs.contains(d))
            .collect();
        let Some(w) = self.watcher.as_mut() else {
            return;
        };
        for gone in self.certificate_dirs.difference(&dirs) {
            let _ = w.unwatch(gone);
        }
        for new in dirs.difference(&self.certificate_dirs) {
            if let Err(error) = w.watch(new, RecursiveMode::NonRecursive) {
                tracing::warn!(dir = %new.display(), %error, "cannot watch; relying on polling");
            }
        }
        self.certificate_dirs = dirs;
    }
}

/// Watches `files` (each the registry source [`SourceInfo::file`] names), and the certificate files the
/// live registry names, and reloads on change, until the returned task is
/// aborted. `on_loaded` runs after each new snapshot.
pub(crate) fn spawn(
    registry: Arc<Registry>,
    files: Vec<PathBuf>,
    poll_every: Duration,
    on_loaded: impl Fn() + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let registry_names: BTreeSet<OsString> = files
        .iter()
        .filter_map(|f| f.file_name().map(OsString::from))
        .collect();
    let names = Arc::new(Mutex::new(registry_names.clone()));
    let looked_for = names.clone();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && is_relevant(
                &event,
                &looked_for.lock().unwrap_or_else(|e| e.into_inner()),
            )
        {
            let _ = tx.send(());
        }
    });
    let registry_dirs: BTreeSet<PathBuf> = files.iter().map(|f| parent_dir(f)).collect();
    let watcher = match watcher {
        Ok(mut w) => {
            for dir in &registry_dirs {
                if let Err(error) = w.watch(dir, RecursiveMode::NonRecursive) {
                    tracing::warn!(dir = %dir.display(), %error, "cannot watch; relying on polling");
                }
            }
            Some(w)
        }
        Err(error) => {
            tracing::warn!(%error, "file watching unavailable; relying on polling");
            None
        }
    };
    let mut watched = Watched {
        watcher,
        names,
        registry_dirs,
        registry_names,
        certificate_dirs: BTreeSet::new(),
    };
    tokio::spawn(async move {
        let mut certificates = CertificateFiles::default();
        let mut states: Vec<FileState> = files.iter().map(|_| FileState::default()).collect();
        let mut poll = tokio::time::interval(poll_every);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                got = rx.recv() => {
                    if got.is_none() {
                        break;
                    }
                    tokio::time::sleep(DEBOUNCE).await;
                    while rx.try_recv().is_ok() {}
                }
                _ = poll.tick() => {}
            }
            let mut loaded = false;
            for (path, state) in files.iter().zip(states.iter_mut()) {
                loaded |= reload_file(&registry, path, state).await;
            }
            // The snapshot may name other certificate files now, and a
            // refused text may wait on some: watch them before reading them,
            // so no change falls in between.
            let wanted = registry
                .load()
                .map(|s| s.certificate_files())
                .unwrap_or_default();
            let mut followed = wanted.clone();
            followed.extend(registry.waiting_files());
            watched.follow(&followed);
            loaded |= reload_certificates(&registry, &mut certificates, &wanted).await;
            loaded |= retry_waiting(&registry).await;
            if loaded {
                on_loaded();
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{AccessKind, CreateKind, ModifyKind, RenameMode};

    fn event(kind: EventKind, path: &str) -> notify::Event {
        notify::Event::new(kind).add_path(PathBuf::from(path))
    }

    #[test]
    fn only_content_changes_of_watched_entries_count() {
        let names = BTreeSet::from([OsString::from("config.yaml")]);
        let modify = EventKind::Modify(ModifyKind::Any);
        assert!(is_relevant(&event(modify, "/etc/gw/config.yaml"), &names));
        assert!(is_relevant(
            &event(EventKind::Create(CreateKind::Any), "/etc/gw/..data_tmp"),
            &names
        ));
        assert!(is_relevant(
            &event(
                EventKind::Modify(ModifyKind::Name(RenameMode::Any)),
                "/etc/gw/..data"
            ),
            &names
        ));
        // The gateway's own reads, and other files in the directory, do not.
        assert!(!is_relevant(
            &event(EventKind::Access(AccessKind::Any), "/etc/gw/config.yaml"),
            &names
        ));
        assert!(!is_relevant(&event(modify, "/etc/gw/other.log"), &names));
    }

    #[tokio::test]
    async fn a_certificate_file_counts_as_changed_when_its_content_does() {
        let dir = tempfile::tempdir().expect("dir");
        let (a, b) = (dir.path().join("a.crt"), dir.path().join("b.crt"));
        std::fs::write(&a, "one").expect("write");
        let mut files = CertificateFiles::default();
        let wanted = BTreeSet::from([a.clone(), b.clone()]);
        // New here: both (b unreadable).
        assert_eq!(
            files.changed(&wanted, FileLimits::default()).await,
            vec![a.clone(), b.clone()]
        );
        assert!(
            files
                .changed(&wanted, FileLimits::default())
                .await
                .is_empty()
        );
        std::fs::write(&a, "one").expect("same bytes");
        assert!(
            files
                .changed(&wanted, FileLimits::default())
                .await
                .is_empty()
        );
        std::fs::write(&a, "two").expect("write");
        std::fs::write(&b, "now readable").expect("write");
        assert_eq!(
            files.changed(&wanted, FileLimits::default()).await,
            vec![a.clone(), b.clone()]
        );
        std::fs::remove_file(&a).expect("remove");
        assert_eq!(
            files.changed(&wanted, FileLimits::default()).await,
            vec![a.clone()]
        );
        // No longer wanted: forgotten, so new again when wanted again.
        let only_b = BTreeSet::from([b.clone()]);
        assert!(
            files
                .changed(&only_b, FileLimits::default())
                .await
                .is_empty()
        );
        std::fs::write(&a, "two").expect("write");
        assert_eq!(files.changed(&wanted, FileLimits::default()).await, vec![a]);
    }
}
