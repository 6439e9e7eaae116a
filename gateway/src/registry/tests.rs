//! The registry through its own API: resolution in hub scopes, reloads
//! that load or are refused, upstreams kept or rebuilt, certificate
//! reloads, and what each change publishes to the metrics.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use super::snapshot::affected_plugins;
use super::*;
use crate::error::ResolveError;
use crate::hub::Hub;

fn registry(n: usize) -> Registry {
    Registry::new(
        (0..n)
            .map(|i| SourceInfo {
                label: format!("file{i}"),
            })
            .collect(),
        ChannelSettings::default(),
    )
}

const SHARED: &str = "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    insecure: true\n  - name: b\n    endpoint: 127.0.0.1:7002\n    insecure: true\n    hubs: [hub-b]\n";
const HUB_A: &str = "hub: hub-a\nplugins:\n  - name: mine\n    endpoint: 127.0.0.1:7003\n    insecure: true\npipelines:\n  - name: p\n    plugins: [mine, a]\n";

#[tokio::test]
async fn hub_scopes_resolve_own_first_then_shared() {
    let r = registry(2);
    r.apply("file0", SHARED).expect("shared");
    r.apply("file1", HUB_A).expect("hub-a");
    let snap = r.load().expect("loaded");
    assert_eq!(snap.generation, 2);
    assert!(matches!(
        snap.resolve(Some(&Hub::new("hub-a")), "mine"),
        Ok(Target::Plugin(_))
    ));
    assert_eq!(
        snap.resolve(Some(&Hub::new("hub-a")), "p")
            .map(|t| t.members().len()),
        Ok(2)
    );
    assert!(snap.resolve(Some(&Hub::new("hub-a")), "a").is_ok());
    assert_eq!(
        snap.resolve(Some(&Hub::new("hub-b")), "mine").map(|_| ()),
        Err(ResolveError::NotFound {
            name: "mine".into(),
            hub: Some("hub-b".into())
        })
    );
    assert!(matches!(
        snap.resolve(Some(&Hub::new("hub-a")), "b"),
        Err(ResolveError::PermissionDenied { .. })
    ));
    assert!(snap.resolve(Some(&Hub::new("hub-b")), "b").is_ok());
    // No hub identity: only shared names, and `hubs:` plugins are denied.
    assert!(matches!(
        snap.resolve(None, "mine"),
        Err(ResolveError::NotFound { .. })
    ));
    assert!(matches!(
        snap.resolve(None, "b"),
        Err(ResolveError::PermissionDenied { .. })
    ));
}

#[tokio::test]
async fn a_bad_change_keeps_the_previous_snapshot_and_is_recorded() {
    let r = registry(1);
    r.apply("file0", SHARED).expect("ok");
    let before = r.load().expect("loaded");
    let err = r
        .apply("file0", "plugins:\n  - name: a\n    endpoint: x\n")
        .expect_err("bad");
    assert!(err.to_string().starts_with("file0: "), "{err}");
    assert!(Arc::ptr_eq(&before, &r.load().expect("still loaded")));
    assert!(r.last_error().is_some());
    assert_eq!(
        r.reload_counts(),
        ReloadCounts {
            success: 1,
            failure: 1
        }
    );
    // Blank text never replaces a registry; identical text is a no-op.
    assert_eq!(r.apply("file0", "\n").ok(), Some(Applied::Blank));
    assert_eq!(r.apply("file0", SHARED).ok(), Some(Applied::Loaded(2)));
    assert_eq!(r.apply("file0", SHARED).ok(), Some(Applied::Unchanged));
    assert!(r.last_error().is_none());
}

#[tokio::test]
async fn unchanged_endpoints_keep_their_upstream() {
    let r = registry(1);
    r.apply("file0", SHARED).expect("ok");
    let s1 = r.load().expect("loaded");
    let changed = SHARED.replace("127.0.0.1:7002", "127.0.0.1:7009");
    r.apply("file0", &changed).expect("ok");
    let s2 = r.load().expect("loaded");
    let up = |s: &Snapshot, n: &str| match s.resolve(Some(&Hub::new("hub-b")), n) {
        Ok(Target::Plugin(p)) => p.upstream.clone(),
        other => panic!("{other:?}"),
    };
    assert!(Arc::ptr_eq(&up(&s1, "a"), &up(&s2, "a")));
    assert!(!Arc::ptr_eq(&up(&s1, "b"), &up(&s2, "b")));
}

