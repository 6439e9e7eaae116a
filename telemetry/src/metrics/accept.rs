//! Choosing the exposition format from a request's `Accept` header
//! (RFC 9110 §12.5.1): media ranges with parameters and `q` weights,
//! wildcards, and the most specific range deciding a format's weight.

use super::Format;
use super::quoted::find_outside_quotes;

/// A weight in thousandths (`q=0.5` is 500); RFC 9110 allows three decimals.
type Weight = u16;

/// The largest weight (`q=1`, the default).
const FULL: Weight = 1000;

/// One media range of an `Accept` header, such as
/// `application/openmetrics-text;version=1.0.0;q=0.75`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MediaRange<'a> {
    kind: &'a str,
    subtype: &'a str,
    /// The media type's parameters (those before `q`), names lowercased
    /// by the comparison, values unquoted.
    params: Vec<(&'a str, String)>,
    weight: Weight,
}

/// How closely a range names a format; a more specific range decides the
/// format's weight over a less specific one (`*/*` < `type/*` <
/// `type/subtype` < `type/subtype;version=V`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Specificity {
    Any,
    Kind,
    Subtype,
    Version,
}

/// The media type and the versions of it a [`Format`] answers to.
struct Offer {
    kind: &'static str,
    subtype: &'static str,
    versions: &'static [&'static str],
}

impl Format {
    fn offer(self) -> Offer {
        match self {
            // 0.0.1 is the draft OpenMetrics that 1.0.0 kept unchanged.
            Format::OpenMetrics => Offer {
                kind: "application",
                subtype: "openmetrics-text",
                versions: &["1.0.0", "0.0.1"],
            },
            // 1.0.0 allows UTF-8 names; names within 0.0.4's alphabet read
            // the same under it.
            Format::Prometheus => Offer {
                kind: "text",
                subtype: "plain",
                versions: &["0.0.4", "1.0.0"],
            },
        }
    }
}

/// The format for a request whose `Accept` header values are `values`
/// (a header may be sent on several lines): OpenMetrics when it weighs
/// more than the Prometheus text, or as much but named more specifically;
/// the Prometheus text otherwise (no header, `*/*`, an unreadable header,
/// neither acceptable).
pub(crate) fn negotiate<'a>(values: impl IntoIterator<Item = &'a str>) -> Format {
    let ranges: Vec<MediaRange<'a>> = values.into_iter().flat_map(parse).collect();
    let openmetrics = preference(&ranges, Format::OpenMetrics);
    let prometheus = preference(&ranges, Format::Prometheus);
    match (openmetrics, prometheus) {
        (Some(om), Some(text)) if om > text => Format::OpenMetrics,
        (Some(_), None) => Format::OpenMetrics,
        _ => Format::Prometheus,
    }
}

/// The weight of `format` under `ranges` (that of its most specific
/// matching range; the highest among equally specific ones) and how
/// specific that range is; `None` when no range accepts it (`q=0` included).
fn preference(ranges: &[MediaRange<'_>], format: Format) -> Option<(Weight, Specificity)> {
    let offer = format.offer();
    let best = ranges
        .iter()
        .filter_map(|r| r.matches(&offer).map(|s| (s, r.weight)))
        .max()?;
    (best.1 > 0).then_some((best.1, best.0))
}

impl MediaRange<'_> {
    /// How specifically this range names `offer`, or `None` when it does
    /// not (another type, or a `version` the offer does not have).
    fn matches(&self, offer: &Offer) -> Option<Specificity> {
        if self.kind == "*" {
            return (self.subtype == "*").then_some(Specificity::Any);
        }
        if !self.kind.eq_ignore_ascii_case(offer.kind) {
            return None;
        }
        if self.subtype == "*" {
            return Some(Specificity::Kind);
        }
        if !self.subtype.eq_ignore_ascii_case(offer.subtype) {
            return None;
        }
        match self
            .params
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("version"))
        {
            None => Some(Specificity::Subtype),
            Some((_, v)) if offer.versions.contains(&v.as_str()) => Some(Specificity::Version),
            Some(_) => None,
        }
    }
}

/// The media ranges of one header value; a range that cannot be read (no
/// `/`, a `q` outside 0..=1) is left out, as RFC 9110 lets a server do.
pub(crate) fn parse(value: &str) -> impl Iterator<Item = MediaRange<'_>> {
    split_outside_quotes(value, ',').filter_map(range)
}

fn range(text: &str) -> Option<MediaRange<'_>> {
    let mut parts = split_outside_quotes(text, ';');
    let (kind, subtype) = parts.next()?.trim().split_once('/')?;
    let (kind, subtype) = (kind.trim(), subtype.trim());
    if kind.is_empty() || subtype.is_empty() || (kind == "*" && subtype != "*") {
        return None;
    }
    let mut params = Vec::new();
    let mut weight = FULL;
    for param in parts {
        let Some((name, value)) = param.split_once('=') else {
            continue;
        };
        let (name, value) = (name.trim(), unquote(value.trim()));
        if name.eq_ignore_ascii_case("q") {
            weight = parse_weight(&value)?;
            // What follows `q` are accept-extensions, not the type's own.
            break;
        }
        params.push((name, value));
    }
    Some(MediaRange {
        kind,
        subtype,
        params,
        weight,
    })
}

