//! The dashboard in a real browser: headless Chromium (Debian's), driven
//! over the DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON
//! messages ended by NUL on file descriptors 3 and 4, no websocket), on the
//! page served from the fake hub. The page shows the rollout (each
//! cluster and its status); it follows a change on the hub without a
//! reload; markup a plugin wrote (`<img onerror>`, `<script>`) is shown as
//! text and makes no element.
//!
//! Needs Chromium: `ROLLOUT_HOOKS_CHROMIUM=$(bash test-support/chromium/find)`
//! (installs Debian's package when missing), or `chromium` on PATH.
//! Skipped without either, unless `ROLLOUT_HOOKS_E2E=1` (then it fails).
//! With `ROLLOUT_HOOKS_DASHBOARD_SCREENSHOT=FILE` it also saves the page as
//! a PNG.

use std::time::Duration;

use rollout_test_support::chromium::{self, Browser};
use serde_json::{Value, json};

use crate::dashboard::Served;
use crate::fake_hub::*;

/// A plugin's message full of markup.
const MARKUP: &str =
    r#"<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b>bold</b> & done"#;

/// Each cluster tile's name and status, as `[[name, status], …]`.
const TILES: &str = r#"JSON.stringify([...document.querySelectorAll('.tile[data-cluster]')]
    .map(t => [t.dataset.cluster, t.dataset.status]))"#;

#[tokio::test]
async fn the_page_shows_the_rollout_follows_the_hub_and_shows_markup_as_text() {
    let Some(chromium) = chromium::binary_for_tests() else {
        return;
    };
    let mut objects = mid_validation();
    objects[1].1["status"]["placements"][0]["clusters"][0]["message"] = json!(MARKUP);
    let served = Served::start(objects, None, 4).await;
    let mut browser = Browser::launch(&chromium, 1280, 860).await;
    let url = format!("http://{}/", served.addr);
    browser.navigate(&url).await;
    // The first set is chosen; its clusters are drawn with their statuses.
    browser
        .wait_for(
            "the clusters are drawn",
            "document.querySelectorAll('.tile[data-cluster]').length === 4",
            Duration::from_secs(10),
        )
        .await;
    let tiles: Value = serde_json::from_str(browser.eval(TILES).await.as_str().unwrap()).unwrap();
    assert_eq!(
        tiles,
        json!([
            ["cluster-001", "Succeeded"],
            ["cluster-002", "Validating"],
            ["cluster-003", "ToApply"],
            ["cluster-004", "ToApply"]
        ])
    );
    assert_eq!(browser.eval("location.hash").await, "#/default/hello");
    assert_eq!(
        browser
            .eval("document.getElementById('phase').textContent")
            .await,
        "Progressing"
    );
    let waiting = browser
        .eval("document.getElementById('waiting').textContent")
        .await;
    assert!(
        waiting
            .as_str()
            .unwrap()
            .contains("validating cluster-002: smoke-test says INPROGRESS"),
        "{waiting}"
    );
    // The markup is text: shown as written, no element made, nothing run.
    let cell = "document.querySelector('#messages tr[data-cluster=\"cluster-002\"] td.message').textContent";
    assert_eq!(browser.eval(cell).await, MARKUP);
    assert_eq!(
        browser
            .eval("document.querySelectorAll('img, b, #rollout script').length")
            .await,
        0
    );
    assert_eq!(browser.eval("document.scripts.length").await, 1);
    assert_eq!(browser.eval("typeof window.__pwned").await, "undefined");
    let text = browser.eval("document.body.innerText").await;
    assert!(
        text.as_str().unwrap().contains("<img src=x onerror="),
        "{text}"
    );
    if let Some(path) = std::env::var_os("ROLLOUT_HOOKS_DASHBOARD_SCREENSHOT") {
        std::fs::write(path, browser.screenshot().await).unwrap();
    }
    // The hub changes: the plugin said FAILED, the controller aborted.
    browser.eval("window.__same_page = true").await;
    served.fake.wait_for_watches(5).await;
    let aborted = aborted();
    served.fake.change(CARRIERS, aborted[1].1.clone());
    served.fake.change(MWRS, aborted[0].1.clone());
    browser
        .wait_for(
            "the abort is drawn",
            "document.getElementById('phase').textContent === 'RollingBack'",
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(browser.eval("window.__same_page").await, true, "no reload");
    let waiting = browser
        .eval("document.getElementById('waiting').textContent")
        .await;
    assert!(
        waiting
            .as_str()
            .unwrap()
            .contains("rolling back 2 clusters to revision r1"),
        "{waiting}"
    );
    let list = browser
        .eval("document.querySelector('[data-rollout=\"default/hello\"] .phase').textContent")
        .await;
    assert_eq!(list, "RollingBack");
    browser.close().await;
    served.stop().await;
}
