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
//!
//! A test reads both CRDs from the api module at the version
//! `localhub/parts/go.mod` pins (Go's module cache) and fails on any
//! default of theirs in a ManifestWork spec that the table lacks, or any
//! entry of the table they do not declare: a bump of that pin that adds a
//! default is caught there.

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
    use std::collections::BTreeSet;

    use rollout_test_support::ocm_api::{MANIFESTWORK_CRD, MANIFESTWORKREPLICASET_CRD};
    use serde_json::json;

    use super::*;

    /// The OpenAPI schema of `crd` (a CRD file in OCM's api module) at
    /// `path` (property names) under its first version's root; `None` on a
    /// machine without Go.
    fn schema_at(crd: &str, path: &[&str]) -> Option<Value> {
        let text =
            rollout_test_support::ocm_api::or_skip(rollout_test_support::ocm_api::crd_text(crd))?;
        let crd: Value = serde_saphyr::from_str(&text).expect("a CRD");
        let mut schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone();
        for step in path {
            schema = schema["properties"][*step].clone();
        }
        assert!(schema.is_object(), "{path:?} is not in the CRD");
        Some(schema)
    }

    /// Every `default:` under `schema`, as `(path, default)` in the table's
    /// notation.
    fn defaults_of(schema: &Value, path: &str, out: &mut BTreeSet<(String, String)>) {
        if let Some(default) = schema.get("default") {
            let text = default
                .as_str()
                .map_or_else(|| default.to_string(), str::to_owned);
            out.insert((path.to_owned(), text));
        }
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, child) in properties {
                let child_path = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                defaults_of(child, &child_path, out);
            }
        }
        if let Some(items) = schema.get("items") {
            defaults_of(items, &format!("{path}[]"), out);
        }
    }

    #[test]
    fn the_table_is_every_default_of_ocms_crds_in_a_manifestwork_spec() {
        let table: BTreeSet<(String, String)> = SPEC_DEFAULTS
            .iter()
            .map(|(path, default)| ((*path).to_owned(), (*default).to_owned()))
            .collect();
        for (crd, path) in [
            (MANIFESTWORK_CRD, &["spec"][..]),
            (
                MANIFESTWORKREPLICASET_CRD,
                &["spec", "manifestWorkTemplate"][..],
            ),
        ] {
            let Some(schema) = schema_at(crd, path) else {
                return;
            };
            let mut found = BTreeSet::new();
            defaults_of(&schema, "", &mut found);
            assert_eq!(
                found, table,
                "the defaults {crd} declares in {path:?} (left) are not SPEC_DEFAULTS (right)"
            );
        }
    }

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
