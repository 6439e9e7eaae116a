//! Whether the gateway is ready: a registry is loaded and it is not
//! draining; and serving: ready, with no registry entry naming a server
//! that answered it is no plugin. `/readyz` and the gRPC health service
//! report it, and follow its changes.

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::watch;

use crate::upstream::Load;

use super::snapshot::Snapshot;

/// The draining flag, and readiness for those who follow its changes.
#[derive(Debug)]
pub(super) struct Readiness {
    draining: AtomicBool,
    ready: watch::Sender<bool>,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            draining: AtomicBool::new(false),
            ready: watch::Sender::new(false),
        }
    }
}

impl Readiness {
    /// Ready, when a registry is `loaded`: not draining.
    pub(super) fn is_ready(&self, loaded: bool) -> bool {
        loaded && !self.is_draining()
    }

    pub(super) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Drains from now on.
    pub(super) fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Tells the followers readiness now that a registry is `loaded` or
    /// not, if it changed.
    pub(super) fn publish(&self, loaded: bool) {
        let now = self.is_ready(loaded);
        self.ready
            .send_if_modified(|ready| std::mem::replace(ready, now) != now);
    }

    /// Follows readiness: the receiver sees each change.
    pub(super) fn watch(&self) -> watch::Receiver<bool> {
        self.ready.subscribe()
    }
}

/// `plugin "NAME" (hub H): WHY` for each plugin of `snapshot` whose own
/// Initialize (for its registry file's hub) was answered with a refusal:
/// UNIMPLEMENTED or an invalid declaration. Such an entry is a
/// configuration error, as a bad registry is; a plugin merely out of reach
/// is not one.
pub(super) fn refused_plugins(snapshot: &Snapshot) -> Vec<String> {
    snapshot
        .plugins
        .iter()
        .filter_map(|p| match p.upstream.load_state(p.hub.as_ref()) {
            Load::NotLoaded {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_loaded_until_draining_and_followers_see_each_change() {
        let r = Readiness::default();
        let mut follower = r.watch();
        assert!(!r.is_ready(false));
        r.publish(false);
        assert!(!follower.has_changed().expect("open"), "no change to tell");
        r.publish(true);
        assert!(r.is_ready(true));
        assert!(follower.has_changed().expect("open"));
        assert!(*follower.borrow_and_update());
        r.set_draining();
        assert!(r.is_draining() && !r.is_ready(true));
        r.publish(true);
        assert!(!*follower.borrow_and_update());
    }
}
