//! A check's query as a template: PromQL text with placeholders
//! (`{{cluster}}`, `{{revision}}`, `{{mwrsName}}`, `{{mwrsNamespace}}`,
//! `{{placement}}`) that stand inside PromQL string literals and are
//! replaced by the request's values, escaped for the literal they stand in.
//!
//! A placeholder is allowed only inside a double- or single-quoted string
//! (`cluster="{{cluster}}"`); anywhere else, or inside a raw (backquoted)
//! string, which has no escapes, the template is refused when it is read.
//! So a value can only ever be the content of one string: a cluster named
//! `x"} or vector(1) #` stays a label value. Inside the string of a regular
//! expression matcher (`=~`, `!~`) the value is also quoted as a regular
//! expression (RE2's `QuoteMeta`), so `.` in a name matches only a dot.

use std::fmt;

/// The values a template may name, from one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Values<'a> {
    /// `cluster_name`.
    pub cluster: &'a str,
    /// `desired_revision`.
    pub revision: &'a str,
    /// `mwrs_name`.
    pub mwrs_name: &'a str,
    /// `mwrs_namespace`.
    pub mwrs_namespace: &'a str,
    /// `placement_name`.
    pub placement: &'a str,
}

/// The names a placeholder may have, as written between the braces.
pub const PLACEHOLDERS: [&str; 5] = [
    "cluster",
    "revision",
    "mwrsName",
    "mwrsNamespace",
    "placement",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Placeholder {
    Cluster,
    Revision,
    MwrsName,
    MwrsNamespace,
    Placement,
}

impl Placeholder {
    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "cluster" => Self::Cluster,
            "revision" => Self::Revision,
            "mwrsName" => Self::MwrsName,
            "mwrsNamespace" => Self::MwrsNamespace,
            "placement" => Self::Placement,
            _ => return None,
        })
    }

    fn of<'a>(self, values: &Values<'a>) -> &'a str {
        match self {
            Self::Cluster => values.cluster,
            Self::Revision => values.revision,
            Self::MwrsName => values.mwrs_name,
            Self::MwrsNamespace => values.mwrs_namespace,
            Self::Placement => values.placement,
        }
    }
}

/// Where a placeholder stands: in which quotes, and whether the string is
/// a regular expression's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    name: Placeholder,
    quote: char,
    regex: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Value(Slot),
}

/// A query template, read and checked ([`Template::parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    pieces: Vec<Piece>,
}

/// Why a template was refused; the offset is in bytes from its start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{{` without its `}}`.
    #[error("unclosed placeholder at byte {0}")]
    Unclosed(usize),
    /// A name not in [`PLACEHOLDERS`].
    #[error(
        "unknown placeholder {{{{{name}}}}} (known: cluster, revision, mwrsName, mwrsNamespace, placement)"
    )]
    Unknown {
        /// The name as written.
        name: String,
    },
    /// A placeholder outside a quoted string, where its value would be
    /// PromQL rather than data.
    #[error(
        "placeholder {{{{{name}}}}} at byte {at} is not inside a \"double-\" or 'single-quoted' string: write it as a label value, such as cluster=\"{{{{{name}}}}}\""
    )]
    Unquoted {
        /// The name.
        name: String,
        /// Where.
        at: usize,
    },
    /// A placeholder in a backquoted string, which cannot escape anything.
    #[error(
        "placeholder {{{{{name}}}}} at byte {at} is inside a `raw` string, which cannot escape its value: use double quotes"
    )]
    Raw {
        /// The name.
        name: String,
        /// Where.
        at: usize,
    },
    /// A string literal that never ends.
    #[error("unterminated string starting at byte {0}")]
    Unterminated(usize),
    /// Nothing but blanks.
    #[error("empty query")]
    Empty,
}

impl Template {
    /// Reads `source`, refusing what [`TemplateError`] lists.
    pub fn parse(source: &str) -> Result<Self, TemplateError> {
        if source.trim().is_empty() {
            return Err(TemplateError::Empty);
        }
        Ok(Self {
            source: source.to_owned(),
            pieces: Lexer::new(source).pieces()?,
        })
    }

