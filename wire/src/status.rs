//! A call's outcome on the wire: `grpc-status` and its percent-encoded
//! `grpc-message`, in trailers or in the headers of a trailers-only answer;
//! and the status an HTTP answer without one stands for.

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

/// The status carried by `grpc-status` / `grpc-message` in a header block,
/// if any (`None` also for a `grpc-status` that is not a number). A number
/// outside gRPC's codes is [`Code::Unknown`].
#[inline]
pub fn status_from_headers(headers: &HeaderMap) -> Option<GrpcStatus> {
    let code = headers
        .get(GRPC_STATUS)?
        .to_str()
        .ok()?
        .trim()
        .parse::<i32>()
        .ok()?;
    let message = headers
        .get(GRPC_MESSAGE)
        .and_then(|v| v.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default();
    Some(GrpcStatus {
        code: Code::from_i32(code),
        message,
    })
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
        assert_eq!(status_from_headers(&headers), None);
        put_status(&mut headers, Code::Unavailable, "down: 100%\n");
        assert_eq!(headers[GRPC_STATUS], "14");
        assert_eq!(headers[GRPC_MESSAGE], "down: 100%25%0A");
        assert_eq!(
            status_from_headers(&headers),
            Some(GrpcStatus {
                code: Code::Unavailable,
                message: "down: 100%\n".into()
            })
        );
        let mut ok = HeaderMap::new();
        put_status(&mut ok, Code::Ok, "");
        assert!(!ok.contains_key(GRPC_MESSAGE));
        ok.insert(GRPC_STATUS, HeaderValue::from_static(" 99 "));
        assert_eq!(
            status_from_headers(&ok).map(|s| s.code),
            Some(Code::Unknown)
        );
        ok.insert(GRPC_STATUS, HeaderValue::from_static("OK"));
        assert_eq!(status_from_headers(&ok), None);
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
