//! The source of jitter for the layers: tower's `HasherRng`, one per thread.
//! Not for anything that needs to be unpredictable; the pure parts take
//! their randomness as an argument.
//!
//! Its draw costs about 13 ns (a SipHash of a counter) against about 3 ns for
//! a xorshift64* (50 million draws each, release build, a 2-core machine).
//! The circuit layer draws once per call, so those 10 ns a call do not pay
//! for a generator of our own.

use std::cell::RefCell;

use tower::util::rng::{HasherRng, Rng as _};

/// A number in `[0, 1)`.
pub(crate) fn random() -> f64 {
    thread_local! {
        static RNG: RefCell<HasherRng> = RefCell::new(HasherRng::new());
    }
    RNG.with(|rng| rng.borrow_mut().next_f64())
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

    #[test]
    fn threads_draw_different_streams() {
        let draws = || (0..8).map(|_| super::random()).collect::<Vec<_>>();
        let other = std::thread::spawn(draws).join().expect("thread");
        assert_ne!(draws(), other);
    }
}
