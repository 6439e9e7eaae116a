//! Places for connections. [`Established`] counts the gRPC port's
//! connections past their handshakes, in all and per address, and refuses
//! one more. [`Admission`] holds those that have not proven anything yet:
//! connections still in their TLS and HTTP/2 handshake on the gRPC port,
//! and admin connections.
//!
//! Such a connection costs an attacker one SYN, and a peer that opens many
//! and says nothing must not lock out the peers that do complete their
//! handshake (a hub with a valid certificate). So these places are their own
//! bound, apart from the established connections': at most `per_ip` from one
//! address (one more is refused), and at most `max` in all, where a newcomer
//! over `max` takes the place of another (which is told to end,
//! [`Place::evicted`]) rather than being refused. The place taken is the
//! oldest of those that have sent nothing yet, if there are any
//! ([`Place::spoke`]), **from the address holding the most places**. A
//! peer that starts its handshake at once then gets through however many
//! connections other addresses keep open and however fast they reopen them,
//! even on a loaded machine where the gateway reads its first bytes late:
//! its address holds one place while theirs hold many. To push it out they
//! would need about as many addresses as there are places.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// See the module doc.
#[derive(Debug, Clone)]
pub(crate) struct Admission {
    state: Arc<Mutex<State>>,
    max: usize,
    per_ip: usize,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// Places in the order they were given (the oldest first).
    held: BTreeMap<u64, Held>,
    per_ip: HashMap<IpAddr, usize>,
}

#[derive(Debug)]
struct Held {
    ip: IpAddr,
    evicted: Arc<Notify>,
    /// Whether the connection has sent a byte.
    spoke: bool,
}

/// One connection's place; given back on drop.
#[derive(Debug)]
pub(crate) struct Place {
    admission: Admission,
    id: u64,
    evicted: Arc<Notify>,
}

impl Admission {
    /// At most `max` places in all (at least one), `per_ip` from one address.
    pub(crate) fn new(max: usize, per_ip: usize) -> Admission {
        Admission {
            state: Arc::default(),
            max: max.max(1),
            per_ip,
        }
    }

    /// A place for a connection from `ip`, or `None` when that address
    /// holds `per_ip` already. Over `max`, a place is taken back
    /// ([`State::victim`]).
    pub(crate) fn admit(&self, ip: IpAddr) -> Option<Place> {
        let mut state = self.lock();
        let from_ip = state.per_ip.get(&ip).copied().unwrap_or(0);
        if from_ip >= self.per_ip {
            return None;
        }
        while state.held.len() >= self.max {
            let Some(victim) = state.victim().and_then(|id| state.held.remove(&id)) else {
                break;
            };
            state.release(victim.ip);
            // Stored if the connection is not waiting yet.
            victim.evicted.notify_one();
        }
        let id = state.next;
        state.next += 1;
        let evicted = Arc::new(Notify::new());
        state.held.insert(
            id,
            Held {
                ip,
                evicted: evicted.clone(),
                spoke: false,
            },
        );
        *state.per_ip.entry(ip).or_default() += 1;
        Some(Place {
            admission: self.clone(),
            id,
            evicted,
        })
    }

    /// Places held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().held.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    /// The place a newcomer takes: silent ones before those that spoke,
    /// then the address holding the most places, then the oldest.
    fn victim(&self) -> Option<u64> {
        let held_by = |ip: &IpAddr| self.per_ip.get(ip).copied().unwrap_or(0);
        self.held
            .iter()
            .max_by_key(|(id, h)| (!h.spoke, held_by(&h.ip), Reverse(**id)))
            .map(|(id, _)| *id)
    }

    fn release(&mut self, ip: IpAddr) {
        if let Some(n) = self.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_ip.remove(&ip);
            }
        }
    }
}

impl Place {
    /// The connection has sent its first byte: it is taken back after
    /// those that have not.
    pub(crate) fn spoke(&self) {
        if let Some(held) = self.admission.lock().held.get_mut(&self.id) {
            held.spoke = true;
        }
    }

    /// Resolves once a newer connection has taken this place: the
    /// connection is to be closed.
    pub(crate) async fn evicted(&self) {
        self.evicted.notified().await;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let mut state = self.admission.lock();
        if let Some(held) = state.held.remove(&self.id) {
            state.release(held.ip);
        }
    }
}

/// Connections past their handshakes, in all and per IP address; one more
/// than either bound is refused.
#[derive(Debug, Default, Clone)]
pub(crate) struct Established(Arc<Mutex<Open>>);

