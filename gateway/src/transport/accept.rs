//! The accept loop both listeners share: take connections up to a bound,
//! reap the tasks of those that ended, and stop at shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

/// What [`next`] got from the listener.
#[derive(Debug)]
pub(crate) enum Accepted {
    /// A connection under the bound: the caller spawns its task in the set.
    Open(TcpStream, SocketAddr),
    /// A connection over the bound, already closed (the peer sees it end
    /// rather than hang, and tries elsewhere or later).
    Refused(SocketAddr),
    /// Shutdown resolved: accept no more.
    Shutdown,
}

/// Waits for the next connection on `listener`, while reaping the tasks in
/// `connections` that ended. A connection that would make more than `max`
/// tasks is closed at once. An accept error (out of file descriptors and the
/// like) is logged and retried after a short pause rather than spun on.
pub(crate) async fn next<T: 'static>(
    listener: &TcpListener,
    connections: &mut JoinSet<T>,
    max: usize,
    mut shutdown: Pin<&mut impl Future<Output = ()>>,
) -> Accepted {
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = shutdown.as_mut() => return Accepted::Shutdown,
        };
        while connections.try_join_next().is_some() {}
        if connections.len() >= max {
            drop(stream);
            return Accepted::Refused(peer);
        }
        return Accepted::Open(stream, peer);
    }
}
