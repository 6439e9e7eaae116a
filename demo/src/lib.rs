//! The demo's moving parts, shared by the `demo` binary and the end-to-end
//! tests: where the binaries are, the gateway's registry (a pipeline of the
//! three example plugins), starting the plugins and the gateway as
//! processes on loopback (port 0), each stopped when its guard is dropped,
//! and the rollout's `simulate` arguments, with smoke-test's parameters as
//! the rollout's plugin configuration ([`RolloutParams`]).
#![cfg_attr(
    test,
    allow(
        clippy::too_many_lines,
        reason = "the function-size limit holds outside tests (CONTRIBUTING.md)"
    )
)]

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use rollout_harness::process::{ChildGuard, wait_for_http_ok};
use tokio::process::Command;

pub mod jaeger;

/// The gateway pipeline the demo rolls out with.
pub const PIPELINE: &str = "safe-rollout";

/// The three example plugins, in the pipeline's order: the binary's name
/// and what it does in the demo.
pub const PLUGINS: [(&str, &str); 3] = [
    (
        "traffic-weights",
        "MutateManifestWork: writes each cluster's position and canary weight",
    ),
    (
        "smoke-test",
        "ValidateRolloutCompletion: INPROGRESS for a soak, then SUCCEEDED (FAILED on the rollout's failClusters)",
    ),
    (
        "rollback-mutator",
        "MutateManifestWork while aborting: marks the rollback, skips the Argo canary steps",
    ),
];

/// Where the workspace's binaries are: one directory, such as
/// `target/release`.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// The binaries in `dir`.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Binaries {
        Binaries { dir: dir.into() }
    }

    /// The binaries next to the running one (`cargo build --workspace`
    /// puts them all in one directory).
    pub fn next_to_this_one() -> anyhow::Result<Binaries> {
        let exe = std::env::current_exe().context("cannot find the demo's own path")?;
        let dir = exe
            .parent()
            .context("the demo's path has no directory")?
            .to_owned();
        Ok(Binaries { dir })
    }

    /// The path of the binary `name`; fails, saying how to build it, when
    /// it is missing.
    pub fn path(&self, name: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(name);
        if !path.exists() {
            bail!(
                "{} is missing; build everything first: cargo build --release --workspace",
                path.display()
            );
        }
        Ok(path)
    }
}

/// A process that printed its address.
pub struct Started {
    /// Stops it when dropped.
    pub guard: ChildGuard,
    /// Its gRPC address.
    pub grpc: String,
    /// Its admin address, if it has one.
    pub admin: Option<String>,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("grpc", &self.grpc)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

/// Starts `program args`, its stderr in `dir/NAME.log`, and waits for the
/// line starting with `prefix` (`NAME listening grpc=ADDR …`). Children
/// inherit the environment (so `OTEL_*` reaches them), with `RUST_LOG`
/// set to `warn` unless it is set.
pub async fn start(
    name: &str,
    program: &Path,
    args: &[&str],
    dir: &Path,
    prefix: &str,
) -> anyhow::Result<Started> {
    start_with_env(name, program, args, dir, prefix, &[]).await
}

/// [`start`], with `env` set for the process besides what it inherits.
pub async fn start_with_env(
    name: &str,
    program: &Path,
    args: &[&str],
    dir: &Path,
    prefix: &str,
    env: &[(String, String)],
) -> anyhow::Result<Started> {
    let mut command = Command::new(program);
    command.args(args);
    command.envs(env.iter().map(|(k, v)| (k, v)));
    if std::env::var_os("RUST_LOG").is_none() {
        command.env("RUST_LOG", "warn");
    }
    let (mut guard, stdout) = ChildGuard::spawn(name, command, &dir.join(format!("{name}.log")))?;
    let line = guard
        .wait_for_line(stdout, prefix, Duration::from_secs(20))
        .await?;
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .map(str::to_string)
    };
    let grpc = field("grpc=").with_context(|| format!("{name} printed no address: {line}"))?;
    Ok(Started {
        guard,
        grpc,
        admin: field("admin="),
    })
}

