//! Template revisions (the rollback design), as StatefulSet keeps them: the
//! template's hash names a revision, the history lives in `apps/v1`
//! ControllerRevisions owned by the ManifestWorkReplicaSet, and the status
//! says which revision is being rolled out (`updateRevision`) and which one
//! is known good (`currentRevision`).
//!
//! Everything here is pure: the caller lists the ControllerRevisions, asks
//! [`plan_history`] what to create, renumber and prune, and performs it.
//!
//! - A revision's hash is FNV-32a over the canonical JSON of the template
//!   (object keys sorted), followed by `collisionCount` as 4 little-endian
//!   bytes when it is above 0, written as Kubernetes' `SafeEncodeString` of
//!   the decimal number (such as `6b6dcbd695`). The ManifestWorks carry it in
//!   the `controller-hash` label, the status in `updateRevision` and
//!   `currentRevision`.
//! - The ControllerRevision of hash `H` is named `<mwrs>-<H>` and labelled
//!   with the owner label and `controller-hash: H`; its `data` is
//!   `{"spec": {"manifestWorkTemplate": ...}}` and its `revision` number
//!   grows with each new (or re-used) template.
//! - `revisionHistoryLimit` bounds the revisions that are neither the update
//!   revision nor live (the current revision, or one a ManifestWork still
//!   carries); the oldest (lowest number) are pruned first.

use std::collections::BTreeSet;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::ObjectMeta;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::api::labels::{CONTROLLER_HASH_LABEL, MWRS_OWNER_LABEL, fnv1a64};
use crate::api::{ManifestWorkReplicaSet, ManifestWorkSpec};
use crate::rollout::{ClusterRolloutStatus, RolloutKind, RolloutResult, RolloutStatus, Strategy};

/// The longest object name Kubernetes accepts (a DNS subdomain).
pub(crate) const MAX_NAME_LEN: usize = 253;

/// A template revision: its hash and its template.
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    /// The hash, as in the `controller-hash` label and the status.
    pub hash: String,
    /// The ManifestWork spec of this revision.
    pub(crate) template: ManifestWorkSpec,
}

impl Revision {
    /// The revision of `template` with no hash collision.
    pub fn of(template: &ManifestWorkSpec) -> Revision {
        Revision {
            hash: template_hash(template, 0),
            template: template.clone(),
        }
    }
}

/// `value` as JSON with every object's keys sorted, whatever map type
/// serde_json was built with.
pub(crate) fn canonical_json(value: &Value) -> Vec<u8> {
    fn write(value: &Value, out: &mut Vec<u8>) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push(b'{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(&Value::String(key.clone()), out);
                    out.push(b':');
                    write(&map[key], out);
                }
                out.push(b'}');
            }
            Value::Array(items) => {
                out.push(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    write(item, out);
                }
                out.push(b']');
            }
            // Scalars have one serialization.
            scalar => out.extend(serde_json::to_vec(scalar).unwrap_or_default()),
        }
    }
    let mut out = Vec::new();
    write(value, &mut out);
    out
}

/// Whether `a` and `b` are one template once the CRDs' defaults are filled
/// in (what the revision hash takes).
fn same_template(a: &ManifestWorkSpec, b: &ManifestWorkSpec) -> bool {
    a == b || hashed_json(a) == hashed_json(b)
}

/// `spec` as hashed: its JSON with the CRDs' defaults filled in
/// ([`crate::api::defaults`]), so that what the API server defaults never
/// makes a new revision or spec hash.
fn hashed_json(spec: &ManifestWorkSpec) -> Value {
    let mut json = spec_json(spec);
    crate::api::defaults::fill(&mut json);
    json
}

fn spec_json(spec: &ManifestWorkSpec) -> Value {
    // A spec of plain data always serializes.
    serde_json::to_value(spec).unwrap_or(Value::Null)
}

/// FNV-1a, 32 bits.
fn fnv1a32(bytes: &[u8]) -> u32 {
    const OFFSET: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    bytes
        .iter()
        .fold(OFFSET, |hash, b| (hash ^ u32::from(*b)).wrapping_mul(PRIME))
}

