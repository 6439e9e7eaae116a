//! Prometheus as the checks see it: a client of its range query API
//! ([`Prometheus`]), the decoding of its answers ([`Series`]) and the
//! kinds of failure ([`QueryError`]), bottom first: `error` → `answer` →
//! `client`.

mod answer;
mod client;
mod error;

pub use answer::{Series, decode};
pub use client::{ClientError, ClientOptions, Prometheus, RangeQuery};
pub use error::QueryError;
