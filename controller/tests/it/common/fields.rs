//! ManifestWorks stored as a real API server stores them, for field
//! ownership: every write records `metadata.managedFields`, a server-side
//! apply without `force` that would change a field another manager owns is
//! answered 409 Conflict (naming the manager and the field), a forced one
//! takes the field over, and a JSON merge patch makes its manager own what
//! it changed and removes what it deleted from every manager. What is
//! written is pruned first against the hub's CRDs, as the API server prunes
//! a request before it merges it. The store belongs to a [`Hub`]
//! (`Hub::works`): one mock API server, whose scripted requests answer
//! from it.
//!
//! Lists are atomic (as in a CRD without `x-kubernetes-list-type`); only
//! `spec`, `metadata.labels` and `metadata.annotations` are tracked, which
//! is what the controller's conflict detection reads. Time is a logical
//! clock from the real time: each write is one second after the previous
//! one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use http::{Method, StatusCode};
use rollout_controller::api::prune::Schemas;
use serde_json::{Map, Value, json};

use super::{Expect, Hub, Recorded, work_path};

/// A field path, such as `["spec", "workload", "manifests"]`.
pub type FieldPath = Vec<String>;

const API_VERSION: &str = "work.open-cluster-management.io/v1";

/// ManifestWorks by `(namespace, name)`, with their managed fields.
#[derive(Debug)]
pub struct Store {
    /// The hub's CRDs, which every write is pruned against.
    schemas: Arc<Schemas>,
    works: BTreeMap<(String, String), Value>,
    /// The time of the last write, in seconds since the epoch.
    seconds: i64,
    resource_version: u64,
}

/// A store shared by the expectations of one test.
pub type Shared = Arc<Mutex<Store>>;

impl Store {
    /// An empty store of a hub with `schemas`.
    /// Its clock starts at the real time (the controller under test reads
    /// the real clock), truncated to seconds as managedFields times are.
    pub(super) fn shared(schemas: Arc<Schemas>) -> Shared {
        Arc::new(Mutex::new(Store {
            schemas,
            works: BTreeMap::new(),
            seconds: jiff::Timestamp::now().as_second(),
            resource_version: 0,
        }))
    }