/// Kubernetes' `rand.SafeEncodeString`: each byte to a letter or digit that
/// cannot form words or be confused (no vowels, no 0, 1, 3).
fn safe_encode(text: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    text.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// The revision hash of `template` with `collision_count` (see the module
/// documentation).
pub fn template_hash(template: &ManifestWorkSpec, collision_count: i32) -> String {
    let mut bytes = canonical_json(&hashed_json(template));
    if collision_count > 0 {
        bytes.extend(collision_count.to_le_bytes());
    }
    safe_encode(&fnv1a32(&bytes).to_string())
}

/// The hash of a spec as applied (after mutation), for
/// [`SPEC_HASH_ANNOTATION`](crate::api::annotations::SPEC_HASH_ANNOTATION):
/// 16 hex digits of FNV-1a 64 over its canonical JSON.
pub fn spec_hash(spec: &ManifestWorkSpec) -> String {
    format!("{:016x}", fnv1a64(&canonical_json(&hashed_json(spec))))
}

/// The ControllerRevision name of `hash` for the ManifestWorkReplicaSet
/// `mwrs_name`: `<mwrs_name>-<hash>`, the name cut (and trailing `-`/`.`
/// trimmed) so that the whole fits [`MAX_NAME_LEN`].
pub(crate) fn revision_name(mwrs_name: &str, hash: &str) -> String {
    let room = MAX_NAME_LEN.saturating_sub(hash.len() + 1);
    let mut end = mwrs_name.len().min(room);
    while !mwrs_name.is_char_boundary(end) {
        end -= 1;
    }
    let prefix = mwrs_name[..end].trim_end_matches(['-', '.']);
    format!("{prefix}-{hash}")
}

/// One ControllerRevision of the history, as read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistoryEntry {
    /// The ControllerRevision's name.
    pub(crate) name: String,
    /// Its `controller-hash` label.
    pub(crate) hash: String,
    /// Its `revision` number.
    pub(crate) number: i64,
    /// The template in its data; `None` if unreadable.
    pub(crate) template: Option<ManifestWorkSpec>,
}

impl HistoryEntry {
    /// Reads a ControllerRevision; `None` if it has no `controller-hash`
    /// label (not one of ours).
    pub(crate) fn from_controller_revision(revision: &ControllerRevision) -> Option<HistoryEntry> {
        let hash = revision.labels().get(CONTROLLER_HASH_LABEL)?.clone();
        Some(HistoryEntry {
            name: revision.name_any(),
            hash,
            number: revision.revision,
            template: template_of(revision),
        })
    }

    /// The revision, if the template could be read.
    pub(crate) fn revision(&self) -> Option<Revision> {
        self.template.as_ref().map(|template| Revision {
            hash: self.hash.clone(),
            template: template.clone(),
        })
    }
}

/// The template stored in a ControllerRevision's `data`
/// (`spec.manifestWorkTemplate`).
pub(crate) fn template_of(revision: &ControllerRevision) -> Option<ManifestWorkSpec> {
    let data = revision.data.as_ref()?;
    let template = data.0.pointer("/spec/manifestWorkTemplate")?;
    serde_json::from_value(template.clone()).ok()
}

/// How the update revision relates to the history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RevisionOrigin {
    /// The newest revision already has this template.
    Unchanged,
    /// A new ControllerRevision is created.
    Created,
    /// An older revision has this template again (a template rolled back by
    /// hand); it is renumbered as the newest.
    Found,
}

/// What to do to the history for the current template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HistoryPlan {
    /// The current template's revision: the update revision.
    pub(crate) update: Revision,
    /// `collisionCount` after any collision found.
    pub(crate) collision_count: i32,
    /// How the update revision was found.
    pub(crate) origin: RevisionOrigin,
    /// A ControllerRevision to create.
    pub(crate) create: Option<HistoryEntry>,
    /// A ControllerRevision to renumber: name and new `revision`.
    pub(crate) renumber: Option<(String, i64)>,
    /// ControllerRevisions to delete, oldest first.
    pub(crate) prune: Vec<String>,
}

