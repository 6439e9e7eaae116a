//! gRPC's wire format over HTTP/2, spoken by the gateway itself on both sides.
//!
//! The gateway is a proxy: it reads one length-prefixed message, routes it,
//! and writes one back. Doing the framing here, over the `h2` crate (instead
//! of tonic's streaming codecs over hyper's body pipes), lets a whole answer —
//! headers, data and trailers — be queued at once, so it leaves in one write
//! and wakes the peer once, and lets an over-large message be refused from
//! its 5-byte prefix before it is buffered.

// Why own framing over `h2` and not tonic: docs/decisions/0001-grpc-framing-on-h2.md.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::buf::Chain;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};
use tonic::{Code, Status};

use super::pending::{PendingExceeded, Reservation};

/// The gRPC content type.
pub const CONTENT_TYPE: &str = "application/grpc";

// Header names as constants: inserting a name given as a `&str` that is
// not one of HTTP's own allocates a copy of it, on every call.
pub const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
pub const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
pub const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");
pub const GRPC_ACCEPT_ENCODING: HeaderName = HeaderName::from_static("grpc-accept-encoding");

/// The `grpc-status` values, by code (0 to 16), made once.
const STATUS_VALUES: [&str; 17] = [
    "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13", "14", "15", "16",
];

/// The compressed encodings the gateway reads in a plugin's answer, as sent
/// in `grpc-accept-encoding`.
pub const ACCEPT_ENCODING: &str = "gzip,deflate";

/// A framed message as handed to HTTP/2: up to four parts, small encoded
/// heads and large pieces shared with the request they came from (written
/// with `writev`, never copied). Most messages use the first part only.
pub type Payload = Chain<Chain<Bytes, Bytes>, Chain<Bytes, Bytes>>;

fn payload(a: Bytes, b: Bytes, c: Bytes, d: Bytes) -> Payload {
    a.chain(b).chain(c.chain(d))
}

/// Encodes a message with its 5-byte prefix (uncompressed), in one allocation.
pub fn encode<M: prost::Message>(message: &M) -> Payload {
    encode_with_tail(message, 0, Bytes::new())
}

/// Bytes that are already framed (another encoder's output), as a payload.
pub fn raw(framed: Bytes) -> Payload {
    payload(framed, Bytes::new(), Bytes::new(), Bytes::new())
}

/// Frames an already encoded message: the prefix, then `message` itself,
/// not copied.
pub fn frame(message: Bytes) -> Payload {
    let mut prefix = BytesMut::with_capacity(5);
    prefix.put_u8(0);
    prefix.put_u32(message.len() as u32);
    payload(prefix.freeze(), message, Bytes::new(), Bytes::new())
}

/// Frames a `MutateManifestWorkRequest` from its parts: `rollout` (field 1,
/// an encoded `RolloutPluginRequest`, sent only when present) and the
/// ManifestWork (field 2, sent only when not empty), neither copied. The
/// bytes are those of the full message encoded by prost.
pub fn frame_mutate(rollout: Option<Bytes>, manifest_work: Bytes) -> Payload {
    frame_shared(&(), [(1, rollout), (2, non_empty(manifest_work))])
}

/// The message of a whole unary body, without its 5-byte prefix, after
/// checking the prefix (compression flag, limit, length).
pub fn message(mut body: Bytes, limit: usize) -> Result<Bytes, FrameError> {
    let len = message_len(&body, limit)?;
    body.advance(5);
    if body.len() != len {
        return Err(FrameError::LengthMismatch {
            declared: len,
            received: body.len(),
        });
    }
    Ok(body)
}

/// Why bytes are not one well-formed gRPC message (or its protobuf).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("truncated gRPC message prefix")]
    TruncatedPrefix,
    #[error("invalid gRPC compression flag {0}")]
    InvalidFlag(u8),
    #[error("compressed messages are not supported (send grpc-encoding identity)")]
    Compressed,
    #[error("message of {len} bytes is larger than the limit of {limit} bytes")]
    TooLarge { len: usize, limit: usize },
    #[error("gRPC message length {declared} does not match the {received} bytes received")]
    LengthMismatch { declared: usize, received: usize },
    #[error("more than one message on a unary call")]
    SeveralMessages,
    #[error("cannot decode message: {0}")]
    Decode(#[from] prost::DecodeError),
}

