//! [`Recorder`]: [`Hooks`] that pass every call on and remember it, so the
//! simulator can report, step by step, which hooks were called for which
//! cluster, whether the request said `aborting`, and what the plugin
//! answered.

use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use rollout_proto::v1alpha1::ValidationResult;

use rollout_controller::hooks::{
    Call, HookAnswer, HookCounters, HookCounts, HookError, HookKind, HookRequest, Hooks,
    RolloutRequest,
};

/// What a recorded call got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// `Initialize`, `BeginRollout` or `ProgressRollout` answered.
    Done,
    /// `ValidateRolloutCompletion` answered.
    Validation {
        /// The verdict.
        result: ValidationResult,
        /// The plugin's message.
        message: String,
        /// Its hint for the next poll.
        recheck_after: Option<Duration>,
    },
    /// `MutateManifestWork` answered.
    Mutation {
        /// The `ocm-rollout-mutated-by` trailer.
        mutated_by: Vec<String>,
        /// The `ocm-rollout-failed-open` trailer.
        failed_open: Vec<String>,
        /// The ManifestWork sent, as JSON.
        sent: Bytes,
        /// The ManifestWork answered, as JSON; `None` for "unchanged".
        answered: Option<Bytes>,
    },
    /// The call failed.
    Failed(HookError),
}

/// One hook call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// The hook.
    pub(crate) hook: HookKind,
    /// `cluster_name` (empty for `ProgressRollout` and `Initialize`).
    pub(crate) cluster: String,
    /// `cluster_index`.
    pub(crate) cluster_index: i32,
    /// `aborting`.
    pub(crate) aborting: bool,
    /// `desired_revision`.
    pub(crate) revision: String,
    /// The answer.
    pub(crate) answer: Recorded,
}

/// Hooks that call `H` and record every call: counts per hook, counts of
/// the calls whose request said `aborting`, and the calls since the last
/// [`Recorder::take`].
#[derive(Debug)]
pub struct Recorder<H> {
    inner: H,
    calls: HookCounters,
    aborting: HookCounters,
    log: Mutex<Vec<Record>>,
}

impl<H> Recorder<H> {
    /// Records the calls made through `inner`.
    pub fn new(inner: H) -> Recorder<H> {
        Recorder {
            inner,
            calls: HookCounters::default(),
            aborting: HookCounters::default(),
            log: Mutex::new(Vec::new()),
        }
    }

    /// Every call so far, per hook.
    pub(crate) fn counts(&self) -> HookCounts {
        self.calls.snapshot()
    }

    /// The calls so far whose request said `aborting = true`, per hook.
    pub(crate) fn aborting_counts(&self) -> HookCounts {
        self.aborting.snapshot()
    }

    /// The calls since the last take, in the order of a step made one at a
    /// time (the calls of a phase run concurrently and finish in any
    /// order): the calls before an abort, then those after it; in each,
    /// the validations, ProgressRollout, then cluster by cluster in rollout
    /// order, BeginRollout before MutateManifestWork.
    pub(crate) fn take(&self) -> Vec<Record> {
        let mut log = self
            .log
            .lock()
            .map(|mut log| std::mem::take(&mut *log))
            .unwrap_or_default();
        let phase = |hook: HookKind| match hook {
            HookKind::Initialize => 0,
            HookKind::ValidateRolloutCompletion => 1,
            HookKind::ProgressRollout => 2,
            HookKind::BeginRollout => 3,
            HookKind::MutateManifestWork => 4,
        };
        log.sort_by_key(|r| {
            let rank = phase(r.hook);
            // Each cluster's BeginRollout and MutateManifestWork together.
            (r.aborting, rank.min(3), r.cluster_index, rank)
        });
        log
    }

    fn record(&self, hook: HookKind, about: About, answer: Recorded) {
        self.calls.record(hook);
        if about.aborting {
            self.aborting.record(hook);
        }
        let record = Record {
            hook,
            cluster: about.cluster,
            cluster_index: about.cluster_index,
            aborting: about.aborting,
            revision: about.revision,
            answer,
        };
        if let Ok(mut log) = self.log.lock() {
            log.push(record);
        }
    }
}

/// The fields of a request the record keeps, taken before the request is
/// passed on: not the request itself, whose `rollout_status` holds every
/// cluster of the placement (copying it would cost as much as the call).
#[derive(Debug, Default)]
struct About {
    cluster: String,
    cluster_index: i32,
    aborting: bool,
    revision: String,
}

impl About {
    fn of(r: &RolloutRequest) -> About {
        About {
            cluster: r.cluster_name.clone(),
            cluster_index: r.cluster_index,
            aborting: r.aborting,
            revision: r.desired_revision.clone(),
        }
    }
}

