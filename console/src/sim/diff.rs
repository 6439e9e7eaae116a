//! What a mutating plugin changed in a ManifestWork: the work the
//! controller sent (`MutateManifestWork`'s input) against the work the
//! gateway answered, as an RFC 6902 JSON Patch (for programs) and as a
//! unified diff of the two works as YAML, changed lines with two lines of
//! context (for people). Pure.

use serde::Serialize;
use serde_json::Value;
use similar::TextDiff;
use thiserror::Error;

/// Lines of context around each change in [`WorkDiff::text`].
pub(crate) const CONTEXT_LINES: usize = 2;

/// The diff of one mutation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct WorkDiff {
    /// The RFC 6902 operations that turn the work sent into the work
    /// answered.
    pub(crate) patch: Value,
    /// A unified diff of the two works as YAML (`---` sent, `+++`
    /// answered), without the file headers.
    pub(crate) text: String,
}

/// A work that cannot be diffed.
#[derive(Debug, Error)]
pub(crate) enum DiffError {
    /// A work is not JSON.
    #[error("the {which} ManifestWork is not JSON: {source}")]
    Json {
        /// `sent` or `answered`.
        which: &'static str,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A work cannot be written as YAML.
    #[error("writing the ManifestWork as YAML: {0}")]
    Yaml(#[source] serde_saphyr::ser::Error),
}

fn parse(bytes: &[u8], which: &'static str) -> Result<Value, DiffError> {
    serde_json::from_slice(bytes).map_err(|source| DiffError::Json { which, source })
}

/// The diff of `sent` and `answered` (JSON), `None` when they are the same
/// JSON value (an answer that only reorders keys or spaces changed
/// nothing).
pub(crate) fn diff(sent: &[u8], answered: &[u8]) -> Result<Option<WorkDiff>, DiffError> {
    let before = parse(sent, "sent")?;
    let after = parse(answered, "answered")?;
    if before == after {
        return Ok(None);
    }
    let patch = serde_json::to_value(json_patch::diff(&before, &after)).unwrap_or(Value::Null);
    let old = serde_saphyr::to_string(&before).map_err(DiffError::Yaml)?;
    let new = serde_saphyr::to_string(&after).map_err(DiffError::Yaml)?;
    let lines = TextDiff::from_lines(&old, &new);
    let text = lines
        .unified_diff()
        .context_radius(CONTEXT_LINES)
        .to_string();
    Ok(Some(WorkDiff { patch, text }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bytes(v: &Value) -> Vec<u8> {
        serde_json::to_vec(v).expect("serializes")
    }

    fn work(weight: Value) -> Value {
        json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
               "metadata": {"name": "web", "namespace": "cluster-001"},
               "spec": {"workload": {"manifests": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                   "metadata": {"name": "web"},
                   "spec": {"replicas": 3, "strategy": {"canary": {"steps": [{"setWeight": weight}]}}}}]}}})
    }

    #[test]
    fn a_changed_field_is_one_replace_and_two_lines() {
        let d = diff(&bytes(&work(json!(20))), &bytes(&work(json!(5))))
            .expect("diffs")
            .expect("a change");
        assert_eq!(
            d.patch,
            json!([{"op": "replace",
                    "path": "/spec/workload/manifests/0/spec/strategy/canary/steps/0/setWeight",
                    "value": 5}])
        );
        let changed: Vec<&str> = d
            .text
            .lines()
            .filter(|l| l.starts_with('-') || l.starts_with('+'))
            .collect();
        assert_eq!(changed.len(), 2, "{}", d.text);
        assert!(
            changed[0].starts_with('-') && changed[0].contains("setWeight: 20"),
            "{}",
            d.text
        );
        assert!(
            changed[1].starts_with('+') && changed[1].contains("setWeight: 5"),
            "{}",
            d.text
        );
        assert!(d.text.starts_with("@@ "), "{}", d.text);
        // Compact: far from the change, nothing.
        assert!(
            !d.text
                .contains("apiVersion: work.open-cluster-management.io/v1"),
            "{}",
            d.text
        );
    }

    #[test]
    fn the_same_value_in_other_bytes_is_no_change() {
        let sent = br#"{"a": 1, "b": [1, 2]}"#;
        let answered = br#"{"b":[1,2],"a":1}"#;
        assert!(diff(sent, answered).expect("diffs").is_none());
    }

    #[test]
    fn an_added_annotation_is_an_add() {
        let mut after = work(json!(20));
        after["metadata"]["annotations"] = json!({"rollout-hooks.io/canary-weight": "10"});
        let d = diff(&bytes(&work(json!(20))), &bytes(&after))
            .expect("diffs")
            .expect("a change");
        assert_eq!(d.patch[0]["op"], "add");
        assert!(d.text.contains("+  annotations:"), "{}", d.text);
    }

    #[test]
    fn a_work_that_is_not_json_is_an_error_naming_which() {
        let err = diff(b"{}", b"not json").expect_err("fails");
        assert!(
            err.to_string().starts_with("the answered ManifestWork"),
            "{err}"
        );
    }
}