/// Why a plugin's answer could not be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// Over the message limit once decompressed.
    TooLarge(String),
    /// Not a readable gRPC message.
    Invalid(String),
}

/// The message of a whole unary answer, without its 5-byte prefix,
/// decompressed when its flag says so with the answer's `grpc-encoding`
/// (`gzip` or `deflate`), and at most `limit` bytes once decompressed.
pub fn uncompressed(
    mut body: Bytes,
    encoding: Option<&str>,
    limit: usize,
) -> Result<Bytes, Unreadable> {
    let len = frame_len(&body, limit).map_err(|e| match e {
        FrameError::TooLarge { .. } => Unreadable::TooLarge(e.to_string()),
        _ => Unreadable::Invalid(e.to_string()),
    })?;
    let compressed = body[0] == 1;
    body.advance(5);
    if body.len() != len {
        return Err(Unreadable::Invalid(format!(
            "gRPC message length {len} does not match the {} bytes received",
            body.len()
        )));
    }
    if !compressed {
        return Ok(body);
    }
    let read = |reader: &mut dyn std::io::Read, name: &str| {
        let mut out = Vec::new();
        // One byte over the limit is enough to know it is over: a small
        // answer that inflates without end is never held whole.
        let mut bounded = std::io::Read::take(reader, limit as u64 + 1);
        std::io::Read::read_to_end(&mut bounded, &mut out).map_err(|e| {
            Unreadable::Invalid(format!("cannot decompress the {name} message: {e}"))
        })?;
        if out.len() > limit {
            return Err(Unreadable::TooLarge(format!(
                "message larger than the limit of {limit} bytes once decompressed"
            )));
        }
        Ok(Bytes::from(out))
    };
    match encoding {
        Some("gzip") => read(&mut flate2::read::GzDecoder::new(&body[..]), "gzip"),
        Some("deflate") => read(&mut flate2::read::ZlibDecoder::new(&body[..]), "deflate"),
        None | Some("identity") => Err(Unreadable::Invalid(
            "message flagged compressed without a grpc-encoding".into(),
        )),
        Some(other) => Err(Unreadable::Invalid(format!(
            "message compressed with unsupported grpc-encoding \"{other}\""
        ))),
    }
}

/// Decodes a message (without its prefix) as `M`.
pub fn decode_message<M: prost::Message + Default>(message: Bytes) -> Result<M, FrameError> {
    Ok(M::decode(message)?)
}

/// Encodes `head` followed by a length-delimited field number `tag` holding
/// `tail`, without copying `tail`. For a message whose last field is the
/// ManifestWork, `head` is the message with that field empty: the result is
/// the same bytes as encoding the whole message.
pub fn encode_with_tail<M: prost::Message>(head: &M, tag: u32, tail: Bytes) -> Payload {
    frame_shared(head, [(0, None), (tag, non_empty(tail))])
}

/// A `bytes` field's body as proto3 sends it: not at all when empty.
fn non_empty(body: Bytes) -> Option<Bytes> {
    (!body.is_empty()).then_some(body)
}

/// Frames `head`, encoded here, followed by up to two length-delimited
/// fields `(number, body)` whose bodies are shared, not copied (an absent
/// body is not sent). When `head` is a message without those fields and they
/// are its last ones, the bytes are those of the whole message encoded by
/// prost.
fn frame_shared<M: prost::Message>(head: &M, fields: [(u32, Option<Bytes>); 2]) -> Payload {
    use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
    let field_head = |tag: u32, body: &Bytes| key_len(tag) + encoded_len_varint(body.len() as u64);
    let head_len = head.encoded_len();
    let (heads_len, bodies_len) = fields
        .iter()
        .filter_map(|(tag, body)| body.as_ref().map(|b| (field_head(*tag, b), b.len())))
        .fold((0, 0), |(h, b), (fh, fb)| (h + fh, b + fb));
    let mut buf = BytesMut::with_capacity(5 + head_len + heads_len);
    buf.put_u8(0);
    buf.put_u32((head_len + heads_len + bodies_len) as u32);
    // Encoding into a buffer of the exact size cannot fail.
    let _ = head.encode(&mut buf);
    let [(first_tag, first), (second_tag, second)] = fields;
    if let Some(body) = &first {
        encode_key(first_tag, WireType::LengthDelimited, &mut buf);
        encode_varint(body.len() as u64, &mut buf);
    }
    let before_first = buf.split().freeze();
    if let Some(body) = &second {
        encode_key(second_tag, WireType::LengthDelimited, &mut buf);
        encode_varint(body.len() as u64, &mut buf);
    }
    payload(
        before_first,
        first.unwrap_or_default(),
        buf.freeze(),
        second.unwrap_or_default(),
    )
}

