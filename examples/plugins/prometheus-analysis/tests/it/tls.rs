//! TLS to Prometheus: only the CA bundle given is trusted, a client
//! certificate is presented when given, and the bearer token is read from
//! its file at each query.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use prometheus_analysis::prometheus::{ClientError, Prometheus};
use rollout_plugin_sdk::proto::ValidationResult;
use rollout_plugin_sdk::test_certs::{TestCa, TestCert};
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::common::{FakeHttp, Reply, one_check, options, plugin_with, request};

fn server_config(server: &TestCert, client_ca: &TestCa) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(client_ca.pem().as_bytes()).unwrap())
        .unwrap();
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(server.cert.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(server.key.as_bytes()).unwrap(),
        )
        .unwrap();
    Arc::new(config)
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const ANSWER: &str = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;

#[tokio::test]
async fn https_with_a_client_certificate_and_a_bearer_token() {
    let ca = TestCa::new("prometheus-ca").unwrap();
    let fake = FakeHttp::start_with(
        Arc::new(|_| Reply::json(200, ANSWER)),
        Some(server_config(&ca.server().unwrap(), &ca)),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let client = ca.leaf("prometheus-analysis").unwrap();
    let token = write(dir.path(), "token", "s3cret\n");
    let mut opts = options(
        &format!("https://localhost:{}", fake.addr.port()),
        Duration::from_secs(2),
    );
    opts.ca_file = Some(write(dir.path(), "ca.crt", &ca.pem()));
    opts.identity = Some((
        write(dir.path(), "tls.crt", &client.cert),
        write(dir.path(), "tls.key", &client.key),
    ));
    opts.token_file = Some(token.clone());
    let analysis = plugin_with(opts.clone());
    let config = one_check(r#"up{c="{{cluster}}"}"#, ">=", 1.0, "1m");
    let r = request("c1", SystemTime::now() - Duration::from_secs(3), &config);
    let v = analysis.validate_at(&r, SystemTime::now()).await.unwrap();
    assert_eq!(v.result, ValidationResult::Inprogress, "{}", v.message);
    assert!(v.message.contains("0 of 3 samples"), "{}", v.message);
    // The token is read at each query: a rotated one is used next time.
    std::fs::write(&token, "rotated").unwrap();
    analysis.validate_at(&r, SystemTime::now()).await.unwrap();
    let seen = fake.seen();
    let auth: Vec<_> = seen
        .iter()
        .map(|s| s.header("authorization").unwrap())
        .collect();
    assert_eq!(auth, ["Bearer s3cret", "Bearer rotated"]);
    assert_eq!(seen[0].header("x-client-certificate"), Some("true"));
    assert_eq!(
        seen[0].header("host"),
        Some(format!("localhost:{}", fake.addr.port()).as_str())
    );

    // Without the client certificate the server sees none.
    let mut anonymous = opts.clone();
    anonymous.identity = None;
    plugin_with(anonymous)
        .validate_at(&r, SystemTime::now())
        .await
        .unwrap();
    assert_eq!(fake.seen()[2].header("x-client-certificate"), Some("false"));

    // Another CA's certificate is not trusted: never SUCCEEDED, and the
    // server saw no request.
    let other = TestCa::new("other").unwrap();
    let mut untrusted = opts.clone();
    untrusted.ca_file = Some(write(dir.path(), "other.crt", &other.pem()));
    let v = plugin_with(untrusted)
        .validate_at(&r, SystemTime::now())
        .await
        .unwrap();
    assert_eq!(v.result, ValidationResult::Inprogress, "{}", v.message);
    assert!(
        v.message.contains("TLS with Prometheus failed"),
        "{}",
        v.message
    );
    assert_eq!(fake.seen().len(), 3);

    // An unreadable token file: not asked, not passed.
    let mut no_token = opts;
    no_token.token_file = Some(dir.path().join("missing"));
    let v = plugin_with(no_token)
        .validate_at(&r, SystemTime::now())
        .await
        .unwrap();
    assert_eq!(v.result, ValidationResult::Inprogress, "{}", v.message);
    assert!(
        v.message.contains("cannot read the bearer token file"),
        "{}",
        v.message
    );
}

#[test]
fn client_options_that_make_no_client_are_refused() {
    let table = [
        ("ftp://p:9090", "the scheme must be http or https"),
        ("http://p:9090/x?y=1", "a query string has no place here"),
        ("/api", "the scheme must be http or https"),
    ];
    for (url, why) in table {
        let err = Prometheus::new(&options(url, Duration::from_secs(1))).unwrap_err();
        assert!(matches!(err, ClientError::Url { .. }), "{url}: {err:?}");
        assert!(err.to_string().ends_with(why), "{url}: {err}");
    }
    let err = Prometheus::new(&options("https://p:9090", Duration::from_secs(1))).unwrap_err();
    assert!(matches!(err, ClientError::NoCa), "{err:?}");
    let mut missing = options("https://p:9090", Duration::from_secs(1));
    missing.ca_file = Some("/nonexistent/ca.crt".into());
    let err = Prometheus::new(&missing).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("cannot read --prometheus-ca-file /nonexistent/ca.crt"),
        "{err}"
    );
}
