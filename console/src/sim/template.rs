//! The user's own ManifestWork template for `simulate --template FILE`
//! (and `--previous-template FILE`), in place of the built-in Argo Rollout.
//!
//! The file is YAML or JSON (JSON is YAML) and holds one of:
//!
//! - a ManifestWork (`kind: ManifestWork`): its `spec` is the template;
//! - a ManifestWorkReplicaSet (`kind: ManifestWorkReplicaSet`): its
//!   `spec.manifestWorkTemplate`;
//! - just a ManifestWork spec (no `kind`, a `workload` with manifests).
//!
//! Every field is kept, those this crate does not model included, as `run`
//! keeps them.

use std::path::Path;

use serde_json::Value;
use thiserror::Error;

use rollout_controller::api::ManifestWorkSpec;

/// A template and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// The ManifestWork spec.
    pub(crate) spec: ManifestWorkSpec,
    /// Where it came from, for the report (`the template in FILE`).
    pub(crate) label: String,
}

/// A template file that cannot be used; each names the file.
#[derive(Debug, Error)]
pub enum TemplateError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Not YAML or JSON.
    #[error("{path}: not YAML or JSON: {source}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's error.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// Of another kind.
    #[error(
        "{path}: kind {kind:?}; give a ManifestWork, a ManifestWorkReplicaSet or a ManifestWork spec"
    )]
    Kind {
        /// The file.
        path: String,
        /// Its kind.
        kind: String,
    },
    /// Not the shape of a ManifestWork spec.
    #[error("{path}: {field} is not a ManifestWork spec: {source}")]
    Spec {
        /// The file.
        path: String,
        /// Where the spec was taken from.
        field: &'static str,
        /// The error.
        #[source]
        source: serde_json::Error,
    },
    /// No manifest to roll out.
    #[error("{path}: {field}.workload.manifests is empty: there is nothing to roll out")]
    Empty {
        /// The file.
        path: String,
        /// Where the spec was taken from.
        field: &'static str,
    },
}

/// Reads the template in `path` (see the module documentation).
pub fn load(path: &Path) -> Result<Template, TemplateError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TemplateError::Read {
        path: name.clone(),
        source,
    })?;
    parse(&text, &name)
}

/// The template in `text`, read from `path` (see the module
/// documentation).
pub(crate) fn parse(text: &str, path: &str) -> Result<Template, TemplateError> {
    let value: Value = serde_saphyr::from_str(text).map_err(|source| TemplateError::Parse {
        path: path.to_owned(),
        source: Box::new(source),
    })?;
    let (field, spec) = match value.get("kind").and_then(Value::as_str) {
        None => ("the document", value.clone()),
        Some("ManifestWork") => ("spec", value["spec"].clone()),
        Some("ManifestWorkReplicaSet") => (
            "spec.manifestWorkTemplate",
            value["spec"]["manifestWorkTemplate"].clone(),
        ),
        Some(kind) => {
            return Err(TemplateError::Kind {
                path: path.to_owned(),
                kind: kind.to_owned(),
            });
        }
    };
    let spec: ManifestWorkSpec =
        serde_json::from_value(spec).map_err(|source| TemplateError::Spec {
            path: path.to_owned(),
            field,
            source,
        })?;
    if spec.workload.manifests.is_empty() {
        return Err(TemplateError::Empty {
            path: path.to_owned(),
            field,
        });
    }
    Ok(Template {
        spec,
        label: format!("the template in {path}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: &str = "workload:\n  manifests:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: cm}\n    data: {weight: \"0\"}\nmanifestConfigs:\n- resourceIdentifier: {name: cm}\n";

    #[test]
    fn a_manifestwork_a_replica_set_or_a_spec_give_the_same_template() {
        let indented: String = SPEC.lines().map(|l| format!("  {l}\n")).collect();
        let deeper: String = SPEC.lines().map(|l| format!("    {l}\n")).collect();
        let work = format!(
            "apiVersion: work.open-cluster-management.io/v1\nkind: ManifestWork\nmetadata: {{name: w}}\nspec:\n{indented}"
        );
        let mwrs = format!(
            "kind: ManifestWorkReplicaSet\nspec:\n  placementRefs: [{{name: p}}]\n  manifestWorkTemplate:\n{deeper}"
        );
        let want = parse(SPEC, "spec.yaml").expect("a spec");
        assert_eq!(want.spec.workload.manifests[0]["data"]["weight"], "0");
        assert_eq!(want.spec.manifest_configs.len(), 1);
        assert_eq!(parse(&work, "w.yaml").expect("a work").spec, want.spec);
        assert_eq!(parse(&mwrs, "m.yaml").expect("a mwrs").spec, want.spec);
        let json = serde_json::to_string(&serde_saphyr::from_str::<Value>(SPEC).expect("yaml"))
            .expect("json");
        assert_eq!(parse(&json, "spec.json").expect("json").spec, want.spec);
    }

    #[test]
    fn unusable_files_are_refused_naming_the_file_and_why() {
        let table = [
            ("kind: Deployment\n", "t.yaml: kind \"Deployment\""),
            (
                "workload: {manifests: []}\n",
                "t.yaml: the document.workload.manifests is empty",
            ),
            (
                "kind: ManifestWork\nspec: {workload: 3}\n",
                "t.yaml: spec is not a ManifestWork spec",
            ),
            ("a: [\n", "t.yaml: not YAML or JSON"),
        ];
        for (text, want) in table {
            let err = parse(text, "t.yaml").expect_err(text).to_string();
            assert!(err.starts_with(want), "{text:?}: {err}");
        }
    }
}