/// The whole of a payload as one `Bytes` (copies when it has several parts).
pub fn flatten(mut payload: Payload) -> Bytes {
    payload.copy_to_bytes(payload.remaining())
}

/// Reads the 5-byte prefix: the message length, after checking the
/// compression flag (the gateway's callers must not compress) and the limit.
pub fn message_len(prefix: &[u8], limit: usize) -> Result<usize, FrameError> {
    if prefix.first() == Some(&1) {
        return Err(FrameError::Compressed);
    }
    frame_len(prefix, limit)
}

/// Reads the 5-byte prefix: the message length, after checking that the
/// compression flag is 0 or 1 and the limit.
fn frame_len(prefix: &[u8], limit: usize) -> Result<usize, FrameError> {
    if prefix.len() < 5 {
        return Err(FrameError::TruncatedPrefix);
    }
    match prefix[0] {
        0 | 1 => {}
        f => return Err(FrameError::InvalidFlag(f)),
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len > limit {
        return Err(FrameError::TooLarge { len, limit });
    }
    Ok(len)
}

/// Decodes one length-prefixed message from a whole unary body. `Bytes`
/// fields of the message share `body`'s memory.
pub fn decode<M: prost::Message + Default>(body: Bytes, limit: usize) -> Result<M, FrameError> {
    decode_message(message(body, limit)?)
}

/// Reads a unary message body from an HTTP/2 stream, giving the flow-control
/// window back as it goes, and refusing the message as soon as its prefix says
/// it is over `limit` (so an over-large message is never buffered whole).
/// Returns the framed message and the trailers, if any.
pub async fn collect(
    body: &mut h2::RecvStream,
    limit: usize,
) -> Result<(Bytes, Option<HeaderMap>), ReceiveError> {
    collect_held(body, limit, |_| Ok(())).await
}

/// [`collect`], with the bytes buffered while the message is incomplete held
/// in `reservation` (given back when this returns): the message is refused
/// with [`ReceiveError::Held`] as soon as the reservation cannot grow.
pub async fn collect_reserved(
    body: &mut h2::RecvStream,
    limit: usize,
    reservation: &mut Reservation,
) -> Result<(Bytes, Option<HeaderMap>), ReceiveError> {
    let collected = collect_held(body, limit, |bytes| reservation.hold(bytes)).await;
    // Whole or failed, the request is no longer arriving.
    let _ = reservation.hold(0);
    collected
}

/// Why a message body could not be received.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    /// The message is malformed or too large.
    #[error("{0}")]
    Frame(#[from] FrameError),
    /// The HTTP/2 stream failed (reset by the peer, or a stream error such
    /// as a `content-length` that its DATA contradicts).
    #[error("reading the {part}: {source}")]
    Stream {
        part: &'static str,
        #[source]
        source: h2::Error,
    },
    /// Holding the bytes received so far was refused.
    #[error("{0}")]
    Held(#[from] PendingExceeded),
}

/// The buffer of a message whose first piece is shorter than its 5-byte
/// prefix (its size is not known yet).
const FIRST_BUFFER: usize = 16 * 1024;

/// The core of [`collect`]: `hold(n)` is asked before the buffered bytes
/// (counted by capacity, what the allocator holds) grow to `n`, and may
/// refuse.
async fn collect_held(
    body: &mut h2::RecvStream,
    limit: usize,
    mut hold: impl FnMut(usize) -> Result<(), PendingExceeded>,
) -> Result<(Bytes, Option<HeaderMap>), ReceiveError> {
    let framing = ReceiveError::Frame;
    let mut first: Option<Bytes> = None;
    let mut buf: Option<BytesMut> = None;
    let mut expected: Option<usize> = None;
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|source| ReceiveError::Stream {
            part: "message",
            source,
        })?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if chunk.is_empty() {
            continue;
        }
        // The common case: the whole message in one frame, kept without a copy.
        match (&mut first, &mut buf) {
            (None, None) => {
                let declared = if chunk.len() >= 5 {
                    Some(frame_len(&chunk, limit).map_err(framing)?)
                } else {
                    None
                };
                if declared.is_some_and(|e| chunk.len() >= e + 5) {
                    hold(chunk.len()).map_err(ReceiveError::Held)?;
                    first = Some(chunk);
                } else {
                    // Part of a message: copied, since the chunk shares the
                    // connection's read buffer, which keeping it would pin.
                    let capacity = capacity_for(chunk.len(), declared);
                    hold(capacity).map_err(ReceiveError::Held)?;
                    let mut b = BytesMut::with_capacity(capacity);
                    b.extend_from_slice(&chunk);
                    buf = Some(b);
                }
            }
            (Some(f), None) => {
                let len = f.len() + chunk.len();
                let capacity = capacity_for(len, expected);
                hold(capacity).map_err(ReceiveError::Held)?;
                let mut b = BytesMut::with_capacity(capacity);
                b.extend_from_slice(f);
                b.extend_from_slice(&chunk);
                first = None;
                buf = Some(b);
            }
            (_, Some(b)) => {
                let len = b.len() + chunk.len();
                if len > b.capacity() {
                    // Grow ahead of time, so the held count is what is
                    // allocated: to the whole message once its size is known
                    // (a first piece shorter than the prefix is the only way
                    // to grow twice).
                    let capacity = capacity_for(len, expected);
                    // While it moves, the old buffer and the new one both exist.
                    hold(b.capacity() + capacity).map_err(ReceiveError::Held)?;
                    b.reserve(capacity - b.len());
                    hold(b.capacity()).map_err(ReceiveError::Held)?;
                }
                b.extend_from_slice(&chunk);
            }
        }
        let seen: &[u8] = match (&first, &buf) {
            (Some(f), _) => f,
            (_, Some(b)) => b,
            _ => &[],
        };
        if expected.is_none() && seen.len() >= 5 {
            expected = Some(frame_len(seen, limit).map_err(framing)?);
        }
        if let Some(e) = expected
            && seen.len() > e + 5
        {
            return Err(framing(FrameError::SeveralMessages));
        }
    }
    let trailers = body
        .trailers()
        .await
        .map_err(|source| ReceiveError::Stream {
            part: "trailers",
            source,
        })?;
    let data = match (first, buf) {
        (Some(f), _) => f,
        (_, Some(b)) => b.freeze(),
        _ => Bytes::new(),
    };
    Ok((data, trailers))
}

