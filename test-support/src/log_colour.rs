//! Whether a binary's text logs are coloured: only on a terminal, and never
//! with `NO_COLOR` set to a non-empty value; a pipe (as in every pod) gets
//! plain lines.
//!
//! The log subscriber is global to a process, so the logging half runs in a
//! child: the test binary started again with only its child test selected,
//! its stderr a pipe, or a terminal made by util-linux's `script` (a
//! pseudo-terminal; `script` is in Debian's essential bsdutils). A crate's
//! test file declares a [`Child`], a child test that calls
//! [`Child::log_if_child`] with its own logging set-up, and the two checks.

use std::process::{Command, Output, Stdio};

/// The line the child logs.
const MESSAGE: &str = "plugin failed";

/// The child test of one test binary.
#[derive(Debug, Clone, Copy)]
pub struct Child {
    /// The child test's name as `--exact` selects it.
    pub test: &'static str,
    /// Set in the child's environment; without it the child test does
    /// nothing.
    pub env: &'static str,
}

impl Child {
    /// In the child only: sets up logging with `init`, then logs one warning
    /// inside a span.
    pub fn log_if_child(&self, init: impl FnOnce()) {
        if std::env::var_os(self.env).is_none() {
            return;
        }
        init();
        let span = tracing::info_span!("call", hook = "BeginRollout");
        let _entered = span.enter();
        tracing::warn!(plugin = "smoke-test", "{MESSAGE}");
    }

    /// Asserts that the child's line on a pipe, `NO_COLOR` unset, has no
    /// escape codes and still its level and fields.
    pub fn assert_plain_on_a_pipe(&self) {
        // NO_COLOR unset: the pipe alone turns colour off.
        let line = logged_line(&self.run(false, None), false);
        assert!(
            !line.contains('\u{1b}'),
            "ANSI escape codes in a log written to a pipe: {line:?}"
        );
        assert!(line.contains("WARN"), "{line:?}");
        assert!(line.contains("plugin=\"smoke-test\""), "{line:?}");
    }

    /// Asserts that the child's line on a terminal is coloured with
    /// `NO_COLOR` unset or empty, and plain with `NO_COLOR=1`.
    pub fn assert_coloured_on_a_terminal_unless_no_color(&self) {
        let coloured = logged_line(&self.run(true, None), true);
        assert!(
            coloured.contains('\u{1b}'),
            "no colour on a terminal: {coloured:?}"
        );
        let empty = logged_line(&self.run(true, Some("")), true);
        assert!(
            empty.contains('\u{1b}'),
            "an empty NO_COLOR turned colour off: {empty:?}"
        );
        let plain = logged_line(&self.run(true, Some("1")), true);
        assert!(
            !plain.contains('\u{1b}'),
            "colour on a terminal despite NO_COLOR=1: {plain:?}"
        );
        assert!(plain.contains("WARN"), "{plain:?}");
    }

    /// The child, on a pipe or on a terminal, with `NO_COLOR` as given.
    fn run(&self, on_terminal: bool, no_color: Option<&str>) -> Output {
        let exe = std::env::current_exe().expect("the test binary");
        let args = ["--exact", self.test, "--nocapture", "--test-threads=1"];
        let mut command = if on_terminal {
            let exe = exe.to_str().expect("a UTF-8 path");
            assert!(
                !exe.contains(['\'', '"', '\\', ' ']),
                "the test binary's path needs no shell quoting: {exe}"
            );
            // script -q: no banner; -e: its exit status is the child's; -c:
            // the command, run by a shell on a new pseudo-terminal;
            // /dev/null: no typescript file. What the child writes to the
            // terminal comes out on script's stdout.
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
            .env(self.env, "1")
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