/// Plans the history for `template`: finds or creates its revision
/// (bumping `collision_count` while another template holds the hash), then
/// prunes the oldest revisions beyond `limit` among those that are neither
/// the update revision nor in `live` (hashes still needed: the current
/// revision, those ManifestWorks carry).
pub(crate) fn plan_history(
    history: &[HistoryEntry],
    template: &ManifestWorkSpec,
    mut collision_count: i32,
    mwrs_name: &str,
    live: &BTreeSet<String>,
    limit: usize,
) -> HistoryPlan {
    let newest = history.iter().map(|e| e.number).max().unwrap_or(0);
    let (hash, existing) = loop {
        let hash = template_hash(template, collision_count);
        match history.iter().find(|e| e.hash == hash) {
            Some(entry)
                if !entry
                    .template
                    .as_ref()
                    .is_some_and(|t| same_template(t, template)) =>
            {
                // Another template (or an unreadable one) holds the name.
                collision_count = collision_count.saturating_add(1);
            }
            found => break (hash, found),
        }
    };
    let (origin, create, renumber) = match existing {
        Some(entry) if entry.number == newest => (RevisionOrigin::Unchanged, None, None),
        Some(entry) => (
            RevisionOrigin::Found,
            None,
            Some((entry.name.clone(), newest + 1)),
        ),
        None => (
            RevisionOrigin::Created,
            Some(HistoryEntry {
                name: revision_name(mwrs_name, &hash),
                hash: hash.clone(),
                number: newest + 1,
                template: Some(template.clone()),
            }),
            None,
        ),
    };

    let mut old: Vec<&HistoryEntry> = history
        .iter()
        .filter(|e| e.hash != hash && !live.contains(&e.hash))
        .collect();
    old.sort_by(|a, b| a.number.cmp(&b.number).then_with(|| a.name.cmp(&b.name)));
    let excess = old.len().saturating_sub(limit);
    let prune = old[..excess].iter().map(|e| e.name.clone()).collect();

    HistoryPlan {
        update: Revision {
            hash,
            template: template.clone(),
        },
        collision_count,
        origin,
        create,
        renumber,
        prune,
    }
}

/// The ControllerRevision of `entry`, in `owner`'s namespace, owned by it
/// (so it is garbage-collected with it) and labelled with `owner_label` and
/// the hash.
pub(crate) fn controller_revision(
    owner: &ManifestWorkReplicaSet,
    owner_label: &str,
    entry: &HistoryEntry,
) -> ControllerRevision {
    let mut owner_ref = owner.controller_owner_ref(&());
    if let Some(r) = owner_ref.as_mut() {
        r.block_owner_deletion = Some(true);
    }
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(entry.name.clone()),
            namespace: owner.namespace(),
            labels: Some(
                [
                    (MWRS_OWNER_LABEL.to_owned(), owner_label.to_owned()),
                    (CONTROLLER_HASH_LABEL.to_owned(), entry.hash.clone()),
                ]
                .into(),
            ),
            owner_references: owner_ref.map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        data: Some(RawExtension(json!({
            "spec": {"manifestWorkTemplate": entry.template.as_ref().map(spec_json)}
        }))),
        revision: entry.number,
    }
}

/// The status fields about revisions after one reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RevisionStatus {
    /// The last revision rolled out everywhere.
    pub current: Option<String>,
    /// The current template's revision.
    pub update: Option<String>,
    /// When the rollout of `update` was aborted.
    pub aborted_time: Option<Timestamp>,
}

impl RevisionStatus {
    /// The status at the start of a reconcile whose template hashes to
    /// `update`: a new update revision clears an abort (a new template
    /// starts a new rollout).
    pub fn begin(previous: &RevisionStatus, update: &str) -> RevisionStatus {
        let changed = previous.update.as_deref() != Some(update);
        RevisionStatus {
            current: previous.current.clone(),
            update: Some(update.to_owned()),
            aborted_time: if changed { None } else { previous.aborted_time },
        }
    }