    /// The template as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The query for `values`: each placeholder replaced by its value,
    /// escaped for its string (and quoted as a regular expression in a
    /// regex matcher's string).
    pub fn render(&self, values: &Values<'_>) -> String {
        let mut out = String::with_capacity(self.source.len());
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => out.push_str(text),
                Piece::Value(slot) => {
                    let raw = slot.name.of(values);
                    let value = if slot.regex {
                        quote_meta(raw)
                    } else {
                        raw.to_owned()
                    };
                    escape_into(&mut out, &value, slot.quote);
                }
            }
        }
        out
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Walks PromQL text far enough to know, at each `{{`, whether it stands in
/// a string, which one, and after which operator: strings, comments and
/// everything else.
struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    pieces: Vec<Piece>,
    text: String,
    /// The last two non-blank characters outside strings and comments, to
    /// tell a regex matcher's string (`=~"…"`, `!~"…"`).
    last: [char; 2],
}

impl<'a> Lexer<'a> {
    fn new(src: &'a str) -> Self {
        Self {
            src,
            pos: 0,
            pieces: Vec::new(),
            text: String::new(),
            last: [' ', ' '],
        }
    }

    fn pieces(mut self) -> Result<Vec<Piece>, TemplateError> {
        while let Some(c) = self.peek() {
            match c {
                '"' | '\'' | '`' => self.string(c)?,
                '#' => self.comment(),
                '{' if self.rest().starts_with("{{") => {
                    let (_, name, _) = self.placeholder()?;
                    return Err(TemplateError::Unquoted { name, at: self.pos });
                }
                _ => {
                    self.bump(c);
                    if !c.is_whitespace() {
                        self.last = [self.last[1], c];
                    }
                }
            }
        }
        self.flush();
        Ok(self.pieces)
    }

    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self, c: char) {
        self.text.push(c);
        self.pos += c.len_utf8();
    }

    fn flush(&mut self) {
        if !self.text.is_empty() {
            self.pieces
                .push(Piece::Text(std::mem::take(&mut self.text)));
        }
    }

    fn comment(&mut self) {
        while let Some(c) = self.peek() {
            self.bump(c);
            if c == '\n' {
                break;
            }
        }
    }

    /// The placeholder at `pos` (which starts `{{`), without moving: its
    /// name, as written, and its length in bytes with the braces.
    fn placeholder(&self) -> Result<(Placeholder, String, usize), TemplateError> {
        let inner = &self.rest()[2..];
        let end = inner.find("}}").ok_or(TemplateError::Unclosed(self.pos))?;
        let written = inner[..end].trim();
        let name = Placeholder::parse(written).ok_or_else(|| TemplateError::Unknown {
            name: written.to_owned(),
        })?;
        Ok((name, written.to_owned(), end + 4))
    }

    fn string(&mut self, quote: char) -> Result<(), TemplateError> {
        let start = self.pos;
        let regex = matches!(self.last, ['=', '~'] | ['!', '~']);
        self.last = [' ', quote];
        self.bump(quote);
        loop {
            let Some(c) = self.peek() else {
                return Err(TemplateError::Unterminated(start));
            };
            if c == quote {
                self.bump(c);
                return Ok(());
            }
            if c == '\\' && quote != '`' {
                self.bump(c);
                if let Some(next) = self.peek() {
                    self.bump(next);
                }
                continue;
            }
            if c == '{' && self.rest().starts_with("{{") {
                let (name, written, len) = self.placeholder()?;
                if quote == '`' {
                    return Err(TemplateError::Raw {
                        name: written,
                        at: self.pos,
                    });
                }
                self.flush();
                self.pos += len;
                self.pieces.push(Piece::Value(Slot { name, quote, regex }));
                continue;
            }
            self.bump(c);
        }
    }
}

/// Appends `value` to `out` as the content of a PromQL string in `quote`s:
/// backslashes, that quote and control characters escaped (PromQL reads
/// strings with Go's escapes, and refuses `\'` in a double-quoted string and
/// `\"` in a single-quoted one, so only the string's own quote is escaped).
fn escape_into(out: &mut String, value: &str, quote: char) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {
                // `\u` takes exactly four hex digits; every control
                // character fits.
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
}

