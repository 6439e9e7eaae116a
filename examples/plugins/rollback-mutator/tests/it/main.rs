//! rollback-mutator's integration tests, one module per feature.
//!
//! Run one feature with `cargo test -p rollback-mutator --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

mod grpc;
