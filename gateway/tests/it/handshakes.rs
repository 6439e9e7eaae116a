//! Connections still in their TLS handshake: peers from several addresses
//! that open TCP connections and never start TLS (reopening each as it is
//! cut) cannot keep a hub with a valid client certificate out of a central
//! gateway. Real TLS, certificates made at test time.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Behaviour, holding_peers, plugin, rollout, to};
use rollout_gateway::app::{self, Options};
use rollout_gateway::tls::ServerTlsFiles;
use rollout_plugin_sdk::test_certs::{TestCa as Ca, TestCert as Leaf};
use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// One call from hub-a on a connection of its own (a new TLS handshake).
async fn call_on_a_new_connection(addr: SocketAddr, server_ca: &Ca, hub: &Leaf) -> bool {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(server_ca.pem()))
        .domain_name("localhost")
        .identity(Identity::from_pem(&hub.cert, &hub.key));
    let endpoint = Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .tls_config(tls)
        .unwrap();
    let channel = match endpoint.connect().await {
        Ok(channel) => channel,
        Err(error) => {
            eprintln!("hub-a could not connect: {error:?}");
            return false;
        }
    };
    let called = RolloutPluginServiceClient::new(channel)
        .begin_rollout(to("p", rollout("c1")))
        .await;
    if let Err(status) = &called {
        eprintln!("hub-a's call failed: {status:?}");
    }
    called.is_ok()
}

/// A central gateway with `tune`, 4 addresses × 64 silent connections held
/// against it, and 50 calls from hub-a, each on a new connection: all of
/// them get through.
async fn hub_gets_through(tune: impl FnOnce(&mut Options)) {
    let p = plugin(Behaviour::new("p")).await;
    let server_ca = Ca::new("gateway-server").unwrap();
    let hubs_ca = Ca::new("hubs").unwrap();
    let server = server_ca.server().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut options = Options {
        configs: vec![
            write(
                dir.path(),
                "shared.yaml",
                &format!("plugins:\n{}", common::insecure_plugin("p", &p, "")),
            ),
            write(dir.path(), "hub-a.yaml", "hub: hub-a\nplugins: []\n"),
        ],
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        tls: Some(ServerTlsFiles {
            cert: write(dir.path(), "tls.crt", &server.cert),
            key: write(dir.path(), "tls.key", &server.key),
            client_ca: Some(write(dir.path(), "hubs-ca.crt", &hubs_ca.pem())),
        }),
        max_connections: 64,
        ..Options::default()
    };
    tune(&mut options);
    let running = app::start(options).await.expect("central gateway starts");
    let addr = running.grpc_addr;
    let stop = Arc::new(AtomicBool::new(false));
    // Never a byte; reopened a second after the gateway closes it.
    holding_peers(addr, (4, 64), b"", Duration::from_secs(1), stop.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let hub = hubs_ca.leaf("hub-a").unwrap();
    let mut through = 0;
    for _ in 0..50 {
        if call_on_a_new_connection(addr, &server_ca, &hub).await {
            through += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert_eq!(through, 50, "hub-a's calls that got through, of 50");
    running.shutdown().await;
}

/// Connections in their handshakes are not in `--max-connections`: 256
/// silent ones against 64 connections leave the hub every call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_never_take_a_hubs_place() {
    hub_gets_through(|_| {}).await;
}

/// Over `--max-handshakes`, a newcomer takes the place of the oldest
/// connection in its handshakes: the hub's handshake, done in milliseconds,
/// gets through while silent ones churn through the places.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_handshake_bound_the_oldest_silent_connection_gives_way() {
    hub_gets_through(|o| {
        o.max_handshakes = 16;
        o.max_handshakes_per_ip = 8;
    })
    .await;
}
