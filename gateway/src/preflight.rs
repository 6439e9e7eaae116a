//! `rollout-gateway check`: validates registry files offline, as a start-up
//! or a reload would, and starts nothing (no listener, no plugin call).

use std::path::PathBuf;

use crate::config;
use crate::registry::{Registry, SourceInfo};
use crate::upstream::ChannelSettings;

/// Checks `files` together, as the gateway would load them with one
/// `--config` each, and returns every problem, one line each, naming the file
/// and the path of the field in it. Empty: the files are valid.
///
/// A file that cannot be read or holds nothing is a problem here, although
/// the running gateway waits for such a file instead of failing. Cross-file
/// problems (a plugin defined twice for the same hub, a pipeline naming a
/// plugin no file defines) are checked among the files that parse. The
/// certificate files the registry names (`caFile`, `clientCertificate`) are
/// read, as a reload reads them, and one that cannot be read or holds no
/// certificate is a problem naming it, and only it: a pipeline naming that
/// plugin is no problem of its own. No connection is made. Blocking.
///
/// With `skip_files`, the certificate files are not read (a CI job without
/// them): everything else is checked, plugins naming them included.
pub fn check_files(files: &[PathBuf], skip_files: bool) -> Vec<String> {
    let labels: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    let mut registry = Registry::new(
        labels
            .iter()
            .map(|label| SourceInfo {
                label: label.clone(),
            })
            .collect(),
        ChannelSettings::default(),
    );
    if skip_files {
        registry = registry.skipping_files();
    }
    let mut lines = Vec::new();
    for (path, label) in files.iter().zip(&labels) {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => {
                lines.push(format!("{label}: cannot read: {e}"));
                continue;
            }
        };
        if config::is_blank(&text) {
            lines.push(format!(
                "{label}: holds nothing (the gateway would wait for it, not ready)"
            ));
            continue;
        }
        // The file on its own first: its problems' paths are within the file.
        if let Err(e) = config::parse(&text) {
            lines.extend(e.problems.iter().map(|p| format!("{label}: {p}")));
            continue;
        }
        // Then with the files before it, as a reload plans it: these
        // problems' paths already name their file.
        if let Err(e) = registry.apply(label, &text) {
            lines.extend(e.error.problems.iter().map(ToString::to_string));
        }
    }
    lines
}
