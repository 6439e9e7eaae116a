//! Text logs (`logs::init` with the text format) are coloured only on a
//! terminal, and never with `NO_COLOR` set: a pipe (as in every pod) gets
//! plain lines. The child and the checks are rollout-test-support's
//! `log_colour`.

#![allow(
    clippy::too_many_lines,
    reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
)]

use rollout_telemetry::logs::{self, LogFormat};
use rollout_test_support::log_colour::Child;

const CHILD: Child = Child {
    test: "child_logs_through_init",
    env: "ROLLOUT_TELEMETRY_LOG_COLOUR_CHILD",
};

#[test]
fn child_logs_through_init() {
    CHILD.log_if_child(|| logs::init(LogFormat::Text));
}

#[test]
fn text_logs_to_a_pipe_are_plain() {
    CHILD.assert_plain_on_a_pipe();
}

#[test]
fn text_logs_on_a_terminal_are_coloured_unless_no_color() {
    CHILD.assert_coloured_on_a_terminal_unless_no_color();
}
