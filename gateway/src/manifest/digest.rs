//! One pass over a work that finds what checking an answer needs without
//! building a tree: a hash of its JSON value, whether that hash can tell
//! values apart, and its identity fields.
//!
//! The hash is a function of the value as [`Json`] compares it: object
//! members are combined in any order (a wrapping sum), strings by their
//! decoded text, numbers as `serde_json::Number`s (`0.0` and `-0.0` alike).
//! So two works whose hashes differ are different values, for certain. Equal
//! hashes prove nothing (two values may share a hash), and an object with a
//! repeated key hashes its overwritten member too: [`Digest::decisive`] is
//! false then, and the caller compares the works in full.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

use super::{IDENTITY_FIELDS, IdentityValues, Json, Key, NotAnObject, not_an_object, text};

/// What one pass over a work found.
#[derive(Debug)]
pub(crate) struct Digest<'a> {
    pub(crate) hash: u64,
    /// No object in the work repeats a key, so a different hash means a
    /// different value.
    pub(crate) decisive: bool,
    /// The work's identity fields, in `IDENTITY_FIELDS`' order.
    pub(crate) identity: IdentityValues<'a>,
}

/// Reads `bytes`, which must be one JSON object, into its [`Digest`]. Accepts
/// and refuses exactly what `parse_object` does, with the same errors.
pub(crate) fn digest(bytes: &[u8]) -> Result<Digest<'_>, NotAnObject> {
    let mut de = serde_json::Deserializer::from_str(text(bytes)?);
    let mut pass = Pass {
        identity: [const { None }; IDENTITY_FIELDS.len()],
        keys: Vec::new(),
        decisive: true,
    };
    let hash = Seed {
        level: Level::Root,
        pass: &mut pass,
    }
    .deserialize(&mut de)
    .and_then(|hash| de.end().map(|()| hash))
    .map_err(NotAnObject::Syntax)?;
    if let Some(kind) = not_an_object(bytes) {
        return Err(NotAnObject::Kind(kind));
    }
    Ok(Digest {
        hash,
        decisive: pass.decisive,
        identity: pass.identity,
    })
}

/// Where in the work a value is: the identity fields are members of the
/// root object and of some of its members (`metadata`, `spec`:
/// [`IDENTITY_FIELDS`]' paths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    /// The root's member of this name, which holds identity fields.
    Parent(&'static str),
    Other,
}

impl Level {
    /// The slot in [`IdentityValues`] of the member `key` at this level.
    fn identity_slot(self, key: &str) -> Option<usize> {
        IDENTITY_FIELDS
            .iter()
            .position(|(_, path)| self.holds(path) && path.last() == Some(&key))
    }

    /// Whether a field at `path` is a member of an object at this level.
    fn holds(self, path: &[&str]) -> bool {
        match self {
            Level::Root => path.len() == 1,
            Level::Parent(parent) => path.len() == 2 && path[0] == parent,
            Level::Other => false,
        }
    }

    /// The slots of the identity fields that are members at this level.
    fn slots(self) -> impl Iterator<Item = usize> {
        (0..IDENTITY_FIELDS.len()).filter(move |&i| self.holds(IDENTITY_FIELDS[i].1))
    }

    /// The level of the member `key`'s value.
    fn child(self, key: &str) -> Level {
        if self != Level::Root {
            return Level::Other;
        }
        IDENTITY_FIELDS
            .iter()
            .find_map(|(_, path)| (path.len() == 2 && path[0] == key).then_some(path[0]))
            .map_or(Level::Other, Level::Parent)
    }
}

/// The state of one pass: the identity fields found so far, the key hashes
/// of the objects being read (one stack, so no object allocates its own),
/// and whether a repeated key was seen.
struct Pass<'de> {
    identity: IdentityValues<'de>,
    keys: Vec<u64>,
    decisive: bool,
}

