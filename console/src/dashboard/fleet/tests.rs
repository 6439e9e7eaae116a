//! The fleet of two sets of the same name in two namespaces, with works,
//! carriers, decisions and Events of both mixed together (and of a third
//! set that does not exist): each set gets only its own, and its view is
//! the one `get` draws.

use jiff::ToSpan;
use serde_json::json;

use super::*;
use crate::view::tests::{NOW, aborted, at, mid_rollout};

/// `snapshot` moved to namespace `namespace`: the set, its carrier, its
/// works' owner label, its decisions and its Events.
fn moved(mut snapshot: Snapshot, namespace: &str) -> Snapshot {
    snapshot.mwrs.metadata.namespace = Some(namespace.to_owned());
    if let Some(carrier) = snapshot.carrier.as_mut() {
        carrier.metadata.namespace = Some(namespace.to_owned());
    }
    for work in &mut snapshot.works {
        work.labels_mut().insert(
            rollout_controller::api::labels::MWRS_OWNER_LABEL.to_owned(),
            format!("{namespace}.hello"),
        );
    }
    for decision in &mut snapshot.decisions {
        decision.metadata.namespace = Some(namespace.to_owned());
    }
    for event in &mut snapshot.events {
        event.metadata.namespace = Some(namespace.to_owned());
    }
    snapshot
}

/// An Event about the set `name` of `namespace`.
fn event(namespace: &str, name: &str, note: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{name}.{note}"), "namespace": namespace},
        "eventTime": "2025-03-01T11:58:00.000000Z", "type": "Normal", "reason": "Seen",
        "action": "Roll", "reportingController": "rollout-controller", "reportingInstance": "x",
        "regarding": {"kind": "ManifestWorkReplicaSet", "name": name, "namespace": namespace},
        "note": note
    }))
    .expect("an Event")
}

/// default/hello mid-rollout, team-b/hello aborted; an Event about
/// team-b/other, and one about a Deployment named hello.
fn two_namespaces() -> (Objects, Vec<Snapshot>) {
    let mut first = mid_rollout();
    first.events = vec![event("default", "hello", "first")];
    let mut second = moved(aborted(), "team-b");
    second.events = vec![event("team-b", "hello", "second")];
    let mut deployment = event("default", "hello", "deployment");
    if let Some(r) = deployment.regarding.as_mut() {
        r.kind = Some("Deployment".to_owned());
    }
    let mut objects = Objects::default();
    for snapshot in [&second, &first] {
        objects.sets.push(snapshot.mwrs.clone());
        objects.carriers.extend(snapshot.carrier.clone());
        objects.works.extend(snapshot.works.iter().cloned());
        objects.decisions.extend(snapshot.decisions.iter().cloned());
        objects.events.extend(snapshot.events.iter().cloned());
    }
    objects.events.push(event("team-b", "other", "stranger"));
    objects.events.push(deployment);
    (objects, vec![first, second])
}

#[test]
fn each_set_gets_only_what_belongs_to_it() {
    let (objects, wants) = two_namespaces();
    let got = snapshots(&objects);
    assert_eq!(got.len(), 2);
    for want in &wants {
        let namespace = want.mwrs.namespace();
        let snapshot = got
            .iter()
            .find(|s| s.mwrs.namespace() == namespace)
            .expect("the set has a snapshot");
        let names = |events: &[Event]| -> Vec<Option<String>> {
            events.iter().map(|e| e.note.clone()).collect()
        };
        assert_eq!(
            names(&snapshot.events),
            names(&want.events),
            "{namespace:?}"
        );
        assert_eq!(snapshot.works.len(), 4, "{namespace:?}");
        assert!(
            snapshot.works.iter().all(|w| owner_of(w)
                == Some(&format!(
                    "{}.hello",
                    namespace.as_deref().unwrap_or_default()
                ))),
            "{namespace:?}"
        );
        assert_eq!(
            snapshot.carrier.as_ref().and_then(|c| c.namespace()),
            namespace
        );
        assert_eq!(snapshot.decisions.len(), 1);
        assert_eq!(snapshot.decisions[0].namespace(), namespace);
    }
}

#[test]
fn the_views_are_the_ones_get_draws() {
    let (objects, wants) = two_namespaces();
    let fleet = Fleet::of(&objects, at(NOW));
    let keys: Vec<&Key> = fleet.views.keys().collect();
    assert_eq!(
        keys,
        [
            &("default".to_owned(), "hello".to_owned()),
            &("team-b".to_owned(), "hello".to_owned())
        ]
    );
    for (view, want) in fleet.views.values().zip(&wants) {
        assert_eq!(view, &build(want, at(NOW)));
    }
    let rows = fleet.rows();
    assert_eq!(rows[0].phase, Phase::Progressing);
    assert_eq!(rows[0].clusters, 4);
    assert_eq!(
        (
            rows[0].counts.succeeded,
            rows[0].counts.validating,
            rows[0].counts.progressing
        ),
        (1, 1, 1)
    );
    assert_eq!(rows[1].phase, Phase::RollingBack);
    assert_eq!(rows[1].namespace, "team-b");
    let json = serde_json::to_value(&rows[1]).expect("a row is JSON");
    assert_eq!(json["updateRevision"], "r2");
    assert_eq!(json["counts"]["toApply"], 2);
}

#[test]
fn a_view_that_changed_only_in_its_time_is_kept_as_it_was() {
    let (objects, _) = two_namespaces();
    let before = Fleet::of(&objects, at(NOW));
    // Half a second on: "aborted at 11:58:00Z (2m0s ago)" reads the same,
    // "deadline in 42s" does not.
    let later = at(NOW).checked_add(500.milliseconds()).expect("a time");
    let after = Fleet::of(&objects, later).keeping(&before);
    let key = |ns: &str| (ns.to_owned(), "hello".to_owned());
    assert_eq!(after.views[&key("team-b")], before.views[&key("team-b")]);
    let moving = &after.views[&key("default")];
    assert_eq!(moving.now, later);
    assert_ne!(moving.waiting, before.views[&key("default")].waiting);
    // The same objects at the same time: nothing changed at all.
    assert_eq!(Fleet::of(&objects, at(NOW)).keeping(&before), before);
    // A set deleted: its view is gone.
    let mut fewer = objects.clone();
    fewer
        .sets
        .retain(|s| s.namespace().as_deref() == Some("default"));
    let fleet = Fleet::of(&fewer, later).keeping(&before);
    assert_eq!(fleet.views.len(), 1);
}
