//! The command line of the rollout controller (`rollout-controller`), on
//! top of its library (`rollout_controller`): what a person runs besides
//! the controller itself.
//!
//! [`sim`] is the simulator (`rollout-controller simulate`): one
//! ManifestWorkReplicaSet rolled out over an in-memory fleet of simulated
//! clusters, through the controller's own rollout step and the real gateway
//! and plugins. [`view`] draws one ManifestWorkReplicaSet's rollout live
//! from the hub (`rollout-controller get`, `kubectl mwrs get`), with the
//! text formatting it shares with the simulator in [`format`](mod@format).
//! [`dashboard`] serves every set's view on a web page, updated live
//! (`rollout-controller dashboard`). The binary parses the flags of every
//! command and calls these, or the controller's library for `run`, `plan`,
//! `crd` and the control verbs.
//!
//! # Entry points
//!
//! - `simulate`: [`sim::simulate`] with [`sim::SimulateOptions`] (the
//!   rollout itself is [`sim::run`], for tests with scripted hooks);
//! - `get`: [`view::hub::get`] with [`view::hub::GetOptions`];
//! - `dashboard`: [`dashboard::dashboard`] with
//!   [`dashboard::DashboardOptions`] (tests bring their own client and
//!   listener to [`dashboard::serve`]).
//!
//! Errors are typed; [`format::error_chain`] says one and its causes on one
//! line.
//!
//! # Public surface
//!
//! An item is `pub` only when something outside the library names it: the
//! binary, the integration tests (`tests/it`) or the demo crate. Besides
//! the entry points above, the tests drive the live view ([`view::build`],
//! [`view::render`], [`view::hub::watch`]) and the simulator's steps
//! ([`sim::run`] with a [`sim::Report`]). Everything else is `pub(crate)`,
//! and the modules below these are private or crate-private.

#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]
// A `pub` item must be reachable from the crate root, and a type a caller
// can get must be one it can name; anything else is `pub(crate)`.
#![warn(unreachable_pub, unnameable_types)]
// The docs describe the internals for contributors too (`cargo doc
// --document-private-items`), so public items' docs may link to
// crate-private ones.
#![allow(rustdoc::private_intra_doc_links)]

pub mod dashboard;
pub mod format;
pub mod sim;
pub mod view;
