//! A call's outcome on the wire: `grpc-status` and its percent-encoded
//! `grpc-message`, in trailers or in the headers of a trailers-only answer,
//! read only where every gRPC implementation reads them the same; an
//! answer's `content-type`; and the status an HTTP answer without one
//! stands for.

use std::fmt::Write as _;

use http::{HeaderMap, HeaderName, HeaderValue};
use tonic::Code;

/// The gRPC content type.
pub const CONTENT_TYPE: &str = "application/grpc";

// Header names as constants: inserting a name given as a `&str` that is
// not one of HTTP's own allocates a copy of it, on every call.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
pub const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");
pub const GRPC_ACCEPT_ENCODING: HeaderName = HeaderName::from_static("grpc-accept-encoding");

/// The `grpc-status` values, by code (0 to 16), made once.
const STATUS_VALUES: [&str; 17] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
];

/// A status as a peer sent it: its code and its message, percent-decoded.
/// Data, not an error: whether it is a failure is the caller's to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcStatus {
    pub code: Code,
    pub message: String,
}

/// Why a header block of a peer's answer could be read differently by
/// another gRPC implementation (grpc-go, grpcio's C core, grpc-java): an
/// answer like that is refused, never read one way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// A header that gRPC sends once, sent several times (implementations
    /// read the first, the last, or fail).
    #[error("{name} sent {count} times")]
    Repeated { name: &'static str, count: usize },
    /// A `grpc-status` that is not a plain decimal number: grpc-go reads
    /// `+0` or `00…0` as OK where grpc-java reads UNKNOWN.
    #[error("grpc-status {0:?} is not a plain decimal number")]
    StatusNotANumber(String),
    /// A `content-type` other than `application/grpc` or
    /// `application/grpc+…` / `application/grpc;…` (or none): gRPC
    /// clients refuse the answer whatever its status.
    #[error("content-type {0} is not application/grpc")]
    ContentType(String),
}

/// The value of `name` in `headers`, if any; sent more than once it is
/// [`AnswerError::Repeated`].
#[inline]
pub fn single<'h>(
    headers: &'h HeaderMap,
    name: &'static str,
) -> Result<Option<&'h HeaderValue>, AnswerError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    match values.count() {
        0 => Ok(first),
        more => Err(AnswerError::Repeated {
            name,
            count: more + 1,
        }),
    }
}

/// Checks the headers of an answer as every gRPC client reads them: one
/// `content-type`, gRPC's (exactly `application/grpc`, or followed by `+`
/// or `;`, in lower case as grpc-go requires), and at most one
/// `grpc-encoding`.
pub fn check_answer_headers(headers: &HeaderMap) -> Result<(), AnswerError> {
    let shown = |v: &HeaderValue| format!("{:?}", String::from_utf8_lossy(v.as_bytes()));
    match single(headers, "content-type")? {
        None => return Err(AnswerError::ContentType("missing".into())),
        Some(v) => {
            let grpc = v.as_bytes().strip_prefix(CONTENT_TYPE.as_bytes());
            if !matches!(grpc, Some([] | [b'+' | b';', ..])) {
                return Err(AnswerError::ContentType(shown(v)));
            }
        }
    }
    single(headers, "grpc-encoding").map(drop)
}