#[tokio::test]
async fn clashes_across_files_and_unknown_members_are_rejected() {
    let r = registry(2);
    r.apply("file0", SHARED).expect("ok");
    let err = r.apply("file1", SHARED).expect_err("clash");
    assert!(
        err.to_string()
            .contains("\"a\" is already defined by file0 for the same hub"),
        "{err}"
    );
    let err = r
        .apply(
            "file1",
            "hub: hub-a\npipelines:\n  - name: p\n    plugins: [ghost]\n",
        )
        .expect_err("unknown member");
    assert!(
        err.to_string()
            .contains("\"ghost\" is not a plugin of hub hub-a or a shared plugin"),
        "{err}"
    );
}

#[tokio::test]
async fn a_large_registry_is_parsed_and_planned_off_the_runtime() {
    let mut text = String::from("plugins:\n");
    for i in 0..2_000 {
        text.push_str(&format!(
            "  - name: p{i}\n    endpoint: 127.0.0.1:{}\n    insecure: true\n",
            1_000 + i
        ));
    }
    let r = Arc::new(registry(1));
    // This test's runtime has one thread: a parse on it would let nothing
    // else run until it is done.
    let ticks = Arc::new(AtomicU64::new(0));
    let ticker = {
        let ticks = ticks.clone();
        tokio::spawn(async move {
            loop {
                ticks.fetch_add(1, Ordering::Relaxed);
                tokio::task::yield_now().await;
            }
        })
    };
    tokio::task::yield_now().await;
    let before = ticks.load(Ordering::Relaxed);
    assert_eq!(
        r.apply_blocking("file0", text).await.expect("valid"),
        Applied::Loaded(1)
    );
    ticker.abort();
    assert!(
        ticks.load(Ordering::Relaxed) > before,
        "the runtime was held during the reload"
    );
    assert_eq!(r.load().expect("loaded").plugins.len(), 2_000);
}

#[tokio::test]
async fn a_change_rejected_across_files_leaves_the_kept_plugins_settings() {
    let r = registry(2);
    let with = |failures: u32, max: u32, per_second: u32| {
        format!(
            "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    insecure: true\n    maxConcurrentCalls: {max}\n    circuitBreaker:\n      consecutiveFailures: {failures}\n    retryBudget:\n      minPerSecond: {per_second}\n"
        )
    };
    r.apply("file0", &with(7, 4, 3)).expect("ok");
    r.apply(
        "file1",
        "plugins:\n  - name: b\n    endpoint: 127.0.0.1:7002\n    insecure: true\n",
    )
    .expect("ok");
    let settings = |r: &Registry| match r.load().expect("loaded").resolve(None, "a") {
        Ok(Target::Plugin(p)) => p.upstream.kept_settings(),
        other => panic!("{other:?}"),
    };
    let before = settings(&r);
    assert_eq!(before.max_concurrent_calls, 4);
    // New settings for "a", and a name the other file defines.
    let clash = format!(
        "{}  - name: b\n    endpoint: 127.0.0.1:7003\n    insecure: true\n",
        with(2, 9, 50)
    );
    let err = r.apply("file0", &clash).expect_err("clash");
    assert!(err.to_string().contains("already defined"), "{err}");
    assert_eq!(settings(&r), before);
    // Accepted, the same settings do apply to the kept upstream.
    r.apply("file0", &with(2, 9, 50)).expect("ok");
    let after = settings(&r);
    assert_eq!(after.max_concurrent_calls, 9);
    assert_eq!(after.breaker.consecutive_failures, 2);
    assert_eq!(after.budget.min_per_second, 50);
}

fn plugin_named<'a>(s: &'a Snapshot, name: &str) -> &'a Arc<Plugin> {
    s.plugins.iter().find(|p| p.name == name).expect(name)
}

