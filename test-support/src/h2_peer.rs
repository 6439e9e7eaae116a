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
