//! The digest of a work read through `serde_json`'s visitor: what the byte
//! scanner (`scan.rs`) leaves to it, and what its tests compare it with.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Number;

use super::digest::{
    ARRAY, Digest, FALSE, Level, NULL, Pass, TRUE, array, array_item, number, string,
};
use super::{Json, Key, NotAnObject, not_an_object};

/// Reads `text` into its [`Digest`], as `super::parse_object` accepts and
/// refuses, with its errors.
pub(super) fn through_serde(text: &str) -> Result<Digest<'_>, NotAnObject> {
    let mut de = serde_json::Deserializer::from_str(text);
    let mut pass = Pass::new();
    let hash = Seed {
        level: Level::Root,
        pass: &mut pass,
    }
    .deserialize(&mut de)
    .and_then(|hash| de.end().map(|()| hash))
    .map_err(NotAnObject::Syntax)?;
    if let Some(kind) = not_an_object(text.as_bytes()) {
        return Err(NotAnObject::Kind(kind));
    }
    Ok(pass.finish(hash))
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
        let start = self.pass.open();
        let mut sum: u64 = 0;
        while let Some(Key(key)) = map.next_key()? {
            let value = if let Some(slot) = self.level.identity_slot(&key) {
                let value: Json<'de> = map.next_value()?;
                self.pass.identity(slot, value)
            } else {
                let level = self.level.child(&key);
                self.pass.entering(level);
                map.next_value_seed(Seed {
                    level,
                    pass: &mut *self.pass,
                })?
            };
            sum = sum.wrapping_add(self.pass.member(string(&key), value));
        }
        Ok(self.pass.close(start, sum))
    }
}
