//! Why a query gave no series, as a closed set of kinds, and the one rule
//! that says which of them may pass with time ([`QueryError::transient`]).

use std::time::Duration;

/// Why a query to Prometheus gave no answer to judge.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// No TCP connection (refused, unreachable, DNS).
    #[error("cannot connect to Prometheus at {addr}: {source}")]
    Connect {
        /// `host:port`.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TLS handshake failed (an untrusted certificate, a closed
    /// connection).
    #[error("TLS with Prometheus failed: {0}")]
    Tls(#[source] std::io::Error),
    /// The HTTP exchange broke (a reset, a malformed response head).
    #[error("HTTP to Prometheus failed: {0}")]
    Http(#[source] hyper::Error),
    /// No whole answer within the plugin's query timeout.
    #[error("Prometheus did not answer within {0:?}")]
    Timeout(Duration),
    /// The bearer token file could not be read.
    #[error("cannot read the bearer token file {path}: {source}")]
    Token {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The request could not be built (a URL part HTTP refuses).
    #[error("cannot build the HTTP request: {0}")]
    Request(#[source] http::Error),
    /// The answer is bigger than the plugin reads.
    #[error("Prometheus's answer is larger than {limit} bytes")]
    TooLarge {
        /// `--max-response-bytes`.
        limit: usize,
    },
    /// An HTTP error status, or `"status":"error"` in the body.
    #[error("Prometheus answered HTTP {code}{}: {message}", .error_type.as_deref().map(|t| format!(" ({t})")).unwrap_or_default())]
    Refused {
        /// The HTTP status code.
        code: u16,
        /// The body's `errorType` (`bad_data`, `timeout`, …), when it has one.
        error_type: Option<String>,
        /// The body's `error`, or the start of the body.
        message: String,
    },
    /// A body that is not Prometheus's JSON envelope of a range query.
    #[error("Prometheus's answer is not a range query result: {0}")]
    Malformed(String),
    /// Several series where a check compares one.
    #[error(
        "the query gives {count} series where one is compared ({first}, {second}, …): aggregate it (sum, max by ()) or select one series"
    )]
    ManySeries {
        /// How many.
        count: usize,
        /// The labels of the first.
        first: String,
        /// The labels of the second.
        second: String,
    },
}

impl QueryError {
    /// Whether asking again later may give an answer: Prometheus down,
    /// slow, overloaded or restarting. A check stays INPROGRESS on a
    /// transient error until the plan's deadline, and FAILS at once on the
    /// others (a query Prometheus refuses, an answer that is not
    /// Prometheus's, several series), which asking again cannot change.
    pub fn transient(&self) -> bool {
        match self {
            Self::Connect { .. }
            | Self::Tls(_)
            | Self::Http(_)
            | Self::Timeout(_)
            | Self::Token { .. } => true,
            Self::Refused {
                code, error_type, ..
            } => {
                *code >= 500
                    || *code == 429
                    || matches!(
                        error_type.as_deref(),
                        Some("timeout" | "canceled" | "unavailable")
                    )
            }
            Self::Request(_)
            | Self::TooLarge { .. }
            | Self::Malformed(_)
            | Self::ManySeries { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16, error_type: Option<&str>) -> QueryError {
        QueryError::Refused {
            code,
            error_type: error_type.map(str::to_owned),
            message: "m".into(),
        }
    }

    #[test]
    fn only_what_time_may_mend_is_transient() {
        let io = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let table = [
            (
                QueryError::Connect {
                    addr: "a:1".into(),
                    source: io(),
                },
                true,
            ),
            (QueryError::Tls(io()), true),
            (QueryError::Timeout(Duration::from_secs(1)), true),
            (refused(503, Some("unavailable")), true),
            (refused(500, None), true),
            (refused(502, None), true),
            (refused(429, None), true),
            (refused(200, Some("timeout")), true),
            (refused(422, Some("canceled")), true),
            (refused(400, Some("bad_data")), false),
            (refused(422, Some("execution")), false),
            (refused(200, Some("bad_data")), false),
            (refused(401, None), false),
            (refused(404, None), false),
            (QueryError::TooLarge { limit: 1 }, false),
            (QueryError::Malformed("x".into()), false),
            (
                QueryError::ManySeries {
                    count: 2,
                    first: "{}".into(),
                    second: "{}".into(),
                },
                false,
            ),
        ];
        for (error, transient) in table {
            assert_eq!(error.transient(), transient, "{error}");
        }
        assert_eq!(
            refused(400, Some("bad_data")).to_string(),
            "Prometheus answered HTTP 400 (bad_data): m"
        );
        assert_eq!(
            refused(502, None).to_string(),
            "Prometheus answered HTTP 502: m"
        );
    }
}
