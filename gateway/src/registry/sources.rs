//! The registry's sources (registry files, ConfigMaps), each with the last
//! valid config it gave and the last text it was sent, addressed by name:
//! the label their messages carry. Their order is the order they were
//! given, which decides which of two files defining one name for a hub
//! keeps it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use crate::config::Config;

/// A registry source, named as messages and listings name it: a registry
/// file's path as given, or `configmap NAMESPACE/NAME`. The registry
/// addresses its sources by this name.
#[derive(Debug, Clone)]
pub struct SourceInfo {
    pub label: String,
}

impl SourceInfo {
    /// The source a registry file at `path` feeds.
    pub fn file(path: &Path) -> SourceInfo {
        SourceInfo {
            label: path.display().to_string(),
        }
    }
}

/// One source's state.
#[derive(Debug, Default)]
pub(super) struct SourceState {
    pub(super) label: String,
    /// The last valid config of this source.
    pub(super) config: Option<Config>,
    /// The text last applied (valid or not), to ignore events that changed nothing.
    pub(super) last_text: Option<String>,
    /// When `last_text` was refused at planning (a `caFile` not written
    /// yet, say): the certificate files that plan read, with what they held
    /// then (`None`: it could not be read). Once one of them holds
    /// something else, the text is planned again
    /// ([`super::Registry::retry_waiting`]). Empty otherwise.
    pub(super) waiting_on: HashMap<String, Option<Arc<[u8]>>>,
}

/// A source as a plan reads it: its name, and its config (`None`: no valid
/// config yet).
#[derive(Debug, Clone, Copy)]
pub(super) struct SourceConfig<'a> {
    pub(super) label: &'a str,
    pub(super) config: Option<&'a Config>,
}

/// Every source, in the order given. A name given twice is one source (the
/// same file read twice holds the same text).
#[derive(Debug, Default)]
pub(super) struct Sources(Vec<SourceState>);

impl Sources {
    pub(super) fn new(sources: Vec<SourceInfo>) -> Sources {
        let mut list: Vec<SourceState> = Vec::with_capacity(sources.len());
        for source in sources {
            if list.iter().all(|s| s.label != source.label) {
                list.push(SourceState {
                    label: source.label,
                    ..SourceState::default()
                });
            }
        }
        Sources(list)
    }

    /// The names of the sources, in order.
    pub(super) fn labels(&self) -> Vec<String> {
        self.0.iter().map(|s| s.label.clone()).collect()
    }

    pub(super) fn get(&self, label: &str) -> Option<&SourceState> {
        self.0.iter().find(|s| s.label == label)
    }

    pub(super) fn get_mut(&mut self, label: &str) -> Option<&mut SourceState> {
        self.0.iter_mut().find(|s| s.label == label)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &SourceState> {
        self.0.iter()
    }

    /// Every source with its last valid config.
    pub(super) fn configs(&self) -> Vec<SourceConfig<'_>> {
        self.0
            .iter()
            .map(|s| SourceConfig {
                label: &s.label,
                config: s.config.as_ref(),
            })
            .collect()
    }

    /// Every source with its last valid config, but `label`'s with `config`.
    pub(super) fn configs_with<'a>(
        &'a self,
        label: &str,
        config: &'a Config,
    ) -> Vec<SourceConfig<'a>> {
        let mut configs = self.configs();
        for source in configs.iter_mut().filter(|s| s.label == label) {
            source.config = Some(config);
        }
        configs
    }

    /// The sources whose refused text waits on a certificate file.
    pub(super) fn waiting(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|s| !s.waiting_on.is_empty())
            .map(|s| s.label.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(labels: &[&str]) -> Sources {
        Sources::new(
            labels
                .iter()
                .map(|l| SourceInfo {
                    label: l.to_string(),
                })
                .collect(),
        )
    }

    #[test]
    fn sources_keep_their_order_and_a_name_given_twice_is_one_source() {
        let s = sources(&["b.yaml", "a.yaml", "b.yaml"]);
        assert_eq!(s.labels(), vec!["b.yaml", "a.yaml"]);
        assert!(s.get("a.yaml").is_some());
        assert!(s.get("c.yaml").is_none());
    }

    #[test]
    fn a_new_config_stands_in_for_its_source_alone() {
        let cfg = crate::config::parse("plugins: []\n").expect("valid");
        let s = sources(&["a", "b"]);
        let planned: Vec<(&str, bool)> = s
            .configs_with("b", &cfg)
            .iter()
            .map(|c| (c.label, c.config.is_some()))
            .collect();
        assert_eq!(planned, vec![("a", false), ("b", true)]);
    }
}
