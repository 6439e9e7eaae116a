//! The merge rules of fan-out (docs/plugin-api.md §2): how the answers of a pipeline's
//! members become the one answer the controller sees.
//!
//! Pure functions over [`Member`] outcomes, in pipeline order. The gateway
//! calls the members, classifies each answer into a [`Outcome`], and asks these
//! functions for the result.

use std::time::Duration;

use rollout_proto::v1alpha1::{
    Hook, InitializeResponse, RolloutStateDetail, ValidateResponse, ValidationResult,
};
use tonic::Code;

/// Why a member failed: its code and message, as the plugin (or the gateway on
/// its behalf: deadline, circuit, bad answer) reported them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: Code,
    pub message: String,
}

/// One member's outcome for one hook.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<T> {
    /// The member answered.
    Answered(T),
    /// The member does not implement the hook (it answered UNIMPLEMENTED, or its
    /// `InitializeResponse.hooks` leaves the hook out): neutral result.
    Skipped,
    /// The member failed and its failure policy is `Ignore`: dropped from the merge.
    FailedOpen(Failure),
    /// The member failed and its failure policy is `Fail`: the call fails.
    Failed(Failure),
}

/// A member's name and outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct Member<T> {
    pub name: String,
    pub outcome: Outcome<T>,
}

/// The merged answer, with the members that failed open (for the
/// `ocm-rollout-failed-open` trailer).
#[derive(Debug, Clone, PartialEq)]
pub struct Merged<T> {
    pub value: T,
    pub failed_open: Vec<String>,
}

/// The call failed because at least one `Fail` member failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.message())]
pub struct MergeError {
    /// Every failing `Fail` member, in pipeline order.
    pub failures: Vec<(String, Failure)>,
}

impl MergeError {
    /// The code of the call: that of the first failing member in pipeline order.
    pub fn code(&self) -> Code {
        self.failures
            .first()
            .map(|(_, f)| f.code)
            .unwrap_or(Code::Internal)
    }

    /// `plugin "a": message; plugin "b": message`: every failing member named.
    pub fn message(&self) -> String {
        let mut out = String::new();
        for (i, (name, failure)) in self.failures.iter().enumerate() {
            if i > 0 {
                out.push_str("; ");
            }
            out.push_str(&prefixed(name, &failure.message));
        }
        out
    }
}

/// The message a plugin's error carries through the gateway: `plugin "NAME": message`.
pub fn prefixed(plugin: &str, message: &str) -> String {
    format!("plugin \"{plugin}\": {message}")
}

/// Outcomes sorted by kind, each list in pipeline order.
struct Partitioned<T> {
    answered: Vec<(String, T)>,
    failed_open: Vec<String>,
    failures: Vec<(String, Failure)>,
}

fn partition<T>(members: Vec<Member<T>>) -> Partitioned<T> {
    let mut p = Partitioned {
        answered: Vec::with_capacity(members.len()),
        failed_open: Vec::new(),
        failures: Vec::new(),
    };
    for m in members {
        match m.outcome {
            Outcome::Answered(v) => p.answered.push((m.name, v)),
            Outcome::Skipped => {}
            Outcome::FailedOpen(_) => p.failed_open.push(m.name),
            Outcome::Failed(f) => p.failures.push((m.name, f)),
        }
    }
    p
}

/// BeginRollout, ProgressRollout: OK unless a `Fail` member failed.
pub fn merge_ack(members: Vec<Member<()>>) -> Result<Merged<()>, MergeError> {
    let Partitioned {
        failed_open,
        failures,
        ..
    } = partition(members);
    if !failures.is_empty() {
        return Err(MergeError { failures });
    }
    Ok(Merged {
        value: (),
        failed_open,
    })
}

