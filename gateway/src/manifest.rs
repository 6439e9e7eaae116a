//! The checks on a `MutateManifestWork` answer (docs/plugin-api.md §2): it must be a
//! JSON object that keeps its input's `apiVersion`, `kind`, `metadata.name` and
//! `metadata.namespace`; "changed the object" means a different JSON value,
//! not different bytes.

use serde_json::Value;

/// The fields a plugin may not change: it may not redirect a workload.
pub const IDENTITY_FIELDS: [(&str, &str); 4] = [
    ("apiVersion", "/apiVersion"),
    ("kind", "/kind"),
    ("metadata.name", "/metadata/name"),
    ("metadata.namespace", "/metadata/namespace"),
];

/// Parses a ManifestWork: it must be a JSON object.
pub fn parse_object(bytes: &[u8]) -> Result<Value, String> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(format!("is a JSON {}, not an object", kind_of(&other))),
        Err(e) => Err(format!("is not JSON ({e})")),
    }
}

/// Checks that `bytes` are one JSON object, as [`parse_object`] would
/// accept, without building it: a syntax pass only, allocating nothing for
/// the values. The error reads as [`parse_object`]'s.
pub fn check_object(bytes: &[u8]) -> Result<(), String> {
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
        return Err(format!("is not JSON ({e})"));
    }
    // Valid JSON: its first significant byte says what it is.
    let kind = match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => return Ok(()),
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    };
    Err(format!("is a JSON {kind}, not an object"))
}

/// The first identity field whose value differs between `input` and
/// `output`, with both values, if any.
pub fn identity_change(input: &Value, output: &Value) -> Option<(&'static str, String, String)> {
    IDENTITY_FIELDS.iter().find_map(|(field, pointer)| {
        let before = input.pointer(pointer);
        let after = output.pointer(pointer);
        (before != after).then(|| (*field, show(before), show(after)))
    })
}

fn show(v: Option<&Value>) -> String {
    match v {
        None => "nothing".into(),
        Some(Value::String(s)) => format!("\"{s}\""),
        Some(other) => other.to_string(),
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_objects_are_manifest_works() {
        assert!(parse_object(br#"{"kind":"ManifestWork"}"#).is_ok());
        assert_eq!(
            parse_object(b"[1]").err().as_deref(),
            Some("is a JSON array, not an object")
        );
        assert!(
            parse_object(b"{not json")
                .expect_err("bad")
                .starts_with("is not JSON")
        );
        assert!(parse_object(b"").is_err());
    }

    #[test]
    fn the_cheap_check_agrees_with_parsing() {
        for text in [
            &br#"{"kind":"ManifestWork"}"#[..],
            b" \n{ } ",
            b"[1]",
            b"\"s\"",
            b"true",
            b"null",
            b"-1.5e3",
            b"{not json",
            b"{} {}",
            b"",
            b"{\"a\": [1, 2,]}",
        ] {
            // The same verdict; a syntax error's wording may differ.
            let (cheap, full) = (check_object(text), parse_object(text).map(drop));
            let summary = |r: &Result<(), String>| {
                r.clone()
                    .map_err(|e| e.split(" (").next().unwrap_or_default().to_string())
            };
            assert_eq!(
                summary(&cheap),
                summary(&full),
                "{}: {cheap:?} vs {full:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn identity_changes_are_found_field_by_field() {
        let base = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                          "metadata": {"name": "w", "namespace": "cluster1", "labels": {"a": "1"}}});
        let mut relabelled = base.clone();
        relabelled["metadata"]["labels"]["a"] = json!("2");
        assert_eq!(identity_change(&base, &relabelled), None);
        for (field, pointer_parent, key) in [
            ("apiVersion", None, "apiVersion"),
            ("kind", None, "kind"),
            ("metadata.name", Some("metadata"), "name"),
            ("metadata.namespace", Some("metadata"), "namespace"),
        ] {
            let mut changed = base.clone();
            match pointer_parent {
                None => changed[key] = json!("other"),
                Some(p) => changed[p][key] = json!("other"),
            }
            let got = identity_change(&base, &changed).expect("a change");
            assert_eq!(got.0, field);
            assert_eq!(got.2, "\"other\"");
        }
        let mut removed = base.clone();
        removed["metadata"]
            .as_object_mut()
            .expect("object")
            .remove("namespace");
        assert_eq!(
            identity_change(&base, &removed).map(|c| c.2),
            Some("nothing".to_string())
        );
    }
}