/// The capacity of the buffer for a message that arrives in pieces, `len`
/// bytes so far: the whole message once its prefix is known (one allocation,
/// no copies as it grows; pages are only made resident as bytes arrive),
/// else room for the prefix to arrive.
fn capacity_for(len: usize, expected: Option<usize>) -> usize {
    match expected {
        Some(e) => (e + 5).max(len),
        None => FIRST_BUFFER.max(2 * len),
    }
}

/// The status carried by `grpc-status` / `grpc-message` in a header map, if any.
pub fn status_from_headers(headers: &HeaderMap) -> Option<Status> {
    let code = headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .trim()
        .parse::<i32>()
        .ok()?;
    let message = headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(percent_decode)
        .unwrap_or_default();
    Some(Status::new(Code::from_i32(code), message))
}

/// Writes a status into trailers (or the headers of a trailers-only answer).
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

/// The gRPC status for an HTTP answer that carries none (a proxy's error
/// page, a non-gRPC server), as the gRPC HTTP/2 spec maps them.
pub fn status_from_http(status: http::StatusCode) -> Status {
    let code = match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(
        code,
        format!("answered HTTP {status} without a gRPC status"),
    )
}

/// `grpc-timeout`: at most 8 digits and a unit.
pub fn encode_timeout(d: Duration) -> HeaderValue {
    let micros = d.as_micros();
    let value = if micros < 100_000_000 {
        format!("{}u", micros.max(1))
    } else if d.as_millis() < 100_000_000 {
        format!("{}m", d.as_millis())
    } else {
        format!("{}S", d.as_secs().min(99_999_999))
    };
    // The string becomes the value's bytes without a copy.
    HeaderValue::from_maybe_shared(Bytes::from(value)).unwrap_or(HeaderValue::from_static("30S"))
}

