//! The `echo-plugin` binary as a process: `--state-detail` reaches its
//! Initialize answer, on SIGTERM it says what it received, and
//! `--mode mutate` answers with a changed work carrying its `--name`, and
//! `--loopback-aliases N` serves it on 127.0.0.2 … too.

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Child, ChildStdout, Command, Stdio};

use prost::Message as _;
use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_proto::v1alpha1::{
    InitializeRequest, MutateManifestWorkRequest, RolloutPluginRequest, RolloutStateDetail,
};

/// Starts `echo-plugin ARGS` and reads its first line (the listening
/// line): the process, the rest of its stdout, and that line.
fn start(args: &[&str]) -> anyhow::Result<(Child, BufReader<ChildStdout>, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_echo-plugin"))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    Ok((child, stdout, line))
}

/// The address of a listening line without aliases.
fn address(line: &str) -> String {
    line.trim()
        .strip_prefix("echo-plugin listening grpc=")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned()
}

#[tokio::test]
async fn declares_its_state_detail_and_reports_the_bytes_received_at_exit() -> anyhow::Result<()> {
    let (mut child, mut stdout, line) =
        start(&["--listen", "127.0.0.1:0", "--state-detail", "counts"])?;
    let address = address(&line);

    let mut client = RolloutPluginServiceClient::connect(format!("http://{address}")).await?;
    let init = client
        .initialize(InitializeRequest::default())
        .await?
        .into_inner();
    assert_eq!(init.state_detail(), RolloutStateDetail::Counts);
    let request = RolloutPluginRequest {
        mwrs_name: "web".into(),
        cluster_name: "cluster-1".into(),
        ..Default::default()
    };
    client.begin_rollout(request.clone()).await?;
    client.progress_rollout(request.clone()).await?;
    drop(client);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    assert!(status.success());
    // Read on a blocking thread: the client's connection task, on this
    // runtime, must run to close the connection the plugin's drain waits for.
    let (rest, exit) = tokio::task::spawn_blocking(move || {
        let mut rest = String::new();
        stdout.read_to_string(&mut rest)?;
        anyhow::Ok((rest, child.wait()?))
    })
    .await??;
    assert!(exit.success());
    // Initialize is not counted; the two rollout requests are.
    let want = format!(
        "echo-plugin received requests=2 bytes={}",
        2 * request.encode_to_vec().len()
    );
    assert_eq!(rest.trim(), want);
    Ok(())
}

#[tokio::test]
async fn mode_mutate_answers_with_a_changed_work_under_its_name() -> anyhow::Result<()> {
    let (mut child, _stdout, line) = start(&[
        "--listen",
        "127.0.0.1:0",
        "--mode",
        "mutate",
        "--name",
        "mutate",
    ])?;
    let address = address(&line);
    let result = async {
        let mut client = RolloutPluginServiceClient::connect(format!("http://{address}")).await?;
        let work = rollout_harness::manifest::manifest_work_json(4096);
        let answer = client
            .mutate_manifest_work(MutateManifestWorkRequest {
                rollout: None,
                manifest_work: work.clone().into(),
            })
            .await?
            .into_inner()
            .manifest_work;
        assert_ne!(answer, work);
        let answer: serde_json::Value = serde_json::from_slice(&answer)?;
        assert_eq!(
            answer["spec"]["workload"]["manifests"][0]["metadata"]["annotations"]
                [rollout_bench::echo::MUTATED_BY_ANNOTATION],
            "mutate"
        );
        assert_eq!(answer["kind"], "ManifestWork");
        anyhow::Ok(())
    }
    .await;
    child.kill()?;
    child.wait()?;
    result
}

#[tokio::test]
async fn loopback_aliases_serve_the_plugin_on_the_same_port_of_127_0_0_2_and_on()
-> anyhow::Result<()> {
    let (mut child, _stdout, line) = start(&[
        "--listen",
        "127.0.0.1:0",
        "--loopback-aliases",
        "3",
        "--name",
        "aliased",
    ])?;
    let result = async {
        // The line existing callers read, with one more field.
        let rest = line
            .trim()
            .strip_prefix("echo-plugin listening grpc=127.0.0.1:")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        let (port, aliases) = rest
            .split_once(' ')
            .unwrap_or_else(|| panic!("no aliases in {line:?}"));
        assert_eq!(aliases, "aliases=127.0.0.2-127.0.0.4");
        let port: u16 = port.parse()?;
        for host in ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"] {
            let mut client =
                RolloutPluginServiceClient::connect(format!("http://{host}:{port}")).await?;
            let init = client
                .initialize(InitializeRequest::default())
                .await?
                .into_inner();
            assert_eq!(init.name, "aliased", "on {host}");
            // The connection really is to that address.
            let probe = std::net::TcpStream::connect((host, port))?;
            assert_eq!(probe.peer_addr()?.ip().to_string(), host);
        }
        // One alias too far: nothing listens there.
        assert!(std::net::TcpStream::connect(("127.0.0.5", port)).is_err());
        anyhow::Ok(())
    }
    .await;
    child.kill()?;
    child.wait()?;
    result
}

#[test]
fn loopback_aliases_need_listen_on_127_0_0_1() -> anyhow::Result<()> {
    let output = Command::new(env!("CARGO_BIN_EXE_echo-plugin"))
        .args(["--listen", "127.0.0.9:0", "--loopback-aliases", "2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()?;
    assert!(!output.status.success());
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--loopback-aliases needs --listen on 127.0.0.1, not 127.0.0.9:0"),
        "{stderr}"
    );
    Ok(())
}
