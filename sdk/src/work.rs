//! Reading and patching a ManifestWork (`work.open-cluster-management.io/v1`)
//! as JSON.
//!
//! The plugin API carries the ManifestWork as JSON bytes. [`ManifestWork`]
//! parses them into a [`serde_json::Value`], checks the shape of the parts the
//! helpers touch (the root, `metadata`, `spec.workload.manifests[]`), and
//! offers views over the manifests it carries ([`Manifest`], [`ManifestMut`])
//! with getters and setters for the usual fields. Everything else in the
//! object is kept as it came, so a round trip through this type changes
//! nothing a plugin did not change.

use bytes::Bytes;
use serde_json::{Map, Value};

/// What is wrong with a ManifestWork, or with a patch applied to it. The
/// messages name the JSON path at fault, in `a.b[2].c` form.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
    /// The bytes were empty.
    #[error("ManifestWork is empty")]
    Empty,
    /// The bytes are not JSON.
    #[error("ManifestWork is not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// A value has the wrong JSON type: `path` should be `expected`.
    #[error("`{path}` must be {expected}, found {found}")]
    Shape {
        /// Where, in `a.b[2].c` form (`.` alone for the root).
        path: String,
        /// What it must be (`an object`, `an array`).
        expected: &'static str,
        /// What it is (`a string`, `null`, …).
        found: &'static str,
    },
    /// A patch path was empty.
    #[error("empty path for a manifest field")]
    EmptyPath,
    /// Serializing failed (cannot happen for values built by this module).
    #[error("cannot serialize ManifestWork: {0}")]
    Serialize(#[source] serde_json::Error),
}

/// A parsed ManifestWork.
///
/// Built by [`ManifestWork::from_slice`] or [`ManifestWork::from_value`],
/// which guarantee that the root is a JSON object and that `metadata`,
/// `spec`, `spec.workload` and `spec.workload.manifests` (each where present)
/// are objects, an array of objects respectively. Absent parts read as empty:
/// a work without `spec.workload.manifests` has no manifests.
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestWork {
    value: Value,
}

