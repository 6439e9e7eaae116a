//! `h2-forwarder`: the floor a gRPC proxy on the `h2` crate can reach, as a
//! yardstick for `gwbench`. HTTP/2 with prior knowledge (h2c) in, one
//! persistent HTTP/2 connection out to `--upstream`, and each stream's
//! headers, data and trailers relayed both ways: no routing, no checks, no
//! deadlines, no telemetry, nothing else. What the gateway spends per call
//! beyond this is its own work, not HTTP/2's.
//!
//! Prints `h2-forwarder listening grpc=ADDR` once it accepts connections.

use std::net::SocketAddr;

use anyhow::Context as _;
use bytes::Bytes;
use clap::Parser;
use h2::client::SendRequest;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{Request, Response, Uri};
use rollout_bench::compare::yardsticks::YARDSTICK_WINDOW;
use tokio::net::{TcpListener, TcpStream};

/// Windows as every yardstick has them; frames as large as the gateway's.
const WINDOW: u32 = YARDSTICK_WINDOW as u32;
/// The gateway's largest HTTP/2 frame.
const MAX_FRAME: u32 = 1 << 20;

/// A minimal gRPC forwarder on the `h2` crate.
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
    let upstream = TcpStream::connect(args.upstream)
        .await
        .with_context(|| format!("cannot connect to {}", args.upstream))?;
    upstream.set_nodelay(true)?;
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_frame_size(MAX_FRAME)
        .handshake::<_, Bytes>(upstream)
        .await
        .context("HTTP/2 handshake with the upstream failed")?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            eprintln!("h2-forwarder: the upstream connection ended: {error}");
            std::process::exit(1);
        }
    });
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    println!("h2-forwarder listening grpc={}", listener.local_addr()?);
    let authority = args.upstream.to_string();
    loop {
        let (socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        let (client, authority) = (client.clone(), authority.clone());
        tokio::spawn(async move {
            if let Err(error) = serve_connection(socket, client, authority).await {
                eprintln!("h2-forwarder: a connection ended: {error}");
            }
        });
    }
}

/// Accepts the streams of one caller connection, each forwarded on a task.
async fn serve_connection(
    socket: TcpStream,
    client: SendRequest<Bytes>,
    authority: String,
) -> Result<(), h2::Error> {
    let mut connection = h2::server::Builder::new()
        .initial_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_frame_size(MAX_FRAME)
        .handshake::<_, Bytes>(socket)
        .await?;
    while let Some(stream) = connection.accept().await {
        let (request, respond) = stream?;
        let (client, authority) = (client.clone(), authority.clone());
        tokio::spawn(async move {
            if let Err(error) = forward(request, respond, client, &authority).await {
                eprintln!("h2-forwarder: a stream failed: {error}");
            }
        });
    }
    Ok(())
}

/// Sends the request on the upstream connection and relays its answer.
async fn forward(
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    client: SendRequest<Bytes>,
    authority: &str,
) -> anyhow::Result<()> {
    let (mut parts, mut body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = Uri::try_from(format!("http://{authority}{path}"))?;
    let mut client = client.ready().await?;
    let ended = body.is_end_stream();
    let (answer, mut sending) = client.send_request(Request::from_parts(parts, ()), ended)?;
    if !ended {
        relay(&mut body, &mut sending).await?;
    }
    let (parts, mut body) = answer.await?.into_parts();
    let ended = body.is_end_stream();
    let mut sending = respond.send_response(Response::from_parts(parts, ()), ended)?;
    if !ended {
        relay(&mut body, &mut sending).await?;
    }
    Ok(())
}

/// Relays DATA frames, then the trailers (or the end of the stream).
async fn relay(from: &mut RecvStream, to: &mut SendStream<Bytes>) -> Result<(), h2::Error> {
    while let Some(data) = from.data().await {
        let data = data?;
        from.flow_control().release_capacity(data.len())?;
        if from.is_end_stream() {
            return to.send_data(data, true);
        }
        to.send_data(data, false)?;
    }
    match from.trailers().await? {
        Some(trailers) => to.send_trailers(trailers),
        None => to.send_data(Bytes::new(), true),
    }
}
