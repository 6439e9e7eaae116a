//! Leader election over a `coordination.k8s.io/v1` Lease, so that two or
//! more replicas of `rollout-controller run` can run (and be rolled with
//! `RollingUpdate`) while exactly one reconciles.
//!
//! Neither kube 5 nor kube-runtime 5 has leader election. Of the crates,
//! `kube-leader-election` is built on kube 4 (a second kube in the build),
//! and `kube-lease-manager`, on kube 5, renews from a task of its own on its
//! own schedule. Election here is small and follows client-go's rules
//! (lease duration 15 s, renew deadline 10 s, retry period 2 s by default):
//! the decision is pure ([`lease::decide`]), the I/O is three calls of
//! kube's own `Api<Lease>` (get, create, replace guarded by the
//! `resourceVersion` read, so two candidates never both win), and
//! [`run_when_leading`] ties the reconciling to the lease directly:
//!
//! - a candidate tries every retry period; a Lease held by another replica
//!   is taken once it has not changed for its `leaseDurationSeconds` on
//!   this replica's clock, or at once when released;
//! - the leader renews every retry period; the moment it sees another
//!   holder, or has not renewed for the renew deadline, it drops the
//!   controller's future, which stops every reconcile at once, and becomes
//!   a candidate again;
//! - when the controller stops by itself (SIGTERM), the lease is released
//!   so that another replica takes over without waiting for it to expire.
//!
//! The renew deadline is shorter than the lease duration, so a leader that
//! cannot renew stops before any other replica may take the lease.

pub(crate) mod lease;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use thiserror::Error;

use crate::metrics::ControllerMetrics;
use crate::probes::Readiness;
use lease::{Decision, LeaseRecord};

/// The timings of the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a lease lasts without renewal (`leaseDurationSeconds`,
    /// whole seconds).
    pub lease_duration: Duration,
    /// How long the leader goes on without a successful renewal before it
    /// stops reconciling.
    pub renew_deadline: Duration,
    /// How often a candidate tries and the leader renews.
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        LeaseTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Timings that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TimingsError {
    /// The lease duration is under a second (the Lease counts seconds).
    #[error("the lease duration must be at least 1s, not {0:?}")]
    LeaseTooShort(Duration),
    /// The leader would still reconcile after another replica may take over.
    #[error("the renew deadline ({renew:?}) must be shorter than the lease duration ({lease:?})")]
    RenewNotBeforeExpiry {
        /// The renew deadline.
        renew: Duration,
        /// The lease duration.
        lease: Duration,
    },
    /// The leader would not try to renew before its deadline.
    #[error("the retry period ({retry:?}) must be shorter than the renew deadline ({renew:?})")]
    RetryNotBeforeDeadline {
        /// The retry period.
        retry: Duration,
        /// The renew deadline.
        renew: Duration,
    },
}

impl LeaseTimings {
    /// Checks that the timings can work (see [`TimingsError`]).
    pub fn check(&self) -> Result<(), TimingsError> {
        if self.lease_duration < Duration::from_secs(1) {
            return Err(TimingsError::LeaseTooShort(self.lease_duration));
        }
        if self.renew_deadline >= self.lease_duration {
            return Err(TimingsError::RenewNotBeforeExpiry {
                renew: self.renew_deadline,
                lease: self.lease_duration,
            });
        }
        if self.retry_period.is_zero() || self.retry_period >= self.renew_deadline {
            return Err(TimingsError::RetryNotBeforeDeadline {
                retry: self.retry_period,
                renew: self.renew_deadline,
            });
        }
        Ok(())
    }
}

/// Where the Lease is and who this replica is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's identity, unique among the replicas and across
    /// restarts ([`identity`]).
    pub identity: String,
    /// The timings.
    pub timings: LeaseTimings,
}

/// A unique identity from `base` (the pod name): `base_<time in hex>`, so a
/// restarted pod of the same name is a new candidate, not the old holder.
pub fn identity(base: &str) -> String {
    let stamp = Timestamp::now().as_nanosecond();
    format!("{base}_{:x}_{:x}", stamp, std::process::id())
}

