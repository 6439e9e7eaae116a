//! Routing one hook call to its target: a single plugin, a concurrent fan-out
//! over a pipeline's members (Initialize, BeginRollout, ProgressRollout,
//! ValidateRolloutCompletion), or the ordered MutateManifestWork chain.
//!
//! Each member call is bounded by the sooner of the caller's deadline and the
//! member's own `timeout`. Whether a member is called is the shared rule of
//! [`rollout_proto::declaration`], over what the member's Initialize answers
//! for the caller's hub said: a member not loaded is loaded first (its
//! Initialize, within the call's deadline) or has failed, never skipped; a
//! loaded member that left the hook out of its declaration is skipped; one
//! that declared every hook and answers UNIMPLEMENTED is skipped; anything
//! else that is not the member's own answer is its failure. A member that
//! fails is dropped (failure policy `Ignore`, named in the failed-open
//! trailer) or fails the call (`Fail`). The answers are merged by
//! `rollout_policies::merge`.

use bytes::Bytes;
use futures::future::join_all;
use std::sync::{Arc, LazyLock};

use http::HeaderMap;
use opentelemetry::trace::SpanContext;
use rollout_policies::FailurePolicy;
use rollout_policies::merge::{self, Failure, Member, Merged, Outcome};
use rollout_proto::v1alpha1::{
    InitializeRequest, InitializeResponse, ValidateResponse, ValidationResult,
};
use rollout_telemetry::throttle::{LOG_INTERVAL, Throttle};
use tokio::time::Instant;
use tonic::Code;
use tower::ServiceExt;

use rollout_proto::declaration::Decision;

use crate::error::{CallError, DeadlineOwner, GatewayError};
use crate::hooks::{Forwarded, HookKind, HookRequest, HookResponse, MutateStep, PluginCall};
use crate::hub::{self, Hub};
use crate::manifest;
use crate::registry::{Plugin, Target};
use crate::transport::pending::{CallBytes, PendingExceeded};

/// What every member call of one gateway call shares.
#[derive(Debug)]
pub(crate) struct CallContext<'a> {
    pub(crate) target: &'a Target,
    /// The caller's deadline (`grpc-timeout`), if it sent one.
    pub(crate) deadline: Option<Instant>,
    /// Caller headers passed on to each plugin (its validated `tracestate`).
    pub(crate) forward: Arc<HeaderMap>,
    /// The server span of this call, parent of every attempt's span.
    pub(crate) parent: SpanContext,
    /// The caller's hub (central mode: the one its certificate names): the
    /// plugins' declarations are learned and read per hub, and the
    /// `hub_name` a plugin's Initialize carries is this one.
    pub(crate) hub: Option<Hub>,
    /// The bytes the call holds, which each member's answer joins while it
    /// lives; with no room for one, the call fails `RESOURCE_EXHAUSTED`
    /// whatever the member's failure policy (the caller's calls hold too
    /// much: neither the member's failure nor one to skip).
    pub(crate) held: Option<CallBytes>,
}

/// The result of a mutate chain.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mutated {
    /// The final ManifestWork; empty when no member answered with one ("unchanged").
    pub(crate) manifest_work: Bytes,
    /// Members that changed the object (as a JSON value), in order.
    pub(crate) mutated_by: Vec<String>,
    pub(crate) failed_open: Vec<String>,
}