impl Recorded {
    /// What the record keeps of `answer`; `sent` is the work a mutation call
    /// sent.
    fn of(answer: &Result<HookAnswer, HookError>, sent: Option<Bytes>) -> Recorded {
        match answer {
            Err(error) => Recorded::Failed(error.clone()),
            Ok(HookAnswer::Initialized(_) | HookAnswer::Done) => Recorded::Done,
            Ok(HookAnswer::Validated(response)) => Recorded::Validation {
                result: ValidationResult::try_from(response.result)
                    .unwrap_or(ValidationResult::Unspecified),
                message: response.message.clone(),
                recheck_after: response
                    .recheck_after
                    .and_then(|d| Duration::try_from(d).ok()),
            },
            Ok(HookAnswer::Mutated(mutation)) => Recorded::Mutation {
                mutated_by: mutation.mutated_by.clone(),
                failed_open: mutation.failed_open.clone(),
                sent: sent.unwrap_or_default(),
                answered: mutation.work.clone(),
            },
        }
    }
}

impl<H: Hooks> Hooks for Recorder<H> {
    async fn call(&self, call: Call<'_>, request: HookRequest) -> Result<HookAnswer, HookError> {
        let hook = request.kind();
        let about = request.rollout().map(About::of).unwrap_or_default();
        // A reference count, not a copy: kept to show what the plugin changed.
        let sent = match &request {
            HookRequest::MutateManifestWork(_, work) => Some(work.clone()),
            _ => None,
        };
        let result = self.inner.call(call, request).await;
        self.record(hook, about, Recorded::of(&result, sent));
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_controller::hooks::HookCalls;

    /// Answers every call; fails BeginRollout for `bad`.
    struct Fixed;

    impl Hooks for Fixed {
        async fn call(&self, _: Call<'_>, request: HookRequest) -> Result<HookAnswer, HookError> {
            Ok(match request {
                HookRequest::Initialize(_) => HookAnswer::Initialized(Default::default()),
                HookRequest::BeginRollout(r) if r.cluster_name == "bad" => {
                    return Err(HookError {
                        hook: HookKind::BeginRollout,
                        code: tonic::Code::Unavailable,
                        message: "plugin \"p\": down".into(),
                        origin: rollout_controller::hooks::Origin::Answer,
                    });
                }
                HookRequest::BeginRollout(_) | HookRequest::ProgressRollout(_) => HookAnswer::Done,
                HookRequest::ValidateRolloutCompletion(_) => {
                    HookAnswer::Validated(rollout_proto::v1alpha1::ValidateResponse {
                        result: ValidationResult::Inprogress as i32,
                        message: "soaking".into(),
                        recheck_after: Some(prost_types::Duration {
                            seconds: 0,
                            nanos: 300_000_000,
                        }),
                    })
                }
                HookRequest::MutateManifestWork(..) => {
                    HookAnswer::Mutated(rollout_controller::hooks::Mutation {
                        work: None,
                        mutated_by: vec!["traffic-weights".into()],
                        failed_open: Vec::new(),
                    })
                }
            })
        }
    }

    fn request(cluster: &str, aborting: bool) -> RolloutRequest {
        RolloutRequest {
            cluster_name: cluster.into(),
            cluster_index: 2,
            aborting,
            desired_revision: "r1".into(),
            ..RolloutRequest::default()
        }
    }

    #[tokio::test]
    async fn every_call_is_counted_and_logged() {
        let hooks = Recorder::new(Fixed);
        let trace = opentelemetry::Context::new();
        let call = Call {
            plugin: "p",
            trace: &trace,
        };
        hooks
            .begin_rollout(call, request("c1", false))
            .await
            .expect("ok");
        hooks
            .begin_rollout(call, request("bad", true))
            .await
            .expect_err("fails");
        hooks
            .validate_rollout_completion(call, request("c1", false))
            .await
            .expect("ok");
        hooks
            .mutate_manifest_work(call, request("c1", true), Bytes::new())
            .await
            .expect("ok");

        let counts = hooks.counts();
        assert_eq!(
            (
                counts.begin_rollout,
                counts.validate_rollout_completion,
                counts.mutate_manifest_work
            ),
            (2, 1, 1)
        );
        let aborting = hooks.aborting_counts();
        assert_eq!(
            (aborting.begin_rollout, aborting.mutate_manifest_work),
            (1, 1)
        );
        let log = hooks.take();
        assert_eq!(log.len(), 4);
        // In a step's order: the validation first, then the calls after
        // the abort (`aborting`).
        assert_eq!(log[1].cluster, "c1");
        assert!(
            matches!(&log[2].answer, Recorded::Failed(e) if e.code == tonic::Code::Unavailable)
        );
        assert_eq!(
            log[0].answer,
            Recorded::Validation {
                result: ValidationResult::Inprogress,
                message: "soaking".into(),
                recheck_after: Some(Duration::from_millis(300)),
            }
        );
        assert_eq!(
            (
                log[3].cluster.as_str(),
                log[3].cluster_index,
                log[3].aborting
            ),
            ("c1", 2, true)
        );
        assert!(hooks.take().is_empty(), "taken");
    }
}
