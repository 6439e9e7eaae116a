//! A tiny source of jitter for the layers: xorshift64* per thread, seeded from
//! the clock and a process-wide counter. Not for anything that needs to be
//! unpredictable; the pure parts take their randomness as an argument.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A number in `[0, 1)`.
pub(crate) fn random() -> f64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(seed());
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        // The top 53 bits of the output, as a fraction.
        (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    })
}

/// A non-zero seed, different per thread even when the clock is coarse.
fn seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    // splitmix64 of both, so that neighbouring seeds give unrelated streams.
    let mut z = nanos ^ count.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    if z == 0 { 0x9e37_79b9_7f4a_7c15 } else { z }
}

#[cfg(test)]
mod tests {
    #[test]
    fn random_is_in_the_unit_interval_and_varies() {
        let values: Vec<f64> = (0..1_000).map(|_| super::random()).collect();
        assert!(values.iter().all(|v| (0.0..1.0).contains(v)));
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert!((0.4..0.6).contains(&mean), "mean {mean}");
        assert!(values.windows(2).all(|w| w[0] != w[1]));
    }
}
