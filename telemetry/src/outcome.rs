//! What a span says about a hook's outcome, so that the gateway's, the
//! controller's and the plugins' spans are searched for failures alike
//! (Jaeger's `error=true` and tag search):
//!
//! - the gRPC code as `rpc.grpc.status_code`, and when it is not OK an error
//!   status whose description starts with the code's name
//!   (`UNAVAILABLE: plugin "smoke": connection refused`);
//! - a validation's verdict as `ocm.rollout.validation.result`
//!   (`SUCCEEDED`, `FAILED`, `INPROGRESS`, `UNSPECIFIED`); a FAILED one also
//!   sets an error status naming the plugins that said it and why, although
//!   the call itself succeeded;
//! - the members skipped under `failurePolicy: Ignore` as
//!   `ocm.rollout.failed_open`: the call succeeded without their verdict,
//!   so the status is left as it is (unset, not an error); each attempt's
//!   span has the plugin's policy for the hook (`ocm.rollout.failure_policy`)
//!   and, when it failed under `Ignore`, `ocm.rollout.failure_ignored`;
//! - a server span is an error only for the codes that say the server
//!   failed ([`finish_server_span`], OpenTelemetry's RPC conventions).
//!
//! Every description is at most [`MAX_DESCRIPTION_BYTES`] long.

use std::borrow::Cow;
use std::fmt::Write as _;

use opentelemetry::KeyValue;
use opentelemetry::trace::{Span, Status};
use rollout_proto::v1alpha1::{ValidateResponse, ValidationResult};

/// The attribute holding a validation's verdict.
pub const VALIDATION_RESULT: &str = "ocm.rollout.validation.result";

/// The attribute naming the plugins whose answer was FAILED
/// (comma-separated), where the span's target is a pipeline.
pub const VALIDATION_FAILED_BY: &str = "ocm.rollout.validation.failed_by";

/// The attribute naming the plugins that failed open (comma-separated).
pub const FAILED_OPEN: &str = "ocm.rollout.failed_open";

/// The attribute of an attempt's span holding the plugin's
/// `failurePolicy` for the hook: `Fail` or `Ignore`.
pub const FAILURE_POLICY: &str = "ocm.rollout.failure_policy";

/// The attribute, `true`, of a failed attempt's span whose plugin's
/// `failurePolicy` for the hook is `Ignore`: the span is an error, and this
/// says the error fails no call (the call's span names the plugin in
/// [`FAILED_OPEN`] when its last attempt failed).
pub const FAILURE_IGNORED: &str = "ocm.rollout.failure_ignored";

/// The longest status description a span gets, in bytes: enough for the
/// plugin's name and the first lines of its message; Jaeger shows it whole.
pub const MAX_DESCRIPTION_BYTES: usize = 512;

/// The attribute value of a `ValidationResult` number: `SUCCEEDED`,
/// `FAILED`, `INPROGRESS`, or `UNSPECIFIED` for 0 and numbers the enum does
/// not have.
pub fn validation_name(result: i32) -> &'static str {
    match ValidationResult::try_from(result) {
        Ok(ValidationResult::Succeeded) => "SUCCEEDED",
        Ok(ValidationResult::Failed) => "FAILED",
        Ok(ValidationResult::Inprogress) => "INPROGRESS",
        Ok(ValidationResult::Unspecified) | Err(_) => "UNSPECIFIED",
    }
}

/// Records a validation answer on `span`: [`VALIDATION_RESULT`], and when
/// it is FAILED an error status
/// `ValidateRolloutCompletion FAILED by plugin "NAME": message`, naming
/// `plugins` (those that said FAILED; the span's target when empty).
pub fn record_validation(span: &mut impl Span, plugins: &[&str], answer: &ValidateResponse) {
    span.set_attribute(KeyValue::new(
        VALIDATION_RESULT,
        validation_name(answer.result),
    ));
    if answer.result != ValidationResult::Failed as i32 {
        return;
    }
    let mut description = String::from("ValidateRolloutCompletion FAILED");
    match plugins {
        [] => {}
        [one] => {
            let _ = write!(description, " by plugin {one:?}");
        }
        many => {
            description.push_str(" by plugins ");
            for (i, name) in many.iter().enumerate() {
                if i > 0 {
                    description.push_str(", ");
                }
                let _ = write!(description, "{name:?}");
            }
        }
    }
    if !answer.message.is_empty() {
        description.push_str(": ");
        description.push_str(&answer.message);
    }
    span.set_status(Status::error(bounded(description)));
}

