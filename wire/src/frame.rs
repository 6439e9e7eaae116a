//! gRPC's length-prefixed messages: the 5-byte prefix (a compression flag
//! and a big-endian length) checked against a limit before anything is
//! buffered, and a unary body read from an HTTP/2 stream within that limit.

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;

/// The length of a message's prefix: one flag byte, four length bytes.
pub const PREFIX_LEN: usize = 5;

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

/// The prefix of an uncompressed message of `len` bytes (a length past
/// `u32::MAX`, which no limit allows, is written as `u32::MAX`).
#[inline]
pub fn prefix(len: usize) -> [u8; PREFIX_LEN] {
    let [a, b, c, d] = u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes();
    [0, a, b, c, d]
}

/// Reads the 5-byte prefix: the message length, after checking that the
/// compression flag is 0 or 1 and that the length is at most `limit`.
// `#[inline]` on this and the other per-call helpers: they were inlined
// when they lived in the gateway, and the release build has no LTO to do
// it across the crate boundary.
#[inline]
pub fn frame_len(prefix: &[u8], limit: usize) -> Result<usize, FrameError> {
    if prefix.len() < PREFIX_LEN {
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

/// [`frame_len`] for a peer that must not compress: a compressed flag is
/// refused with [`FrameError::Compressed`].
#[inline]
pub fn message_len(prefix: &[u8], limit: usize) -> Result<usize, FrameError> {
    if prefix.first() == Some(&1) {
        return Err(FrameError::Compressed);
    }
    frame_len(prefix, limit)
}

/// The message of a whole unary body, without its prefix, after checking
/// the prefix ([`message_len`]: uncompressed, within `limit`) and that the
/// body is exactly one message. Shares `body`'s memory.
#[inline]
pub fn message(mut body: Bytes, limit: usize) -> Result<Bytes, FrameError> {
    let len = message_len(&body, limit)?;
    body.advance(PREFIX_LEN);
    if body.len() != len {
        return Err(FrameError::LengthMismatch {
            declared: len,
            received: body.len(),
        });
    }
    Ok(body)
}

/// Why a message body could not be received; `E` is why holding its bytes
/// was refused (see [`collect_held`]).
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError<E = std::convert::Infallible> {
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
    Held(E),
}

/// Reads a unary message body from an HTTP/2 stream, giving the
/// flow-control window back as it goes, and refusing the message as soon as
/// its prefix says it is over `limit` (so an over-large message is never
/// buffered whole). Returns the framed message and the trailers, if any.
pub async fn collect(
    body: &mut h2::RecvStream,
    limit: usize,
) -> Result<(Bytes, Option<HeaderMap>), ReceiveError> {
    collect_held(body, limit, |_| Ok(())).await
}

/// [`collect`], asking `hold(n)` before the bytes buffered (counted by
/// capacity, what the allocator holds) grow to `n`; a refusal ends the
/// read with [`ReceiveError::Held`].
pub async fn collect_held<E>(
    body: &mut h2::RecvStream,
    limit: usize,
    mut hold: impl FnMut(usize) -> Result<(), E>,
) -> Result<(Bytes, Option<HeaderMap>), ReceiveError<E>> {
    let mut gathered = Gathered::new(limit);
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|source| ReceiveError::Stream {
            part: "message",
            source,
        })?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if !chunk.is_empty() {
            gathered.push(chunk, &mut hold)?;
        }
    }
    let trailers = body
        .trailers()
        .await
        .map_err(|source| ReceiveError::Stream {
            part: "trailers",
            source,
        })?;
    Ok((gathered.into_bytes(), trailers))
}

/// The buffer of a message whose first piece is shorter than its prefix
/// (its size is not known yet).
const FIRST_BUFFER: usize = 16 * 1024;

/// The bytes of a message received so far.
enum Data {
    Nothing,
    /// The first piece, kept as received (no copy): the common case of a
    /// whole message in one DATA frame.
    Shared(Bytes),
    /// Several pieces, copied into one buffer.
    Copied(BytesMut),
}

/// A message arriving in pieces, checked against its prefix as it comes.
struct Gathered {
    data: Data,
    /// The message length, once its prefix has arrived.
    expected: Option<usize>,
    limit: usize,
}

impl Gathered {
    fn new(limit: usize) -> Gathered {
        Gathered {
            data: Data::Nothing,
            expected: None,
            limit,
        }
    }

