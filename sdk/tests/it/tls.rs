//! TLS and mutual TLS with certificates made at test time (rcgen): the
//! server presents its certificate, refuses plaintext, and with a client CA
//! refuses clients without a certificate from that CA.

use std::net::SocketAddr;

use rollout_plugin_sdk::prelude::*;
use rollout_plugin_sdk::proto::InitializeRequest;
use rollout_plugin_sdk::proto::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_plugin_sdk::test_certs::{TestCa as Ca, TestCert as Leaf};
use rollout_plugin_sdk::testing;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

struct Plain;

impl RolloutPlugin for Plain {
    fn info(&self) -> PluginInfo {
        PluginInfo::new("secure", "0.1.0")
    }
}

async fn tls_client(
    addr: SocketAddr,
    ca: &Ca,
    identity: Option<&Leaf>,
) -> Result<RolloutPluginServiceClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca.pem()))
        .domain_name("localhost");
    if let Some(leaf) = identity {
        tls = tls.identity(Identity::from_pem(&leaf.cert, &leaf.key));
    }
    let channel = Endpoint::from_shared(format!("https://{addr}"))?
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(RolloutPluginServiceClient::new(channel))
}

/// Whether an Initialize call through `client` succeeds.
async fn answers(
    client: Result<RolloutPluginServiceClient<Channel>, tonic::transport::Error>,
) -> bool {
    let Ok(mut client) = client else {
        return false;
    };
    client
        .initialize(InitializeRequest::default())
        .await
        .is_ok_and(|r| r.into_inner().name == "secure")
}

#[tokio::test]
async fn tls_serves_its_certificate_and_refuses_plaintext() {
    let ca = Ca::new("plugin-ca").unwrap();
    let leaf = ca.server().unwrap();
    let options = ServeOptions::default().tls(TlsOptions::from_pem(leaf.cert, leaf.key));
    let server = testing::spawn_with(Plain, options).await.unwrap();
    let addr = server.local_addr();

    assert!(
        answers(tls_client(addr, &ca, None).await).await,
        "TLS client"
    );
    let other = Ca::new("other-ca").unwrap();
    assert!(
        !answers(tls_client(addr, &other, None).await).await,
        "untrusted server CA"
    );
    assert!(
        !answers(testing::connect(addr).await).await,
        "plaintext client"
    );

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn mtls_requires_a_client_certificate_from_the_client_ca() {
    let server_ca = Ca::new("plugin-ca").unwrap();
    let client_ca = Ca::new("gateway-ca").unwrap();
    let leaf = server_ca.server().unwrap();
    let options = ServeOptions::default()
        .tls(TlsOptions::from_pem(leaf.cert, leaf.key).client_ca_pem(client_ca.pem()));
    let server = testing::spawn_with(Plain, options).await.unwrap();
    let addr = server.local_addr();

    let gateway = client_ca.leaf("rollout-gateway").unwrap();
    assert!(
        answers(tls_client(addr, &server_ca, Some(&gateway)).await).await,
        "trusted client"
    );
    assert!(
        !answers(tls_client(addr, &server_ca, None).await).await,
        "no client certificate"
    );
    let stranger = Ca::new("stranger-ca")
        .unwrap()
        .leaf("rollout-gateway")
        .unwrap();
    assert!(
        !answers(tls_client(addr, &server_ca, Some(&stranger)).await).await,
        "client certificate from another CA"
    );

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn tls_files_are_read_and_bad_pem_is_rejected_at_bind() {
    let ca = Ca::new("plugin-ca").unwrap();
    let leaf = ca.server().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, client_ca) = (
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        dir.path().join("ca.crt"),
    );
    std::fs::write(&cert, &leaf.cert).unwrap();
    std::fs::write(&key, &leaf.key).unwrap();
    std::fs::write(&client_ca, ca.pem()).unwrap();

    let tls = TlsOptions::from_files(&cert, &key, Some(&client_ca)).unwrap();
    assert!(tls.requires_client_certificate());
    let server = testing::spawn_with(Plain, ServeOptions::default().tls(tls))
        .await
        .unwrap();
    let client = ca.leaf("gw").unwrap();
    assert!(answers(tls_client(server.local_addr(), &ca, Some(&client)).await).await);
    server.shutdown().await.unwrap();

    let missing = TlsOptions::from_files(dir.path().join("nope.crt"), &key, None).unwrap_err();
    assert!(
        missing.to_string().starts_with("cannot read certificate "),
        "{missing}"
    );

    let other = ca.server().unwrap();
    let mismatched = TlsOptions::from_pem(ca.server().unwrap().cert, other.key);
    let err = testing::spawn_with(Plain, ServeOptions::default().tls(mismatched))
        .await
        .unwrap_err();
    assert!(matches!(err, ServeError::Tls(_)), "{err}");

    let garbage = TlsOptions::from_pem("not a certificate", "not a key");
    let err = testing::spawn_with(Plain, ServeOptions::default().tls(garbage))
        .await
        .unwrap_err();
    assert!(matches!(err, ServeError::Tls(_)), "{err}");
}

/// Writes `text` to `path` the way rotation tools do: a new file renamed
/// over the old one.
fn replace(path: &std::path::Path, text: &str) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn rotated_certificate_files_are_served_from_the_next_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, client_ca) = (
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        dir.path().join("ca.crt"),
    );
    let old_ca = Ca::new("old-ca").unwrap();
    let old_leaf = old_ca.server().unwrap();
    let hub = old_ca.leaf("hub").unwrap();
    replace(&cert, &old_leaf.cert);
    replace(&key, &old_leaf.key);
    replace(&client_ca, &old_ca.pem());
    let tls = TlsOptions::from_files(&cert, &key, Some(&client_ca)).unwrap();
    let server = testing::spawn_with(Plain, ServeOptions::default().tls(tls))
        .await
        .unwrap();
    let addr = server.local_addr();
    let kept = tls_client(addr, &old_ca, Some(&hub)).await.unwrap();
    assert!(answers(Ok(kept.clone())).await, "before the rotation");

    // Rotate everything to a new CA: the server's certificate and the CA
    // its clients must chain to.
    let new_ca = Ca::new("new-ca").unwrap();
    let new_leaf = new_ca.server().unwrap();
    let new_hub = new_ca.leaf("hub").unwrap();
    replace(&client_ca, &new_ca.pem());
    replace(&key, &new_leaf.key);
    replace(&cert, &new_leaf.cert);

    assert!(
        answers(tls_client(addr, &new_ca, Some(&new_hub)).await).await,
        "a new connection gets the new certificate and trusts the new client CA"
    );
    assert!(
        !answers(tls_client(addr, &old_ca, Some(&hub)).await).await,
        "a new connection no longer gets the old certificate"
    );
    assert!(
        !answers(tls_client(addr, &new_ca, Some(&hub)).await).await,
        "a client certificate of the old CA is refused"
    );
    assert!(answers(Ok(kept)).await, "an open connection carries on");

    // A half-written rotation (a key that does not match) keeps the last
    // good configuration.
    let other = new_ca.server().unwrap();
    replace(&key, &other.key);
    assert!(
        answers(tls_client(addr, &new_ca, Some(&new_hub)).await).await,
        "the last good configuration"
    );
    server.shutdown().await.unwrap();
}