    fn tick(&mut self) -> String {
        self.seconds += 1;
        self.resource_version += 1;
        let t = jiff::Timestamp::from_second(self.seconds).unwrap();
        t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    /// The work `namespace/name`, as stored.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Value> {
        self.works
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Every work, as a list.
    pub fn list(&self) -> Value {
        json!({"apiVersion": API_VERSION, "kind": "ManifestWorkList",
               "metadata": {"resourceVersion": self.resource_version.to_string()},
               "items": self.works.values().cloned().collect::<Vec<_>>()})
    }

    /// `object` pruned against the hub's CRDs.
    fn pruned(&self, object: &Value) -> Value {
        let mut object = object.clone();
        self.schemas.prune(&mut object);
        object
    }

    /// A server-side apply of `body` by `manager`.
    pub fn apply(&mut self, manager: &str, force: bool, body: &Value) -> (StatusCode, Value) {
        let body = &self.pruned(body);
        let namespace = body["metadata"]["namespace"].as_str().unwrap_or_default();
        let name = body["metadata"]["name"].as_str().unwrap_or_default();
        let key = (namespace.to_owned(), name.to_owned());
        let applied = tracked(body);
        let Some(mut stored) = self.works.get(&key).cloned() else {
            let time = self.tick();
            let mut stored = json!({
                "apiVersion": API_VERSION, "kind": "ManifestWork",
                "metadata": {"name": name, "namespace": namespace, "uid": format!("uid-{name}-{namespace}"),
                             "generation": 1, "resourceVersion": self.resource_version.to_string(),
                             "managedFields": []},
                "spec": {}
            });
            for path in &applied {
                set(&mut stored, path, value_at(body, path).cloned());
            }
            set_entries(
                &mut stored,
                vec![entry(manager, "Apply", &time, None, &applied)],
            );
            self.works.insert(key, stored.clone());
            return (StatusCode::CREATED, stored);
        };
        let mut entries = entries(&stored);
        let mut conflicts: Vec<(String, FieldPath)> = Vec::new();
        // Fields of another manager only: the same manager's own entries
        // (an apply after its own merge patch) do not conflict.
        for e in entries.iter().filter(|e| e.manager != manager && !e.status) {
            for path in e.fields.intersection(&applied) {
                if value_at(&stored, path) != value_at(body, path) {
                    conflicts.push((e.manager.clone(), path.clone()));
                }
            }
        }
        if !conflicts.is_empty() && !force {
            return (StatusCode::CONFLICT, conflict_status(name, &conflicts));
        }
        for e in &mut entries {
            if e.is(manager, "Apply") {
                continue;
            }
            for (_, path) in conflicts.iter().filter(|(m, _)| *m == e.manager) {
                e.fields.remove(path);
            }
        }
        let before = stored["spec"].clone();
        // Fields this manager applied before and no longer does are removed
        // unless another manager owns them.
        let previous = entries
            .iter()
            .find(|e| e.is(manager, "Apply"))
            .map(|e| e.fields.clone())
            .unwrap_or_default();
        for path in previous.difference(&applied) {
            if !entries
                .iter()
                .any(|e| !e.is(manager, "Apply") && e.fields.contains(path))
            {
                set(&mut stored, path, None);
            }
        }
        for path in &applied {
            set(&mut stored, path, value_at(body, path).cloned());
        }
        let time = self.tick();
        entries.retain(|e| !e.is(manager, "Apply"));
        entries.push(Entry {
            manager: manager.to_owned(),
            operation: "Apply".to_owned(),
            time,
            status: false,
            fields: applied,
        });
        self.store(key, stored, &before, entries)
    }

    /// A JSON merge patch of `namespace/name` by `manager`; 404 if absent.
    pub fn merge_patch(
        &mut self,
        namespace: &str,
        name: &str,
        manager: &str,
        patch: &Value,
    ) -> (StatusCode, Value) {
        let key = (namespace.to_owned(), name.to_owned());
        let Some(old) = self.works.get(&key).cloned() else {
            return (
                StatusCode::NOT_FOUND,
                json!({"kind": "Status", "code": 404}),
            );
        };
        let mut stored = old.clone();
        merge(&mut stored, patch);
        let stored = self.pruned(&stored);
        let (old_fields, new_fields) = (tracked(&old), tracked(&stored));
        let changed: BTreeSet<FieldPath> = new_fields
            .iter()
            .filter(|p| value_at(&old, p) != value_at(&stored, p))
            .cloned()
            .collect();
        let removed: BTreeSet<FieldPath> = old_fields.difference(&new_fields).cloned().collect();
        let mut entries = entries(&old);
        for e in entries.iter_mut().filter(|e| !e.status) {
            e.fields
                .retain(|p| !changed.contains(p) && !removed.contains(p));
        }
        let time = self.tick();
        match entries
            .iter_mut()
            .find(|e| e.is(manager, "Update") && !e.status)
        {
            Some(e) => {
                e.fields.extend(changed);
                e.time = time;
            }
            None => entries.push(Entry {
                manager: manager.to_owned(),
                operation: "Update".to_owned(),
                time,
                status: false,
                fields: changed,
            }),
        }
        self.store(key, stored, &old["spec"], entries)
    }

    /// The work agent's status update (the `status` subresource).
    #[allow(dead_code, reason = "part of the model of an API server's store")]
    pub fn set_status(&mut self, namespace: &str, name: &str, status: Value) {
        let key = (namespace.to_owned(), name.to_owned());
        let time = self.tick();
        let Some(mut stored) = self.works.get(&key).cloned() else {
            return;
        };
        stored["status"] = status;
        let mut stored = self.pruned(&stored);
        let mut list = entries(&stored);
        list.retain(|e| !(e.manager == "work-agent" && e.status));
        list.push(Entry {
            manager: "work-agent".to_owned(),
            operation: "Update".to_owned(),
            time,
            status: true,
            fields: BTreeSet::from([vec!["status".to_owned()]]),
        });
        set_entries(&mut stored, list.iter().map(Entry::to_json).collect());
        self.works.insert(key, stored);
    }

    fn store(
        &mut self,
        key: (String, String),
        mut stored: Value,
        spec_before: &Value,
        mut entries: Vec<Entry>,
    ) -> (StatusCode, Value) {
        entries.retain(|e| !e.fields.is_empty());
        if stored["spec"] != *spec_before {
            let generation = stored["metadata"]["generation"].as_i64().unwrap_or(0);
            stored["metadata"]["generation"] = json!(generation + 1);
        }
        stored["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
        set_entries(&mut stored, entries.iter().map(Entry::to_json).collect());
        self.works.insert(key, stored.clone());
        (StatusCode::OK, stored)
    }
}

/// The server-side apply of `cluster/name`, answered from `hub`'s store
/// with the request's `fieldManager` and `force`.
pub fn expect_apply(hub: &Hub, cluster: &str, name: &str) -> Expect {
    let store = Arc::clone(&hub.works);
    Expect::recorded(Method::PATCH, work_path(cluster, name), move |r| {
        let params = r.params();
        let manager = params
            .iter()
            .find_map(|p| p.strip_prefix("fieldManager="))
            .unwrap_or_default()
            .to_owned();
        let force = params.iter().any(|p| p == "force=true");
        assert!(
            r.content_type.starts_with("application/apply-patch"),
            "{}",
            r.content_type
        );
        store.lock().unwrap().apply(&manager, force, &r.body)
    })
}

/// A JSON merge patch of `cluster/name`, answered from `hub`'s store.
#[allow(dead_code, reason = "part of the model of an API server's store")]
pub fn expect_merge(hub: &Hub, cluster: &str, name: &str) -> Expect {
    let store = Arc::clone(&hub.works);
    let (cluster, name) = (cluster.to_owned(), name.to_owned());
    Expect::recorded(Method::PATCH, work_path(&cluster, &name), move |r| {
        let manager = r
            .params()
            .iter()
            .find_map(|p| p.strip_prefix("fieldManager=").map(str::to_owned))
            .unwrap_or_else(|| "unknown".to_owned());
        assert_eq!(r.content_type, "application/merge-patch+json");
        store
            .lock()
            .unwrap()
            .merge_patch(&cluster, &name, &manager, &r.body)
    })
}

/// The list of works, answered from `hub`'s store when the request comes.
pub fn expect_list(hub: &Hub) -> Expect {
    let store = Arc::clone(&hub.works);
    Expect::recorded(Method::GET, super::works_path(), move |_: &Recorded| {
        (StatusCode::OK, store.lock().unwrap().list())
    })
}

#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    time: String,
    status: bool,
    fields: BTreeSet<FieldPath>,
}

impl Entry {
    fn is(&self, manager: &str, operation: &str) -> bool {
        self.manager == manager && self.operation == operation
    }

