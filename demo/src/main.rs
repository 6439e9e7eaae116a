//! `demo`: the project's story in one command, as real processes on
//! loopback.
//!
//! It starts the three example plugins (traffic-weights, smoke-test with
//! its defaults, rollback-mutator) and the gateway with a pipeline of the
//! three, then runs `rollout-controller simulate` over 20 clusters
//! (Progressive, maxConcurrency 25 %, abort on failure) through the gateway,
//! the rollout's plugin configuration giving smoke-test a short soak and
//! one failing cluster (per rollout, not per process), streaming its
//! progress: canary weights injected cluster by
//! cluster, the smoke test failing on one cluster, the abort, the rollback
//! with `aborting = true`. It tells the outcome, then hot-reloads the
//! registry and measures the gateway's added latency. When
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, the controller, the gateway and the
//! example plugins export their spans there (the children inherit the
//! environment) and the demo says where to look; with `--jaeger PATH` it
//! starts that Jaeger itself, exports there, links the abort's trace and
//! keeps Jaeger up until Ctrl-C. Every process is stopped at the end, on
//! an error, or on Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use clap::Parser;
use rollout_demo::jaeger::Jaeger;
use rollout_demo::{
    Binaries, PIPELINE, PLUGINS, RolloutParams, Stack, StackOptions, WorkDir, check_fleet,
    simulate_args,
};
use rollout_harness::load::{self, LoadConfig, Stop};
use rollout_harness::manifest::manifest_work_json;
use rollout_proto::HookKind;
use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_proto::v1alpha1::{MutateManifestWorkRequest, RolloutPluginRequest};
use rollout_proto::{FAILED_OPEN_METADATA_KEY, MUTATED_BY_METADATA_KEY, PLUGIN_METADATA_KEY};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};
use tonic::transport::Channel;

/// A ManifestWorkReplicaSet rolled out to simulated clusters through the
/// rollout gateway and the three example plugins.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Flags {
    /// Clusters in the simulated fleet.
    #[arg(long, value_name = "N", default_value_t = 20)]
    clusters: usize,
    /// smoke-test's soak per cluster (real time), as the rollout's
    /// pluginConfig soakTime.
    #[arg(long, value_name = "DURATION", default_value = "300ms")]
    soak: String,
    /// The cluster whose smoke test fails, as the rollout's pluginConfig
    /// failClusters; repeatable; "none" for none.
    #[arg(long = "fail", value_name = "CLUSTER", default_value = "cluster-008")]
    fail: Vec<String>,
    /// The gateway's gRPC address; port 0 picks a free one.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    gateway_listen: String,
    /// Only the rollout: skip the hot reload and the latency measurement.
    #[arg(long)]
    rollout_only: bool,
    /// A built Jaeger v2 binary (`python3 test-support/jaeger/build` builds
    /// one and prints its path): the demo starts it on loopback, every
    /// process exports its spans to it, and it stays up after the demo,
    /// with the abort's trace linked, until Ctrl-C.
    #[arg(long, value_name = "PATH")]
    jaeger: Option<PathBuf>,
    /// A built Jaeger UI for that Jaeger to serve (Jaeger's Go module has
    /// none; without it the links are to its query API).
    #[arg(long, value_name = "DIR", requires = "jaeger")]
    jaeger_ui: Option<PathBuf>,
}

impl Flags {
    /// The clusters of `--fail`, comma-separated or repeated, "none" removed.
    fn failing(&self) -> Vec<String> {
        self.fail
            .iter()
            .flat_map(|f| f.split(','))
            .filter(|f| !f.is_empty() && *f != "none")
            .map(str::to_owned)
            .collect()
    }
}

