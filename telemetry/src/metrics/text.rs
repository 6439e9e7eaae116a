//! The Prometheus text format 0.0.4, written from the OpenMetrics text of the
//! same registry, so that both formats come from one encoding.
//!
//! What differs (OpenMetrics 1.0 against the 0.0.4 format):
//!
//! | OpenMetrics | Prometheus 0.0.4 |
//! |---|---|
//! | `# TYPE x counter`, samples `x_total` | `# TYPE x_total counter` (and `# HELP x_total`) |
//! | `# TYPE x info`, samples `x_info` | `# TYPE x_info gauge` |
//! | `stateset` | `gauge` |
//! | `gaugehistogram` | `histogram` |
//! | `unknown` | `untyped` |
//! | `x_created` of a counter, histogram or summary; `x_gsum`, `x_gcount` | each a gauge family of its own, after `x` |
//! | `# UNIT` | left out |
//! | exemplars (`… # {…} v`) | left out |
//! | timestamps in seconds | in milliseconds |
//! | `\"` in HELP | `"` (only `\\` and `\n` are escaped) |
//! | `# EOF` | left out |
//!
//! Label values are escaped alike in both.

use super::quoted::find_outside_quotes;
use std::fmt::Write as _;

/// One metric family of an OpenMetrics text.
#[derive(Debug, Default)]
struct Family<'a> {
    name: &'a str,
    kind: &'a str,
    help: Option<&'a str>,
    samples: Vec<Sample<'a>>,
}

/// One sample line: its name, its labels as written (`{…}` or empty), its
/// value, and its timestamp in seconds if any.
#[derive(Debug)]
struct Sample<'a> {
    name: &'a str,
    labels: &'a str,
    value: &'a str,
    timestamp: Option<&'a str>,
}

/// The Prometheus text (0.0.4) of an OpenMetrics text as `prometheus-client`
/// writes it. A line it cannot read is left out: the input is this
/// process's own encoding, and a scrape should still get the rest.
pub(crate) fn from_openmetrics(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    for family in families(openmetrics) {
        write_family(&mut out, &family);
    }
    out
}

/// The families of `text`, in order. Metadata for a name other than the
/// current family's starts a new family; a sample with no metadata before
/// it is a family of its own, of type `unknown`.
fn families(text: &str) -> Vec<Family<'_>> {
    let mut families: Vec<Family<'_>> = Vec::new();
    for line in text.lines() {
        if line == "# EOF" {
            break;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (Some(keyword), Some(name)) = (parts.next(), parts.next()) else {
                continue;
            };
            let rest = parts.next().unwrap_or("");
            let family = current(&mut families, name);
            match keyword {
                "HELP" => family.help = Some(rest),
                "TYPE" => family.kind = rest,
                _ => {}
            }
            continue;
        }
        let Some(sample) = sample(line) else {
            continue;
        };
        let belongs = families.last().is_some_and(|f| {
            sample
                .name
                .strip_prefix(f.name)
                .is_some_and(|suffix| suffix.is_empty() || suffix.starts_with('_'))
        });
        if !belongs {
            current(&mut families, sample.name);
        }
        if let Some(family) = families.last_mut() {
            family.samples.push(sample);
        }
    }
    families
}

/// The family named `name`: the last one if it is, else a new one.
fn current<'a, 'f>(families: &'f mut Vec<Family<'a>>, name: &'a str) -> &'f mut Family<'a> {
    if families.last().is_none_or(|f| f.name != name) {
        families.push(Family {
            name,
            kind: "unknown",
            ..Family::default()
        });
    }
    let last = families.len() - 1;
    &mut families[last]
}

/// Reads `name{labels} value [timestamp] [# exemplar]`.
fn sample(line: &str) -> Option<Sample<'_>> {
    let name_end = line.find(['{', ' '])?;
    let name = &line[..name_end];
    let labels_end = if line[name_end..].starts_with('{') {
        name_end + labels_length(&line[name_end..])?
    } else {
        name_end
    };
    let mut rest = line[labels_end..].split_whitespace();
    let value = rest.next()?;
    let timestamp = rest.next().filter(|t| *t != "#");
    Some(Sample {
        name,
        labels: &line[name_end..labels_end],
        value,
        timestamp,
    })
}

/// The length of the `{…}` that `text` starts with, quoted values (which
/// may hold `}` and escaped quotes) included.
fn labels_length(text: &str) -> Option<usize> {
    find_outside_quotes(text, '}').map(|i| i + 1)
}

/// The 0.0.4 name and type of an OpenMetrics family.
fn prometheus_name_and_type<'a>(family: &Family<'a>) -> (String, &'static str) {
    match family.kind {
        "counter" => (format!("{}_total", family.name), "counter"),
        "info" => (format!("{}_info", family.name), "gauge"),
        "gauge" | "stateset" => (family.name.to_string(), "gauge"),
        "histogram" | "gaugehistogram" => (family.name.to_string(), "histogram"),
        "summary" => (family.name.to_string(), "summary"),
        _ => (family.name.to_string(), "untyped"),
    }
}

/// The suffixes of the samples that 0.0.4 has no place for in their
/// family, each written as a gauge family of its own.
fn split_suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" | "histogram" | "summary" => &["_created"],
        "gaugehistogram" => &["_gsum", "_gcount"],
        _ => &[],
    }
}

