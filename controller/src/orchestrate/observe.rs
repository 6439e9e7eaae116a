//! A cluster's rollout status from its hub ManifestWork, for one desired
//! revision: the design's status table ([`work_status::derive`]) plus what the
//! controller records on the work (its revision label, the hash of the spec
//! it applied, the plugin's persisted validation verdict). Pure.

use std::collections::BTreeMap;
use std::sync::Mutex;

use kube::ResourceExt;

use crate::api::annotations::{
    SPEC_HASH_ANNOTATION, VALIDATION_ANNOTATION, VALIDATION_FAILED,
    VALIDATION_GENERATION_ANNOTATION, VALIDATION_MESSAGE_ANNOTATION,
    VALIDATION_REVISION_ANNOTATION, VALIDATION_SUCCEEDED,
};
use crate::api::labels::CONTROLLER_HASH_LABEL;
use crate::api::{ManifestWork, ManifestWorkSpec};
use crate::revision::spec_hash;
use crate::rollout::RolloutStatus;
use crate::rollout::work_status::{self, Validation, ValidationResult, WorkStatus};

/// The longest validation message kept in an annotation.
const MAX_MESSAGE_LEN: usize = 1024;

/// The plugin's decided verdict on one revision and generation of a work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// [`ValidationResult::Succeeded`] or [`ValidationResult::Failed`].
    pub result: ValidationResult,
    /// The plugin's message.
    pub message: String,
}

/// What a work says about its cluster, for the desired revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The status, with a persisted verdict folded in.
    pub status: WorkStatus,
    /// The persisted verdict, when there is one for this revision and
    /// generation.
    pub verdict: Option<Verdict>,
}

/// The specs hashed last, with their hash: the works of a revision share
/// their manifests ([`crate::api::manifestwork::Manifests`]), so the hash of a spec seen
/// before is found by pointer instead of hashing tens of kilobytes per work
/// per step. Holding the manifests keeps their address from being reused.
static SPEC_HASHES: Mutex<Vec<(ManifestWorkSpec, String)>> = Mutex::new(Vec::new());

/// How many specs [`SPEC_HASHES`] remembers (a few revisions, each with and
/// without a plugin's mutation).
const SPEC_HASHES_KEPT: usize = 16;

/// [`spec_hash`] of `spec`, remembered for specs sharing their manifests
/// with one hashed recently. The same value as [`spec_hash`].
pub(crate) fn spec_hash_of(spec: &ManifestWorkSpec) -> String {
    let same = |known: &ManifestWorkSpec| {
        known.workload.manifests.ptr_eq(&spec.workload.manifests)
            && known.workload.extra == spec.workload.extra
            && known.delete_option == spec.delete_option
            && known.manifest_configs == spec.manifest_configs
            && known.executor == spec.executor
            && known.extra == spec.extra
    };
    if let Ok(known) = SPEC_HASHES.lock()
        && let Some((_, hash)) = known.iter().find(|(k, _)| same(k))
    {
        return hash.clone();
    }
    let hash = spec_hash(spec);
    if let Ok(mut known) = SPEC_HASHES.lock() {
        if known.len() >= SPEC_HASHES_KEPT {
            known.remove(0);
        }
        known.push((spec.clone(), hash.clone()));
    }
    hash
}

/// The revision (template hash) a work carries in its `controller-hash`
/// label.
pub fn work_revision(work: &ManifestWork) -> Option<&str> {
    work.labels().get(CONTROLLER_HASH_LABEL).map(String::as_str)
}

/// Whether `work` is the desired revision as the controller applied it: it
/// carries the revision's label and, if it records the hash of the spec the
/// controller applied, its spec still has that hash (nobody changed it
/// since). A work of another revision, or changed by hand, counts as not
/// there.
pub(crate) fn is_current(work: &ManifestWork, desired_revision: &str) -> bool {
    if work_revision(work) != Some(desired_revision) {
        return false;
    }
    match work.annotations().get(SPEC_HASH_ANNOTATION) {
        Some(applied) => *applied == spec_hash_of(&work.spec),
        None => true,
    }
}

