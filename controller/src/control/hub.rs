//! `rollout-controller abort|retry|pause|resume|promote NAME`: writes an
//! operator's request on `spec.control` of the ManifestWorkReplicaSetRollout
//! bound to the ManifestWorkReplicaSet NAME (a JSON merge patch of that
//! field only, with the user's own credentials), for the controller to act
//! on in its next reconcile.
//!
//! Who asked is the user as the API server knows them (a
//! `SelfSubjectReview`); where the API server cannot say (an older one, or
//! the review refused), `--by`, else the kubeconfig context's user.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use thiserror::Error;

use crate::api::control::{Control, ControlRequest, Pause, Promote};
use crate::api::manifestworkreplicasetrollout::{Choice, choose};
use crate::api::{ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout};
use crate::kubeconfig::{ConnectError, NotFound, connect};
use crate::rollout::format_go_duration;

/// The field manager of the command line's writes.
pub const CLI_FIELD_MANAGER: &str = "rollout-controller-cli";

/// What an operator asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verb {
    /// Abort the rollout of the update revision.
    Abort,
    /// Start an aborted rollout again.
    Retry,
    /// Hold new clusters.
    Pause,
    /// Lift the pause.
    Resume,
    /// Skip the current wait of these clusters (none: of every cluster).
    Promote(Vec<String>),
}

impl Verb {
    fn name(&self) -> &'static str {
        match self {
            Verb::Abort => "abort",
            Verb::Retry => "retry",
            Verb::Pause => "pause",
            Verb::Resume => "resume",
            Verb::Promote(_) => "promote",
        }
    }
}

/// Which rollout, and who asks why.
#[derive(Debug, Clone)]
pub struct ControlOptions {
    /// The kubeconfig file; `None`: in-cluster, else $KUBECONFIG or
    /// ~/.kube/config.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The ManifestWorkReplicaSet's namespace; `None`: the context's.
    pub namespace: Option<String>,
    /// The ManifestWorkReplicaSet's name.
    pub name: String,
    /// How long each API call may take.
    pub request_timeout: Duration,
    /// Why, recorded with the request.
    pub reason: Option<String>,
    /// Who, when the API server cannot say.
    pub by: Option<String>,
}

/// Why a request could not be written.
#[derive(Debug, Error)]
pub enum ControlError {
    /// No client configuration could be used: as `get` says it.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// No such ManifestWorkReplicaSet: as `get` says it.
    #[error(transparent)]
    NotFound(#[from] NotFound),
    /// No carrier binds to it (yet).
    #[error(
        "no ManifestWorkReplicaSetRollout binds to ManifestWorkReplicaSet {namespace}/{name}{why} \
         (the controller makes one on its first reconcile of the set)"
    )]
    NoCarrier {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// `: several target it (a, b)`, or empty.
        why: String,
    },
    /// The API server refused a call.
    #[error("{what}: {source}")]
    Api {
        /// What was done.
        what: &'static str,
        /// Its answer.
        #[source]
        source: kube::Error,
    },
    /// A call did not end within the request timeout.
    #[error("{what}: no answer within {after}")]
    Timeout {
        /// What was done.
        what: &'static str,
        /// The time waited, as a Go duration.
        after: String,
    },
}

/// What was written: the carrier's name and a line for the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The ManifestWorkReplicaSetRollout written (or left as it was).
    pub carrier: String,
    /// What the command says.
    pub message: String,
}

/// Writes `verb` on the carrier of the set `options` names (see the module
/// documentation); a pause of a paused rollout, or a resume of one that is
/// not paused, writes nothing.
pub async fn request(options: &ControlOptions, verb: &Verb) -> Result<Written, ControlError> {
    let (client, _, default_namespace) = connect(options.kubeconfig.as_deref()).await?;
    let namespace = options.namespace.clone().unwrap_or(default_namespace);
    request_with(&client, &namespace, options, verb).await
}

/// [`request`] over `client`, in `namespace`, now.
pub async fn request_with(
    client: &Client,
    namespace: &str,
    options: &ControlOptions,
    verb: &Verb,
) -> Result<Written, ControlError> {
    let by = requester(client, options).await;
    // Whole seconds, as the status keeps times.
    let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH);
    request_on(client, namespace, options, verb, by, now).await
}