fn write_family(out: &mut String, family: &Family<'_>) {
    let (name, kind) = prometheus_name_and_type(family);
    let split = split_suffixes(family.kind);
    let is_split = |s: &Sample<'_>| {
        split
            .iter()
            .any(|suffix| s.name.strip_prefix(family.name) == Some(suffix))
    };
    write_header(out, &name, family.help, kind);
    for s in family.samples.iter().filter(|s| !is_split(s)) {
        write_sample(out, s);
    }
    for suffix in split {
        let name = format!("{}{suffix}", family.name);
        let mut samples = family.samples.iter().filter(|s| s.name == name).peekable();
        if samples.peek().is_some() {
            write_header(out, &name, family.help, "gauge");
            samples.for_each(|s| write_sample(out, s));
        }
    }
}

fn write_header(out: &mut String, name: &str, help: Option<&str>, kind: &str) {
    if let Some(help) = help {
        let _ = writeln!(out, "# HELP {name} {}", help_text(help));
    }
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn write_sample(out: &mut String, s: &Sample<'_>) {
    let _ = write!(out, "{}{} {}", s.name, s.labels, s.value);
    if let Some(ms) = s.timestamp.and_then(milliseconds) {
        let _ = write!(out, " {ms}");
    }
    out.push('\n');
}

/// An OpenMetrics timestamp (seconds, maybe fractional) in milliseconds.
fn milliseconds(seconds: &str) -> Option<i64> {
    let seconds: f64 = seconds.parse().ok()?;
    let ms = (seconds * 1000.0).round();
    // In range, so the conversion is exact.
    (ms.is_finite() && ms.abs() < 9.0e15).then_some(ms as i64)
}

/// OpenMetrics HELP text as 0.0.4 HELP text: `\"` becomes `"`; `\\` and
/// `\n` stay as they are.
fn help_text(help: &str) -> String {
    let mut out = String::with_capacity(help.len());
    let mut chars = help.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push('"'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push_str("\\\\"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_openmetrics_type_has_its_prometheus_form() {
        let openmetrics = concat!(
            "# HELP calls Calls, by \\\"code\\\" \\\\ path.\n",
            "# TYPE calls counter\n",
            "calls_total{code=\"OK\"} 3\n",
            "calls_created{code=\"OK\"} 1700000000.5\n",
            "calls_total{code=\"a \\\"}\\\" b\"} 1 # {trace_id=\"x\"} 1 1700000000\n",
            "# HELP wait_seconds Waits.\n",
            "# TYPE wait_seconds histogram\n",
            "# UNIT wait_seconds seconds\n",
            "wait_seconds_sum 0.5\n",
            "wait_seconds_count 1\n",
            "wait_seconds_bucket{le=\"1.0\"} 1\n",
            "wait_seconds_bucket{le=\"+Inf\"} 1\n",
            "# HELP build Build.\n",
            "# TYPE build info\n",
            "build_info{version=\"1\"} 1\n",
            "# TYPE door stateset\n",
            "door{door=\"open\"} 1\n",
            "# TYPE queue gaugehistogram\n",
            "queue_bucket{le=\"+Inf\"} 2\n",
            "queue_gcount 2\n",
            "queue_gsum 3\n",
            "# TYPE up gauge\n",
            "up 1 1700000000.25\n",
            "# TYPE odd unknown\n",
            "odd 7\n",
            "stray 1\n",
            "# EOF\n",
        );
        let want = concat!(
            "# HELP calls_total Calls, by \"code\" \\\\ path.\n",
            "# TYPE calls_total counter\n",
            "calls_total{code=\"OK\"} 3\n",
            "calls_total{code=\"a \\\"}\\\" b\"} 1\n",
            "# HELP calls_created Calls, by \"code\" \\\\ path.\n",
            "# TYPE calls_created gauge\n",
            "calls_created{code=\"OK\"} 1700000000.5\n",
            "# HELP wait_seconds Waits.\n",
            "# TYPE wait_seconds histogram\n",
            "wait_seconds_sum 0.5\n",
            "wait_seconds_count 1\n",
            "wait_seconds_bucket{le=\"1.0\"} 1\n",
            "wait_seconds_bucket{le=\"+Inf\"} 1\n",
            "# HELP build_info Build.\n",
            "# TYPE build_info gauge\n",
            "build_info{version=\"1\"} 1\n",
            "# TYPE door gauge\n",
            "door{door=\"open\"} 1\n",
            "# TYPE queue histogram\n",
            "queue_bucket{le=\"+Inf\"} 2\n",
            "# TYPE queue_gsum gauge\n",
            "queue_gsum 3\n",
            "# TYPE queue_gcount gauge\n",
            "queue_gcount 2\n",
            "# TYPE up gauge\n",
            "up 1 1700000000250\n",
            "# TYPE odd untyped\n",
            "odd 7\n",
            "# TYPE stray untyped\n",
            "stray 1\n",
        );
        assert_eq!(from_openmetrics(openmetrics), want);
    }

    #[test]
    fn nothing_after_eof_and_no_eof() {
        assert_eq!(from_openmetrics("# EOF\n# TYPE x gauge\nx 1\n"), "");
        assert_eq!(from_openmetrics(""), "");
    }
}
