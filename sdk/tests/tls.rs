//! TLS and mutual TLS with certificates made at test time (rcgen): the
//! server presents its certificate, refuses plaintext, and with a client CA
//! refuses clients without a certificate from that CA.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, SanType};
use rollout_plugin_sdk::prelude::*;
use rollout_plugin_sdk::proto::InitializeRequest;
use rollout_plugin_sdk::proto::rollout_plugin_service_client::RolloutPluginServiceClient;
use rollout_plugin_sdk::testing;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, PEM.
struct Leaf {
    cert: String,
    key: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// For `localhost` and 127.0.0.1.
    fn server(&self) -> Leaf {
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        self.sign(params)
    }

    fn client(&self, name: &str) -> Leaf {
        self.sign(CertificateParams::new(vec![name.to_string()]).unwrap())
    }

    fn sign(&self, params: CertificateParams) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

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
    let ca = Ca::new("plugin-ca");
    let leaf = ca.server();
    let options = ServeOptions::default().tls(TlsOptions::from_pem(leaf.cert, leaf.key));
    let server = testing::spawn_with(Plain, options).await.unwrap();
    let addr = server.local_addr();

    assert!(
        answers(tls_client(addr, &ca, None).await).await,
        "TLS client"
    );
    let other = Ca::new("other-ca");
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
    let server_ca = Ca::new("plugin-ca");
    let client_ca = Ca::new("gateway-ca");
    let leaf = server_ca.server();
    let options = ServeOptions::default()
        .tls(TlsOptions::from_pem(leaf.cert, leaf.key).client_ca_pem(client_ca.pem()));
    let server = testing::spawn_with(Plain, options).await.unwrap();
    let addr = server.local_addr();

    let gateway = client_ca.client("rollout-gateway");
    assert!(
        answers(tls_client(addr, &server_ca, Some(&gateway)).await).await,
        "trusted client"
    );
    assert!(
        !answers(tls_client(addr, &server_ca, None).await).await,
        "no client certificate"
    );
    let stranger = Ca::new("stranger-ca").client("rollout-gateway");
    assert!(
        !answers(tls_client(addr, &server_ca, Some(&stranger)).await).await,
        "client certificate from another CA"
    );

    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn tls_files_are_read_and_bad_pem_is_rejected_at_bind() {
    let ca = Ca::new("plugin-ca");
    let leaf = ca.server();
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
    let client = ca.client("gw");
    assert!(answers(tls_client(server.local_addr(), &ca, Some(&client)).await).await);
    server.shutdown().await.unwrap();

    let missing = TlsOptions::from_files(dir.path().join("nope.crt"), &key, None).unwrap_err();
    assert!(
        missing.to_string().starts_with("cannot read certificate "),
        "{missing}"
    );

    let other = ca.server();
    let mismatched = TlsOptions::from_pem(ca.server().cert, other.key);
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