/// Fails with a clear message when `addr` cannot be listened on (a port
/// taken by another process). Port 0 always passes.
pub fn check_port(addr: &str, what: &str) -> anyhow::Result<()> {
    let parsed: SocketAddr = addr
        .parse()
        .with_context(|| format!("{what}: {addr:?} is not an address such as 127.0.0.1:10843"))?;
    if parsed.port() == 0 {
        return Ok(());
    }
    match TcpListener::bind(parsed) {
        Ok(listener) => {
            drop(listener);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => bail!(
            "{what}: port {} is taken (another rollout-gateway, or the previous demo still running?). \
             Stop that process or choose another address ({what} 127.0.0.1:0 picks a free port).",
            parsed.port()
        ),
        Err(e) => bail!("{what}: cannot listen on {addr}: {e}"),
    }
}

/// The demo's fleet flags, checked before any process starts: at least one
/// cluster, and every cluster of `fail` (the names of `--fail`, "none"
/// removed) in the fleet of `clusters`, named as `simulate` names them.
pub fn check_fleet(clusters: usize, fail: &[String]) -> anyhow::Result<()> {
    if clusters == 0 {
        bail!("--clusters must be at least 1");
    }
    let names = rollout_console::sim::fleet::cluster_names(clusters);
    if let Some(unknown) = fail.iter().find(|c| !names.contains(c)) {
        let first = names.first().map_or("", String::as_str);
        let last = names.last().map_or("", String::as_str);
        bail!(
            "--fail {unknown}: no such cluster in a fleet of {clusters} ({first} … {last}); \
             name one of them, or --fail none for a rollout without a failure"
        );
    }
    Ok(())
}

/// The gateway's registry: every plugin in `plugins` (name, address) on
/// plaintext loopback, a 5 s timeout, the pipeline [`PIPELINE`] of all of
/// them, and `extra_plugins`/`extra_pipelines` (YAML list items) appended.
pub fn registry(plugins: &[(&str, &str)], extra_plugins: &str, extra_pipelines: &str) -> String {
    let mut yaml = String::from("defaults:\n  timeout: 5s\nplugins:\n");
    for (name, endpoint) in plugins {
        yaml.push_str(&format!(
            "  - name: {name}\n    endpoint: {endpoint}\n    insecure: true\n"
        ));
    }
    yaml.push_str(extra_plugins);
    let names: Vec<&str> = plugins.iter().map(|(name, _)| *name).collect();
    yaml.push_str(&format!(
        "pipelines:\n  - name: {PIPELINE}\n    plugins: [{}]\n",
        names.join(", ")
    ));
    yaml.push_str(extra_pipelines);
    yaml
}

/// Where the gateway listens. The plugins run with their own defaults:
/// smoke-test soaks 10 s and fails no cluster unless a rollout's plugin
/// configuration says otherwise ([`RolloutParams`]).
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// The gateway's `--listen`.
    pub gateway_listen: String,
    /// Where the plugins and the gateway export their spans
    /// (`OTEL_EXPORTER_OTLP_ENDPOINT`), besides what they inherit.
    pub otlp_endpoint: Option<String>,
    /// More plugins for the registry (YAML list items), after the three.
    pub extra_plugins: String,
    /// More pipelines for the registry (YAML list items), after
    /// [`PIPELINE`].
    pub extra_pipelines: String,
}

impl StackOptions {
    /// The variables each process gets besides the demo's environment.
    pub fn env(&self) -> Vec<(String, String)> {
        self.otlp_endpoint
            .iter()
            .map(|e| ("OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(), e.clone()))
            .collect()
    }
}

impl Default for StackOptions {
    fn default() -> Self {
        StackOptions {
            gateway_listen: "127.0.0.1:0".into(),
            otlp_endpoint: None,
            extra_plugins: String::new(),
            extra_pipelines: String::new(),
        }
    }
}

/// smoke-test's parameters for the demo's rollout, sent as the rollout's
/// `rolloutStrategy.pluginConfig` (docs/plugin-api.md §1, "Plugin
/// configuration"), not as the plugin's flags: the plugin process keeps its
/// defaults, and this one rollout soaks and fails as it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutParams {
    /// `soakTime`.
    pub soak: String,
    /// `failClusters`.
    pub fail: Vec<String>,
}

impl Default for RolloutParams {
    fn default() -> Self {
        RolloutParams {
            soak: "300ms".into(),
            fail: vec!["cluster-008".into()],
        }
    }
}

impl RolloutParams {
    /// The `pluginConfig` object, as JSON text.
    pub fn plugin_config(&self) -> String {
        serde_json::json!({"soakTime": self.soak, "failClusters": self.fail}).to_string()
    }
}

/// The three plugins and the gateway, running.
#[derive(Debug)]
pub struct Stack {
    /// The plugins, in [`PLUGINS`] order.
    pub plugins: Vec<(String, Started)>,
    /// The gateway.
    pub gateway: Started,
    /// The gateway's admin address.
    pub admin: String,
    /// The registry file the gateway watches.
    pub config: PathBuf,
}

impl Stack {
    /// Starts the three plugins on port 0, writes the registry to
    /// `dir/config.yaml`, starts the gateway on it and waits until it is
    /// ready. Fails with the process's log when one does not start.
    pub async fn start(
        bins: &Binaries,
        dir: &Path,
        options: &StackOptions,
    ) -> anyhow::Result<Stack> {
        check_port(&options.gateway_listen, "--gateway-listen")?;
        let mut plugins = Vec::new();
        for (name, _) in PLUGINS {
            let args = ["--listen", "127.0.0.1:0"];
            let started = start_with_env(
                name,
                &bins.path(name)?,
                &args,
                dir,
                &format!("{name} listening"),
                &options.env(),
            )
            .await?;
            plugins.push((name.to_owned(), started));
        }
        let config = dir.join("config.yaml");
        let endpoints: Vec<(&str, &str)> = plugins
            .iter()
            .map(|(name, s)| (name.as_str(), s.grpc.as_str()))
            .collect();
        let yaml = registry(&endpoints, &options.extra_plugins, &options.extra_pipelines);
        std::fs::write(&config, yaml)
            .with_context(|| format!("cannot write {}", config.display()))?;
        let config_arg = config.to_string_lossy().to_string();
        let mut gateway = start_with_env(
            "rollout-gateway",
            &bins.path("rollout-gateway")?,
            &[
                "--config",
                &config_arg,
                "--listen",
                &options.gateway_listen,
                "--admin-listen",
                "127.0.0.1:0",
            ],
            dir,
            "rollout-gateway listening",
            &options.env(),
        )
        .await?;
        let admin = gateway
            .admin
            .clone()
            .context("the gateway printed no admin address")?;
        wait_for_http_ok(
            &mut gateway.guard,
            &admin,
            "/readyz",
            Duration::from_secs(10),
        )
        .await?;
        Ok(Stack {
            plugins,
            gateway,
            admin,
            config,
        })
    }

