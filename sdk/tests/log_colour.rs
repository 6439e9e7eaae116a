//! A plugin's text logs (`cli::init_tracing`) are coloured only on a
//! terminal, and never with `NO_COLOR` set: a pipe (as in every pod) gets
//! plain lines. The child and the checks are rollout-test-support's
//! `log_colour`.

#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

use rollout_plugin_sdk::cli;
use rollout_test_support::log_colour::Child;

const CHILD: Child = Child {
    test: "child_logs_through_init_tracing",
    env: "ROLLOUT_PLUGIN_SDK_LOG_COLOUR_CHILD",
};

#[test]
fn child_logs_through_init_tracing() {
    CHILD.log_if_child(cli::init_tracing);
}

#[test]
fn text_logs_to_a_pipe_are_plain() {
    CHILD.assert_plain_on_a_pipe();
}

#[test]
fn text_logs_on_a_terminal_are_coloured_unless_no_color() {
    CHILD.assert_coloured_on_a_terminal_unless_no_color();
}