/// ValidateRolloutCompletion.
///
/// With `single` (the target is one plugin, not a pipeline) the plugin's answer
/// passes through unchanged. Otherwise: FAILED if any member says FAILED, else
/// INPROGRESS if any says INPROGRESS, else SUCCEEDED (skipped members count as
/// SUCCEEDED, failed-open members do not vote). A member answering
/// UNSPECIFIED counts as INPROGRESS: an answer that is not a verdict must not
/// promote a cluster. The message joins the voters' non-empty messages as
/// `NAME: message; NAME: message`; `recheck_after` is the smallest among the
/// INPROGRESS members.
pub fn merge_validate(
    single: bool,
    members: Vec<Member<ValidateResponse>>,
) -> Result<Merged<ValidateResponse>, MergeError> {
    let Partitioned {
        answered,
        failed_open,
        failures,
    } = partition(members);
    if !failures.is_empty() {
        return Err(MergeError { failures });
    }
    if single {
        let value = answered
            .into_iter()
            .next()
            .map(|(_, v)| v)
            .unwrap_or(ValidateResponse {
                result: ValidationResult::Succeeded as i32,
                message: String::new(),
                recheck_after: None,
            });
        return Ok(Merged { value, failed_open });
    }
    let mut any_failed = false;
    let mut any_in_progress = false;
    let mut recheck: Option<prost_types::Duration> = None;
    let mut parts: Vec<(&str, &str)> = Vec::new();
    for (name, answer) in &answered {
        match ValidationResult::try_from(answer.result).unwrap_or(ValidationResult::Unspecified) {
            ValidationResult::Failed => any_failed = true,
            ValidationResult::Succeeded => {}
            ValidationResult::Inprogress | ValidationResult::Unspecified => {
                any_in_progress = true;
                if let Some(r) = &answer.recheck_after
                    && recheck
                        .as_ref()
                        .is_none_or(|cur| as_duration(r) < as_duration(cur))
                {
                    recheck = Some(*r);
                }
            }
        }
        if !answer.message.is_empty() {
            parts.push((name, &answer.message));
        }
    }
    let message = join_bounded(&parts, MAX_JOINED_MESSAGE_BYTES);
    let result = if any_failed {
        ValidationResult::Failed
    } else if any_in_progress {
        ValidationResult::Inprogress
    } else {
        ValidationResult::Succeeded
    };
    Ok(Merged {
        value: ValidateResponse {
            result: result as i32,
            message,
            recheck_after: if result == ValidationResult::Inprogress {
                recheck
            } else {
                None
            },
        },
        failed_open,
    })
}

/// Initialize. With `single` the plugin's answer passes through unchanged,
/// and a plugin that did not answer has failed whatever its failure policy:
/// there is no neutral answer to make up for it (a made-up name and an empty
/// list would read as "every hook"). For a pipeline: `name` is the pipeline's, `version` lists the members as
/// `NAME=VERSION,…`, `hooks` is the union of the members' hooks, spelled
/// out (a member with an empty list implements all), and `state_detail` is
/// `COUNTS` only when every member declared `COUNTS`, `FULL` otherwise: a
/// member that wants the list (or did not say, or failed open or answered
/// UNIMPLEMENTED, so its wish is unknown) must be able to get it. The gateway drops the list for each
/// counts-only member on its own.
pub fn merge_initialize(
    pipeline: &str,
    single: bool,
    members: Vec<Member<InitializeResponse>>,
) -> Result<Merged<InitializeResponse>, MergeError> {
    let members_len = members.len();
    if single && let [only] = members.as_slice() {
        return match &only.outcome {
            Outcome::Answered(value) => Ok(Merged {
                value: value.clone(),
                failed_open: Vec::new(),
            }),
            Outcome::FailedOpen(f) | Outcome::Failed(f) => Err(MergeError {
                failures: vec![(only.name.clone(), f.clone())],
            }),
            Outcome::Skipped => Err(MergeError {
                failures: vec![(
                    only.name.clone(),
                    Failure {
                        code: Code::Internal,
                        message: "Initialize was not answered".into(),
                    },
                )],
            }),
        };
    }
    let Partitioned {
        answered,
        failed_open,
        failures,
    } = partition(members);
    if !failures.is_empty() {
        return Err(MergeError { failures });
    }
    let mut implemented = [false; Hook::ALL.len()];
    let mut versions = Vec::with_capacity(answered.len());
    // Every member answered (none failed open or said UNIMPLEMENTED), and
    // each declared counts only.
    let counts_only = answered.len() == members_len
        && members_len > 0
        && answered
            .iter()
            .all(|(_, a)| a.state_detail() == RolloutStateDetail::Counts);
    for (name, answer) in &answered {
        versions.push(format!("{name}={}", answer.version));
        for (i, hook) in Hook::ALL.iter().enumerate() {
            if answer.hooks.is_empty() || answer.hooks.contains(&(*hook as i32)) {
                implemented[i] = true;
            }
        }
    }
    let hooks = Hook::ALL
        .iter()
        .zip(implemented)
        .filter(|(_, on)| *on)
        .map(|(h, _)| *h as i32)
        .collect();
    Ok(Merged {
        value: InitializeResponse {
            name: pipeline.to_string(),
            version: versions.join(","),
            hooks,
            state_detail: if counts_only {
                RolloutStateDetail::Counts
            } else {
                RolloutStateDetail::Full
            }
            .into(),
        },
        failed_open,
    })
}

