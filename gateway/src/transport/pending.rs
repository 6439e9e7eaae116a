//! The bound on the bytes a peer's calls hold.
//!
//! A unary request is buffered until its message is whole, then waits for
//! the plugins while they work, their answers are read whole, and the
//! call's answer waits until the peer takes it; a peer that declares large
//! messages and stops sending, calls a slow plugin, or never reads its
//! answers would otherwise hold that memory for as long as it likes. Every
//! call holds one [`CallBytes`] against two [`Pool`]s, its connection's and
//! the gateway's, from its request's first byte until its answer is taken:
//! the request's bytes as they arrive and while the call runs, each
//! plugin's answer as it arrives and for as long as its buffer lives, then
//! its own answer until HTTP/2 has written the last of it to the socket
//! (bytes queued in HTTP/2's send buffer, waiting for the peer's window or
//! for a socket it does not read, included). It grows only while both
//! pools have room, and goes back to them when the call ends (answered,
//! failed, timed out, or its connection closed).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

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
/// receives its request, the plugin calls that read answers for it, and the
/// sender of its answer.
///
/// Two kinds of holdings make up the total: the call's own ([`hold`],
/// its request while it arrives and while the call runs), and [`Part`]s,
/// each the buffer of one message (a plugin's answer, the answer being
/// sent), counted for as long as that buffer lives ([`Part::counted`]).
/// [`settle`] starts the answer's turn: what was held before is given back
/// at once (the call's work is over, and its answer is counted anew), and
/// the parts made before no longer count, so nothing is given back twice.
///
/// [`hold`]: CallBytes::hold
/// [`settle`]: CallBytes::settle
#[derive(Debug, Clone)]
pub(crate) struct CallBytes(Arc<Mutex<Holdings>>);

#[derive(Debug)]
struct Holdings {
    /// The pools' share of the call: its own bytes and its parts'.
    reservation: Reservation,
    /// What [`CallBytes::hold`] last set.
    own: usize,
    /// Parts of an older generation were counted again by a later settle:
    /// they give nothing back.
    generation: u64,
}

impl Holdings {
    /// Grows or shrinks the reservation by what one holding changes by.
    fn change(&mut self, from: usize, to: usize) -> Result<(), PendingExceeded> {
        let total = self.reservation.held - from + to;
        self.reservation.hold(total)
    }
}

impl CallBytes {
    pub(crate) fn new(budget: PendingBudget) -> CallBytes {
        CallBytes(Arc::new(Mutex::new(Holdings {
            reservation: Reservation::new(Some(budget)),
            own: 0,
            generation: 0,
        })))
    }

    fn lock(&self) -> MutexGuard<'_, Holdings> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the bytes the call holds of its own (see [`Reservation::hold`]).
    pub(crate) fn hold(&self, bytes: usize) -> Result<(), PendingExceeded> {
        let mut held = self.lock();
        let own = held.own;
        held.change(own, bytes)?;
        held.own = bytes;
        Ok(())
    }

    /// The answer's turn: gives back everything held so far, the call's
    /// own bytes and every part's.
    pub(crate) fn settle(&self) {
        let mut held = self.lock();
        held.generation += 1;
        held.own = 0;
        // Shrinking cannot fail.
        let _ = held.reservation.hold(0);
    }

    /// A new part of the call, holding nothing yet.
    pub(crate) fn part(&self) -> Part {
        let generation = self.lock().generation;
        Part {
            call: self.clone(),
            generation,
            held: 0,
        }
    }

    /// `bytes`, counted against the pools for as long as they (or any
    /// slice of them) live; refused when a pool has no room for them.
    pub(crate) fn counted(&self, bytes: Bytes) -> Result<Bytes, PendingExceeded> {
        if bytes.is_empty() {
            return Ok(bytes);
        }
        let mut part = self.part();
        part.hold(bytes.len())?;
        Ok(part.counted(bytes))
    }

    /// The bytes held now, the call's own and its parts'.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.lock().reservation.held
    }
}

/// The bytes of one buffer of a call (see [`CallBytes`]); given back on
/// drop, unless the call has settled since.
#[derive(Debug)]
pub(crate) struct Part {
    call: CallBytes,
    generation: u64,
    held: usize,
}