impl ManifestWork {
    /// Parses JSON bytes.
    ///
    /// Fails with [`WorkError::Empty`] on no bytes, [`WorkError::Json`] on
    /// invalid JSON and [`WorkError::Shape`] when a part the helpers use has
    /// the wrong type.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, WorkError> {
        if bytes.is_empty() {
            return Err(WorkError::Empty);
        }
        let value = serde_json::from_slice(bytes).map_err(WorkError::Json)?;
        Self::from_value(value)
    }

    /// Wraps a JSON value after checking its shape (see [`ManifestWork`]).
    pub fn from_value(value: Value) -> Result<Self, WorkError> {
        expect_object(&value, ".")?;
        if let Some(metadata) = value.get("metadata") {
            expect_object(metadata, "metadata")?;
        }
        if let Some(spec) = value.get("spec") {
            expect_object(spec, "spec")?;
            if let Some(workload) = spec.get("workload") {
                expect_object(workload, "spec.workload")?;
                if let Some(manifests) = workload.get("manifests") {
                    let list = manifests.as_array().ok_or_else(|| WorkError::Shape {
                        path: "spec.workload.manifests".into(),
                        expected: "an array",
                        found: type_name(manifests),
                    })?;
                    for (i, manifest) in list.iter().enumerate() {
                        expect_object(manifest, &manifest_path(i, ""))?;
                        if let Some(metadata) = manifest.get("metadata") {
                            expect_object(metadata, &manifest_path(i, ".metadata"))?;
                        }
                    }
                }
            }
        }
        Ok(Self { value })
    }

    /// The JSON bytes of the work, compact.
    pub fn to_bytes(&self) -> Result<Bytes, WorkError> {
        serde_json::to_vec(&self.value)
            .map(Bytes::from)
            .map_err(WorkError::Serialize)
    }

    /// The whole object.
    pub fn as_value(&self) -> &Value {
        &self.value
    }

    /// The whole object, to change what the helpers do not cover. Keep the
    /// shape described on [`ManifestWork`]: the helpers skip parts that no
    /// longer have it rather than fail.
    pub fn as_value_mut(&mut self) -> &mut Value {
        &mut self.value
    }

    /// The object, unwrapped.
    pub fn into_value(self) -> Value {
        self.value
    }

    /// `apiVersion`, when it is a string.
    pub fn api_version(&self) -> Option<&str> {
        self.value.get("apiVersion").and_then(Value::as_str)
    }

    /// `kind`, when it is a string.
    pub fn kind(&self) -> Option<&str> {
        self.value.get("kind").and_then(Value::as_str)
    }

    /// `metadata.name`, when it is a string.
    pub fn name(&self) -> Option<&str> {
        metadata_str(&self.value, "name")
    }

    /// `metadata.namespace` (the managed cluster's namespace on the hub),
    /// when it is a string.
    pub fn namespace(&self) -> Option<&str> {
        metadata_str(&self.value, "namespace")
    }

    /// `metadata.annotations[key]` of the work itself, when it is a string.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        metadata_map_str(&self.value, "annotations", key)
    }

    /// `metadata.labels[key]` of the work itself, when it is a string.
    pub fn label(&self, key: &str) -> Option<&str> {
        metadata_map_str(&self.value, "labels", key)
    }

    /// Sets `metadata.annotations[key]` of the work itself, creating the maps
    /// on the way. Fails when `metadata.annotations` exists and is not an
    /// object.
    pub fn set_annotation(&mut self, key: &str, value: impl Into<String>) -> Result<(), WorkError> {
        set_metadata_entry(&mut self.value, "", "annotations", key, value.into())
    }

    /// Sets `metadata.labels[key]` of the work itself (see
    /// [`ManifestWork::set_annotation`]).
    pub fn set_label(&mut self, key: &str, value: impl Into<String>) -> Result<(), WorkError> {
        set_metadata_entry(&mut self.value, "", "labels", key, value.into())
    }

    /// How many manifests `spec.workload.manifests` holds.
    pub fn manifest_count(&self) -> usize {
        self.manifest_list().map_or(0, Vec::len)
    }

    /// The manifests, in order.
    pub fn manifests(&self) -> impl Iterator<Item = Manifest<'_>> {
        self.manifest_list()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(index, value)| Manifest { index, value })
    }

    /// The manifests, in order, for changing them.
    pub fn manifests_mut(&mut self) -> impl Iterator<Item = ManifestMut<'_>> {
        self.value
            .pointer_mut("/spec/workload/manifests")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(index, value)| ManifestMut { index, value })
    }

    /// The manifests of a kind (`Deployment`, `Rollout`, …), in order.
    pub fn manifests_of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = Manifest<'a>> {
        self.manifests().filter(move |m| m.kind() == Some(kind))
    }

    /// The manifests of a kind, in order, for changing them.
    pub fn manifests_of_kind_mut<'a>(
        &'a mut self,
        kind: &'a str,
    ) -> impl Iterator<Item = ManifestMut<'a>> {
        self.manifests_mut().filter(move |m| m.kind() == Some(kind))
    }

    /// The first manifest with this `kind` and `metadata.name`.
    pub fn find(&self, kind: &str, name: &str) -> Option<Manifest<'_>> {
        self.manifests()
            .find(|m| m.kind() == Some(kind) && m.name() == Some(name))
    }

    /// The first manifest with this `kind` and `metadata.name`, for changing it.
    pub fn find_mut(&mut self, kind: &str, name: &str) -> Option<ManifestMut<'_>> {
        self.manifests_mut()
            .find(|m| m.kind() == Some(kind) && m.name() == Some(name))
    }

    fn manifest_list(&self) -> Option<&Vec<Value>> {
        self.value
            .pointer("/spec/workload/manifests")
            .and_then(Value::as_array)
    }
}

impl std::str::FromStr for ManifestWork {
    type Err = WorkError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_slice(s.as_bytes())
    }
}

impl TryFrom<Value> for ManifestWork {
    type Error = WorkError;

    fn try_from(value: Value) -> Result<Self, Self::Error> {
        Self::from_value(value)
    }
}

impl From<ManifestWork> for Value {
    fn from(work: ManifestWork) -> Self {
        work.value
    }
}

/// One manifest of a work (`spec.workload.manifests[index]`), read only.
#[derive(Debug, Clone, Copy)]
pub struct Manifest<'a> {
    index: usize,
    value: &'a Value,
}

