//! What one pass over a work finds, without building a tree: a hash of its
//! JSON value, whether that hash can tell values apart, and its identity
//! fields. Two readers make it: the byte scanner (`scan.rs`) and
//! `serde_json`'s visitor (`visit.rs`); this file holds what both share.
//!
//! The hash is a function of the value as [`Json`] compares it: object
//! members are combined in any order (a wrapping sum), strings by their
//! decoded text, numbers as `serde_json::Number`s (`0.0` and `-0.0` alike).
//! So two works whose hashes differ are different values, for certain. Equal
//! hashes prove nothing (two values may share a hash), and an object with a
//! repeated key hashes its overwritten member too: [`Digest::decisive`] is
//! false then, and the caller compares the works in full.

use serde_json::Number;

use super::{IDENTITY_FIELDS, IdentityValues, Json};

/// What one pass over a work found.
#[derive(Debug, PartialEq)]
pub(crate) struct Digest<'a> {
    pub(crate) hash: u64,
    /// No object in the work repeats a key, so a different hash means a
    /// different value.
    pub(crate) decisive: bool,
    /// The work's identity fields, in `IDENTITY_FIELDS`' order.
    pub(crate) identity: IdentityValues<'a>,
}

/// The state of one pass, kept the same way by both readers: the identity
/// fields found so far, the key hashes of the objects being read (one
/// stack, so no object allocates its own), and whether a repeated key was
/// seen.
pub(super) struct Pass<'a> {
    identity: IdentityValues<'a>,
    keys: Vec<u64>,
    decisive: bool,
}

impl<'a> Pass<'a> {
    pub(super) fn new() -> Pass<'a> {
        Pass {
            identity: [const { None }; IDENTITY_FIELDS.len()],
            keys: Vec::new(),
            decisive: true,
        }
    }

    /// Where the members of an object about to be read start on the stack.
    pub(super) fn open(&self) -> usize {
        self.keys.len()
    }

    /// A member of the object being read: its key's hash and its value's;
    /// what it adds to the object's sum.
    pub(super) fn member(&mut self, key: u64, value: u64) -> u64 {
        self.keys.push(key);
        member(key, value)
    }

    /// The end of the object opened at `start`, whose members' hashes sum to
    /// `sum`: its hash. A key seen twice in it makes the digest not
    /// decisive.
    pub(super) fn close(&mut self, start: usize, sum: u64) -> u64 {
        let keys = &mut self.keys[start..];
        let count = keys.len() as u64;
        keys.sort_unstable();
        if keys.windows(2).any(|w| w[0] == w[1]) {
            self.decisive = false;
        }
        self.keys.truncate(start);
        object(sum, count)
    }

    /// Before the value at `level` is read: of a repeated `metadata` (or
    /// `spec`) the last one counts, whole, so what an earlier one held goes.
    pub(super) fn entering(&mut self, level: Level) {
        if let Level::Parent(_) = level {
            for slot in level.slots() {
                self.identity[slot] = None;
            }
        }
    }

    /// An identity field's value, taken whole (to compare with the other
    /// work's and to show): its hash.
    pub(super) fn identity(&mut self, slot: usize, value: Json<'a>) -> u64 {
        let hash = value_hash(&value);
        self.identity[slot] = Some(value);
        hash
    }

    /// The digest of a work whose root object hashes to `hash`.
    pub(super) fn finish(self, hash: u64) -> Digest<'a> {
        Digest {
            hash,
            decisive: self.decisive,
            identity: self.identity,
        }
    }
}

/// Where in the work a value is: the identity fields are members of the
/// root object and of some of its members (`metadata`, `spec`:
/// [`IDENTITY_FIELDS`]' paths).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    Root,
    /// The root's member of this name, which holds identity fields.
    Parent(&'static str),
    Other,
}

impl Level {
    /// The slot in [`IdentityValues`] of the member `key` at this level.
    pub(super) fn identity_slot(self, key: &str) -> Option<usize> {
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
    pub(super) fn child(self, key: &str) -> Level {
        if self != Level::Root {
            return Level::Other;
        }
        IDENTITY_FIELDS
            .iter()
            .find_map(|(_, path)| (path.len() == 2 && path[0] == key).then_some(path[0]))
            .map_or(Level::Other, Level::Parent)
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
pub(super) const NULL: u64 = 0x6a09_e667_f3bc_c908;
pub(super) const TRUE: u64 = 0xbb67_ae85_84ca_a73b;
pub(super) const FALSE: u64 = 0x3c6e_f372_fe94_f82b;
pub(super) const ARRAY: u64 = 0xa54f_f53a_5f1d_36f1;
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
pub(super) fn array_item(hash: u64, item: u64) -> u64 {
    mix(hash ^ item)
}

/// An array of `count` items, from its hash so far.
pub(super) fn array(hash: u64, count: u64) -> u64 {
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
pub(super) fn number(n: &Number) -> u64 {
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
pub(super) fn string(s: &str) -> u64 {
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
    use super::super::digest_of as digest;

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