    fn to_json(&self) -> Value {
        entry(
            &self.manager,
            &self.operation,
            &self.time,
            self.status.then_some("status"),
            &self.fields,
        )
    }
}

fn entry(
    manager: &str,
    operation: &str,
    time: &str,
    subresource: Option<&str>,
    fields: &BTreeSet<FieldPath>,
) -> Value {
    let mut tree = Map::new();
    for path in fields {
        let mut node = &mut tree;
        for segment in path {
            node = node
                .entry(format!("f:{segment}"))
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .unwrap();
        }
    }
    let mut e = json!({"manager": manager, "operation": operation, "apiVersion": API_VERSION,
                       "time": time, "fieldsType": "FieldsV1", "fieldsV1": tree});
    if let Some(sub) = subresource {
        e["subresource"] = json!(sub);
    }
    e
}

fn entries(stored: &Value) -> Vec<Entry> {
    let list = stored["metadata"]["managedFields"].as_array().cloned();
    list.unwrap_or_default()
        .iter()
        .map(|e| {
            let mut fields = BTreeSet::new();
            leaves_of_tree(&e["fieldsV1"], &mut Vec::new(), &mut fields);
            Entry {
                manager: e["manager"].as_str().unwrap_or_default().to_owned(),
                operation: e["operation"].as_str().unwrap_or_default().to_owned(),
                time: e["time"].as_str().unwrap_or_default().to_owned(),
                status: e["subresource"] == "status",
                fields,
            }
        })
        .collect()
}

fn set_entries(stored: &mut Value, list: Vec<Value>) {
    stored["metadata"]["managedFields"] = Value::Array(list);
}

fn leaves_of_tree(tree: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    let Some(object) = tree.as_object().filter(|o| !o.is_empty()) else {
        if !prefix.is_empty() {
            out.insert(prefix.clone());
        }
        return;
    };
    for (key, child) in object {
        prefix.push(key.trim_start_matches("f:").to_owned());
        leaves_of_tree(child, prefix, out);
        prefix.pop();
    }
}

/// The tracked leaf fields of an object: `spec` (objects walked, anything
/// else a leaf) and each label and annotation.
fn tracked(object: &Value) -> BTreeSet<FieldPath> {
    let mut out = BTreeSet::new();
    for map in ["labels", "annotations"] {
        if let Some(m) = object["metadata"][map].as_object() {
            for key in m.keys() {
                out.insert(vec!["metadata".to_owned(), map.to_owned(), key.clone()]);
            }
        }
    }
    let mut prefix = vec!["spec".to_owned()];
    leaves(&object["spec"], &mut prefix, &mut out);
    out
}

fn leaves(value: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
    match value.as_object() {
        Some(object) if !object.is_empty() => {
            for (key, child) in object {
                prefix.push(key.clone());
                leaves(child, prefix, out);
                prefix.pop();
            }
        }
        _ if value.is_null() => {}
        _ => {
            out.insert(prefix.clone());
        }
    }
}

fn value_at<'v>(object: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter()
        .try_fold(object, |v, key| v.get(key))
        .filter(|v| !v.is_null())
}