/// Parses a `grpc-timeout` value: up to 8 digits and a unit (H, M, S, m, u, n).
pub fn parse_timeout(value: &str) -> Option<Duration> {
    // ASCII only: the unit is the last byte, and splitting before it must
    // not cut a multi-byte character.
    if value.len() < 2 || value.len() > 9 || !value.is_ascii() {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Percent-encodes a grpc-message (everything outside printable ASCII, and `%`).
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

/// Decodes a percent-encoded grpc-message; malformed escapes are kept as they are.
pub fn percent_decode(message: &str) -> String {
    let bytes = message.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(
                std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                16,
            )
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rollout_proto::v1alpha1::MutateManifestWorkResponse;

    #[test]
    fn messages_round_trip_and_share_memory() {
        let m = MutateManifestWorkResponse {
            manifest_work: Bytes::from(vec![7u8; 1000]),
        };
        let wire = flatten(encode(&m));
        assert_eq!(wire[0], 0);
        assert_eq!(
            u32::from_be_bytes([wire[1], wire[2], wire[3], wire[4]]) as usize,
            wire.len() - 5
        );
        let back: MutateManifestWorkResponse = decode(wire.clone(), 1 << 20).expect("decodes");
        assert_eq!(back, m);
        let inside = wire.as_ptr() as usize..wire.as_ptr() as usize + wire.len();
        assert!(
            inside.contains(&(back.manifest_work.as_ptr() as usize)),
            "decoded without a copy"
        );
    }

    #[test]
    fn a_tail_encodes_as_the_whole_message_would() {
        use rollout_proto::v1alpha1::{MutateManifestWorkRequest, RolloutPluginRequest};
        let work = Bytes::from(vec![b'x'; 70_000]);
        let rollout = Some(RolloutPluginRequest {
            cluster_name: "cluster-007".into(),
            cluster_index: 7,
            ..Default::default()
        });
        let whole = MutateManifestWorkRequest {
            rollout: rollout.clone(),
            manifest_work: work.clone(),
        };
        let head = MutateManifestWorkRequest {
            rollout,
            manifest_work: Bytes::new(),
        };
        let split = encode_with_tail(&head, 2, work.clone());
        assert_eq!(
            split.last_ref().last_ref().as_ptr(),
            work.as_ptr(),
            "the tail is shared, not copied"
        );
        assert_eq!(flatten(split), flatten(encode(&whole)));
        let response = MutateManifestWorkResponse {
            manifest_work: work.clone(),
        };
        assert_eq!(
            flatten(encode_with_tail(
                &MutateManifestWorkResponse::default(),
                1,
                work
            )),
            flatten(encode(&response))
        );
    }

    #[test]
    fn framed_parts_are_the_whole_message_and_are_not_copied() {
        use prost::Message as _;
        use rollout_proto::v1alpha1::{MutateManifestWorkRequest, RolloutPluginRequest};
        let request = RolloutPluginRequest {
            cluster_name: "cluster-007".into(),
            cluster_index: 7,
            ..Default::default()
        };
        let encoded = Bytes::from(request.encode_to_vec());
        let framed = frame(encoded.clone());
        assert_eq!(framed.first_ref().last_ref().as_ptr(), encoded.as_ptr());
        assert_eq!(flatten(framed), flatten(encode(&request)));

        let work = Bytes::from(vec![b'x'; 70_000]);
        for rollout in [None, Some(RolloutPluginRequest::default()), Some(request)] {
            for manifest_work in [Bytes::new(), work.clone()] {
                let whole = MutateManifestWorkRequest {
                    rollout: rollout.clone(),
                    manifest_work: manifest_work.clone(),
                };
                let rollout_bytes = rollout.as_ref().map(|r| Bytes::from(r.encode_to_vec()));
                let parts = frame_mutate(rollout_bytes.clone(), manifest_work.clone());
                if let Some(r) = rollout_bytes.filter(|r| !r.is_empty()) {
                    assert_eq!(parts.first_ref().last_ref().as_ptr(), r.as_ptr());
                }
                if !manifest_work.is_empty() {
                    assert_eq!(parts.last_ref().last_ref().as_ptr(), manifest_work.as_ptr());
                }
                assert_eq!(
                    flatten(parts),
                    flatten(encode(&whole)),
                    "{:?}, {} bytes of work",
                    whole.rollout,
                    manifest_work.len()
                );
            }
        }
    }

    #[test]
    fn prefixes_are_checked() {
        assert_eq!(message_len(&[0, 0, 0, 0, 10], 10), Ok(10));
        assert_eq!(
            message_len(&[0, 0, 0, 0, 11], 10),
            Err(FrameError::TooLarge { len: 11, limit: 10 })
        );
        assert_eq!(
            message_len(&[1, 0, 0, 0, 1], 10),
            Err(FrameError::Compressed)
        );
        assert_eq!(message_len(&[0, 0], 10), Err(FrameError::TruncatedPrefix));
        assert_eq!(
            message_len(&[2, 0, 0, 0, 1], 10),
            Err(FrameError::InvalidFlag(2))
        );
        let wrong_len = Bytes::from_static(&[0, 0, 0, 0, 3, 1]);
        assert_eq!(
            decode::<MutateManifestWorkResponse>(wrong_len, 10).expect_err("len"),
            FrameError::LengthMismatch {
                declared: 3,
                received: 1
            }
        );
    }

    #[test]
    fn compressed_answers_are_read_with_their_encoding() {
        use std::io::Write as _;
        let framed = |flag: u8, message: &[u8]| {
            let mut b = vec![flag];
            b.extend_from_slice(&(message.len() as u32).to_be_bytes());
            b.extend_from_slice(message);
            Bytes::from(b)
        };
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"hello").expect("gzip");
        let gzipped = gz.finish().expect("gzip");
        assert_eq!(
            uncompressed(framed(1, &gzipped), Some("gzip"), 100).expect("gzip"),
            Bytes::from_static(b"hello")
        );
        assert_eq!(
            uncompressed(framed(0, b"hello"), Some("gzip"), 10).expect("flag 0"),
            Bytes::from_static(b"hello")
        );
        for encoding in [None, Some("identity"), Some("snappy")] {
            assert!(matches!(
                uncompressed(framed(1, b"hello"), encoding, 10),
                Err(Unreadable::Invalid(_))
            ));
        }
        assert!(matches!(
            uncompressed(framed(1, b"not gzip"), Some("gzip"), 10),
            Err(Unreadable::Invalid(_))
        ));
        // Inflating past the limit is refused, whatever the compressed size.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&[0; 100_000]).expect("gzip");
        let bomb = gz.finish().expect("gzip");
        assert!(matches!(
            uncompressed(framed(1, &bomb), Some("gzip"), 1_000),
            Err(Unreadable::TooLarge(_))
        ));
    }

    #[test]
    fn timeouts_round_trip() {
        for d in [
            Duration::from_micros(1),
            Duration::from_millis(300),
            Duration::from_secs(30),
            Duration::from_secs(3600 * 24),
        ] {
            let v = encode_timeout(d);
            let back = parse_timeout(v.to_str().expect("ascii")).expect("parses");
            assert!(
                back <= d && d - back < Duration::from_secs(1),
                "{d:?} -> {v:?} -> {back:?}"
            );
        }
        assert_eq!(parse_timeout("300m"), Some(Duration::from_millis(300)));
        assert_eq!(parse_timeout("123456789m"), None);
        assert_eq!(parse_timeout("10x"), None);
    }

    #[test]
    fn messages_are_percent_encoded() {
        let m = "plugin \"a\": 100% down\nnext line ünïcode";
        let e = percent_encode(m);
        assert!(e.is_ascii() && !e.contains('\n'));
        assert_eq!(percent_decode(&e), m);
        assert_eq!(percent_decode("50%"), "50%");
    }

    #[test]
    fn http_errors_map_to_grpc_codes() {
        assert_eq!(
            status_from_http(http::StatusCode::SERVICE_UNAVAILABLE).code(),
            Code::Unavailable
        );
        assert_eq!(
            status_from_http(http::StatusCode::NOT_FOUND).code(),
            Code::Unimplemented
        );
    }
}
