//! gRPC's wire format over HTTP/2, spoken by the gateway itself on both sides.
//!
//! The gateway is a proxy: it reads one length-prefixed message, routes it,
//! and writes one back. Doing the framing here, over the `h2` crate (instead
//! of tonic's streaming codecs over hyper's body pipes), lets a whole answer —
//! headers, data and trailers — be queued at once, so it leaves in one write
//! and wakes the peer once, and lets an over-large message be refused from
//! its 5-byte prefix before it is buffered.

// Why own framing over `h2` and not tonic: docs/decisions/0001-grpc-framing-on-h2.md.

use bytes::buf::Chain;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::HeaderMap;
use tonic::Status;

use super::pending::{CallBytes, PendingExceeded};

// The wire format's shared pieces, which the checker reads by too; named
// here so the gateway's code finds all of gRPC's wire format in one module.
pub(crate) use rollout_wire::check_answer_headers;
pub use rollout_wire::{
    AnswerError, CONTENT_TYPE, FrameError, GRPC_ACCEPT_ENCODING, GRPC_ENCODING, GRPC_MESSAGE,
    GRPC_STATUS, GRPC_TIMEOUT, encode_timeout, message, message_len, parse_timeout, percent_decode,
    percent_encode, put_status,
};

/// The compressed encodings the gateway reads in a plugin's answer, as sent
/// in `grpc-accept-encoding`.
pub(crate) const ACCEPT_ENCODING: &str = "gzip,deflate";

/// A framed message as handed to HTTP/2: up to four parts, small encoded
/// heads and large pieces shared with the request they came from (written
/// with `writev`, never copied). Most messages use the first part only.
pub(crate) type Payload = Chain<Chain<Bytes, Bytes>, Chain<Bytes, Bytes>>;

fn payload(a: Bytes, b: Bytes, c: Bytes, d: Bytes) -> Payload {
    a.chain(b).chain(c.chain(d))
}

/// Encodes a message with its 5-byte prefix (uncompressed), in one allocation.
pub fn encode<M: prost::Message>(message: &M) -> Payload {
    encode_with_tail(message, 0, Bytes::new())
}

/// Bytes that are already framed (another encoder's output), as a payload.
pub(crate) fn raw(framed: Bytes) -> Payload {
    payload(framed, Bytes::new(), Bytes::new(), Bytes::new())
}

/// Frames an already encoded message: the prefix, then `message` itself,
/// not copied.
pub(crate) fn frame(message: Bytes) -> Payload {
    let prefix = Bytes::copy_from_slice(&rollout_wire::prefix(message.len()));
    payload(prefix, message, Bytes::new(), Bytes::new())
}

/// Frames a `MutateManifestWorkRequest` from its parts: `rollout` (field 1,
/// an encoded `RolloutPluginRequest`, sent only when present) and the
/// ManifestWork (field 2, sent only when not empty), neither copied. The
/// bytes are those of the full message encoded by prost.
pub(crate) fn frame_mutate(rollout: Option<Bytes>, manifest_work: Bytes) -> Payload {
    frame_shared(&(), [(1, rollout), (2, non_empty(manifest_work))])
}

/// Why a plugin's answer could not be taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unreadable {
    /// Over the message limit, as its prefix says or once decompressed.
    TooLarge(OverLimit),
    /// Not a readable gRPC message.
    Invalid(String),
}

/// A message over the message limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverLimit {
    /// Its 5-byte prefix declares more bytes than the limit.
    #[error("message of {len} bytes is larger than the limit of {limit} bytes")]
    Declared { len: usize, limit: usize },
    /// It is compressed, and inflates past the limit.
    #[error("message larger than the limit of {limit} bytes once decompressed")]
    Inflated { limit: usize },
}

impl OverLimit {
    /// The limit a framing error says a message is over, if that is the
    /// error.
    pub(crate) fn of_frame(e: &FrameError) -> Option<OverLimit> {
        match *e {
            FrameError::TooLarge { len, limit } => Some(OverLimit::Declared { len, limit }),
            _ => None,
        }
    }
}

