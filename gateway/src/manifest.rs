//! The checks on a `MutateManifestWork` answer (docs/plugin-api.md §2): it must be a
//! JSON object that keeps its input's `apiVersion`, `kind`, `metadata.name`,
//! `metadata.namespace` and `spec.executor`; "changed the object" means a
//! different JSON value, not different bytes.
//!
//! An answer is first read in one pass per work into a digest ([`digest`]):
//! its identity fields and a hash of its value, with no tree built. The pass
//! is a byte scanner ([`scan`]) for the plain JSON works are made of, and
//! `serde_json`'s visitor for what the scanner leaves to it (floats,
//! surrogate escapes, errors), so what is accepted and each error's wording
//! stay `serde_json`'s. A changed
//! work (the common answer that is not the input's own bytes) differs in
//! hash, which decides. Otherwise a work is parsed into [`Json`], a tree that
//! borrows its strings from the bytes (only a string with escapes is copied)
//! and keeps each object's members sorted by key: it compares equal exactly
//! when `serde_json::Value`s of the same bytes would, without allocating a
//! `String` per key and value.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::Number;

mod digest;
mod scan;
mod visit;

/// The fields a plugin may not change (the plugin API's table).
pub use rollout_proto::IDENTITY_FIELDS;

/// A parsed JSON value borrowing from its text. Equality is
/// `serde_json::Value`'s: objects compare as maps (key order does not
/// matter; of a repeated key the last member counts), numbers as
/// `serde_json::Number`s.
#[derive(Debug, Clone, PartialEq)]
pub enum Json<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    /// Members sorted by key, each key once.
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

impl<'a> Json<'a> {
    /// The same value, owning its text.
    pub(crate) fn into_owned(self) -> Json<'static> {
        match self {
            Json::Null => Json::Null,
            Json::Bool(b) => Json::Bool(b),
            Json::Number(n) => Json::Number(n),
            Json::String(s) => Json::String(Cow::Owned(s.into_owned())),
            Json::Array(items) => Json::Array(items.into_iter().map(Json::into_owned).collect()),
            Json::Object(members) => Json::Object(
                members
                    .into_iter()
                    .map(|(k, v)| (Cow::Owned(k.into_owned()), v.into_owned()))
                    .collect(),
            ),
        }
    }

    /// The member `key` of an object.
    pub(crate) fn get(&self, key: &str) -> Option<&Json<'a>> {
        match self {
            Json::Object(members) => members
                .binary_search_by(|(k, _)| k.as_ref().cmp(key))
                .ok()
                .map(|i| &members[i].1),
            _ => None,
        }
    }

    /// The value at a path of object keys.
    pub(crate) fn at(&self, path: &[&str]) -> Option<&Json<'a>> {
        path.iter().try_fold(self, |v, key| v.get(key))
    }

    fn kind(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Number(_) => "number",
            Json::String(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        }
    }
}

/// The work as text. JSON is UTF-8 throughout (outside strings only ASCII
/// is valid), so checking the whole work at once accepts and refuses exactly
/// what the parser would, and lets it skip checking string by string (most
/// of its time on a ManifestWork, which is mostly strings).
fn text(bytes: &[u8]) -> Result<&str, NotAnObject> {
    std::str::from_utf8(bytes).map_err(NotAnObject::NotUtf8)
}

/// Why bytes are not one JSON object; each message reads after the name of
/// what was checked ("the ManifestWork to mutate …").
#[derive(Debug, thiserror::Error)]
pub enum NotAnObject {
    #[error("is not JSON (not UTF-8: {0})")]
    NotUtf8(#[source] std::str::Utf8Error),
    #[error("is not JSON ({0})")]
    Syntax(#[source] serde_json::Error),
    /// JSON, of this other kind (`array`, `string`, …).
    #[error("is a JSON {0}, not an object")]
    Kind(&'static str),
}

/// Parses a ManifestWork: it must be a JSON object.
pub fn parse_object(bytes: &[u8]) -> Result<Json<'_>, NotAnObject> {
    match serde_json::from_str::<Json<'_>>(text(bytes)?) {
        Ok(v @ Json::Object(_)) => Ok(v),
        Ok(other) => Err(NotAnObject::Kind(other.kind())),
        Err(e) => Err(NotAnObject::Syntax(e)),
    }
}

/// Checks that `bytes` are one JSON object, as [`parse_object`] would
/// accept, without building it: a syntax pass only, allocating nothing for
/// the values. The error reads as [`parse_object`]'s.
pub fn check_object(bytes: &[u8]) -> Result<(), NotAnObject> {
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(text(bytes)?) {
        return Err(NotAnObject::Syntax(e));
    }
    match not_an_object(bytes) {
        None => Ok(()),
        Some(kind) => Err(NotAnObject::Kind(kind)),
    }
}

/// Of valid JSON, what it is if not an object: its first significant byte
/// says.
fn not_an_object(json: &[u8]) -> Option<&'static str> {
    Some(match json.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => return None,
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        _ => "number",
    })
}

