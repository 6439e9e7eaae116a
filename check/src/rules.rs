//! The rules a plugin must follow, and the pure judgments of what was
//! observed against them: each takes what a call returned (and how long it
//! took) and returns a [`Verdict`], with no I/O, so each rule is tested on
//! its own.

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use rollout_proto::HookKind;
use rollout_proto::declaration::{Decision, Declaration};
use rollout_proto::v1alpha1::{
    Hook, InitializeResponse, MutateManifestWorkResponse, ValidateResponse,
};
use serde_json::Value;
use tonic::Code;

/// One rule, by the name the checker prints (docs/plugin-api.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// Initialize names the plugin and its hooks.
    Initialize,
    /// Each declared hook answers within the deadline it is given, and a
    /// short deadline ends the call at that deadline, not later.
    Deadline,
    /// The same request twice gets the same answer.
    Idempotent,
    /// A MutateManifestWork answer keeps apiVersion, kind, metadata.name,
    /// metadata.namespace and spec.executor.
    Identity,
    /// Request fields the plugin does not know are tolerated.
    UnknownFields,
    /// A 10,000-cluster rollout state is accepted.
    LargeState,
    /// gRPC health is served.
    Health,
}

impl Rule {
    /// Every rule, in the order the checker runs and prints them (the
    /// order of the variants).
    #[cfg(test)]
    pub(crate) const ALL: [Rule; 7] = [
        Rule::Initialize,
        Rule::Deadline,
        Rule::Idempotent,
        Rule::Identity,
        Rule::UnknownFields,
        Rule::LargeState,
        Rule::Health,
    ];

    /// The rule's name, as printed.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Rule::Initialize => "initialize",
            Rule::Deadline => "deadline",
            Rule::Idempotent => "idempotent",
            Rule::Identity => "identity",
            Rule::UnknownFields => "unknown-fields",
            Rule::LargeState => "large-state",
            Rule::Health => "health",
        }
    }
}

/// Whether a rule held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// It held, with something the author should know (such as what an
    /// empty list means).
    PassWithHint(String),
    /// It does not apply to this plugin (the reason says why); not a
    /// failure.
    Skip(String),
    /// It did not; the reason names the hook and what was seen.
    Fail(String),
}

impl Verdict {
    /// The first failure of `verdicts`, or `Pass`.
    pub(crate) fn all(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        verdicts
            .into_iter()
            .find(|v| matches!(v, Verdict::Fail(_)))
            .unwrap_or(Verdict::Pass)
    }
}

/// A rule and its verdict: one line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub rule: Rule,
    pub verdict: Verdict,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            Verdict::Pass => write!(f, "PASS {}", self.rule.name()),
            Verdict::PassWithHint(hint) => write!(f, "PASS {} (hint: {hint})", self.rule.name()),
            Verdict::Skip(reason) => write!(f, "SKIP {}: {reason}", self.rule.name()),
            Verdict::Fail(reason) => write!(f, "FAIL {}: {reason}", self.rule.name()),
        }
    }
}

/// How one call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// OK, with the answer's encoded message.
    Answer(Bytes),
    /// A gRPC status other than OK.
    Status { code: Code, message: String },
    /// The answer broke the gRPC protocol (HTTP status, framing, no
    /// grpc-status).
    Broken(String),
    /// The stream or the connection failed (reset, closed, not HTTP/2).
    Transport(String),
    /// The checker stopped waiting (its own bound, past any deadline sent).
    Abandoned,
}

impl fmt::Display for Ended {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ended::Answer(_) => f.write_str("an answer"),
            Ended::Status { code, message } if message.is_empty() => write!(f, "{code:?}"),
            Ended::Status { code, message } => write!(f, "{code:?} ({message})"),
            Ended::Broken(why) => write!(f, "a broken answer: {why}"),
            Ended::Transport(why) => write!(f, "a failed stream: {why}"),
            Ended::Abandoned => f.write_str("no end (the checker stopped waiting)"),
        }
    }
}