/// The persisted verdict of `work` for `desired_revision`, if it is for
/// that revision and for the work's current generation.
pub(crate) fn verdict_of(work: &ManifestWork, desired_revision: &str) -> Option<Verdict> {
    let annotations = work.annotations();
    let result = match annotations.get(VALIDATION_ANNOTATION)?.as_str() {
        VALIDATION_SUCCEEDED => ValidationResult::Succeeded,
        VALIDATION_FAILED => ValidationResult::Failed,
        _ => return None,
    };
    if annotations
        .get(VALIDATION_REVISION_ANNOTATION)
        .map(String::as_str)
        != Some(desired_revision)
    {
        return None;
    }
    let generation = work.metadata.generation.unwrap_or(0).to_string();
    if annotations.get(VALIDATION_GENERATION_ANNOTATION) != Some(&generation) {
        return None;
    }
    Some(Verdict {
        result,
        message: annotations
            .get(VALIDATION_MESSAGE_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
    })
}

/// The status of `work`'s cluster for `desired_revision`; `None` when the
/// work does not count ([`is_current`] is false). With a plugin
/// (`validation`), a work done progressing is `Validating` unless a verdict
/// for this revision and generation was persisted.
pub fn observe(
    work: &ManifestWork,
    desired_revision: &str,
    validation: Validation,
) -> Option<Observed> {
    if !is_current(work, desired_revision) {
        return None;
    }
    let conditions = work.rollout_conditions();
    let mut derived = work_status::derive(
        work.metadata.generation.unwrap_or(0),
        &conditions,
        validation,
    );
    // The fallback for a work with no Progressing counts from Applied's
    // last transition, which the agent keeps while Applied stays True: for
    // a work updated from an earlier revision that would be the first
    // apply's time. The controller's own last apply is a later bound.
    if derived.status == RolloutStatus::Progressing
        && !conditions
            .iter()
            .any(|c| c.kind == work_status::PROGRESSING)
    {
        derived.last_transition_time = derived
            .last_transition_time
            .max(super::conflict::own_apply_time(work));
    }
    let verdict = match validation {
        Validation::Plugin => verdict_of(work, desired_revision),
        Validation::None => None,
    };
    let status = match &verdict {
        Some(v) => work_status::apply_validation(derived, v.result),
        None => derived,
    };
    Some(Observed { status, verdict })
}

/// The annotations that persist `verdict` for `revision` at the work's
/// `generation`. The message is cut to 1024 bytes.
pub fn verdict_annotations(
    verdict: &Verdict,
    revision: &str,
    generation: i64,
) -> BTreeMap<String, String> {
    let value = match verdict.result {
        ValidationResult::Failed => VALIDATION_FAILED,
        _ => VALIDATION_SUCCEEDED,
    };
    let mut message = verdict.message.clone();
    if message.len() > MAX_MESSAGE_LEN {
        let mut end = MAX_MESSAGE_LEN;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    BTreeMap::from([
        (VALIDATION_ANNOTATION.to_owned(), value.to_owned()),
        (VALIDATION_MESSAGE_ANNOTATION.to_owned(), message),
        (
            VALIDATION_REVISION_ANNOTATION.to_owned(),
            revision.to_owned(),
        ),
        (
            VALIDATION_GENERATION_ANNOTATION.to_owned(),
            generation.to_string(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::json;

    use super::*;

    /// A work of `revision` at generation 2 whose agent reports
    /// `progressing` (and Degraded when `degraded`), with `annotations`.
    fn work(
        revision: &str,
        progressing: &str,
        degraded: bool,
        annotations: serde_json::Value,
    ) -> ManifestWork {
        let mut conditions = vec![
            json!({"type": "Applied", "status": "True", "observedGeneration": 2,
                   "lastTransitionTime": "2025-01-01T00:00:00Z", "reason": "", "message": ""}),
            json!({"type": "Progressing", "status": progressing, "observedGeneration": 2,
                   "lastTransitionTime": "2025-01-01T00:01:00Z", "reason": "", "message": ""}),
        ];
        if degraded {
            conditions.push(
                json!({"type": "Degraded", "status": "True", "observedGeneration": 2,
                   "lastTransitionTime": "2025-01-01T00:02:00Z", "reason": "", "message": ""}),
            );
        }
        serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "w", "namespace": "c1", "generation": 2,
                         "labels": {CONTROLLER_HASH_LABEL: revision},
                         "annotations": annotations},
            "spec": {},
            "status": {"conditions": conditions}
        }))
        .expect("a work")
    }

    fn verdict(result: &str, revision: &str, generation: &str) -> serde_json::Value {
        json!({VALIDATION_ANNOTATION: result, VALIDATION_MESSAGE_ANNOTATION: "smoke test: 3/3",
               VALIDATION_REVISION_ANNOTATION: revision, VALIDATION_GENERATION_ANNOTATION: generation})
    }

    #[test]
    fn the_progressing_fallback_counts_from_the_later_of_applied_and_our_apply() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, Time};
        let mut w = work("r1", "True", false, json!({}));
        // The agent reports no Progressing (no condition rules).
        w.status
            .as_mut()
            .expect("status")
            .conditions
            .retain(|c| c.type_ != "Progressing");
        let applied: Timestamp = "2025-01-01T00:00:00Z".parse().expect("time");
        let since = |w: &ManifestWork| {
            let o = observe(w, "r1", Validation::Plugin).expect("current");
            assert_eq!(o.status.status, RolloutStatus::Progressing);
            o.status.last_transition_time
        };
        assert_eq!(since(&w), Some(applied));
        // Applied stayed True since an earlier revision; this one was
        // applied an hour later.
        let later: Timestamp = "2025-01-01T01:00:00Z".parse().expect("time");
        w.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some(super::super::FIELD_MANAGER.into()),
            operation: Some("Apply".into()),
            time: Some(Time(later)),
            ..ManagedFieldsEntry::default()
        }]);
        assert_eq!(since(&w), Some(later));
    }

    #[test]
    fn status_with_validation_annotations() {
        use RolloutStatus::*;
        let none = Validation::None;
        let plugin = Validation::Plugin;
        let done_at: Timestamp = "2025-01-01T00:01:00Z".parse().expect("time");
        let cases: Vec<(&str, ManifestWork, Validation, Option<RolloutStatus>)> = vec![
            (
                "other revision: not there",
                work("r0", "False", false, json!({})),
                plugin,
                None,
            ),
            (
                "no plugin: succeeded",
                work("r1", "False", false, json!({})),
                none,
                Some(Succeeded),
            ),
            (
                "plugin, no verdict: validating",
                work("r1", "False", false, json!({})),
                plugin,
                Some(Validating),
            ),
            (
                "plugin, succeeded verdict",
                work("r1", "False", false, verdict("Succeeded", "r1", "2")),
                plugin,
                Some(Succeeded),
            ),
            (
                "plugin, failed verdict",
                work("r1", "False", false, verdict("Failed", "r1", "2")),
                plugin,
                Some(Failed),
            ),
            (
                "verdict of another revision is ignored",
                work("r1", "False", false, verdict("Failed", "r0", "2")),
                plugin,
                Some(Validating),
            ),
            (
                "verdict of another generation is ignored",
                work("r1", "False", false, verdict("Succeeded", "r1", "1")),
                plugin,
                Some(Validating),
            ),
            (
                "unknown verdict value is ignored",
                work("r1", "False", false, verdict("Maybe", "r1", "2")),
                plugin,
                Some(Validating),
            ),
            (
                "no plugin ignores verdicts",
                work("r1", "False", false, verdict("Failed", "r1", "2")),
                none,
                Some(Succeeded),
            ),
            (
                "a verdict does not touch progressing",
                work("r1", "True", false, verdict("Failed", "r1", "2")),
                plugin,
                Some(Progressing),
            ),
            (
                "degraded while progressing",
                work("r1", "True", true, json!({})),
                plugin,
                Some(Failed),
            ),
        ];
        for (name, w, validation, want) in cases {
            let got = observe(&w, "r1", validation);
            assert_eq!(got.as_ref().map(|o| o.status.status), want, "{name}");
            if let Some(o) = got
                && matches!(want, Some(Succeeded | Validating))
            {
                assert_eq!(o.status.last_transition_time, Some(done_at), "{name}");
            }
        }
        let with_verdict = observe(
            &work("r1", "False", false, verdict("Failed", "r1", "2")),
            "r1",
            plugin,
        )
        .expect("counts");
        assert_eq!(
            with_verdict.verdict,
            Some(Verdict {
                result: ValidationResult::Failed,
                message: "smoke test: 3/3".into()
            })
        );
    }

    #[test]
    fn a_work_changed_by_hand_is_not_there() {
        let mut w = work("r1", "False", false, json!({}));
        w.metadata
            .annotations
            .get_or_insert_default()
            .insert(SPEC_HASH_ANNOTATION.into(), spec_hash(&w.spec));
        assert!(is_current(&w, "r1"));
        assert!(!is_current(&w, "r2"));
        w.spec.executor = Some(json!({"subject": {"type": "ServiceAccount"}}));
        assert!(!is_current(&w, "r1"));
        assert_eq!(observe(&w, "r1", Validation::None), None);
    }

    #[test]
    fn verdict_annotations_round_trip() {
        let v = Verdict {
            result: ValidationResult::Failed,
            message: "é".repeat(600),
        };
        let annotations = verdict_annotations(&v, "r1", 2);
        assert_eq!(annotations[VALIDATION_ANNOTATION], "Failed");
        assert_eq!(annotations[VALIDATION_GENERATION_ANNOTATION], "2");
        assert!(annotations[VALIDATION_MESSAGE_ANNOTATION].len() <= MAX_MESSAGE_LEN);
        let mut w = work("r1", "False", false, json!({}));
        w.metadata.annotations = Some(annotations);
        let read = verdict_of(&w, "r1").expect("persisted");
        assert_eq!(read.result, ValidationResult::Failed);
        assert!(v.message.starts_with(&read.message));
    }
}
