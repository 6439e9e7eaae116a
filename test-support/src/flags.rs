//! The rule both binaries keep for their flags: each reads an environment
//! variable named after it, so that a Deployment can set any flag without
//! changing the container's arguments.

/// One flag of a command: the subcommand path it is under, its long name
/// and the environment variable it reads, if any.
#[derive(Debug)]
struct Flag {
    at: String,
    long: String,
    env: Option<String>,
}

/// Every long flag of `command` and of its subcommands, `--help` and
/// `--version` left out; `at` names `command` in [`Flag::at`].
fn flags(command: &clap::Command, at: &str) -> Vec<Flag> {
    let mut out = Vec::new();
    walk(command, at, &mut out);
    out
}

fn walk(command: &clap::Command, at: &str, out: &mut Vec<Flag>) {
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "help" | "version") {
            continue;
        }
        out.push(Flag {
            at: at.to_owned(),
            long: long.to_owned(),
            env: arg.get_env().map(|e| e.to_string_lossy().into_owned()),
        });
    }
    for sub in command.get_subcommands() {
        walk(sub, &format!("{at} {}", sub.get_name()), out);
    }
}

/// Asserts that every long flag of `command` and of its subcommands
/// (`--help` and `--version` left out) reads the variable
/// `prefix` + its long name upper-cased with `-` as `_` (`--max-connections`
/// under `ROLLOUT_GATEWAY_`: `ROLLOUT_GATEWAY_MAX_CONNECTIONS`), or the
/// variable `exceptions` gives for its long name; and that there are at
/// least `at_least` flags, so that a walk that finds none cannot pass.
pub fn assert_every_flag_has_env_var(
    command: &clap::Command,
    prefix: &str,
    exceptions: &[(&str, &str)],
    at_least: usize,
) {
    let all = flags(command, command.get_name());
    assert!(all.len() >= at_least, "{all:?}");
    for Flag { at, long, env } in all {
        let want = exceptions
            .iter()
            .find(|(flag, _)| *flag == long)
            .map(|(_, var)| (*var).to_owned())
            .unwrap_or_else(|| format!("{prefix}{}", long.to_uppercase().replace('-', "_")));
        assert_eq!(env.as_deref(), Some(want.as_str()), "{at} --{long}");
    }
}

#[cfg(test)]
mod tests {
    use clap::{Arg, Command};

    use super::assert_every_flag_has_env_var;

    /// `app` with `--max-things` reading `env`, and a subcommand `run` with
    /// `--pod-name` reading `POD_NAME`.
    fn command(env: Option<&'static str>) -> Command {
        let mut flag = Arg::new("max-things").long("max-things");
        if let Some(env) = env {
            flag = flag.env(env);
        }
        Command::new("app").arg(flag).subcommand(
            Command::new("run").arg(Arg::new("pod-name").long("pod-name").env("POD_NAME")),
        )
    }

    #[test]
    fn flags_named_after_their_variables_pass() {
        let exceptions = [("pod-name", "POD_NAME")];
        assert_every_flag_has_env_var(&command(Some("APP_MAX_THINGS")), "APP_", &exceptions, 2);
    }

    #[test]
    #[should_panic(expected = "app --max-things")]
    fn a_flag_without_a_variable_fails() {
        let exceptions = [("pod-name", "POD_NAME")];
        assert_every_flag_has_env_var(&command(None), "APP_", &exceptions, 2);
    }

    #[test]
    #[should_panic(expected = "app run --pod-name")]
    fn a_subcommand_flag_under_another_name_fails() {
        assert_every_flag_has_env_var(&command(Some("APP_MAX_THINGS")), "APP_", &[], 2);
    }

    #[test]
    #[should_panic]
    fn fewer_flags_than_expected_fail() {
        let exceptions = [("pod-name", "POD_NAME")];
        assert_every_flag_has_env_var(&command(Some("APP_MAX_THINGS")), "APP_", &exceptions, 3);
    }
}
