//! `rollout-plugin-check`'s integration tests, one module per feature.
//!
//! Run one feature with `cargo test -p rollout-plugin-check --test it -- MODULE::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod rules;