    /// The address of the plugin `name`.
    pub fn plugin(&self, name: &str) -> Option<&str> {
        self.plugins
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.grpc.as_str())
    }

    /// The gateway's URL for `rollout-controller --gateway`.
    pub fn gateway_url(&self) -> String {
        format!("http://{}", self.gateway.grpc)
    }
}

/// The `rollout-controller simulate` arguments of the demo's rollout:
/// `clusters` clusters, Progressive with maxConcurrency 25 %, abort on
/// failure, through [`PIPELINE`] at `gateway`, with `params` as the
/// rollout's plugin configuration.
pub fn simulate_args(gateway: &str, clusters: usize, params: &RolloutParams) -> Vec<String> {
    [
        "simulate",
        "--clusters",
        &clusters.to_string(),
        "--strategy",
        "Progressive",
        "--max-concurrency",
        "25%",
        "--abort-on-failure",
        "--plugin",
        PIPELINE,
        "--plugin-config",
        &params.plugin_config(),
        "--gateway",
        gateway,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A scratch directory, removed when dropped.
#[derive(Debug)]
pub struct WorkDir(pub PathBuf);

impl WorkDir {
    /// A new directory `rollout-demo-PID` under the system's temp dir.
    pub fn new() -> anyhow::Result<WorkDir> {
        let dir = std::env::temp_dir().join(format!("rollout-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(WorkDir(dir))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_flags_are_checked_before_anything_starts() {
        let fail = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert!(check_fleet(20, &fail(&["cluster-008"])).is_ok());
        assert!(check_fleet(5, &[]).is_ok());
        let none = check_fleet(0, &[]).expect_err("no cluster").to_string();
        assert!(none.contains("--clusters must be at least 1"), "{none}");
        let unknown = check_fleet(5, &fail(&["cluster-008"]))
            .expect_err("cluster-008 is not in a fleet of 5")
            .to_string();
        assert!(
            unknown.contains("cluster-008") && unknown.contains("cluster-001 … cluster-005"),
            "{unknown}"
        );
    }

    #[test]
    fn the_registry_has_the_pipeline_of_every_plugin() {
        let yaml = registry(
            &[
                ("traffic-weights", "127.0.0.1:1"),
                ("smoke-test", "127.0.0.1:2"),
            ],
            "",
            "",
        );
        assert!(
            yaml.contains("  - name: smoke-test\n    endpoint: 127.0.0.1:2\n    insecure: true\n")
        );
        assert!(
            yaml.ends_with("  - name: safe-rollout\n    plugins: [traffic-weights, smoke-test]\n")
        );
    }

    #[test]
    fn the_rollout_params_are_the_plugin_config() {
        let params = RolloutParams::default();
        let args = simulate_args("http://127.0.0.1:1", 20, &params);
        let at = args
            .iter()
            .position(|a| a == "--plugin-config")
            .expect("the flag");
        let config: serde_json::Value = serde_json::from_str(&args[at + 1]).expect("JSON");
        assert_eq!(
            config,
            serde_json::json!({"soakTime": "300ms", "failClusters": ["cluster-008"]})
        );
    }

    #[test]
    fn a_taken_port_is_named() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let err = check_port(&addr, "--gateway-listen").expect_err("taken");
        assert!(err.to_string().contains("is taken"), "{err}");
        check_port("127.0.0.1:0", "--gateway-listen").expect("port 0 is always free");
        assert!(check_port("nonsense", "--gateway-listen").is_err());
    }
}