impl CallContext<'_> {
    /// Calls one member and classifies its answer; fails when its answer
    /// could not be held.
    async fn call(
        &self,
        plugin: &Plugin,
        request: HookRequest,
    ) -> Result<Outcome<HookResponse>, GatewayError> {
        let kind = request.kind();
        Ok(match self.send(plugin, request).await {
            Sent::Skipped => Outcome::Skipped,
            Sent::Done(started, Ok(answer)) => {
                plugin
                    .metrics
                    .record_request(kind, Code::Ok, started.elapsed());
                Outcome::Answered(answer)
            }
            Sent::Done(started, Err(f)) => judge_failure(plugin, kind, started, f),
            Sent::Held(started, exceeded) => return Err(not_held(plugin, kind, started, exceeded)),
        })
    }

    /// Sends one member its request through its stack, unless its
    /// declaration for the caller's hub leaves the hook out. A member not
    /// loaded for this hub is sent its Initialize first.
    async fn send(&self, plugin: &Plugin, request: HookRequest) -> Sent {
        let kind = request.kind();
        let hub = self.hub.as_ref();
        let started = Instant::now();
        let own = started + plugin.policy.timeout;
        let (deadline, owner) = match self.deadline {
            Some(d) if d < own => (d, DeadlineOwner::Caller),
            _ => (own, DeadlineOwner::Plugin),
        };
        let mut decision = plugin.upstream.decide(hub, kind);
        if decision == Decision::InitializeFirst && kind != HookKind::Initialize {
            let load = plugin.upstream.ensure_loaded(hub, deadline, owner, || {
                let initialize = HookRequest::Initialize(self.own_initialize());
                plugin
                    .stack
                    .clone()
                    .oneshot(self.plugin_call(initialize, deadline, owner))
            });
            if let Err(error) = load.await {
                if let CallError::PendingBytes(exceeded) = error {
                    return Sent::Held(started, exceeded);
                }
                let failure = Failure {
                    code: error.code(),
                    message: format!(
                        "not loaded: its Initialize failed ({error}); the gateway calls no hook of a plugin before its Initialize succeeds"
                    ),
                };
                return Sent::Done(started, Err(failure));
            }
            decision = plugin.upstream.decide(hub, kind);
        }
        let unimplemented_skips = match decision {
            Decision::Skip => return Sent::Skipped,
            Decision::Call {
                unimplemented_skips,
            } => unimplemented_skips,
            // Initialize itself, or a declaration refused in the meantime:
            // the call goes on, and its failure is the member's.
            Decision::InitializeFirst => false,
        };
        // Central mode: another hub's calls cannot take this hub's share.
        let _place = match plugin.upstream.hub_place(hub) {
            Ok(place) => place,
            Err(error) => return Sent::Done(started, Err(error.failure())),
        };
        let call = self.plugin_call(request, deadline, owner);
        match plugin.stack.clone().oneshot(call).await {
            Ok(answer) => Sent::Done(started, Ok(answer)),
            Err(CallError::PendingBytes(exceeded)) => Sent::Held(started, exceeded),
            Err(error) if unimplemented_skips && error.is_unimplemented() => Sent::Skipped,
            Err(error) => Sent::Done(started, Err(error.failure())),
        }
    }

    fn plugin_call(
        &self,
        request: HookRequest,
        deadline: Instant,
        owner: DeadlineOwner,
    ) -> PluginCall {
        PluginCall {
            request,
            deadline,
            owner,
            forward: self.forward.clone(),
            parent: self.parent.clone(),
            attempt: 1,
            hub: self.hub.clone(),
            held: self.held.clone(),
        }
    }

    /// The Initialize the gateway sends on its own to load a plugin for the
    /// caller's hub.
    fn own_initialize(&self) -> InitializeRequest {
        InitializeRequest {
            controller_version: GATEWAY_VERSION.to_string(),
            hub_name: hub::label(self.hub.as_ref()).to_owned(),
        }
    }

    /// Sends the same request to every member concurrently; results in
    /// member order. Fails when a member's answer could not be held.
    async fn fan_out(
        &self,
        request: HookRequest,
    ) -> Result<Vec<Member<HookResponse>>, GatewayError> {
        let members = self.target.members();
        if let [only] = members {
            let outcome = self.call(only, request).await?;
            return Ok(vec![Member {
                name: only.name.clone(),
                outcome,
            }]);
        }
        let calls = members.iter().map(|p| {
            let request = request.clone();
            async move {
                Ok(Member {
                    name: p.name.clone(),
                    outcome: self.call(p, request).await?,
                })
            }
        });
        join_all(calls).await.into_iter().collect()
    }

    /// Initialize: every member; learns each member's hooks for the caller's
    /// hub on the way. A caller with a hub identity cannot speak for another
    /// hub: `hub_name` becomes its own.
    pub(crate) async fn initialize(
        &self,
        mut request: InitializeRequest,
    ) -> Result<Merged<InitializeResponse>, GatewayError> {
        if let Some(hub) = &self.hub {
            request.hub_name = hub.to_string();
        }
        let members = self.fan_out(HookRequest::Initialize(request)).await?;
        let members = narrow(members, |r| match r {
            HookResponse::Initialize(i) => Some(i),
            _ => None,
        });
        Ok(merge::merge_initialize(
            self.target.name(),
            !self.target.is_pipeline(),
            members,
        )?)
    }

    /// BeginRollout or ProgressRollout.
    pub(crate) async fn ack(
        &self,
        kind: HookKind,
        request: Forwarded,
    ) -> Result<Merged<()>, GatewayError> {
        let request = match kind {
            HookKind::BeginRollout => HookRequest::BeginRollout(request),
            _ => HookRequest::ProgressRollout(request),
        };
        let members = self.fan_out(request).await?;
        let members = narrow(members, |r| match r {
            HookResponse::Empty => Some(()),
            _ => None,
        });
        Ok(merge::merge_ack(members)?)
    }

    /// ValidateRolloutCompletion: the merged answer, and the members that
    /// answered FAILED (for the call's span).
    pub(crate) async fn validate(
        &self,
        request: Forwarded,
    ) -> Result<(Merged<ValidateResponse>, Vec<String>), GatewayError> {
        let members = self
            .fan_out(HookRequest::ValidateRolloutCompletion(request))
            .await?;
        let members = narrow(members, |r| match r {
            HookResponse::ValidateRolloutCompletion(v) => Some(v),
            _ => None,
        });
        let failed_by = members
            .iter()
            .filter(|m| {
                matches!(&m.outcome, Outcome::Answered(v) if v.result == ValidationResult::Failed as i32)
            })
            .map(|m| m.name.clone())
            .collect();
        let merged = merge::merge_validate(!self.target.is_pipeline(), members)?;
        Ok((merged, failed_by))
    }

    /// MutateManifestWork: members one after another, each receiving the
    /// previous output; `summary` is the caller's work's, read on arrival,
    /// and each accepted answer's becomes the next input's. Returns the
    /// failed-open members with the error too.
    pub(crate) async fn mutate(
        &self,
        request: MutateStep,
        mut summary: manifest::Summary,
    ) -> Result<Mutated, (GatewayError, Vec<String>)> {
        let MutateStep {
            rollout,
            fields,
            manifest_work,
        } = request;
        let mut current = manifest_work;
        let mut answered = false;
        let mut mutated_by = Vec::new();
        let mut failed_open = Vec::new();

        let members = self.target.members();
        for plugin in members {
            // Every member gets the caller's rollout bytes (shared, not
            // copied) and the work as the previous member left it.
            let step = HookRequest::MutateManifestWork(MutateStep {
                rollout: rollout.clone(),
                fields: fields.clone(),
                manifest_work: current.clone(),
            });
            let kind = HookKind::MutateManifestWork;
            let outcome: Outcome<()> = match self.send(plugin, step).await {
                Sent::Skipped => Outcome::Skipped,
                Sent::Held(started, exceeded) => {
                    return Err((not_held(plugin, kind, started, exceeded), failed_open));
                }
                Sent::Done(started, Err(f)) => judge_failure(plugin, kind, started, f),
                Sent::Done(started, Ok(HookResponse::MutateManifestWork(answer))) => {
                    let output = answer.manifest_work;
                    // Empty means "unchanged"; and the common case, a plugin
                    // that changed nothing and echoed its input, needs no JSON
                    // parsing at all.
                    if output.is_empty() || output == current {
                        answered |= !output.is_empty();
                        plugin
                            .metrics
                            .record_request(kind, Code::Ok, started.elapsed());
                        continue;
                    }
                    let checked =
                        check_mutation_off_thread(current.clone(), &summary, output.clone()).await;
                    match checked {
                        Ok((changed, read)) => {
                            plugin
                                .metrics
                                .record_request(kind, Code::Ok, started.elapsed());
                            answered = true;
                            if changed {
                                mutated_by.push(plugin.name.clone());
                            }
                            current = output;
                            summary = read;
                            continue;
                        }
                        Err(CheckError::BadInput(why)) => {
                            // The caller's fault, not the plugin's: not counted
                            // against it.
                            return Err((
                                GatewayError::InvalidRequest(format!(
                                    "the ManifestWork to mutate {why}"
                                )),
                                failed_open,
                            ));
                        }
                        Err(CheckError::BadAnswer(f)) => judge_failure(plugin, kind, started, f),
                    }
                }
                Sent::Done(started, Ok(_)) => judge_failure(plugin, kind, started, wrong_answer()),
            };
            match outcome {
                Outcome::Skipped | Outcome::Answered(_) => {}
                Outcome::FailedOpen(_) => failed_open.push(plugin.name.clone()),
                Outcome::Failed(f) => {
                    return Err((GatewayError::plugin(&plugin.name, f), failed_open));
                }
            }
        }
        Ok(Mutated {
            manifest_work: if answered { current } else { Bytes::new() },
            mutated_by,
            failed_open,
        })
    }
}

