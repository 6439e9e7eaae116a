//! What keeps one hub from hurting another through a shared plugin in
//! central mode: each calling hub meets its own circuit breaker (one hub's
//! failures never open another's circuit), and holds at most its fair share
//! of the plugin's concurrency bound (one hub's slow calls never take every
//! place). The hub whose registry file defines the plugin, and callers
//! without a hub, use the plugin's own breaker and the whole bound.

use rollout_policies::lock;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rollout_policies::BreakerPolicy;
use rollout_policies::breaker::{Breaker, BreakerState};

/// Hubs kept per plugin; past this, a new hub shares the plugin's own
/// breaker and is not bounded apart (hubs are named by certificates the
/// client CA signed: this bounds a misconfiguration, not an attack).
const MAX_HUBS: usize = 1024;

/// The per-hub state of one plugin.
#[derive(Debug)]
pub(crate) struct Hubs {
    /// The hub of the registry file defining the plugin (`None`: shared).
    home: Option<String>,
    /// How many hubs may call the plugin: the bound is split among them.
    count: AtomicUsize,
    breakers: Mutex<HashMap<String, Arc<Mutex<Breaker>>>>,
    in_flight: Mutex<HashMap<String, Arc<AtomicUsize>>>,
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
    pub(crate) fn new(home: Option<String>) -> Hubs {
        Hubs {
            home,
            count: AtomicUsize::new(1),
            breakers: Mutex::default(),
            in_flight: Mutex::default(),
        }
    }

    /// Whether `hub` is one kept apart: a hub other than the plugin's own.
    fn apart<'a>(&self, hub: Option<&'a str>) -> Option<&'a str> {
        hub.filter(|h| self.home.as_deref() != Some(*h))
    }

    /// Sets how many hubs may call the plugin (at least 1).
    pub(crate) fn set_count(&self, count: usize) {
        self.count.store(count.max(1), Ordering::Relaxed);
    }

    /// The breaker `hub`'s calls meet: its own, made with `policy` on first
    /// use; `None` for the plugin's own hub, callers without one, and past
    /// [`MAX_HUBS`].
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
        breakers.insert(hub.to_string(), b.clone());
        Some(b)
    }

    /// Applies a new breaker policy to every hub's breaker.
    pub(crate) fn set_breaker_policy(&self, policy: &BreakerPolicy) {
        for b in lock(&self.breakers).values() {
            lock(b).set_policy(policy);
        }
    }

    /// Each hub's circuit now, by hub.
    pub(crate) fn circuits(&self, now: std::time::Instant) -> Vec<(String, BreakerState)> {
        let mut out: Vec<(String, BreakerState)> = lock(&self.breakers)
            .iter()
            .map(|(h, b)| (h.clone(), lock(b).state(now)))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// A place in `hub`'s share of a bound of `max` calls: `max` divided
    /// among the hubs that may call the plugin. `Ok(None)` when `hub` is
    /// not kept apart; `Err(share)` when its share is taken.
    pub(crate) fn place(&self, hub: Option<&str>, max: usize) -> Result<Option<HubPlace>, usize> {
        let Some(hub) = self.apart(hub) else {
            return Ok(None);
        };
        let share = (max / self.count.load(Ordering::Relaxed)).max(1);
        let counter = {
            let mut in_flight = lock(&self.in_flight);
            if !in_flight.contains_key(hub) && in_flight.len() >= MAX_HUBS {
                return Ok(None);
            }
            in_flight.entry(hub.to_string()).or_default().clone()
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

    #[test]
    fn each_other_hub_holds_at_most_its_share_and_gives_it_back() {
        let hubs = Hubs::new(None);
        hubs.set_count(2);
        let a: Vec<HubPlace> = (0..5)
            .map(|_| {
                hubs.place(Some("hub-a"), 10)
                    .expect("in share")
                    .expect("kept apart")
            })
            .collect();
        assert_eq!(hubs.place(Some("hub-a"), 10).map(|_| ()), Err(5));
        // Hub B's share is its own.
        assert!(hubs.place(Some("hub-b"), 10).expect("in share").is_some());
        drop(a);
        assert!(hubs.place(Some("hub-a"), 10).is_ok());
        // Callers without a hub meet only the plugin's whole bound.
        assert!(hubs.place(None, 10).expect("not apart").is_none());
    }

    #[test]
    fn the_plugins_own_hub_uses_the_plugins_breaker() {
        let hubs = Hubs::new(Some("hub-a".into()));
        let policy = BreakerPolicy::default();
        assert!(hubs.breaker("hub-a", &policy).is_none());
        let b = hubs.breaker("hub-b", &policy).expect("its own");
        assert!(Arc::ptr_eq(
            &b,
            &hubs.breaker("hub-b", &policy).expect("kept")
        ));
        assert!(hubs.place(Some("hub-a"), 1).expect("not apart").is_none());
    }
}
