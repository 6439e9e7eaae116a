//! The defaults OCM's ManifestWork and ManifestWorkReplicaSet CRDs declare
//! in a ManifestWork spec (the same five in both, as of
//! `open-cluster-management.io/api` v1.2.0), in one table, and
//! [`fill`], which applies them as an API server does: a default is set
//! where its parent object is present and the field is not.
//!
//! Revisions and spec hashes are taken of a spec with its defaults filled
//! in, so that a template as its author wrote it, the same template as a
//! hub stores it (defaulted), and the same after an OCM upgrade that adds a
//! defaulted field, are one revision.

use serde_json::Value;

/// `(path, default)`: dot-separated fields from the spec's root, `[]`
/// stepping into each item of a list.
pub(crate) const SPEC_DEFAULTS: &[(&str, &str)] = &[
    ("deleteOption.propagationPolicy", "Foreground"),
    ("manifestConfigs[].feedbackScrapeType", "Poll"),
    ("manifestConfigs[].updateStrategy.type", "Update"),
    (
        "manifestConfigs[].updateStrategy.serverSideApply.fieldManager",
        "work-agent",
    ),
    (
        "manifestConfigs[].updateStrategy.serverSideApply.ignoreFields[].condition",
        "OnSpokePresent",
    ),
];

/// `spec` (a ManifestWork spec as JSON) with every default of
/// [`SPEC_DEFAULTS`] filled in where the API server would fill it.
pub(crate) fn fill(spec: &mut Value) {
    for (path, default) in SPEC_DEFAULTS {
        let steps: Vec<&str> = path.split('.').collect();
        fill_at(spec, &steps, default);
    }
}

fn fill_at(value: &mut Value, steps: &[&str], default: &str) {
    let Some((step, rest)) = steps.split_first() else {
        return;
    };
    let Some(object) = value.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        object
            .entry(*step)
            .or_insert_with(|| Value::String(default.to_owned()));
        return;
    }
    match step.strip_suffix("[]") {
        Some(list) => {
            if let Some(items) = object.get_mut(list).and_then(Value::as_array_mut) {
                for item in items {
                    fill_at(item, rest, default);
                }
            }
        }
        None => {
            if let Some(child) = object.get_mut(*step) {
                fill_at(child, rest, default);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn defaults_are_filled_where_their_parent_is_and_never_over_a_value() {
        let mut spec = json!({
            "workload": {"manifests": []},
            "manifestConfigs": [
                {"resourceIdentifier": {"name": "a"}},
                {"resourceIdentifier": {"name": "b"}, "feedbackScrapeType": "Watch",
                 "updateStrategy": {"type": "ServerSideApply",
                                    "serverSideApply": {"ignoreFields": [{"jsonPaths": [".x"]}]}}}
            ]
        });
        fill(&mut spec);
        assert_eq!(
            spec,
            json!({
                "workload": {"manifests": []},
                "manifestConfigs": [
                    {"resourceIdentifier": {"name": "a"}, "feedbackScrapeType": "Poll"},
                    {"resourceIdentifier": {"name": "b"}, "feedbackScrapeType": "Watch",
                     "updateStrategy": {"type": "ServerSideApply",
                                        "serverSideApply": {"fieldManager": "work-agent",
                                                            "ignoreFields": [{"jsonPaths": [".x"],
                                                                              "condition": "OnSpokePresent"}]}}}
                ]
            })
        );
        // No deleteOption, no default in it; filling twice changes nothing.
        let once = spec.clone();
        fill(&mut spec);
        assert_eq!(spec, once);
        let mut with = json!({"deleteOption": {}});
        fill(&mut with);
        assert_eq!(
            with,
            json!({"deleteOption": {"propagationPolicy": "Foreground"}})
        );
    }
}
