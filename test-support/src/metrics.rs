//! For tests of `/metrics`: `GET /metrics` with given `Accept` headers
//! ([`get`], [`scrape_each`]), strict readers of both exposition formats
//! written from their specifications and independent of the encoder
//! ([`parse_openmetrics`], [`parse_prometheus`]), and `promtool check
//! metrics`, Prometheus' own linter, on the Prometheus text
//! ([`promtool_check`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What `Accept` Prometheus 2.x sends by default.
pub const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// The `Content-Type` of an answer in OpenMetrics 1.0.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The `Content-Type` of an answer in the Prometheus text format 0.0.4.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A line that breaks its format's rules, and which rule.
#[derive(Debug, thiserror::Error)]
#[error("{rule}: {line:?}")]
pub struct Malformed {
    pub rule: &'static str,
    pub line: String,
}

fn malformed(rule: &'static str, line: &str) -> Malformed {
    Malformed {
        rule,
        line: line.to_string(),
    }
}

/// One exposition, read: each family's declared type, and each sample as
/// (name, labels sorted and joined, value). `_created` samples are left
/// out: the Prometheus text writes them as families of their own, so the
/// samples of both formats of one scrape compare equal.
#[derive(Debug, Default)]
pub struct Exposition {
    pub types: BTreeMap<String, String>,
    pub samples: BTreeSet<(String, String, String)>,
}

/// The answer to `GET path` over HTTP/1.1 with one `Accept` line per entry
/// of `accept`: (status, content type, body).
pub async fn get(addr: SocketAddr, path: &str, accept: &[&str]) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let headers: String = accept.iter().map(|a| format!("Accept: {a}\r\n")).collect();
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("writes");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("reads");
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-type")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    (status, content_type, body.to_string())
}

/// One `/metrics` read in both formats by [`scrape_each`].
#[derive(Debug)]
pub struct Scrapes {
    /// The OpenMetrics answer, read.
    pub openmetrics: Exposition,
    /// The Prometheus text answer, read.
    pub prometheus: Exposition,
    /// The Prometheus text answer as it came.
    pub prometheus_text: String,
}

/// `GET /metrics` at `addr` once per case, with the case's `Accept` lines
/// (none for an empty list): asserts that each answer is 200 in the case's
/// content type ([`OPENMETRICS`] or [`PROMETHEUS_TEXT`]), and reads the
/// last answer of each format with its strict reader. The cases must name
/// both formats.
pub async fn scrape_each(addr: SocketAddr, cases: &[(&[&str], &str)]) -> Scrapes {
    let mut bodies = BTreeMap::new();
    for (accept, want) in cases {
        let (status, content_type, body) = get(addr, "/metrics", accept).await;
        assert_eq!(status, 200, "Accept: {accept:?}\n{body}");
        assert_eq!(content_type, *want, "Accept: {accept:?}");
        bodies.insert(*want, body);
    }
    let answer = |content_type: &str| -> &String {
        bodies
            .get(content_type)
            .unwrap_or_else(|| panic!("no case asks for {content_type}"))
    };
    let (om_text, prometheus_text) = (answer(OPENMETRICS), answer(PROMETHEUS_TEXT));
    Scrapes {
        openmetrics: parse_openmetrics(om_text).unwrap_or_else(|e| panic!("{e}\n{om_text}")),
        prometheus: parse_prometheus(prometheus_text)
            .unwrap_or_else(|e| panic!("{e}\n{prometheus_text}")),
        prometheus_text: prometheus_text.clone(),
    }
}

impl Scrapes {
    /// Asserts that the samples whose name `keep` accepts are the same in
    /// both formats (a process's own CPU and memory move between scrapes,
    /// so a test keeps the series that hold still).
    pub fn assert_same_samples(&self, keep: impl Fn(&str) -> bool) {
        let kept = |e: &Exposition| -> Vec<(String, String, String)> {
            e.samples
                .iter()
                .filter(|(name, _, _)| keep(name))
                .cloned()
                .collect()
        };
        assert_eq!(kept(&self.openmetrics), kept(&self.prometheus));
    }

    /// Asserts that `promtool check metrics` passes the Prometheus text
    /// (without promtool on the machine, says so on stderr and passes).
    pub fn assert_promtool_passes(&self) {
        if let Err(e) = promtool_check(&self.prometheus_text) {
            panic!("{e}\n{}", self.prometheus_text);
        }
    }
}

/// promtool: on PATH, or where test-support/prometheus/debian.py unpacks
/// Debian's `prometheus` package (the deploy check and the tests against a
/// real Prometheus fetch it there).
fn promtool() -> Option<PathBuf> {
    crate::prometheus::cached("promtool")
}

