//! What keeps one hub from hurting another through a shared plugin in
//! central mode: each calling hub meets its own circuit breaker (one hub's
//! failures never open another's circuit), and holds at most its fair share
//! of the plugin's concurrency bound (one hub's slow calls never take every
//! place). The hub whose registry file defines the plugin uses the plugin's
//! own breaker and the whole bound.
//!
//! The shares never sum past the bound: each hub the registry says may call
//! the plugin (other than its own) holds one share, and every other caller
//! (a certificate naming a hub that has no registry file and is not in the
//! plugin's `hubs:`, or naming no hub at all) holds places in **one** share
//! together, so identities the operator never registered cannot starve a
//! hub that is registered, however many there are. A plugin no registered
//! hub may call (the sidecar, with no hub at all) has no shares: its
//! callers meet the whole bound.

use rollout_policies::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rollout_policies::BreakerPolicy;
use rollout_policies::breaker::{Breaker, BreakerState};

use crate::hub::Hub;

/// Breakers kept per plugin; past this, a new hub shares the plugin's own
/// breaker (hubs are named by certificates the client CA signed: this
/// bounds a misconfiguration, not an attack). Shares of the concurrency
/// bound need no such limit: only registered hubs have one.
const MAX_HUBS: usize = 1024;

/// The per-hub state of one plugin.
#[derive(Debug)]
pub(crate) struct Hubs {
    /// The hub of the registry file defining the plugin (`None`: shared).
    home: Option<Hub>,
    breakers: Mutex<HashMap<Hub, Arc<Mutex<Breaker>>>>,
    /// The calls in flight of each registered hub other than `home`.
    in_flight: Mutex<HashMap<Hub, Arc<AtomicUsize>>>,
    /// The calls in flight of every other caller, together.
    others: Arc<AtomicUsize>,
}

/// A place in a hub's share, given back when dropped.
#[derive(Debug)]
pub(crate) struct HubPlace(Arc<AtomicUsize>);

impl Drop for HubPlace {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Hubs {
    pub(crate) fn new(home: Option<Hub>) -> Hubs {
        Hubs {
            home,
            breakers: Mutex::default(),
            in_flight: Mutex::default(),
            others: Arc::default(),
        }
    }