/// One call as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub(crate) ended: Ended,
    /// From sending the request to the end of the answer.
    pub(crate) elapsed: Duration,
}

/// A hook the other rules check, and what an UNIMPLEMENTED answer to it
/// means under the plugin's declaration ([`rollout_proto::declaration`], the
/// rule the gateway applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Probe {
    pub(crate) hook: Hook,
    /// The plugin declared every hook (an empty list): UNIMPLEMENTED means it
    /// does not implement this one, and the gateway skips it. Otherwise
    /// UNIMPLEMENTED is the plugin's failure.
    pub(crate) unimplemented_skips: bool,
}

/// `initialize`: the call answers, with a name and a valid declaration, read
/// by the same rule as the gateway's ([`rollout_proto::declaration`]): a
/// value that is not one of the four hooks (`HOOK_UNSPECIFIED` included)
/// makes the plugin one the gateway never loads. Returns the hooks to check
/// the other rules on: those the gateway would call; all four, strictly,
/// when Initialize failed or the declaration is invalid.
pub(crate) fn judge_initialize(observed: &Observed) -> (Verdict, Vec<Probe>) {
    let strict = || {
        Hook::ALL
            .into_iter()
            .map(|hook| Probe {
                hook,
                unimplemented_skips: false,
            })
            .collect()
    };
    let bytes = match &observed.ended {
        Ended::Answer(bytes) => bytes,
        other => {
            return (
                Verdict::Fail(format!(
                    "Initialize ended with {other}; the gateway fails every hook of a plugin whose Initialize fails"
                )),
                strict(),
            );
        }
    };
    let answer = match InitializeResponse::decode(bytes.clone()) {
        Ok(answer) => answer,
        Err(e) => {
            return (
                Verdict::Fail(format!("Initialize answered an undecodable message: {e}")),
                strict(),
            );
        }
    };
    if answer.name.trim().is_empty() {
        return (
            Verdict::Fail("Initialize answered no name".into()),
            strict(),
        );
    }
    let declaration = match Declaration::of(&answer) {
        Ok(d) => d,
        Err(e) => {
            return (
                Verdict::Fail(format!(
                    "{e}; the gateway does not load such a plugin and fails its hooks"
                )),
                strict(),
            );
        }
    };
    let probes = declaration
        .hooks()
        .into_iter()
        .filter_map(|hook| match declaration.decide(HookKind::of_hook(hook)?) {
            Decision::Call {
                unimplemented_skips,
            } => Some(Probe {
                hook,
                unimplemented_skips,
            }),
            Decision::Skip | Decision::InitializeFirst => None,
        })
        .collect();
    if declaration.is_every() {
        return (
            Verdict::PassWithHint(
                "Initialize declares no hooks, which declares every hook: the gateway calls all \
                 four and they are all checked; list only the hooks the plugin implements"
                    .into(),
            ),
            probes,
        );
    }
    (Verdict::Pass, probes)
}

/// Whether the first call of a probed hook answered UNIMPLEMENTED, and what
/// that means: `Some(Pass)` when the plugin declared every hook (it does not
/// implement this one: the gateway skips it, and so do the other rules),
/// `Some(Fail)` when it named the hook; `None` for any other answer.
pub(crate) fn judge_unimplemented(probe: Probe, observed: &Observed) -> Option<Verdict> {
    match &observed.ended {
        Ended::Status {
            code: Code::Unimplemented,
            ..
        } if probe.unimplemented_skips => Some(Verdict::Pass),
        Ended::Status {
            code: Code::Unimplemented,
            ..
        } => Some(Verdict::Fail(format!(
            "{} answered UNIMPLEMENTED, but the plugin declares it: the gateway counts that as the plugin's failure",
            probe.hook.name()
        ))),
        _ => None,
    }
}

