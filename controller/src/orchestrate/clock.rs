//! Where the orchestration reads the time.

use std::fmt;

use jiff::Timestamp;

/// Where the orchestration reads the time: before each validation phase,
/// each decision and an abort, not once per step.
pub trait Clock: fmt::Debug + Send + Sync {
    /// The time now.
    fn now(&self) -> Timestamp;
}

/// The system clock (`run`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock stopped at a time (the simulator's step, tests).
impl Clock for Timestamp {
    fn now(&self) -> Timestamp {
        *self
    }
}
