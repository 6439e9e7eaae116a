//! A hostile HTTP/2 client, to measure what it costs the gateway: streams
//! that declare large gRPC messages, send most of each and stall, and
//! connections that handshake and then say nothing.

use std::net::SocketAddr;

use anyhow::Context as _;
use bytes::{BufMut, Bytes, BytesMut};
use h2::client::{ResponseFuture, SendRequest};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// What to send.
#[derive(Debug, Clone)]
pub struct Attack {
    /// Connections carrying half-sent requests.
    pub connections: usize,
    /// Streams per such connection.
    pub streams: usize,
    /// The message size each stream declares in its gRPC prefix.
    pub declared: usize,
    /// The bytes of it each stream sends before stalling.
    pub sent: usize,
    /// HTTP/2 connections that handshake and then send nothing.
    pub idle: usize,
}

/// How the gateway answered the half-sent requests so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Answers {
    /// Streams answered, by gRPC status code.
    pub resource_exhausted: usize,
    pub deadline_exceeded: usize,
    pub other: usize,
    /// Streams without an answer yet.
    pub waiting: usize,
    /// Connections (half-sent or idle) the gateway has closed.
    pub closed_connections: usize,
}

/// The open connections and streams of an attack; dropping it closes them.
pub struct Running {
    drivers: Vec<JoinHandle<Result<(), h2::Error>>>,
    answers: Vec<JoinHandle<Option<i32>>>,
    // Kept open: dropping a send half would end the stream.
    _bodies: Vec<h2::SendStream<Bytes>>,
    _senders: Vec<SendRequest<Bytes>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        for d in &self.drivers {
            d.abort();
        }
        for a in &self.answers {
            a.abort();
        }
    }
}

impl Running {
    /// How the gateway has answered so far.
    pub fn answers(&self) -> Answers {
        let mut out = Answers::default();
        for a in &self.answers {
            if !a.is_finished() {
                out.waiting += 1;
            }
        }
        out.closed_connections = self.drivers.iter().filter(|d| d.is_finished()).count();
        out
    }

    /// Collects the answers that have arrived (the finished ones).
    pub async fn tally(&mut self) -> Answers {
        let mut out = self.answers();
        let mut waiting = Vec::new();
        for a in self.answers.drain(..) {
            if !a.is_finished() {
                waiting.push(a);
                continue;
            }
            match a.await {
                Ok(Some(8)) => out.resource_exhausted += 1,
                Ok(Some(4)) => out.deadline_exceeded += 1,
                _ => out.other += 1,
            }
        }
        self.answers = waiting;
        out
    }
}

/// Starts the attack on `addr`; returns once every stream has been opened
/// and its bytes queued (h2 sends them as the gateway's windows allow).
pub async fn start(addr: SocketAddr, attack: &Attack) -> anyhow::Result<Running> {
    let mut running = Running {
        drivers: Vec::new(),
        answers: Vec::new(),
        _bodies: Vec::new(),
        _senders: Vec::new(),
    };
    let body = partial_message(attack.declared, attack.sent);
    for _ in 0..attack.connections {
        let (send, driver) = connect(addr).await?;
        running.drivers.push(driver);
        for _ in 0..attack.streams {
            let mut ready = send.clone().ready().await.context("opening a stream")?;
            let (response, mut stream) = ready
                .send_request(request(), false)
                .context("opening a stream")?;
            stream
                .send_data(body.clone(), false)
                .context("sending a body")?;
            running._bodies.push(stream);
            running.answers.push(tokio::spawn(status_of(response)));
        }
        running._senders.push(send);
    }
    for _ in 0..attack.idle {
        let (send, driver) = connect(addr).await?;
        running.drivers.push(driver);
        running._senders.push(send);
    }
    Ok(running)
}

async fn connect(
    addr: SocketAddr,
) -> anyhow::Result<(SendRequest<Bytes>, JoinHandle<Result<(), h2::Error>>)> {
    let tcp = TcpStream::connect(addr)
        .await
        .with_context(|| format!("cannot connect to {addr}"))?;
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(16 << 20)
        .initial_connection_window_size(64 << 20)
        .handshake::<_, Bytes>(tcp)
        .await
        .context("HTTP/2 handshake")?;
    Ok((send, tokio::spawn(conn)))
}

/// A BeginRollout request without a deadline.
fn request() -> http::Request<()> {
    let mut r = http::Request::new(());
    *r.method_mut() = http::Method::POST;
    *r.uri_mut() = http::Uri::from_static(
        "http://gateway/ocm.rolloutplugin.v1alpha1.RolloutPluginService/BeginRollout",
    );
    let h = r.headers_mut();
    h.insert(
        "content-type",
        http::HeaderValue::from_static("application/grpc"),
    );
    h.insert("te", http::HeaderValue::from_static("trailers"));
    h.insert("ocm-rollout-plugin", http::HeaderValue::from_static("p"));
    r
}

/// A gRPC prefix declaring `declared` bytes, then `sent` of them.
pub fn partial_message(declared: usize, sent: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(5 + sent);
    b.put_u8(0);
    b.put_u32(u32::try_from(declared).unwrap_or(u32::MAX));
    b.put_bytes(b'x', sent);
    b.freeze()
}

/// The `grpc-status` of a trailers-only answer (the gateway's refusals are).
async fn status_of(response: ResponseFuture) -> Option<i32> {
    let response = response.await.ok()?;
    response
        .headers()
        .get("grpc-status")?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_messages_declare_more_than_they_send() {
        let m = partial_message(16 << 20, 3);
        assert_eq!(&m[..], &[0, 1, 0, 0, 0, b'x', b'x', b'x']);
    }
}
