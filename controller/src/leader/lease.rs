//! The pure core of leader election: what to write to the Lease, or whom to
//! follow, from the Lease as read, when this replica first saw it as it is,
//! and the time. No I/O and no clock.
//!
//! A Lease whose holder has not renewed it for `leaseDurationSeconds` may be
//! taken. "Not renewed" is judged on this replica's clock, from when it
//! first saw the Lease's current version (`observed_since`), not from the
//! `renewTime` the holder wrote: two replicas' clocks may disagree, and a
//! replica must not take a live lease because its own clock runs ahead.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// The fields of a `coordination.k8s.io/v1` Lease that election uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseRecord {
    /// `holderIdentity`; `None` (or empty) when released.
    pub(crate) holder: Option<String>,
    /// `leaseDurationSeconds`.
    pub(crate) duration: Duration,
    /// `acquireTime`: when the holder took it.
    pub(crate) acquire_time: Option<Timestamp>,
    /// `renewTime`: when the holder last renewed it.
    pub(crate) renew_time: Option<Timestamp>,
    /// `leaseTransitions`: how many times the holder changed.
    pub(crate) transitions: i32,
}

impl LeaseRecord {
    /// The holder, if the lease is held.
    pub(crate) fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|h| !h.is_empty())
    }
}

/// What to do after reading the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Write this record (create the Lease if there is none, else update
    /// it guarded by the version read): this replica leads once the write
    /// succeeds.
    Write(LeaseRecord),
    /// Another replica holds a live lease; it may be taken from `until` on
    /// unless renewed before.
    Follow {
        /// The holder.
        holder: String,
        /// When the lease expires on this replica's clock.
        until: Timestamp,
    },
}

/// The decision of `identity` at `now` about `current` (the Lease as read;
/// `None` if it does not exist), first seen as it is at `observed_since`,
/// asking for leases of `duration`.
pub(crate) fn decide(
    current: Option<&LeaseRecord>,
    observed_since: Timestamp,
    identity: &str,
    duration: Duration,
    now: Timestamp,
) -> Decision {
    let fresh = |transitions| LeaseRecord {
        holder: Some(identity.to_owned()),
        duration,
        acquire_time: Some(now),
        renew_time: Some(now),
        transitions,
    };
    let Some(current) = current else {
        return Decision::Write(fresh(0));
    };
    match current.holder() {
        // Renew: same acquire time and transitions.
        Some(holder) if holder == identity => Decision::Write(LeaseRecord {
            duration,
            renew_time: Some(now),
            ..current.clone()
        }),
        Some(holder) => {
            let lasts = SignedDuration::try_from(current.duration).unwrap_or(SignedDuration::MAX);
            let until = observed_since.checked_add(lasts).unwrap_or(Timestamp::MAX);
            if now < until {
                Decision::Follow {
                    holder: holder.to_owned(),
                    until,
                }
            } else {
                Decision::Write(fresh(current.transitions.saturating_add(1)))
            }
        }
        // Released: take it at once.
        None => Decision::Write(fresh(current.transitions.saturating_add(1))),
    }
}

/// The record that releases `current` (on a clean shutdown): no holder, so
/// the next candidate takes it at once instead of waiting for it to expire.
pub(crate) fn released(current: &LeaseRecord) -> LeaseRecord {
    LeaseRecord {
        holder: None,
        duration: Duration::from_secs(1),
        ..current.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).expect("time")
    }

    const D: Duration = Duration::from_secs(15);

    fn held_by(holder: &str, renewed: i64) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.into()),
            duration: D,
            acquire_time: Some(at(0)),
            renew_time: Some(at(renewed)),
            transitions: 3,
        }
    }

    #[test]
    fn a_missing_lease_is_created() {
        assert_eq!(
            decide(None, at(5), "a", D, at(5)),
            Decision::Write(LeaseRecord {
                holder: Some("a".into()),
                duration: D,
                acquire_time: Some(at(5)),
                renew_time: Some(at(5)),
                transitions: 0,
            })
        );
    }

    #[test]
    fn the_holder_renews_keeping_acquire_time_and_transitions() {
        let Decision::Write(record) = decide(Some(&held_by("a", 2)), at(2), "a", D, at(4)) else {
            panic!("renews");
        };
        assert_eq!(record.renew_time, Some(at(4)));
        assert_eq!(record.acquire_time, Some(at(0)));
        assert_eq!(record.transitions, 3);
    }

    #[test]
    fn a_live_lease_is_followed_until_it_expires_on_our_clock() {
        // Renewed (by its own clock) long ago, but first seen like this at 10:
        // it lasts until 25 here.
        let lease = held_by("b", -100);
        assert_eq!(
            decide(Some(&lease), at(10), "a", D, at(24)),
            Decision::Follow {
                holder: "b".into(),
                until: at(25)
            }
        );
        let Decision::Write(taken) = decide(Some(&lease), at(10), "a", D, at(25)) else {
            panic!("expired at exactly its end");
        };
        assert_eq!(
            (
                taken.holder.as_deref(),
                taken.transitions,
                taken.acquire_time
            ),
            (Some("a"), 4, Some(at(25)))
        );
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let lease = released(&held_by("b", 0));
        assert_eq!(lease.holder(), None);
        let Decision::Write(taken) = decide(Some(&lease), at(1), "a", D, at(1)) else {
            panic!("taken");
        };
        assert_eq!((taken.holder(), taken.transitions), (Some("a"), 4));
        // An empty holder is released too.
        let empty = LeaseRecord {
            holder: Some(String::new()),
            ..held_by("b", 0)
        };
        assert!(matches!(
            decide(Some(&empty), at(1), "a", D, at(1)),
            Decision::Write(_)
        ));
    }
}