/// Records the members that failed open on `span` ([`FAILED_OPEN`]), and
/// nothing when there is none. The status is not touched: the call went on
/// without them, as their `failurePolicy: Ignore` asks.
pub fn record_failed_open(span: &mut impl Span, plugins: &[&str]) {
    if !plugins.is_empty() {
        span.set_attribute(KeyValue::new(FAILED_OPEN, plugins.join(",")));
    }
}

/// Records a gRPC outcome on a client span (`rpc.grpc.status_code`, and
/// when not OK an error status `CODE_NAME: message`) and ends it. An error
/// status set before (a FAILED validation) stays when the code is OK.
pub fn finish_span(span: &mut impl Span, code: tonic::Code, message: &str) {
    span.set_attribute(KeyValue::new("rpc.grpc.status_code", code as i64));
    if code != tonic::Code::Ok {
        span.set_status(Status::error(error_description(code, message)));
    }
    span.end();
}

/// Records a gRPC outcome on a server span and ends it: as
/// [`finish_span`], except that only the codes that say the server failed
/// ([`crate::semconv::is_server_error`]) make it an error; any other code
/// is in `rpc.grpc.status_code` only, as OpenTelemetry's RPC conventions
/// say. An error status set before (a FAILED validation) stays.
pub fn finish_server_span(span: &mut impl Span, code: tonic::Code, message: &str) {
    span.set_attribute(KeyValue::new("rpc.grpc.status_code", code as i64));
    if crate::semconv::is_server_error(code) {
        span.set_status(Status::error(error_description(code, message)));
    }
    span.end();
}

/// The description of a failed call's span: the code's name, then the
/// message, bounded.
pub fn error_description(code: tonic::Code, message: &str) -> Cow<'static, str> {
    let name = rollout_proto::code_name(code);
    if message.is_empty() {
        return Cow::Borrowed(name);
    }
    bounded(format!("{name}: {message}"))
}

