//! Hot reload of the registry file: plain rewrites, the kubelet's `..data`
//! symlink swap, invalid files, and calls that never notice.

use crate::common;

use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use rollout_gateway::hooks::HookKind;
use tonic::Code;

#[tokio::test]
async fn reload_by_plain_rewrite() {
    let a = plugin(Behaviour::new("a")).await;
    let b = plugin(Behaviour::new("b")).await;
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("a", &a, ""))).await;
    let mut c = gw.client().await;
    assert_eq!(
        c.begin_rollout(to("b", rollout("c1")))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );

    gw.write_config(&format!(
        "plugins:\n{}{}",
        insecure_plugin("a", &a, ""),
        insecure_plugin("b", &b, "")
    ));
    gw.wait_generation(2).await;
    c.begin_rollout(to("b", rollout("c1"))).await.unwrap();
    assert_eq!(b.calls(HookKind::BeginRollout), 1);
    gw.stop().await;
}

/// Lays out a directory the way the kubelet mounts a ConfigMap:
/// `config.yaml -> ..data/config.yaml`, `..data -> ..<timestamp>`.
fn kubelet_mount(dir: &Path, version: &str, text: &str) {
    let ts = dir.join(format!("..{version}"));
    std::fs::create_dir(&ts).unwrap();
    std::fs::write(ts.join("config.yaml"), text).unwrap();
    let tmp = dir.join("..data_tmp");
    symlink(format!("..{version}"), &tmp).unwrap();
    // The atomic swap: rename over the old `..data` link.
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    if !dir.join("config.yaml").exists() {
        symlink("..data/config.yaml", dir.join("config.yaml")).unwrap();
    }
}

#[tokio::test]
async fn reload_by_kubelet_symlink_swap() {
    let a = plugin(Behaviour::new("a")).await;
    let b = plugin(Behaviour::new("b")).await;
    let dir = tempfile::tempdir().unwrap();
    kubelet_mount(
        dir.path(),
        "2026_11_21_10_00_00.1",
        &format!("plugins:\n{}", insecure_plugin("a", &a, "")),
    );
    let path = dir.path().join("config.yaml");
    let gw = gateway_with(dir, path, |o| o.poll_interval = Duration::from_secs(3600)).await;
    let mut c = gw.client().await;
    c.begin_rollout(to("a", rollout("c1"))).await.unwrap();

    // Only the link changes; the file the gateway was given is never written.
    kubelet_mount(
        gw.dir.path(),
        "2026_11_21_10_05_00.2",
        &format!("plugins:\n{}", insecure_plugin("b", &b, "")),
    );
    std::fs::remove_dir_all(gw.dir.path().join("..2026_11_21_10_00_00.1")).unwrap();
    gw.wait_generation(2).await;
    c.begin_rollout(to("b", rollout("c1"))).await.unwrap();
    assert_eq!(
        c.begin_rollout(to("a", rollout("c1")))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    gw.stop().await;
}

#[tokio::test]
async fn an_invalid_reload_keeps_the_old_registry() {
    let a = plugin(Behaviour::new("a")).await;
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("a", &a, ""))).await;
    let mut c = gw.client().await;
    gw.write_config("plugins:\n  - name: a\n    endpoint: nowhere\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let debug = loop {
        let d = gw.debug().await;
        if !d["lastReloadError"].is_null() {
            break d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the bad reload was not noticed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let err = debug["lastReloadError"].as_str().unwrap();
    assert!(err.contains("plugins[0] (a).endpoint"), "{err}");
    assert_eq!(debug["generation"], 1);
    assert_eq!(debug["reloads"]["failure"], 1);
    c.begin_rollout(to("a", rollout("c1"))).await.unwrap();
    assert_eq!(http_get(gw.admin, "/readyz").await.0, 200);

    // An empty file (a truncating editor) never replaces the registry either.
    gw.write_config("");
    tokio::time::sleep(Duration::from_millis(700)).await;
    c.begin_rollout(to("a", rollout("c1"))).await.unwrap();

    // A good file clears the error.
    gw.write_config(&format!(
        "plugins:\n{}",
        insecure_plugin("a", &a, "    timeout: 5s\n")
    ));
    gw.wait_generation(2).await;
    assert!(gw.debug().await["lastReloadError"].is_null());
    gw.stop().await;
}

#[tokio::test]
async fn a_reload_with_an_unknown_default_is_refused_with_a_suggestion() {
    let a = plugin(Behaviour::new("a")).await;
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("a", &a, ""))).await;
    gw.write_config(&format!(
        "defaults:\n  failurPolicy: Ignore\nplugins:\n{}",
        insecure_plugin("a", &a, "")
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let debug = loop {
        let d = gw.debug().await;
        if !d["lastReloadError"].is_null() {
            break d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reload was not refused"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let err = debug["lastReloadError"].as_str().unwrap();
    assert!(
        err.contains("defaults.failurPolicy: unknown field; did you mean `failurePolicy`?"),
        "{err}"
    );
    assert_eq!(debug["generation"], 1);
    gw.stop().await;
}

#[tokio::test]
async fn continuous_calls_while_the_config_is_rewritten_20_times() {
    let target = plugin(Behaviour::new("target")).await;
    let other = plugin(Behaviour::new("other")).await;
    let config = |i: usize| {
        format!(
            "plugins:\n{}{}pipelines:\n  - name: p{i}\n    plugins: [target]\n",
            insecure_plugin("target", &target, &format!("    timeout: {}s\n", 5 + i % 3)),
            insecure_plugin(&format!("other-{i}"), &other, ""),
        )
    };
    let gw = gateway(&config(0)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..4 {
        let mut c = gw.client().await;
        let (stop, ok) = (stop.clone(), ok.clone());
        workers.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let r = if w % 2 == 0 {
                    c.mutate_manifest_work(to("target", mutate_request("c1", work(1024))))
                        .await
                        .map(|_| ())
                } else {
                    c.validate_rollout_completion(to("target", validate_request("c1")))
                        .await
                        .map(|_| ())
                };
                match r {
                    Ok(()) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => failures.push(e.to_string()),
                }
            }
            failures
        }));
    }
    for i in 1..=20 {
        tokio::time::sleep(Duration::from_millis(60)).await;
        gw.write_config(&config(i));
        gw.wait_generation(1 + i as u64).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for w in workers {
        failures.extend(w.await.unwrap());
    }
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        failures.first()
    );
    assert!(
        ok.load(Ordering::Relaxed) > 100,
        "only {} calls",
        ok.load(Ordering::Relaxed)
    );
    // The plugin whose endpoint never changed kept its one connection.
    assert_eq!(target.connections.load(Ordering::SeqCst), 1);
    assert_eq!(gw.debug().await["generation"], 21);
    gw.stop().await;
}