/// A call to the Lease API failed.
#[derive(Debug, Error)]
#[error("{action} Lease {namespace}/{name}: {source}")]
pub struct LeaseError {
    /// What was being done.
    pub(crate) action: &'static str,
    /// The Lease's namespace.
    pub(crate) namespace: String,
    /// The Lease's name.
    pub(crate) name: String,
    /// The client's error.
    #[source]
    pub(crate) source: kube::Error,
}

/// Why one attempt to acquire or renew the lease failed.
#[derive(Debug, Error)]
enum AttemptError {
    /// The API server refused or failed the read or write.
    #[error(transparent)]
    Lease(LeaseError),
    /// The API server did not answer within the renew deadline.
    #[error("no answer within {0:?}")]
    NoAnswer(Duration),
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This replica holds the lease.
    Leading,
    /// Another replica does (or won the race to write it).
    Following {
        /// The holder, when known.
        holder: Option<String>,
    },
}

/// One replica's side of the election: the Lease API and what it last saw.
pub struct LeaderElection {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The version of the Lease last read, and when it was first seen.
    observed: Option<(String, Timestamp)>,
    /// The record and version this replica last wrote or read, for release.
    last: Option<(LeaseRecord, Option<String>)>,
}

impl std::fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElection")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn record_of(lease: &Lease) -> LeaseRecord {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseRecord {
        holder: spec.holder_identity,
        duration: Duration::from_secs(
            u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
        ),
        acquire_time: spec.acquire_time.map(|t| t.0),
        renew_time: spec.renew_time.map(|t| t.0),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

fn lease_of(config: &LeaseConfig, record: &LeaseRecord, version: Option<String>) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(config.name.clone()),
            namespace: Some(config.namespace.clone()),
            resource_version: version,
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: record.holder.clone(),
            lease_duration_seconds: Some(
                i32::try_from(record.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: record.acquire_time.map(MicroTime),
            renew_time: record.renew_time.map(MicroTime),
            lease_transitions: Some(record.transitions),
            ..LeaseSpec::default()
        }),
    }
}

/// Whether the API refused a write because another one got there first.
fn lost_race(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.is_conflict() || status.is_already_exists())
}

impl LeaderElection {
    /// The election of `config` over `client`.
    pub fn new(client: Client, config: LeaseConfig) -> LeaderElection {
        LeaderElection {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            last: None,
        }
    }

    fn error(&self, action: &'static str, source: kube::Error) -> LeaseError {
        LeaseError {
            action,
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    /// Reads the Lease and, as [`lease::decide`] says, creates, takes or
    /// renews it, at `now`.
    pub async fn try_acquire_or_renew(&mut self, now: Timestamp) -> Result<Attempt, LeaseError> {
        let name = self.config.name.clone();
        let read = self
            .api
            .get_opt(&name)
            .await
            .map_err(|e| self.error("reading", e))?;
        let version = read
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone());
        let record = read.as_ref().map(record_of);
        // A Lease's expiry runs from when this replica first saw its version.
        let since = match (&self.observed, &version) {
            (Some((seen, since)), Some(v)) if seen == v => *since,
            _ => now,
        };
        self.observed = version.clone().map(|v| (v, since));
        let timings = self.config.timings;
        match lease::decide(
            record.as_ref(),
            since,
            &self.config.identity,
            timings.lease_duration,
            now,
        ) {
            Decision::Follow { holder, .. } => {
                self.last = None;
                Ok(Attempt::Following {
                    holder: Some(holder),
                })
            }
            Decision::Write(new) => {
                let lease = lease_of(&self.config, &new, version.clone());
                let written = match &version {
                    None => self.api.create(&PostParams::default(), &lease).await,
                    Some(_) => {
                        self.api
                            .replace(&name, &PostParams::default(), &lease)
                            .await
                    }
                };
                match written {
                    Ok(stored) => {
                        let stored_version = stored.metadata.resource_version.clone();
                        self.observed = stored_version.clone().map(|v| (v, now));
                        self.last = Some((new, stored_version));
                        Ok(Attempt::Leading)
                    }
                    Err(error) if lost_race(&error) => {
                        self.last = None;
                        Ok(Attempt::Following { holder: None })
                    }
                    Err(error) => Err(self.error("writing", error)),
                }
            }
        }
    }

    /// Gives the lease up, if this replica holds it as last written: the
    /// next candidate takes it at once.
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        let Some((record, version)) = self.last.take() else {
            return Ok(());
        };
        let lease = lease_of(&self.config, &lease::released(&record), version);
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            // Someone else wrote it since: nothing of ours to release.
            Err(error) if lost_race(&error) => Ok(()),
            Err(error) => Err(self.error("releasing", error)),
        }
    }

    /// One attempt, bounded by the renew deadline (an API server that does
    /// not answer must not keep a leader reconciling).
    async fn attempt(&mut self) -> Result<Attempt, AttemptError> {
        let deadline = self.config.timings.renew_deadline;
        match tokio::time::timeout(deadline, self.try_acquire_or_renew(Timestamp::now())).await {
            Ok(Ok(attempt)) => Ok(attempt),
            Ok(Err(error)) => Err(AttemptError::Lease(error)),
            Err(_) => Err(AttemptError::NoAnswer(deadline)),
        }
    }
}

