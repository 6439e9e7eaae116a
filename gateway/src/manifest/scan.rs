//! The digest of a work read byte by byte, without serde: the common case
//! of `super::digest_of`, about twice as fast as reading through
//! `serde_json`'s visitor (`cargo bench -p rollout-gateway --bench identity`).
//!
//! It refuses nothing on its own. It takes only what it reads with certainty
//! as `serde_json` would: plain JSON of bounded depth, integers that fit 64
//! bits, escapes other than surrogates. On anything else (a syntax error, a
//! float, a surrogate escape, deep nesting, a root that is not an object) it
//! gives `None` and the work is read through `serde_json`, which accepts or
//! refuses it with its own error. The identity fields' values are parsed by
//! `serde_json` from their own span of the text. So what is
//! accepted, what is refused and every error's wording stay `serde_json`'s;
//! the tests compare the two readings on every text the properties make.

use super::Json;
use super::digest::{self, Digest, Level, Pass};

/// Nesting deeper than this is left to `serde_json` (whose limit is 128).
const MAX_DEPTH: usize = 100;

/// The digest of `text` (valid UTF-8), if read here; `None`: read it
/// through `serde_json`.
pub(super) fn digest(text: &str) -> Option<Digest<'_>> {
    let mut scan = Scan {
        text,
        bytes: text.as_bytes(),
        at: 0,
        pass: Pass::new(),
        scratch: String::new(),
    };
    scan.blank();
    if scan.peek()? != b'{' {
        return None;
    }
    let hash = scan.value(Level::Root, 0)?;
    scan.blank();
    if scan.at != scan.bytes.len() {
        return None;
    }
    Some(scan.pass.finish(hash))
}

struct Scan<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    pass: Pass<'a>,
    /// A string with escapes, decoded.
    scratch: String,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn blank(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn literal(&mut self, word: &[u8], hash: u64) -> Option<u64> {
        let end = self.at.checked_add(word.len())?;
        (self.bytes.get(self.at..end)? == word).then(|| {
            self.at = end;
            hash
        })
    }

    /// One value at `level`, `depth` containers deep: its hash.
    fn value(&mut self, level: Level, depth: usize) -> Option<u64> {
        match self.peek()? {
            b'{' => self.object(level, depth + 1),
            b'[' => self.array(depth + 1),
            b'"' => self.string().map(digest::string),
            b't' => self.literal(b"true", digest::TRUE),
            b'f' => self.literal(b"false", digest::FALSE),
            b'n' => self.literal(b"null", digest::NULL),
            b'-' | b'0'..=b'9' => self.integer(),
            _ => None,
        }
    }

    fn array(&mut self, depth: usize) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        self.blank();
        let mut hash = digest::ARRAY;
        let mut count: u64 = 0;
        if self.eat(b']').is_none() {
            loop {
                self.blank();
                hash = digest::array_item(hash, self.value(Level::Other, depth)?);
                count += 1;
                if !self.more(b']')? {
                    break;
                }
            }
        }
        Some(digest::array(hash, count))
    }

    fn object(&mut self, level: Level, depth: usize) -> Option<u64> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        self.blank();
        let start = self.pass.open();
        let mut sum: u64 = 0;
        if self.eat(b'}').is_none() {
            loop {
                self.blank();
                let key = self.key()?;
                self.blank();
                self.eat(b':')?;
                self.blank();
                let value = self.member(level, &key, depth)?;
                sum = sum.wrapping_add(self.pass.member(digest::string(key.as_ref()), value));
                if !self.more(b'}')? {
                    break;
                }
            }
        }
        Some(self.pass.close(start, sum))
    }

    /// After an item or a member: `true` past a comma, `false` past `close`.
    fn more(&mut self, close: u8) -> Option<bool> {
        self.blank();
        let more = match self.peek()? {
            b',' => true,
            b if b == close => false,
            _ => return None,
        };
        self.at += 1;
        Some(more)
    }

    /// A key: borrowed from the text, or decoded (a key with escapes).
    fn key(&mut self) -> Option<Key<'a>> {
        if self.peek()? != b'"' {
            return None;
        }
        let (start, end, escaped) = self.string_span()?;
        Some(if escaped {
            let mut decoded = String::new();
            decode(&self.text[start..end], &mut decoded)?;
            Key::Decoded(decoded)
        } else {
            Key::Plain(&self.text[start..end])
        })
    }

    /// The value of the member `key` of an object at `level`: its hash. An
    /// identity field's value is parsed whole, from its own span of the
    /// text, and kept.
    fn member(&mut self, level: Level, key: &Key<'_>, depth: usize) -> Option<u64> {
        if level == Level::Other {
            return self.value(Level::Other, depth);
        }
        if let Some(slot) = level.identity_slot(key.as_ref()) {
            let start = self.at;
            self.skip(depth)?;
            let value: Json<'a> = serde_json::from_str(&self.text[start..self.at]).ok()?;
            return Some(self.pass.identity(slot, value));
        }
        let child = level.child(key.as_ref());
        self.pass.entering(child);
        self.value(child, depth)
    }

    /// Past the value at the cursor, leaving this pass as it was: an
    /// identity field's value is parsed whole afterwards, and its own
    /// repeated keys, if any, are the parsed value's business.
    fn skip(&mut self, depth: usize) -> Option<()> {
        let outer = std::mem::replace(&mut self.pass, Pass::new());
        let read = self.value(Level::Other, depth);
        self.pass = outer;
        read.map(drop)
    }

    /// A string value's decoded text.
    fn string(&mut self) -> Option<&str> {
        let (start, end, escaped) = self.string_span()?;
        if !escaped {
            return Some(&self.text[start..end]);
        }
        self.scratch.clear();
        decode(&self.text[start..end], &mut self.scratch)?;
        Some(&self.scratch)
    }

    /// Past a string at the cursor: its content's span and whether it has
    /// escapes (checked later, by [`decode`]). A control character in it is
    /// an error.
    fn string_span(&mut self) -> Option<(usize, usize, bool)> {
        let start = self.at + 1;
        let mut at = start;
        let mut escaped = false;
        loop {
            at = plain_run(self.bytes, at);
            match *self.bytes.get(at)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    // The escaped byte is never the closing quote.
                    at += 2;
                }
                0..=0x1f => return None,
                _ => at += 1,
            }
        }
        self.at = at + 1;
        Some((start, at, escaped))
    }

    /// An integer as `serde_json` reads one: a non-negative one that fits
    /// `u64`, or a negative one that fits `i64`. Anything else (a fraction,
    /// an exponent, `-0`, a leading zero, too many digits) is left to it.
    fn integer(&mut self) -> Option<u64> {
        let negative = self.eat(b'-').is_some();
        let start = self.at;
        let mut value: u64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            value = value.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        if digits == 0 || (digits > 1 && self.bytes[start] == b'0') {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = self.peek() {
            return None;
        }
        if !negative {
            return Some(digest::number(&value.into()));
        }
        if value == 0 || value > 1 << 63 {
            return None;
        }
        Some(digest::number(&(value.wrapping_neg() as i64).into()))
    }
}