#[tokio::test]
async fn calls_in_flight_finish_on_the_snapshot_they_began_with() {
    let slow = plugin(Behaviour::new("slow")).await;
    slow.set(|b| b.delay = Duration::from_millis(400));
    let gw = gateway(&format!("plugins:\n{}", insecure_plugin("slow", &slow, ""))).await;
    let mut c = gw.client().await;
    let call = tokio::spawn(async move { c.begin_rollout(to("slow", rollout("c1"))).await });
    slow.wait_calls(HookKind::BeginRollout, 1).await;
    // The plugin is removed while the call is in flight.
    let other = plugin(Behaviour::new("other")).await;
    gw.write_config(&format!(
        "plugins:\n{}",
        insecure_plugin("other", &other, "")
    ));
    gw.wait_generation(2).await;
    call.await.unwrap().expect("the call in flight finishes");
    let mut c = gw.client().await;
    assert_eq!(
        c.begin_rollout(to("slow", rollout("c1")))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    gw.stop().await;
}

#[tokio::test]
async fn a_missing_file_is_waited_for() {
    let a = plugin(Behaviour::new("a")).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let gw = gateway_with(dir, path.clone(), |_| {}).await;
    let (status, body) = http_get(gw.admin, "/readyz").await;
    assert_eq!(status, 503);
    assert!(body.contains("cannot read"), "{body}");
    let mut c = gw.client().await;
    assert_eq!(
        c.begin_rollout(to("a", rollout("c1")))
            .await
            .unwrap_err()
            .code(),
        Code::Unavailable
    );
    std::fs::write(&path, format!("plugins:\n{}", insecure_plugin("a", &a, ""))).unwrap();
    gw.wait_generation(1).await;
    assert_eq!(http_get(gw.admin, "/readyz").await.0, 200);
    c.begin_rollout(to("a", rollout("c1"))).await.unwrap();
    gw.stop().await;
}

/// Registry entries naming one plugin server (same endpoint, same TLS
/// settings) share one connection, across reloads too; another server gets
/// its own. A connection per entry cost ~25 KiB each (docs/performance.md).
#[tokio::test]
async fn entries_of_one_endpoint_share_one_connection() {
    let shared = plugin(Behaviour::new("shared")).await;
    let other = plugin(Behaviour::new("other")).await;
    let entries = |names: &[&str]| -> String {
        names
            .iter()
            .map(|n| insecure_plugin(n, &shared, ""))
            .collect()
    };
    let gw = gateway(&format!(
        "plugins:\n{}{}",
        entries(&["a", "b", "c"]),
        insecure_plugin("o", &other, "")
    ))
    .await;
    let mut c = gw.client().await;
    for name in ["a", "b", "c", "o"] {
        c.begin_rollout(to(name, rollout("c1"))).await.unwrap();
    }
    assert_eq!(shared.calls(HookKind::BeginRollout), 3);
    assert_eq!(shared.connections.load(Ordering::SeqCst), 1);
    assert_eq!(other.connections.load(Ordering::SeqCst), 1);

    // An entry added by a reload joins the live connection.
    gw.write_config(&format!(
        "plugins:\n{}{}",
        entries(&["a", "b", "c", "d"]),
        insecure_plugin("o", &other, "")
    ));
    gw.wait_generation(2).await;
    c.begin_rollout(to("d", rollout("c1"))).await.unwrap();
    assert_eq!(shared.calls(HookKind::BeginRollout), 4);
    assert_eq!(shared.connections.load(Ordering::SeqCst), 1);
    gw.stop().await;
}