/// The status carried by `grpc-status` / `grpc-message` in a header block,
/// if any. A number outside gRPC's codes is [`Code::Unknown`]. Read as
/// every gRPC implementation reads it or refused: each header at most once,
/// and the status a plain decimal number (`0`…`99`, no sign, space or
/// leading zero).
#[inline]
pub fn status_from_headers(headers: &HeaderMap) -> Result<Option<GrpcStatus>, AnswerError> {
    let Some(value) = single(headers, "grpc-status")? else {
        return Ok(None);
    };
    let digits = value.as_bytes();
    let code = match digits {
        [d @ b'0'..=b'9'] => i32::from(d - b'0'),
        [t @ b'1'..=b'9', u @ b'0'..=b'9'] => i32::from(t - b'0') * 10 + i32::from(u - b'0'),
        _ => {
            return Err(AnswerError::StatusNotANumber(
                String::from_utf8_lossy(digits).into_owned(),
            ));
        }
    };
    let message = single(headers, "grpc-message")?
        .and_then(|v| v.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default();
    Ok(Some(GrpcStatus {
        code: Code::from_i32(code),
        message,
    }))
}

/// Writes a status into trailers (or the headers of a trailers-only
/// answer); an empty message is not sent.
#[inline]
pub fn put_status(headers: &mut HeaderMap, code: Code, message: &str) {
    let value = STATUS_VALUES.get(code as usize).map_or_else(
        || HeaderValue::from(code as i32),
        |v| HeaderValue::from_static(v),
    );
    headers.insert(GRPC_STATUS, value);
    if !message.is_empty()
        && let Ok(v) = HeaderValue::from_str(&percent_encode(message))
    {
        headers.insert(GRPC_MESSAGE, v);
    }
}

/// The code for an HTTP answer that carries no gRPC status (a proxy's
/// error page, a server that is not gRPC), as gRPC's HTTP/2 specification
/// maps them.
pub fn code_for_http(status: http::StatusCode) -> Code {
    match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// Percent-encodes a `grpc-message`: every byte outside printable ASCII,
/// and `%` itself.
pub fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Decodes a percent-encoded `grpc-message`. A `%` not followed by two hex
/// digits is kept as it is, and bytes that do not make UTF-8 become U+FFFD:
/// a peer's malformed message is still shown, never refused.
pub fn percent_decode(message: &str) -> String {
    let bytes = message.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some(&[b'%', hi, lo]) => hex(hi).zip(hex(lo)).map(|(h, l)| h << 4 | l),
            _ => None,
        };
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of one hex digit.
fn hex(digit: u8) -> Option<u8> {
    char::from(digit).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_percent_encoded() {
        let m = "plugin \"a\": 100% down\nnext line ünïcode";
        let e = percent_encode(m);
        assert!(e.is_ascii() && !e.contains('\n'));
        assert_eq!(percent_decode(&e), m);
    }

    #[test]
    fn malformed_escapes_are_kept() {
        assert_eq!(percent_decode("50%"), "50%");
        assert_eq!(percent_decode("a%20b%"), "a b%");
        assert_eq!(percent_decode("%E2%9C%93 ok"), "✓ ok");
        assert_eq!(percent_decode("%4"), "%4");
        // A sign is not a hex digit, though `from_str_radix` takes one.
        assert_eq!(percent_decode("%+F"), "%+F");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
        assert_eq!(percent_decode("%é"), "%é");
        assert_eq!(percent_decode("%FF"), "\u{FFFD}");
    }

    #[test]
    fn a_status_round_trips_through_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(status_from_headers(&headers), Ok(None));
        put_status(&mut headers, Code::Unavailable, "down: 100%\n");
        assert_eq!(headers[GRPC_STATUS], "14");
        assert_eq!(headers[GRPC_MESSAGE], "down: 100%25%0A");
        assert_eq!(
            status_from_headers(&headers),
            Ok(Some(GrpcStatus {
                code: Code::Unavailable,
                message: "down: 100%\n".into()
            }))
        );
        let mut ok = HeaderMap::new();
        put_status(&mut ok, Code::Ok, "");
        assert!(!ok.contains_key(GRPC_MESSAGE));
        ok.insert(GRPC_STATUS, HeaderValue::from_static("99"));
        assert_eq!(
            status_from_headers(&ok).map(|s| s.map(|s| s.code)),
            Ok(Some(Code::Unknown))
        );
    }

    #[test]
    fn a_status_other_decoders_could_read_otherwise_is_refused() {
        for value in [
            "OK", " 0", "0 ", "+0", "-0", "00", "013", "100", "", "0x0", "0.0",
        ] {
            let mut headers = HeaderMap::new();
            headers.insert(GRPC_STATUS, HeaderValue::from_static(value));
            assert_eq!(
                status_from_headers(&headers),
                Err(AnswerError::StatusNotANumber(value.into())),
                "{value:?}"
            );
        }
        let mut twice = HeaderMap::new();
        twice.append(GRPC_STATUS, HeaderValue::from_static("0"));
        twice.append(GRPC_STATUS, HeaderValue::from_static("13"));
        assert_eq!(
            status_from_headers(&twice),
            Err(AnswerError::Repeated {
                name: "grpc-status",
                count: 2
            })
        );
        let mut messages = HeaderMap::new();
        messages.insert(GRPC_STATUS, HeaderValue::from_static("13"));
        messages.append(GRPC_MESSAGE, HeaderValue::from_static("a"));
        messages.append(GRPC_MESSAGE, HeaderValue::from_static("b"));
        assert!(status_from_headers(&messages).is_err());
    }

    #[test]
    fn only_grpc_content_types_are_answers() {
        let head = |values: &[&'static str]| {
            let mut headers = HeaderMap::new();
            for v in values {
                headers.append(http::header::CONTENT_TYPE, HeaderValue::from_static(v));
            }
            check_answer_headers(&headers)
        };
        for good in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc;charset=x",
        ] {
            assert_eq!(head(&[good]), Ok(()), "{good}");
        }
        for bad in [
            &[][..],
            &["text/html"],
            &["application/grpcx"],
            &["application/grpc-web"],
            &["Application/grpc"],
            &["application/json"],
            &["application/grpc", "application/grpc"],
        ] {
            assert!(head(bad).is_err(), "{bad:?}");
        }
        let mut encodings = HeaderMap::new();
        encodings.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(CONTENT_TYPE),
        );
        encodings.append(GRPC_ENCODING, HeaderValue::from_static("identity"));
        encodings.append(GRPC_ENCODING, HeaderValue::from_static("gzip"));
        assert!(check_answer_headers(&encodings).is_err());
    }

    #[test]
    fn http_errors_map_to_grpc_codes() {
        assert_eq!(
            code_for_http(http::StatusCode::SERVICE_UNAVAILABLE),
            Code::Unavailable
        );
        assert_eq!(
            code_for_http(http::StatusCode::NOT_FOUND),
            Code::Unimplemented
        );
        assert_eq!(code_for_http(http::StatusCode::IM_A_TEAPOT), Code::Unknown);
    }
}
