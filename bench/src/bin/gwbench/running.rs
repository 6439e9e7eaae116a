//! Every process of a run: started together, checked between runs, read
//! for memory afterwards, and stopped in order.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use rollout_bench::compare::config::{gateway_config_yaml, padding_count, traced_gateway_env};
use rollout_bench::compare::machine;
use rollout_bench::compare::summary::{
    Environment, MemoryReport, ProxyMemory, RoundRecord, SpanReport, YardstickRun, calls_made,
};
use rollout_bench::compare::{PluginMode, TargetKind};
use rollout_bench::otlp::SpanReceiver;
use rollout_harness::procfs;
use tokio::process::Command;

use crate::launch::{Gateway, Plugin, Target, Traced, start_gateway, start_plugin};
use crate::plan::Plan;
use crate::yardsticks::{Proxy, addresses, start_yardstick};

/// How long the traced gateway gets to drain and flush its last spans.
pub(crate) const TRACED_STOP_GRACE: Duration = Duration::from_secs(20);

/// Every process of a run, stopped in this order when dropped: the
/// yardsticks, the gateways (the traced one flushing to its receiver), then
/// the plugins.
pub(crate) struct Running {
    pub(crate) yardsticks: Vec<Proxy>,
    pub(crate) gateway: Gateway,
    pub(crate) traced: Option<Traced>,
    pub(crate) plugins: BTreeMap<PluginMode, Plugin>,
}

impl Running {
    /// Fails, naming it, when any process of the run has exited.
    pub(crate) fn ensure_running(&mut self) -> anyhow::Result<()> {
        for plugin in self.plugins.values_mut() {
            plugin.guard.ensure_running()?;
        }
        self.gateway.guard.ensure_running()?;
        if let Some(traced) = &mut self.traced {
            traced.gateway.guard.ensure_running()?;
        }
        for guard in self.yardsticks.iter_mut().flat_map(|p| p.guards.iter_mut()) {
            guard.ensure_running()?;
        }
        Ok(())
    }

    /// Every target, in the order of the first round.
    pub(crate) fn targets(&self) -> Vec<Target> {
        let urls = |address: &dyn Fn(&Plugin) -> String| -> BTreeMap<PluginMode, String> {
            self.plugins
                .iter()
                .map(|(mode, plugin)| (*mode, address(plugin)))
                .collect()
        };
        let mut targets = vec![
            Target {
                kind: TargetKind::Direct,
                urls: urls(&|plugin| format!("http://{}", plugin.address)),
                proxy_pids: Vec::new(),
            },
            Target {
                kind: TargetKind::Gateway,
                urls: urls(&|_| format!("http://{}", self.gateway.address)),
                proxy_pids: vec![self.gateway.pid],
            },
        ];
        if let Some(traced) = &self.traced {
            targets.push(Target {
                kind: TargetKind::GatewayTraced,
                urls: urls(&|_| format!("http://{}", traced.gateway.address)),
                proxy_pids: vec![traced.gateway.pid],
            });
        }
        targets.extend(self.yardsticks.iter().map(Proxy::target));
        targets
    }
}

/// Starts the plugins, the gateways and the yardsticks; returns them with
/// their idle memory and the machine and tool versions.
pub(crate) async fn start_all(
    plan: &Plan,
    temp: &Path,
) -> anyhow::Result<(Running, MemoryReport, Environment)> {
    let args = &plan.args;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // 1. One plugin per mode: every target of a scenario calls the same one.
    // The first (the registry's first entry) also serves the padding
    // plugins' endpoints, one loopback alias each.
    let padding = padding_count(plan.modes.len(), args.registered);
    let mut plugins = BTreeMap::new();
    for (index, &mode) in plan.modes.iter().enumerate() {
        let aliases = if index == 0 { padding } else { 0 };
        plugins.insert(mode, start_plugin(plan, mode, aliases, temp).await?);
    }
    // 2. The gateway, with every plugin and the padded registry, and the
    // traced one.
    let config = write_registry(plan, &plugins, temp)?;
    let mut command = Command::new(&plan.gateway);
    // Nothing exported, whatever gwbench's environment says.
    command
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let gateway = start_gateway(args, command, &config, temp, "gateway").await?;
    let mut memory = MemoryReport {
        gateway_idle: Some(
            procfs::read_memory(gateway.pid).context("cannot read the gateway's memory")?,
        ),
        ..MemoryReport::default()
    };
    eprintln!(
        "gwbench: rollout-gateway ready on {} ({} plugins registered, admin {})",
        gateway.address,
        args.registered.max(plugins.len()),
        gateway.admin_address
    );
    let traced = start_traced(plan, &config, temp, &mut memory).await?;
    // 3. The yardsticks, each unless left out.
    let mut environment = Environment {
        cpus,
        cpu_model: machine::cpu_model(),
        kernel: machine::kernel(),
        clock_ticks_per_second: procfs::clock_ticks_per_second(),
        commit: git_commit(),
        ..Environment::default()
    };
    let yardsticks = start_yardsticks(plan, temp, &plugins, &mut memory, &mut environment).await?;
    let running = Running {
        yardsticks,
        gateway,
        traced,
        plugins,
    };
    Ok((running, memory, environment))
}