/// The first identity field whose value differs between `input` and
/// `output`, with both values, if any.
pub fn identity_change(input: &Json, output: &Json) -> Option<(&'static str, String, String)> {
    IDENTITY_FIELDS.iter().find_map(|(field, path)| {
        let before = input.at(path);
        let after = output.at(path);
        (before != after).then(|| (*field, show(before), show(after)))
    })
}

/// Reads `bytes`, which must be one JSON object, into its digest: by the
/// byte scanner, or through `serde_json` for what the scanner leaves to it.
/// Accepts and refuses exactly what [`parse_object`] does, with the same
/// errors.
fn digest_of(bytes: &[u8]) -> Result<digest::Digest<'_>, NotAnObject> {
    let text = text(bytes)?;
    match scan::digest(text) {
        Some(digest) => Ok(digest),
        None => visit::through_serde(text),
    }
}

/// Why a member's changed ManifestWork cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// The work the member was given is not a JSON object (the caller's
    /// fault, not the member's): the reason, as [`parse_object`] gives it.
    Input(String),
    /// The member's answer breaks the contract: the reason, to follow
    /// "returned a ManifestWork that ".
    Answer(String),
}

/// What checking an answer needs of a work, read once ([`summarise`]) and
/// kept beside it while it is passed on: the caller's work is read on
/// arrival, and each accepted answer's summary is the next member's input
/// one, so no work of a chain is read twice.
#[derive(Debug, Clone)]
pub struct Summary {
    hash: u64,
    /// No object in the work repeats a key.
    decisive: bool,
    identity: IdentityValues<'static>,
}

/// Reads `bytes`, which must be one JSON object (the errors read as
/// [`parse_object`]'s), into its [`Summary`].
pub fn summarise(bytes: &[u8]) -> Result<Summary, NotAnObject> {
    digest_of(bytes).map(Summary::of)
}

impl Summary {
    fn of(digest: digest::Digest<'_>) -> Summary {
        Summary {
            hash: digest.hash,
            decisive: digest.decisive,
            identity: digest.identity.map(|v| v.map(Json::into_owned)),
        }
    }
}

/// Checks a member's answer `output` to the work `input`, when the bytes
/// differ: it must be a JSON object keeping the identity fields. Returns
/// whether it differs from the input as a JSON value.
///
/// Each work is read once into a [`digest::Digest`] (no tree): the answer's
/// syntax and both works' identity fields come from there, and different
/// hashes prove the values differ, the common case of a plugin that changed
/// something. Only when the hashes cannot decide (equal, or a repeated key)
/// are the two compared in full: the answer parsed into a tree and the input
/// read against it ([`Against`]). [`check_answer_to`] is the same with the
/// input already summarised.
pub fn check_answer(input: &[u8], output: &[u8]) -> Result<bool, Refused> {
    let out = digest_of(output).map_err(|e| Refused::Answer(e.to_string()))?;
    let read = summarise(input).map_err(|e| Refused::Input(e.to_string()))?;
    judge(input, &read, output, &out)
}

/// [`check_answer`] of `output` to `input`, whose summary is `read`; with
/// the answer's summary, for the next member.
pub fn check_answer_to(
    input: &[u8],
    read: &Summary,
    output: &[u8],
) -> Result<(bool, Summary), Refused> {
    let out = digest_of(output).map_err(|e| Refused::Answer(e.to_string()))?;
    let changed = judge(input, read, output, &out)?;
    Ok((changed, Summary::of(out)))
}