/// Reads one value at `level`, giving its hash.
struct Seed<'p, 'de> {
    level: Level,
    pass: &'p mut Pass<'de>,
}

impl<'de> DeserializeSeed<'de> for Seed<'_, 'de> {
    type Value = u64;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_, 'de> {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<u64, E> {
        Ok(if v { TRUE } else { FALSE })
    }

    fn visit_i64<E>(self, v: i64) -> Result<u64, E> {
        Ok(number(&v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<u64, E> {
        Ok(number(&v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<u64, E> {
        Ok(Number::from_f64(v).map_or(NULL, |n| number(&n)))
    }

    fn visit_str<E>(self, v: &str) -> Result<u64, E> {
        Ok(string(v))
    }

    fn visit_none<E>(self) -> Result<u64, E> {
        Ok(NULL)
    }

    fn visit_unit<E>(self) -> Result<u64, E> {
        Ok(NULL)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        DeserializeSeed::deserialize(self, d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut hash = ARRAY;
        let mut count: u64 = 0;
        while let Some(item) = seq.next_element_seed(Seed {
            level: Level::Other,
            pass: &mut *self.pass,
        })? {
            hash = array_item(hash, item);
            count += 1;
        }
        Ok(array(hash, count))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let start = self.pass.keys.len();
        let mut sum: u64 = 0;
        while let Some(Key(key)) = map.next_key()? {
            let value = if let Some(slot) = self.level.identity_slot(&key) {
                // Taken whole, to compare with the other work's and to show.
                let value: Json<'de> = map.next_value()?;
                let hash = value_hash(&value);
                self.pass.identity[slot] = Some(value);
                hash
            } else {
                let level = self.level.child(&key);
                if let Level::Parent(_) = level {
                    // Of a repeated `metadata` (or `spec`) the last one
                    // counts, whole.
                    for slot in level.slots() {
                        self.pass.identity[slot] = None;
                    }
                }
                map.next_value_seed(Seed {
                    level,
                    pass: &mut *self.pass,
                })?
            };
            let key = string(&key);
            self.pass.keys.push(key);
            sum = sum.wrapping_add(member(key, value));
        }
        let keys = &mut self.pass.keys[start..];
        let count = keys.len() as u64;
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            self.pass.decisive = false;
        }
        self.pass.keys.truncate(start);
        Ok(object(sum, count))
    }
}

/// The hash of a value already parsed, the same as reading its text gives
/// (a parsed object has each key once, so its hash is decisive).
fn value_hash(value: &Json<'_>) -> u64 {
    match value {
        Json::Null => NULL,
        Json::Bool(true) => TRUE,
        Json::Bool(false) => FALSE,
        Json::Number(n) => number(n),
        Json::String(s) => string(s),
        Json::Array(items) => {
            let hash = items
                .iter()
                .fold(ARRAY, |h, v| array_item(h, value_hash(v)));
            array(hash, items.len() as u64)
        }
        Json::Object(members) => {
            let sum = members.iter().fold(0u64, |sum, (k, v)| {
                sum.wrapping_add(member(string(k), value_hash(v)))
            });
            object(sum, members.len() as u64)
        }
    }
}

// Tags that keep values of different kinds apart.
const NULL: u64 = 0x6a09_e667_f3bc_c908;
const TRUE: u64 = 0xbb67_ae85_84ca_a73b;
const FALSE: u64 = 0x3c6e_f372_fe94_f82b;
const ARRAY: u64 = 0xa54f_f53a_5f1d_36f1;
const OBJECT: u64 = 0x510e_527f_ade6_82d1;
const POSITIVE: u64 = 0x9b05_688c_2b3e_6c1f;
const NEGATIVE: u64 = 0x1f83_d9ab_fb41_bd6b;
const FLOAT: u64 = 0x5be0_cd19_137e_2179;
const STRING: u64 = 0xcbbb_9d5d_c105_9ed8;
const K1: u64 = 0x9e37_79b9_7f4a_7c15;
const K2: u64 = 0xc2b2_ae3d_27d4_eb4f;

/// A 64-bit finaliser: every input bit moves about half the output bits.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// An array so far, `hash`, with one more item.
fn array_item(hash: u64, item: u64) -> u64 {
    mix(hash ^ item)
}

/// An array of `count` items, from its hash so far.
fn array(hash: u64, count: u64) -> u64 {
    mix(hash ^ count)
}

/// An object of `count` members, from the sum of their [`member`] hashes.
fn object(sum: u64, count: u64) -> u64 {
    mix(OBJECT ^ sum ^ count.wrapping_mul(K2))
}

/// A member of an object: the key and the value bound together, so that
/// moving a value to another key changes the object's sum.
fn member(key: u64, value: u64) -> u64 {
    mix(key ^ value.rotate_left(31).wrapping_mul(K1))
}

/// A number as `serde_json::Number` compares it: a non-negative integer, a
/// negative one and a float are different kinds, and floats compare as
/// `f64`s (so `-0.0` is `0.0`).
fn number(n: &Number) -> u64 {
    if let Some(v) = n.as_u64() {
        mix(POSITIVE ^ v)
    } else if let Some(v) = n.as_i64() {
        mix(NEGATIVE ^ v as u64)
    } else {
        let v = n.as_f64().unwrap_or_default();
        let v = if v == 0.0 { 0.0 } else { v };
        mix(FLOAT ^ v.to_bits())
    }
}

/// A string's text, eight bytes at a time.
fn string(s: &str) -> u64 {
    let bytes = s.as_bytes();
    let mut h = STRING ^ (bytes.len() as u64).wrapping_mul(K1);
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(word))
            .wrapping_mul(K2)
            .rotate_left(29);
    }
    let mut word = [0u8; 8];
    word[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    mix(h ^ u64::from_le_bytes(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_hash_alike_however_spelled() {
        let a = digest(br#"{"a": [1, 2.5, "x"], "b": {"c": null, "d": true}, "n": -0.0}"#)
            .expect("an object");
        let b = digest(br#"{"b":{"d":true,"c":null},"n":0.0,"a":[1,2.5,"\u0078"]}"#)
            .expect("an object");
        assert!(a.decisive && b.decisive);
        assert_eq!(a.hash, b.hash);
    }

    #[test]
    fn what_a_value_is_changes_its_hash() {
        let base = digest(br#"{"a": [1, 2], "b": "x"}"#)
            .expect("an object")
            .hash;
        for other in [
            &br#"{"a": [2, 1], "b": "x"}"#[..],
            br#"{"a": [1, 2], "c": "x"}"#,
            br#"{"b": [1, 2], "a": "x"}"#,
            br#"{"a": [1.0, 2], "b": "x"}"#,
            br#"{"a": [1, 2], "b": "x", "c": null}"#,
            br#"{"a": [1, 2, null], "b": "x"}"#,
            br#"{"a": [1, 2], "b": "y"}"#,
        ] {
            let d = digest(other).expect("an object");
            assert!(d.decisive);
            assert_ne!(d.hash, base, "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn a_repeated_key_is_not_decisive() {
        assert!(!digest(br#"{"a": 1, "a": 2}"#).expect("object").decisive);
        assert!(
            !digest(br#"{"x": [{"a": 1, "\u0061": 2}]}"#)
                .expect("object")
                .decisive
        );
        assert!(
            digest(br#"{"a": {"a": 1}, "b": {"a": 1}}"#)
                .expect("object")
                .decisive
        );
    }

    #[test]
    fn what_is_not_an_object_is_refused_as_parsing_would() {
        for text in [&b"[1]"[..], b"{", b"{} {}", b"\xff", b"null"] {
            assert_eq!(
                digest(text).err().map(|e| e.to_string()),
                super::super::parse_object(text)
                    .err()
                    .map(|e| e.to_string()),
            );
        }
    }
}
