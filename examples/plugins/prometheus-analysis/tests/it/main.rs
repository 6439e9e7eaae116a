//! prometheus-analysis's integration tests, one module per feature.
//!
//! Run one feature with `cargo test -p prometheus-analysis --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod answers;
mod binary;
mod common;
mod real;
mod tls;