/// [`request`] over `client`, by `by`, at `now`.
async fn request_on(
    client: &Client,
    namespace: &str,
    options: &ControlOptions,
    verb: &Verb,
    by: Option<String>,
    now: Timestamp,
) -> Result<Written, ControlError> {
    let timeout = options.request_timeout;
    let carrier = bound_carrier(client, namespace, &options.name, timeout).await?;
    let old = carrier.spec.control.clone().unwrap_or_default();
    let revision = carrier
        .status
        .as_ref()
        .and_then(|s| s.update_revision.clone());
    let asked = Asked {
        by,
        reason: options.reason.clone().filter(|r| !r.is_empty()),
        revision,
        now,
    };
    let (patch, message) = match plan(verb, &old, &asked) {
        Planned::Write(patch, message) => (patch, message),
        Planned::Nothing(message) => {
            return Ok(Written {
                carrier: carrier.name_any(),
                message,
            });
        }
    };
    let params = PatchParams {
        field_manager: Some(CLI_FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let what = "writing spec.control of the ManifestWorkReplicaSetRollout";
    let carriers: Api<ManifestWorkReplicaSetRollout> = Api::namespaced(client.clone(), namespace);
    let carrier_name = carrier.name_any();
    let merge = Patch::Merge(&patch);
    bounded(
        timeout,
        what,
        carriers.patch(&carrier_name, &params, &merge),
    )
    .await?;
    Ok(Written {
        carrier: carrier.name_any(),
        message: format!(
            "{message} on ManifestWorkReplicaSetRollout {namespace}/{}; the controller acts on it in its next reconcile",
            carrier.name_any()
        ),
    })
}

/// The carrier bound to the set `name` of `namespace`, by the
/// controller's rule ([`choose`]); the set must exist, unless the user may
/// not read it.
async fn bound_carrier(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<ManifestWorkReplicaSetRollout, ControlError> {
    let sets: Api<ManifestWorkReplicaSet> = Api::namespaced(client.clone(), namespace);
    let read = bounded(
        timeout,
        "reading the ManifestWorkReplicaSet",
        sets.get(name),
    )
    .await;
    match read {
        Err(ControlError::Api {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 404 => {
            return Err(ControlError::NotFound(NotFound {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            }));
        }
        // A tenant whose role covers the carriers and not OCM's kind (OCM
        // aggregates no role for it): the carrier alone says which set.
        Err(ControlError::Api {
            source: kube::Error::Api(status),
            ..
        }) if status.code == 403 => {}
        other => {
            other?;
        }
    }
    let carriers: Api<ManifestWorkReplicaSetRollout> = Api::namespaced(client.clone(), namespace);
    let listed = bounded(
        timeout,
        "listing the ManifestWorkReplicaSetRollouts",
        carriers.list(&ListParams::default()),
    )
    .await?;
    match choose(name, listed.items.iter()) {
        Choice::Bound(carrier, _) => Ok(carrier.clone()),
        choice => {
            let why = match choice {
                Choice::Ambiguous(names) => format!(": several target it ({})", names.join(", ")),
                _ => String::new(),
            };
            Err(ControlError::NoCarrier {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                why,
            })
        }
    }
}

/// A request's particulars.
struct Asked {
    by: Option<String>,
    reason: Option<String>,
    revision: Option<String>,
    now: Timestamp,
}

enum Planned {
    /// The merge patch, and what it asks.
    Write(Value, String),
    /// Nothing to write, and why.
    Nothing(String),
}

/// The merge patch of `spec.control` for `verb`, given the control `old`
/// holds. A request's time is after the one it replaces, so that it is
/// new to the controller even when made in the same second.
fn plan(verb: &Verb, old: &Control, asked: &Asked) -> Planned {
    let who = crate::api::control::who(asked.by.as_deref(), asked.reason.as_deref());
    let request = |previous: Option<&ControlRequest>| {
        let after = previous
            .map(|p| p.requested_time.0)
            .and_then(|t| t.checked_add(jiff::SignedDuration::from_secs(1)).ok());
        ControlRequest {
            requested_time: Time(after.filter(|a| *a > asked.now).unwrap_or(asked.now)),
            by: asked.by.clone(),
            reason: asked.reason.clone(),
            revision: asked.revision.clone(),
        }
    };
    let revision = asked.revision.as_deref().unwrap_or("being rolled out");
    let control = match verb {
        Verb::Pause => {
            if let Some(pause) = &old.paused {
                return Planned::Nothing(format!(
                    "already paused {} at {}; nothing written",
                    pause.who(),
                    pause.time.0
                ));
            }
            let pause = Pause {
                time: Time(asked.now),
                by: asked.by.clone(),
                reason: asked.reason.clone(),
            };
            json!({"paused": pause})
        }
        Verb::Resume => {
            if old.paused.is_none() {
                return Planned::Nothing("not paused; nothing written".to_owned());
            }
            json!({"paused": null})
        }
        Verb::Abort => json!({"abort": request(old.abort.as_ref())}),
        Verb::Retry => json!({"retry": request(old.retry.as_ref())}),
        Verb::Promote(clusters) => {
            let promote = Promote {
                request: request(old.promote.as_ref().map(|p| &p.request)),
                clusters: clusters.clone(),
            };
            json!({"promote": promote})
        }
    };
    let message = match verb {
        Verb::Pause | Verb::Resume => format!("{} requested {who}", verb.name()),
        _ => format!("{} of revision {revision} requested {who}", verb.name()),
    };
    Planned::Write(json!({"spec": {"control": control}}), message)
}

/// Who asks: the API server's name for the user, else `--by`, else the
/// kubeconfig context's user.
async fn requester(client: &Client, options: &ControlOptions) -> Option<String> {
    let reviews: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = tokio::time::timeout(
        options.request_timeout,
        reviews.create(&PostParams::default(), &SelfSubjectReview::default()),
    )
    .await;
    let known = match review {
        Ok(Ok(review)) => review
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)
            .filter(|u| !u.is_empty()),
        _ => None,
    };
    known
        .or_else(|| options.by.clone())
        .or_else(|| kubeconfig_user(options.kubeconfig.as_deref()))
}

/// The user of the kubeconfig's current context.
fn kubeconfig_user(path: Option<&std::path::Path>) -> Option<String> {
    let config = match path {
        Some(path) => kube::config::Kubeconfig::read_from(path),
        None => kube::config::Kubeconfig::read(),
    }
    .ok()?;
    let current = config.current_context.as_deref()?;
    config
        .contexts
        .iter()
        .find(|c| c.name == current)?
        .context
        .as_ref()?
        .user
        .clone()
}

/// `call`, failing as [`ControlError::Timeout`] after `timeout`.
async fn bounded<T>(
    timeout: Duration,
    what: &'static str,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, ControlError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(ControlError::Api { what, source }),
        Err(_) => Err(ControlError::Timeout {
            what,
            after: format_go_duration(timeout),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(now: i64) -> Asked {
        Asked {
            by: Some("alice".into()),
            reason: Some("5xx".into()),
            revision: Some("r2".into()),
            now: Timestamp::from_second(now).expect("time"),
        }
    }

    fn written(planned: Planned) -> Value {
        match planned {
            Planned::Write(patch, _) => patch,
            Planned::Nothing(why) => panic!("nothing written: {why}"),
        }
    }

    #[test]
    fn each_verb_writes_its_own_field_of_spec_control() {
        let none = Control::default();
        assert_eq!(
            written(plan(&Verb::Abort, &none, &asked(100))),
            json!({"spec": {"control": {"abort": {"requestedTime": "1970-01-01T00:01:40Z",
                "by": "alice", "reason": "5xx", "revision": "r2"}}}})
        );
        assert_eq!(
            written(plan(&Verb::Pause, &none, &asked(100))),
            json!({"spec": {"control": {"paused": {"time": "1970-01-01T00:01:40Z",
                "by": "alice", "reason": "5xx"}}}})
        );
        let promote = written(plan(&Verb::Promote(vec!["c1".into()]), &none, &asked(100)));
        assert_eq!(
            promote["spec"]["control"]["promote"]["clusters"],
            json!(["c1"])
        );
        assert!(matches!(
            plan(&Verb::Resume, &none, &asked(100)),
            Planned::Nothing(_)
        ));
    }

    #[test]
    fn a_request_in_the_same_second_as_the_last_is_still_new() {
        let mut old = Control::default();
        let first = written(plan(&Verb::Abort, &old, &asked(100)));
        old.abort =
            serde_json::from_value(first["spec"]["control"]["abort"].clone()).expect("a request");
        let again = written(plan(&Verb::Abort, &old, &asked(100)));
        assert_eq!(
            again["spec"]["control"]["abort"]["requestedTime"],
            "1970-01-01T00:01:41Z"
        );
        let paused = written(plan(&Verb::Pause, &old, &asked(100)));
        old.paused =
            serde_json::from_value(paused["spec"]["control"]["paused"].clone()).expect("a pause");
        assert!(matches!(
            plan(&Verb::Pause, &old, &asked(200)),
            Planned::Nothing(_)
        ));
        assert_eq!(
            written(plan(&Verb::Resume, &old, &asked(200))),
            json!({"spec": {"control": {"paused": null}}})
        );
    }
}