/// RE2's `QuoteMeta`: every character with a meaning in a regular
/// expression, escaped, so the value matches only itself.
fn quote_meta(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUES: Values<'static> = Values {
        cluster: "cluster-1",
        revision: "rev-9",
        mwrs_name: "web",
        mwrs_namespace: "shop",
        placement: "all",
    };

    fn with_cluster(cluster: &str) -> Values<'_> {
        Values { cluster, ..VALUES }
    }

    #[test]
    fn placeholders_render_inside_their_strings() {
        let table = [
            (
                r#"up{cluster="{{cluster}}", rev='{{ revision }}'}"#,
                r#"up{cluster="cluster-1", rev='rev-9'}"#,
            ),
            (
                r#"x{w="{{mwrsNamespace}}/{{mwrsName}}",p="{{placement}}"}"#,
                r#"x{w="shop/web",p="all"}"#,
            ),
            // Text around is kept byte for byte, escapes included.
            (
                "sum(rate(x{a=\"q\\\"{{cluster}}\"}[1m])) # {{ not a value }}\n",
                "sum(rate(x{a=\"q\\\"cluster-1\"}[1m])) # {{ not a value }}\n",
            ),
            (r#"x{c=~"{{cluster}}|other"}"#, r#"x{c=~"cluster-1|other"}"#),
        ];
        for (source, want) in table {
            let t = Template::parse(source).unwrap();
            assert_eq!(t.render(&VALUES), want, "{source}");
            assert_eq!(t.source(), source);
        }
    }

    #[test]
    fn a_value_cannot_leave_its_string() {
        let t = Template::parse(r#"up{cluster="{{cluster}}"} == 1"#).unwrap();
        let evil = r#"x"} or vector(1) # \"#;
        assert_eq!(
            t.render(&with_cluster(evil)),
            r#"up{cluster="x\"} or vector(1) # \\"} == 1"#
        );
        let single = Template::parse("up{cluster='{{cluster}}'}").unwrap();
        assert_eq!(
            single.render(&with_cluster("a'\"b\n\u{7}")),
            "up{cluster='a\\'\"b\\n\\u0007'}"
        );
    }

    #[test]
    fn a_regex_matcher_quotes_the_value_as_a_regex() {
        let t = Template::parse(r#"up{cluster=~"{{cluster}}", x!~ '{{revision}}'}"#).unwrap();
        let values = Values {
            cluster: "a.b",
            revision: "r(1)*",
            ..VALUES
        };
        assert_eq!(
            t.render(&values),
            r#"up{cluster=~"a\\.b", x!~ 'r\\(1\\)\\*'}"#
        );
        // Not after a regex operator: as it is.
        let t = Template::parse(r#"up{cluster="{{cluster}}"}"#).unwrap();
        assert_eq!(t.render(&values), r#"up{cluster="a.b"}"#);
    }

    #[test]
    fn templates_that_could_inject_are_refused() {
        type Is = fn(&TemplateError) -> bool;
        let table: [(&str, Is); 7] = [
            ("up{cluster={{cluster}}}", |e| {
                matches!(e, TemplateError::Unquoted { .. })
            }),
            ("{{cluster}}", |e| {
                matches!(e, TemplateError::Unquoted { .. })
            }),
            ("up{c=`{{cluster}}`}", |e| {
                matches!(e, TemplateError::Raw { .. })
            }),
            (
                r#"up{c="{{clusterName}}"}"#,
                |e| matches!(e, TemplateError::Unknown { name } if name == "clusterName"),
            ),
            (r#"up{c="{{cluster"}"#, |e| {
                matches!(e, TemplateError::Unclosed(6))
            }),
            (r#"up{c="abc}"#, |e| {
                matches!(e, TemplateError::Unterminated(5))
            }),
            ("  ", |e| matches!(e, TemplateError::Empty)),
        ];
        for (source, is) in table {
            let err = Template::parse(source).unwrap_err();
            assert!(is(&err), "{source}: {err:?}");
        }
        assert_eq!(
            Template::parse("up{c={{cluster}}}")
                .unwrap_err()
                .to_string(),
            "placeholder {{cluster}} at byte 5 is not inside a \"double-\" or 'single-quoted' string: write it as a label value, such as cluster=\"{{cluster}}\""
        );
    }
}