    /// Whether an abort is under way.
    pub fn is_aborted(&self) -> bool {
        self.aborted_time.is_some()
    }

    /// The status at the end of a reconcile: aborted at `aborted_at` if an
    /// abort started; `currentRevision` becomes the update revision once
    /// every cluster of every placement succeeded with it (never while
    /// aborted).
    pub fn finish(
        mut self,
        aborted_at: Option<Timestamp>,
        update_complete: bool,
    ) -> RevisionStatus {
        if self.aborted_time.is_none() {
            self.aborted_time = aborted_at;
        }
        if update_complete && self.aborted_time.is_none() {
            self.current = self.update.clone();
        }
        self
    }
}

/// What an abort request leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortAction {
    /// No abort: roll out the update revision.
    Proceed,
    /// Roll the updated clusters back to the current revision.
    RollBack,
    /// Nothing to roll back to (no current revision, or its template is
    /// gone): stop rolling out.
    Stop,
}

/// Whether a decision of the update revision asks for the design's abort
/// (the state diagram's `Failed --> Abort`). Only with `abortOnFailure` (or
/// `failureStrategy: AbortAll`), and then when a failure is one the
/// strategy does not tolerate:
///
/// - a cluster timed out in this decision (any strategy);
/// - `All`, which has no `maxFailures` (the engine tolerates as many
///   failures as there are clusters, so it never reports a breach): any
///   `Failed` cluster in `existing`, a FAILED validation included;
/// - `Progressive` and `ProgressivePerGroup`: failures breached
///   `maxFailures` ([`RolloutResult::max_failure_breach`]).
///
/// `existing` holds the statuses the decision was made from (the clusters
/// with a work of the update revision).
pub(crate) fn abort_requested(
    strategy: &Strategy,
    result: &RolloutResult,
    existing: &[ClusterRolloutStatus],
) -> bool {
    if !strategy.abort_on_failure {
        return false;
    }
    if !result.clusters_timeout.is_empty() {
        return true;
    }
    match strategy.kind {
        RolloutKind::All(_) => existing.iter().any(|c| c.status == RolloutStatus::Failed),
        RolloutKind::Progressive { .. } | RolloutKind::ProgressivePerGroup { .. } => {
            result.max_failure_breach
        }
    }
}