    /// Whether `hub` is one kept apart: a hub other than the plugin's own.
    fn apart<'a>(&self, hub: Option<&'a str>) -> Option<&'a str> {
        hub.filter(|h| self.home.as_ref().is_none_or(|home| home != h))
    }

    /// Sets the registered hubs that may call the plugin; each other than
    /// its own holds a share (the calls in flight of those kept are kept).
    pub(crate) fn set_callers(&self, hubs: &[Hub]) {
        let mut in_flight = lock(&self.in_flight);
        let mut kept = std::mem::take(&mut *in_flight);
        for hub in hubs.iter().filter(|h| self.home.as_ref() != Some(*h)) {
            let counter = kept.remove(hub).unwrap_or_default();
            in_flight.insert(hub.clone(), counter);
        }
    }

    /// The breaker `hub`'s calls meet: its own, made with `policy` on first
    /// use; `None` for the plugin's own hub, callers without one, and past
    /// [`MAX_HUBS`]. The hub is the breaker layer's scope, a `str`
    /// ([`rollout_policies::layer::PolicyRequest::scope`]).
    pub(crate) fn breaker(&self, hub: &str, policy: &BreakerPolicy) -> Option<Arc<Mutex<Breaker>>> {
        self.apart(Some(hub))?;
        let mut breakers = lock(&self.breakers);
        if let Some(b) = breakers.get(hub) {
            return Some(b.clone());
        }
        if breakers.len() >= MAX_HUBS {
            return None;
        }
        let b = Arc::new(Mutex::new(Breaker::new(policy)));
        breakers.insert(Hub::new(hub), b.clone());
        Some(b)
    }

    /// Applies a new breaker policy to every hub's breaker.
    pub(crate) fn set_breaker_policy(&self, policy: &BreakerPolicy) {
        for b in lock(&self.breakers).values() {
            lock(b).set_policy(policy);
        }
    }

    /// Each hub's circuit now, by hub.
    pub(crate) fn circuits(&self, now: std::time::Instant) -> Vec<(Hub, BreakerState)> {
        let mut out: Vec<(Hub, BreakerState)> = lock(&self.breakers)
            .iter()
            .map(|(h, b)| (h.clone(), lock(b).state(now)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// A place in `hub`'s share of a bound of `max` calls: `max` divided
    /// among the registered hubs other than the plugin's own, and one share
    /// for every other caller together. `Ok(None)` for the plugin's own hub
    /// and when no hub is kept apart; `Err(share)` when the share is taken.
    pub(crate) fn place(&self, hub: Option<&Hub>, max: usize) -> Result<Option<HubPlace>, usize> {
        let hub = hub.map(Hub::as_str);
        if hub.is_some() && self.apart(hub).is_none() {
            return Ok(None);
        }
        let (counter, share) = {
            let in_flight = lock(&self.in_flight);
            if in_flight.is_empty() {
                return Ok(None);
            }
            let counter = hub
                .and_then(|h| in_flight.get(h))
                .unwrap_or(&self.others)
                .clone();
            (counter, (max / (in_flight.len() + 1)).max(1))
        };
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < share).then_some(n + 1)
            })
            .map(|_| Some(HubPlace(counter)))
            .map_err(|_| share)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(hubs: &[&str]) -> Vec<Hub> {
        hubs.iter().map(|h| Hub::new(h)).collect()
    }

    #[test]
    fn each_other_hub_holds_at_most_its_share_and_gives_it_back() {
        let hubs = Hubs::new(None);
        hubs.set_callers(&names(&["hub-a", "hub-b"]));
        let a: Vec<HubPlace> = (0..4)
            .map(|_| {
                hubs.place(Some(&Hub::new("hub-a")), 12)
                    .expect("in share")
                    .expect("kept apart")
            })
            .collect();
        assert_eq!(hubs.place(Some(&Hub::new("hub-a")), 12).map(|_| ()), Err(4));
        // Hub B's share is its own.
        assert!(
            hubs.place(Some(&Hub::new("hub-b")), 12)
                .expect("in share")
                .is_some()
        );
        drop(a);
        assert!(hubs.place(Some(&Hub::new("hub-a")), 12).is_ok());
    }

    #[test]
    fn unregistered_callers_share_one_share() {
        let hubs = Hubs::new(None);
        hubs.set_callers(&names(&["hub-a", "hub-b"]));
        // Hubs without a registry file and callers naming no hub: 4 places
        // of 12 between them, however many they are.
        let others: Vec<HubPlace> = (0..4)
            .map(|i| {
                let hub = (i % 2 == 0).then(|| format!("stranger-{i}"));
                hubs.place(hub.map(|h| Hub::new(&h)).as_ref(), 12)
                    .expect("in share")
                    .expect("apart")
            })
            .collect();
        assert_eq!(
            hubs.place(Some(&Hub::new("stranger-9")), 12).map(|_| ()),
            Err(4)
        );
        assert_eq!(hubs.place(None, 12).map(|_| ()), Err(4));
        // The registered hubs' shares are whole: 4 + 4 + 4 = 12.
        let a: Vec<_> = (0..4)
            .map(|_| hubs.place(Some(&Hub::new("hub-a")), 12))
            .collect();
        let b: Vec<_> = (0..4)
            .map(|_| hubs.place(Some(&Hub::new("hub-b")), 12))
            .collect();
        assert!(a.iter().chain(&b).all(|p| matches!(p, Ok(Some(_)))));
        drop(others);
        // A registry that names no hub (the sidecar): the whole bound.
        let sidecar = Hubs::new(None);
        assert!(sidecar.place(None, 12).expect("not apart").is_none());
        assert!(
            sidecar
                .place(Some(&Hub::new("x")), 12)
                .expect("not apart")
                .is_none()
        );
    }

    #[test]
    fn the_plugins_own_hub_uses_the_plugins_breaker() {
        let hubs = Hubs::new(Some(Hub::new("hub-a")));
        hubs.set_callers(&names(&["hub-a", "hub-b"]));
        let policy = BreakerPolicy::default();
        assert!(hubs.breaker("hub-a", &policy).is_none());
        let b = hubs.breaker("hub-b", &policy).expect("its own");
        assert!(Arc::ptr_eq(
            &b,
            &hubs.breaker("hub-b", &policy).expect("kept")
        ));
        assert!(
            hubs.place(Some(&Hub::new("hub-a")), 1)
                .expect("not apart")
                .is_none()
        );
    }
}