fn set(object: &mut Value, path: &[String], value: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = object;
    for key in parents {
        if !node.get(key).is_some_and(Value::is_object) {
            if value.is_none() {
                return;
            }
            node[key] = json!({});
        }
        node = &mut node[key];
    }
    match (value, node.as_object_mut()) {
        (Some(v), _) => node[last] = v,
        (None, Some(map)) => {
            map.remove(last);
        }
        (None, None) => {}
    }
}

/// RFC 7386.
/// `patch` merged into `target` as a JSON merge patch (RFC 7386) is.
pub fn merge(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (key, value) in patch {
        if value.is_null() {
            if let Some(map) = target.as_object_mut() {
                map.remove(key);
            }
        } else {
            merge(&mut target[key], value);
        }
    }
}

fn conflict_status(name: &str, conflicts: &[(String, FieldPath)]) -> Value {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(manager, path)| {
            json!({"type": "FieldManagerConflict",
                   "message": format!("conflict with \"{manager}\" using {API_VERSION}"),
                   "field": format!(".{}", path.join("."))})
        })
        .collect();
    json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": format!("Apply failed with {} conflict(s): {}", conflicts.len(),
            causes.iter().map(|c| format!("{}: {}", c["message"].as_str().unwrap_or_default(),
                c["field"].as_str().unwrap_or_default())).collect::<Vec<_>>().join(", ")),
        "reason": "Conflict",
        "details": {"name": name, "group": "work.open-cluster-management.io", "kind": "manifestworks",
                    "causes": causes},
        "code": 409
    })
}
