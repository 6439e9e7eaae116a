//! Starting the plugins and the gateways, and what the load is aimed at.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use rollout_bench::compare::{PluginMode, Scenario, TargetKind};
use rollout_bench::otlp::SpanReceiver;
use rollout_harness::process::{ChildGuard, wait_for_http_ok};
use tokio::process::Command;

use crate::args::Args;
use crate::plan::Plan;

/// How long a process may take to print its address or become ready.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running gateway.
pub(crate) struct Gateway {
    pub(crate) guard: ChildGuard,
    /// gRPC address.
    pub(crate) address: String,
    pub(crate) admin_address: String,
    pub(crate) pid: u32,
}

/// The traced gateway and the receiver of its spans (dropped in this
/// order: the gateway flushes to the receiver as it stops).
pub(crate) struct Traced {
    pub(crate) gateway: Gateway,
    pub(crate) receiver: SpanReceiver,
    /// The `OTEL_*` variables it runs with.
    pub(crate) exporter_env: BTreeMap<String, String>,
}

/// Starts `command` (the gateway binary, its environment set) with the
/// registry `config` and waits until `/readyz` says 200; `name` names the
/// process and its log file.
pub(crate) async fn start_gateway(
    args: &Args,
    mut command: Command,
    config: &Path,
    temp: &Path,
    name: &str,
) -> anyhow::Result<Gateway> {
    command
        .arg("--config")
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .env("RUST_LOG", &args.gateway_log);
    let (mut guard, stdout) = ChildGuard::spawn(
        &if name == "gateway" {
            "rollout-gateway".to_owned()
        } else {
            format!("rollout-gateway ({name})")
        },
        command,
        &temp.join(format!("{name}.log")),
    )?;
    let line = guard
        .wait_for_line(stdout, "rollout-gateway listening", START_TIMEOUT)
        .await?;
    let address = field(&line, "grpc")?;
    let admin_address = field(&line, "admin")?;
    wait_for_http_ok(&mut guard, &admin_address, "/readyz", START_TIMEOUT).await?;
    let pid = guard.pid()?;
    Ok(Gateway {
        guard,
        address,
        admin_address,
        pid,
    })
}

/// A target of the load: where it is and which processes serve it.
pub(crate) struct Target {
    pub(crate) kind: TargetKind,
    /// Its address for each plugin mode (proxies have one route per plugin).
    pub(crate) urls: BTreeMap<PluginMode, String>,
    /// The proxy's processes, for CPU time (none for direct).
    pub(crate) proxy_pids: Vec<u32>,
}

impl Target {
    /// Whether the target runs in `scenario` (the traced gateway runs only in
    /// the traced scenarios).
    pub(crate) fn runs_in(&self, scenario: &Scenario, traced_scenarios: &[String]) -> bool {
        self.urls.contains_key(&scenario.plugin_mode)
            && (self.kind != TargetKind::GatewayTraced || traced_scenarios.contains(&scenario.name))
    }
}

/// A running echo plugin.
pub(crate) struct Plugin {
    pub(crate) guard: ChildGuard,
    pub(crate) address: SocketAddr,
    pub(crate) pid: u32,
}

/// Starts `echo-plugin` in `mode`, named as the gateway's registry names it,
/// on 127.0.0.1 and `aliases` loopback aliases (the padding plugins'
/// endpoints).
pub(crate) async fn start_plugin(
    plan: &Plan,
    mode: PluginMode,
    aliases: usize,
    temp: &Path,
) -> anyhow::Result<Plugin> {
    let mut command = Command::new(&plan.echo_plugin);
    command
        .args(["--listen", "127.0.0.1:0"])
        .args(["--mode", mode.echo_mode_arg()])
        .args(["--name", mode.plugin_name()])
        .args(["--threads", &plan.args.plugin_threads.to_string()])
        .args(["--loopback-aliases", &aliases.to_string()]);
    let name = format!("echo-plugin --mode {}", mode.echo_mode_arg());
    let (mut guard, stdout) = ChildGuard::spawn(
        &name,
        command,
        &temp.join(format!("echo-plugin-{}.log", mode.echo_mode_arg())),
    )?;
    let line = guard
        .wait_for_line(stdout, "echo-plugin listening", START_TIMEOUT)
        .await?;
    let address: SocketAddr = field(&line, "grpc")?
        .parse()
        .with_context(|| format!("bad address in {line:?}"))?;
    let pid = guard.pid()?;
    if aliases > 0 {
        let aliases = field(&line, "aliases")?;
        eprintln!("gwbench: {name} listening on {address} and the same port of {aliases}");
    } else {
        eprintln!("gwbench: {name} listening on {address}");
    }
    Ok(Plugin {
        guard,
        address,
        pid,
    })
}

/// A port that is free now (nginx cannot be told to pick one itself).
pub(crate) fn free_port() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot find a free port")?;
    Ok(listener.local_addr()?)
}

/// `KEY=VALUE` out of a `… listening grpc=ADDR admin=ADDR` line.
pub(crate) fn field(line: &str, key: &str) -> anyhow::Result<String> {
    line.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
        .map(str::to_owned)
        .with_context(|| format!("no {key}=ADDR in {line:?}"))
}

pub(crate) fn set_world_readable(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("cannot set the permissions of {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use rollout_harness::procfs::Memory;

    use super::*;

    #[test]
    fn address_fields() {
        let line = "rollout-gateway listening grpc=127.0.0.1:4000 admin=127.0.0.1:4001";
        assert_eq!(field(line, "grpc").expect("present"), "127.0.0.1:4000");
        assert_eq!(field(line, "admin").expect("present"), "127.0.0.1:4001");
        assert!(field("echo-plugin listening", "grpc").is_err());
    }

    #[test]
    fn memory_is_summed() {
        let a = Memory {
            rss_kib: 1,
            hwm_kib: 2,
        };
        assert_eq!(
            a + a,
            Memory {
                rss_kib: 2,
                hwm_kib: 4
            }
        );
    }
}