/// The most bytes of members' messages a pipeline's validation joins: the
/// members share it fairly (a short message is kept whole, the long ones
/// are cut to equal parts), so two members answering with multi-MiB reasons
/// cannot make an answer over the gateway's message limit.
pub const MAX_JOINED_MESSAGE_BYTES: usize = 64 * 1024;

/// `NAME: message; NAME: message`, at most `budget` bytes of messages
/// (names and separators besides): each member's share is the budget left
/// divided among the members left, shortest first, and a message over its
/// share is cut on a character boundary and marked `… [N bytes cut]`, the
/// mark within the share.
pub fn join_bounded(parts: &[(&str, &str)], budget: usize) -> String {
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| parts[i].1.len());
    let mut shares = vec![0; parts.len()];
    let mut left = budget;
    for (k, &i) in order.iter().enumerate() {
        let share = (left / (parts.len() - k)).min(parts[i].1.len());
        shares[i] = share;
        left -= share;
    }
    let mut out = String::new();
    for (i, (name, message)) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        out.push_str(name);
        out.push_str(": ");
        out.push_str(&cut_to(message, shares[i]));
    }
    out
}

pub use rollout_wire::cut_to;

/// A protobuf duration as a comparable std duration (negative counts as zero).
pub fn as_duration(d: &prost_types::Duration) -> Duration {
    if d.seconds < 0 || d.nanos < 0 {
        return Duration::ZERO;
    }
    Duration::new(d.seconds as u64, d.nanos as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(result: ValidationResult, message: &str, recheck_secs: Option<i64>) -> ValidateResponse {
        ValidateResponse {
            result: result as i32,
            message: message.to_string(),
            recheck_after: recheck_secs.map(|s| prost_types::Duration {
                seconds: s,
                nanos: 0,
            }),
        }
    }

    fn m<T>(name: &str, outcome: Outcome<T>) -> Member<T> {
        Member {
            name: name.to_string(),
            outcome,
        }
    }

    fn fail(code: Code, msg: &str) -> Failure {
        Failure {
            code,
            message: msg.to_string(),
        }
    }

    use ValidationResult::{Failed as F, Inprogress as I, Succeeded as S};

    #[test]
    fn validate_aggregates_every_combination_of_two_votes() {
        // (a, b) → merged: FAILED dominates, then INPROGRESS, then SUCCEEDED.
        let table = [
            (S, S, S),
            (S, I, I),
            (S, F, F),
            (I, S, I),
            (I, I, I),
            (I, F, F),
            (F, S, F),
            (F, I, F),
            (F, F, F),
        ];
        for (a, b, want) in table {
            let got = merge_validate(
                false,
                vec![
                    m("a", Outcome::Answered(v(a, "", None))),
                    m("b", Outcome::Answered(v(b, "", None))),
                ],
            )
            .expect("no failures");
            assert_eq!(got.value.result, want as i32, "{a:?} + {b:?}");
        }
    }

    #[test]
    fn validate_skipped_counts_as_succeeded_and_failed_open_does_not_vote() {
        let got = merge_validate(
            false,
            vec![
                m("a", Outcome::Skipped),
                m("b", Outcome::FailedOpen(fail(Code::Unavailable, "down"))),
            ],
        )
        .expect("ok");
        assert_eq!(got.value.result, S as i32);
        assert_eq!(got.failed_open, vec!["b".to_string()]);

        let got = merge_validate(
            false,
            vec![
                m("a", Outcome::Answered(v(I, "soaking", Some(5)))),
                m("b", Outcome::FailedOpen(fail(Code::Unavailable, "down"))),
            ],
        )
        .expect("ok");
        assert_eq!(got.value.result, I as i32);
    }

    #[test]
    fn validate_joins_messages_and_takes_smallest_recheck_of_in_progress_members() {
        let got = merge_validate(
            false,
            vec![
                m("a", Outcome::Answered(v(I, "soak 10s left", Some(10)))),
                m("b", Outcome::Answered(v(S, "", Some(1)))),
                m("c", Outcome::Answered(v(I, "waiting for job", Some(4)))),
            ],
        )
        .expect("ok");
        assert_eq!(got.value.result, I as i32);
        assert_eq!(got.value.message, "a: soak 10s left; c: waiting for job");
        assert_eq!(got.value.recheck_after.map(|d| d.seconds), Some(4));
    }

    #[test]
    fn validate_unspecified_counts_as_in_progress_in_a_pipeline() {
        let got = merge_validate(
            false,
            vec![m(
                "a",
                Outcome::Answered(ValidateResponse {
                    result: ValidationResult::Unspecified as i32,
                    ..Default::default()
                }),
            )],
        )
        .expect("ok");
        assert_eq!(got.value.result, I as i32);
    }

    #[test]
    fn validate_single_plugin_passes_through_unchanged() {
        let answer = v(I, "raw message", Some(7));
        let got =
            merge_validate(true, vec![m("a", Outcome::Answered(answer.clone()))]).expect("ok");
        assert_eq!(got.value, answer);
    }

    #[test]
    fn fail_members_fail_the_call_naming_each_and_keeping_the_first_code() {
        let err = merge_ack(vec![
            m("a", Outcome::Answered(())),
            m(
                "b",
                Outcome::Failed(fail(Code::FailedPrecondition, "not ready")),
            ),
            m(
                "c",
                Outcome::Failed(fail(Code::Unavailable, "connection refused")),
            ),
        ])
        .expect_err("must fail");
        assert_eq!(err.code(), Code::FailedPrecondition);
        assert_eq!(
            err.message(),
            "plugin \"b\": not ready; plugin \"c\": connection refused"
        );
    }

    #[test]
    fn ack_succeeds_without_failed_open_members() {
        let got = merge_ack(vec![
            m("a", Outcome::FailedOpen(fail(Code::Unavailable, "down"))),
            m("b", Outcome::Skipped),
            m("c", Outcome::Answered(())),
        ])
        .expect("ok");
        assert_eq!(got.failed_open, vec!["a".to_string()]);
    }

    #[test]
    fn joined_messages_share_a_bound_fairly_and_say_what_was_cut() {
        let big = "x".repeat(9 * 1024 * 1024);
        let members = vec![
            m("a", Outcome::Answered(v(F, &big, None))),
            m("b", Outcome::Answered(v(F, &big, None))),
            m("c", Outcome::Answered(v(S, "short and whole", None))),
        ];
        let got = merge_validate(false, members).expect("merged").value;
        assert_eq!(got.result, F as i32);
        assert!(
            got.message.len() <= MAX_JOINED_MESSAGE_BYTES + 64,
            "{}",
            got.message.len()
        );
        assert!(
            got.message.ends_with("; c: short and whole"),
            "{}",
            &got.message[got.message.len() - 40..]
        );
        let parts: Vec<&str> = got.message.split("; ").collect();
        for (part, name) in parts.iter().zip(["a: ", "b: "]) {
            let body = part.strip_prefix(name).expect("named");
            let kept = body.split('…').next().expect("kept");
            assert_eq!(
                body,
                format!("{kept}… [{} bytes cut]", big.len() - kept.len())
            );
            // Each long member got half of what the short one left.
            assert!(
                kept.len() > MAX_JOINED_MESSAGE_BYTES / 2 - 64,
                "{}",
                kept.len()
            );
        }
        // Under the bound, nothing is cut.
        assert_eq!(
            join_bounded(&[("a", "one"), ("b", "two")], 64),
            "a: one; b: two"
        );
        assert_eq!(cut_to("€€€€", 40), "€€€€");
        assert_eq!(cut_to(&"€".repeat(20), 40), "€€… [54 bytes cut]");
    }

    #[test]
    fn initialize_of_one_plugin_that_did_not_answer_fails_whatever_its_policy() {
        for outcome in [
            Outcome::FailedOpen(fail(Code::FailedPrecondition, "not a plugin")),
            Outcome::Failed(fail(Code::FailedPrecondition, "not a plugin")),
        ] {
            let err = merge_initialize("a", true, vec![m("a", outcome)]).expect_err("no answer");
            assert_eq!(err.code(), Code::FailedPrecondition);
            assert_eq!(err.message(), "plugin \"a\": not a plugin");
        }
    }

    #[test]
    fn initialize_pipeline_unions_hooks() {
        let got = merge_initialize(
            "canary",
            false,
            vec![
                m(
                    "a",
                    Outcome::Answered(InitializeResponse {
                        name: "a".into(),
                        version: "1".into(),
                        hooks: vec![Hook::MutateManifestWork as i32],
                        ..Default::default()
                    }),
                ),
                m(
                    "b",
                    Outcome::Answered(InitializeResponse {
                        name: "b".into(),
                        version: "2".into(),
                        hooks: vec![Hook::ValidateRolloutCompletion as i32],
                        ..Default::default()
                    }),
                ),
            ],
        )
        .expect("ok");
        assert_eq!(got.value.name, "canary");
        assert_eq!(got.value.version, "a=1,b=2");
        assert_eq!(
            got.value.hooks,
            vec![
                Hook::ValidateRolloutCompletion as i32,
                Hook::MutateManifestWork as i32
            ]
        );
    }

    fn declaring(name: &str, detail: RolloutStateDetail) -> Member<InitializeResponse> {
        m(
            name,
            Outcome::Answered(InitializeResponse {
                name: name.into(),
                state_detail: detail.into(),
                ..Default::default()
            }),
        )
    }

    #[test]
    fn initialize_pipeline_wants_the_full_state_if_any_member_does() {
        use RolloutStateDetail::{Counts, Full, Unspecified};
        let down = || m("d", Outcome::FailedOpen(fail(Code::Unavailable, "down")));
        let table: [(Vec<Member<InitializeResponse>>, RolloutStateDetail); 7] = [
            (vec![declaring("a", Counts), declaring("b", Counts)], Counts),
            (vec![declaring("a", Counts), declaring("b", Full)], Full),
            // A member written before the field existed wants the list.
            (
                vec![declaring("a", Counts), declaring("b", Unspecified)],
                Full,
            ),
            (vec![declaring("a", Unspecified)], Full),
            // A member whose answer is missing may want it too.
            (vec![declaring("a", Counts), down()], Full),
            (vec![down()], Full),
            (vec![declaring("a", Counts), m("u", Outcome::Skipped)], Full),
        ];
        for (members, want) in table {
            let names: Vec<_> = members.iter().map(|m| m.name.clone()).collect();
            let got = merge_initialize("p", false, members).expect("ok");
            assert_eq!(got.value.state_detail(), want, "{names:?}");
        }
    }

    #[test]
    fn initialize_single_plugin_declaration_passes_through() {
        for detail in [
            RolloutStateDetail::Unspecified,
            RolloutStateDetail::Full,
            RolloutStateDetail::Counts,
        ] {
            let got = merge_initialize("a", true, vec![declaring("a", detail)]).expect("ok");
            assert_eq!(got.value.state_detail(), detail);
        }
    }

    #[test]
    fn initialize_member_with_empty_hooks_implements_all() {
        let got = merge_initialize(
            "p",
            false,
            vec![m("a", Outcome::Answered(InitializeResponse::default()))],
        )
        .expect("ok");
        assert_eq!(got.value.hooks.len(), 4);
    }
}