/// Why `promtool check metrics` did not pass.
#[derive(Debug, thiserror::Error)]
pub enum PromtoolError {
    #[error("running {0}")]
    Run(PathBuf, #[source] std::io::Error),
    #[error("promtool check metrics: {0}")]
    Complaint(String),
}

/// `promtool check metrics` on the Prometheus text `text`: `Ok(true)` when
/// it passes, `Ok(false)` when there is no promtool (said on stderr).
pub fn promtool_check(text: &str) -> Result<bool, PromtoolError> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let Some(promtool) = promtool() else {
        eprintln!(
            "promtool not found (on PATH, or after test-support/prometheus/fetch promtool): not linted"
        );
        return Ok(false);
    };
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| PromtoolError::Run(promtool.clone(), e))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| PromtoolError::Run(promtool.clone(), e))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| PromtoolError::Run(promtool.clone(), e))?;
    if out.status.success() {
        Ok(true)
    } else {
        Err(PromtoolError::Complaint(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// A sample line read strictly: its name, labels (sorted and joined), value
/// (as `f64` prints it) and what follows the value.
struct Sample {
    name: String,
    labels: String,
    value: String,
    tail: String,
}

fn is_name(name: &str, colons: bool) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || (colons && c == ':'))
}

/// A quoted label value after its opening quote, with only `\\`, `\"` and
/// `\n` escapes: (the value, the rest after the closing quote).
fn label_value(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    loop {
        match chars.next()? {
            (_, '\\') => match chars.next()?.1 {
                c @ ('\\' | '"') => value.push(c),
                'n' => value.push('\n'),
                _ => return None,
            },
            (_, '\n') => return None,
            (i, '"') => return Some((value, &text[i + 1..])),
            (_, c) => value.push(c),
        }
    }
}

fn sample(line: &str) -> Result<Sample, Malformed> {
    let name_end = line
        .find(['{', ' '])
        .ok_or_else(|| malformed("no value", line))?;
    let name = &line[..name_end];
    if !is_name(name, true) {
        return Err(malformed("bad metric name", line));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(mut inner) = rest.strip_prefix('{') {
        while !inner.starts_with('}') {
            let (label, after) = inner
                .split_once("=\"")
                .ok_or_else(|| malformed("bad label", line))?;
            if !is_name(label, false) {
                return Err(malformed("bad label name", line));
            }
            let (value, after) =
                label_value(after).ok_or_else(|| malformed("bad label value", line))?;
            labels.push(format!("{label}={value:?}"));
            inner = after.strip_prefix(',').unwrap_or(after);
        }
        rest = &inner[1..];
    }
    let rest = rest
        .strip_prefix(' ')
        .ok_or_else(|| malformed("no space before the value", line))?;
    let (value, tail) = rest.split_once(' ').unwrap_or((rest, ""));
    let parsed: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| malformed("bad value", line))?,
    };
    labels.sort();
    Ok(Sample {
        name: name.into(),
        labels: labels.join(","),
        value: format!("{parsed}"),
        tail: tail.into(),
    })
}

/// The sample-name suffixes of an OpenMetrics type (empty: not a type).
fn openmetrics_suffixes(kind: &str) -> &'static [&'static str] {
    match kind {
        "counter" => &["_total", "_created"],
        "histogram" => &["_bucket", "_count", "_sum", "_created"],
        "info" => &["_info"],
        "gauge" | "stateset" | "unknown" => &[""],
        _ => &[],
    }
}

/// One `# KEYWORD name rest` line.
fn metadata(meta: &str) -> (&str, &str, &str) {
    let mut parts = meta.splitn(3, ' ');
    let keyword = parts.next().unwrap_or("");
    let name = parts.next().unwrap_or("");
    (keyword, name, parts.next().unwrap_or(""))
}

