//! The record of reloads: how many loaded and how many were refused, the
//! last refusal (until a later change loads), and when a registry last
//! loaded. `/debug/plugins` shows it, and so do the metrics, which get it
//! as a value ([`RegistryState`]) at each change.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use rollout_policies::lock;

use crate::telemetry::{LastReload, PluginState, RegistryState, ReloadCounts};

use super::snapshot::Snapshot;

#[derive(Debug, Default)]
struct Record {
    counts: ReloadCounts,
    /// The last rejected change, until a later change loads.
    last_error: Option<String>,
    /// The last error of a certificate reload, if it is still `last_error`:
    /// a certificate file put back as it was clears it.
    last_certificate_error: Option<String>,
    /// When a registry was last loaded.
    loaded_at: Option<SystemTime>,
}

/// The record, shared by the reloads and the readers.
#[derive(Debug, Default)]
pub(super) struct ReloadRecord(Mutex<Record>);

impl ReloadRecord {
    /// A change loaded: it clears any refusal.
    pub(super) fn loaded(&self) {
        let mut r = lock(&self.0);
        r.counts.success += 1;
        r.last_error = None;
        r.last_certificate_error = None;
        r.loaded_at = Some(SystemTime::now());
    }

    /// A change was refused, or a source could not be read: `message` says
    /// why, naming the source.
    pub(super) fn refused(&self, message: String) {
        let mut r = lock(&self.0);
        r.counts.failure += 1;
        r.last_error = Some(message);
        r.last_certificate_error = None;
    }

    /// A certificate reload was refused: as [`ReloadRecord::refused`], and
    /// remembered apart, so that files put right clear it
    /// ([`ReloadRecord::certificates_restored`]).
    pub(super) fn certificates_refused(&self, message: String) {
        self.refused(message.clone());
        lock(&self.0).last_certificate_error = Some(message);
    }

    /// The certificate files hold what the live upstreams were built from
    /// again: a refusal of theirs still standing is cleared.
    pub(super) fn certificates_restored(&self) {
        let mut r = lock(&self.0);
        if r.last_certificate_error.is_some() && r.last_certificate_error == r.last_error {
            r.last_error = None;
            r.last_certificate_error = None;
        }
    }

    pub(super) fn last_error(&self) -> Option<String> {
        lock(&self.0).last_error.clone()
    }

    pub(super) fn counts(&self) -> ReloadCounts {
        lock(&self.0).counts
    }

    /// The record with the `live` snapshot, as the metrics export them.
    pub(super) fn state(&self, live: Option<&Snapshot>) -> RegistryState {
        let r = lock(&self.0);
        let plugins: Arc<[PluginState]> = live
            .iter()
            .flat_map(|s| s.plugins.iter())
            .map(|p| PluginState {
                name: p.name.clone(),
                hub: p.hub.clone(),
                upstream: p.upstream.clone(),
            })
            .collect();
        RegistryState {
            generation: live.map_or(0, |s| s.generation),
            reloads: r.counts,
            last_reload: LastReload {
                successful: r.last_error.is_none(),
                success_at: r.loaded_at,
            },
            plugins,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_stands_until_a_load_and_a_certificate_one_until_its_files_are_put_back() {
        let r = ReloadRecord::default();
        assert_eq!(r.state(None).last_reload, LastReload::default());
        r.refused("a: bad".into());
        r.certificates_restored();
        assert_eq!(
            r.last_error().as_deref(),
            Some("a: bad"),
            "not a certificate refusal"
        );
        r.loaded();
        assert_eq!(r.last_error(), None);
        r.certificates_refused("certificate files: no file".into());
        let state = r.state(None);
        assert!(!state.last_reload.successful);
        assert!(state.last_reload.success_at.is_some());
        assert_eq!(
            state.reloads,
            ReloadCounts {
                success: 1,
                failure: 2
            }
        );
        r.certificates_restored();
        assert_eq!(r.last_error(), None);
        // A later refusal of a source is not the certificates' to clear.
        r.certificates_refused("certificate files: no file".into());
        r.refused("b: bad".into());
        r.certificates_restored();
        assert_eq!(r.last_error().as_deref(), Some("b: bad"));
    }
}
