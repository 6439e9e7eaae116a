//! `demo`: the rollout-hook layer end to end, as real processes on loopback.
//!
//! It starts two plugins and the gateway with a pipeline of both, then plays
//! the calls a ManifestWorkReplicaSet controller makes during a rollout of
//! three clusters through the gateway: Initialize, BeginRollout and
//! MutateManifestWork per cluster (each work annotated with its position by
//! the first plugin), ValidateRolloutCompletion; then hot-reloads the
//! registry (a plugin that is down, with `failurePolicy: Ignore`), shows that
//! a broken registry file is rejected while calls go on, and measures the
//! gateway's added latency against calling the plugin directly. Every child
//! process is stopped at the end, on an error, or on Ctrl-C.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use rollout_bench::load::{self, Hook, LoadConfig, Stop};
use rollout_bench::manifest::manifest_work_json;
use rollout_bench::process::{ChildGuard, wait_for_http_ok};
use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_proto::v1alpha1::{
    InitializeRequest, MutateManifestWorkRequest, RolloutPluginRequest, ValidateCompletionRequest,
    ValidationResult,
};
use rollout_proto::{FAILED_OPEN_METADATA_KEY, MUTATED_BY_METADATA_KEY, PLUGIN_METADATA_KEY};
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};
use tonic::transport::Channel;

const CLUSTERS: [&str; 3] = ["cluster-001", "cluster-002", "cluster-003"];

fn main() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?
        .block_on(async {
            let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
            let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
            let dir = WorkDir::new()?;
            let outcome = tokio::select! {
                r = run(&dir.0) => r,
                _ = interrupt.recv() => Err(anyhow::anyhow!("interrupted")),
                _ = terminate.recv() => Err(anyhow::anyhow!("terminated")),
            };
            // The child guards were dropped with `run`: every process is stopped.
            match outcome {
                Ok(()) => {
                    println!("\nAll processes stopped. Done.");
                    Ok(())
                }
                Err(e) => {
                    eprintln!("\ndemo: {e:#}\nAll processes stopped.");
                    std::process::exit(1);
                }
            }
        })
}

/// A scratch directory removed at the end.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> anyhow::Result<WorkDir> {
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

/// A binary next to this one (they are all built by `cargo build --release --workspace`).
fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the demo's own path")?;
    let path = exe.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} is missing; build everything first: cargo build --release --workspace",
            path.display()
        );
    }
    Ok(path)
}

struct Started {
    guard: ChildGuard,
    grpc: String,
    admin: Option<String>,
}

async fn start(
    name: &str,
    program: &Path,
    args: &[&str],
    dir: &Path,
    prefix: &str,
) -> anyhow::Result<Started> {
    let mut command = Command::new(program);
    command.args(args).env("RUST_LOG", "warn");
    let (mut guard, stdout) = ChildGuard::spawn(name, command, &dir.join(format!("{name}.log")))?;
    let line = guard
        .wait_for_line(stdout, prefix, Duration::from_secs(10))
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

fn registry(weights: &str, audit: &str, extra_plugins: &str, extra_pipelines: &str) -> String {
    format!(
        "defaults:\n  timeout: 5s\nplugins:\n  - name: traffic-weights\n    endpoint: {weights}\n    insecure: true\n  - name: audit\n    endpoint: {audit}\n    insecure: true\n{extra_plugins}pipelines:\n  - name: safe-canary\n    plugins: [traffic-weights, audit]\n{extra_pipelines}"
    )
}

fn rollout(cluster: &str, index: i32) -> RolloutPluginRequest {
    RolloutPluginRequest {
        mwrs_name: "hello-rollout".into(),
        mwrs_namespace: "default".into(),
        placement_name: "placement-canary".into(),
        cluster_name: cluster.into(),
        total_cluster_count: CLUSTERS.len() as i32,
        cluster_index: index,
        desired_revision: "hello-rollout-7d9f".into(),
        ..Default::default()
    }
}

fn to<T>(target: &str, message: T) -> anyhow::Result<tonic::Request<T>> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut()
        .insert(PLUGIN_METADATA_KEY, target.parse()?);
    r.set_timeout(Duration::from_secs(5));
    Ok(r)
}

