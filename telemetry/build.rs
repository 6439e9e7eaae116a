//! The git revision the binaries are built from, for their `*_build_info`
//! series: `ROLLOUT_HOOKS_GIT_REVISION`, set only when the build runs in
//! this repository's own work tree and `git` answers. A build from a source
//! archive, or one without `git`, sets nothing and does not fail.
//! `ROLLOUT_HOOKS_REVISION` in the build's environment takes precedence
//! (read by the crate itself), for images built without `.git`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ROLLOUT_HOOKS_REVISION");
    if std::env::var_os("ROLLOUT_HOOKS_REVISION").is_some() {
        return;
    }
    let Some(manifest_dir) = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from) else {
        return;
    };
    // Only this repository's own checkout: a source archive unpacked inside
    // some other repository must not take that one's revision.
    let Some(workspace) = manifest_dir.parent() else {
        return;
    };
    let top = git(&manifest_dir, &["rev-parse", "--show-toplevel"]);
    if top.map(PathBuf::from).as_deref() != Some(workspace) {
        return;
    }
    let Some(revision) = git(&manifest_dir, &["rev-parse", "--short=12", "HEAD"]) else {
        return;
    };
    // Rebuilt when HEAD moves: HEAD itself (a branch switch), the branch's
    // ref, and packed-refs (where a ref may live instead).
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&manifest_dir, &["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&manifest_dir, &["rev-parse", "--git-path", &name]) {
            let path = manifest_dir.join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    println!("cargo:rustc-env=ROLLOUT_HOOKS_GIT_REVISION={revision}");
}

/// `git ARGS` run in `dir`: its trimmed output, or `None` on any failure.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}
