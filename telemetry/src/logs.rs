//! Logs on stderr, as text or as one JSON object per line.
//!
//! Work that is traced runs inside a `tracing` span whose fields include the
//! `trace_id` and `span_id` of its OpenTelemetry span (the gateway's `call`,
//! the controller's reconcile); in JSON each line logged inside carries them
//! as top-level fields, so a log search leads straight to the trace in Jaeger
//! (and back).
//!
//! Text lines are coloured only when stderr is a terminal and `NO_COLOR` is
//! unset or empty ([`colour`]): a pod's log, a file or a pipe gets plain text.
//! Their field values, the message included, are written through
//! `rollout_wire::escaped` ([`TextFields`]): a plugin's message with a CR or
//! LF stays on its line (it cannot forge a line of its own), and escape
//! sequences reach no terminal. JSON lines need no such step: JSON's string
//! escaping covers it, and their values stay exact.

use std::ffi::OsStr;
use std::fmt;
use std::io::IsTerminal;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; span fields in the prefix.
    Text,
    /// One JSON object per line, with `trace_id` and `span_id` inside a call.
    Json,
}

/// Installs the global subscriber, writing to stderr: `RUST_LOG` filters
/// (default `info`); text is coloured when [`stderr_colour`] says so.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(stderr_colour())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.fmt_fields(TextFields).init(),
        LogFormat::Json => builder
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .init(),
    }
}

/// Whether text logs carry ANSI colour codes: only on a terminal (a pod's
/// log, a file or a pipe would keep the escape codes as text), and never
/// when `NO_COLOR` is set to anything but the empty string
/// (<https://no-color.org>).
pub fn colour(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// [`colour`] for this process's stderr and its `NO_COLOR` variable: the
/// `with_ansi` setting of any text subscriber writing to stderr.
pub fn stderr_colour() -> bool {
    colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    )
}

/// The fields of a text line, as tracing-subscriber's default writes them
/// (the message, then `name=value` separated by spaces, strings quoted),
/// with every value
/// passed through `rollout_wire::escaped`: the one field format of every
/// text log of the workspace (`tracing_subscriber::fmt().fmt_fields(TextFields)`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TextFields;

impl<'w> FormatFields<'w> for TextFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor {
            writer,
            result: Ok(()),
            first: true,
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes fields as [`TextFields`] does.
struct TextVisitor<'w> {
    writer: Writer<'w>,
    result: fmt::Result,
    first: bool,
}

impl TextVisitor<'_> {
    fn write(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        let pad = if self.first { "" } else { " " };
        self.first = false;
        let value = rollout_wire::escaped(value);
        self.result = match field.name() {
            "message" => write!(self.writer, "{pad}{value}"),
            name => write!(
                self.writer,
                "{pad}{}={value}",
                name.strip_prefix("r#").unwrap_or(name)
            ),
        };
    }
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // Quoted, as tracing-subscriber's default writes a string field.
        if field.name() == "message" {
            self.write(field, value);
        } else {
            self.write(field, &format!("{value:?}"));
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.write(field, &value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write(field, &format!("{value:?}"));
    }
}

/// The span fields lifted to the top level of a JSON line.
const LIFTED: [&str; 2] = ["trace_id", "span_id"];

/// The JSON event format: `timestamp`, `level`, `target`, the event's fields
/// (`message` included), `spans` (names, outermost first), and the innermost
/// `trace_id` and `span_id` of the spans in scope.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonLines;

impl<S> FormatEvent<S, JsonFields> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            Value::String(jiff::Timestamp::now().to_string()),
        );
        line.insert("level".into(), Value::String(meta.level().to_string()));
        line.insert("target".into(), Value::String(meta.target().to_string()));
        event.record(&mut JsonVisitor(&mut line));
        if let Some(scope) = ctx.event_scope() {
            let mut names = Vec::new();
            for span in scope.from_root() {
                names.push(Value::String(span.name().to_string()));
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<FormattedFields<JsonFields>>() else {
                    continue;
                };
                // JsonFields keeps a span's fields as one JSON object; inner
                // spans come later and win.
                if let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(&fields.fields) {
                    for key in LIFTED {
                        if let Some(v) = fields.get(key) {
                            line.insert(key.into(), v.clone());
                        }
                    }
                }
            }
            line.insert("spans".into(), Value::Array(names));
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// Records an event's fields into a JSON object.
struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl Visit for JsonVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::String(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().into(), Value::String(value.into()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().into(), Value::String(value.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;
    use tracing_subscriber::fmt::MakeWriter;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        let set = |v: &'static str| Some(OsStr::new(v));
        for (is_terminal, no_color, want) in [
            (true, None, true),
            (true, set(""), true),
            (true, set("1"), false),
            (true, set("0"), false),
            (false, None, false),
            (false, set(""), false),
            (false, set("1"), false),
        ] {
            assert_eq!(
                colour(is_terminal, no_color),
                want,
                "terminal {is_terminal}, NO_COLOR {no_color:?}"
            );
        }
    }

    #[test]
    fn a_text_line_keeps_a_value_with_controls_on_its_line() {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(out.clone())
            .with_ansi(false)
            .fmt_fields(TextFields)
            .finish();
        let forged = "no\r\n2026-01-01T00:00:00.000000Z  INFO rollout_gateway: rollout Succeeded \x1b]52;c;aGk=\x07\x1b[2J";
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("call", hook = "ValidateRolloutCompletion");
            let _entered = span.enter();
            tracing::warn!(plugin = "p", error = forged, "plugin failed: {forged}");
        });
        let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8");
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            !text.trim_end_matches('\n').contains(char::is_control),
            "{text:?}"
        );
        assert!(
            text.contains("call{hook=\"ValidateRolloutCompletion\"}"),
            "{text}"
        );
        assert!(text.contains("plugin failed: no\\r\\n2026"), "{text}");
        assert!(
            text.contains(" plugin=\"p\" error=\"no\\r\\n2026"),
            "{text}"
        );
        assert!(text.contains("\\x1b]52;c;aGk=\\x07\\x1b[2J"), "{text}");
    }

    #[test]
    fn a_line_inside_a_call_carries_its_trace_ids() {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(out.clone())
            .fmt_fields(JsonFields::new())
            .event_format(JsonLines)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(plugin = "outside", "before");
            let span = tracing::info_span!(
                "call",
                hook = "BeginRollout",
                trace_id = "4bf92f3577b34da6a3ce929d0e0e4736",
                span_id = "00f067aa0ba902b7"
            );
            let _entered = span.enter();
            tracing::warn!(plugin = "smoke-test", attempt = 2, "plugin failed");
        });
        let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("utf-8");
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["message"], "before");
        assert!(lines[0].get("trace_id").is_none());
        assert_eq!(lines[1]["message"], "plugin failed");
        assert_eq!(lines[1]["level"], "WARN");
        assert_eq!(lines[1]["plugin"], "smoke-test");
        assert_eq!(lines[1]["attempt"], 2);
        assert_eq!(lines[1]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(lines[1]["span_id"], "00f067aa0ba902b7");
        assert_eq!(lines[1]["spans"], serde_json::json!(["call"]));
    }
}
