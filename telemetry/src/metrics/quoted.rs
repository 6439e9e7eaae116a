//! The quoting rule shared by the `Accept` header's parameters and the
//! exposition's label values: `"` opens and closes a quoted string, and
//! inside one `\` escapes the next character.

/// Where the first `target` outside a quoted string is in `text`, in bytes.
pub(super) fn find_outside_quotes(text: &str, target: char) -> Option<usize> {
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in text.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            c if c == target && !quoted => return Some(i),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::find_outside_quotes;

    #[test]
    fn a_target_inside_quotes_or_escaped_is_skipped() {
        assert_eq!(find_outside_quotes("a,b", ','), Some(1));
        assert_eq!(find_outside_quotes(r#"q="a,b",c"#, ','), Some(7));
        assert_eq!(find_outside_quotes(r#"{a="x\"}"} 1"#, '}'), Some(9));
        assert_eq!(find_outside_quotes(r#"a\,b"#, ','), Some(2));
        assert_eq!(find_outside_quotes(r#""open,"#, ','), None);
    }
}
