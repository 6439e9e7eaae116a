//! Text logs are coloured only on a terminal, and never with `NO_COLOR` set:
//! a pipe (as in every pod) gets plain lines.
//!
//! The subscriber is global to a process, so the logging half runs in a
//! child: this test binary started again with only `child_logs_through_init`
//! selected, its stderr a pipe, or a terminal made by util-linux's `script`
//! (a pseudo-terminal; `script` is in Debian's essential bsdutils).

use std::process::{Command, Output, Stdio};

use rollout_telemetry::logs::{self, LogFormat};

/// Set in the child's environment; without it the child test does nothing.
const CHILD: &str = "ROLLOUT_TELEMETRY_LOG_COLOUR_CHILD";

/// The line the child logs.
const MESSAGE: &str = "plugin failed";

#[test]
fn child_logs_through_init() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    logs::init(LogFormat::Text);
    let span = tracing::info_span!("call", hook = "BeginRollout");
    let _entered = span.enter();
    tracing::warn!(plugin = "smoke-test", "{MESSAGE}");
}

/// The child, on a pipe or on a terminal, with `NO_COLOR` as given.
fn run_child(on_terminal: bool, no_color: Option<&str>) -> Output {
    let exe = std::env::current_exe().expect("the test binary");
    let args = [
        "--exact",
        "child_logs_through_init",
        "--nocapture",
        "--test-threads=1",
    ];
    let mut command = if on_terminal {
        let exe = exe.to_str().expect("a UTF-8 path");
        assert!(
            !exe.contains(['\'', '"', '\\', ' ']),
            "the test binary's path needs no shell quoting: {exe}"
        );
        // script -q: no banner; -e: its exit status is the child's; -c: the
        // command, run by a shell on a new pseudo-terminal; /dev/null: no
        // typescript file. What the child writes to the terminal comes out
        // on script's stdout.
        let mut c = Command::new("script");
        c.args([
            "-q",
            "-e",
            "-c",
            &format!("{exe} {}", args.join(" ")),
            "/dev/null",
        ]);
        c
    } else {
        let mut c = Command::new(exe);
        c.args(args);
        c
    };
    command
        .env(CHILD, "1")
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    if let Some(value) = no_color {
        command.env("NO_COLOR", value);
    }
    let out = command
        .output()
        .expect("run the child (on a terminal: util-linux's `script`)");
    assert!(out.status.success(), "child failed: {out:?}");
    out
}

/// The child's log line, from its stderr (a pipe) or its terminal.
fn logged_line(out: &Output, on_terminal: bool) -> String {
    let text = String::from_utf8_lossy(if on_terminal {
        &out.stdout
    } else {
        &out.stderr
    })
    .into_owned();
    text.lines()
        .find(|l| l.contains(MESSAGE))
        .unwrap_or_else(|| panic!("the child's log line, in {text:?}"))
        .to_owned()
}

#[test]
fn text_logs_to_a_pipe_are_plain() {
    // NO_COLOR unset: the pipe alone turns colour off.
    let line = logged_line(&run_child(false, None), false);
    assert!(
        !line.contains('\u{1b}'),
        "ANSI escape codes in a log written to a pipe: {line:?}"
    );
    assert!(line.contains("WARN"), "{line:?}");
    assert!(line.contains("plugin=\"smoke-test\""), "{line:?}");
}

#[test]
fn text_logs_on_a_terminal_are_coloured_unless_no_color() {
    let coloured = logged_line(&run_child(true, None), true);
    assert!(
        coloured.contains('\u{1b}'),
        "no colour on a terminal: {coloured:?}"
    );
    let empty = logged_line(&run_child(true, Some("")), true);
    assert!(
        empty.contains('\u{1b}'),
        "an empty NO_COLOR turned colour off: {empty:?}"
    );
    let plain = logged_line(&run_child(true, Some("1")), true);
    assert!(
        !plain.contains('\u{1b}'),
        "colour on a terminal despite NO_COLOR=1: {plain:?}"
    );
    assert!(plain.contains("WARN"), "{plain:?}");
}
