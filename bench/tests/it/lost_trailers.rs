//! hookbench counts an answer whose trailers never arrive as a failure, as a
//! proxy that drops them would deliver it: a yardstick that loses gRPC's
//! trailers shows as errors in gwbench, not as a fast proxy. The server is a
//! bare `h2` one that answers every call with a valid message, then ends the
//! stream with or without trailers.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use rollout_harness::load::{self, LoadConfig, Stop};
use rollout_proto::HookKind;
use rollout_test_support::h2_peer;

/// Serves gRPC-looking answers: an empty message (valid for every hook's
/// answer type), then `grpc-status: 0` trailers when `trailers`, else the
/// end of the stream right after the message.
async fn serve(trailers: bool) -> anyhow::Result<SocketAddr> {
    Ok(h2_peer::serve(move |request, respond| answer(trailers, request, respond)).await)
}

async fn answer(
    trailers: bool,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    h2_peer::read_body(&mut request.into_body()).await;
    let response = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("valid response");
    let Ok(mut send) = respond.send_response(response, false) else {
        return;
    };
    // A gRPC frame holding an empty message.
    let _ = send.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), !trailers);
    if trailers {
        let mut map = http::HeaderMap::new();
        map.insert("grpc-status", http::HeaderValue::from_static("0"));
        let _ = send.send_trailers(map);
    }
}

fn config(address: SocketAddr) -> LoadConfig {
    LoadConfig {
        target: format!("http://{address}"),
        hook: HookKind::MutateManifestWork,
        concurrency: 2,
        connections: 1,
        work_bytes: 4096,
        plugin: None,
        stop: Stop::Requests(20),
        warmup: Duration::ZERO,
        timeout: Duration::from_secs(5),
        latency_of_errors: false,
    }
}

#[tokio::test]
async fn answers_without_trailers_are_failures() -> anyhow::Result<()> {
    // The same server with its trailers: every call succeeds.
    let report = load::run(&config(serve(true).await?)).await?;
    assert_eq!(
        (report.requests, report.errors),
        (20, 0),
        "{:?}",
        report.error_samples
    );

    let report = load::run(&config(serve(false).await?)).await?;
    assert_eq!((report.requests, report.errors), (20, 20));
    assert!(
        report
            .error_samples
            .iter()
            .any(|sample| sample.contains("grpc-status")),
        "{:?}",
        report.error_samples
    );
    Ok(())
}