/// How an answer's messages are compressed, by its `grpc-encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Identity,
    Gzip,
    Deflate,
}

impl Codec {
    /// The codec of `grpc-encoding` (absent: identity). One the gateway did
    /// not offer is refused even on an uncompressed message: grpc-java
    /// fails such an answer where grpc-go reads it.
    fn of(encoding: Option<&str>) -> Result<Codec, Unreadable> {
        match encoding {
            None | Some("identity") => Ok(Codec::Identity),
            Some("gzip") => Ok(Codec::Gzip),
            Some("deflate") => Ok(Codec::Deflate),
            Some(other) => Err(Unreadable::Invalid(format!(
                "answer sent with grpc-encoding \"{other}\", which the gateway does not accept ({ACCEPT_ENCODING})"
            ))),
        }
    }
}

/// The message of a whole unary answer, without its 5-byte prefix,
/// decompressed when its flag says so with the answer's `grpc-encoding`
/// (`gzip` or `deflate`), and at most `limit` bytes once decompressed.
///
/// A compressed message must be exactly one gzip member or zlib stream:
/// anything after its end (a second gzip member, which grpc-go's reader
/// reads on and protobuf merges, or stray bytes, which decoders read or
/// refuse) is refused, so no decoder could take another message from it.
pub(crate) fn uncompressed(
    mut body: Bytes,
    encoding: Option<&str>,
    limit: usize,
) -> Result<Bytes, Unreadable> {
    let codec = Codec::of(encoding)?;
    let len = rollout_wire::frame_len(&body, limit).map_err(|e| match OverLimit::of_frame(&e) {
        Some(over) => Unreadable::TooLarge(over),
        None => Unreadable::Invalid(e.to_string()),
    })?;
    let compressed = body[0] == 1;
    body.advance(rollout_wire::PREFIX_LEN);
    if body.len() != len {
        return Err(Unreadable::Invalid(format!(
            "gRPC message length {len} does not match the {} bytes received",
            body.len()
        )));
    }
    if !compressed {
        return Ok(body);
    }
    match codec {
        Codec::Gzip => inflate(flate2::bufread::GzDecoder::new(&body[..]), "gzip", limit),
        Codec::Deflate => inflate(
            flate2::bufread::ZlibDecoder::new(&body[..]),
            "deflate",
            limit,
        ),
        Codec::Identity => Err(Unreadable::Invalid(
            "message flagged compressed without a grpc-encoding".into(),
        )),
    }
}

/// A decoder over a message's bytes: what it reads, and the bytes it left
/// unread once its stream ended.
trait Inflater<'a>: std::io::Read {
    fn rest(self) -> &'a [u8];
}

impl<'a> Inflater<'a> for flate2::bufread::GzDecoder<&'a [u8]> {
    fn rest(self) -> &'a [u8] {
        self.into_inner()
    }
}

impl<'a> Inflater<'a> for flate2::bufread::ZlibDecoder<&'a [u8]> {
    fn rest(self) -> &'a [u8] {
        self.into_inner()
    }
}

/// Reads one compressed stream whole, within `limit`, refusing bytes after
/// its end.
fn inflate<'a>(
    mut decoder: impl Inflater<'a>,
    name: &str,
    limit: usize,
) -> Result<Bytes, Unreadable> {
    let mut out = Vec::new();
    // One byte over the limit is enough to know it is over: a small
    // answer that inflates without end is never held whole.
    let mut bounded = std::io::Read::take(&mut decoder, limit as u64 + 1);
    std::io::Read::read_to_end(&mut bounded, &mut out)
        .map_err(|e| Unreadable::Invalid(format!("cannot decompress the {name} message: {e}")))?;
    if out.len() > limit {
        return Err(Unreadable::TooLarge(OverLimit::Inflated { limit }));
    }
    match decoder.rest().len() {
        0 => Ok(Bytes::from(out)),
        rest => Err(Unreadable::Invalid(format!(
            "{rest} bytes after the end of the {name} stream (another member or stray bytes, which decoders read differently)"
        ))),
    }
}

