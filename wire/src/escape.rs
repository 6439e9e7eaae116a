//! A peer's text as it may be shown to a person: in a terminal, a text log
//! line or a CI log. A plugin's message, a status another controller or a
//! work agent wrote, a registry value: any of them may carry bytes a
//! terminal obeys (ESC sequences that move the cursor, clear the screen or
//! write the clipboard with OSC 52; BEL; the 8-bit C1 controls), a CR or LF
//! that starts a line of the peer's choosing (a forged log line, a forged
//! "rollout Succeeded"), or a bidirectional override that shows text in
//! another order than it is stored.
//!
//! [`escaped`] writes each such character as a visible escape, so that the
//! text stays on its line and reads as what it is. JSON output needs none of
//! this (JSON's own escaping already covers it) and stays exact.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `text` with every character that is not plain printable text escaped:
/// the C0 controls (`\n`, `\r`, `\t` and `\x1b`-style for the rest, so ESC
/// and BEL too), DEL, the C1 controls (`\u{9b}`-style), and the
/// characters that reorder or break text (`\u{202e}`-style): the
/// bidirectional embeddings, overrides and isolates (U+202A–U+202E,
/// U+2066–U+2069), the directional marks (U+200E, U+200F, U+061C) and the
/// line and paragraph separators (U+2028, U+2029). A backslash is left as
/// it is. Borrowed when there is nothing to escape (the common case).
pub fn escaped(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(needs_escape) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii_control() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The room the cut mark takes, whatever number it shows.
const CUT_MARK_BYTES: usize = 32;

/// `message` if it fits `max` bytes, else its start cut on a character
/// boundary and marked `… [N bytes cut]` (N the bytes left out), the whole
/// within `max` when `max` leaves room for the mark (32 bytes). The one cut
/// of a peer's long text: a pipeline's joined messages, the dashboard's
/// plugin messages and conditions.
pub fn cut_to(message: &str, max: usize) -> Cow<'_, str> {
    if message.len() <= max {
        return Cow::Borrowed(message);
    }
    let mut end = max.saturating_sub(CUT_MARK_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!(
        "{}… [{} bytes cut]",
        &message[..end],
        message.len() - end
    ))
}

/// Whether [`escaped`] writes `c` as an escape.
fn needs_escape(c: char) -> bool {
    c.is_control() // C0, DEL and C1
        || matches!(
            c,
            '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{061c}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_and_text_is_kept() {
        for (text, want) in [
            ("plain text · ✔ ünïcode", "plain text · ✔ ünïcode"),
            ("a\\b", "a\\b"),
            ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
            ("\x1b]52;c;aGk=\x07", "\\x1b]52;c;aGk=\\x07"),
            ("ok\r\nrollout Succeeded", "ok\\r\\nrollout Succeeded"),
            ("tab\there", "tab\\there"),
            ("\0\x7f", "\\x00\\x7f"),
            ("\u{9b}31m", "\\u{9b}31m"),
            ("\u{85}", "\\u{85}"),
            ("abc\u{202e}fed\u{202c}", "abc\\u{202e}fed\\u{202c}"),
            ("\u{2066}x\u{2069}\u{200f}", "\\u{2066}x\\u{2069}\\u{200f}"),
            ("line\u{2028}sep", "line\\u{2028}sep"),
        ] {
            assert_eq!(escaped(text), want, "{text:?}");
        }
    }

    #[test]
    fn nothing_to_escape_borrows() {
        assert!(matches!(escaped("hello"), Cow::Borrowed("hello")));
    }

    #[test]
    fn what_it_writes_has_nothing_left_to_escape() {
        let all: String = (0..=0x3000u32).filter_map(char::from_u32).collect();
        let once = escaped(&all).into_owned();
        assert!(!once.contains(needs_escape));
        assert_eq!(escaped(&once), once);
    }
}
