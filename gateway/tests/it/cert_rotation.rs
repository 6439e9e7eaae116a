//! Certificate files rotated while calls flow (docs/security.md, "Rotating
//! certificates"): a plugin's `caFile` and the gateway's `clientCertificate`
//! files are replaced, by an atomic rename and by a kubelet-style `..data`
//! symlink swap, while a task calls the gateway without pause. No call fails,
//! and the new material is used: the new CA is trusted (and the old one no
//! longer), and the plugin sees the new client certificate.
//!
//! The gateway polls its files only every 60 s here: the changes must be
//! seen through the directory watch.

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use rollout_plugin_sdk::test_certs::{TestCa as Ca, TestCert as Leaf};
use rollout_proto::v1alpha1::rollout_plugin_service_server::RolloutPluginServiceServer;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio_stream::wrappers::ReceiverStream;

/// How a directory of certificate files is updated.
#[derive(Debug, Clone, Copy)]
enum Swap {
    /// Each file written aside, then renamed over the old one.
    Rename,
    /// As the kubelet updates a mounted Secret: the files in a new
    /// `..<timestamp>` directory, the `..data` symlink swapped to it in one
    /// rename; each file is a symlink through `..data`.
    Kubelet,
}

/// A directory of certificate files, updated with one [`Swap`].
struct CertDir {
    dir: PathBuf,
    swap: Swap,
    version: usize,
}

impl CertDir {
    fn new(dir: PathBuf, swap: Swap, files: &[(&str, &str)]) -> CertDir {
        std::fs::create_dir_all(&dir).unwrap();
        let d = CertDir {
            dir,
            swap,
            version: 0,
        };
        if let Swap::Kubelet = swap {
            d.kubelet_data(files);
            std::os::unix::fs::symlink(d.data_dir(), d.dir.join("..data")).unwrap();
            for (name, _) in files {
                std::os::unix::fs::symlink(format!("..data/{name}"), d.dir.join(name)).unwrap();
            }
        } else {
            for (name, text) in files {
                std::fs::write(d.dir.join(name), text).unwrap();
            }
        }
        d
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn data_dir(&self) -> String {
        format!("..2026_11_24_00_00_{:02}", self.version)
    }

    fn kubelet_data(&self, files: &[(&str, &str)]) {
        let data = self.dir.join(self.data_dir());
        std::fs::create_dir(&data).unwrap();
        for (name, text) in files {
            std::fs::write(data.join(name), text).unwrap();
        }
    }

    /// Replaces the files' contents, in the order given for [`Swap::Rename`].
    fn update(&mut self, files: &[(&str, &str)]) {
        match self.swap {
            Swap::Rename => {
                for (name, text) in files {
                    let aside = self.dir.join(format!(".{name}.new"));
                    std::fs::write(&aside, text).unwrap();
                    std::fs::rename(&aside, self.dir.join(name)).unwrap();
                }
            }
            Swap::Kubelet => {
                let old = self.dir.join(self.data_dir());
                self.version += 1;
                self.kubelet_data(files);
                let tmp = self.dir.join("..data_tmp");
                std::os::unix::fs::symlink(self.data_dir(), &tmp).unwrap();
                std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
                std::fs::remove_dir_all(old).unwrap();
            }
        }
    }
}

/// A TLS plugin whose certificate can be changed while it runs, recording
/// each handshake: the certificate it served (by label) and the client's
/// identity (first DNS SAN of its certificate, "" without one).
struct TlsPlugin {
    addr: SocketAddr,
    serving: Arc<Mutex<(&'static str, Arc<ServerConfig>)>>,
    handshakes: Arc<Mutex<Vec<(&'static str, String)>>>,
    client_ca: Option<String>,
    _scripted: Plugin,
}

fn server_config(leaf: &Leaf, client_ca: Option<&str>) -> Arc<ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                roots.add(cert.unwrap()).unwrap();
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let certs = CertificateDer::pem_slice_iter(leaf.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).unwrap();
    let mut config = builder.with_single_cert(certs, key).unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

impl TlsPlugin {
    async fn start(label: &'static str, leaf: &Leaf, client_ca: Option<&Ca>) -> TlsPlugin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client_ca = client_ca.map(Ca::pem);
        let serving = Arc::new(Mutex::new((
            label,
            server_config(leaf, client_ca.as_deref()),
        )));
        let handshakes = Arc::new(Mutex::new(Vec::new()));
        let scripted = plugin_handle(addr, Behaviour::new(label));
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        {
            let serving = serving.clone();
            let handshakes = handshakes.clone();
            tokio::spawn(async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    let (label, config) = serving.lock().unwrap().clone();
                    let (tx, handshakes) = (tx.clone(), handshakes.clone());
                    tokio::spawn(async move {
                        // A refused handshake is the gateway's doing: nothing to serve.
                        let Ok(tls) = tokio_rustls::TlsAcceptor::from(config).accept(tcp).await
                        else {
                            return;
                        };
                        let client = tls
                            .get_ref()
                            .1
                            .peer_certificates()
                            .and_then(|c| c.first())
                            .and_then(rollout_gateway::tls::hub_of)
                            .map(|hub| hub.to_string())
                            .unwrap_or_default();
                        handshakes.lock().unwrap().push((label, client));
                        let _ = tx.send(Ok::<_, std::io::Error>(tls)).await;
                    });
                }
            });
        }
        let svc = RolloutPluginServiceServer::new(scripted.service());
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(ReceiverStream::new(rx)),
        );
        TlsPlugin {
            addr,
            serving,
            handshakes,
            client_ca,
            _scripted: scripted,
        }
    }