fn judge(
    input: &[u8],
    read: &Summary,
    output: &[u8],
    out: &digest::Digest<'_>,
) -> Result<bool, Refused> {
    if let Some((field, before, after)) = IDENTITY_FIELDS
        .iter()
        .zip(read.identity.iter().zip(out.identity.iter()))
        .find_map(|((field, _), (before, after))| {
            (before != after).then(|| (*field, show(before.as_ref()), show(after.as_ref())))
        })
    {
        return Err(Refused::Answer(format!(
            "changes {field} from {before} to {after}"
        )));
    }
    if out.decisive && read.decisive && out.hash != read.hash {
        return Ok(true);
    }
    let tree = parse_object(output).map_err(|e| Refused::Answer(e.to_string()))?;
    let equal = read_against(input, &tree).map_err(|e| Refused::Input(e.to_string()))?;
    Ok(!equal)
}

/// A work's identity fields, in [`IDENTITY_FIELDS`]' order.
type IdentityValues<'a> = [Option<Json<'a>>; IDENTITY_FIELDS.len()];

/// Reads `input` (it must be a JSON object) against `expected`: whether they
/// are equal, as `serde_json::Value`s would be. The errors read as
/// [`parse_object`]'s.
fn read_against(input: &[u8], expected: &Json<'_>) -> Result<bool, NotAnObject> {
    let text = text(input)?;
    let mut de = serde_json::Deserializer::from_str(text);
    let equal = Against {
        expected: Some(expected),
    }
    .deserialize(&mut de)
    .and_then(|equal| de.end().map(|()| equal))
    .map_err(NotAnObject::Syntax)?;
    match not_an_object(input) {
        None => Ok(equal),
        Some(kind) => Err(NotAnObject::Kind(kind)),
    }
}

/// Reads one JSON value, comparing it with `expected` (`None`: nothing to
/// compare with, so unequal). Equality is [`Json`]'s: objects as maps (a
/// repeated key's last member counts), numbers as `serde_json::Number`s.
struct Against<'e, 'x> {
    expected: Option<&'e Json<'x>>,
}

impl<'de> DeserializeSeed<'de> for Against<'_, '_> {
    /// Whether the value equals the expected one.
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        if self.expected.is_none() {
            // Nothing to compare: a syntax pass.
            serde::de::IgnoredAny::deserialize(deserializer)?;
            return Ok(false);
        }
        deserializer.deserialize_any(self)
    }
}

impl Against<'_, '_> {
    fn scalar(&self, v: Json<'_>) -> bool {
        self.expected == Some(&v)
    }
}