/// What the gateway sends as `controller_version` in its own Initialize.
pub(crate) const GATEWAY_VERSION: &str = concat!("rollout-gateway/", env!("CARGO_PKG_VERSION"));

/// Above this size, parsing a ManifestWork is moved off the runtime thread,
/// so one multi-MiB work does not stall every other call.
pub(crate) const OFF_THREAD_BYTES: usize = 256 * 1024;

/// [`check_mutation`], on the blocking pool for large works.
async fn check_mutation_off_thread(
    input: Bytes,
    read: &manifest::Summary,
    output: Bytes,
) -> Result<(bool, manifest::Summary), CheckError> {
    if input.len().max(output.len()) < OFF_THREAD_BYTES {
        return check_mutation(&input, read, &output);
    }
    // A copy for the blocking pool: its identity fields only, beside a
    // digest of a work this large.
    let read = read.clone();
    tokio::task::spawn_blocking(move || check_mutation(&input, &read, &output))
        .await
        .unwrap_or_else(|e| {
            Err(CheckError::BadAnswer(
                CallError::Unchecked(format!("checking the answer failed: {e}")).failure(),
            ))
        })
}

enum CheckError {
    /// The caller's own ManifestWork is unusable.
    BadInput(String),
    /// The member's answer breaks the contract.
    BadAnswer(Failure),
}