    /// Serves `leaf` from the next handshake on.
    fn rotate(&self, label: &'static str, leaf: &Leaf) {
        *self.serving.lock().unwrap() = (label, server_config(leaf, self.client_ca.as_deref()));
    }

    fn handshakes(&self) -> Vec<(&'static str, String)> {
        self.handshakes.lock().unwrap().clone()
    }
}

/// Calls `target` through the gateway one after the other until stopped,
/// counting successes and keeping every failure.
struct Calls {
    ok: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Calls {
    async fn start(gw: &Gateway, target: &'static str) -> Calls {
        let mut c = gw.client().await;
        let ok = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let task = {
            let (ok, failures, stop) = (ok.clone(), failures.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    match c.begin_rollout(to(target, rollout("c1"))).await {
                        Ok(_) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(status) => failures.lock().unwrap().push(format!("{status:?}")),
                    }
                }
            })
        };
        Calls {
            ok,
            failures,
            stop,
            task,
        }
    }

    /// Waits until `n` more calls have succeeded.
    async fn flow(&self, n: usize) {
        let until = self.ok.load(Ordering::SeqCst) + n;
        eventually(&format!("{n} more calls succeeded"), || {
            self.ok.load(Ordering::SeqCst) >= until
        })
        .await;
    }

    /// Stops the loop and asserts that no call failed.
    async fn finish(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap();
        let failures = self.failures.lock().unwrap().clone();
        assert!(failures.is_empty(), "calls failed: {failures:#?}");
        self.ok.load(Ordering::SeqCst)
    }
}

async fn generation(gw: &Gateway) -> u64 {
    gw.debug().await["generation"].as_u64().unwrap_or(0)
}

/// One call to `target` through a fresh client: `Ok` or the status code.
async fn call_once(gw: &Gateway, target: &str) -> Result<(), tonic::Code> {
    gw.client()
        .await
        .begin_rollout(to(target, rollout("c1")))
        .await
        .map(drop)
        .map_err(|s| s.code())
}

