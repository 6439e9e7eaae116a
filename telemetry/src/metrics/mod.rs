//! The metrics both binaries serve on `/metrics`: the exposition format a
//! scraper asks for ([`Format::negotiate`]: OpenMetrics 1.0 for Prometheus,
//! the Prometheus text 0.0.4 for anything else), written from one
//! `prometheus_client` registry ([`encode`], [`response`]); the `process_*`
//! series ([`ProcessCollector`]); and the `*_build_info` series
//! ([`register_build_info`]).
//!
//! The registry is encoded once, as OpenMetrics; the Prometheus text is
//! derived from that encoding (`text.rs` lists what differs), so the two
//! formats always carry the same series.

mod accept;
mod process;
mod quoted;
mod text;

use http::header::{ACCEPT, CONTENT_TYPE, VARY};
use http::{HeaderMap, HeaderValue, Response};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

pub use process::ProcessCollector;

/// An exposition format of `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text: what Prometheus asks for first.
    OpenMetrics,
    /// The Prometheus text format 0.0.4: the answer to `curl`, to a request
    /// without `Accept`, and to any client that does not ask for OpenMetrics.
    Prometheus,
}

impl Format {
    /// The `Content-Type` of an answer in this format.
    pub const fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }

    /// The format a request with `headers` asks for, from its `Accept`
    /// header(s): media ranges with parameters (`version`) and weights
    /// (`q`), wildcards, the most specific range deciding a format's
    /// weight. OpenMetrics when it weighs more than the Prometheus text (or
    /// as much, named more specifically), else the Prometheus text.
    pub fn negotiate(headers: &HeaderMap) -> Format {
        accept::negotiate(
            headers
                .get_all(ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok()),
        )
    }
}

/// Every metric of `registry` in `format`. Writing to a `String` cannot
/// fail; should a metric fail to encode, what was written is still
/// returned, and the failure logged.
pub fn encode(registry: &Registry, format: Format) -> String {
    let mut openmetrics = String::with_capacity(16 * 1024);
    if let Err(error) = prometheus_client::encoding::text::encode(&mut openmetrics, registry) {
        tracing::error!(%error, "encoding the metrics failed");
    }
    match format {
        Format::OpenMetrics => openmetrics,
        Format::Prometheus => text::from_openmetrics(&openmetrics),
    }
}

/// The answer to `GET /metrics` with request headers `headers`: the
/// metrics in the format negotiated from `Accept`, its `Content-Type`, and
/// `Vary: Accept` (caches keep the two formats apart).
pub fn response(registry: &Registry, headers: &HeaderMap) -> Response<String> {
    let format = Format::negotiate(headers);
    let mut answer = Response::new(encode(registry, format));
    let answer_headers = answer.headers_mut();
    answer_headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    answer_headers.insert(VARY, HeaderValue::from_static("Accept"));
    answer
}

/// The revision the binaries were built from: `ROLLOUT_HOOKS_REVISION` in
/// the build's environment (the images and release builds set it from
/// `git rev-parse`); `None` when unset or empty.
///
/// Read from the environment rather than from git by a build script: a
/// revision baked in from `.git` changes with every commit and rebuilds
/// every crate that depends on this one; an environment variable changes
/// only when a release build sets it.
pub fn revision() -> Option<&'static str> {
    option_env!("ROLLOUT_HOOKS_REVISION").filter(|r| !r.is_empty())
}

/// Registers `NAME_info{version, revision} 1` (OpenMetrics type `info`;
/// a gauge in the Prometheus text): `version` is the binary's, `revision`
/// is [`revision`], left out when unknown.
pub fn register_build_info(registry: &mut Registry, name: &str, help: &str, version: &str) {
    let mut labels = vec![("version".to_string(), version.to_string())];
    if let Some(revision) = revision() {
        labels.push(("revision".to_string(), revision.to_string()));
    }
    registry.register(name, help, Info::new(labels));
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    #[test]
    fn the_answer_names_its_format_and_varies_by_accept() {
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry.register("calls", "Calls", counter.clone());
        counter.inc();
        register_build_info(&mut registry, "app_build", "Build", "1.2.3");

        let mut headers = HeaderMap::new();
        let plain = response(&registry, &headers);
        assert_eq!(
            plain.headers()[CONTENT_TYPE],
            "text/plain; version=0.0.4; charset=utf-8"
        );
        assert_eq!(plain.headers()[VARY], "Accept");
        assert!(
            plain
                .body()
                .contains("# TYPE calls_total counter\ncalls_total 1\n")
        );
        assert!(plain.body().contains("# TYPE app_build_info gauge\n"));
        assert!(!plain.body().contains("# EOF"));

        headers.append(ACCEPT, HeaderValue::from_static("text/plain;q=0.5"));
        headers.append(
            ACCEPT,
            HeaderValue::from_static("application/openmetrics-text;q=0.9"),
        );
        let om = response(&registry, &headers);
        assert_eq!(
            om.headers()[CONTENT_TYPE],
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        assert!(om.body().contains("# TYPE calls counter\ncalls_total 1\n"));
        assert!(
            om.body()
                .contains("# TYPE app_build info\napp_build_info{version=\"1.2.3\"")
        );
        assert!(om.body().ends_with("# EOF\n"));
    }
}