#[tokio::test]
async fn the_plugins_affected_by_a_file_are_those_built_from_it() {
    use rollout_plugin_sdk::test_certs::TestCa;
    let dir = tempfile::tempdir().expect("dir");
    let ca = |name: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, TestCa::new(name).expect("ca").pem()).expect("write");
        path
    };
    let (one, two) = (ca("one.crt"), ca("two.crt"));
    let clients = TestCa::new("clients").expect("ca");
    let me = clients.leaf("gateway").expect("leaf");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::write(&cert, &me.cert).expect("write");
    std::fs::write(&key, &me.key).expect("write");
    let r = registry(2);
    r.apply(
        "file0",
        &format!(
            "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    caCertificate:\n      caFile: {}\n  - name: b\n    endpoint: 127.0.0.1:7002\n    caCertificate:\n      caFile: {}\n  - name: c\n    endpoint: 127.0.0.1:7003\n    insecure: true\n",
            one.display(),
            two.display()
        ),
    )
    .expect("file 0");
    r.apply(
        "file1",
        &format!(
            "hub: hub-a\nclientCertificate:\n  certFile: {}\n  keyFile: {}\nplugins:\n  - name: d\n    endpoint: 127.0.0.1:7004\n    caCertificate:\n      caFile: {}\n",
            cert.display(),
            key.display(),
            one.display()
        ),
    )
    .expect("file 1");
    let snap = r.load().expect("loaded");
    assert_eq!(
        snap.certificate_files(),
        BTreeSet::from([one.clone(), two.clone(), cert.clone(), key.clone()])
    );
    let names = |changed: &[PathBuf]| -> Vec<String> {
        affected_plugins(&snap, changed)
            .iter()
            .map(|p| p.name.clone())
            .collect()
    };
    assert_eq!(names(std::slice::from_ref(&one)), vec!["a", "d"]);
    assert_eq!(names(std::slice::from_ref(&two)), vec!["b"]);
    assert_eq!(names(std::slice::from_ref(&key)), vec!["d"]);
    assert_eq!(names(&[dir.path().join("other.crt")]), Vec::<String>::new());
    assert_eq!(names(&[]), Vec::<String>::new());
}

/// A CA file named by 200 plugins is read, held and parsed once: one
/// copy of its bytes, one TLS configuration.
#[tokio::test]
async fn a_ca_file_named_by_many_plugins_is_held_and_parsed_once() {
    use rollout_plugin_sdk::test_certs::TestCa;
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("ca.crt");
    std::fs::write(&path, TestCa::new("ca").expect("ca").pem()).expect("write");
    let mut text = String::from("plugins:\n");
    for i in 0..200 {
        text += &format!(
            "  - name: p{i}\n    endpoint: 127.0.0.1:{}\n    caCertificate:\n      caFile: {}\n",
            20000 + i,
            path.display()
        );
    }
    let r = registry(1);
    r.apply("file0", &text).expect("valid");
    let snap = r.load().expect("loaded");
    let bundles: Vec<&crate::upstream::CaBundle> = snap
        .plugins
        .iter()
        .filter_map(|p| p.upstream.key().ca_bundle.as_ref())
        .collect();
    assert_eq!(bundles.len(), 200);
    assert!(
        bundles.iter().all(|b| Arc::ptr_eq(&b.pem, &bundles[0].pem)),
        "one copy of the bytes"
    );
    assert_eq!(
        r.build.channel.tls_configs.len(),
        1,
        "one TLS configuration"
    );
}

