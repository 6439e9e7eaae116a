//! The yardstick proxies as gwbench configures them, against a real
//! (mutating) echo plugin: a gRPC call through HAProxy and through nginx
//! succeeds, its answer is the plugin's, and its trailers (`grpc-status: 0`)
//! reach the client. A proxy that is not installed is skipped, saying so.
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
use rollout_bench::echo::{self, EchoMode};
use rollout_bench::manifest::manifest_work_json;
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
        rollout_bench::manifest::WORK_NAME
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
    let children = rollout_bench::compare::procfs::children(proxy.0.id())?;
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
