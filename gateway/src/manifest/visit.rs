//! The digest of a work read through `serde_json`'s visitor: what the byte
//! scanner (`scan.rs`) leaves to it, and what its tests compare it with.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

use super::digest::{
    ARRAY, Digest, FALSE, Level, NULL, TRUE, array, array_item, member, number, object, string,
    value_hash,
};
use super::{IDENTITY_FIELDS, IdentityValues, Json, Key, NotAnObject, not_an_object};

/// Reads `text`, the UTF-8 of `bytes`, into its [`Digest`], as
/// `super::parse_object` accepts and refuses, with its errors.
pub(super) fn through_serde<'a>(bytes: &'a [u8], text: &'a str) -> Result<Digest<'a>, NotAnObject> {
    let mut de = serde_json::Deserializer::from_str(text);
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