/// [`manifest::check_answer_to`], its refusals as the fan-out classifies
/// them.
fn check_mutation(
    input: &[u8],
    read: &manifest::Summary,
    output: &[u8],
) -> Result<(bool, manifest::Summary), CheckError> {
    manifest::check_answer_to(input, read, output).map_err(|refused| match refused {
        manifest::Refused::Input(why) => CheckError::BadInput(why),
        manifest::Refused::Answer(why) => CheckError::BadAnswer(
            CallError::BadAnswer(format!("returned a ManifestWork that {why}")).failure(),
        ),
    })
}

fn wrong_answer() -> Failure {
    CallError::BadAnswer("answered with the wrong message type".into()).failure()
}

/// What [`CallContext::send`] got: nothing (the member does not implement
/// the hook), an answer or a failure, or an answer the call had no room to
/// hold, with the time the call started.
enum Sent {
    Skipped,
    Done(Instant, Result<HookResponse, Failure>),
    Held(Instant, PendingExceeded),
}

/// A member's answer the call had no room to hold: counted as the member's
/// `RESOURCE_EXHAUSTED` in its request metrics, and the call's failure.
fn not_held(
    plugin: &Plugin,
    kind: HookKind,
    started: Instant,
    exceeded: PendingExceeded,
) -> GatewayError {
    tracing::warn!(plugin = %plugin.name, hook = kind.as_str(), error = %exceeded, "plugin's answer refused: too many bytes held for the caller's calls");
    let error = GatewayError::PendingBytes(exceeded);
    plugin
        .metrics
        .record_request(kind, error.code(), started.elapsed());
    error
}

/// The fail-open warnings, per plugin and hook.
static FAILED_OPEN_LOG: LazyLock<Throttle> = LazyLock::new(|| Throttle::new(LOG_INTERVAL));

/// A member failed: counts it, and drops it (`failurePolicy: Ignore`) or
/// fails the call (`Fail`).
fn judge_failure<T>(plugin: &Plugin, kind: HookKind, started: Instant, f: Failure) -> Outcome<T> {
    plugin
        .metrics
        .record_request(kind, f.code, started.elapsed());
    match plugin.policy.failure_policy_for(kind.proto_hook()) {
        FailurePolicy::Ignore => {
            plugin.metrics.record_fail_open(kind);
            // Once a minute per plugin and hook: the fail-open counter
            // has every one.
            let key = format!("{}/{}", plugin.name, kind.as_str());
            if let Some(left_out) = FAILED_OPEN_LOG.admit(&key, Instant::now().into_std()) {
                tracing::warn!(plugin = %plugin.name, hook = kind.as_str(), code = ?f.code, message = %f.message, left_out, "plugin failed; skipped (failurePolicy: Ignore)");
            }
            Outcome::FailedOpen(f)
        }
        FailurePolicy::Fail => Outcome::Failed(f),
    }
}