/// Reads OpenMetrics 1.0 text: ends with `# EOF`; TYPE, HELP and UNIT
/// before a family's samples, each family declared once; a counter family
/// named without `_total`; each sample named as its family's type allows;
/// HELP without raw quotes; a UNIT the family's name ends with.
pub fn parse_openmetrics(text: &str) -> Result<Exposition, Malformed> {
    let body = text
        .strip_suffix("# EOF\n")
        .ok_or_else(|| malformed("does not end with # EOF", text.lines().last().unwrap_or("")))?;
    let mut parsed = Exposition::default();
    let mut current: Option<(String, String)> = None;
    for line in body.lines() {
        if let Some(meta) = line.strip_prefix("# ") {
            let (keyword, name, rest) = metadata(meta);
            match keyword {
                "TYPE" if openmetrics_suffixes(rest).is_empty() => {
                    return Err(malformed("not an OpenMetrics type", line));
                }
                "TYPE" if rest == "counter" && name.ends_with("_total") => {
                    return Err(malformed("a counter family is named without _total", line));
                }
                "TYPE" => {
                    if parsed.types.insert(name.into(), rest.into()).is_some() {
                        return Err(malformed("a family declared twice", line));
                    }
                    current = Some((name.into(), rest.into()));
                }
                "HELP" if rest.replace("\\\\", "").replace("\\\"", "").contains('"') => {
                    return Err(malformed("a raw quote in HELP", line));
                }
                "UNIT" if !name.ends_with(&format!("_{rest}")) => {
                    return Err(malformed("the name does not end with its unit", line));
                }
                "HELP" | "UNIT" => {}
                _ => return Err(malformed("unknown metadata", line)),
            }
            continue;
        }
        let s = sample(line)?;
        let (family, kind) = current
            .as_ref()
            .ok_or_else(|| malformed("a sample before any TYPE", line))?;
        let allowed = openmetrics_suffixes(kind)
            .iter()
            .any(|suffix| s.name == format!("{family}{suffix}"));
        if !allowed {
            return Err(malformed(
                "a sample name its family's type does not have",
                line,
            ));
        }
        if !s.tail.is_empty() && !s.tail.starts_with("# {") && s.tail.parse::<f64>().is_err() {
            return Err(malformed("a bad timestamp or exemplar", line));
        }
        if !s.name.ends_with("_created") {
            parsed.samples.insert((s.name, s.labels, s.value));
        }
    }
    Ok(parsed)
}

/// Reads the Prometheus text 0.0.4: no `# EOF` or `# UNIT`; the 0.0.4 types
/// only, each name's TYPE once and before its samples; samples named as
/// their TYPE line says (a histogram's `_bucket`, `_count`, `_sum`); HELP
/// escaping only `\\` and `\n`; timestamps in whole milliseconds.
pub fn parse_prometheus(text: &str) -> Result<Exposition, Malformed> {
    const TYPES: [&str; 5] = ["counter", "gauge", "histogram", "summary", "untyped"];
    let mut parsed = Exposition::default();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some(meta) = line.strip_prefix('#') {
            match metadata(meta.trim_start()) {
                ("TYPE", _, kind) if !TYPES.contains(&kind) => {
                    return Err(malformed("not a 0.0.4 type", line));
                }
                ("TYPE", name, kind) => {
                    if parsed.types.insert(name.into(), kind.into()).is_some() {
                        return Err(malformed("TYPE twice", line));
                    }
                    current = Some((name.into(), kind.into()));
                }
                ("HELP", _, help) if help.contains("\\\"") => {
                    return Err(malformed("0.0.4 HELP escapes only \\\\ and \\n", line));
                }
                ("EOF" | "UNIT", _, _) => return Err(malformed("OpenMetrics only", line)),
                _ => {}
            }
            continue;
        }
        let s = sample(line)?;
        if !s.tail.is_empty() && s.tail.parse::<i64>().is_err() {
            return Err(malformed("a timestamp is whole milliseconds", line));
        }
        if let Some((family, kind)) = &current {
            let fits = match kind.as_str() {
                "histogram" | "summary" => ["_bucket", "_count", "_sum", ""]
                    .iter()
                    .any(|suffix| s.name == format!("{family}{suffix}")),
                _ => s.name == *family,
            };
            if !fits {
                return Err(malformed("a sample not named as its TYPE line", line));
            }
        }
        parsed.samples.insert((s.name, s.labels, s.value));
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reader_refuses_the_other_format() {
        let om = "# TYPE a counter\na_total 1\n# EOF\n";
        let text = "# TYPE a_total counter\na_total 1\n";
        assert!(parse_openmetrics(om).is_ok());
        assert!(parse_prometheus(text).is_ok());
        assert!(parse_openmetrics(text).is_err());
        assert!(parse_prometheus(om).is_err());
        assert_eq!(
            parse_prometheus("# TYPE a counter\na_total 1\n")
                .expect_err("refused")
                .rule,
            "a sample not named as its TYPE line"
        );
        assert!(parse_openmetrics("# TYPE a_total counter\na_total 1\n# EOF\n").is_err());
        assert!(parse_openmetrics("# TYPE a gauge\na{b=\"c\\x\"} 1\n# EOF\n").is_err());
    }
}
