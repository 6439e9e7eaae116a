//! The bound on the bytes a peer's calls hold.
//!
//! A unary request is buffered until its message is whole, then waits for
//! the plugins while they work, and its answer waits until the peer takes
//! it; a peer that declares large messages and stops sending, calls a slow
//! plugin, or never reads its answers would otherwise hold that memory for
//! as long as it likes. Every call holds one [`CallBytes`] against two
//! [`Pool`]s, its connection's and the gateway's, from its request's first
//! byte until its answer is taken: the request's bytes as they arrive and
//! while the call runs, then its answer's bytes not yet taken. It grows
//! only while both pools have room, and goes back to them when the call
//! ends (answered, failed, timed out, or its connection closed).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A number of bytes that reservations draw from, up to a limit.
#[derive(Debug)]
pub struct Pool {
    used: AtomicUsize,
    peak: AtomicUsize,
    limit: usize,
    scope: Scope,
}

/// Which pool ran out: the connection's or the gateway's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Connection,
    Gateway,
}

impl Pool {
    pub(crate) fn new(limit: usize, scope: Scope) -> Pool {
        Pool {
            used: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            limit,
            scope,
        }
    }

    /// The bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The most bytes held at once so far.
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    fn take(&self, n: usize) -> Result<(), PendingExceeded> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|after| *after <= self.limit)
            })
            .map(|before| {
                self.peak.fetch_max(before + n, Ordering::Relaxed);
            })
            .map_err(|used| PendingExceeded {
                scope: self.scope,
                limit: self.limit,
                used,
                wanted: n,
            })
    }

    fn give(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The pools a request on one connection draws from.
#[derive(Debug, Clone)]
pub(crate) struct PendingBudget {
    pub(crate) connection: Arc<Pool>,
    pub(crate) gateway: Arc<Pool>,
}

/// Bytes held by one request being received; given back on drop.
#[derive(Debug, Default)]
pub(crate) struct Reservation {
    budget: Option<PendingBudget>,
    held: usize,
}

impl Reservation {
    /// A reservation against `budget`; `None` is unbounded.
    pub(crate) fn new(budget: Option<PendingBudget>) -> Reservation {
        Reservation { budget, held: 0 }
    }

    /// The bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    /// Sets the bytes this request holds to `bytes`. Growing fails, holding
    /// what was held before, when either pool would go over its limit.
    pub(crate) fn hold(&mut self, bytes: usize) -> Result<(), PendingExceeded> {
        let Some(budget) = &self.budget else {
            self.held = bytes;
            return Ok(());
        };
        if bytes > self.held {
            let more = bytes - self.held;
            budget.connection.take(more)?;
            if let Err(e) = budget.gateway.take(more) {
                budget.connection.give(more);
                return Err(e);
            }
        } else {
            let less = self.held - bytes;
            budget.connection.give(less);
            budget.gateway.give(less);
        }
        self.held = bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let _ = self.hold(0);
    }
}

/// The bytes one call holds (see the module doc): shared by the layer that
/// receives its request and the sender of its answer.
#[derive(Debug, Clone)]
pub(crate) struct CallBytes(Arc<std::sync::Mutex<Reservation>>);

impl CallBytes {
    pub(crate) fn new(budget: PendingBudget) -> CallBytes {
        CallBytes(Arc::new(std::sync::Mutex::new(Reservation::new(Some(
            budget,
        )))))
    }

    /// Sets the bytes the call holds (see [`Reservation::hold`]).
    pub(crate) fn hold(&self, bytes: usize) -> Result<(), PendingExceeded> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).hold(bytes)
    }
}

/// Receiving a request would hold more bytes than a pool allows.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{} bytes of requests still arriving on {} would exceed its limit of {limit} bytes ({used} held)",
    .used + .wanted,
    match .scope { Scope::Connection => "this connection", Scope::Gateway => "the gateway" }
)]
pub struct PendingExceeded {
    pub(crate) scope: Scope,
    pub(crate) limit: usize,
    pub(crate) used: usize,
    pub(crate) wanted: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(conn: usize, total: usize) -> PendingBudget {
        PendingBudget {
            connection: Arc::new(Pool::new(conn, Scope::Connection)),
            gateway: Arc::new(Pool::new(total, Scope::Gateway)),
        }
    }

    #[test]
    fn reservations_draw_from_both_pools_and_give_back_on_drop() {
        let b = budget(100, 150);
        let mut r1 = Reservation::new(Some(b.clone()));
        r1.hold(60).expect("room");
        let mut r2 = Reservation::new(Some(b.clone()));
        assert_eq!(
            r2.hold(50).expect_err("connection full").scope,
            Scope::Connection
        );
        assert_eq!((b.connection.used(), b.gateway.used()), (60, 60));
        r2.hold(40).expect("room");
        r1.hold(10).expect("shrinking always works");
        assert_eq!((b.connection.used(), b.gateway.used()), (50, 50));

        // Another connection shares the gateway pool only.
        let other = PendingBudget {
            connection: Arc::new(Pool::new(200, Scope::Connection)),
            gateway: b.gateway.clone(),
        };
        let mut r3 = Reservation::new(Some(other.clone()));
        let e = r3.hold(101).expect_err("gateway full");
        assert_eq!(e.scope, Scope::Gateway);
        assert_eq!(other.connection.used(), 0, "the failed take is undone");
        r3.hold(100).expect("room");
        drop((r1, r2, r3));
        assert_eq!((b.connection.used(), b.gateway.used()), (0, 0));
    }

    #[test]
    fn unbounded_reservations_never_fail() {
        let mut r = Reservation::new(None);
        r.hold(usize::MAX).expect("unbounded");
        assert_eq!(r.held(), usize::MAX);
    }
}