impl Part {
    /// Sets the bytes this part holds; growing fails, holding what was
    /// held before, when either pool would go over its limit.
    pub(crate) fn hold(&mut self, bytes: usize) -> Result<(), PendingExceeded> {
        let mut call = self.call.lock();
        if call.generation != self.generation {
            // Made before the call settled: what it held was given back
            // then, and it counts from nothing in the new generation.
            self.generation = call.generation;
            self.held = 0;
        }
        call.change(self.held, bytes)?;
        self.held = bytes;
        Ok(())
    }

    /// `bytes` (the buffer this part counts), holding the part for as long
    /// as they or any slice of them live.
    pub(crate) fn counted(self, bytes: Bytes) -> Bytes {
        Bytes::from_owner(Counted { bytes, _part: self })
    }
}

impl Drop for Part {
    fn drop(&mut self) {
        let mut call = self.call.lock();
        if call.generation == self.generation {
            // Shrinking cannot fail.
            let _ = call.change(self.held, 0);
        }
    }
}

/// A buffer and the part that counts it, as the owner of a `Bytes`.
struct Counted {
    bytes: Bytes,
    _part: Part,
}

impl AsRef<[u8]> for Counted {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Holding more of a call's bytes (its request as it arrives, a plugin's
/// answer, its answer until the peer takes it) would go over a pool's limit.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "{} bytes held for the calls of {} would exceed its limit of {limit} bytes ({}; {used} held)",
    .used + .wanted,
    match .scope { Scope::Connection => "this connection", Scope::Gateway => "the gateway" },
    match .scope { Scope::Connection => "--max-pending-request-bytes-per-connection", Scope::Gateway => "--max-pending-request-bytes" }
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
    fn a_calls_parts_count_while_their_buffers_live() {
        let b = budget(100, 150);
        let call = CallBytes::new(b.clone());
        call.hold(40).expect("room");
        // A plugin's answer, as it arrives, joins the request.
        let mut part = call.part();
        part.hold(30).expect("room");
        assert_eq!(part.hold(61).expect_err("full").scope, Scope::Connection);
        assert_eq!((call.held(), b.connection.used()), (70, 70));
        let answer = part.counted(Bytes::from(vec![1; 30]));
        let slice = answer.slice(10..20);
        drop(answer);
        assert_eq!(b.connection.used(), 70, "a slice keeps the buffer counted");
        drop(slice);
        assert_eq!((call.held(), b.gateway.used()), (40, 40));
        // Nothing over the pools is ever counted.
        assert!(call.counted(Bytes::from(vec![0; 61])).is_err());
        assert_eq!(b.connection.used(), 40);
        drop(call);
        assert_eq!((b.connection.used(), b.gateway.used()), (0, 0));
    }

    #[test]
    fn settling_gives_everything_back_once() {
        let b = budget(100, 150);
        let call = CallBytes::new(b.clone());
        call.hold(40).expect("room");
        let plugin_answer = call.counted(Bytes::from(vec![1; 30])).expect("room");
        let mut still_arriving = call.part();
        still_arriving.hold(10).expect("room");
        assert_eq!(b.connection.used(), 80);
        // The answer's turn: the request and the plugin's answer (which
        // lives on inside the answer) are counted again as the answer.
        call.settle();
        assert_eq!(b.connection.used(), 0);
        let sent = call.counted(plugin_answer.slice(..)).expect("room");
        assert_eq!(b.connection.used(), 30);
        // Parts from before give nothing back: the pools stay right.
        drop(plugin_answer);
        assert_eq!(b.connection.used(), 30);
        // A part still growing after it counts from nothing again.
        still_arriving.hold(5).expect("room");
        assert_eq!(b.connection.used(), 35);
        drop((still_arriving, sent));
        assert_eq!((b.connection.used(), b.gateway.used()), (0, 0));
        // Buffers that outlive every handle of the call give back on drop.
        let call = CallBytes::new(b.clone());
        let kept = call.counted(Bytes::from(vec![2; 20])).expect("room");
        drop(call);
        assert_eq!(b.gateway.used(), 20);
        drop(kept);
        assert_eq!(b.gateway.used(), 0);
    }

    #[test]
    fn unbounded_reservations_never_fail() {
        let mut r = Reservation::new(None);
        r.hold(usize::MAX).expect("unbounded");
        assert_eq!(r.held(), usize::MAX);
    }
}
