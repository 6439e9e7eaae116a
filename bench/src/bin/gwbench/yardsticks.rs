//! Starting each yardstick (the forwarders, nginx, HAProxy, nghttpx, Envoy)
//! in front of the plugins, with its configuration and version.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use rollout_bench::compare::config::{
    NginxSettings, Route, haproxy_config, nginx_config, parse_haproxy_version, parse_nginx_version,
};
use rollout_bench::compare::yardsticks::{
    envoy_config, nghttpx_config, parse_envoy_version, parse_nghttpx_version,
};
use rollout_bench::compare::{PluginMode, TargetKind};
use rollout_harness::process::{self as processes, ChildGuard, wait_for_port};
use rollout_harness::procfs;
use tokio::process::Command;

use crate::launch::{Plugin, START_TIMEOUT, Target, field, free_port, set_world_readable};

/// A running yardstick: its processes, where it listens for each plugin
/// mode, and its version.
pub(crate) struct Proxy {
    pub(crate) kind: TargetKind,
    pub(crate) guards: Vec<ChildGuard>,
    /// Where it listens for each plugin mode.
    pub(crate) listen: BTreeMap<PluginMode, SocketAddr>,
    /// Its processes (master and workers, or one per route), as found once
    /// it runs.
    pub(crate) pids: Vec<u32>,
    pub(crate) version: String,
}

impl Proxy {
    pub(crate) fn target(&self) -> Target {
        Target {
            kind: self.kind,
            urls: self
                .listen
                .iter()
                .map(|(mode, address)| (*mode, format!("http://{address}")))
                .collect(),
            proxy_pids: self.pids.clone(),
        }
    }
}

/// One route per plugin: a free port to listen on and the plugin behind it.
pub(crate) fn routes(
    plugins: &BTreeMap<PluginMode, Plugin>,
) -> anyhow::Result<(Vec<Route>, BTreeMap<PluginMode, SocketAddr>)> {
    let mut routes = Vec::new();
    let mut listen = BTreeMap::new();
    for (mode, plugin) in plugins {
        let route = Route {
            listen: free_port()?,
            upstream: plugin.address,
        };
        listen.insert(*mode, route.listen);
        routes.push(route);
    }
    Ok((routes, listen))
}

/// Starts yardstick `kind` from `binary` in front of `plugins`.
pub(crate) async fn start_yardstick(
    kind: TargetKind,
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
    cpus: usize,
) -> anyhow::Result<Proxy> {
    match kind {
        TargetKind::Nginx => start_nginx(binary, temp, plugins).await,
        TargetKind::Haproxy => start_haproxy(binary, temp, plugins, cpus).await,
        TargetKind::Nghttpx => start_nghttpx(binary, temp, plugins, cpus).await,
        TargetKind::Envoy => start_envoy(binary, temp, plugins, cpus).await,
        TargetKind::H2Forwarder | TargetKind::TonicForwarder => {
            start_forwarders(kind, binary, temp, plugins).await
        }
        TargetKind::Direct | TargetKind::Gateway | TargetKind::GatewayTraced => {
            bail!("{kind} is no yardstick")
        }
    }
}

/// The first line a `VERSION_FLAG` of `binary` prints, on stdout or stderr.
pub(crate) fn version_text(binary: &Path, flag: &str) -> anyhow::Result<String> {
    let output = std::process::Command::new(binary)
        .arg(flag)
        .output()
        .with_context(|| format!("cannot run {} {flag}", binary.display()))?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Ok(text.trim().to_owned())
}