/// Starts each yardstick that is not left out; records its version (or why
/// it is left out) and its idle memory.
pub(crate) async fn start_yardsticks(
    plan: &Plan,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
    memory: &mut MemoryReport,
    environment: &mut Environment,
) -> anyhow::Result<Vec<Proxy>> {
    let cpus = environment.cpus;
    let mut yardsticks = Vec::new();
    for (kind, binary) in &plan.yardsticks {
        let binary = match binary {
            Ok(binary) => binary,
            Err(reason) => {
                eprintln!("gwbench: {} is skipped: {reason}", kind.display_name());
                let skipped = Some(reason.to_string());
                environment.yardsticks.insert(
                    *kind,
                    YardstickRun {
                        version: None,
                        skipped,
                    },
                );
                continue;
            }
        };
        let proxy = start_yardstick(*kind, binary, temp, plugins, cpus).await?;
        eprintln!(
            "gwbench: {} proxying on {} ({} processes)",
            proxy.version,
            addresses(&proxy.listen),
            proxy.pids.len()
        );
        let idle = Some(procfs::memory(&proxy.pids));
        let processes = proxy.pids.len();
        memory.yardsticks.insert(
            *kind,
            ProxyMemory {
                idle,
                after_runs: None,
                processes,
            },
        );
        let version = Some(proxy.version.clone());
        environment.yardsticks.insert(
            *kind,
            YardstickRun {
                version,
                skipped: None,
            },
        );
        yardsticks.push(proxy);
    }
    Ok(yardsticks)
}

/// Writes the gateway's registry: every plugin, padded to `--registered`.
pub(crate) fn write_registry(
    plan: &Plan,
    plugins: &BTreeMap<PluginMode, Plugin>,
    temp: &Path,
) -> anyhow::Result<PathBuf> {
    let config = temp.join("config.yaml");
    let registry: Vec<(&str, SocketAddr)> = plugins
        .iter()
        .map(|(mode, plugin)| (mode.plugin_name(), plugin.address))
        .collect();
    std::fs::write(
        &config,
        gateway_config_yaml(&registry, plan.args.registered),
    )
    .with_context(|| format!("cannot write {}", config.display()))?;
    Ok(config)
}

/// The traced gateway, the same as the other but exporting to a receiver in
/// here, when a traced scenario runs.
pub(crate) async fn start_traced(
    plan: &Plan,
    config: &Path,
    temp: &Path,
    memory: &mut MemoryReport,
) -> anyhow::Result<Option<Traced>> {
    if !plan.args.no_traced && plan.traced_scenarios.is_empty() {
        eprintln!(
            "gwbench: the traced gateway is left out: none of --traced-scenarios is among --scenarios"
        );
    }
    if plan.traced_scenarios.is_empty() {
        return Ok(None);
    }
    let receiver = SpanReceiver::start(SocketAddr::from(([127, 0, 0, 1], 0)))
        .context("cannot start the OTLP receiver")?;
    let endpoint = format!("http://{}", receiver.address);
    let (exporter_env, removed) = traced_gateway_env(
        // Not `env::vars`, which panics on a variable that is not UTF-8.
        std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        }),
        &endpoint,
    );
    let mut command = Command::new(&plan.gateway);
    for name in &removed {
        command.env_remove(name);
    }
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint);
    let gateway = start_gateway(&plan.args, command, config, temp, "gateway-traced").await?;
    memory.traced_gateway_idle =
        Some(procfs::read_memory(gateway.pid).context("cannot read the traced gateway's memory")?);
    eprintln!(
        "gwbench: rollout-gateway (traced) ready on {}, exporting spans to {endpoint}, in {}",
        gateway.address,
        plan.traced_scenarios.join(", ")
    );
    Ok(Some(Traced {
        gateway,
        receiver,
        exporter_env,
    }))
}

/// Every process's memory once the rounds are over.
pub(crate) fn read_memory_after_runs(
    running: &Running,
    memory: &mut MemoryReport,
) -> anyhow::Result<()> {
    memory.gateway_after_runs = Some(procfs::read_memory(running.gateway.pid)?);
    if let Some(traced) = &running.traced {
        memory.traced_gateway_after_runs = Some(procfs::read_memory(traced.gateway.pid)?);
    }
    for (mode, plugin) in &running.plugins {
        let after = Some(procfs::read_memory(plugin.pid)?);
        match mode {
            PluginMode::Echo => memory.plugin_after_runs = after,
            PluginMode::Mutate => memory.mutate_plugin_after_runs = after,
        }
    }
    for proxy in &running.yardsticks {
        if let Some(entry) = memory.yardsticks.get_mut(&proxy.kind) {
            entry.after_runs = Some(procfs::memory(&proxy.pids));
        }
    }
    Ok(())
}

/// Stops the traced gateway, so that its batch processor flushes what it
/// still holds, then compares the spans received with its calls.
pub(crate) async fn count_spans(
    running: &mut Running,
    records: &[RoundRecord],
) -> Option<SpanReport> {
    let traced = running.traced.as_mut()?;
    let flushed = traced.gateway.guard.stop(TRACED_STOP_GRACE).await;
    if !flushed {
        eprintln!(
            "gwbench: the traced gateway did not exit cleanly on SIGTERM; the span count may miss its last batch{}",
            traced.gateway.guard.log_tail()
        );
    }
    let counts = traced.receiver.counts();
    let report = SpanReport::new(
        calls_made(records, TargetKind::GatewayTraced),
        counts.spans,
        counts.exports,
        flushed,
        traced.exporter_env.clone(),
    );
    eprintln!(
        "gwbench: the OTLP receiver got {} spans in {} requests for {} calls through the traced gateway",
        report.spans_received, report.export_requests, report.calls
    );
    if let Some(warning) = report.shortfall_warning() {
        eprintln!("gwbench: WARNING: {warning}");
    }
    Some(report)
}

/// The commit of the checkout gwbench runs in, if it is one.
pub(crate) fn git_commit() -> Option<String> {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let commit = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && !commit.is_empty()).then_some(commit)
}
