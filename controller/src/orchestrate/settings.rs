//! The orchestration's tunables.

use std::time::Duration;

#[cfg(doc)]
use crate::orchestrate::conflict;

/// Tunables of the orchestration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// How soon to ask again about a `Validating` cluster when the plugin
    /// gave no `recheck_after`.
    pub validation_poll: Duration,
    /// How soon to try again after a hook or write failed.
    pub error_requeue: Duration,
    /// How many clusters of a placement have their hook calls (and writes)
    /// in flight at once within a phase; at least 1.
    pub hook_concurrency: usize,
    /// How long a work another field manager wrote is left alone before
    /// the controller takes it over again ([`conflict`]).
    pub conflict_backoff: Duration,
    /// How long a rollback waits for its plugin: once this long has passed
    /// since the abort started, a cluster whose BeginRollout or
    /// MutateManifestWork fails (under `failurePolicy: Fail`) is restored
    /// to the last good revision as it is, without the plugin's mutation;
    /// the failure is still reported. Before, the cluster waits and the
    /// call is tried again, as outside a rollback.
    pub rollback_hook_grace: Duration,
}

/// [`Settings::rollback_hook_grace`] when not configured.
pub(crate) const DEFAULT_ROLLBACK_HOOK_GRACE: Duration = Duration::from_secs(300);

/// [`Settings::conflict_backoff`] when not configured.
pub(crate) const DEFAULT_CONFLICT_BACKOFF: Duration = Duration::from_secs(600);

/// [`Settings::hook_concurrency`] when not configured: enough to keep a
/// hub's gateway busy without flooding it.
pub const DEFAULT_HOOK_CONCURRENCY: usize = 32;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            validation_poll: Duration::from_secs(15),
            error_requeue: Duration::from_secs(5),
            hook_concurrency: DEFAULT_HOOK_CONCURRENCY,
            conflict_backoff: DEFAULT_CONFLICT_BACKOFF,
            rollback_hook_grace: DEFAULT_ROLLBACK_HOOK_GRACE,
        }
    }
}