/// `deadline`, for one hook: with a generous deadline the call answers
/// (not DEADLINE_EXCEEDED, and within it); with a short one it ends, one
/// way or the other, by `short + slack`.
pub(crate) fn judge_deadline(
    hook: Hook,
    generous: Duration,
    with_generous: &Observed,
    short: Duration,
    with_short: &Observed,
    slack: Duration,
) -> Verdict {
    let name = hook.name();
    match &with_generous.ended {
        Ended::Answer(_) if with_generous.elapsed <= generous + slack => {}
        Ended::Answer(_) => {
            return Verdict::Fail(format!(
                "{name} answered after {:?}, past its deadline of {generous:?}",
                with_generous.elapsed
            ));
        }
        other => {
            return Verdict::Fail(format!(
                "{name} with a deadline of {generous:?} ended with {other} after {:?}",
                with_generous.elapsed
            ));
        }
    }
    if matches!(
        with_short.ended,
        Ended::Abandoned | Ended::Broken(_) | Ended::Transport(_)
    ) || with_short.elapsed > short + slack
    {
        return Verdict::Fail(format!(
            "{name} with a deadline of {short:?} ended with {} after {:?}: a call must end at its deadline",
            with_short.ended, with_short.elapsed
        ));
    }
    Verdict::Pass
}

/// `idempotent`, for one hook: two calls with the same request end the same
/// way. Answers compare by what they decide: ValidateRolloutCompletion's
/// result (its message and recheck_after may change with time),
/// MutateManifestWork's work as JSON, the other hooks' answer itself; errors
/// by their code.
pub(crate) fn judge_idempotent(hook: Hook, first: &Observed, second: &Observed) -> Verdict {
    let name = hook.name();
    let differ = |a: &dyn fmt::Display, b: &dyn fmt::Display| {
        Verdict::Fail(format!(
            "{name} answered the same request first with {a}, then with {b}"
        ))
    };
    match (&first.ended, &second.ended) {
        (Ended::Answer(a), Ended::Answer(b)) => match hook {
            Hook::ValidateRolloutCompletion => {
                match (
                    ValidateResponse::decode(a.clone()),
                    ValidateResponse::decode(b.clone()),
                ) {
                    (Ok(a), Ok(b)) if a.result == b.result => Verdict::Pass,
                    (Ok(a), Ok(b)) => differ(&a.result().as_str_name(), &b.result().as_str_name()),
                    (Err(e), _) | (_, Err(e)) => {
                        Verdict::Fail(format!("{name} answered an undecodable message: {e}"))
                    }
                }
            }
            Hook::MutateManifestWork => match (work_of(a), work_of(b)) {
                (Ok(a), Ok(b)) if a == b => Verdict::Pass,
                (Ok(_), Ok(_)) => Verdict::Fail(format!(
                    "{name} answered the same request with two different works"
                )),
                (Err(e), _) | (_, Err(e)) => Verdict::Fail(format!("{name}: {e}")),
            },
            _ if a == b => Verdict::Pass,
            _ => Verdict::Fail(format!(
                "{name} answered the same request with two different messages"
            )),
        },
        (Ended::Status { code: a, .. }, Ended::Status { code: b, .. }) if a == b => Verdict::Pass,
        (a, b) => differ(a, b),
    }
}