#[derive(Debug, Default)]
struct Open {
    all: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// Which bound of [`Established`] refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    All,
    PerIp,
}

/// One connection's place in [`Established`], given back on drop.
#[derive(Debug)]
pub(crate) struct Slot(Established, IpAddr);

impl Established {
    /// A place for a connection from `ip`, unless `max` are open, or
    /// `max_per_ip` from that address.
    pub(crate) fn take(&self, ip: IpAddr, max: usize, max_per_ip: usize) -> Result<Slot, Bound> {
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if open.all >= max {
            return Err(Bound::All);
        }
        let n = open.per_ip.entry(ip).or_default();
        if *n >= max_per_ip {
            return Err(Bound::PerIp);
        }
        *n += 1;
        open.all += 1;
        Ok(Slot(self.clone(), ip))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        open.all -= 1;
        if let Some(n) = open.per_ip.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                open.per_ip.remove(&self.1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn established_connections_are_bounded_in_all_and_per_address() {
        let e = Established::default();
        let a = e.take(ip(1), 3, 2).expect("room");
        let _b = e.take(ip(1), 3, 2).expect("room");
        assert_eq!(e.take(ip(1), 3, 2).map(drop), Err(Bound::PerIp));
        let _c = e.take(ip(2), 3, 2).expect("room");
        assert_eq!(e.take(ip(3), 3, 2).map(drop), Err(Bound::All));
        drop(a);
        assert!(e.take(ip(1), 3, 2).is_ok());
    }

    #[test]
    fn one_address_holds_at_most_its_share() {
        let a = Admission::new(10, 2);
        let first = a.admit(ip(1)).expect("room");
        let _second = a.admit(ip(1)).expect("room");
        assert!(a.admit(ip(1)).is_none(), "the address's share is taken");
        assert!(a.admit(ip(2)).is_some(), "another address gets in");
        drop(first);
        assert!(a.admit(ip(1)).is_some(), "a place given back is free again");
    }

    #[tokio::test]
    async fn a_newcomer_over_the_bound_takes_the_oldest_place() {
        let a = Admission::new(2, 5);
        let oldest = a.admit(ip(1)).expect("room");
        let middle = a.admit(ip(2)).expect("room");
        let newest = a.admit(ip(3)).expect("the oldest place is taken back");
        assert_eq!(a.held(), 2);
        tokio::time::timeout(Duration::from_secs(1), oldest.evicted())
            .await
            .expect("the oldest is told to end");
        let told = tokio::time::timeout(Duration::from_millis(50), middle.evicted()).await;
        assert!(told.is_err(), "the others keep their places");
        // Its address's count went back with the place.
        drop(oldest);
        assert_eq!(a.held(), 2);
        drop((middle, newest));
        assert_eq!(a.held(), 0);
        assert!(a.lock().per_ip.is_empty());
    }

    #[tokio::test]
    async fn a_connection_that_spoke_is_taken_back_after_the_silent_ones() {
        let a = Admission::new(2, 5);
        let speaking = a.admit(ip(1)).expect("room");
        speaking.spoke();
        let silent = a.admit(ip(2)).expect("room");
        let _newest = a.admit(ip(3)).expect("room");
        tokio::time::timeout(Duration::from_secs(1), silent.evicted())
            .await
            .expect("the silent one goes, though younger");
        let told = tokio::time::timeout(Duration::from_millis(50), speaking.evicted()).await;
        assert!(told.is_err(), "the one that spoke keeps its place");
    }

    /// A hub whose first bytes the gateway has not read yet is as silent as
    /// the peers flooding it; it keeps its place because its address holds
    /// fewer than theirs, however many of them arrive after it.
    #[tokio::test]
    async fn the_address_holding_the_most_places_gives_one_up() {
        let a = Admission::new(4, 8);
        let flood: Vec<Place> = (0..3).map(|_| a.admit(ip(2)).expect("room")).collect();
        let hub = a.admit(ip(1)).expect("room");
        let mut newcomers = Vec::new();
        // Two addresses for four places: one of them always holds two.
        for n in 0..40 {
            newcomers.push(a.admit(ip(2 + n % 2)).expect("a place is taken back"));
        }
        assert_eq!(a.held(), 4);
        let told = tokio::time::timeout(Duration::from_millis(50), hub.evicted()).await;
        assert!(
            told.is_err(),
            "the hub keeps its place, though the oldest but three"
        );
        for place in &flood {
            tokio::time::timeout(Duration::from_secs(1), place.evicted())
                .await
                .expect("the flooding address's oldest go first");
        }
    }
}