/// Starts nginx as a gRPC proxy with one route per plugin.
pub(crate) async fn start_nginx(
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
) -> anyhow::Result<Proxy> {
    // `nginx -v` writes to stderr.
    let version_text = version_text(binary, "-v")?;
    let version = version_text
        .strip_prefix("nginx version: ")
        .unwrap_or(&version_text)
        .to_owned();
    let prefix = temp.join("nginx");
    std::fs::create_dir_all(&prefix)
        .with_context(|| format!("cannot create {}", prefix.display()))?;
    set_world_readable(&prefix)?;
    let (routes, listen) = routes(plugins)?;
    let conf = prefix.join("nginx.conf");
    let settings = NginxSettings {
        prefix: &prefix,
        routes: &routes,
        version: parse_nginx_version(&version_text),
    };
    std::fs::write(&conf, nginx_config(&settings))
        .with_context(|| format!("cannot write {}", conf.display()))?;

    let mut command = Command::new(binary);
    command.arg("-p").arg(&prefix).arg("-c").arg(&conf);
    let (mut guard, _stdout) = ChildGuard::spawn("nginx", command, &prefix.join("stderr.log"))?;
    for route in &routes {
        wait_for_port(&mut guard, &route.listen.to_string(), START_TIMEOUT)
            .await
            .map_err(|error| {
                anyhow!(
                    "{error:#}{}",
                    processes::log_tail(&prefix.join("error.log"))
                )
            })
            .context("nginx did not start (pass --no-nginx to leave it out)")?;
    }
    // The workers start after the master binds; wait for them so the idle
    // memory reading includes them.
    let master = guard.pid()?;
    for _ in 0..100 {
        if !procfs::children(master)?.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pids = procfs::process_group(master)?;
    Ok(Proxy {
        kind: TargetKind::Nginx,
        guards: vec![guard],
        listen,
        pids,
        version,
    })
}

/// Starts HAProxy in the foreground (`-db`: one process, `threads`
/// threads) as a gRPC proxy with one route per plugin.
pub(crate) async fn start_haproxy(
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
    threads: usize,
) -> anyhow::Result<Proxy> {
    let version_text = version_text(binary, "-v")?;
    let version = parse_haproxy_version(&version_text)
        .unwrap_or_else(|| version_text.lines().next().unwrap_or("HAProxy").to_owned());
    let (routes, listen) = routes(plugins)?;
    let conf = temp.join("haproxy.cfg");
    std::fs::write(&conf, haproxy_config(&routes, threads))
        .with_context(|| format!("cannot write {}", conf.display()))?;
    let mut command = Command::new(binary);
    command.arg("-db").arg("-f").arg(&conf);
    let (mut guard, _stdout) = ChildGuard::spawn("haproxy", command, &temp.join("haproxy.log"))?;
    for route in &routes {
        wait_for_port(&mut guard, &route.listen.to_string(), START_TIMEOUT)
            .await
            .context("HAProxy did not start (pass --no-haproxy to leave it out)")?;
    }
    // One process with threads; should a master-worker setup ever be used,
    // its workers count too.
    let pids = procfs::process_group(guard.pid()?)?;
    Ok(Proxy {
        kind: TargetKind::Haproxy,
        guards: vec![guard],
        listen,
        pids,
        version,
    })
}

/// Starts one nghttpx per plugin (nghttpx routes by host and path, not by
/// port), each with `workers` worker threads.
pub(crate) async fn start_nghttpx(
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
    workers: usize,
) -> anyhow::Result<Proxy> {
    let version_text = version_text(binary, "--version")?;
    let version = parse_nghttpx_version(&version_text).unwrap_or(version_text);
    let (routes, listen) = routes(plugins)?;
    let (mut guards, mut pids) = (Vec::new(), Vec::new());
    for (index, route) in routes.iter().enumerate() {
        let conf = temp.join(format!("nghttpx-{index}.conf"));
        let log = temp.join(format!("nghttpx-{index}.log"));
        std::fs::write(&conf, nghttpx_config(route, workers, &log))
            .with_context(|| format!("cannot write {}", conf.display()))?;
        let mut command = Command::new(binary);
        command.arg(format!("--conf={}", conf.display()));
        let (mut guard, _stdout) = ChildGuard::spawn(
            "nghttpx",
            command,
            &temp.join(format!("nghttpx-{index}.out")),
        )?;
        wait_for_port(&mut guard, &route.listen.to_string(), START_TIMEOUT)
            .await
            .map_err(|error| anyhow!("{error:#}{}", processes::log_tail(&log)))
            .context("nghttpx did not start (pass --no-nghttpx to leave it out)")?;
        // The master forks its worker process; both count.
        let master = guard.pid()?;
        for _ in 0..100 {
            if !procfs::children(master)?.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        pids.extend(procfs::process_group(master)?);
        guards.push(guard);
    }
    Ok(Proxy {
        kind: TargetKind::Nghttpx,
        guards,
        listen,
        pids,
        version,
    })
}

/// Starts Envoy with one listener and cluster per plugin and `concurrency`
/// worker threads.
pub(crate) async fn start_envoy(
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
    concurrency: usize,
) -> anyhow::Result<Proxy> {
    let version_text = version_text(binary, "--version")?;
    let version = parse_envoy_version(&version_text).unwrap_or(version_text);
    let (routes, listen) = routes(plugins)?;
    let conf = temp.join("envoy.json");
    std::fs::write(&conf, envoy_config(&routes))
        .with_context(|| format!("cannot write {}", conf.display()))?;
    let mut command = Command::new(binary);
    command
        .arg("-c")
        .arg(&conf)
        .args(["--concurrency", &concurrency.max(1).to_string()])
        .args(["--log-level", "warn", "--disable-hot-restart"]);
    let (mut guard, _stdout) = ChildGuard::spawn("envoy", command, &temp.join("envoy.log"))?;
    for route in &routes {
        wait_for_port(&mut guard, &route.listen.to_string(), START_TIMEOUT)
            .await
            .context("Envoy did not start (pass --no-envoy to leave it out)")?;
    }
    let pids = procfs::process_group(guard.pid()?)?;
    Ok(Proxy {
        kind: TargetKind::Envoy,
        guards: vec![guard],
        listen,
        pids,
        version,
    })
}

/// Starts one forwarder (`h2-forwarder` or `tonic-forwarder`, this build's)
/// per plugin: each takes one upstream.
pub(crate) async fn start_forwarders(
    kind: TargetKind,
    binary: &Path,
    temp: &Path,
    plugins: &BTreeMap<PluginMode, Plugin>,
) -> anyhow::Result<Proxy> {
    let (mut guards, mut pids, mut listen) = (Vec::new(), Vec::new(), BTreeMap::new());
    for (mode, plugin) in plugins {
        let mut command = Command::new(binary);
        command.args(["--upstream", &plugin.address.to_string()]);
        let log = temp.join(format!("{kind}-{}.log", mode.plugin_name()));
        let (mut guard, stdout) = ChildGuard::spawn(kind.as_str(), command, &log)?;
        let line = guard
            .wait_for_line(stdout, &format!("{kind} listening"), START_TIMEOUT)
            .await?;
        let address: SocketAddr = field(&line, "grpc")?
            .parse()
            .with_context(|| format!("bad address in {line:?}"))?;
        listen.insert(*mode, address);
        pids.push(guard.pid()?);
        guards.push(guard);
    }
    Ok(Proxy {
        kind,
        guards,
        listen,
        pids,
        version: format!("{kind} (this build)"),
    })
}

/// `echo=ADDR, mutate=ADDR`.
pub(crate) fn addresses(listen: &BTreeMap<PluginMode, SocketAddr>) -> String {
    listen
        .iter()
        .map(|(mode, address)| format!("{}={address}", mode.plugin_name()))
        .collect::<Vec<_>>()
        .join(", ")
}