impl<'a> Manifest<'a> {
    /// Its position in `spec.workload.manifests`, from 0.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The manifest's JSON.
    pub fn as_value(&self) -> &'a Value {
        self.value
    }

    /// `apiVersion`, when it is a string (`apps/v1`, `v1`).
    pub fn api_version(&self) -> Option<&'a str> {
        self.value.get("apiVersion").and_then(Value::as_str)
    }

    /// The API group: `apiVersion` before its `/`, empty for the core group
    /// (`v1`); `None` without an `apiVersion`.
    pub fn group(&self) -> Option<&'a str> {
        self.api_version()
            .map(|v| v.rsplit_once('/').map_or("", |(group, _)| group))
    }

    /// `kind`, when it is a string.
    pub fn kind(&self) -> Option<&'a str> {
        self.value.get("kind").and_then(Value::as_str)
    }

    /// `metadata.name`, when it is a string.
    pub fn name(&self) -> Option<&'a str> {
        metadata_str(self.value, "name")
    }

    /// `metadata.namespace`, when it is a string.
    pub fn namespace(&self) -> Option<&'a str> {
        metadata_str(self.value, "namespace")
    }

    /// `metadata.annotations[key]`, when it is a string.
    pub fn annotation(&self, key: &str) -> Option<&'a str> {
        metadata_map_str(self.value, "annotations", key)
    }

    /// `metadata.labels[key]`, when it is a string.
    pub fn label(&self, key: &str) -> Option<&'a str> {
        metadata_map_str(self.value, "labels", key)
    }

    /// The value at `path` (keys of nested objects), if every step exists.
    pub fn get(&self, path: &[&str]) -> Option<&'a Value> {
        path.iter().try_fold(self.value, |v, key| v.get(key))
    }
}

/// One manifest of a work (`spec.workload.manifests[index]`), to change.
#[derive(Debug)]
pub struct ManifestMut<'a> {
    index: usize,
    value: &'a mut Value,
}

impl ManifestMut<'_> {
    /// A read-only view, for the getters of [`Manifest`].
    pub fn view(&self) -> Manifest<'_> {
        Manifest {
            index: self.index,
            value: self.value,
        }
    }

    /// Its position in `spec.workload.manifests`, from 0.
    pub fn index(&self) -> usize {
        self.index
    }

    /// `kind`, when it is a string.
    pub fn kind(&self) -> Option<&str> {
        self.view().kind()
    }

    /// `metadata.name`, when it is a string.
    pub fn name(&self) -> Option<&str> {
        self.view().name()
    }

    /// The API group (see [`Manifest::group`]).
    pub fn group(&self) -> Option<&str> {
        self.view().group()
    }

    /// `apiVersion`, when it is a string.
    pub fn api_version(&self) -> Option<&str> {
        self.view().api_version()
    }

    /// `metadata.namespace`, when it is a string.
    pub fn namespace(&self) -> Option<&str> {
        self.view().namespace()
    }

    /// `metadata.annotations[key]`, when it is a string.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.view().annotation(key)
    }

    /// `metadata.labels[key]`, when it is a string.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.view().label(key)
    }

    /// The value at `path` (see [`Manifest::get`]).
    pub fn get(&self, path: &[&str]) -> Option<&Value> {
        self.view().get(path)
    }

    /// The manifest's JSON, to change it freely.
    pub fn as_value_mut(&mut self) -> &mut Value {
        self.value
    }

    /// Sets `metadata.annotations[key]`, creating `metadata` and the map when
    /// absent. Fails, naming the path, when one of them exists and is not an
    /// object.
    pub fn set_annotation(&mut self, key: &str, value: impl Into<String>) -> Result<(), WorkError> {
        let at = manifest_path(self.index, "");
        set_metadata_entry(self.value, &at, "annotations", key, value.into())
    }

    /// Sets `metadata.labels[key]` (see [`ManifestMut::set_annotation`]).
    pub fn set_label(&mut self, key: &str, value: impl Into<String>) -> Result<(), WorkError> {
        let at = manifest_path(self.index, "");
        set_metadata_entry(self.value, &at, "labels", key, value.into())
    }

    /// Removes `metadata.annotations[key]`; answers the value it had.
    pub fn remove_annotation(&mut self, key: &str) -> Option<Value> {
        self.value
            .get_mut("metadata")
            .and_then(|m| m.get_mut("annotations"))
            .and_then(Value::as_object_mut)
            .and_then(|a| a.remove(key))
    }

    /// Sets the value at `path` (keys of nested objects, e.g.
    /// `["spec", "strategy", "canary", "steps"]`), creating missing objects on
    /// the way. Fails with [`WorkError::Shape`] when a step exists and is not
    /// an object, and with [`WorkError::EmptyPath`] on an empty path.
    pub fn set(&mut self, path: &[&str], value: Value) -> Result<(), WorkError> {
        let (last, parents) = path.split_last().ok_or(WorkError::EmptyPath)?;
        let mut at = manifest_path(self.index, "");
        let mut current: &mut Value = self.value;
        for key in parents {
            at.push('.');
            at.push_str(key);
            current = object_mut(current, &at)?
                .entry(key.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
        }
        object_mut(current, &at)?.insert(last.to_string(), value);
        Ok(())
    }
}

