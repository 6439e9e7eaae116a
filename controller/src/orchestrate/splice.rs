//! A ManifestWork's JSON with its spec spliced in: the spec of a step's
//! works is encoded once, each work's JSON is its own metadata around it.

use crate::api::{ManifestWork, ManifestWorkSpec};

/// The JSON of `work` with `spec_json` (its spec's JSON, encoded once for
/// every work of the step) spliced in rather than encoded again.
pub(crate) fn work_json(
    work: &ManifestWork,
    spec_json: &[u8],
) -> Result<Vec<u8>, serde_json::Error> {
    let head = ManifestWork {
        metadata: work.metadata.clone(),
        spec: ManifestWorkSpec::default(),
        status: None,
    };
    let mut object = match serde_json::to_value(&head)? {
        serde_json::Value::Object(object) => object,
        _ => serde_json::Map::new(),
    };
    object.remove("spec");
    object.remove("status");
    let mut json = serde_json::to_vec(&object)?;
    // `{…}` becomes `{…,"spec":<spec>}`.
    json.pop();
    if !object.is_empty() {
        json.push(b',');
    }
    json.extend_from_slice(b"\"spec\":");
    json.extend_from_slice(spec_json);
    json.push(b'}');
    Ok(json)
}