/// `0`, `0.5`, `1.000`: at most three decimals, at most 1.
fn parse_weight(text: &str) -> Option<Weight> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if fraction.len() > 3 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let thousandths: Weight = format!("{fraction:0<3}").parse().ok()?;
    match whole {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(FULL),
        _ => None,
    }
}

/// A parameter value without its quotes and escapes (`"a\"b"` is `a"b`).
fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return value.to_string();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    out
}

/// `text` split at each `separator` that is not inside a quoted string.
fn split_outside_quotes(text: &str, separator: char) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let text = rest?;
        match find_outside_quotes(text, separator) {
            Some(i) => {
                rest = Some(&text[i + separator.len_utf8()..]);
                Some(&text[..i])
            }
            None => {
                rest = None;
                Some(text)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What Prometheus 2.x sends by default.
    const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    /// What Prometheus 3.x sends by default.
    const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1";

    #[test]
    fn negotiation() {
        use Format::{OpenMetrics as OM, Prometheus as Text};
        let cases: &[(&[&str], Format)] = &[
            (&[], Text),
            (&[""], Text),
            (&["*/*"], Text),
            (&["text/plain;version=0.0.4"], Text),
            (&["text/plain; version=0.0.4; charset=utf-8"], Text),
            (&[PROMETHEUS_2], OM),
            (&[PROMETHEUS_3], OM),
            (&["application/openmetrics-text"], OM),
            (&["Application/OpenMetrics-Text; Version=1.0.0"], OM),
            (&["application/openmetrics-text; version=\"1.0.0\""], OM),
            (&["application/*"], OM),
            (&["text/*"], Text),
            // A version we do not write is not accepted.
            (&["application/openmetrics-text;version=2.0.0"], Text),
            (
                &["application/openmetrics-text;version=2.0.0, application/*;q=0.1"],
                OM,
            ),
            // Weights decide, whatever the order.
            (
                &["text/plain;version=0.0.4;q=0.9, application/openmetrics-text;q=0.8"],
                Text,
            ),
            (
                &["text/plain;q=0.2", "application/openmetrics-text;q=0.3"],
                OM,
            ),
            // The more specific range decides a format's weight.
            (&["application/openmetrics-text;q=0, */*"], Text),
            (&["text/plain;q=0, */*;q=0.1"], OM),
            (&["application/openmetrics-text, */*"], OM),
            (&["text/plain, */*"], Text),
            // Equal weight and specificity: the default.
            (&["application/openmetrics-text, text/plain"], Text),
            // Nothing acceptable: the default.
            (&["application/json"], Text),
            (&["application/openmetrics-text;q=0"], Text),
            // Unreadable ranges are left out, the rest still count.
            (&["application/openmetrics-text;q=2"], Text),
            (&["application/openmetrics-text;q=0.5x"], Text),
            (&["garbage, application/openmetrics-text;q=0.5"], OM),
            // A comma inside a quoted parameter is not a separator.
            (
                &[
                    "text/plain;x=\"a,application/openmetrics-text\";q=0.1, application/openmetrics-text;q=0.2",
                ],
                OM,
            ),
            // Parameters after q are extensions, not the type's.
            (&["application/openmetrics-text;q=1;version=2.0.0"], OM),
        ];
        for (values, want) in cases {
            assert_eq!(negotiate(values.iter().copied()), *want, "{values:?}");
        }
    }

    #[test]
    fn ranges_and_weights_are_read() {
        let ranges: Vec<MediaRange<'_>> =
            parse(r#"text/plain ; version=0.0.4 ; q=0.5 , a/b;p="x\"y;z""#).collect();
        assert_eq!(
            ranges,
            vec![
                MediaRange {
                    kind: "text",
                    subtype: "plain",
                    params: vec![("version", "0.0.4".into())],
                    weight: 500,
                },
                MediaRange {
                    kind: "a",
                    subtype: "b",
                    params: vec![("p", "x\"y;z".into())],
                    weight: FULL,
                },
            ]
        );
        for (q, want) in [
            ("0", Some(0)),
            ("0.", Some(0)),
            ("0.001", Some(1)),
            ("0.75", Some(750)),
            ("1", Some(FULL)),
            ("1.000", Some(FULL)),
            ("1.001", None),
            ("0.0001", None),
            ("-0", None),
            ("", None),
        ] {
            assert_eq!(parse_weight(q), want, "{q:?}");
        }
    }
}