/// Polls `target` (with a deadline) until a call's outcome is `want`.
async fn until_outcome(gw: &Gateway, target: &str, want: Result<(), tonic::Code>, what: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = call_once(gw, target).await;
        if got == want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: still {got:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls the gateway (with a deadline) until it reports a reload error, and
/// returns it; `what` names the cause in the failure message.
async fn until_reload_error(gw: &Gateway, what: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(e) = gw.debug().await["lastReloadError"].as_str() {
            return e.to_string();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} was not reported"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn start_gateway(dir: tempfile::TempDir, config: &str) -> Gateway {
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, config).unwrap();
    // Polling only every minute: the watch must see the changes.
    gateway_with(dir, path, |o| o.poll_interval = Duration::from_secs(60)).await
}

fn ca_file_entry(name: &str, addr: SocketAddr, ca_file: &Path) -> String {
    format!(
        "  - name: {name}\n    endpoint: {addr}\n    caCertificate:\n      caFile: {}\n",
        ca_file.display()
    )
}

/// A plugin moves from CA-1 to CA-2 while the gateway's `caFile` goes from
/// CA-1 to CA-1+CA-2 to CA-2, with `swap`; calls to it never stop.
async fn a_ca_file_rotates_while_calls_flow(swap: Swap) {
    let (ca1, ca2) = (Ca::new("ca-1").unwrap(), Ca::new("ca-2").unwrap());
    let rotating = TlsPlugin::start("ca-1", &ca1.server().unwrap(), None).await;
    let new_only = TlsPlugin::start("ca-2", &ca2.server().unwrap(), None).await;
    let old_only = TlsPlugin::start("ca-1", &ca1.server().unwrap(), None).await;
    let dir = tempfile::tempdir().unwrap();
    let mut certs = CertDir::new(
        dir.path().join("plugin-ca"),
        swap,
        &[("ca.crt", &ca1.pem())],
    );
    let ca_file = certs.path("ca.crt");
    let gw = start_gateway(
        dir,
        &format!(
            "defaults:\n  retry:\n    maxAttempts: 1\nplugins:\n{}{}{}",
            ca_file_entry("rotating", rotating.addr, &ca_file),
            ca_file_entry("new-only", new_only.addr, &ca_file),
            ca_file_entry("old-only", old_only.addr, &ca_file),
        ),
    )
    .await;
    let calls = Calls::start(&gw, "rotating").await;
    calls.flow(20).await;
    assert_eq!(
        call_once(&gw, "new-only").await,
        Err(tonic::Code::Unavailable),
        "CA-2 is not trusted yet"
    );

    // Both CAs: a plugin serving only a CA-2 certificate becomes reachable.
    let before = generation(&gw).await;
    certs.update(&[("ca.crt", &format!("{}{}", ca1.pem(), ca2.pem()))]);
    gw.wait_generation(before + 1).await;
    until_outcome(&gw, "new-only", Ok(()), "CA-2 trusted after the bundle").await;
    assert_eq!(
        call_once(&gw, "old-only").await,
        Ok(()),
        "CA-1 still trusted"
    );
    calls.flow(20).await;

    // The plugin moves to a CA-2 certificate, then CA-1 is dropped: the
    // plugin is reached with its new certificate, and a CA-1-only one is
    // refused.
    rotating.rotate("ca-2", &ca2.server().unwrap());
    let before = generation(&gw).await;
    certs.update(&[("ca.crt", &ca2.pem())]);
    gw.wait_generation(before + 1).await;
    until_outcome(
        &gw,
        "old-only",
        Err(tonic::Code::Unavailable),
        "CA-1 no longer trusted",
    )
    .await;
    eventually("the rotating plugin served its CA-2 certificate", || {
        rotating
            .handshakes()
            .iter()
            .any(|(label, _)| *label == "ca-2")
    })
    .await;
    calls.flow(20).await;
    let ok = calls.finish().await;
    assert!(ok >= 60, "{ok}");
    assert!(
        new_only
            .handshakes()
            .iter()
            .all(|(label, _)| *label == "ca-2")
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_ca_file_replaced_by_rename_is_used_without_a_failed_call() {
    a_ca_file_rotates_while_calls_flow(Swap::Rename).await;
}

#[tokio::test]
async fn a_ca_file_swapped_like_the_kubelet_is_used_without_a_failed_call() {
    a_ca_file_rotates_while_calls_flow(Swap::Kubelet).await;
}

/// The gateway's client certificate files are replaced with `swap` (for
/// [`Swap::Rename`], the key first: for a moment the pair does not match)
/// while calls to a plugin requiring client certificates flow.
async fn a_client_certificate_rotates_while_calls_flow(swap: Swap) {
    let ca = Ca::new("plugin-ca").unwrap();
    let clients = Ca::new("gateway-clients").unwrap();
    let plugin = TlsPlugin::start("server", &ca.server().unwrap(), Some(&clients)).await;
    let one = clients.leaf("gateway-one").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut files = CertDir::new(
        dir.path().join("client-tls"),
        swap,
        &[("tls.key", &one.key), ("tls.crt", &one.cert)],
    );
    let ca_file = dir.path().join("plugin-ca.crt");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let gw = start_gateway(
        dir,
        &format!(
            "clientCertificate:\n  certFile: {}\n  keyFile: {}\ndefaults:\n  retry:\n    maxAttempts: 1\nplugins:\n{}",
            files.path("tls.crt").display(),
            files.path("tls.key").display(),
            ca_file_entry("mtls", plugin.addr, &ca_file),
        ),
    )
    .await;
    let calls = Calls::start(&gw, "mtls").await;
    calls.flow(20).await;
    assert!(
        plugin
            .handshakes()
            .iter()
            .all(|(_, client)| client == "gateway-one"),
        "{:?}",
        plugin.handshakes()
    );

    let two = clients.leaf("gateway-two").unwrap();
    let before = generation(&gw).await;
    files.update(&[("tls.key", &two.key), ("tls.crt", &two.cert)]);
    gw.wait_generation(before + 1).await;
    eventually("the plugin saw the new client certificate", || {
        plugin
            .handshakes()
            .last()
            .is_some_and(|(_, client)| client == "gateway-two")
    })
    .await;
    calls.flow(20).await;
    calls.finish().await;
    // Nothing else was presented meanwhile.
    let seen = plugin.handshakes();
    assert!(
        seen.iter()
            .all(|(_, c)| c == "gateway-one" || c == "gateway-two"),
        "{seen:?}"
    );
    assert_eq!(seen.last().map(|(_, c)| c.as_str()), Some("gateway-two"));
    gw.stop().await;
}

#[tokio::test]
async fn a_client_certificate_replaced_by_rename_is_used_without_a_failed_call() {
    a_client_certificate_rotates_while_calls_flow(Swap::Rename).await;
}

#[tokio::test]
async fn a_client_certificate_swapped_like_the_kubelet_is_used_without_a_failed_call() {
    a_client_certificate_rotates_while_calls_flow(Swap::Kubelet).await;
}

#[tokio::test]
async fn a_ca_file_gone_bad_keeps_the_previous_ca_and_is_reported() {
    let ca = Ca::new("ca-1").unwrap();
    let plugin = TlsPlugin::start("ca-1", &ca.server().unwrap(), None).await;
    let dir = tempfile::tempdir().unwrap();
    let mut certs = CertDir::new(
        dir.path().join("plugin-ca"),
        Swap::Kubelet,
        &[("ca.crt", &ca.pem())],
    );
    let ca_file = certs.path("ca.crt");
    let gw = start_gateway(
        dir,
        &format!(
            "defaults:\n  retry:\n    maxAttempts: 1\nplugins:\n{}",
            ca_file_entry("p", plugin.addr, &ca_file)
        ),
    )
    .await;
    let calls = Calls::start(&gw, "p").await;
    calls.flow(20).await;
    let generation_before = generation(&gw).await;

    certs.update(&[("ca.crt", "-----BEGIN NOTHING-----\n")]);
    let error = until_reload_error(&gw, "the bad file").await;
    assert!(
        error.contains(&format!("{} holds no PEM CERTIFICATE", ca_file.display()))
            && error.contains("plugins[0] (p).caCertificate.caFile"),
        "{error}"
    );
    let debug = gw.debug().await;
    assert_eq!(debug["reloads"]["failure"], 1, "{debug}");
    assert_eq!(generation(&gw).await, generation_before);
    // The previous CA stays in use: calls go on.
    calls.flow(20).await;
    assert_eq!(call_once(&gw, "p").await, Ok(()));

    // Put right, the error clears.
    certs.update(&[("ca.crt", &ca.pem())]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !gw.debug().await["lastReloadError"].is_null() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the error was not cleared"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    calls.flow(20).await;
    calls.finish().await;
    gw.stop().await;
}

#[tokio::test]
async fn a_registry_naming_a_ca_file_not_written_yet_is_loaded_once_it_is() {
    let ca = Ca::new("ca-1").unwrap();
    let plugin = TlsPlugin::start("ca-1", &ca.server().unwrap(), None).await;
    let dir = tempfile::tempdir().unwrap();
    let first = CertDir::new(
        dir.path().join("first-ca"),
        Swap::Rename,
        &[("ca.crt", &ca.pem())],
    );
    let mut later = CertDir::new(dir.path().join("later-ca"), Swap::Rename, &[]);
    let missing = later.path("ca.crt");
    let gw = start_gateway(
        dir,
        &format!(
            "plugins:\n{}",
            ca_file_entry("p", plugin.addr, &first.path("ca.crt"))
        ),
    )
    .await;
    until_outcome(&gw, "p", Ok(()), "the first plugin").await;
    let generation_before = generation(&gw).await;

    // The registry names a CA file before it is written (a Secret mounted
    // after the ConfigMap): refused, naming the file, the registry kept.
    gw.write_config(&format!(
        "plugins:\n{}{}",
        ca_file_entry("p", plugin.addr, &first.path("ca.crt")),
        ca_file_entry("q", plugin.addr, &missing)
    ));
    let error = until_reload_error(&gw, "the missing file").await;
    assert!(
        error.contains(&format!("cannot read {}", missing.display()))
            && error.contains("plugins[1] (q).caCertificate.caFile"),
        "{error}"
    );
    assert_eq!(generation(&gw).await, generation_before);
    assert_eq!(call_once(&gw, "q").await, Err(tonic::Code::NotFound));

    // The file is written; the registry file is not touched again.
    later.update(&[("ca.crt", &ca.pem())]);
    until_outcome(&gw, "q", Ok(()), "the plugin whose CA came later").await;
    let debug = gw.debug().await;
    assert!(debug["lastReloadError"].is_null(), "{debug}");
    // Refused once, not once per look at the file.
    assert_eq!(debug["reloads"]["failure"], 1, "{debug}");
    assert_eq!(call_once(&gw, "p").await, Ok(()));
    gw.stop().await;
}
