//! TLS with certificates made at test time (rcgen): the gateway verifies each
//! plugin against that plugin's CA bundle alone, presents its client
//! certificate when configured, picks up rotated certificates on reload, and,
//! in central mode, serves TLS, requires client certificates and scopes each
//! hub to its own registry.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use common::*;
use rollout_gateway::app::{self, Options};
use rollout_gateway::tls::ServerTlsFiles;
use rollout_plugin_sdk::test_certs::rcgen::{self, CertificateParams};
use rollout_plugin_sdk::test_certs::{TestCa as Ca, TestCert as Leaf};
use rollout_proto::v1alpha1::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_proto::v1alpha1::rollout_plugin_service_server::RolloutPluginServiceServer;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::Code;
use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// The CA bundle of `ca` as `caCertificate.caBundle` wants it.
fn bundle_b64(ca: &Ca) -> String {
    base64::engine::general_purpose::STANDARD.encode(ca.pem())
}

/// A client certificate for `hub` that expired long ago.
fn expired_client(ca: &Ca, hub: &str) -> Leaf {
    let mut params = CertificateParams::new(vec![hub.to_string()]).unwrap();
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    ca.sign(params).unwrap()
}

/// Starts a TLS plugin on `addr` (127.0.0.1:0 for a new port); with
/// `client_ca`, it requires client certificates signed by it.
async fn tls_plugin(addr: SocketAddr, leaf: &Leaf, client_ca: Option<&Ca>) -> Plugin {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(&leaf.cert, &leaf.key));
    if let Some(ca) = client_ca {
        tls = tls.client_ca_root(Certificate::from_pem(ca.pem()));
    }
    let handle = plugin_handle(addr, Behaviour::new("secure"));
    let svc = RolloutPluginServiceServer::new(handle.service());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    handle.on_stop(tx);
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .tls_config(tls)
            .unwrap()
            .add_service(svc)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async {
                let _ = rx.await;
            })
            .await;
    });
    handle
}

fn tls_entry(name: &str, addr: SocketAddr, ca: &Ca, extra: &str) -> String {
    format!(
        "  - name: {name}\n    endpoint: {addr}\n    caCertificate:\n      caBundle: \"{}\"\n{extra}",
        bundle_b64(ca)
    )
}