/// Runs `lead()`'s future only while this replica holds the lease (see the
/// module documentation): a candidate until it wins, then the future,
/// dropped the moment the lease is lost, then a candidate again. Returns
/// when `shutdown` fires while a candidate, or when the future ends by
/// itself (then the lease is released). `readiness` is true while a
/// candidate (a follower is ready to take over); while leading it is the
/// controller's to set. `metrics` shows whether this replica leads.
pub async fn run_when_leading<F, Fut>(
    mut election: LeaderElection,
    metrics: Arc<ControllerMetrics>,
    readiness: Readiness,
    shutdown: impl Future<Output = ()>,
    mut lead: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let timings = election.config.timings;
    let lease = format!("{}/{}", election.config.namespace, election.config.name);
    let identity = election.config.identity.clone();
    let mut shutdown = pin!(shutdown);
    loop {
        // A candidate.
        readiness.set(true);
        let mut following: Option<String> = None;
        loop {
            let attempt = tokio::select! {
                () = &mut shutdown => return,
                attempt = election.attempt() => attempt,
            };
            match attempt {
                Ok(Attempt::Leading) => break,
                Ok(Attempt::Following { holder }) => {
                    if holder.is_some() && holder != following {
                        tracing::info!(lease, holder = holder.as_deref(), "following the leader");
                        following = holder;
                    }
                }
                Err(error) => tracing::warn!(lease, %error, "leader election attempt failed"),
            }
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(timings.retry_period) => {}
            }
        }

        // The leader.
        tracing::info!(lease, identity, "leading: reconciling");
        readiness.set(false);
        metrics.set_leader(true);
        let mut work = Box::pin(lead());
        let mut renewed = Instant::now();
        let lost = loop {
            tokio::select! {
                () = &mut work => {
                    metrics.set_leader(false);
                    if let Err(error) = election.release().await {
                        tracing::warn!(lease, %error, "releasing the lease failed");
                    } else {
                        tracing::info!(lease, "lease released");
                    }
                    return;
                }
                () = tokio::time::sleep(timings.retry_period) => {}
            }
            // The controller goes on while the renewal is under way; only
            // its outcome stops it.
            let attempt = tokio::select! {
                () = &mut work => {
                    metrics.set_leader(false);
                    if let Err(error) = election.release().await {
                        tracing::warn!(lease, %error, "releasing the lease failed");
                    }
                    return;
                }
                attempt = election.attempt() => attempt,
            };
            match attempt {
                Ok(Attempt::Leading) => renewed = Instant::now(),
                Ok(Attempt::Following { holder }) => {
                    break format!(
                        "the lease is held by {}",
                        holder.as_deref().unwrap_or("another replica")
                    );
                }
                Err(error) => {
                    tracing::warn!(lease, %error, "renewing the lease failed");
                    if renewed.elapsed() >= timings.renew_deadline {
                        break format!("not renewed within {:?}: {error}", timings.renew_deadline);
                    }
                }
            }
        };
        // Dropping the controller's future stops every reconcile at once.
        drop(work);
        metrics.set_leader(false);
        tracing::warn!(lease, reason = lost, "lost the lease: stopped reconciling");
    }
}
