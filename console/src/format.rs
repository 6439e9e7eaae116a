//! Pure text formatting shared by the simulator's terminal view and the
//! live view (`rollout-controller get`): durations as Go writes them, runs
//! of cluster names shortened, a rollout strategy as a phrase, an error
//! and its causes on one line, tables, and lines written so that the text
//! of others in them (plugins' messages, annotations, statuses, conditions,
//! Event notes) cannot break them or drive the terminal.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io;

use rollout_controller::rollout::{RolloutKind, Strategy, Threshold};

/// `err` and its causes on one line, each cause only when its text is not
/// already in the line: most errors repeat their source in their own text,
/// and the chain would otherwise say the same thing several times.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = String::new();
    let mut next = Some(err);
    while let Some(cause) = next {
        let part = cause.to_string();
        if !text.contains(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

/// A duration as Go writes it, shortened (the controller's, which says
/// durations in its own errors too).
pub(crate) use rollout_controller::rollout::format_go_duration as duration;

/// Cluster names with runs of consecutive numbers shortened:
/// `cluster-001 … cluster-005, cluster-008`. Past `max` runs, the rest are
/// counted.
pub(crate) fn ranges(names: &[String], max: usize) -> String {
    fn split(name: &str) -> Option<(&str, u64, usize)> {
        let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, number) = name.split_at(name.len() - digits);
        Some((prefix, number.parse().ok()?, digits))
    }
    let mut runs: Vec<(String, String)> = Vec::new();
    for name in names {
        if let (Some((_, last)), Some((prefix, n, width))) = (runs.last_mut(), split(name))
            && let Some((last_prefix, m, last_width)) = split(last)
            && prefix == last_prefix
            && width == last_width
            && n == m + 1
        {
            *last = name.clone();
            continue;
        }
        runs.push((name.clone(), name.clone()));
    }
    let shown: Vec<String> = runs
        .iter()
        .take(max)
        .map(|(first, last)| {
            if first == last {
                first.clone()
            } else {
                format!("{first} … {last}")
            }
        })
        .collect();
    let mut text = shown.join(", ");
    if runs.len() > max {
        let rest: usize = names.len()
            - runs
                .iter()
                .take(max)
                .map(|(first, last)| match (split(first), split(last)) {
                    (Some((_, a, _)), Some((_, b, _))) => usize::try_from(b - a + 1).unwrap_or(1),
                    _ => 1,
                })
                .sum::<usize>();
        let _ = write!(text, " and {rest} more");
    }
    text
}

/// The strategy as a phrase, such as `Progressive, maxConcurrency 25%,
/// maxFailures 0, progressDeadline None, abort on failure`.
pub(crate) fn describe_strategy(strategy: &Strategy) -> String {
    let threshold = |t: Threshold| match t {
        Threshold::Count(n) => n.to_string(),
        Threshold::Percent(p) => format!("{p}%"),
    };
    let config = strategy.config();
    let mut parts = vec![strategy.type_name().to_owned()];
    if let RolloutKind::Progressive {
        max_concurrency, ..
    } = &strategy.kind
    {
        parts.push(match max_concurrency {
            Threshold::Count(0) => "maxConcurrency all".to_owned(),
            t => format!("maxConcurrency {}", threshold(*t)),
        });
    }
    if let RolloutKind::Progressive { mandatory, .. }
    | RolloutKind::ProgressivePerGroup { mandatory, .. } = &strategy.kind
        && !mandatory.is_empty()
    {
        parts.push(format!("{} mandatory group(s)", mandatory.len()));
    }
    if !matches!(strategy.kind, RolloutKind::All(_)) {
        parts.push(format!("maxFailures {}", threshold(config.max_failures)));
    }
    parts.push(match config.progress_deadline {
        Some(d) => format!("progressDeadline {}", duration(d.unsigned_abs())),
        None => "progressDeadline None".to_owned(),
    });
    if !config.min_success_time.is_zero() && !matches!(strategy.kind, RolloutKind::All(_)) {
        parts.push(format!(
            "minSuccessTime {}",
            duration(config.min_success_time.unsigned_abs())
        ));
    }
    let mut text = parts.join(", ");
    if strategy.abort_on_failure {
        text.push_str("; abort on failure");
    }
    text
}

/// Writes `text` as one line to a person: through `rollout_wire::escaped`,
/// so that a CR, LF, escape sequence or bidirectional override in the text
/// of others it quotes shows as an escape instead of acting.
pub(crate) fn write_line(out: &mut impl io::Write, text: &str) -> io::Result<()> {
    writeln!(out, "{}", rollout_wire::escaped(text))
}

/// [`write_line`] into a `String`.
pub(crate) fn push_line(out: &mut String, text: &str) {
    out.push_str(&rollout_wire::escaped(text));
    out.push('\n');
}

/// `rows` as a table: each column as wide as its widest cell (counted in
/// characters, after `rollout_wire::escaped`: a cell stays on its row), two
/// spaces between columns, the last column not padded; one line per row,
/// trailing spaces trimmed.
pub(crate) fn table(rows: &[Vec<String>]) -> Vec<String> {
    let rows: Vec<Vec<Cow<'_, str>>> = rows
        .iter()
        .map(|row| row.iter().map(|c| rollout_wire::escaped(c)).collect())
        .collect();
    let mut widths: Vec<usize> = Vec::new();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            let len = cell.chars().count();
            match widths.get_mut(i) {
                Some(w) => *w = (*w).max(len),
                None => widths.push(len),
            }
        }
    }
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = widths[i] - cell.chars().count();
                    let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
                }
            }
            line.trim_end().to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose text holds its source's is said once; a source
    /// that adds something is appended.
    #[test]
    fn an_error_chain_is_said_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("{text}")]
        struct Wrapped {
            text: String,
            #[source]
            source: Box<dyn std::error::Error + Send + Sync>,
        }
        let root = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let reading = Wrapped {
            text: "reading /k: no such file".into(),
            source: Box::new(root),
        };
        let err = Wrapped {
            text: "configuring".into(),
            source: Box::new(reading),
        };
        assert_eq!(error_chain(&err), "configuring: reading /k: no such file");
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn consecutive_clusters_are_shortened() {
        let list = names(&[
            "cluster-001",
            "cluster-002",
            "cluster-003",
            "cluster-005",
            "cluster-007",
            "cluster-008",
        ]);
        assert_eq!(
            ranges(&list, 10),
            "cluster-001 … cluster-003, cluster-005, cluster-007 … cluster-008"
        );
        assert_eq!(
            ranges(&list, 2),
            "cluster-001 … cluster-003, cluster-005 and 2 more"
        );
        assert_eq!(ranges(&names(&["a", "b"]), 5), "a, b");
        assert_eq!(ranges(&[], 5), "");
    }

    #[test]
    fn tables_align_columns_by_characters() {
        let rows = vec![
            vec!["A".to_owned(), "✔ ok".to_owned(), "x".to_owned()],
            vec!["long".to_owned(), "b".to_owned(), String::new()],
        ];
        assert_eq!(table(&rows), vec!["A     ✔ ok  x", "long  b"]);
        assert!(table(&[]).is_empty());
    }
}
