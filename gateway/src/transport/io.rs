//! Write coalescing under HTTP/2.
//!
//! h2 writes a DATA payload larger than 256 bytes as its own `writev` part
//! (no copy), and will not buffer another frame until that write is done: an
//! answer's trailers then leave in a second write, which wakes the caller a
//! second time. [`Coalesce`] sits between h2 and the socket: small writes are
//! gathered in a buffer, and the first flush after new data yields once (the
//! task wakes itself at once), so frames h2 queues on the next poll — the
//! trailers — join the same write. Large writes pass straight through after
//! whatever is gathered, in one `writev`, so big ManifestWorks are not copied.
//!
//! With a stall timeout, a write the socket has not taken any of for that
//! long fails (`TimedOut`), which ends the connection: a peer that stops
//! reading cannot keep the answers queued for it in memory.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// The read buffer of each connection, the callers' and the plugins'; larger
/// reads bypass it.
pub(crate) const READ_BUFFER: usize = 16 * 1024;

/// Writes at least this large are not copied into the buffer.
const PASS_THROUGH: usize = 16 * 1024;

/// An IO object that gathers small writes until a flush (see the module doc).
#[derive(Debug)]
pub(crate) struct Coalesce<T> {
    inner: T,
    buf: Vec<u8>,
    /// The pending data has already waited one flush: write it at the next.
    yielded: bool,
    /// How long a write may make no progress, and the timer of the current
    /// stall (armed when the socket first refuses a write).
    stall_timeout: Option<Duration>,
    stall: Option<Pin<Box<Sleep>>>,
}

impl<T> Coalesce<T> {
    pub(crate) fn new(inner: T) -> Coalesce<T> {
        Coalesce {
            inner,
            buf: Vec::with_capacity(8 * 1024),
            yielded: false,
            stall_timeout: None,
            stall: None,
        }
    }

    /// Fails writes that make no progress for `timeout` (zero: never).
    pub(crate) fn with_stall_timeout(mut self, timeout: Duration) -> Coalesce<T> {
        self.stall_timeout = (!timeout.is_zero()).then_some(timeout);
        self
    }

    /// Passes on the result of a write to the socket, timing a stall: while
    /// the socket takes nothing, the stall timer runs, and once it is over
    /// the write fails.
    fn timed<R>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        let Some(timeout) = self.stall_timeout else {
            return poll;
        };
        if poll.is_ready() {
            self.stall = None;
            return poll;
        }
        let stall = self
            .stall
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stall.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the peer has taken no bytes for the send timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesce<T> {
    /// Writes the gathered bytes, then `bufs`, in as few `writev`s as the
    /// socket takes. Returns how much of `bufs` was written.
    fn write_through(
        &mut self,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        loop {
            if self.buf.is_empty() {
                let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
                return self.timed(cx, poll);
            }
            let mut slices = Vec::with_capacity(bufs.len() + 1);
            slices.push(IoSlice::new(&self.buf));
            slices.extend(bufs.iter().map(|b| IoSlice::new(b)));
            let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, &slices);
            drop(slices);
            let n = ready!(self.timed(cx, poll))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            let gathered = self.buf.len();
            if n <= gathered {
                self.buf.drain(..n);
                continue;
            }
            self.buf.clear();
            return Poll::Ready(Ok(n - gathered));
        }
    }

    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.buf.is_empty() {
            let poll = Pin::new(&mut self.inner).poll_write(cx, &self.buf);
            let n = ready!(self.timed(cx, poll))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.buf.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Coalesce<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesce<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total >= PASS_THROUGH {
            return self.write_through(cx, bufs);
        }
        for b in bufs {
            self.buf.extend_from_slice(b);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.buf.is_empty() && !self.yielded {
            // Yield once so whatever h2 queues next joins this write.
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        ready!(self.drain(cx))?;
        self.yielded = false;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
