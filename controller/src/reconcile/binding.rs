//! What the bind phase did, for the `CarrierBound` condition and Event:
//! which ManifestWorkReplicaSetRollout the set is bound to, whether it was
//! created empty or sets nothing, the placement entries that match no
//! placement, and the carriers of the namespace that bind to no set (a
//! typo'd name is the usual cause). Pure.

use kube::ResourceExt;

use crate::api::manifestworkreplicasetrollout::{Found, status_belongs};
use crate::api::{ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout};
use crate::rollout::RawAdditions;

/// The `CarrierBound` condition's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    /// True unless something the user wrote binds to nothing.
    pub(crate) status: bool,
    /// `SameName`, `TargetRef`, `CreatedEmpty`, `Empty`,
    /// `UnknownPlacements`, `NothingBound` or `Ambiguous`.
    pub(crate) reason: &'static str,
    /// What was bound, and what binds to nothing.
    pub(crate) message: String,
}

/// Whether `carrier` sets nothing: no placement entry and no history limit.
fn is_empty(carrier: &ManifestWorkReplicaSetRollout) -> bool {
    carrier
        .spec
        .placements
        .iter()
        .all(|p| p.additions == RawAdditions::default())
        && carrier.spec.revision_history_limit.is_none()
}

/// How the carrier came to be bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum How {
    /// Made empty by the controller (and not written since).
    Created,
    /// Found, by its `targetRef` or by its name.
    Found(Found),
}

/// The binding of `mwrs` to `carrier`; `unbound`: the names of the
/// namespace's carriers that bind to no ManifestWorkReplicaSet, when
/// known.
pub(crate) fn describe(
    mwrs: &ManifestWorkReplicaSet,
    carrier: &ManifestWorkReplicaSetRollout,
    how: How,
    unbound: &[String],
) -> Binding {
    let created = how == How::Created;
    let namespace = mwrs.namespace().unwrap_or_default();
    let name = carrier.name_any();
    let unknown: Vec<&str> = carrier
        .spec
        .placements
        .iter()
        .map(|p| p.name.as_str())
        .filter(|p| !mwrs.spec.placement_refs.iter().any(|r| r.name == *p))
        .collect();
    let empty = is_empty(carrier);
    let (mut status, mut reason, mut message) = if created && empty {
        (
            true,
            "CreatedEmpty",
            format!(
                "no ManifestWorkReplicaSetRollout {namespace}/{name} existed: an empty one was \
                 created, so no placement has a plugin or an abort unless the \
                 ManifestWorkReplicaSet sets them"
            ),
        )
    } else if empty {
        (
            true,
            "Empty",
            format!(
                "bound to ManifestWorkReplicaSetRollout {namespace}/{name} (same namespace and \
                 name), which sets nothing: no placement has a plugin or an abort unless the \
                 ManifestWorkReplicaSet sets them"
            ),
        )
    } else if how == How::Found(Found::TargetRef) {
        (
            true,
            "TargetRef",
            format!(
                "bound to ManifestWorkReplicaSetRollout {namespace}/{name} (its spec.targetRef \
                 names this set)"
            ),
        )
    } else {
        (
            true,
            "SameName",
            format!(
                "bound to ManifestWorkReplicaSetRollout {namespace}/{name} (same namespace and name)"
            ),
        )
    };
    if let Some(status) = carrier.status.as_ref().filter(|s| !status_belongs(s, mwrs)) {
        message.push_str(&format!(
            "; its status was written for another ManifestWorkReplicaSet of this name (UID {}), \
             so it is not read and the rollout starts over",
            status.set_uid.as_deref().unwrap_or_default()
        ));
    }
    if !unknown.is_empty() {
        (status, reason) = (false, "UnknownPlacements");
        message.push_str(&format!(
            "; its entries for {} match no placement in spec.placementRefs and are ignored",
            quoted(&unknown)
        ));
    }
    if (created || empty) && !unbound.is_empty() {
        let names: Vec<&str> = unbound.iter().map(String::as_str).collect();
        (status, reason) = (false, "NothingBound");
        message.push_str(&format!(
            "; ManifestWorkReplicaSetRollouts {} in {namespace} bind to no \
             ManifestWorkReplicaSet (a carrier binds to the set of its own name: a typo?)",
            quoted(&names)
        ));
    }
    Binding {
        status,
        reason,
        message,
    }
}

/// The binding of `mwrs` when the carriers `names` all target it: none,
/// and nothing is rolled out until only one does.
pub(crate) fn ambiguous(mwrs: &ManifestWorkReplicaSet, names: &[String]) -> Binding {
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    Binding {
        status: false,
        reason: "Ambiguous",
        message: format!(
            "ManifestWorkReplicaSetRollouts {} in {} all name this set in spec.targetRef: none is \
             bound and nothing is rolled out until exactly one does",
            quoted(&names),
            mwrs.namespace().unwrap_or_default()
        ),
    }
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn mwrs() -> ManifestWorkReplicaSet {
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1alpha1",
            "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": "hello", "namespace": "team-a"},
            "spec": {"placementRefs": [{"name": "canary"}]}
        }))
        .expect("an MWRS")
    }

    fn carrier(placements: Value) -> ManifestWorkReplicaSetRollout {
        serde_json::from_value(json!({
            "apiVersion": "rollout-hooks.io/v1alpha1", "kind": "ManifestWorkReplicaSetRollout",
            "metadata": {"name": "hello", "namespace": "team-a"},
            "spec": {"placements": placements}
        }))
        .expect("a carrier")
    }

    #[test]
    fn says_what_was_bound_and_what_binds_to_nothing() {
        let bound = describe(
            &mwrs(),
            &carrier(json!([{"name": "canary", "plugin": "p"}])),
            How::Found(Found::SameName),
            &["helo".into()],
        );
        assert_eq!((bound.status, bound.reason), (true, "SameName"));
        assert!(bound.message.contains("team-a/hello"), "{}", bound.message);
        // A typo'd carrier is named where the set binds to an empty one.
        let created = describe(&mwrs(), &carrier(json!([])), How::Created, &["helo".into()]);
        assert_eq!((created.status, created.reason), (false, "NothingBound"));
        assert!(created.message.contains("\"helo\""), "{}", created.message);
        assert!(created.message.contains("created"), "{}", created.message);
        let empty = describe(
            &mwrs(),
            &carrier(json!([])),
            How::Found(Found::SameName),
            &[],
        );
        assert_eq!((empty.status, empty.reason), (true, "Empty"));
        let typo = describe(
            &mwrs(),
            &carrier(json!([{"name": "canry", "plugin": "p"}])),
            How::Found(Found::SameName),
            &[],
        );
        assert_eq!((typo.status, typo.reason), (false, "UnknownPlacements"));
        assert!(typo.message.contains("\"canry\""), "{}", typo.message);
    }
}
