//! OCM's own CRDs, from the `open-cluster-management.io/api` Go module at
//! the version `localhub/parts/go.mod` pins: Go downloads the module into
//! its module cache (`go mod download`), and tests read the CRDs there or
//! copy them into a directory of their own, never into the checkout.
//!
//! On a machine without Go (the README's test command needs only Rust),
//! [`or_skip`] turns the missing `go` into a skipped test, said on stderr;
//! under `ROLLOUT_HOOKS_E2E=1` (and wherever Go is installed) it is a
//! failure instead.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The module's ManifestWork CRD, as a path inside the module.
pub const MANIFESTWORK_CRD: &str =
    "work/v1/0000_00_work.open-cluster-management.io_manifestworks.crd.yaml";
/// The module's ManifestWorkReplicaSet CRD, as a path inside the module.
pub const MANIFESTWORKREPLICASET_CRD: &str =
    "work/v1alpha1/0000_00_work.open-cluster-management.io_manifestworkreplicasets.crd.yaml";

/// Why the module's CRDs could not be had.
#[derive(Debug, thiserror::Error)]
pub enum OcmApiError {
    /// `go` could not be run (these tests need Go: docs/localhub.md).
    #[error("cannot run go (OCM's CRDs come from Go's module cache; docs/localhub.md): {0}")]
    Go(#[source] std::io::Error),
    /// `go mod download` did not name the module's directory.
    #[error("go mod download open-cluster-management.io/api failed: {0}")]
    Download(String),
    /// A CRD is not where the module keeps it, or could not be copied.
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Where Go's module cache holds `open-cluster-management.io/api` at the
/// version `localhub/parts/go.mod` pins (downloading it if missing).
/// Asked of Go once per test process, when it answers.
pub fn module_dir() -> Result<PathBuf, OcmApiError> {
    static FOUND: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(dir) = FOUND.get() {
        return Ok(dir.clone());
    }
    let dir = download()?;
    Ok(FOUND.get_or_init(|| dir).clone())
}

fn download() -> Result<PathBuf, OcmApiError> {
    let parts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../localhub/parts");
    let output = Command::new("go")
        .args(["mod", "download", "-json", "open-cluster-management.io/api"])
        .current_dir(&parts)
        .env("GOFLAGS", "-mod=readonly")
        .output()
        .map_err(OcmApiError::Go)?;
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    match info.get("Dir").and_then(serde_json::Value::as_str) {
        Some(dir) if output.status.success() => Ok(PathBuf::from(dir)),
        _ => Err(OcmApiError::Download(format!(
            "{info} {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))),
    }
}

/// The text of the CRD at `path` inside the module.
pub fn crd_text(path: &str) -> Result<String, OcmApiError> {
    let file = module_dir()?.join(path);
    std::fs::read_to_string(&file).map_err(|source| OcmApiError::File { path: file, source })
}

/// Copies the module's ManifestWork and ManifestWorkReplicaSet CRDs into
/// `dir`, for `rollout-controller simulate --crds DIR`.
pub fn copy_work_crds(dir: &Path) -> Result<(), OcmApiError> {
    let module = module_dir()?;
    for path in [MANIFESTWORK_CRD, MANIFESTWORKREPLICASET_CRD] {
        let source = module.join(path);
        let name = source.file_name().map(PathBuf::from).unwrap_or_default();
        std::fs::copy(&source, dir.join(name)).map_err(|source_err| OcmApiError::File {
            path: source.clone(),
            source: source_err,
        })?;
    }
    Ok(())
}

/// `found`, or `None` (the caller skips its test) when only `go` is
/// missing and `ROLLOUT_HOOKS_E2E` is not `1`; panics on any other failure.
pub fn or_skip<T>(found: Result<T, OcmApiError>) -> Option<T> {
    match found {
        Ok(value) => Some(value),
        Err(OcmApiError::Go(error))
            if error.kind() == std::io::ErrorKind::NotFound
                && std::env::var("ROLLOUT_HOOKS_E2E").as_deref() != Ok("1") =>
        {
            eprintln!(
                "no `go` on PATH: OCM's own CRDs come from Go's module cache (docs/localhub.md); skipped"
            );
            None
        }
        Err(error) => panic!("OCM's CRDs: {error}"),
    }
}
