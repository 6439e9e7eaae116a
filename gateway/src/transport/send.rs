//! Sending a call's answer on its HTTP/2 stream, within bounds.
//!
//! An answer the peer's flow-control windows take whole is queued at once —
//! headers, message and trailers — so it leaves in one write and wakes the
//! peer once. One they do not take waits here, not in h2's unbounded send
//! buffer: handed on only as the peer grants window, and a peer that grants
//! nothing for the send timeout is cut off. Either way the message is held
//! against the connection's and the gateway's pending-bytes pools, in the
//! call's own [`CallBytes`] (which held its request's bytes and its plugins'
//! answers until then), from the moment the call settles until the last of
//! it is written to the socket: each of its buffers counts for as long as it
//! lives, in this sender or in h2's send buffer (where a peer that grants
//! windows and does not read its socket leaves it). Over either pool, the
//! stream is reset with ENHANCE_YOUR_CALM, which gRPC clients read as
//! RESOURCE_EXHAUSTED. So a caller that never reads its answers holds at
//! most its connection's budget, and not for long; a call counts against
//! the pools from its request's first byte until its answer is taken.

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::time::Duration;

use bytes::Buf;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use h2::server::SendResponse;
use h2::{Reason, SendStream};
use http::{HeaderMap, HeaderValue, StatusCode};
use tokio::time::Instant;

use super::grpc::{self, Payload};
use super::pending::CallBytes;
use super::server::Peer;

/// How a call is answered.
pub(crate) enum Answer {
    /// A gRPC answer of one message: headers, the message, then `trailers`
    /// (which carry `grpc-status`).
    Message {
        message: Payload,
        trailers: HeaderMap,
    },
    /// A trailers-only gRPC answer: `headers` carry `grpc-status`.
    TrailersOnly(HeaderMap),
    /// Not a gRPC answer: an HTTP status and no body.
    Http(StatusCode),
    /// A gRPC answer of messages as they come, ending with trailers (a
    /// health `Watch`). It lasts: it does not keep its connection from being
    /// idle.
    Stream(BoxStream<'static, StreamItem>),
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Answer::Message { trailers, .. } => f
                .debug_struct("Message")
                .field("trailers", trailers)
                .finish_non_exhaustive(),
            Answer::TrailersOnly(h) => f.debug_tuple("TrailersOnly").field(h).finish(),
            Answer::Http(c) => f.debug_tuple("Http").field(c).finish(),
            Answer::Stream(_) => f.write_str("Stream"),
        }
    }
}

/// One item of an [`Answer::Stream`].
#[derive(Debug)]
pub(crate) enum StreamItem {
    Message(Payload),
    /// The last item.
    Trailers(HeaderMap),
}

/// How a call's stream ended, for its connection.
pub(crate) enum Sent {
    Done,
    /// The answer goes on for long (an answer stream): the rest of it.
    Lasting(BoxFuture<'static, Sent>),
    /// The peer took nothing for the send timeout: its connection is to be closed.
    Stalled,
}

/// The head of every gRPC answer.
fn grpc_head() -> http::Response<()> {
    let mut r = http::Response::new(());
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(grpc::CONTENT_TYPE),
    );
    r
}

/// Waits for the answer (dropping it if the peer resets the stream: it gave
/// up, which cancels the work) and sends it.
pub(crate) async fn drive<F>(
    answering: F,
    mut respond: SendResponse<Payload>,
    peer: Arc<Peer>,
    held: CallBytes,
    send_timeout: Duration,
) -> Sent
where
    F: Future<Output = Result<Answer, Infallible>>,
{
    let answer = tokio::select! {
        answer = answering => match answer {
            Ok(answer) => answer,
            Err(never) => match never {},
        },
        _ = poll_fn(|cx| respond.poll_reset(cx)) => return Sent::Done,
    };
    // The call's work is over (its request and its plugins' answers are
    // dropped, or live on in the answer): from here it holds its answer.
    held.settle();
    match answer {
        Answer::Message { message, trailers } => {
            let Ok(mut stream) = respond.send_response(grpc_head(), false) else {
                return Sent::Done;
            };
            let sent = send_message(&mut stream, message, &peer, &held, send_timeout).await;
            if let Sent::Done = sent {
                let _ = stream.send_trailers(trailers);
            }
            sent
        }
        Answer::TrailersOnly(headers) => {
            let mut head = grpc_head();
            head.headers_mut().extend(headers);
            let _ = respond.send_response(head, true);
            Sent::Done
        }
        Answer::Http(code) => {
            send_http(&mut respond, code);
            Sent::Done
        }
        Answer::Stream(items) => match respond.send_response(grpc_head(), false) {
            // Each item holds its own bytes.
            Ok(stream) => Sent::Lasting(Box::pin(send_items(
                stream,
                items,
                peer,
                held,
                send_timeout,
            ))),
            Err(_) => Sent::Done,
        },
    }
}