fn trailer(md: &tonic::metadata::MetadataMap, key: &str) -> String {
    md.get(key)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

async fn debug_plugins(admin: &str) -> anyhow::Result<serde_json::Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(admin).await?;
    s.write_all(b"GET /debug/plugins HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n")
        .await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok(serde_json::from_str(body)?)
}

async fn wait_generation(admin: &str, generation: u64) -> anyhow::Result<serde_json::Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let doc = debug_plugins(admin).await?;
        if doc["generation"].as_u64().unwrap_or(0) >= generation
            || !doc["lastReloadError"].is_null()
        {
            return Ok(doc);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the gateway did not reload within 10 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn run(dir: &Path) -> anyhow::Result<()> {
    let gateway_bin = sibling("rollout-gateway")?;
    let plugin_bin = sibling("echo-plugin")?;

    println!(
        "rollout-hooks demo: a gateway in front of two plugins, as a ManifestWorkReplicaSet controller would use it\n"
    );
    let weights = start(
        "traffic-weights",
        &plugin_bin,
        &["--name", "traffic-weights", "--mode", "annotate"],
        dir,
        "echo-plugin listening",
    )
    .await?;
    println!(
        "  plugin traffic-weights  grpc={}  (annotates each work with its cluster's position)",
        weights.grpc
    );
    let audit = start(
        "audit",
        &plugin_bin,
        &["--name", "audit", "--mode", "echo"],
        dir,
        "echo-plugin listening",
    )
    .await?;
    println!(
        "  plugin audit            grpc={}  (passes works through unchanged)",
        audit.grpc
    );

    let config = dir.join("config.yaml");
    std::fs::write(&config, registry(&weights.grpc, &audit.grpc, "", ""))?;
    let config_arg = config.to_string_lossy().to_string();
    let mut gateway = start(
        "rollout-gateway",
        &gateway_bin,
        &[
            "--config",
            &config_arg,
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        dir,
        "rollout-gateway listening",
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
    println!(
        "  rollout-gateway         grpc={}  admin={admin}",
        gateway.grpc
    );
    println!("  registry: pipeline safe-canary = [traffic-weights, audit]\n");

    let channel = Channel::from_shared(format!("http://{}", gateway.grpc))?
        .connect()
        .await?;
    let mut client = RolloutPluginServiceClient::new(channel);

    println!("1. Initialize through the gateway (ocm-rollout-plugin: safe-canary)");
    let init = client
        .initialize(to(
            "safe-canary",
            InitializeRequest {
                controller_version: "demo".into(),
                hub_name: "hub-demo".into(),
            },
        )?)
        .await?
        .into_inner();
    println!(
        "   → name={} version={} hooks={:?}\n",
        init.name,
        init.version,
        init.hooks().collect::<Vec<_>>()
    );

    println!(
        "2. Roll out {} clusters: BeginRollout, then MutateManifestWork through the chain",
        CLUSTERS.len()
    );
    client
        .progress_rollout(to("safe-canary", rollout("", 0))?)
        .await?;
    let work = Bytes::from(manifest_work_json(2048));
    for (i, cluster) in CLUSTERS.iter().enumerate() {
        let index = i as i32 + 1;
        client
            .begin_rollout(to("safe-canary", rollout(cluster, index))?)
            .await?;
        let answer = client
            .mutate_manifest_work(to(
                "safe-canary",
                MutateManifestWorkRequest {
                    rollout: Some(rollout(cluster, index)),
                    manifest_work: work.clone(),
                },
            )?)
            .await?;
        let mutated_by = trailer(answer.metadata(), MUTATED_BY_METADATA_KEY);
        let mutated: serde_json::Value =
            serde_json::from_slice(&answer.into_inner().manifest_work)?;
        let position =
            &mutated["metadata"]["annotations"]["traffic-weights.rollout-hooks.io/position"];
        println!(
            "   {cluster}: annotation traffic-weights.rollout-hooks.io/position={position}  (mutated-by: {mutated_by})"
        );
    }

    println!("\n3. ValidateRolloutCompletion for each cluster");
    for (i, cluster) in CLUSTERS.iter().enumerate() {
        let v = client
            .validate_rollout_completion(to(
                "safe-canary",
                ValidateCompletionRequest {
                    rollout: Some(rollout(cluster, i as i32 + 1)),
                },
            )?)
            .await?
            .into_inner();
        println!(
            "   {cluster}: {:?}",
            ValidationResult::try_from(v.result).unwrap_or(ValidationResult::Unspecified)
        );
    }

    println!("\n4. Hot reload: add a smoke-test plugin that is down, with failurePolicy: Ignore");
    std::fs::write(
        &config,
        registry(
            &weights.grpc,
            &audit.grpc,
            "  - name: smoke-test\n    endpoint: 127.0.0.1:1\n    insecure: true\n    failurePolicy: Ignore\n    timeout: 1s\n",
            "  - name: with-smoke\n    plugins: [traffic-weights, smoke-test]\n",
        ),
    )?;
    let doc = wait_generation(&admin, 2).await?;
    println!(
        "   registry generation {} loaded (no restart)",
        doc["generation"]
    );
    let answer = client
        .mutate_manifest_work(to(
            "with-smoke",
            MutateManifestWorkRequest {
                rollout: Some(rollout(CLUSTERS[0], 1)),
                manifest_work: work.clone(),
            },
        )?)
        .await?;
    println!(
        "   MutateManifestWork via with-smoke: OK, mutated-by: {}, failed-open: {}",
        trailer(answer.metadata(), MUTATED_BY_METADATA_KEY),
        trailer(answer.metadata(), FAILED_OPEN_METADATA_KEY)
    );

    println!("\n5. A broken registry file is rejected whole; the last good one keeps serving");
    std::fs::write(
        &config,
        "plugins:\n  - name: traffic-weights\n    endpoint: no-port-here\n",
    )?;
    let doc = wait_generation(&admin, u64::MAX).await?;
    println!(
        "   lastReloadError: {}",
        doc["lastReloadError"].as_str().unwrap_or("(none)")
    );
    client
        .begin_rollout(to("safe-canary", rollout(CLUSTERS[1], 2))?)
        .await?;
    println!(
        "   BeginRollout via safe-canary still answers OK (generation {})",
        doc["generation"]
    );

    println!(
        "\n6. The gateway's cost: 2 s of MutateManifestWork (4 KiB, one call at a time) at the audit plugin, directly and through the gateway"
    );
    let measure = |target: &str, plugin: Option<&str>| LoadConfig {
        target: format!("http://{target}"),
        hook: Hook::Mutate,
        concurrency: 1,
        connections: 1,
        work_bytes: 4096,
        plugin: plugin.map(str::to_string),
        stop: Stop::After(Duration::from_secs(2)),
        warmup: Duration::from_millis(300),
        timeout: Duration::from_secs(5),
        latency_of_errors: false,
    };
    let direct = load::run(&measure(&audit.grpc, None)).await?;
    let through = load::run(&measure(&gateway.grpc, Some("audit"))).await?;
    for (label, r) in [("direct", &direct), ("through the gateway", &through)] {
        println!(
            "   {label:<20} p50 {:>7.1} µs   p99 {:>7.1} µs   {:>6.0} calls/s   errors {}",
            r.latency_micros.p50, r.latency_micros.p99, r.throughput_rps, r.errors
        );
    }
    println!(
        "   added by the gateway: {:+.1} µs at p50 (see docs/performance.md for the full comparison with nginx)",
        through.latency_micros.p50 - direct.latency_micros.p50
    );
    drop((weights, audit, gateway));
    Ok(())
}