impl<'de> Visitor<'de> for Against<'_, '_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<bool, E> {
        Ok(self.scalar(Json::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<bool, E> {
        Ok(self.scalar(Json::Number(v.into())))
    }

    fn visit_u64<E>(self, v: u64) -> Result<bool, E> {
        Ok(self.scalar(Json::Number(v.into())))
    }

    fn visit_f64<E>(self, v: f64) -> Result<bool, E> {
        Ok(self.scalar(Number::from_f64(v).map_or(Json::Null, Json::Number)))
    }

    fn visit_str<E>(self, v: &str) -> Result<bool, E> {
        Ok(matches!(self.expected, Some(Json::String(e)) if e == v))
    }

    fn visit_none<E>(self) -> Result<bool, E> {
        Ok(self.scalar(Json::Null))
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(self.scalar(Json::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        DeserializeSeed::deserialize(self, d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        let items: &[Json] = match self.expected {
            Some(Json::Array(items)) => items,
            _ => &[],
        };
        let mut equal = matches!(self.expected, Some(Json::Array(_)));
        let mut count = 0;
        loop {
            let seed = Against {
                expected: if equal { items.get(count) } else { None },
            };
            match seq.next_element_seed(seed)? {
                Some(same) => equal &= same,
                None => break,
            }
            count += 1;
        }
        Ok(equal && count == items.len())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        let members: &[(Cow<str>, Json)] = match self.expected {
            Some(Json::Object(members)) => members,
            _ => &[],
        };
        let is_object = matches!(self.expected, Some(Json::Object(_)));
        // Per expected member: not seen, seen equal, seen different (the last
        // of a repeated key decides, as in a map that overwrites).
        const UNSEEN: u8 = 0;
        const SAME: u8 = 1;
        const DIFFERENT: u8 = 2;
        let mut few = [UNSEEN; 32];
        let mut many = Vec::new();
        let seen: &mut [u8] = if members.len() <= few.len() {
            &mut few[..members.len()]
        } else {
            many.resize(members.len(), UNSEEN);
            &mut many
        };
        let mut extra = false;
        while let Some(Key(key)) = map.next_key()? {
            let index = members
                .binary_search_by(|(k, _)| k.as_ref().cmp(key.as_ref()))
                .ok();
            extra |= index.is_none();
            let expected = index.map(|i| &members[i].1);
            let same = map.next_value_seed(Against { expected })?;
            if let Some(i) = index {
                seen[i] = if same { SAME } else { DIFFERENT };
            }
        }
        Ok(is_object && !extra && seen.iter().all(|s| *s == SAME))
    }
}

fn show(v: Option<&Json>) -> String {
    match v {
        None => "nothing".into(),
        Some(Json::String(s)) => format!("\"{s}\""),
        Some(other) => serde_json::to_string(other).unwrap_or_default(),
    }
}

impl<'de> Deserialize<'de> for Json<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json<'de>, E> {
        Ok(Json::Bool(v))
    }

    // The numbers as `serde_json::Value` keeps them (its visitor's rules).
    fn visit_i64<E>(self, v: i64) -> Result<Json<'de>, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json<'de>, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Json<'de>, E> {
        Ok(Number::from_f64(v).map_or(Json::Null, Json::Number))
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Borrowed(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Json<'de>, E> {
        Ok(Json::String(Cow::Owned(v)))
    }

    fn visit_none<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_unit<E>(self) -> Result<Json<'de>, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Json<'de>, D::Error> {
        Deserialize::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json<'de>, A::Error> {
        let mut members: Vec<(Cow<'de, str>, Json<'de>)> = Vec::new();
        while let Some(Key(key)) = map.next_key()? {
            members.push((key, map.next_value()?));
        }
        // Sorted (stable: a repeated key keeps its order), then the last of
        // each repeated key kept, as a map that overwrites would.
        members.sort_by(|a, b| a.0.cmp(&b.0));
        let mut kept: Vec<(Cow<'de, str>, Json<'de>)> = Vec::with_capacity(members.len());
        for member in members {
            match kept.last_mut() {
                Some(last) if last.0 == member.0 => *last = member,
                _ => kept.push(member),
            }
        }
        Ok(Json::Object(kept))
    }
}

/// An object key, borrowed when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

/// As `serde_json::Value` serializes: objects in key order.
impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(v) => s.serialize_str(v),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(members) => {
                let mut map = s.serialize_map(Some(members.len()))?;
                for (k, v) in members {
                    map.serialize_entry(k.as_ref(), v)?;
                }
                map.end()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    #[test]
    fn only_objects_are_manifest_works() {
        assert!(parse_object(br#"{"kind":"ManifestWork"}"#).is_ok());
        assert_eq!(
            parse_object(b"[1]").err().map(|e| e.to_string()).as_deref(),
            Some("is a JSON array, not an object")
        );
        assert!(matches!(
            parse_object(b"{not json"),
            Err(NotAnObject::Syntax(_))
        ));
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
            b"{\"a\": \"\xff\"}",
            b"{\"\xc3\": 1}",
            b"\xef\xbb\xbf{}",
        ] {
            // The same verdict as a `serde_json::Value` parse of the bytes
            // (what the gateway did before), and between the two checks; a
            // syntax error's wording may differ.
            let value = serde_json::from_slice::<Value>(text);
            assert_eq!(
                parse_object(text).is_ok(),
                value.as_ref().is_ok_and(Value::is_object),
                "{}",
                String::from_utf8_lossy(text)
            );
            let (cheap, full) = (check_object(text), parse_object(text).map(drop));
            // The kind of failure, not its wording.
            let summary = |r: &Result<(), NotAnObject>| match r {
                Ok(()) => Ok(()),
                Err(NotAnObject::NotUtf8(_) | NotAnObject::Syntax(_)) => Err("not JSON"),
                Err(NotAnObject::Kind(kind)) => Err(*kind),
            };
            assert_eq!(
                summary(&cheap),
                summary(&full),
                "{}: {cheap:?} vs {full:?}",
                String::from_utf8_lossy(text)
            );
        }
    }

    /// What the route reads of a caller's work on arrival refuses exactly
    /// what parsing does, numbers out of range included (a syntax pass
    /// alone takes them).
    #[test]
    fn a_summary_refuses_what_parsing_refuses() {
        for text in [
            &br#"{"kind":"ManifestWork"}"#[..],
            b"[1]",
            b"{not json",
            b"{} {}",
            b"",
            b"{\"n\": 1e400}",
            b"{\"a\": \"\xff\"}",
        ] {
            assert_eq!(
                summarise(text).map(drop).map_err(|e| e.to_string()),
                parse_object(text).map(drop).map_err(|e| e.to_string()),
                "{}",
                String::from_utf8_lossy(text)
            );
        }
        assert!(check_object(b"{\"n\": 1e400}").is_ok());
    }

    #[test]
    fn identity_changes_are_found_field_by_field() {
        let base = json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                          "metadata": {"name": "w", "namespace": "cluster1", "labels": {"a": "1"}}});
        let text = |v: &Value| serde_json::to_vec(v).expect("serializes");
        let base_text = text(&base);
        let parsed = parse_object(&base_text).expect("object");
        let mut relabelled = base.clone();
        relabelled["metadata"]["labels"]["a"] = json!("2");
        let relabelled = text(&relabelled);
        assert_eq!(
            identity_change(&parsed, &parse_object(&relabelled).expect("object")),
            None
        );
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
            let changed = text(&changed);
            let got = identity_change(&parsed, &parse_object(&changed).expect("object"))
                .expect("a change");
            assert_eq!(got.0, field);
            assert_eq!(got.2, "\"other\"");
        }
        let mut removed = base.clone();
        removed["metadata"]
            .as_object_mut()
            .expect("object")
            .remove("namespace");
        let removed = text(&removed);
        assert_eq!(
            identity_change(&parsed, &parse_object(&removed).expect("object")).map(|c| c.2),
            Some("nothing".to_string())
        );
        // A value that is not a string is shown as JSON, as before.
        let numbered = br#"{"apiVersion": "work.open-cluster-management.io/v1", "kind": {"b": 1, "a": [true, null]},
                           "metadata": {"name": "w", "namespace": "cluster1"}}"#;
        assert_eq!(
            identity_change(&parsed, &parse_object(numbered).expect("object")),
            Some((
                "kind",
                "\"ManifestWork\"".to_string(),
                r#"{"a":[true,null],"b":1}"#.to_string()
            ))
        );
        // Escaped and plain spellings of a name are the same name.
        let escaped =
            br#"{"apiVersion": "work.open-cluster-management.io\/v1", "kind": "Manifest\u0057ork",
                          "metadata": {"namespace": "cluster1", "name": "w"}}"#;
        assert_eq!(
            identity_change(&parsed, &parse_object(escaped).expect("object")),
            None
        );
    }

    /// JSON texts for the equality property: small alphabets, so that equal
    /// values (and repeated keys) come up often, spelled with escapes,
    /// spaces and keys in any order.
    pub(super) fn json_text() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("true".to_string()),
            Just("false".to_string()),
            prop::sample::select(vec![
                "0",
                "-0",
                "1",
                "1.0",
                "-1",
                "1e2",
                "100",
                "0.5",
                "18446744073709551615",
                "-9223372036854775808"
            ])
            .prop_map(str::to_string),
            prop::sample::select(vec![
                r#""a""#,
                r#""\u0061""#,
                r#""b""#,
                r#""""#,
                r#""a\nb""#,
                r#""é""#
            ])
            .prop_map(str::to_string),
        ];
        leaf.prop_recursive(4, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec(
                    (
                        prop::sample::select(vec![r#""a""#, r#""b""#, r#""\u0061""#, r#""kind""#]),
                        inner
                    ),
                    0..4
                )
                .prop_map(|members| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, v)| format!("{k} : {v}"))
                        .collect();
                    format!("{{ {} }}", members.join(" , "))
                }),
            ]
        })
    }

    /// A work's `metadata` for the identity property: anything, or an
    /// object with (maybe repeated) `name` and `namespace` members.
    pub(super) fn metadata_text() -> impl Strategy<Value = String> {
        prop_oneof![
            json_text(),
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        r#""name""#,
                        r#""namespace""#,
                        r#""n\u0061me""#,
                        r#""a""#
                    ]),
                    json_text()
                ),
                0..4
            )
            .prop_map(|members| {
                let members: Vec<String> = members
                    .into_iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    }

    proptest::proptest! {
        #[test]
        fn equality_is_that_of_serde_json_values(a in json_text(), b in json_text()) {
            let (va, vb): (Value, Value) = (
                serde_json::from_str(&a).expect("valid JSON"),
                serde_json::from_str(&b).expect("valid JSON"),
            );
            let (ja, jb): (Json, Json) = (
                serde_json::from_str(&a).expect("valid JSON"),
                serde_json::from_str(&b).expect("valid JSON"),
            );
            proptest::prop_assert_eq!(ja == jb, va == vb, "{} vs {}", a, b);
            // Reading `a` against `b`'s tree (inside an object, as works
            // are) agrees with comparing the two trees.
            let (wa, wb) = (format!("{{\"v\": {a}}}"), format!("{{\"v\": {b}}}"));
            let equal = read_against(wa.as_bytes(), &parse_object(wb.as_bytes()).expect("object"))
                .expect("an object");
            proptest::prop_assert_eq!(equal, va == vb, "{} vs {}", a, b);
            // And the answer check, digests first, agrees with both.
            proptest::prop_assert_eq!(
                check_answer(wa.as_bytes(), wb.as_bytes()),
                Ok(va != vb),
                "{} vs {}", a, b
            );
            // The same with the input summarised beforehand, and the
            // answer's summary judging the next answer (back to `a`) as a
            // fresh read would.
            let read = summarise(wa.as_bytes()).expect("an object");
            let (changed, next) =
                check_answer_to(wa.as_bytes(), &read, wb.as_bytes()).expect("checked");
            proptest::prop_assert_eq!(changed, va != vb, "{} vs {}", a, b);
            proptest::prop_assert_eq!(
                check_answer_to(wb.as_bytes(), &next, wa.as_bytes()).map(|(c, _)| c),
                Ok(va != vb),
                "{} vs {}", b, a
            );
            // Equal values always hash alike.
            let (da, db) = (
                digest_of(wa.as_bytes()).expect("an object"),
                digest_of(wb.as_bytes()).expect("an object"),
            );
            if va == vb {
                proptest::prop_assert_eq!(da.hash == db.hash || !da.decisive || !db.decisive, true);
            }
            proptest::prop_assert_eq!(&ja, &ja.clone());
            // Shown as serde_json shows the value.
            proptest::prop_assert_eq!(
                serde_json::to_string(&ja).expect("serializes"),
                serde_json::to_string(&va).expect("serializes")
            );
        }
    }

    proptest::proptest! {
        /// The identity fields taken while reading a work are those of its
        /// tree (a repeated key's last member counts), and an answer is
        /// "changed" exactly when its tree differs.
        #[test]
        fn identity_read_on_the_way_is_the_trees(
            api in json_text(), kind in json_text(), meta in metadata_text(),
            meta2 in proptest::option::of(metadata_text()), other in json_text(),
        ) {
            let second = meta2.map(|m| format!(", \"metadata\": {m}")).unwrap_or_default();
            let input = format!(
                r#"{{"apiVersion": {api}, "metadata": {meta}, "kind": {kind}, "v": {other}{second}}}"#
            );
            let tree = parse_object(input.as_bytes()).expect("an object");
            let same = format!(
                r#"{{"kind": {kind}, "v": {other}, "apiVersion": {api}, "metadata": {meta}{second}}}"#
            );
            let equal = read_against(input.as_bytes(), &tree).expect("an object");
            let digested = digest_of(input.as_bytes()).expect("an object");
            for (i, (_, path)) in IDENTITY_FIELDS.iter().enumerate() {
                proptest::prop_assert_eq!(digested.identity[i].as_ref(), tree.at(path), "{}", input);
            }
            proptest::prop_assert!(equal);
            proptest::prop_assert_eq!(check_answer(input.as_bytes(), same.as_bytes()), Ok(false));
            let moved = format!(r#"{{"apiVersion": {api}, "kind": {kind}, "metadata": {meta}{second}}}"#);
            proptest::prop_assert_eq!(
                check_answer(input.as_bytes(), moved.as_bytes()),
                Ok(true)
            );
        }
    }
}