    /// Adds a non-empty piece, then checks what has arrived against the
    /// prefix.
    fn push<E>(
        &mut self,
        chunk: Bytes,
        hold: &mut impl FnMut(usize) -> Result<(), E>,
    ) -> Result<(), ReceiveError<E>> {
        self.data = match std::mem::replace(&mut self.data, Data::Nothing) {
            Data::Nothing => self.first(chunk, hold)?,
            Data::Shared(first) => Data::Copied(self.second(&first, &chunk, hold)?),
            Data::Copied(mut buf) => {
                self.grow(&mut buf, chunk.len(), hold)?;
                buf.extend_from_slice(&chunk);
                Data::Copied(buf)
            }
        };
        let seen: &[u8] = match &self.data {
            Data::Nothing => &[],
            Data::Shared(first) => first,
            Data::Copied(buf) => buf,
        };
        if self.expected.is_none() && seen.len() >= PREFIX_LEN {
            self.expected = Some(frame_len(seen, self.limit)?);
        }
        match self.expected {
            Some(e) if seen.len() > e + PREFIX_LEN => Err(FrameError::SeveralMessages.into()),
            _ => Ok(()),
        }
    }

    /// The first piece: kept whole when it holds the whole message, else
    /// copied, since it shares the connection's read buffer, which keeping
    /// it would pin.
    fn first<E>(
        &self,
        chunk: Bytes,
        hold: &mut impl FnMut(usize) -> Result<(), E>,
    ) -> Result<Data, ReceiveError<E>> {
        let declared = if chunk.len() >= PREFIX_LEN {
            Some(frame_len(&chunk, self.limit)?)
        } else {
            None
        };
        if declared.is_some_and(|e| chunk.len() >= e + PREFIX_LEN) {
            hold(chunk.len()).map_err(ReceiveError::Held)?;
            return Ok(Data::Shared(chunk));
        }
        let capacity = capacity_for(chunk.len(), declared);
        hold(capacity).map_err(ReceiveError::Held)?;
        let mut buf = BytesMut::with_capacity(capacity);
        buf.extend_from_slice(&chunk);
        Ok(Data::Copied(buf))
    }

    /// A second piece after a first one kept whole: both copied into one
    /// buffer.
    fn second<E>(
        &self,
        first: &[u8],
        chunk: &[u8],
        hold: &mut impl FnMut(usize) -> Result<(), E>,
    ) -> Result<BytesMut, ReceiveError<E>> {
        let capacity = capacity_for(first.len() + chunk.len(), self.expected);
        hold(capacity).map_err(ReceiveError::Held)?;
        let mut buf = BytesMut::with_capacity(capacity);
        buf.extend_from_slice(first);
        buf.extend_from_slice(chunk);
        Ok(buf)
    }

    /// Makes room in `buf` for `more` bytes. It grows ahead of time, so the
    /// held count is what is allocated: to the whole message once its size
    /// is known (a first piece shorter than the prefix is the only way to
    /// grow twice).
    fn grow<E>(
        &self,
        buf: &mut BytesMut,
        more: usize,
        hold: &mut impl FnMut(usize) -> Result<(), E>,
    ) -> Result<(), ReceiveError<E>> {
        let len = buf.len() + more;
        if len <= buf.capacity() {
            return Ok(());
        }
        let capacity = capacity_for(len, self.expected);
        // While it moves, the old buffer and the new one both exist.
        hold(buf.capacity() + capacity).map_err(ReceiveError::Held)?;
        buf.reserve(capacity - buf.len());
        hold(buf.capacity()).map_err(ReceiveError::Held)
    }

    fn into_bytes(self) -> Bytes {
        match self.data {
            Data::Nothing => Bytes::new(),
            Data::Shared(first) => first,
            Data::Copied(buf) => buf.freeze(),
        }
    }
}