/// An HTTP answer that is not gRPC: `code`, with the reason in a body for a
/// person trying the port with curl.
fn send_http(respond: &mut SendResponse<Payload>, code: StatusCode) {
    let mut head = http::Response::new(());
    *head.status_mut() = code;
    head.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    let reason = code.canonical_reason().unwrap_or("refused");
    let body = bytes::Bytes::from(format!("{} {reason}: this is a gRPC port\n", code.as_u16()));
    if let Ok(mut stream) = respond.send_response(head, false) {
        let _ = stream.send_data(grpc::raw(body), true);
    }
}

/// Sends one message (see the module doc), each of its buffers held in
/// `held` until it is written and dropped, here or in h2's send buffer.
async fn send_message(
    stream: &mut SendStream<Payload>,
    message: Payload,
    peer: &Peer,
    held: &CallBytes,
    send_timeout: Duration,
) -> Sent {
    let message = match grpc::try_map_parts(message, |part| held.counted(part)) {
        Ok(message) => message,
        Err(exceeded) => {
            tracing::warn!(peer = %peer.addr, error = %exceeded, "answer refused: too many bytes held for the peer's calls");
            stream.send_reset(Reason::ENHANCE_YOUR_CALM);
            return Sent::Done;
        }
    };
    let len = message.remaining();
    stream.reserve_capacity(len);
    if stream.capacity() >= len {
        // The common case: the windows take it all; one write.
        let _ = stream.send_data(message, false);
        return Sent::Done;
    }
    let mut rest = message;
    let mut progress = Instant::now();
    while rest.has_remaining() {
        stream.reserve_capacity(rest.remaining());
        let granted = poll_fn(|cx| stream.poll_capacity(cx));
        let mut granted = match tokio::time::timeout_at(progress + send_timeout, granted).await {
            Ok(Some(Ok(n))) => n.min(rest.remaining()),
            // The stream or the connection ended.
            Ok(Some(Err(_)) | None) => return Sent::Done,
            Err(_) => {
                tracing::warn!(peer = %peer.addr, unsent = rest.remaining(), timeout_ms = send_timeout.as_millis(), "cutting off a peer that does not read its answers");
                stream.send_reset(Reason::CANCEL);
                return Sent::Stalled;
            }
        };
        if granted > 0 {
            progress = Instant::now();
        }
        while granted > 0 {
            // Within one of the message's buffers: a slice of it, which
            // keeps it counted, and no copy.
            let piece = rest.copy_to_bytes(granted.min(rest.chunk().len()));
            granted -= piece.len();
            if stream.send_data(grpc::raw(piece), false).is_err() {
                return Sent::Done;
            }
        }
    }
    Sent::Done
}

/// Sends the items of an answer stream as they come, until its trailers,
/// or until the peer resets the stream.
async fn send_items(
    mut stream: SendStream<Payload>,
    mut items: BoxStream<'static, StreamItem>,
    peer: Arc<Peer>,
    held: CallBytes,
    send_timeout: Duration,
) -> Sent {
    loop {
        let item = tokio::select! {
            item = items.next() => item,
            _ = poll_fn(|cx| stream.poll_reset(cx)) => return Sent::Done,
        };
        match item {
            Some(StreamItem::Message(message)) => {
                match send_message(&mut stream, message, &peer, &held, send_timeout).await {
                    Sent::Done => {}
                    other => return other,
                }
            }
            Some(StreamItem::Trailers(trailers)) => {
                let _ = stream.send_trailers(trailers);
                return Sent::Done;
            }
            None => {
                let _ = stream.send_data(grpc::raw(bytes::Bytes::new()), true);
                return Sent::Done;
            }
        }
    }
}
