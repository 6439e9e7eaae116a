//! The demo end to end, as processes: the gateway, the three example
//! plugins and `rollout-controller simulate --json`, all real binaries.
//!
//! The binaries of the other packages are built first, by `cargo test
//! --workspace --no-run` in this test's profile and target directory (a
//! no-op under `cargo test --workspace`, which built them already, and no
//! second copy of the dependencies under another feature set), then found
//! next to this test's own binary.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use rollout_demo::{Binaries, RolloutParams, Stack, StackOptions, simulate_args};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Command;

/// The binaries the demo runs, built once per test process.
pub(crate) fn binaries() -> Binaries {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        // target/<profile>/deps/e2e-HASH → target/<profile>
        let exe = std::env::current_exe().expect("the test's path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>")
            .to_owned();
        let target_dir = profile_dir.parent().expect("target").to_owned();
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a profile name")
            .to_owned();
        let mut cargo = std::process::Command::new(env!("CARGO"));
        cargo
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
            .args(["test", "--workspace", "--no-run", "--quiet", "--target-dir"])
            .arg(&target_dir);
        // Cargo gives this test its package's variables; build scripts that
        // watch them (ring watches CARGO_PKG_NAME) would see a change and
        // rebuild, and the next `cargo test` rebuild again. Build with the
        // environment a shell has.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            let set_by_cargo = [
                "CARGO_PKG_",
                "CARGO_MANIFEST_",
                "CARGO_CRATE_",
                "CARGO_BIN_",
                "CARGO_CFG_",
            ]
            .iter()
            .any(|prefix| name.starts_with(prefix))
                || ["CARGO_TARGET_TMPDIR", "CARGO_PRIMARY_PACKAGE", "OUT_DIR"].contains(&&*name);
            if set_by_cargo {
                cargo.env_remove(&*name);
            }
        }
        match profile.as_str() {
            "debug" => {}
            "release" => {
                cargo.arg("--release");
            }
            other => {
                cargo.args(["--profile", other]);
            }
        }
        let status = cargo.status().expect("cargo runs");
        assert!(status.success(), "building the binaries failed: {status}");
        profile_dir
    });
    Binaries::in_dir(dir.clone())
}

pub(crate) fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rollout-e2e-")
        .tempdir()
        .expect("a temp dir")
}

/// Runs `program args` to its end (at most two minutes).
async fn run(program: &Path, args: &[String]) -> Output {
    let mut command = Command::new(program);
    command.args(args).env("RUST_LOG", "warn");
    tokio::time::timeout(
        Duration::from_secs(120),
        rollout_harness::process::output(command),
    )
    .await
    .expect("finishes within two minutes")
    .expect("runs")
}

