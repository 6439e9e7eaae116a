//! Structural schema pruning, as a Kubernetes API server does it to every
//! custom resource it stores: a field the CRD's schema does not declare is
//! dropped. Pure; the simulated API server of `rollout-controller simulate
//! --crds` and the mock API server of the tests use it, so that the
//! controller meets the objects a real hub would give it back.
//!
//! The rules, node by node of the schema:
//!
//! - an object keeps the keys its `properties` declare, each pruned against
//!   its own schema; any other key is pruned against `additionalProperties`
//!   when that is a schema, kept whole when it is `true`, dropped otherwise;
//! - `x-kubernetes-preserve-unknown-fields: true` keeps the keys not
//!   declared, whole; the declared ones are still pruned;
//! - a list's elements are pruned against `items`;
//! - `x-kubernetes-embedded-resource: true` marks a complete object:
//!   `apiVersion` and `kind` are kept, `metadata` keeps the fields of
//!   ObjectMeta only;
//! - at the root of a stored object the same: `apiVersion`, `kind`, and
//!   `metadata` pruned to ObjectMeta's fields, never by the schema;
//! - `allOf`, `anyOf`, `oneOf` and `not` play no part (they only validate),
//!   and scalars are never changed.
//!
//! [`prune`] returns the paths it dropped, like the `unknown field`
//! warnings an API server sends back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use thiserror::Error;

/// The top-level fields of ObjectMeta, the only ones kept in `metadata`.
pub(crate) const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key) == Some(&Value::Bool(true))
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Prunes `value` against the node schema `schema` (an `openAPIV3Schema`
/// or one of its sub-schemas); returns the paths dropped, from `value`.
pub(crate) fn prune(value: &mut Value, schema: &Value) -> Vec<String> {
    let mut dropped = Vec::new();
    prune_at(value, schema, "", &mut dropped);
    dropped
}

/// Prunes a whole stored object against its CRD version's
/// `openAPIV3Schema`: the schema's root, with `apiVersion`, `kind` and
/// `metadata` as the API server keeps them.
pub(crate) fn prune_object(object: &mut Value, schema: &Value) -> Vec<String> {
    let mut dropped = Vec::new();
    prune_resource(object, schema, "", &mut dropped);
    dropped
}

fn prune_at(value: &mut Value, schema: &Value, path: &str, dropped: &mut Vec<String>) {
    if flag(schema, "x-kubernetes-embedded-resource") {
        prune_resource(value, schema, path, dropped);
        return;
    }
    match value {
        Value::Object(map) => prune_map(map, schema, path, &[], dropped),
        Value::Array(items) => {
            let item_schema = schema.get("items").unwrap_or(&Value::Null);
            for (i, item) in items.iter_mut().enumerate() {
                prune_at(item, item_schema, &format!("{path}[{i}]"), dropped);
            }
        }
        _ => {}
    }
}

/// An object with TypeMeta and ObjectMeta: the root of a stored object, or
/// an embedded resource.
fn prune_resource(value: &mut Value, schema: &Value, path: &str, dropped: &mut Vec<String>) {
    let Value::Object(map) = value else {
        return;
    };
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        let meta_path = child(path, "metadata");
        meta.retain(|key, _| {
            let known = OBJECT_META_FIELDS.contains(&key.as_str());
            if !known {
                dropped.push(child(&meta_path, key));
            }
            known
        });
    }
    prune_map(
        map,
        schema,
        path,
        &["apiVersion", "kind", "metadata"],
        dropped,
    );
}

fn prune_map(
    map: &mut Map<String, Value>,
    schema: &Value,
    path: &str,
    kept: &[&str],
    dropped: &mut Vec<String>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
    let mut gone = Vec::new();
    for (key, value) in map.iter_mut() {
        if kept.contains(&key.as_str()) {
            continue;
        }
        let at = child(path, key);
        if let Some(property) = properties.and_then(|p| p.get(key)) {
            prune_at(value, property, &at, dropped);
            continue;
        }
        match additional {
            Some(Value::Bool(true)) => {}
            Some(sub @ Value::Object(_)) => prune_at(value, sub, &at, dropped),
            _ if preserve => {}
            _ => gone.push(key.clone()),
        }
    }
    for key in gone {
        map.remove(&key);
        dropped.push(child(path, &key));
    }
}