#[tokio::test]
async fn each_plugin_is_verified_against_its_own_ca_bundle_alone() {
    let ca1 = Ca::new("ca-1").unwrap();
    let ca2 = Ca::new("ca-2").unwrap();
    let p = tls_plugin("127.0.0.1:0".parse().unwrap(), &ca1.server().unwrap(), None).await;
    let gw = gateway(&format!(
        "defaults:\n  retry:\n    maxAttempts: 1\nplugins:\n{}{}",
        tls_entry("right-ca", p.addr, &ca1, ""),
        tls_entry("wrong-ca", p.addr, &ca2, "")
    ))
    .await;
    let mut c = gw.client().await;
    c.begin_rollout(to("right-ca", rollout("c1")))
        .await
        .expect("verified against CA1");
    let e = c
        .begin_rollout(to("wrong-ca", rollout("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(
        e.message().contains("TLS handshake")
            && e.message().contains("invalid peer certificate")
            && e.message().contains("wrong-ca"),
        "{}",
        e.message()
    );
    gw.stop().await;
}

#[tokio::test]
async fn the_gateway_presents_its_client_certificate_when_configured() {
    let ca = Ca::new("plugin-ca").unwrap();
    let clients = Ca::new("gateway-clients").unwrap();
    let p = tls_plugin(
        "127.0.0.1:0".parse().unwrap(),
        &ca.server().unwrap(),
        Some(&clients),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let me = clients.leaf("rollout-gateway").unwrap();
    std::fs::write(dir.path().join("tls.crt"), &me.cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), &me.key).unwrap();
    let with_cert = dir.path().join("with.yaml");
    std::fs::write(
        &with_cert,
        format!(
            "clientCertificate:\n  certFile: {}\n  keyFile: {}\nplugins:\n{}",
            dir.path().join("tls.crt").display(),
            dir.path().join("tls.key").display(),
            tls_entry("mtls", p.addr, &ca, "")
        ),
    )
    .unwrap();
    let without_cert = dir.path().join("without.yaml");
    std::fs::write(
        &without_cert,
        format!(
            "hub: other\ndefaults:\n  retry:\n    maxAttempts: 1\nplugins:\n{}",
            tls_entry("no-cert", p.addr, &ca, "")
        ),
    )
    .unwrap();
    let gw = gateway_with(dir, with_cert.clone(), |o| {
        o.configs = vec![with_cert, without_cert]
    })
    .await;
    let mut c = gw.client().await;
    c.begin_rollout(to("mtls", rollout("c1")))
        .await
        .expect("mTLS works");
    // Without a client certificate the plugin refuses the connection. (The
    // entry lives in hub "other"'s file; resolve it as that hub would.)
    let registry = gw.running.as_ref().unwrap().registry.clone();
    let snapshot = registry.load().unwrap();
    let other = rollout_gateway::hub::Hub::new("other");
    let plugin = match snapshot.resolve(Some(&other), "no-cert").unwrap() {
        rollout_gateway::registry::Target::Plugin(p) => p.clone(),
        other => panic!("{other:?}"),
    };
    let e = plugin
        .upstream
        .call(
            rollout_gateway::hooks::HookRequest::begin_rollout(&rollout("c1")),
            tokio::time::Instant::now() + Duration::from_secs(5),
            rollout_gateway::error::DeadlineOwner::Plugin,
            &http::HeaderMap::new(),
            Some(&other),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    gw.stop().await;
}

#[tokio::test]
async fn a_rotated_plugin_certificate_and_ca_work_after_a_reload() {
    let ca1 = Ca::new("ca-1").unwrap();
    let old = tls_plugin("127.0.0.1:0".parse().unwrap(), &ca1.server().unwrap(), None).await;
    let addr = old.addr;
    let gw = gateway(&format!(
        "plugins:\n{}",
        tls_entry("rotating", addr, &ca1, "")
    ))
    .await;
    let mut c = gw.client().await;
    c.begin_rollout(to("rotating", rollout("c1")))
        .await
        .unwrap();
    // The plugin restarts with a certificate of a new CA; the registry is
    // updated with the new bundle: no gateway restart.
    old.stop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ca2 = Ca::new("ca-2").unwrap();
    let _new = tls_plugin(addr, &ca2.server().unwrap(), None).await;
    gw.write_config(&format!(
        "plugins:\n{}",
        tls_entry("rotating", addr, &ca2, "")
    ));
    gw.wait_generation(2).await;
    c.begin_rollout(to("rotating", rollout("c1")))
        .await
        .expect("the new certificate is trusted");
    gw.stop().await;
}

/// A client of the central gateway with an optional identity.
async fn central_client(
    addr: SocketAddr,
    server_ca: &Ca,
    identity: Option<&Leaf>,
) -> Result<RolloutPluginServiceClient<tonic::transport::Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(server_ca.pem()))
        .domain_name("localhost");
    if let Some(leaf) = identity {
        tls = tls.identity(Identity::from_pem(&leaf.cert, &leaf.key));
    }
    let channel = tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(RolloutPluginServiceClient::new(channel))
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn central_mode_scopes_each_hub_and_requires_a_valid_client_certificate() {
    let server_ca = Ca::new("gateway-server").unwrap();
    let hubs_ca = Ca::new("hubs").unwrap();
    let other_ca = Ca::new("someone-else").unwrap();
    let plugin_a = plugin(Behaviour::new("a")).await;
    let plugin_b = plugin(Behaviour::new("b")).await;
    let shared = plugin(Behaviour::new("shared")).await;
    let dir = tempfile::tempdir().unwrap();
    let server = server_ca.server().unwrap();
    let files = ServerTlsFiles {
        cert: write(dir.path(), "tls.crt", &server.cert),
        key: write(dir.path(), "tls.key", &server.key),
        client_ca: Some(write(dir.path(), "hubs-ca.crt", &hubs_ca.pem())),
    };
    let configs = vec![
        write(
            dir.path(),
            "shared.yaml",
            &format!(
                "plugins:\n{}{}",
                insecure_plugin("shared-any", &shared, ""),
                insecure_plugin("shared-b-only", &shared, "    hubs: [hub-b]\n")
            ),
        ),
        write(
            dir.path(),
            "hub-a.yaml",
            &format!(
                "hub: hub-a\nplugins:\n{}",
                insecure_plugin("mine", &plugin_a, "")
            ),
        ),
        write(
            dir.path(),
            "hub-b.yaml",
            &format!(
                "hub: hub-b\nplugins:\n{}",
                insecure_plugin("mine", &plugin_b, "")
            ),
        ),
    ];
    let running = app::start(Options {
        configs,
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        tls: Some(files),
        ..Options::default()
    })
    .await
    .expect("central gateway starts");
    let addr = running.grpc_addr;

    let hub_a = hubs_ca.leaf("hub-a").unwrap();
    let mut a = central_client(addr, &server_ca, Some(&hub_a))
        .await
        .expect("hub-a connects");
    // Its own "mine" is hub-a's plugin, not hub-b's.
    a.begin_rollout(to("mine", rollout("c1"))).await.unwrap();
    assert_eq!(
        plugin_a.calls(rollout_gateway::hooks::HookKind::BeginRollout),
        1
    );
    assert_eq!(
        plugin_b.calls(rollout_gateway::hooks::HookKind::BeginRollout),
        0
    );
    a.begin_rollout(to("shared-any", rollout("c1")))
        .await
        .unwrap();
    let e = a
        .begin_rollout(to("shared-b-only", rollout("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let hub_b = hubs_ca.leaf("hub-b").unwrap();
    let mut b = central_client(addr, &server_ca, Some(&hub_b))
        .await
        .unwrap();
    b.begin_rollout(to("mine", rollout("c1"))).await.unwrap();
    assert_eq!(
        plugin_b.calls(rollout_gateway::hooks::HookKind::BeginRollout),
        1
    );
    b.begin_rollout(to("shared-b-only", rollout("c1")))
        .await
        .unwrap();
    // Both hubs' "mine" keep their own series; a shared plugin's hub is empty.
    let text = running.registry.telemetry().metrics.encode();
    for series in [
        r#"rollout_gateway_hook_requests_total{hook="BeginRollout",plugin="mine",hub="hub-a",code="OK"} 1"#,
        r#"rollout_gateway_hook_requests_total{hook="BeginRollout",plugin="mine",hub="hub-b",code="OK"} 1"#,
        r#"rollout_gateway_upstream_attempts_total{hook="BeginRollout",plugin="mine",hub="hub-a",code="OK"} 1"#,
        r#"rollout_gateway_hook_duration_seconds_count{hook="BeginRollout",plugin="mine",hub="hub-b"} 1"#,
        r#"rollout_gateway_hook_requests_total{hook="BeginRollout",plugin="shared-any",hub="",code="OK"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == series), "no {series} in:\n{text}");
    }
    // A name only hub-b has is NOT_FOUND for hub-a: nothing leaks across hubs.
    let hub_c = hubs_ca.leaf("hub-c").unwrap();
    let mut c = central_client(addr, &server_ca, Some(&hub_c))
        .await
        .unwrap();
    let e = c
        .begin_rollout(to("mine", rollout("c1")))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");

    // No certificate, an expired one, or one from another CA: no call completes.
    let expired = expired_client(&hubs_ca, "hub-a");
    let foreign = other_ca.leaf("hub-a").unwrap();
    for (what, identity) in [
        ("none", None),
        ("expired", Some(&expired)),
        ("other CA", Some(&foreign)),
    ] {
        let outcome = match central_client(addr, &server_ca, identity).await {
            Err(_) => Ok(()),
            // The handshake fails (tonic reports it as the call's error);
            // which code a client library gives it is the client's business.
            Ok(mut client) => match client.begin_rollout(to("shared-any", rollout("c1"))).await {
                Err(e) => {
                    assert!(
                        format!("{e:?}").contains("alert")
                            || format!("{e:?}").contains("certificate")
                            || e.code() == Code::Unavailable,
                        "{what}: {e:?}"
                    );
                    Ok(())
                }
                Ok(_) => Err(what),
            },
        };
        assert_eq!(
            outcome,
            Ok(()),
            "a client with {what} certificate completed a call"
        );
    }
    running.shutdown().await;
}

#[tokio::test]
async fn the_listeners_own_certificate_is_reloaded_without_a_restart() {
    let old_ca = Ca::new("old-server-ca").unwrap();
    let new_ca = Ca::new("new-server-ca").unwrap();
    let p = plugin(Behaviour::new("p")).await;
    let dir = tempfile::tempdir().unwrap();
    let old = old_ca.server().unwrap();
    let cert = write(dir.path(), "tls.crt", &old.cert);
    let key = write(dir.path(), "tls.key", &old.key);
    let config = write(
        dir.path(),
        "config.yaml",
        &format!("plugins:\n{}", insecure_plugin("p", &p, "")),
    );
    let running = app::start(Options {
        configs: vec![config],
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        poll_interval: Duration::from_millis(100),
        tls: Some(ServerTlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: None,
        }),
        ..Options::default()
    })
    .await
    .unwrap();
    let addr = running.grpc_addr;
    let mut c = central_client(addr, &old_ca, None).await.unwrap();
    c.begin_rollout(to("p", rollout("c1"))).await.unwrap();

    // Rotate: write the key, then the certificate, of the new CA.
    let new = new_ca.server().unwrap();
    std::fs::write(&key, &new.key).unwrap();
    std::fs::write(&cert, &new.cert).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(mut c) = central_client(addr, &new_ca, None).await
            && c.begin_rollout(to("p", rollout("c1"))).await.is_ok()
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new certificate was not served"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A client that trusts only the old CA no longer completes a handshake.
    let stale = match central_client(addr, &old_ca, None).await {
        Err(_) => true,
        Ok(mut c) => c.begin_rollout(to("p", rollout("c1"))).await.is_err(),
    };
    assert!(stale, "the old certificate is still served");
    running.shutdown().await;
}

#[tokio::test]
async fn a_client_ca_removed_from_client_ca_stops_working_within_the_max_connection_age() {
    let server_ca = Ca::new("gateway-server").unwrap();
    let old_hubs = Ca::new("old-hubs").unwrap();
    let new_hubs = Ca::new("new-hubs").unwrap();
    let p = plugin(Behaviour::new("p")).await;
    let dir = tempfile::tempdir().unwrap();
    let server = server_ca.server().unwrap();
    let client_ca = write(dir.path(), "hubs-ca.crt", &old_hubs.pem());
    let config = write(
        dir.path(),
        "config.yaml",
        &format!("plugins:\n{}", insecure_plugin("p", &p, "")),
    );
    let max_age = Duration::from_secs(1);
    let grace = Duration::from_millis(200);
    let running = app::start(Options {
        configs: vec![config],
        listen: "127.0.0.1:0".parse().unwrap(),
        admin_listen: "127.0.0.1:0".parse().unwrap(),
        poll_interval: Duration::from_millis(100),
        tls: Some(ServerTlsFiles {
            cert: write(dir.path(), "tls.crt", &server.cert),
            key: write(dir.path(), "tls.key", &server.key),
            client_ca: Some(client_ca.clone()),
        }),
        max_connection_age: max_age,
        max_connection_age_grace: grace,
        ..Options::default()
    })
    .await
    .unwrap();
    let addr = running.grpc_addr;
    let hub = old_hubs.leaf("hub-a").unwrap();
    // Before connecting: the gateway counts the age from when it accepted.
    let opened = std::time::Instant::now();
    let mut connected = central_client(addr, &server_ca, Some(&hub)).await.unwrap();
    connected
        .begin_rollout(to("p", rollout("c1")))
        .await
        .unwrap();

    // The old CA is removed; new handshakes with its certificates fail.
    std::fs::write(&client_ca, new_hubs.pem()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let refused = match central_client(addr, &server_ca, Some(&hub)).await {
            Err(_) => true,
            Ok(mut c) => c.begin_rollout(to("p", rollout("c1"))).await.is_err(),
        };
        if refused {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the client CA was not reloaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The connection made before goes on until its age (plus the grace):
    // then the client is told to reconnect, and cannot.
    let deadline = opened + max_age + grace + Duration::from_secs(3);
    loop {
        if connected
            .begin_rollout(to("p", rollout("c1")))
            .await
            .is_err()
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the connection with a removed CA's certificate still works after {:?}",
            opened.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(opened.elapsed() >= max_age, "{:?}", opened.elapsed());
    running.shutdown().await;
}