/// `spec.workload.manifests[i]` followed by `rest`.
fn manifest_path(index: usize, rest: &str) -> String {
    format!("spec.workload.manifests[{index}]{rest}")
}

fn expect_object(value: &Value, path: &str) -> Result<(), WorkError> {
    if value.is_object() {
        Ok(())
    } else {
        Err(WorkError::Shape {
            path: path.to_string(),
            expected: "an object",
            found: type_name(value),
        })
    }
}

/// `value` as a map, or the shape error for `path`.
fn object_mut<'v>(
    value: &'v mut Value,
    path: &str,
) -> Result<&'v mut Map<String, Value>, WorkError> {
    let found = type_name(value);
    value.as_object_mut().ok_or_else(|| WorkError::Shape {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.to_string()
        },
        expected: "an object",
        found,
    })
}

fn metadata_str<'v>(value: &'v Value, key: &str) -> Option<&'v str> {
    value.get("metadata")?.get(key)?.as_str()
}

fn metadata_map_str<'v>(value: &'v Value, map: &str, key: &str) -> Option<&'v str> {
    value.get("metadata")?.get(map)?.get(key)?.as_str()
}

/// Sets `metadata.<map>[key] = value` on the object at `at` (a path prefix
/// for messages, empty for the root).
fn set_metadata_entry(
    object: &mut Value,
    at: &str,
    map: &str,
    key: &str,
    value: String,
) -> Result<(), WorkError> {
    let join = |rest: &str| {
        if at.is_empty() {
            rest.to_string()
        } else {
            format!("{at}.{rest}")
        }
    };
    let metadata = object_mut(object, at)?
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let entries = object_mut(metadata, &join("metadata"))?
        .entry(map)
        .or_insert_with(|| Value::Object(Map::new()));
    object_mut(entries, &join(&format!("metadata.{map}")))?
        .insert(key.to_string(), Value::String(value));
    Ok(())
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": {"name": "hello", "namespace": "cluster1"},
            "spec": {"workload": {"manifests": [
                {"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": "web", "namespace": "default", "annotations": {"keep": "me"}},
                 "spec": {"replicas": 2}},
                {"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
                 "metadata": {"name": "web"},
                 "spec": {"strategy": {"canary": {"steps": [{"setWeight": 20}]}}}},
                {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}}
            ]}},
            "status": {"conditions": []}
        })
    }

    fn work() -> ManifestWork {
        ManifestWork::from_value(sample()).unwrap()
    }

    #[test]
    fn reads_identity_and_manifests() {
        let w = work();
        assert_eq!(w.api_version(), Some("work.open-cluster-management.io/v1"));
        assert_eq!(w.kind(), Some("ManifestWork"));
        assert_eq!(w.name(), Some("hello"));
        assert_eq!(w.namespace(), Some("cluster1"));
        assert_eq!(w.manifest_count(), 3);
        let kinds: Vec<_> = w.manifests().map(|m| m.kind().unwrap()).collect();
        assert_eq!(kinds, ["Deployment", "Rollout", "ConfigMap"]);
        let groups: Vec<_> = w.manifests().map(|m| m.group().unwrap()).collect();
        assert_eq!(groups, ["apps", "argoproj.io", ""]);
        let d = w.find("Deployment", "web").unwrap();
        assert_eq!(d.index(), 0);
        assert_eq!(d.annotation("keep"), Some("me"));
        assert_eq!(d.get(&["spec", "replicas"]), Some(&json!(2)));
        assert_eq!(w.find("Rollout", "web").unwrap().index(), 1);
        assert!(w.find("Rollout", "api").is_none());
        assert_eq!(w.manifests_of_kind("ConfigMap").count(), 1);
    }

    #[test]
    fn a_work_without_manifests_has_none() {
        let w: ManifestWork = r#"{"kind": "ManifestWork"}"#.parse().unwrap();
        assert_eq!(w.manifest_count(), 0);
        assert_eq!(w.manifests().count(), 0);
        assert!(w.name().is_none());
    }

    #[test]
    fn sets_annotations_and_labels_creating_maps() {
        let mut w = work();
        for mut m in w.manifests_mut() {
            m.set_annotation("rollout-hooks.io/x", "1").unwrap();
            m.set_label("team", "a").unwrap();
        }
        w.set_annotation("on-work", "yes").unwrap();
        let v = w.as_value();
        let manifests = v["spec"]["workload"]["manifests"].as_array().unwrap();
        for m in manifests {
            assert_eq!(m["metadata"]["annotations"]["rollout-hooks.io/x"], "1");
            assert_eq!(m["metadata"]["labels"]["team"], "a");
        }
        // existing entries and unknown fields survive
        assert_eq!(manifests[0]["metadata"]["annotations"]["keep"], "me");
        assert_eq!(v["status"], json!({"conditions": []}));
        assert_eq!(w.annotation("on-work"), Some("yes"));
    }

    #[test]
    fn set_creates_nested_objects_and_replaces_values() {
        let mut w = work();
        let mut r = w.find_mut("Rollout", "web").unwrap();
        r.set(&["spec", "strategy", "canary", "steps"], json!([]))
            .unwrap();
        r.set(&["spec", "paused"], json!(false)).unwrap();
        assert!(
            w.find_mut("ConfigMap", "x").is_none(),
            "that ConfigMap has no name"
        );
        let r = w.find("Rollout", "web").unwrap();
        assert_eq!(
            r.get(&["spec", "strategy", "canary", "steps"]),
            Some(&json!([]))
        );
        assert_eq!(r.get(&["spec", "paused"]), Some(&json!(false)));
        let mut m = w.manifests_mut().nth(2).unwrap();
        m.set(&["a", "b"], json!(1)).unwrap();
        assert_eq!(
            w.manifests().nth(2).unwrap().get(&["a", "b"]),
            Some(&json!(1))
        );
    }

    #[test]
    fn set_names_the_path_that_is_not_an_object() {
        let mut w = work();
        let mut d = w.find_mut("Deployment", "web").unwrap();
        let err = d.set(&["spec", "replicas", "x"], json!(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`spec.workload.manifests[0].spec.replicas` must be an object, found a number"
        );
        assert!(matches!(d.set(&[], json!(1)), Err(WorkError::EmptyPath)));
    }

    #[test]
    fn annotations_that_are_not_a_map_are_reported() {
        let mut v = sample();
        v["spec"]["workload"]["manifests"][2]["metadata"] = json!({"annotations": "oops"});
        let mut w = ManifestWork::from_value(v).unwrap();
        let err = w
            .manifests_mut()
            .map(|mut m| m.set_annotation("k", "v"))
            .find_map(Result::err)
            .unwrap();
        assert_eq!(
            err.to_string(),
            "`spec.workload.manifests[2].metadata.annotations` must be an object, found a string"
        );
    }

    #[test]
    fn remove_annotation_answers_the_old_value() {
        let mut w = work();
        let mut d = w.find_mut("Deployment", "web").unwrap();
        assert_eq!(d.remove_annotation("keep"), Some(json!("me")));
        assert_eq!(d.remove_annotation("keep"), None);
    }

    #[test]
    fn rejects_malformed_input_naming_the_problem() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "ManifestWork is empty"),
            (b"{", "ManifestWork is not valid JSON"),
            (b"[]", "`.` must be an object, found an array"),
            (
                br#"{"metadata": 3}"#,
                "`metadata` must be an object, found a number",
            ),
            (
                br#"{"spec": {"workload": {"manifests": {}}}}"#,
                "`spec.workload.manifests` must be an array, found an object",
            ),
            (
                br#"{"spec": {"workload": {"manifests": [{}, "x"]}}}"#,
                "`spec.workload.manifests[1]` must be an object, found a string",
            ),
            (
                br#"{"spec": {"workload": {"manifests": [{"metadata": null}]}}}"#,
                "`spec.workload.manifests[0].metadata` must be an object, found null",
            ),
        ];
        for (input, want) in cases {
            let err = ManifestWork::from_slice(input).unwrap_err().to_string();
            assert!(err.starts_with(want), "{err:?} should start with {want:?}");
        }
    }

    #[test]
    fn round_trips_unchanged_json() {
        let w = work();
        let bytes = w.to_bytes().unwrap();
        let back: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, sample());
        assert_eq!(Value::from(w), sample());
    }
}