/// Why a MutateManifestWork answer carries no readable work.
#[derive(Debug, thiserror::Error)]
enum UnreadableWork {
    #[error("undecodable answer: {0}")]
    Undecodable(#[source] prost::DecodeError),
    #[error("the answer's manifest_work is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
}

/// The work a MutateManifestWork answer carries, as JSON; `Null` for an
/// empty one ("unchanged").
fn work_of(answer: &Bytes) -> Result<Value, UnreadableWork> {
    let answer =
        MutateManifestWorkResponse::decode(answer.clone()).map_err(UnreadableWork::Undecodable)?;
    if answer.manifest_work.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(&answer.manifest_work).map_err(UnreadableWork::NotJson)
}

/// `identity`: a MutateManifestWork answer (to a request carrying `sent`)
/// is empty ("unchanged") or a JSON object with the same identity fields
/// (`rollout_proto::IDENTITY_FIELDS`: apiVersion, kind, metadata.name,
/// metadata.namespace, spec.executor).
pub(crate) fn judge_identity(sent: &Value, observed: &Observed) -> Verdict {
    let bytes = match &observed.ended {
        Ended::Answer(bytes) => bytes,
        other => return Verdict::Fail(format!("MutateManifestWork ended with {other}")),
    };
    let answer = match work_of(bytes) {
        Ok(Value::Null) => return Verdict::Pass,
        Ok(answer) => answer,
        Err(e) => return Verdict::Fail(format!("MutateManifestWork: {e}")),
    };
    if !answer.is_object() {
        return Verdict::Fail(
            "MutateManifestWork answered a work that is not a JSON object".into(),
        );
    }
    for (field, path) in rollout_proto::IDENTITY_FIELDS {
        let at = |v: &Value| {
            path.iter()
                .try_fold(v.clone(), |v, key| v.get(key).cloned())
        };
        let (want, got) = (at(sent), at(&answer));
        if want != got {
            let show =
                |v: Option<Value>| v.map_or_else(|| "nothing".to_string(), |v| v.to_string());
            return Verdict::Fail(format!(
                "MutateManifestWork changed {field} from {} to {}",
                show(want),
                show(got)
            ));
        }
    }
    Verdict::Pass
}

/// `unknown-fields` and `large-state`, for one hook: the call answers OK.
///
/// A ValidateRolloutCompletion answer must be a verdict the gateway takes
/// ([`rollout_proto::verdict`]): SUCCEEDED, FAILED or INPROGRESS, sent once.
pub(crate) fn judge_accepted(hook: Hook, what: &str, observed: &Observed) -> Verdict {
    match &observed.ended {
        Ended::Answer(bytes) if hook == Hook::ValidateRolloutCompletion => {
            match rollout_proto::verdict::read_validate(bytes.clone()) {
                Ok(_) => Verdict::Pass,
                Err(e) => Verdict::Fail(format!(
                    "{} with {what}: {e}; the gateway counts that as the plugin's failure",
                    hook.name()
                )),
            }
        }
        Ended::Answer(_) => Verdict::Pass,
        other => Verdict::Fail(format!("{} with {what} ended with {other}", hook.name())),
    }
}

/// `health`: `grpc.health.v1.Health/Check` for the whole server (service
/// "") answers SERVING.
pub(crate) fn judge_health(observed: &Observed) -> Verdict {
    use tonic_health::pb::{HealthCheckResponse, health_check_response::ServingStatus};
    let bytes = match &observed.ended {
        Ended::Answer(bytes) => bytes,
        other => return Verdict::Fail(format!("grpc.health.v1.Health/Check ended with {other}")),
    };
    match HealthCheckResponse::decode(bytes.clone()) {
        Ok(answer) if answer.status() == ServingStatus::Serving => Verdict::Pass,
        Ok(answer) => Verdict::Fail(format!(
            "grpc.health.v1.Health/Check answered {}, not SERVING",
            answer.status().as_str_name()
        )),
        Err(e) => Verdict::Fail(format!(
            "grpc.health.v1.Health/Check: undecodable answer: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(message: impl Message) -> Observed {
        Observed {
            ended: Ended::Answer(message.encode_to_vec().into()),
            elapsed: Duration::from_millis(5),
        }
    }

    fn status(code: Code, after_ms: u64) -> Observed {
        Observed {
            ended: Ended::Status {
                code,
                message: String::new(),
            },
            elapsed: Duration::from_millis(after_ms),
        }
    }

    fn failed(v: Verdict) -> String {
        match v {
            Verdict::Fail(reason) => reason,
            other => panic!("expected a failure: {other:?}"),
        }
    }

    #[test]
    fn rule_names_are_the_documented_ones() {
        let names: Vec<_> = Rule::ALL.iter().map(|r| r.name()).collect();
        assert_eq!(
            names,
            [
                "initialize",
                "deadline",
                "idempotent",
                "identity",
                "unknown-fields",
                "large-state",
                "health"
            ]
        );
        let line = Outcome {
            rule: Rule::Identity,
            verdict: Verdict::Fail("why".into()),
        };
        assert_eq!(line.to_string(), "FAIL identity: why");
    }

    fn probes(hooks: &[Hook], unimplemented_skips: bool) -> Vec<Probe> {
        hooks
            .iter()
            .map(|&hook| Probe {
                hook,
                unimplemented_skips,
            })
            .collect()
    }

    #[test]
    fn initialize_needs_a_name_and_a_declaration_the_gateway_loads() {
        let named = |hooks: Vec<i32>| InitializeResponse {
            name: "p".into(),
            hooks,
            ..Default::default()
        };
        assert_eq!(
            judge_initialize(&answer(named(vec![Hook::MutateManifestWork.into()]))),
            (Verdict::Pass, probes(&[Hook::MutateManifestWork], false))
        );
        let (verdict, every) = judge_initialize(&answer(named(Vec::new())));
        assert_eq!(every, probes(&Hook::ALL, true));
        let Verdict::PassWithHint(hint) = verdict else {
            panic!("no hint: {verdict:?}")
        };
        assert!(hint.contains("declares every hook"), "{hint}");
        let nameless = InitializeResponse::default();
        assert!(failed(judge_initialize(&answer(nameless)).0).contains("no name"));
        // HOOK_UNSPECIFIED, alone or beside a hook, and numbers past the
        // enum: the gateway does not load the plugin, so it fails here.
        for hooks in [vec![0], vec![Hook::MutateManifestWork.into(), 0], vec![9]] {
            let (verdict, checked) = judge_initialize(&answer(named(hooks.clone())));
            assert!(failed(verdict).contains("not a hook"), "{hooks:?}");
            assert_eq!(checked, probes(&Hook::ALL, false));
        }
        let err = judge_initialize(&status(Code::Unimplemented, 1)).0;
        assert!(failed(err).contains("Unimplemented"));
    }

    #[test]
    fn a_validation_answer_must_be_a_verdict() {
        let v = Hook::ValidateRolloutCompletion;
        let verdict = |result: i32| {
            answer(ValidateResponse {
                result,
                ..Default::default()
            })
        };
        assert_eq!(judge_accepted(v, "a state", &verdict(2)), Verdict::Pass);
        assert!(failed(judge_accepted(v, "a state", &verdict(0))).contains("no verdict"));
        assert!(failed(judge_accepted(v, "a state", &verdict(7))).contains("no verdict"));
    }

    #[test]
    fn unimplemented_skips_only_under_a_declaration_of_every_hook() {
        let v = Hook::ValidateRolloutCompletion;
        let unimplemented = status(Code::Unimplemented, 1);
        let every = Probe {
            hook: v,
            unimplemented_skips: true,
        };
        let named = Probe {
            hook: v,
            unimplemented_skips: false,
        };
        assert_eq!(
            judge_unimplemented(every, &unimplemented),
            Some(Verdict::Pass)
        );
        assert!(
            failed(judge_unimplemented(named, &unimplemented).expect("judged"))
                .contains("declares it")
        );
        assert_eq!(judge_unimplemented(named, &answer(())), None);
    }

    #[test]
    fn a_short_deadline_must_end_the_call() {
        let ms = Duration::from_millis;
        let ok = answer(());
        let hook = Hook::BeginRollout;
        let judge = |short: &Observed| judge_deadline(hook, ms(5000), &ok, ms(200), short, ms(500));
        assert_eq!(judge(&status(Code::DeadlineExceeded, 210)), Verdict::Pass);
        assert_eq!(judge(&answer(())), Verdict::Pass);
        let late = failed(judge(&status(Code::DeadlineExceeded, 1500)));
        assert!(
            late.contains("BeginRollout with a deadline of 200ms"),
            "{late}"
        );
        let gave_up = Observed {
            ended: Ended::Abandoned,
            elapsed: ms(5000),
        };
        assert!(failed(judge(&gave_up)).contains("must end at its deadline"));
        let exceeded = judge_deadline(
            hook,
            ms(5000),
            &status(Code::DeadlineExceeded, 5000),
            ms(200),
            &ok,
            ms(500),
        );
        assert!(failed(exceeded).contains("deadline of 5s ended with DeadlineExceeded"));
    }

    #[test]
    fn idempotence_compares_what_answers_decide() {
        let v = |result: rollout_proto::v1alpha1::ValidationResult, msg: &str| {
            answer(ValidateResponse {
                result: result.into(),
                message: msg.into(),
                recheck_after: None,
            })
        };
        use rollout_proto::v1alpha1::ValidationResult as R;
        let hook = Hook::ValidateRolloutCompletion;
        assert_eq!(
            judge_idempotent(
                hook,
                &v(R::Inprogress, "5s left"),
                &v(R::Inprogress, "4s left")
            ),
            Verdict::Pass
        );
        let reason = failed(judge_idempotent(
            hook,
            &v(R::Succeeded, ""),
            &v(R::Failed, ""),
        ));
        assert!(
            reason.contains("VALIDATION_RESULT_SUCCEEDED, then with VALIDATION_RESULT_FAILED"),
            "{reason}"
        );
        let work = |w: &str| {
            answer(MutateManifestWorkResponse {
                manifest_work: w.as_bytes().to_vec().into(),
            })
        };
        let m = Hook::MutateManifestWork;
        assert_eq!(
            judge_idempotent(m, &work(r#"{"a":1,"b":2}"#), &work(r#"{"b":2, "a":1}"#)),
            Verdict::Pass
        );
        assert!(
            failed(judge_idempotent(
                m,
                &work(r#"{"a":1}"#),
                &work(r#"{"a":2}"#)
            ))
            .contains("two different works")
        );
        assert_eq!(
            judge_idempotent(
                m,
                &status(Code::InvalidArgument, 1),
                &status(Code::InvalidArgument, 1)
            ),
            Verdict::Pass
        );
        assert!(
            failed(judge_idempotent(m, &work("{}"), &status(Code::Internal, 1)))
                .contains("then with Internal")
        );
    }

    #[test]
    fn identity_is_kept_or_the_work_is_unchanged() {
        let sent = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "w", "namespace": "c1"}, "spec": {}});
        let work = |v: &Value| {
            answer(MutateManifestWorkResponse {
                manifest_work: serde_json::to_vec(v).unwrap().into(),
            })
        };
        let mut changed = sent.clone();
        changed["spec"] = json!({"x": 1});
        assert_eq!(judge_identity(&sent, &work(&changed)), Verdict::Pass);
        assert_eq!(
            judge_identity(&sent, &answer(MutateManifestWorkResponse::default())),
            Verdict::Pass
        );
        let mut renamed = sent.clone();
        renamed["metadata"]["name"] = json!("other");
        assert_eq!(
            failed(judge_identity(&sent, &work(&renamed))),
            r#"MutateManifestWork changed metadata.name from "w" to "other""#
        );
        let mut no_ns = sent.clone();
        no_ns["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("namespace");
        assert!(failed(judge_identity(&sent, &work(&no_ns))).contains("from \"c1\" to nothing"));
        assert!(failed(judge_identity(&sent, &work(&json!([1])))).contains("not a JSON object"));
    }

    #[test]
    fn health_must_say_serving() {
        use tonic_health::pb::HealthCheckResponse;
        assert_eq!(
            judge_health(&answer(HealthCheckResponse { status: 1 })),
            Verdict::Pass
        );
        assert!(
            failed(judge_health(&answer(HealthCheckResponse { status: 2 })))
                .contains("NOT_SERVING")
        );
        assert!(failed(judge_health(&status(Code::Unimplemented, 1))).contains("Unimplemented"));
    }
}