/// `text` cut to [`MAX_DESCRIPTION_BYTES`] at a character boundary, the
/// cut marked with `…`.
pub fn bounded(mut text: String) -> Cow<'static, str> {
    if text.len() > MAX_DESCRIPTION_BYTES {
        let mut end = MAX_DESCRIPTION_BYTES - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    Cow::Owned(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanProcessor};
    use std::sync::{Arc, Mutex};

    /// Keeps every span that ends, as an exporter would get it.
    #[derive(Debug, Default, Clone)]
    struct Ended(Arc<Mutex<Vec<SpanData>>>);

    impl SpanProcessor for Ended {
        fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &opentelemetry::Context) {}
        fn on_end(&self, span: SpanData) {
            self.0.lock().expect("lock").push(span);
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: std::time::Duration) -> OTelSdkResult {
            Ok(())
        }
    }

    /// The one span `record` made, as the SDK hands it to an exporter.
    fn recorded(record: impl FnOnce(&mut opentelemetry_sdk::trace::Span)) -> SpanData {
        let ended = Ended::default();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(ended.clone())
            .build();
        let mut span = provider.tracer("test").start("call");
        record(&mut span);
        drop(span);
        let mut spans = ended.0.lock().expect("lock");
        assert_eq!(spans.len(), 1);
        spans.remove(0)
    }

    fn attribute(span: &SpanData, key: &str) -> Option<String> {
        span.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    }

    fn answer(result: ValidationResult, message: &str) -> ValidateResponse {
        ValidateResponse {
            result: result as i32,
            message: message.into(),
            recheck_after: None,
        }
    }

    #[test]
    fn a_failed_validation_is_an_error_naming_the_plugins_and_the_reason() {
        let span = recorded(|s| {
            record_validation(s, &["smoke"], &answer(ValidationResult::Failed, "5xx 7%"));
            finish_span(s, tonic::Code::Ok, "");
        });
        assert_eq!(
            attribute(&span, VALIDATION_RESULT).as_deref(),
            Some("FAILED")
        );
        assert_eq!(
            span.status,
            Status::error("ValidateRolloutCompletion FAILED by plugin \"smoke\": 5xx 7%")
        );
        let span = recorded(|s| {
            record_validation(s, &["a", "b"], &answer(ValidationResult::Failed, ""));
        });
        assert_eq!(
            span.status,
            Status::error("ValidateRolloutCompletion FAILED by plugins \"a\", \"b\"")
        );
    }

    #[test]
    fn other_verdicts_are_attributes_only() {
        for (result, name) in [
            (ValidationResult::Succeeded, "SUCCEEDED"),
            (ValidationResult::Inprogress, "INPROGRESS"),
            (ValidationResult::Unspecified, "UNSPECIFIED"),
        ] {
            let span = recorded(|s| record_validation(s, &["p"], &answer(result, "soak 3/5")));
            assert_eq!(attribute(&span, VALIDATION_RESULT).as_deref(), Some(name));
            assert_eq!(span.status, Status::Unset, "{name}");
        }
        assert_eq!(validation_name(42), "UNSPECIFIED");
    }

    #[test]
    fn a_fail_open_is_an_attribute_and_no_error() {
        let span = recorded(|s| {
            record_failed_open(s, &["down", "gone"]);
            finish_span(s, tonic::Code::Ok, "");
        });
        assert_eq!(attribute(&span, FAILED_OPEN).as_deref(), Some("down,gone"));
        assert_eq!(span.status, Status::Unset);
        let span = recorded(|s| record_failed_open(s, &[]));
        assert_eq!(attribute(&span, FAILED_OPEN), None);
    }

    #[test]
    fn a_server_span_is_an_error_only_for_the_servers_own_failures() {
        let span = recorded(|s| finish_server_span(s, tonic::Code::NotFound, "no plugin \"x\""));
        assert_eq!(span.status, Status::Unset);
        assert_eq!(
            attribute(&span, "rpc.grpc.status_code").as_deref(),
            Some("5")
        );
        let span = recorded(|s| finish_server_span(s, tonic::Code::Unavailable, "refused"));
        assert_eq!(span.status, Status::error("UNAVAILABLE: refused"));
        let span = recorded(|s| {
            record_validation(s, &["smoke"], &answer(ValidationResult::Failed, ""));
            finish_server_span(s, tonic::Code::Ok, "");
        });
        assert_eq!(
            span.status,
            Status::error("ValidateRolloutCompletion FAILED by plugin \"smoke\"")
        );
    }

    #[test]
    fn an_error_names_its_code_and_is_bounded() {
        let span = recorded(|s| finish_span(s, tonic::Code::Unavailable, "plugin \"p\": refused"));
        assert_eq!(
            span.status,
            Status::error("UNAVAILABLE: plugin \"p\": refused")
        );
        assert_eq!(
            attribute(&span, "rpc.grpc.status_code").as_deref(),
            Some("14")
        );
        let long = "é".repeat(1000);
        let span = recorded(|s| finish_span(s, tonic::Code::Internal, &long));
        let Status::Error { description } = &span.status else {
            panic!("{:?}", span.status)
        };
        assert!(description.len() <= MAX_DESCRIPTION_BYTES, "{description}");
        assert!(description.starts_with("INTERNAL: éé"), "{description}");
        assert!(description.ends_with('…'), "{description}");
        assert_eq!(error_description(tonic::Code::NotFound, ""), "NOT_FOUND");
    }
}