/// The abort decision for one placement: `aborted` (an abort is already
/// under way) or `requested` now ([`abort_requested`]); what
/// happens then depends on whether a current revision other than the update
/// revision exists, with its template (`current`). A failure while the
/// update revision is itself the current one (it is known good, only a new
/// cluster failed) starts no abort.
pub(crate) fn abort_action(
    aborted: bool,
    requested: bool,
    update: &str,
    current_hash: Option<&str>,
    current: Option<&Revision>,
) -> AbortAction {
    if current_hash == Some(update) {
        return AbortAction::Proceed;
    }
    if !aborted && !requested {
        return AbortAction::Proceed;
    }
    match current {
        Some(revision) if current_hash == Some(revision.hash.as_str()) => AbortAction::RollBack,
        _ => AbortAction::Stop,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::Map;

    use super::*;
    use crate::api::manifestwork::ManifestsTemplate;
    use crate::api::manifestworkreplicaset::ManifestWorkReplicaSetSpec;

    fn template(data: &str) -> ManifestWorkSpec {
        let manifest: Map<String, Value> = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default"}, "data": {"v": data}
        }))
        .expect("object");
        ManifestWorkSpec {
            workload: ManifestsTemplate {
                manifests: vec![manifest].into(),
                extra: BTreeMap::new(),
            },
            ..ManifestWorkSpec::default()
        }
    }

    fn entry(name: &str, hash: &str, number: i64, t: Option<ManifestWorkSpec>) -> HistoryEntry {
        HistoryEntry {
            name: name.into(),
            hash: hash.into(),
            number,
            template: t,
        }
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let value = json!({"b": [{"z": 1, "a": null}], "a": {"y": "x", "c": true}});
        assert_eq!(
            String::from_utf8(canonical_json(&value)).expect("utf-8"),
            r#"{"a":{"c":true,"y":"x"},"b":[{"a":null,"z":1}]}"#
        );
    }

    #[test]
    fn what_the_api_server_defaults_makes_no_new_revision() {
        let spec = |configs: serde_json::Value| -> ManifestWorkSpec {
            serde_json::from_value(serde_json::json!({
                "workload": {"manifests": []},
                "manifestConfigs": configs
            }))
            .expect("a spec")
        };
        let rule =
            serde_json::json!({"type": "CEL", "condition": "Complete", "celExpressions": ["true"]});
        let written = spec(
            serde_json::json!([{"resourceIdentifier": {"name": "a"}, "conditionRules": [rule]}]),
        );
        // As OCM 1.1's CRD and 1.2's (feedbackScrapeType) store it.
        let stored = spec(
            serde_json::json!([{"resourceIdentifier": {"name": "a"}, "conditionRules": [rule],
                                              "feedbackScrapeType": "Poll"}]),
        );
        assert_eq!(template_hash(&written, 0), template_hash(&stored, 0));
        assert_eq!(spec_hash(&written), spec_hash(&stored));
        // A value other than the default is a change.
        let watch = spec(
            serde_json::json!([{"resourceIdentifier": {"name": "a"}, "conditionRules": [rule],
                                             "feedbackScrapeType": "Watch"}]),
        );
        assert_ne!(template_hash(&written, 0), template_hash(&watch, 0));
    }

    #[test]
    fn hashes_are_stable_safe_and_sensitive() {
        let v1 = template("1");
        let hash = template_hash(&v1, 0);
        assert_eq!(hash, template_hash(&v1.clone(), 0));
        assert!(!hash.is_empty() && hash.len() <= 10, "{hash}");
        assert!(
            hash.chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
            "{hash}"
        );
        assert_ne!(hash, template_hash(&template("2"), 0));
        assert_ne!(hash, template_hash(&v1, 1));
        // A missing collisionCount and 0 are the same.
        assert_eq!(Revision::of(&v1).hash, hash);
        // Known values: the encoding of FNV-32a's decimal digits.
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(safe_encode("0123456789"), "456789bcdf");
        let spec = spec_hash(&v1);
        assert_eq!(spec.len(), 16);
        assert_ne!(spec, spec_hash(&template("2")));
    }

    #[test]
    fn revision_names_fit() {
        assert_eq!(revision_name("hello", "6b6dcbd695"), "hello-6b6dcbd695");
        let long = format!("{}.-{}", "a".repeat(240), "b".repeat(20));
        let name = revision_name(&long, "6b6dcbd695");
        assert!(name.len() <= MAX_NAME_LEN, "{}", name.len());
        assert!(name.ends_with("a-6b6dcbd695"), "{name}");
    }

    #[test]
    fn history_plans() {
        let (t1, t2, t3) = (template("1"), template("2"), template("3"));
        let (h1, h2, h3) = (
            template_hash(&t1, 0),
            template_hash(&t2, 0),
            template_hash(&t3, 0),
        );
        let none = BTreeSet::new();

        // First revision ever.
        let plan = plan_history(&[], &t1, 0, "hello", &none, 10);
        assert_eq!(plan.origin, RevisionOrigin::Created);
        assert_eq!(
            plan.create,
            Some(entry(&format!("hello-{h1}"), &h1, 1, Some(t1.clone())))
        );
        assert_eq!(plan.update.hash, h1);
        assert!(plan.prune.is_empty() && plan.renumber.is_none());

        // Unchanged template: nothing to do.
        let history = vec![
            entry("hello-a", &h1, 1, Some(t1.clone())),
            entry("hello-b", &h2, 2, Some(t2.clone())),
        ];
        let plan = plan_history(&history, &t2, 0, "hello", &none, 10);
        assert_eq!(
            (plan.origin, plan.create.is_none(), plan.renumber.is_none()),
            (RevisionOrigin::Unchanged, true, true)
        );

        // Back to an older template: renumbered as the newest.
        let plan = plan_history(&history, &t1, 0, "hello", &none, 10);
        assert_eq!(plan.origin, RevisionOrigin::Found);
        assert_eq!(plan.renumber, Some(("hello-a".into(), 3)));

        // A collision: another template holds the hash.
        let squatter = vec![entry("hello-x", &h3, 1, Some(t1.clone()))];
        let plan = plan_history(&squatter, &t3, 0, "hello", &none, 10);
        assert_eq!(plan.collision_count, 1);
        assert_eq!(plan.update.hash, template_hash(&t3, 1));
        assert_eq!(plan.origin, RevisionOrigin::Created);
        assert_eq!(plan.create.map(|c| c.number), Some(2));
    }

    #[test]
    fn pruning_keeps_the_newest_and_the_live() {
        let t = |i: usize| template(&i.to_string());
        let history: Vec<HistoryEntry> = (1..=5)
            .map(|i| {
                entry(
                    &format!("r{i}"),
                    &template_hash(&t(i), 0),
                    i as i64,
                    Some(t(i)),
                )
            })
            .collect();
        // Template 6 is new; 5 old revisions, limit 2: the three oldest go,
        // except a live one (r1 is still on a ManifestWork).
        let live = BTreeSet::from([template_hash(&t(1), 0)]);
        let plan = plan_history(&history, &t(6), 0, "hello", &live, 2);
        assert_eq!(plan.prune, ["r2", "r3"]);
        // Limit 0 keeps only the update and live revisions.
        let plan = plan_history(&history, &t(5), 0, "hello", &BTreeSet::new(), 0);
        assert_eq!(plan.prune, ["r1", "r2", "r3", "r4"]);
    }

    #[test]
    fn controller_revisions_hold_the_template() {
        let mut mwrs = ManifestWorkReplicaSet::new("hello", ManifestWorkReplicaSetSpec::default());
        mwrs.metadata.namespace = Some("default".into());
        mwrs.metadata.uid = Some("uid-1".into());
        let t1 = template("1");
        let e = entry("hello-abc", "abc", 4, Some(t1.clone()));
        let cr = controller_revision(&mwrs, "default.hello", &e);
        assert_eq!(cr.revision, 4);
        assert_eq!(cr.metadata.namespace.as_deref(), Some("default"));
        let owner = &cr.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("ManifestWorkReplicaSet", "uid-1", Some(true))
        );
        assert_eq!(template_of(&cr), Some(t1.clone()));
        let read = HistoryEntry::from_controller_revision(&cr).expect("ours");
        assert_eq!(read, e);
        assert_eq!(read.revision().map(|r| r.template), Some(t1));
        let mut foreign = cr.clone();
        foreign.metadata.labels = None;
        assert_eq!(HistoryEntry::from_controller_revision(&foreign), None);
    }

    #[test]
    fn revision_status_transitions() {
        let t0: Timestamp = "2025-01-01T00:00:00Z".parse().expect("time");
        let aborted = RevisionStatus {
            current: Some("r1".into()),
            update: Some("r2".into()),
            aborted_time: Some(t0),
        };
        // Same template: still aborted, never promoted.
        let same = RevisionStatus::begin(&aborted, "r2");
        assert!(same.is_aborted());
        assert_eq!(
            same.clone().finish(None, true).current.as_deref(),
            Some("r1")
        );
        // A new template clears the abort.
        let new = RevisionStatus::begin(&aborted, "r3");
        assert!(!new.is_aborted());
        assert_eq!(
            new.clone().finish(None, true).current.as_deref(),
            Some("r3")
        );
        assert_eq!(
            new.clone().finish(None, false).current.as_deref(),
            Some("r1")
        );
        // An abort starting now is recorded and blocks promotion.
        let now = new.finish(Some(t0), true);
        assert_eq!(now.aborted_time, Some(t0));
        assert_eq!(now.current.as_deref(), Some("r1"));
    }

    fn strategy(json: &str) -> Strategy {
        let raw: crate::rollout::RawStrategy = serde_json::from_str(json).expect("strategy");
        Strategy::from_raw(&raw).expect("valid")
    }

    #[test]
    fn abort_requests_follow_what_each_strategy_tolerates() {
        use RolloutStatus::{Failed, Progressing, Succeeded};
        let statuses = |list: &[(&str, RolloutStatus)]| -> Vec<ClusterRolloutStatus> {
            list.iter()
                .map(|(c, s)| ClusterRolloutStatus::new(*c, *s))
                .collect()
        };
        let one_failed = statuses(&[("c1", Succeeded), ("c2", Failed), ("c3", Progressing)]);
        let none_failed = statuses(&[("c1", Succeeded), ("c3", Progressing)]);
        let quiet = RolloutResult::default();
        let breach = RolloutResult {
            max_failure_breach: true,
            ..RolloutResult::default()
        };
        let timed_out = RolloutResult {
            clusters_timeout: vec![ClusterRolloutStatus::new("c4", RolloutStatus::TimeOut)],
            ..RolloutResult::default()
        };

        // All has no maxFailures: one Failed cluster (a FAILED validation is
        // one) is not tolerated.
        let all = strategy(r#"{"type": "All", "abortOnFailure": true}"#);
        assert!(abort_requested(&all, &quiet, &one_failed));
        assert!(!abort_requested(&all, &quiet, &none_failed));
        assert!(abort_requested(&all, &timed_out, &none_failed));
        // The default strategy (no type) is All.
        let default = strategy(r#"{"failureStrategy": "AbortAll"}"#);
        assert!(abort_requested(&default, &quiet, &one_failed));

        // Progressive and ProgressivePerGroup tolerate failures up to
        // maxFailures: only a breach or a time-out aborts.
        for json in [
            r#"{"type": "Progressive", "abortOnFailure": true,
                "progressive": {"maxFailures": 1}}"#,
            r#"{"type": "ProgressivePerGroup", "abortOnFailure": true,
                "progressivePerGroup": {"maxFailures": 1}}"#,
        ] {
            let s = strategy(json);
            assert!(!abort_requested(&s, &quiet, &one_failed), "{json}");
            assert!(abort_requested(&s, &breach, &one_failed), "{json}");
            assert!(abort_requested(&s, &timed_out, &none_failed), "{json}");
        }

        // Without abortOnFailure nothing aborts.
        let off = strategy(r#"{"type": "All"}"#);
        assert!(!abort_requested(&off, &timed_out, &one_failed));
        let off = strategy(r#"{"type": "Progressive"}"#);
        assert!(!abort_requested(&off, &breach, &one_failed));
    }

    #[test]
    fn abort_actions() {
        let r1 = Revision::of(&template("1"));
        let h1 = r1.hash.as_str();
        use AbortAction::*;
        /// (aborted, requested, update, current hash, current, want)
        type Case<'a> = (
            bool,
            bool,
            &'a str,
            Option<&'a str>,
            Option<&'a Revision>,
            AbortAction,
        );
        let cases: &[Case] = &[
            (false, false, "u", Some(h1), Some(&r1), Proceed),
            (false, true, "u", Some(h1), Some(&r1), RollBack),
            (true, false, "u", Some(h1), Some(&r1), RollBack),
            // First rollout ever: nothing to go back to.
            (false, true, "u", None, None, Stop),
            (true, false, "u", None, None, Stop),
            // The current revision's template is gone.
            (false, true, "u", Some(h1), None, Stop),
            // The update revision is the known-good one.
            (false, true, h1, Some(h1), Some(&r1), Proceed),
        ];
        for (i, (aborted, requested, update, current_hash, current, want)) in
            cases.iter().enumerate()
        {
            assert_eq!(
                abort_action(*aborted, *requested, update, *current_hash, *current),
                *want,
                "case {i}"
            );
        }
    }
}