/// The end of the run from `at` of string bytes that need no look (not a
/// quote, a backslash or a control character), eight at a time.
fn plain_run(bytes: &[u8], mut at: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // A byte of `w` is zero: its high bit set in the result (exact for the
    // first such byte, which is all that is used).
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGHS;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let found = zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')))
            // Below 0x20: a byte under 0x20 minus 0x20 borrows into its
            // high bit, unless the byte itself had it set.
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGHS);
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    at
}

/// A key as read: borrowed, or decoded from escapes.
enum Key<'a> {
    Plain(&'a str),
    Decoded(String),
}

impl AsRef<str> for Key<'_> {
    fn as_ref(&self) -> &str {
        match self {
            Key::Plain(s) => s,
            Key::Decoded(s) => s,
        }
    }
}

/// Decodes a string's content with escapes into `out`; `None` for an escape
/// `serde_json` would refuse, or a surrogate (left to it).
fn decode(content: &str, out: &mut String) -> Option<()> {
    let mut rest = content;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let escape = *rest.as_bytes().get(i + 1)?;
        if !escape.is_ascii() {
            return None;
        }
        rest = &rest[i + 2..];
        out.push(match escape {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hex = rest.get(..4)?;
                if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                rest = &rest[4..];
                char::from_u32(u32::from_str_radix(hex, 16).ok()?)?
            }
            _ => return None,
        });
    }
    out.push_str(rest);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{json_text, metadata_text};
    use super::super::visit::through_serde;
    use proptest::prelude::*;

    /// The scanner's reading of `text`, checked against `serde_json`'s: when
    /// it reads a text at all, the digest is the same; it never takes what
    /// `serde_json` refuses. Returns whether it read it.
    fn agrees(text: &[u8]) -> bool {
        let Ok(utf8) = std::str::from_utf8(text) else {
            return false;
        };
        let scanned = super::digest(utf8);
        let parsed = through_serde(utf8);
        match (&scanned, &parsed) {
            (Some(s), Ok(p)) => assert_eq!(s, p, "{utf8}"),
            (Some(s), Err(e)) => panic!("scanned {s:?} where serde_json refuses ({e}): {utf8}"),
            (None, _) => {}
        }
        scanned.is_some()
    }

    #[test]
    fn plain_works_are_read_here() {
        for text in [
            &br#"{}"#[..],
            br#" {"a": [1, -2, true, false, null, "x", {}, []]} "#,
            br#"{"apiVersion": "v1", "kind": "ManifestWork", "metadata": {"name": "w", "namespace": "c", "labels": {"a": "1"}}}"#,
            br#"{"metadata": {"n\u0061me": "w\"\\\/\b\f\n\r\t\u00e9"}, "metadata": {"name": 1}}"#,
            br#"{"a": 18446744073709551615, "b": -9223372036854775808, "c": 0}"#,
            br#"{"a": {"a": 1, "a": 2}, "kind": {"x": 1, "x": 2}}"#,
            "{\"\u{e9}\": \"\u{1f600}\"}".as_bytes(),
        ] {
            assert!(agrees(text), "{}", String::from_utf8_lossy(text));
        }
        let deep = format!("{{\"a\": {}1{}}}", "[".repeat(99), "]".repeat(99));
        assert!(agrees(deep.as_bytes()));
    }

    /// What the scanner leaves to `serde_json`: it accepts some of these
    /// and refuses others, with its own words.
    #[test]
    fn the_rest_is_left_to_serde_json() {
        for text in [
            &br#"{"a": 1.5}"#[..],
            br#"{"a": 1e2}"#,
            br#"{"a": -0}"#,
            br#"{"a": 18446744073709551616}"#,
            br#"{"a": -9223372036854775809}"#,
            br#"{"a": 01}"#,
            br#"{"a": -}"#,
            br#"{"a": "\ud83d\ude00"}"#,
            br#"{"a": "\ud83d"}"#,
            br#"{"a": "\x"}"#,
            "{\"a\": \"\\\u{e9}\"}".as_bytes(),
            br#"{"a": "\u00g0"}"#,
            b"{\"a\": \"\x01\"}",
            b"{\"a\": \"\x1f\"}",
            b"{\"a\": \"\t\"}",
            br#"{"a": 1,}"#,
            br#"{"a": [1,]}"#,
            br#"{"a" 1}"#,
            br#"{a: 1}"#,
            br#"{"a": tru}"#,
            br#"{"a": truex}"#,
            br#"{"a": 1} {}"#,
            br#"{"a": 1"#,
            br#"{"a": "x"#,
            br#"{"a": "x\"}"#,
            b"\xef\xbb\xbf{}",
            b"\x0c{}",
            b"[1]",
            b"",
        ] {
            assert!(!agrees(text), "{}", String::from_utf8_lossy(text));
        }
        for depth in [100, 127, 128, 129] {
            let deep = format!("{{\"a\": {}1{}}}", "[".repeat(depth), "]".repeat(depth));
            assert!(!agrees(deep.as_bytes()), "depth {depth}");
        }
    }

    /// A text and a byte edit of it: the edit mostly breaks the syntax.
    fn edited() -> impl Strategy<Value = Vec<u8>> {
        let bytes = prop::sample::select(&b"{}[]\",:\\u0 1-.eE+tfn\t\x1f\x00"[..]);
        (json_text(), any::<prop::sample::Index>(), bytes, 0..3u8).prop_map(
            |(text, at, byte, how)| {
                let mut text = format!("{{\"v\": {text}}}").into_bytes();
                let i = at.index(text.len());
                match how {
                    0 => text.insert(i, byte),
                    1 => {
                        text.remove(i);
                    }
                    _ => text[i] = byte,
                }
                text
            },
        )
    }

    proptest::proptest! {
        #[test]
        fn scanned_digests_are_serde_json_s(a in json_text(), meta in metadata_text(), b in json_text()) {
            let text = format!(r#"{{"apiVersion": {a}, "metadata": {meta}, "kind": {b}, "spec": {{"executor": {a}}}}}"#);
            agrees(text.as_bytes());
            agrees(format!("{{\"v\": {a}}}").as_bytes());
        }

        #[test]
        fn edited_texts_are_never_taken_where_serde_json_refuses(text in edited()) {
            agrees(&text);
        }
    }
}
