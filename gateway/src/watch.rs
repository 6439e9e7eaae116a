//! Reloading registry files when they change.
//!
//! Each file's parent directory is watched (not the file itself): the kubelet
//! updates a mounted ConfigMap by swapping the `..data` symlink, which a watch
//! on the old file would never see. Events are debounced, then every file is
//! read again and applied; the registry ignores text that did not change. A
//! slow poll backs the watch up, for file systems that send no events.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use std::ffi::OsString;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::registry::{Applied, Registry};

/// How long to wait after an event for the rest of a burst (an editor's save,
/// the kubelet's swap) before reading.
const DEBOUNCE: Duration = Duration::from_millis(50);

/// Reads one registry file into the registry, parsing and planning off the
/// runtime ([`Registry::apply_blocking`]: a large registry must not stall the
/// calls). Returns whether a new snapshot was loaded. `last_read_error`
/// suppresses repeating the same read error on every poll.
pub async fn reload_file(
    registry: &Arc<Registry>,
    index: usize,
    path: &Path,
    last_read_error: &mut Option<String>,
) -> bool {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            *last_read_error = None;
            match registry.apply_blocking(index, text).await {
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
        Err(error) => {
            let message = format!("cannot read: {error}");
            if last_read_error.as_deref() != Some(&message) {
                tracing::warn!(path = %path.display(), %error, "cannot read registry file");
                registry.source_failed(index, message.clone());
                *last_read_error = Some(message);
            }
            false
        }
    }
}

/// Whether an event can have changed one of the files: a change of content or
/// of a directory entry (not a read: the gateway's own reads would otherwise
/// wake it again and again), on a watched file or on one of the kubelet's
/// `..data` / `..<timestamp>` entries.
fn is_relevant(event: &notify::Event, names: &[OsString]) -> bool {
    if matches!(event.kind, EventKind::Access(_) | EventKind::Other) {
        return false;
    }
    event.paths.iter().any(|p| {
        p.file_name().is_some_and(|n| {
            names.iter().any(|w| w == n) || n.to_str().is_some_and(|n| n.starts_with(".."))
        })
    })
}

/// Watches `files` (index = registry source) and reloads on change, until
/// the returned task is aborted. `on_loaded` runs after each new snapshot.
pub fn spawn(
    registry: Arc<Registry>,
    files: Vec<PathBuf>,
    poll_every: Duration,
    on_loaded: impl Fn() + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let names: Vec<OsString> = files
        .iter()
        .filter_map(|f| f.file_name().map(OsString::from))
        .collect();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && is_relevant(&event, &names)
        {
            let _ = tx.send(());
        }
    });
    let watcher = match watcher {
        Ok(mut w) => {
            let dirs: BTreeSet<PathBuf> = files
                .iter()
                .map(|f| {
                    f.parent()
                        .filter(|p| !p.as_os_str().is_empty())
                        .unwrap_or(Path::new("."))
                        .to_path_buf()
                })
                .collect();
            for dir in dirs {
                if let Err(error) = w.watch(&dir, RecursiveMode::NonRecursive) {
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
    tokio::spawn(async move {
        // The watcher lives as long as this task.
        let _watcher = watcher;
        let mut errors: Vec<Option<String>> = vec![None; files.len()];
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
            for (i, path) in files.iter().enumerate() {
                loaded |= reload_file(&registry, i, path, &mut errors[i]).await;
            }
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
        let names = vec![OsString::from("config.yaml")];
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
}
