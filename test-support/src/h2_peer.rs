//! A peer written on the wire with the `h2` crate, on 127.0.0.1, for the
//! answers a tonic server will not give (one that ignores `grpc-timeout`,
//! frames a message wrongly, loses its trailers, pushes a stream): every
//! stream of every connection is handed to an `answer` function on a task
//! of its own.

use std::future::Future;
use std::net::SocketAddr;

use bytes::Bytes;
use h2::RecvStream;
use h2::server::SendResponse;

/// Serves HTTP/2 on 127.0.0.1:0 until the runtime ends, calling `answer`
/// with each stream's request and its response handle.
pub async fn serve<F, Fut>(answer: F) -> SocketAddr
where
    F: Fn(http::Request<RecvStream>, SendResponse<Bytes>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds 127.0.0.1:0");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let answer = answer.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((request, respond))) = conn.accept().await {
                    tokio::spawn(answer(request, respond));
                }
            });
        }
    });
    addr
}

/// Reads a request body to its end, giving back flow-control capacity as
/// it goes (so that a large body does not stall): every byte received.
pub async fn read_body(body: &mut RecvStream) -> Vec<u8> {
    let mut received = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        received.extend_from_slice(&chunk);
    }
    received
}

/// One gRPC message as it goes on the wire: the compressed flag, the
/// length (four bytes, big-endian), the bytes.
pub fn frame(compressed: bool, message: &[u8]) -> Bytes {
    let len = u32::try_from(message.len()).expect("a message under 4 GiB");
    let mut framed = Vec::with_capacity(5 + message.len());
    framed.push(u8::from(compressed));
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(message);
    framed.into()
}

/// Answers as a gRPC server that succeeded: `200` with `content-type:
/// application/grpc` and `headers`, `message` in one frame flagged
/// `compressed` or not, then `grpc-status: 0` trailers. A stream the peer
/// has already reset is left alone.
pub fn answer_ok(
    mut respond: SendResponse<Bytes>,
    headers: &[(&str, &str)],
    compressed: bool,
    message: &[u8],
) {
    let mut head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc");
    for (name, value) in headers {
        head = head.header(*name, *value);
    }
    let head = head.body(()).expect("valid header names and values");
    let Ok(mut stream) = respond.send_response(head, false) else {
        return;
    };
    let _ = stream.send_data(frame(compressed, message), false);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let _ = stream.send_trailers(trailers);
}

#[cfg(test)]
mod tests {
    use super::frame;

    #[test]
    fn a_frame_is_flag_length_bytes() {
        assert_eq!(&frame(false, b"ab")[..], [0, 0, 0, 0, 2, b'a', b'b']);
        assert_eq!(&frame(true, &[])[..], [1, 0, 0, 0, 0]);
    }
}
