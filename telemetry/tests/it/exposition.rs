//! `/metrics` over real HTTP on 127.0.0.1, asked for with each `Accept`
//! header a scraper sends: the answer's format follows the header, each
//! format is read back by its strict reader, both carry the same samples,
//! and `promtool check metrics` passes the Prometheus text.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use rollout_telemetry::metrics::{self, Format, ProcessCollector};
use rollout_test_support::metrics::{OPENMETRICS, PROMETHEUS_ACCEPT, PROMETHEUS_TEXT, scrape_each};

type Labels = Vec<(String, String)>;

/// A registry with each kind of series the binaries export.
fn registry() -> Registry {
    let mut r = Registry::default();
    let calls = Family::<Labels, Counter>::default();
    r.register("app_calls", "Calls, by code", calls.clone());
    for (code, n) in [("OK", 3), ("a \"quoted\" \\ value\nwith a newline}", 1)] {
        calls
            .get_or_create(&vec![("code".into(), code.into())])
            .inc_by(n);
    }
    let duration = Histogram::new([0.001, 0.5, 30.0]);
    r.register_with_unit(
        "app_call_duration",
        "Durations",
        Unit::Seconds,
        duration.clone(),
    );
    duration.observe(0.25);
    let state = Family::<Labels, Gauge>::default();
    r.register("app_circuit_state", "Circuit states", state.clone());
    for (s, v) in [("closed", 1), ("open", 0), ("half-open", 0)] {
        state
            .get_or_create(&vec![("state".into(), s.into())])
            .set(v);
    }
    metrics::register_build_info(&mut r, "app_build", "Build", "1.2.3");
    r.register_collector(Box::new(ProcessCollector));
    r
}

async fn serve(registry: Registry) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("bound");
    let registry = Arc::new(registry);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.expect("accepts");
            let registry = registry.clone();
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let answer = metrics::response(&registry, req.headers());
                async move {
                    Ok::<_, Infallible>(answer.map(http_body_util::Full::<bytes::Bytes>::from))
                }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    addr
}

#[tokio::test]
async fn each_accept_header_gets_its_format_and_both_carry_the_same_samples() {
    let addr = serve(registry()).await;
    assert_eq!(Format::OpenMetrics.content_type(), OPENMETRICS);
    assert_eq!(Format::Prometheus.content_type(), PROMETHEUS_TEXT);
    let cases: &[(&[&str], &str)] = &[
        (&[], PROMETHEUS_TEXT),
        (&["*/*"], PROMETHEUS_TEXT),
        (&["text/plain;version=0.0.4"], PROMETHEUS_TEXT),
        (&["application/json"], PROMETHEUS_TEXT),
        (&[PROMETHEUS_ACCEPT], OPENMETRICS),
        (&["application/openmetrics-text"], OPENMETRICS),
        (
            &["text/plain;q=0.1", "application/openmetrics-text;q=0.2"],
            OPENMETRICS,
        ),
    ];
    let scrapes = scrape_each(addr, cases).await;
    // The process's own CPU, memory and descriptors move between scrapes.
    scrapes.assert_same_samples(|name| !name.starts_with("process_"));
    let (om, text) = (&scrapes.openmetrics, &scrapes.prometheus);
    for family in [
        "app_calls_total",
        "app_call_duration_seconds",
        "app_build_info",
        "process_cpu_seconds_total",
        "process_max_fds",
        "process_virtual_memory_bytes",
    ] {
        assert!(
            text.types.contains_key(family),
            "{family}: {:?}",
            text.types
        );
    }
    assert_eq!(text.types["app_calls_total"], "counter");
    assert_eq!(om.types["app_calls"], "counter");
    assert_eq!(om.types["app_build"], "info");
    assert_eq!(text.types["app_build_info"], "gauge");
    scrapes.assert_promtool_passes();
}
