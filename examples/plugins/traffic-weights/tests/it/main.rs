//! traffic-weights' integration tests, one module per feature.
//!
//! Run one feature with `cargo test -p traffic-weights --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod grpc;