fn main() -> anyhow::Result<()> {
    let flags = Flags::parse();
    // Before any process starts: a bad flag stops the demo at once.
    if let Err(e) = check_fleet(flags.clusters, &flags.failing()) {
        eprintln!("demo: {e:#}");
        std::process::exit(2);
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the runtime")?
        .block_on(async {
            let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
            let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
            let dir = WorkDir::new()?;
            // Set once the demo is over and only its Jaeger stays up: a
            // signal then ends it as it should.
            let lingering = AtomicBool::new(false);
            let stopped = |what: &str| {
                if lingering.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!("{what}"))
                }
            };
            let outcome = tokio::select! {
                r = run(&flags, &dir.0, &lingering) => r,
                _ = interrupt.recv() => stopped("interrupted"),
                _ = terminate.recv() => stopped("terminated"),
            };
            // The child guards were dropped with `run`: every process is
            // stopped. The scratch directory goes too (`exit` below would
            // skip its destructor).
            drop(dir);
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

async fn run(flags: &Flags, dir: &Path, lingering: &AtomicBool) -> anyhow::Result<()> {
    let bins = Binaries::next_to_this_one()?;
    let controller = bins.path("rollout-controller")?;
    let fail = flags.failing();
    let jaeger = start_jaeger(flags, dir).await?;
    let options = StackOptions {
        gateway_listen: flags.gateway_listen.clone(),
        otlp_endpoint: jaeger.as_ref().map(|j| j.otlp_grpc.clone()),
        ..StackOptions::default()
    };
    let params = RolloutParams {
        soak: flags.soak.clone(),
        fail: fail.clone(),
    };

    println!(
        "rollout-hooks demo: a ManifestWorkReplicaSet rolled out to {} simulated clusters, through the rollout gateway and three plugins\n",
        flags.clusters
    );
    println!("1. The plugins and the gateway, as processes on loopback");
    let stack = Stack::start(&bins, dir, &options).await?;
    for ((name, role), (_, started)) in PLUGINS.iter().zip(&stack.plugins) {
        println!("   plugin {name:<17} grpc={:<16} {role}", started.grpc);
    }
    println!("   (smoke-test runs with its defaults: a 10s soak, no failing cluster)");
    println!(
        "   rollout-gateway         grpc={:<16} admin={}",
        stack.gateway.grpc, stack.admin
    );
    let members: Vec<&str> = PLUGINS.iter().map(|(name, _)| *name).collect();
    println!(
        "   registry {}: pipeline {PIPELINE} = [{}]",
        stack.config.display(),
        members.join(", ")
    );

    let args = simulate_args(&stack.gateway_url(), flags.clusters, &params);
    println!(
        "\n2. The rollout: {} clusters, Progressive, maxConcurrency 25%, abort on failure, every hook through the gateway",
        flags.clusters
    );
    println!(
        "   its pluginConfig {}: smoke-test soaks {} per cluster in this rollout and fails {}",
        params.plugin_config(),
        flags.soak,
        if fail.is_empty() {
            "none".to_owned()
        } else {
            fail.join(", ")
        }
    );
    let shown: Vec<String> = args.iter().map(|a| shell_word(a)).collect();
    println!("   $ rollout-controller {} --list-works\n", shown.join(" "));
    let summary_path = dir.join("summary.json");
    simulate(
        &controller,
        &args,
        &summary_path,
        options.otlp_endpoint.as_deref(),
    )
    .await?;
    let text = std::fs::read_to_string(&summary_path)
        .with_context(|| format!("cannot read {}", summary_path.display()))?;
    let summary: Value = serde_json::from_str(&text).context("the summary is not JSON")?;

    println!("\n3. What happened");
    tell(&summary);

    if !flags.rollout_only {
        hot_reload(&stack).await?;
        overhead(&stack).await?;
    }
    traces(&summary, options.otlp_endpoint.as_deref());
    drop(stack);
    match &jaeger {
        Some(jaeger) => linger(jaeger, &summary, flags.jaeger_ui.is_some(), lingering).await,
        None => Ok(()),
    }
}

/// The Jaeger of `--jaeger`, started in `dir`.
async fn start_jaeger(flags: &Flags, dir: &Path) -> anyhow::Result<Option<Jaeger>> {
    let Some(binary) = &flags.jaeger else {
        return Ok(None);
    };
    Jaeger::start(binary, dir, flags.jaeger_ui.as_deref())
        .await
        .with_context(|| format!("cannot start Jaeger ({})", binary.display()))
        .map(Some)
}

/// Keeps `jaeger` up, with where to look, until a signal ends the demo.
async fn linger(
    jaeger: &Jaeger,
    summary: &Value,
    with_ui: bool,
    lingering: &AtomicBool,
) -> anyhow::Result<()> {
    println!(
        "\nJaeger: {} (every process stopped but Jaeger)",
        jaeger.ui()
    );
    if let Some(trace) = summary["abort"]["traceId"].as_str() {
        let link = if with_ui {
            jaeger.trace_link(trace)
        } else {
            format!("{}/api/traces/{trace}", jaeger.ui())
        };
        println!("   the abort's trace: {link}");
    }
    println!("   Jaeger stays up until Ctrl-C.");
    lingering.store(true, Ordering::SeqCst);
    std::future::pending::<()>().await;
    Ok(())
}

/// `arg` as a shell would need it: in single quotes when it holds JSON or
/// spaces.
fn shell_word(arg: &str) -> String {
    if arg.contains(|c: char| c.is_whitespace() || "\"'{}[]$*?;&|<>()\\".contains(c)) {
        format!("'{}'", arg.replace('\'', r"'\''"))
    } else {
        arg.to_owned()
    }
}

/// Runs `rollout-controller ARGS`, its output streamed with an indent; the
/// summary goes to `summary`. Killed if the demo is interrupted.
async fn simulate(
    controller: &Path,
    args: &[String],
    summary: &Path,
    otlp: Option<&str>,
) -> anyhow::Result<()> {
    let mut command = Command::new(controller);
    if let Some(endpoint) = otlp {
        command.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
    }
    command
        .args(args)
        .arg("--list-works")
        .arg("--summary")
        .arg(summary)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command.spawn().context("cannot start rollout-controller")?;
    let stdout = child.stdout.take().context("no stdout pipe")?;
    let mut stderr = child.stderr.take().context("no stderr pipe")?;
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let mut lines = BufReader::new(stdout).lines();
    while let Some(line) = lines.next_line().await? {
        println!("   │ {line}");
    }
    let status = child.wait().await?;
    let errors = errors.await.unwrap_or_default();
    if !status.success() {
        bail!(
            "rollout-controller simulate failed ({status}): {}",
            errors.trim()
        );
    }
    Ok(())
}

/// The outcome, story by story, from the simulation's summary.
fn tell(summary: &Value) {
    let result = summary["result"].as_str().unwrap_or("?");
    let calls = &summary["hookCalls"];
    let count = |v: &Value, key: &str| v[key].as_u64().unwrap_or(0);
    let annotated = |key: &str| count(&summary["works"]["annotations"], key);
    println!("   result: {result}");
    println!(
        "   story 1  traffic-weights wrote rollout-hooks.io/cluster-position and canary-weight on every work applied ({} of {}), the weight growing cluster by cluster",
        annotated("rollout-hooks.io/canary-weight"),
        summary["works"]["applied"].as_u64().unwrap_or(0)
    );
    match summary["abort"].as_object() {
        Some(abort) => {
            let failure = &abort["failures"][0];
            println!(
                "   story 2  {} {} ({}): the controller aborted at step {}",
                failure["cluster"].as_str().unwrap_or("?"),
                failure["status"].as_str().unwrap_or("?"),
                failure["message"].as_str().unwrap_or("no message"),
                abort["step"]
            );
            let aborting = &summary["abortingHookCalls"];
            println!(
                "   story 3  {} updated clusters rolled back to revision {}; every hook call said aborting = true (BeginRollout {}, MutateManifestWork {}, ValidateRolloutCompletion {}, ProgressRollout {}); rollback-mutator marked {} works rollout-hooks.io/rollback=true and dropped their Argo canary steps",
                summary["rollbackApplies"],
                summary["previousRevision"].as_str().unwrap_or("?"),
                count(aborting, "BeginRollout"),
                count(aborting, "MutateManifestWork"),
                count(aborting, "ValidateRolloutCompletion"),
                count(aborting, "ProgressRollout"),
                annotated("rollout-hooks.io/rollback"),
            );
        }
        None => println!(
            "   stories 2 and 3  no cluster failed its smoke test, so nothing was rolled back"
        ),
    }
    println!(
        "   hook calls through the gateway: BeginRollout {}, ProgressRollout {}, ValidateRolloutCompletion {}, MutateManifestWork {}, in {} steps",
        count(calls, "BeginRollout"),
        count(calls, "ProgressRollout"),
        count(calls, "ValidateRolloutCompletion"),
        count(calls, "MutateManifestWork"),
        summary["steps"]
    );
}

/// Where the traces went, when they were exported.
fn traces(summary: &Value, jaeger: Option<&str>) {
    let Some(endpoint) = jaeger.map(str::to_owned).or_else(|| {
        std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
            .ok()
            .filter(|e| !e.trim().is_empty())
    }) else {
        return;
    };
    println!(
        "\nTraces: rollout-controller and rollout-gateway exported their spans to {endpoint} (OTLP/gRPC), and so did the three example plugins (the plugin SDK exports their spans per the same OTEL_* variables)."
    );
    let jaeger_ui = if jaeger.is_some() {
        "the demo's Jaeger, below"
    } else {
        "http://localhost:16686 for a local all-in-one; deploy/tracing/README.md for a cluster"
    };
    println!(
        "   In Jaeger ({jaeger_ui}) pick the service rollout-controller: one trace per step, \"reconcile ManifestWorkReplicaSet\", with a span per hook call, the gateway's spans below it and each plugin's server span below those."
    );
    if let Some(trace) = summary["abort"]["traceId"].as_str() {
        println!("   The step that aborted is trace {trace}.");
    }
}

fn rollout_request(cluster: &str, index: i32, total: i32) -> RolloutPluginRequest {
    RolloutPluginRequest {
        mwrs_name: "web".into(),
        mwrs_namespace: "default".into(),
        placement_name: "fleet".into(),
        cluster_name: cluster.into(),
        total_cluster_count: total,
        cluster_index: index,
        desired_revision: "demo".into(),
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

async fn debug_plugins(admin: &str) -> anyhow::Result<Value> {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(admin).await?;
    s.write_all(b"GET /debug/plugins HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n")
        .await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok(serde_json::from_str(body)?)
}

async fn wait_generation(admin: &str, generation: u64) -> anyhow::Result<Value> {
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

/// Step 4: the registry changes under a running gateway.
async fn hot_reload(stack: &Stack) -> anyhow::Result<()> {
    let endpoints: Vec<(&str, &str)> = stack
        .plugins
        .iter()
        .map(|(name, s)| (name.as_str(), s.grpc.as_str()))
        .collect();
    let generation = debug_plugins(&stack.admin).await?["generation"]
        .as_u64()
        .unwrap_or(1);
    println!(
        "\n4. Hot reload: add a plugin that is down (failurePolicy: Ignore) in a new pipeline, without a restart"
    );
    std::fs::write(
        &stack.config,
        rollout_demo::registry(
            &endpoints,
            "  - name: canary-check\n    endpoint: 127.0.0.1:1\n    insecure: true\n    failurePolicy: Ignore\n    timeout: 1s\n",
            "  - name: with-canary-check\n    plugins: [traffic-weights, canary-check]\n",
        ),
    )?;
    let doc = wait_generation(&stack.admin, generation + 1).await?;
    println!(
        "   registry generation {} loaded (no restart)",
        doc["generation"]
    );
    let channel = Channel::from_shared(stack.gateway_url())?.connect().await?;
    let mut client = RolloutPluginServiceClient::new(channel);
    let work = Bytes::from(manifest_work_json(2048));
    let answer = client
        .mutate_manifest_work(to(
            "with-canary-check",
            MutateManifestWorkRequest {
                rollout: Some(rollout_request("cluster-001", 1, 20)),
                manifest_work: work,
            },
        )?)
        .await?;
    println!(
        "   MutateManifestWork via with-canary-check: OK, mutated-by: {}, failed-open: {}",
        trailer(answer.metadata(), MUTATED_BY_METADATA_KEY),
        trailer(answer.metadata(), FAILED_OPEN_METADATA_KEY)
    );

    println!("   A broken registry file is rejected whole; the last good one keeps serving:");
    std::fs::write(
        &stack.config,
        "plugins:\n  - name: traffic-weights\n    endpoint: no-port-here\n",
    )?;
    let doc = wait_generation(&stack.admin, u64::MAX).await?;
    println!(
        "   lastReloadError: {}",
        doc["lastReloadError"].as_str().unwrap_or("(none)")
    );
    client
        .begin_rollout(to(PIPELINE, rollout_request("cluster-002", 2, 20))?)
        .await?;
    println!(
        "   BeginRollout via {PIPELINE} still answers OK (generation {})",
        doc["generation"]
    );
    Ok(())
}

/// Step 5: what the gateway adds to a call.
async fn overhead(stack: &Stack) -> anyhow::Result<()> {
    let plugin = "rollback-mutator";
    let direct = stack.plugin(plugin).context("no rollback-mutator")?;
    println!(
        "\n5. The gateway's cost: 2 s of MutateManifestWork (4 KiB, one call at a time) at {plugin}, directly and through the gateway"
    );
    let measure = |target: &str, through: Option<&str>| LoadConfig {
        target: format!("http://{target}"),
        hook: HookKind::MutateManifestWork,
        concurrency: 1,
        connections: 1,
        work_bytes: 4096,
        plugin: through.map(str::to_string),
        stop: Stop::After(Duration::from_secs(2)),
        warmup: Duration::from_millis(300),
        timeout: Duration::from_secs(5),
        latency_of_errors: false,
    };
    let alone = load::run(&measure(direct, None)).await?;
    let through = load::run(&measure(&stack.gateway.grpc, Some(plugin))).await?;
    for (label, r) in [("direct", &alone), ("through the gateway", &through)] {
        println!(
            "   {label:<20} p50 {:>7.1} µs   p99 {:>7.1} µs   {:>6.0} calls/s   errors {}",
            r.latency_micros.p50, r.latency_micros.p99, r.throughput_rps, r.errors
        );
    }
    println!(
        "   added by the gateway: {:+.1} µs at p50 (docs/performance.md has the full comparison with nginx)",
        through.latency_micros.p50 - alone.latency_micros.p50
    );
    Ok(())
}