#[tokio::test]
async fn a_changed_ca_file_rebuilds_only_its_plugins_and_a_bad_one_keeps_the_previous() {
    use rollout_plugin_sdk::test_certs::TestCa;
    let dir = tempfile::tempdir().expect("dir");
    let (one, two) = (dir.path().join("one.crt"), dir.path().join("two.crt"));
    let first = TestCa::new("first").expect("ca").pem();
    std::fs::write(&one, &first).expect("write");
    std::fs::write(&two, TestCa::new("other").expect("ca").pem()).expect("write");
    let r = registry(1);
    r.apply(
        "file0",
        &format!(
            "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    caCertificate:\n      caFile: {}\n  - name: b\n    endpoint: 127.0.0.1:7002\n    caCertificate:\n      caFile: {}\n",
            one.display(),
            two.display()
        ),
    )
    .expect("valid");
    let s1 = r.load().expect("loaded");
    let _ = r.take_fresh_upstreams();
    // Same bytes: nothing to swap.
    assert_eq!(
        r.refresh_certificates(std::slice::from_ref(&one)).ok(),
        Some(Applied::Unchanged)
    );
    // A new CA in the file: a new upstream for "a" alone.
    std::fs::write(&one, TestCa::new("second").expect("ca").pem()).expect("write");
    assert_eq!(
        r.refresh_certificates(std::slice::from_ref(&one)).ok(),
        Some(Applied::Loaded(2))
    );
    let s2 = r.load().expect("loaded");
    assert!(!Arc::ptr_eq(
        &plugin_named(&s1, "a").upstream,
        &plugin_named(&s2, "a").upstream
    ));
    assert!(Arc::ptr_eq(
        &plugin_named(&s1, "b").upstream,
        &plugin_named(&s2, "b").upstream
    ));
    assert_eq!(r.take_fresh_upstreams().len(), 1);
    // A file without a certificate, then no file: rejected, naming the
    // file, and the previous snapshot stays.
    std::fs::write(&one, "not a certificate\n").expect("write");
    let err = r
        .refresh_certificates(std::slice::from_ref(&one))
        .expect_err("no certificate");
    let text = err.to_string();
    assert!(
        text.contains("plugins[0] (a).caCertificate.caFile")
            && text.contains(&format!("{} holds no PEM CERTIFICATE", one.display())),
        "{text}"
    );
    std::fs::remove_file(&one).expect("remove");
    let err = r
        .refresh_certificates(std::slice::from_ref(&one))
        .expect_err("no file");
    assert!(
        err.to_string()
            .contains(&format!("cannot read {}", one.display())),
        "{err}"
    );
    assert!(Arc::ptr_eq(&s2, &r.load().expect("loaded")));
    assert_eq!(r.last_error(), Some(err.to_string()));
    assert_eq!(
        r.reload_counts(),
        ReloadCounts {
            success: 2,
            failure: 2
        }
    );
    // The file put back as the live upstream has it clears the error.
    std::fs::write(&one, s2_pem(&s2, "a")).expect("write");
    assert_eq!(
        r.refresh_certificates(std::slice::from_ref(&one)).ok(),
        Some(Applied::Unchanged)
    );
    assert_eq!(r.last_error(), None);
}

fn s2_pem(s: &Snapshot, name: &str) -> Vec<u8> {
    plugin_named(s, name)
        .upstream
        .key()
        .ca_bundle
        .as_ref()
        .expect("tls")
        .pem
        .to_vec()
}

/// The metrics' lines about reloads and plugins, as a scrape shows them.
fn exported(r: &Registry) -> Vec<String> {
    r.telemetry()
        .metrics
        .encode()
        .lines()
        .filter(|l| {
            [
                "rollout_gateway_config_reloads_total",
                "rollout_gateway_config_last_reload_successful",
                "rollout_gateway_config_generation",
                "rollout_gateway_plugin_loaded",
            ]
            .iter()
            .any(|n| l.starts_with(n))
        })
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn each_change_hands_the_metrics_what_they_export() {
    let r = registry(2);
    r.apply("file0", SHARED).expect("ok");
    r.apply("file1", HUB_A).expect("ok");
    assert_eq!(
        exported(&r),
        vec![
            "rollout_gateway_plugin_loaded{plugin=\"a\",hub=\"\"} 0",
            "rollout_gateway_plugin_loaded{plugin=\"b\",hub=\"\"} 0",
            "rollout_gateway_plugin_loaded{plugin=\"mine\",hub=\"hub-a\"} 0",
            "rollout_gateway_config_reloads_total{result=\"success\"} 2",
            "rollout_gateway_config_reloads_total{result=\"failure\"} 0",
            "rollout_gateway_config_last_reload_successful 1",
            "rollout_gateway_config_generation 2",
        ]
    );
    // A refused change: counted, and the plugins of the snapshot in use stay.
    r.apply("file1", "plugins:\n  - name: a\n    endpoint: x\n")
        .expect_err("bad");
    r.source_failed("file0", "cannot read: gone".into());
    let after = exported(&r);
    assert_eq!(after.len(), 7, "{after:?}");
    assert!(after.contains(&"rollout_gateway_config_reloads_total{result=\"failure\"} 2".into()));
    assert!(after.contains(&"rollout_gateway_config_last_reload_successful 0".into()));
    assert!(after.contains(&"rollout_gateway_config_generation 2".into()));
    // A change of the plugins: the next scrape lists the new snapshot's.
    r.apply("file1", "plugins: []\n").expect("ok");
    let after = exported(&r);
    assert!(!after.iter().any(|l| l.contains("mine")), "{after:?}");
    assert!(after.contains(&"rollout_gateway_config_generation 3".into()));
    assert!(after.contains(&"rollout_gateway_config_last_reload_successful 1".into()));
}
