//! Returning memory to the OS once a burst of request buffers is freed.
//!
//! The gateway's allocator (mimalloc) returns freed memory to the OS lazily:
//! only when it frees a page of its own at least its purge delay (1 s) after
//! that memory was freed. A gateway left idle after a hostile client let go
//! would keep the client's buffers resident. [`soon`] makes such page frees
//! happen a little after the purge delay (a few times, as the allocator
//! purges part of its memory each time), so the memory goes back whether or
//! not other calls come.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

/// After the allocator's purge delay (1 s), with a margin.
const AFTER: Duration = Duration::from_millis(1500);

/// Larger than the allocator's large pages: an allocation of its own page,
/// freed at once. Never touched, so never made resident.
const NUDGE_BYTES: usize = 64 * 1024 * 1024;

/// Whether a nudging task runs, and how many nudges it has left.
static SCHEDULED: AtomicBool = AtomicBool::new(false);
static ROUNDS_LEFT: AtomicU8 = AtomicU8::new(0);

/// Nudges per call of [`soon`]: memory freed while the first waits (a
/// connection's calls end over a moment) is purged by the next.
const ROUNDS: u8 = 3;

/// Schedules nudges over the next few seconds (one task at a time does
/// them; a call while it runs gives it [`ROUNDS`] more). A no-op outside a
/// Tokio runtime.
pub(crate) fn soon() {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    ROUNDS_LEFT.store(ROUNDS, Ordering::Release);
    if SCHEDULED.swap(true, Ordering::AcqRel) {
        return;
    }
    runtime.spawn(async {
        loop {
            tokio::time::sleep(AFTER).await;
            let page: Vec<u8> = Vec::with_capacity(NUDGE_BYTES);
            drop(std::hint::black_box(page));
            if ROUNDS_LEFT.fetch_sub(1, Ordering::AcqRel) <= 1 {
                SCHEDULED.store(false, Ordering::Release);
                // A call between the last round and now found SCHEDULED set.
                if ROUNDS_LEFT.load(Ordering::Acquire) == 0
                    || SCHEDULED.swap(true, Ordering::AcqRel)
                {
                    return;
                }
            }
        }
    });
}