/// The capacity of the buffer for a message that arrives in pieces, `len`
/// bytes so far: the whole message once its prefix is known (one
/// allocation, no copies as it grows; pages are only made resident as bytes
/// arrive), else room for the prefix to arrive.
fn capacity_for(len: usize, expected: Option<usize>) -> usize {
    match expected {
        Some(e) => (e + PREFIX_LEN).max(len),
        None => FIRST_BUFFER.max(2 * len),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_written_and_checked() {
        assert_eq!(prefix(258), [0, 0, 0, 1, 2]);
        assert_eq!(frame_len(&prefix(10), 10), Ok(10));
        assert_eq!(message_len(&[0, 0, 0, 0, 10], 10), Ok(10));
        assert_eq!(
            message_len(&[0, 0, 0, 0, 11], 10),
            Err(FrameError::TooLarge { len: 11, limit: 10 })
        );
        assert_eq!(
            message_len(&[1, 0, 0, 0, 1], 10),
            Err(FrameError::Compressed)
        );
        assert_eq!(frame_len(&[1, 0, 0, 0, 1], 10), Ok(1));
        assert_eq!(message_len(&[0, 0], 10), Err(FrameError::TruncatedPrefix));
        assert_eq!(
            message_len(&[2, 0, 0, 0, 1], 10),
            Err(FrameError::InvalidFlag(2))
        );
    }

    #[test]
    fn a_unary_body_is_exactly_one_message() {
        let one = Bytes::from_static(&[0, 0, 0, 0, 2, 8, 1]);
        assert_eq!(message(one, 10), Ok(Bytes::from_static(&[8, 1])));
        for (body, declared, received) in [
            (&[0, 0, 0, 0, 3, 1][..], 3, 1),
            (&[0, 0, 0, 0, 2, 8, 1, 99][..], 2, 3),
        ] {
            assert_eq!(
                message(Bytes::from_static(body), 10),
                Err(FrameError::LengthMismatch { declared, received })
            );
        }
        assert_eq!(message(Bytes::new(), 10), Err(FrameError::TruncatedPrefix));
    }

    /// Feeds `pieces` to a [`Gathered`], recording what `hold` was asked.
    fn gather(pieces: &[&[u8]], limit: usize) -> (Result<Bytes, String>, Vec<usize>) {
        let mut asked = Vec::new();
        let mut hold = |n: usize| {
            asked.push(n);
            Ok::<(), std::convert::Infallible>(())
        };
        let mut gathered = Gathered::new(limit);
        for piece in pieces {
            if let Err(e) = gathered.push(Bytes::copy_from_slice(piece), &mut hold) {
                return (Err(e.to_string()), asked);
            }
        }
        (Ok(gathered.into_bytes()), asked)
    }

    #[test]
    fn a_message_in_one_piece_is_kept_without_a_copy() {
        let mut gathered = Gathered::new(100);
        let whole = Bytes::from_static(&[0, 0, 0, 0, 3, 1, 2, 3]);
        gathered
            .push(whole.clone(), &mut |_| Ok::<(), ()>(()))
            .expect("one message");
        assert_eq!(gathered.into_bytes().as_ptr(), whole.as_ptr());
    }

    #[test]
    fn a_message_in_pieces_is_held_as_it_grows() {
        let (data, asked) = gather(&[&[0, 0], &[0, 0, 3, 1], &[2, 3]], 100);
        assert_eq!(data, Ok(Bytes::from_static(&[0, 0, 0, 0, 3, 1, 2, 3])));
        assert_eq!(asked, [FIRST_BUFFER]);
        let (data, asked) = gather(&[&[0, 0, 0, 0, 3, 1], &[2, 3]], 100);
        assert_eq!(data, Ok(Bytes::from_static(&[0, 0, 0, 0, 3, 1, 2, 3])));
        assert_eq!(asked, [8]);
    }

    #[test]
    fn pieces_past_one_message_or_the_limit_are_refused() {
        let (data, _) = gather(&[&[0, 0, 0, 0, 1, 7], &[0]], 100);
        assert_eq!(data, Err(FrameError::SeveralMessages.to_string()));
        let (data, asked) = gather(&[&[0, 0, 0, 0, 200, 7]], 100);
        assert_eq!(
            data,
            Err(FrameError::TooLarge {
                len: 200,
                limit: 100
            }
            .to_string())
        );
        assert!(asked.is_empty(), "refused before anything is held");
    }

    #[test]
    fn a_refused_hold_ends_the_read() {
        let mut gathered = Gathered::new(100);
        let refused = gathered.push(Bytes::from_static(&[0, 0]), &mut |n| Err(n));
        assert!(matches!(refused, Err(ReceiveError::Held(n)) if n == FIRST_BUFFER));
    }
}