/// A CRD directory that cannot be read.
#[derive(Debug, Error)]
pub enum CrdDirError {
    /// The directory or a file in it cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not YAML.
    #[error("{path} is not YAML: {source}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A CustomResourceDefinition lacks a field the API server requires.
    #[error("{path}: a CustomResourceDefinition without {field}")]
    Incomplete {
        /// The file.
        path: PathBuf,
        /// The missing field.
        field: &'static str,
    },
    /// No CustomResourceDefinition at all.
    #[error("{0} holds no CustomResourceDefinition")]
    Empty(PathBuf),
}

/// The `apiVersion` and `kind` of a stored object.
pub(crate) type GroupVersionKind = (String, String);

/// The schemas of a set of CRDs, by `apiVersion` (`group/version`) and
/// kind: what a simulated API server prunes against.
#[derive(Debug, Clone, Default)]
pub struct Schemas {
    by_kind: BTreeMap<GroupVersionKind, Value>,
}

impl Schemas {
    /// The schemas of every served version of `crds` (CRDs as JSON).
    pub fn from_crds<'a>(crds: impl IntoIterator<Item = &'a Value>) -> Schemas {
        let mut schemas = Schemas::default();
        for crd in crds {
            schemas.add(crd);
        }
        schemas
    }

    fn add(&mut self, crd: &Value) -> bool {
        let spec = &crd["spec"];
        let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str())
        else {
            return false;
        };
        for version in spec["versions"].as_array().into_iter().flatten() {
            if let Some(name) = version["name"].as_str() {
                self.by_kind.insert(
                    (format!("{group}/{name}"), kind.to_owned()),
                    version["schema"]["openAPIV3Schema"].clone(),
                );
            }
        }
        true
    }

    /// Every CustomResourceDefinition in the `.yaml`/`.yml`/`.json` files
    /// of `dir` (not its subdirectories); other documents are ignored.
    pub fn from_dir(dir: &Path) -> Result<Schemas, CrdDirError> {
        let read = |path: &Path, source| CrdDirError::Read {
            path: path.to_owned(),
            source,
        };
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| read(dir, e))?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.is_file()
                    && p.extension()
                        .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
            })
            .collect();
        paths.sort();
        let mut schemas = Schemas::default();
        for path in paths {
            let text = std::fs::read_to_string(&path).map_err(|e| read(&path, e))?;
            let documents: Vec<Value> =
                serde_saphyr::from_multiple(&text).map_err(|source| CrdDirError::Yaml {
                    path: path.clone(),
                    source: Box::new(source),
                })?;
            for document in documents
                .iter()
                .filter(|d| d["kind"] == "CustomResourceDefinition")
            {
                if !schemas.add(document) {
                    return Err(CrdDirError::Incomplete {
                        path,
                        field: "spec.group and spec.names.kind",
                    });
                }
            }
        }
        if schemas.by_kind.is_empty() {
            return Err(CrdDirError::Empty(dir.to_owned()));
        }
        Ok(schemas)
    }

    /// The same, with every schema of `other` added (replacing the same
    /// kinds').
    pub fn with(mut self, other: &Schemas) -> Schemas {
        for (key, schema) in &other.by_kind {
            self.by_kind.insert(key.clone(), schema.clone());
        }
        self
    }

    /// The schema of `apiVersion`/`kind`, if a CRD serves it.
    pub(crate) fn schema(&self, api_version: &str, kind: &str) -> Option<&Value> {
        self.by_kind.get(&(api_version.to_owned(), kind.to_owned()))
    }

    /// Prunes `object` against the schema of its `apiVersion` and `kind`;
    /// `None` when no CRD serves them (an API server answers 404).
    pub fn prune(&self, object: &mut Value) -> Option<Vec<String>> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default().to_owned();
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let schema = self.schema(&api_version, &kind)?;
        Some(prune_object(object, schema))
    }

    /// The kinds served, as `apiVersion kind`.
    pub fn kinds(&self) -> Vec<String> {
        self.by_kind
            .keys()
            .map(|(v, k)| format!("{v} {k}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Case {
        name: &'static str,
        schema: Value,
        input: Value,
        want: Value,
        dropped: &'static [&'static str],
    }

    fn cases() -> Vec<Case> {
        let object = |properties: Value| json!({"type": "object", "properties": properties});
        vec![
            Case {
                name: "unknown keys go, known ones stay",
                schema: object(json!({"a": {"type": "string"}})),
                input: json!({"a": "x", "b": 1}),
                want: json!({"a": "x"}),
                dropped: &["b"],
            },
            Case {
                name: "nested properties",
                schema: object(json!({"spec": object(json!({"keep": {"type": "integer"}}))})),
                input: json!({"spec": {"keep": 1, "plugin": "p"}}),
                want: json!({"spec": {"keep": 1}}),
                dropped: &["spec.plugin"],
            },
            Case {
                name: "list items",
                schema: object(json!({"refs": {"type": "array",
                    "items": object(json!({"name": {"type": "string"}}))}})),
                input: json!({"refs": [{"name": "a", "x": 1}, {"name": "b"}]}),
                want: json!({"refs": [{"name": "a"}, {"name": "b"}]}),
                dropped: &["refs[0].x"],
            },
            Case {
                name: "additionalProperties schema",
                schema: json!({"type": "object", "additionalProperties":
                    object(json!({"v": {"type": "string"}}))}),
                input: json!({"k1": {"v": "a", "w": "b"}, "k2": {}}),
                want: json!({"k1": {"v": "a"}, "k2": {}}),
                dropped: &["k1.w"],
            },
            Case {
                name: "additionalProperties true keeps values whole",
                schema: json!({"type": "object", "additionalProperties": true}),
                input: json!({"k": {"deep": {"er": 1}}}),
                want: json!({"k": {"deep": {"er": 1}}}),
                dropped: &[],
            },
            Case {
                name: "additionalProperties false drops",
                schema: json!({"type": "object", "additionalProperties": false}),
                input: json!({"k": 1}),
                want: json!({}),
                dropped: &["k"],
            },
            Case {
                name: "preserve-unknown-fields keeps unknown keys, prunes known ones",
                schema: json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"known": object(json!({"a": {"type": "string"}}))}}),
                input: json!({"known": {"a": "x", "b": "y"}, "free": {"any": [1]}}),
                want: json!({"known": {"a": "x"}, "free": {"any": [1]}}),
                dropped: &["known.b"],
            },
            Case {
                name: "embedded resource keeps type meta, prunes metadata to ObjectMeta",
                schema: json!({"type": "array", "items": {"type": "object",
                    "x-kubernetes-embedded-resource": true,
                    "x-kubernetes-preserve-unknown-fields": true}}),
                input: json!([{"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cm", "labels": {"a": "b"}, "bogus": 1},
                    "data": {"k": "v"}}]),
                want: json!([{"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cm", "labels": {"a": "b"}}, "data": {"k": "v"}}]),
                dropped: &["[0].metadata.bogus"],
            },
            Case {
                name: "embedded resource without preserve keeps only type and object meta",
                schema: json!({"type": "object", "x-kubernetes-embedded-resource": true,
                    "properties": {"spec": {"type": "object"}}}),
                input: json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                    "spec": {"containers": []}, "status": {}}),
                want: json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                    "spec": {}}),
                dropped: &["spec.containers", "status"],
            },
            Case {
                name: "anyOf, oneOf and allOf do not keep fields",
                schema: json!({"type": "object", "properties": {"a": {"type": "string"}},
                    "anyOf": [{"properties": {"b": {}}}], "oneOf": [{"required": ["c"]}],
                    "allOf": [{"properties": {"d": {}}}]}),
                input: json!({"a": "x", "b": 1, "c": 2, "d": 3}),
                want: json!({"a": "x"}),
                dropped: &["b", "c", "d"],
            },
            Case {
                name: "scalars and int-or-string stay",
                schema: object(
                    json!({"n": {"x-kubernetes-int-or-string": true}, "s": {"type": "string"}}),
                ),
                input: json!({"n": "25%", "s": "x"}),
                want: json!({"n": "25%", "s": "x"}),
                dropped: &[],
            },
            Case {
                name: "an object without properties is emptied",
                schema: object(json!({"o": {"type": "object"}})),
                input: json!({"o": {"x": 1}}),
                want: json!({"o": {}}),
                dropped: &["o.x"],
            },
        ]
    }

    #[test]
    fn pruning_follows_the_structural_schema() {
        for case in cases() {
            let mut value = case.input.clone();
            let mut dropped = prune(&mut value, &case.schema);
            dropped.sort();
            assert_eq!(value, case.want, "{}", case.name);
            assert_eq!(dropped, case.dropped, "{}", case.name);
        }
    }

    #[test]
    fn the_root_keeps_type_meta_and_object_meta_only() {
        let schema = json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": {"a": {"type": "string"}}}}});
        let mut object = json!({"apiVersion": "g/v1", "kind": "K",
            "metadata": {"name": "n", "namespace": "ns", "annotations": {"x": "y"},
                         "finalizers": ["f"], "notMeta": true},
            "spec": {"a": "x", "b": "y"}, "extra": 1});
        let mut dropped = prune_object(&mut object, &schema);
        dropped.sort();
        assert_eq!(
            object,
            json!({"apiVersion": "g/v1", "kind": "K",
                "metadata": {"name": "n", "namespace": "ns", "annotations": {"x": "y"}, "finalizers": ["f"]},
                "spec": {"a": "x"}})
        );
        assert_eq!(dropped, ["extra", "metadata.notMeta", "spec.b"]);
        // A schema declaring nothing still keeps TypeMeta and ObjectMeta.
        let mut bare =
            json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {}});
        prune_object(&mut bare, &json!({"type": "object"}));
        assert_eq!(
            bare,
            json!({"apiVersion": "g/v1", "kind": "K", "metadata": {"name": "n"}})
        );
    }

    #[test]
    fn schemas_find_the_kind_by_api_version() {
        let crd = json!({"kind": "CustomResourceDefinition", "spec": {"group": "g.io",
            "names": {"kind": "Thing"},
            "versions": [{"name": "v1", "schema": {"openAPIV3Schema":
                {"type": "object", "properties": {"spec": {"type": "object"}}}}}]}});
        let schemas = Schemas::from_crds([&crd]);
        let mut object = json!({"apiVersion": "g.io/v1", "kind": "Thing", "metadata": {},
            "spec": {"x": 1}});
        assert_eq!(schemas.prune(&mut object), Some(vec!["spec.x".to_owned()]));
        let mut other = json!({"apiVersion": "g.io/v2", "kind": "Thing"});
        assert_eq!(schemas.prune(&mut other), None);
        assert_eq!(schemas.kinds(), ["g.io/v1 Thing"]);
    }

    #[test]
    fn a_directory_without_crds_is_refused() {
        let dir = std::env::temp_dir().join(format!("prune-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("kustomization.yaml"), "resources: []\n").expect("write");
        assert!(matches!(
            Schemas::from_dir(&dir),
            Err(CrdDirError::Empty(_))
        ));
        std::fs::write(dir.join("bad.yaml"), "a: [\n").expect("write");
        assert!(matches!(
            Schemas::from_dir(&dir),
            Err(CrdDirError::Yaml { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(matches!(
            Schemas::from_dir(&dir),
            Err(CrdDirError::Read { .. })
        ));
    }
}