fn lines(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn count(value: &Value, key: &str) -> u64 {
    value[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {value}"))
}

fn cluster(i: usize) -> String {
    format!("cluster-{i:03}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollout_through_the_gateway_aborts_on_the_failed_smoke_test_and_rolls_back() {
    let bins = binaries();
    let dir = tempdir();
    let stack = Stack::start(&bins, dir.path(), &StackOptions::default())
        .await
        .expect("the plugins and the gateway start");
    let controller = bins.path("rollout-controller").expect("built");
    // smoke-test runs with its defaults (10 s soak, no failing cluster):
    // the 300 ms soak and cluster-008's failure come from this rollout's
    // pluginConfig alone.
    let mut args = simulate_args(&stack.gateway_url(), 20, &RolloutParams::default());
    args.extend(["--json".into(), "--list-works".into()]);
    let output = run(&controller, &args).await;
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let mut lines = lines(&output);
    let summary = lines.pop().expect("a summary line");
    let steps = lines;

    // The contract's shape: one object per step, then the summary.
    for (k, step) in steps.iter().enumerate() {
        assert_eq!(step["step"], k + 1);
        let clusters = &step["clusters"];
        let total: u64 = [
            "ToApply",
            "Progressing",
            "Validating",
            "Succeeded",
            "Failed",
            "TimeOut",
        ]
        .iter()
        .map(|s| count(clusters, s))
        .sum();
        assert_eq!(total, 20, "step {}: {clusters}", k + 1);
    }
    assert_eq!(summary["result"], "Aborted");
    assert_eq!(summary["clusters"], 20);
    assert_eq!(summary["steps"], steps.len());
    let previous = summary["previousRevision"]
        .as_str()
        .expect("an earlier revision")
        .to_owned();
    let update = summary["updateRevision"]
        .as_str()
        .expect("update")
        .to_owned();

    // The abort: in the step where the smoke test failed cluster-008.
    let abort_at = steps
        .iter()
        .position(|s| {
            s["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["type"] == "abort"))
        })
        .expect("the rollout aborted");
    let abort_step = &steps[abort_at];
    let events = abort_step["events"].as_array().expect("events");
    let failed = events
        .iter()
        .find(|e| e["type"] == "validationFailed")
        .expect("a FAILED validation triggers the abort");
    assert_eq!(failed["cluster"], "cluster-008");
    assert!(
        failed["message"].as_str().is_some_and(|m| m
            .starts_with("smoke-test: smoke test failed on cluster-008")
            && m.ends_with("listed by the rollout's failClusters")),
        "{failed}"
    );
    let abort = events.iter().find(|e| e["type"] == "abort").expect("abort");
    assert_eq!(abort["action"], "RollBack");
    assert_eq!(abort["from"], update.as_str());
    assert_eq!(abort["to"], previous.as_str());
    assert_eq!(abort["failures"].as_array().map(Vec::len), Some(1));
    assert_eq!(abort["failures"][0]["cluster"], "cluster-008");
    assert_eq!(abort["failures"][0]["status"], "Failed");
    assert_eq!(summary["abort"]["step"], abort_at + 1);
    for (k, step) in steps.iter().enumerate() {
        assert_eq!(step["aborting"], k >= abort_at, "step {}", k + 1);
        let revision = if k >= abort_at { &previous } else { &update };
        assert_eq!(step["revision"], revision.as_str(), "step {}", k + 1);
    }

    // The batches: the strategy's order (cluster-001 first), 25% of 20 =
    // 5 at a time, the next only once the previous all succeeded.
    let batches = |range: std::ops::Range<usize>| -> Vec<(usize, Vec<Value>)> {
        steps[range]
            .iter()
            .enumerate()
            .filter_map(|(k, s)| {
                let applied = s["applied"].as_array().expect("applied").clone();
                (!applied.is_empty()).then_some((k, applied))
            })
            .collect()
    };
    let update_batches = batches(0..abort_at);
    let names = |batch: &[Value]| -> Vec<String> {
        batch
            .iter()
            .map(|a| a["cluster"].as_str().expect("cluster").to_owned())
            .collect()
    };
    assert_eq!(update_batches.len(), 2, "two batches before the failure");
    assert_eq!(
        names(&update_batches[0].1),
        (1..=5).map(cluster).collect::<Vec<_>>()
    );
    assert_eq!(
        names(&update_batches[1].1),
        (6..=10).map(cluster).collect::<Vec<_>>()
    );
    let second = &steps[update_batches[1].0];
    let succeeded: Vec<&str> = second["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter(|v| v["result"] == "Succeeded")
        .filter_map(|v| v["cluster"].as_str())
        .collect();
    assert_eq!(
        succeeded,
        [
            "cluster-001",
            "cluster-002",
            "cluster-003",
            "cluster-004",
            "cluster-005"
        ]
    );

    // Every work applied carries the chain's annotations: traffic-weights'
    // position and weight; while rolling back, rollback-mutator's marks.
    for (_, batch) in &update_batches {
        for work in batch {
            let i = work["index"].as_u64().expect("index");
            assert_eq!(work["aborting"], false);
            assert_eq!(work["revision"], update.as_str());
            assert_eq!(strings(&work["mutatedBy"]), ["traffic-weights"]);
            let a = &work["annotations"];
            assert_eq!(a["rollout-hooks.io/cluster-position"], format!("{i}/20"));
            assert_eq!(a["rollout-hooks.io/canary-weight"], (5 * i).to_string());
            assert!(a.get("rollout-hooks.io/rollback").is_none(), "{work}");
        }
    }
    let rollback = batches(abort_at..steps.len());
    let rolled_back: Vec<String> = rollback.iter().flat_map(|(_, b)| names(b)).collect();
    // Every updated cluster at once, in the abort's step, the failing one
    // first: a restore, not a new rollout at the strategy's pace.
    let mut restored = vec![cluster(8)];
    restored.extend((1..=10).filter(|&i| i != 8).map(cluster));
    assert_eq!(rolled_back, restored);
    assert_eq!(rollback.len(), 1, "one step restores them all");
    assert_eq!(rollback[0].0, 0, "in the abort's step");
    for (_, batch) in &rollback {
        for work in batch {
            let i = work["index"].as_u64().expect("index");
            assert_eq!(work["aborting"], true, "{work}");
            assert_eq!(work["revision"], previous.as_str());
            assert_eq!(
                strings(&work["mutatedBy"]),
                ["traffic-weights", "rollback-mutator"]
            );
            let a = &work["annotations"];
            assert_eq!(a["rollout-hooks.io/cluster-position"], format!("{i}/20"));
            assert_eq!(a["rollout-hooks.io/canary-weight"], "100");
            assert_eq!(a["rollout-hooks.io/rollback"], "true");
            assert_eq!(a["rollout-hooks.io/rollback-revision"], previous.as_str());
            assert_eq!(a["rollout-hooks.io/skipped-canary-steps"], "4");
        }
    }
    // At the end: the fleet is back on the previous revision.
    let works = summary["workList"].as_array().expect("works");
    assert_eq!(works.len(), 20);
    for (i, work) in works.iter().enumerate() {
        assert_eq!(work["cluster"], cluster(i + 1));
        assert_eq!(work["revision"], previous.as_str());
        assert_eq!(work["status"], "Succeeded");
        assert_eq!(work["applies"], if i < 10 { 2 } else { 0 });
    }
    assert_eq!(summary["currentRevision"], previous.as_str());

    // The hook calls match the plan: BeginRollout and MutateManifestWork
    // once per apply (10 updates, 10 rollbacks, these with aborting = true),
    // ProgressRollout once per step, and the per-step counts add up.
    let calls = &summary["hookCalls"];
    assert_eq!(count(calls, "BeginRollout"), 20);
    assert_eq!(count(calls, "MutateManifestWork"), 20);
    assert_eq!(count(calls, "ProgressRollout"), steps.len() as u64);
    let aborting = &summary["abortingHookCalls"];
    assert_eq!(count(aborting, "BeginRollout"), 10);
    assert_eq!(count(aborting, "MutateManifestWork"), 10);
    assert_eq!(
        count(aborting, "ProgressRollout"),
        (steps.len() - abort_at) as u64
    );
    assert_eq!(summary["applies"], 20);
    assert_eq!(summary["rollbackApplies"], 10);
    for hook in [
        "BeginRollout",
        "ProgressRollout",
        "ValidateRolloutCompletion",
        "MutateManifestWork",
    ] {
        let per_step: u64 = steps.iter().map(|s| count(&s["hookCalls"], hook)).sum();
        assert_eq!(per_step, count(calls, hook), "{hook}");
    }
    // Validation: one verdict per cluster and revision (10 updated
    // clusters: 9 SUCCEEDED and cluster-008 FAILED; 10 restored: all
    // SUCCEEDED), each after at least one INPROGRESS (the 300 ms soak).
    let mut verdicts: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut in_progress = 0;
    for step in &steps {
        in_progress += count(&step["validations"], "InProgress");
        for v in step["verdicts"].as_array().expect("verdicts") {
            verdicts
                .entry((
                    v["cluster"].as_str().expect("cluster").to_owned(),
                    v["revision"].as_str().expect("revision").to_owned(),
                ))
                .or_default()
                .push(v["result"].as_str().expect("result").to_owned());
        }
    }
    assert_eq!(verdicts.len(), 20, "{verdicts:?}");
    assert!(verdicts.values().all(|v| v.len() == 1), "{verdicts:?}");
    for i in 1..=10 {
        assert!(verdicts.contains_key(&(cluster(i), update.clone())), "{i}");
        assert!(
            verdicts.contains_key(&(cluster(i), previous.clone())),
            "{i}"
        );
    }
    assert_eq!(
        verdicts[&("cluster-008".to_owned(), update.clone())],
        ["Failed"],
        "{verdicts:?}"
    );
    let failed = verdicts.values().filter(|v| v[0] == "Failed").count();
    assert_eq!(failed, 1);
    assert!(
        in_progress >= 20,
        "each verdict came after a soak: {in_progress}"
    );
    assert_eq!(
        count(calls, "ValidateRolloutCompletion"),
        in_progress + 20,
        "every validation answer is INPROGRESS or a verdict"
    );
    assert_eq!(summary["hookErrors"], 0);

    // A plugin the gateway does not know: a clear error, exit 1.
    let mut args = simulate_args(&stack.gateway_url(), 3, &RolloutParams::default());
    let plugin = args
        .iter()
        .position(|a| a == "safe-rollout")
        .expect("plugin");
    args[plugin] = "no-such-pipeline".into();
    let output = run(&controller, &args).await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("has no plugin or pipeline named \"no-such-pipeline\""),
        "{stderr}"
    );
    drop(stack);
}

/// The same rollout on a hub whose CRDs are OCM's own (`--crds` with the
/// CRDs of the `open-cluster-management.io/api` module localhub pins,
/// which prune the design's fields): the plugin,
/// the abort and the rollback, read from the ManifestWorkReplicaSetRollout,
/// do exactly what they do unpruned, and its stored status names the
/// cluster the smoke test failed.
#[tokio::test]
async fn under_ocm_crds_the_rollout_through_the_gateway_aborts_and_rolls_back_the_same() {
    let bins = binaries();
    let dir = tempdir();
    let stack = Stack::start(&bins, dir.path(), &StackOptions::default())
        .await
        .expect("the plugins and the gateway start");
    let controller = bins.path("rollout-controller").expect("built");
    let ocm = tempdir();
    if rollout_test_support::ocm_api::or_skip(rollout_test_support::ocm_api::copy_work_crds(
        ocm.path(),
    ))
    .is_none()
    {
        return;
    }
    let crds = ocm.path();
    let mut results = Vec::new();
    for extra in [
        vec![],
        vec!["--crds".to_owned(), crds.display().to_string()],
    ] {
        let mut args = simulate_args(&stack.gateway_url(), 12, &RolloutParams::default());
        args.push("--json".into());
        args.extend(extra);
        let output = run(&controller, &args).await;
        assert!(
            output.status.success(),
            "exit {:?}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        results.push(lines(&output));
    }
    // What the rollout did; how often a plugin was polled while it soaked
    // in real time depends on the wall clock, not on the CRDs.
    let same = |summary: &Value| {
        [
            summary["result"].clone(),
            summary["hookCalls"]["BeginRollout"].clone(),
            summary["hookCalls"]["MutateManifestWork"].clone(),
            summary["abortingHookCalls"]["BeginRollout"].clone(),
            summary["abortingHookCalls"]["MutateManifestWork"].clone(),
            summary["applies"].clone(),
            summary["rollbackApplies"].clone(),
            summary["currentRevision"].clone(),
            summary["abort"]["failures"].clone(),
        ]
    };
    let (unpruned, pruned) = (&results[0], &results[1]);
    let summary = pruned.last().expect("a summary");
    assert_eq!(summary["result"], "Aborted");
    assert_eq!(same(summary), same(unpruned.last().expect("a summary")));
    assert!(summary.get("apiWarnings").is_none(), "{summary}");
    let abort = pruned
        .iter()
        .find(|s| {
            s["events"]
                .as_array()
                .is_some_and(|e| e.iter().any(|e| e["type"] == "abort"))
        })
        .expect("the rollout aborted");
    let failed = &abort["statusClusters"][0];
    assert_eq!(failed["clusterName"], "cluster-008");
    assert_eq!(failed["rolloutStatus"], "Failed");
    assert!(
        failed["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("smoke-test: smoke test failed on cluster-008")),
        "{failed}"
    );
    let status = &summary["rolloutStatus"];
    assert_eq!(status["currentRevision"], summary["previousRevision"]);
    assert!(status["abortedTime"].is_string(), "{status}");
}

/// The addresses a demo run printed: each plugin's and the gateway's.
fn addresses(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("plugin ") || l.contains("rollout-gateway  "))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("grpc=").map(str::to_owned))
        })
        .collect()
}

async fn refused(address: &str) -> bool {
    for _ in 0..50 {
        if tokio::net::TcpStream::connect(address).await.is_err() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_tells_the_whole_story_and_stops_everything() {
    binaries();
    let output = run(Path::new(env!("CARGO_BIN_EXE_demo")), &[]).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "exit {:?}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    for expected in [
        "pipeline safe-rollout = [traffic-weights, smoke-test, rollback-mutator]",
        "smoke-test runs with its defaults: a 10s soak, no failing cluster",
        r#"its pluginConfig {"failClusters":["cluster-008"],"soakTime":"300ms"}"#,
        "listed by the rollout's failClusters",
        "│ Result: Aborted after",
        "canary-weight=5,10,15,20,25",
        "✗ cluster-008 FAILED · smoke-test: smoke test failed on cluster-008",
        "ABORT: cluster-008 Failed → rolling back to revision",
        "result: Aborted",
        "story 3  10 updated clusters rolled back",
        "registry generation 2 loaded (no restart)",
        "failed-open: canary-check",
        "added by the gateway:",
        "All processes stopped. Done.",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in\n{stdout}"
        );
    }
    let addresses = addresses(&stdout);
    assert_eq!(addresses.len(), 4, "{addresses:?}");
    for address in addresses {
        assert!(refused(&address).await, "{address} still listens");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_every_process() {
    binaries();
    let mut demo = Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(["--soak", "10s"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the demo starts");
    let pid = demo.id().expect("running");
    let mut lines = BufReader::new(demo.stdout.take().expect("stdout")).lines();
    let mut seen = String::new();
    // Until the rollout is under way: the smoke test soaks for 10 s. The
    // simulation's own lines are indented with a bar; the plugin's intro
    // also says INPROGRESS, before the gateway and the simulation start.
    while let Some(line) = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the demo goes on")
        .expect("reads")
    {
        seen.push_str(&line);
        seen.push('\n');
        if line.contains('│') && line.contains("INPROGRESS") {
            break;
        }
    }
    let children = children_of(pid);
    assert_eq!(
        children.len(),
        5,
        "3 plugins, the gateway, the simulation: {children:?}"
    );
    let exit = interrupt(&mut demo).await;
    assert_eq!(exit.code(), Some(1));
    let mut stderr = String::new();
    if let Some(mut pipe) = demo.stderr.take() {
        use tokio::io::AsyncReadExt as _;
        let _ = pipe.read_to_string(&mut stderr).await;
    }
    assert!(stderr.contains("demo: interrupted"), "{stderr}");
    assert!(stderr.contains("All processes stopped."), "{stderr}");
    for address in addresses(&seen) {
        assert!(refused(&address).await, "{address} still listens");
    }
    for child in children {
        let mut gone = false;
        for _ in 0..50 {
            if !alive(child) {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(gone, "process {child} outlived the demo");
    }
}

/// Ctrl-C to the demo `child`, and its exit within 30 s.
pub(crate) async fn interrupt(child: &mut tokio::process::Child) -> std::process::ExitStatus {
    let pid = child.id().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(status.success());
    tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("the demo stops")
        .expect("waits")
}

/// Whether `pid` runs: it exists and is not a zombie (an exited child
/// that nobody reaped yet, as in a container whose init does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// The children of `pid`, from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    // Every process whose parent is `pid`, from /proc/N/stat. (The
    // per-thread /proc/PID/task/TID/children lists miss a child whose
    // spawning thread has since exited, as runtime pool threads do.)
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|n| {
            std::fs::read_to_string(format!("/proc/{n}/stat"))
                .ok()
                .and_then(|stat| {
                    // Fields after the command name, which may hold spaces.
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect();
    children.sort_unstable();
    children
}

#[tokio::test]
async fn a_taken_port_is_a_clear_error() {
    binaries();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = taken.local_addr().expect("address").to_string();
    let output = run(
        Path::new(env!("CARGO_BIN_EXE_demo")),
        &["--gateway-listen".into(), address.clone()],
    )
    .await;
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "port {} is taken",
            taken.local_addr().expect("a").port()
        )),
        "{stderr}"
    );
}
