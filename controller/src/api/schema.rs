//! Hand-written OpenAPI schemas for fields whose Rust type has no schema of
//! its own (raw JSON, the engine's types), in the shapes Kubernetes accepts
//! as structural schemas.
//!
//! Each function has the signature schemars expects of
//! `#[schemars(schema_with = "...")]`. A field using one must also carry
//! `#[serde(default)]`, or schemars lists it as required.

use schemars::{Schema, SchemaGenerator, json_schema};

/// The pattern of a count-or-percentage (`maxFailures`, `maxConcurrency`),
/// as upstream's CRD spells it.
pub(crate) const COUNT_OR_PERCENT_PATTERN: &str = "^((100|[0-9]{1,2})%|[0-9]+)$";

/// The pattern of `progressDeadline`, as upstream's CRD spells it.
pub(crate) const PROGRESS_DEADLINE_PATTERN: &str = "^(([0-9])+[h|m|s])|None$";

/// Whether `value` is its type's default: for `skip_serializing_if` on a
/// `#[serde(default)]` field, which also keeps that default out of the
/// schema (schemars writes a field's default unless it is skipped).
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Any JSON object, kept whole by the API server.
pub(crate) fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A list of JSON objects, each kept whole by the API server.
pub(crate) fn any_objects(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        },
    })
}

/// A list of complete Kubernetes objects (`apiVersion`, `kind`, `metadata`
/// required by the API server), as ManifestWork manifests are.
pub(crate) fn embedded_resources(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "description": "A Kubernetes resource to deploy on the managed cluster.",
            "type": "object",
            "x-kubernetes-embedded-resource": true,
            "x-kubernetes-preserve-unknown-fields": true,
        },
    })
}

/// A count of clusters or a percentage string such as `"25%"`.
pub(crate) fn count_or_percent(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-int-or-string": true,
        "pattern": COUNT_OR_PERCENT_PATTERN,
    })
}

/// A cluster's rollout status, spelled as [`crate::rollout::RolloutStatus`]
/// serializes it.
pub(crate) fn rollout_status(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": ["ToApply", "Progressing", "Succeeded", "Failed", "TimeOut", "Skip", "Validating"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::RolloutStatus;

    #[test]
    fn rollout_status_enum_matches_the_engine_spelling() {
        let schema = rollout_status(&mut SchemaGenerator::default());
        let values = schema
            .get("enum")
            .and_then(|v| v.as_array())
            .expect("enum values");
        let all = [
            RolloutStatus::ToApply,
            RolloutStatus::Progressing,
            RolloutStatus::Succeeded,
            RolloutStatus::Failed,
            RolloutStatus::TimeOut,
            RolloutStatus::Skip,
            RolloutStatus::Validating,
        ];
        assert_eq!(values.len(), all.len());
        for status in all {
            let spelled = serde_json::to_value(status).expect("serializes");
            assert!(values.contains(&spelled), "{spelled} missing");
        }
    }
}