/// Decodes a message (without its prefix) as `M`.
pub(crate) fn decode_message<M: prost::Message + Default>(message: Bytes) -> Result<M, FrameError> {
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
    let mut buf = BytesMut::with_capacity(rollout_wire::PREFIX_LEN + head_len + heads_len);
    buf.put_slice(&rollout_wire::prefix(head_len + heads_len + bodies_len));
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

/// Decodes one length-prefixed message from a whole unary body. `Bytes`
/// fields of the message share `body`'s memory.
pub fn decode<M: prost::Message + Default>(body: Bytes, limit: usize) -> Result<M, FrameError> {
    decode_message(message(body, limit)?)
}

/// [`rollout_wire::collect`]: a unary body read within `limit`.
pub async fn collect(
    body: &mut h2::RecvStream,
    limit: usize,
) -> Result<(Bytes, Option<HeaderMap>), ReceiveError> {
    rollout_wire::collect_held(body, limit, |_| Ok(())).await
}

/// [`collect`], with the bytes buffered held in the call's `held`: the
/// message is refused with [`ReceiveError::Held`] as soon as they cannot
/// grow. A whole message stays held (it lives on while the call runs); a
/// failed one is given back.
pub(crate) async fn collect_reserved(
    body: &mut h2::RecvStream,
    limit: usize,
    held: &CallBytes,
) -> Result<(Bytes, Option<HeaderMap>), ReceiveError> {
    let collected = rollout_wire::collect_held(body, limit, |bytes| held.hold(bytes)).await;
    if collected.is_err() {
        let _ = held.hold(0);
    }
    collected
}

/// [`collect`], the message counted in a new part of the call's `held`
/// (none: not counted) for as long as its buffer lives: a plugin's answer,
/// read for the call. Refused with [`ReceiveError::Held`] as soon as the
/// bytes buffered cannot grow; a failed read holds nothing.
pub(crate) async fn collect_counted(
    body: &mut h2::RecvStream,
    limit: usize,
    held: Option<&CallBytes>,
) -> Result<(Bytes, Option<HeaderMap>), ReceiveError> {
    let Some(held) = held else {
        return collect(body, limit).await;
    };
    let mut part = held.part();
    let (message, trailers) =
        rollout_wire::collect_held(body, limit, |bytes| part.hold(bytes)).await?;
    Ok((part.counted(message), trailers))
}

/// `payload`, each of its parts passed through `f`.
pub(crate) fn try_map_parts<E>(
    payload: Payload,
    mut f: impl FnMut(Bytes) -> Result<Bytes, E>,
) -> Result<Payload, E> {
    let (heads, tails) = payload.into_inner();
    let (a, b) = heads.into_inner();
    let (c, d) = tails.into_inner();
    Ok(self::payload(f(a)?, f(b)?, f(c)?, f(d)?))
}

/// Why a message body could not be received: malformed or too large, the
/// stream failed, or holding its bytes was refused.
pub(crate) type ReceiveError = rollout_wire::ReceiveError<PendingExceeded>;

/// The status a plugin sent in a header block, if any, as data to pass on;
/// refused where gRPC implementations could read it differently
/// ([`rollout_wire::status_from_headers`]).
pub(crate) fn status_from_headers(headers: &HeaderMap) -> Result<Option<Status>, AnswerError> {
    Ok(rollout_wire::status_from_headers(headers)?.map(|s| Status::new(s.code, s.message)))
}

/// The gRPC status for an HTTP answer that carries none (a proxy's error
/// page, a non-gRPC server), as the gRPC HTTP/2 spec maps them.
pub(crate) fn status_from_http(status: http::StatusCode) -> Status {
    Status::new(
        rollout_wire::code_for_http(status),
        format!("answered HTTP {status} without a gRPC status"),
    )
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
    fn decoding_checks_the_prefix() {
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
    fn http_errors_map_to_grpc_codes() {
        use tonic::Code;
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
