//! `tonic-forwarder`: a gRPC forwarder built the way tonic offers, as a
//! yardstick for `gwbench`: tonic's generic server with a raw-bytes codec
//! takes each unary call of the plugin service, and a tonic client
//! (`Channel`, one connection) sends the same bytes, with the caller's
//! metadata, to `--upstream`. Nothing else. The gateway frames gRPC itself
//! over `h2` instead (docs/decisions/0001-grpc-framing-on-h2.md); this
//! target re-measures that choice in every run.
//!
//! Prints `tonic-forwarder listening grpc=ADDR` once it accepts connections.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use anyhow::Context as _;
use bytes::{Buf as _, BufMut as _, Bytes};
use clap::Parser;
use futures::future::BoxFuture;
use http::uri::PathAndQuery;
use rollout_bench::compare::yardsticks::YARDSTICK_WINDOW;
use tokio::net::TcpListener;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::server::{NamedService, UnaryService};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::{Request, Response, Status};

/// Windows as every yardstick has them.
const WINDOW: u32 = YARDSTICK_WINDOW as u32;

/// A gRPC forwarder on tonic's generic server and client.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Where to listen (h2c).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// The gRPC server to forward to (h2c).
    #[arg(long)]
    upstream: SocketAddr,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // One thread, as the gateway runs by default.
    rollout_bench::runtime(1)?.block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let channel = Channel::from_shared(format!("http://{}", args.upstream))?
        .initial_stream_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("cannot connect to {}", args.upstream))?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    println!("tonic-forwarder listening grpc={}", listener.local_addr()?);
    // Server::tcp_nodelay is ignored with an incoming stream.
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    Server::builder()
        .initial_stream_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .add_service(Forward {
            client: tonic::client::Grpc::new(channel),
        })
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}

/// Every method of the plugin service, forwarded as bytes.
#[derive(Clone)]
struct Forward {
    client: tonic::client::Grpc<Channel>,
}

impl NamedService for Forward {
    const NAME: &'static str = "ocm.rolloutplugin.v1alpha1.RolloutPluginService";
}

impl tower::Service<http::Request<tonic::body::Body>> for Forward {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let unary = Unary {
            client: self.client.clone(),
            path: request.uri().path_and_query().cloned(),
        };
        Box::pin(async move {
            Ok(tonic::server::Grpc::new(RawBytes)
                .unary(unary, request)
                .await)
        })
    }
}

/// One call: the same bytes to the same path upstream.
struct Unary {
    client: tonic::client::Grpc<Channel>,
    path: Option<PathAndQuery>,
}

impl UnaryService<Bytes> for Unary {
    type Response = Bytes;
    type Future = BoxFuture<'static, Result<Response<Bytes>, Status>>;

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        let mut client = self.client.clone();
        let path = self.path.take();
        Box::pin(async move {
            let path = path.ok_or_else(|| Status::unimplemented("no path"))?;
            client
                .ready()
                .await
                .map_err(|e| Status::unavailable(e.to_string()))?;
            client.unary(request, path, RawBytes).await
        })
    }
}

/// A message's bytes as they are, both ways.
#[derive(Debug, Clone, Copy, Default)]
struct RawBytes;

impl Codec for RawBytes {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawBytes;
    type Decoder = RawBytes;

    fn encoder(&mut self) -> RawBytes {
        RawBytes
    }

    fn decoder(&mut self) -> RawBytes {
        RawBytes
    }
}

impl Encoder for RawBytes {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawBytes {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