/// Narrows the generic answers to one hook's type (a wrong type is the
/// member's failure, which cannot happen with a well-behaved client).
fn narrow<T>(
    members: Vec<Member<HookResponse>>,
    pick: impl Fn(HookResponse) -> Option<T>,
) -> Vec<Member<T>> {
    members
        .into_iter()
        .map(|m| Member {
            outcome: match m.outcome {
                Outcome::Answered(r) => match pick(r) {
                    Some(v) => Outcome::Answered(v),
                    None => Outcome::Failed(wrong_answer()),
                },
                Outcome::Skipped => Outcome::Skipped,
                Outcome::FailedOpen(f) => Outcome::FailedOpen(f),
                Outcome::Failed(f) => Outcome::Failed(f),
            },
            name: m.name,
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    //! The fan-out against fake plugins: each member's stack is a function,
    //! not a connection, so a test sees what each member was sent, in which
    //! order, and what the fan-out makes of the answers.

    use std::sync::Mutex;
    use std::time::Duration;

    use futures::FutureExt as _;
    use futures::future::BoxFuture;
    use rollout_proto::v1alpha1::{MutateManifestWorkResponse, ValidateResponse};
    use tonic::Status;
    use tower::util::BoxCloneSyncService;

    use super::*;
    use crate::error::{CallError, DialError, Unreachable};
    use crate::registry::{Registry, SourceInfo};
    use crate::upstream::ChannelSettings;

    /// One call a fake plugin received.
    #[derive(Debug, Clone, PartialEq)]
    pub(crate) struct Seen {
        pub(crate) plugin: String,
        pub(crate) hook: HookKind,
        /// The ManifestWork of a MutateManifestWork, as text.
        pub(crate) work: Option<String>,
    }

    /// How the fake plugins answer: given the plugin's name and the request.
    pub(crate) type Answering = Arc<
        dyn Fn(&str, HookRequest) -> BoxFuture<'static, Result<HookResponse, CallError>>
            + Send
            + Sync,
    >;

    /// The plugins of one registry file, each calling `answering` instead
    /// of its endpoint, and every call they received, in order.
    pub(crate) struct Fakes {
        pub(crate) plugins: Vec<Arc<Plugin>>,
        pub(crate) seen: Arc<Mutex<Vec<Seen>>>,
    }

    impl Fakes {
        /// The registry file `text`'s plugins (its policies included), faked.
        pub(crate) fn new(text: &str, answering: Answering) -> Fakes {
            let registry = Registry::new(
                vec![SourceInfo {
                    label: "file0".into(),
                }],
                ChannelSettings::default(),
            );
            registry.apply("file0", text).expect("a valid registry");
            let seen = Arc::new(Mutex::new(Vec::new()));
            let plugins = registry
                .load()
                .expect("loaded")
                .plugins
                .iter()
                .map(|p| fake(p, answering.clone(), seen.clone()))
                .collect();
            Fakes { plugins, seen }
        }

        pub(crate) fn plugin(&self, name: &str) -> Target {
            Target::Plugin(self.get(name))
        }

        pub(crate) fn pipeline(&self, name: &str, members: &[&str]) -> Target {
            Target::Pipeline {
                name: name.into(),
                members: members.iter().map(|m| self.get(m)).collect(),
            }
        }

        fn get(&self, name: &str) -> Arc<Plugin> {
            self.plugins
                .iter()
                .find(|p| p.name == name)
                .cloned()
                .expect("a plugin of the file")
        }

        /// The calls of `hook` the plugins received, in order.
        pub(crate) fn seen(&self, hook: HookKind) -> Vec<Seen> {
            let seen = self.seen.lock().expect("lock");
            seen.iter().filter(|s| s.hook == hook).cloned().collect()
        }
    }

    /// `plugin` with its stack replaced by `answering`.
    fn fake(plugin: &Plugin, answering: Answering, seen: Arc<Mutex<Vec<Seen>>>) -> Arc<Plugin> {
        let name = plugin.name.clone();
        let stack = BoxCloneSyncService::new(tower::service_fn(move |call: PluginCall| {
            let work = match &call.request {
                HookRequest::MutateManifestWork(m) => {
                    Some(String::from_utf8_lossy(&m.manifest_work).into_owned())
                }
                _ => None,
            };
            seen.lock().expect("lock").push(Seen {
                plugin: name.clone(),
                hook: call.request.kind(),
                work,
            });
            answering(&name, call.request)
        }));
        Arc::new(Plugin {
            name: plugin.name.clone(),
            hub: plugin.hub.clone(),
            endpoint: plugin.endpoint.clone(),
            policy: plugin.policy.clone(),
            hubs: plugin.hubs.clone(),
            upstream: plugin.upstream.clone(),
            stack,
            metrics: plugin.metrics.clone(),
            certificate_files: plugin.certificate_files.clone(),
        })
    }

    /// Answers with `f`'s result at once; Initialize always succeeds (the
    /// fan-out sends it first to a plugin not loaded).
    pub(crate) fn answering(
        f: impl Fn(&str, HookRequest) -> Result<HookResponse, CallError> + Send + Sync + 'static,
    ) -> Answering {
        Arc::new(move |name, request| {
            let answer = match request {
                HookRequest::Initialize(_) => {
                    Ok(HookResponse::Initialize(InitializeResponse::default()))
                }
                request => f(name, request),
            };
            std::future::ready(answer).boxed()
        })
    }

    /// Three plugins; `b` fails open (`failurePolicy: Ignore`).
    pub(crate) const REGISTRY: &str = "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    insecure: true\n  - name: b\n    endpoint: 127.0.0.1:7002\n    insecure: true\n    failurePolicy: Ignore\n  - name: c\n    endpoint: 127.0.0.1:7003\n    insecure: true\n";

    pub(crate) const WORK: &str = r#"{"apiVersion":"work.open-cluster-management.io/v1","kind":"ManifestWork","metadata":{"name":"w","namespace":"c1"},"spec":{}}"#;

    /// `WORK` with the label `name: "1"` added by each of `names`.
    pub(crate) fn labelled(names: &[&str]) -> String {
        let labels: Vec<String> = names.iter().map(|n| format!("\"{n}\":\"1\"")).collect();
        format!(
            r#"{{"apiVersion":"work.open-cluster-management.io/v1","kind":"ManifestWork","metadata":{{"name":"w","namespace":"c1","labels":{{{}}}}},"spec":{{}}}}"#,
            labels.join(",")
        )
    }

    fn mutated(work: impl Into<Bytes>) -> Result<HookResponse, CallError> {
        Ok(HookResponse::MutateManifestWork(
            MutateManifestWorkResponse {
                manifest_work: work.into(),
            },
        ))
    }

    fn validated(result: ValidationResult, message: &str) -> Result<HookResponse, CallError> {
        Ok(HookResponse::ValidateRolloutCompletion(ValidateResponse {
            result: result as i32,
            message: message.into(),
            recheck_after: None,
        }))
    }

    fn context(target: &Target) -> CallContext<'_> {
        CallContext {
            target,
            deadline: Some(Instant::now() + Duration::from_secs(5)),
            forward: Arc::new(HeaderMap::new()),
            parent: SpanContext::empty_context(),
            hub: None,
            held: None,
        }
    }

    fn step(work: &str) -> MutateStep {
        MutateStep {
            rollout: None,
            fields: None,
            manifest_work: Bytes::from(work.to_owned()),
        }
    }

    /// What the route reads of the caller's work on arrival.
    fn summary(work: &str) -> manifest::Summary {
        manifest::summarise(work.as_bytes()).expect("an object")
    }

    fn forwarded() -> Forwarded {
        Forwarded {
            message: Bytes::new(),
            rollout: None,
        }
    }

    /// The work of the MutateManifestWork calls `fakes` saw, by plugin.
    fn chain(fakes: &Fakes) -> Vec<(String, String)> {
        fakes
            .seen(HookKind::MutateManifestWork)
            .into_iter()
            .map(|s| (s.plugin, s.work.unwrap_or_default()))
            .collect()
    }

    /// Each member gets the work as the one before it left it; one that
    /// echoes it or answers empty changed nothing and is not named.
    #[tokio::test]
    async fn a_mutate_chain_runs_in_order_each_member_on_the_previous_output() {
        let fakes = Fakes::new(
            REGISTRY,
            answering(|name, request| {
                let HookRequest::MutateManifestWork(step) = request else {
                    return Err(CallError::BadAnswer("not a mutate call".into()));
                };
                match name {
                    "a" => mutated(labelled(&["a"])),
                    // Echoes its input: unchanged.
                    "b" => mutated(step.manifest_work),
                    // Empty: unchanged.
                    _ => mutated(Bytes::new()),
                }
            }),
        );
        let target = fakes.pipeline("p", &["a", "b", "c"]);
        let m = context(&target)
            .mutate(step(WORK), summary(WORK))
            .await
            .expect("mutated");
        assert_eq!(
            chain(&fakes),
            vec![
                ("a".into(), WORK.into()),
                ("b".into(), labelled(&["a"])),
                ("c".into(), labelled(&["a"])),
            ]
        );
        assert_eq!(m.manifest_work, labelled(&["a"]).as_bytes());
        assert_eq!(m.mutated_by, ["a"]);
        assert!(m.failed_open.is_empty());
        // Each member was loaded first: its Initialize before its call.
        let initialized: Vec<String> = fakes
            .seen(HookKind::Initialize)
            .into_iter()
            .map(|s| s.plugin)
            .collect();
        assert_eq!(initialized, ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn every_member_changing_the_work_is_named_in_order() {
        let fakes = Fakes::new(
            REGISTRY,
            answering(|name, _| match name {
                "a" => mutated(labelled(&["a"])),
                "c" => mutated(labelled(&["a", "c"])),
                _ => mutated(Bytes::new()),
            }),
        );
        let target = fakes.pipeline("p", &["c", "b", "a"]);
        let m = context(&target)
            .mutate(step(WORK), summary(WORK))
            .await
            .expect("mutated");
        // c first (adds a and c), then a (leaves only a): both changed it.
        assert_eq!(m.mutated_by, ["c", "a"]);
        assert_eq!(m.manifest_work, labelled(&["a"]).as_bytes());
    }

    /// A member that fails under `failurePolicy: Fail` stops the chain: the
    /// members after it are not called, and the error names it.
    #[tokio::test]
    async fn a_failing_step_stops_the_chain_and_names_the_member() {
        let fakes = Fakes::new(
            REGISTRY,
            answering(|name, _| match name {
                "a" => mutated(labelled(&["a"])),
                _ => Err(CallError::Plugin(Status::permission_denied("not today"))),
            }),
        );
        let target = fakes.pipeline("p", &["a", "c", "b"]);
        let (error, failed_open) = context(&target)
            .mutate(step(WORK), summary(WORK))
            .await
            .expect_err("c fails");
        assert_eq!(
            error.code(),
            Code::PermissionDenied,
            "the member's own code"
        );
        assert!(error.to_string().contains("\"c\""), "{error}");
        assert!(error.to_string().contains("not today"), "{error}");
        assert!(failed_open.is_empty());
        let called: Vec<String> = chain(&fakes).into_iter().map(|(p, _)| p).collect();
        assert_eq!(called, ["a", "c"], "b after the failure is never called");
    }

    /// A member that fails under `failurePolicy: Ignore` is left out: the
    /// next one gets the work as it was before it, and it is named failed
    /// open.
    #[tokio::test]
    async fn a_step_failing_open_is_skipped_and_named() {
        let fakes = Fakes::new(
            REGISTRY,
            answering(|name, _| match name {
                "a" => mutated(labelled(&["a"])),
                "b" => Err(CallError::Unreachable(Unreachable::Dial(
                    DialError::Connect {
                        endpoint: "b:1".into(),
                        source: std::io::ErrorKind::ConnectionRefused.into(),
                    },
                ))),
                _ => mutated(labelled(&["a", "c"])),
            }),
        );
        let target = fakes.pipeline("p", &["a", "b", "c"]);
        let m = context(&target)
            .mutate(step(WORK), summary(WORK))
            .await
            .expect("mutated");
        assert_eq!(m.failed_open, ["b"]);
        assert_eq!(m.mutated_by, ["a", "c"]);
        assert_eq!(chain(&fakes)[2], ("c".into(), labelled(&["a"])));
    }

    /// A member whose answer breaks the contract (another work's identity,
    /// not an object) fails as INTERNAL: the caller's work is not replaced.
    #[tokio::test]
    async fn a_step_answering_a_bad_work_fails_as_internal() {
        for (answer, why) in [
            ("[]".to_string(), "is a JSON array, not an object"),
            (WORK.replace("\"w\"", "\"other\""), "changes metadata.name"),
        ] {
            let fakes = Fakes::new(REGISTRY, answering(move |_, _| mutated(answer.clone())));
            let target = fakes.plugin("a");
            let (error, _) = context(&target)
                .mutate(step(WORK), summary(WORK))
                .await
                .expect_err("a bad answer");
            assert_eq!(error.code(), Code::Internal, "{error}");
            assert!(error.to_string().contains(why), "{why}: {error}");
        }
    }

    /// A fan-out calls its members at once (here each waits for the other)
    /// and merges their answers in member order: one FAILED fails the
    /// whole, and says who.
    #[tokio::test]
    async fn a_fan_out_calls_every_member_at_once_and_merges_in_order() {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let answering: Answering = Arc::new(move |name, request| {
            let barrier = barrier.clone();
            let name = name.to_string();
            async move {
                match request {
                    HookRequest::Initialize(_) => {
                        Ok(HookResponse::Initialize(InitializeResponse::default()))
                    }
                    _ => {
                        barrier.wait().await;
                        match name.as_str() {
                            "a" => validated(ValidationResult::Succeeded, "a is fine"),
                            _ => validated(ValidationResult::Failed, "c is not"),
                        }
                    }
                }
            }
            .boxed()
        });
        let fakes = Fakes::new(REGISTRY, answering);
        let target = fakes.pipeline("p", &["a", "c"]);
        let ctx = context(&target);
        let (merged, failed_by) =
            tokio::time::timeout(Duration::from_secs(5), ctx.validate(forwarded()))
                .await
                .expect("the members were called at once, not one after the other")
                .expect("merged");
        assert_eq!(merged.value.result, ValidationResult::Failed as i32);
        assert_eq!(failed_by, ["c"]);
        let (a, c) = (
            merged.value.message.find("a is fine"),
            merged.value.message.find("c is not"),
        );
        assert!(
            a.is_some() && a < c,
            "in member order: {}",
            merged.value.message
        );
    }

    /// Of a fan-out, a member failing open is named and left out of the
    /// merge; one failing under `Fail` fails the call with its code.
    #[tokio::test]
    async fn a_fan_out_leaves_out_a_member_failing_open_and_fails_on_one_that_may_not() {
        let fakes = Fakes::new(
            REGISTRY,
            answering(|name, _| match name {
                "a" => Ok(HookResponse::Empty),
                "b" => Err(CallError::Plugin(Status::unavailable("b is down"))),
                _ => Err(CallError::Plugin(Status::failed_precondition("c refuses"))),
            }),
        );
        let open = fakes.pipeline("p", &["a", "b"]);
        let merged = context(&open)
            .ack(HookKind::BeginRollout, forwarded())
            .await
            .expect("b fails open");
        assert_eq!(merged.failed_open, ["b"]);
        let failing = fakes.pipeline("q", &["a", "b", "c"]);
        let error = context(&failing)
            .ack(HookKind::ProgressRollout, forwarded())
            .await
            .expect_err("c fails the call");
        assert_eq!(error.code(), Code::FailedPrecondition);
        assert!(error.to_string().contains("c refuses"), "{error}");
        let called: Vec<String> = fakes
            .seen(HookKind::ProgressRollout)
            .into_iter()
            .map(|s| s.plugin)
            .collect();
        assert_eq!(called.len(), 3, "a fan-out calls every member: {called:?}");
    }

    /// A member answering with another hook's message is its failure.
    #[tokio::test]
    async fn a_member_answering_the_wrong_message_fails() {
        let fakes = Fakes::new(REGISTRY, answering(|_, _| Ok(HookResponse::Empty)));
        let target = fakes.plugin("a");
        let error = context(&target)
            .validate(forwarded())
            .await
            .expect_err("Empty is no ValidateResponse");
        assert_eq!(error.code(), Code::Internal);
        assert!(error.to_string().contains("wrong message type"), "{error}");
    }
}
