//! smoke-test's integration tests, one module per feature.
//!
//! Run one feature with `cargo test -p smoke-test --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod grpc;
