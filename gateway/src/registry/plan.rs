//! The pure half of a reload: what the new registry adds, updates and
//! removes, and every problem that needs no file to be found (a name
//! defined twice for one hub, a pipeline naming what is not a plugin),
//! computed from the sources' configs and the live snapshot alone. The
//! build ([`super::build`]) then reads the certificate files and makes the
//! connections; nothing here reads a file or touches anything live.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Config, PipelineConfig, PluginConfig, Problem};
use crate::hub::Hub;
use crate::upstream::Upstream;

use super::snapshot::{Plugin, Snapshot, Target};
use super::sources::SourceConfig;

/// A name in one hub's scope (`hub`: `None` for the shared scope).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ScopedName {
    pub(super) hub: Option<Hub>,
    pub(super) name: String,
}

impl ScopedName {
    fn new(hub: Option<&Hub>, name: &str) -> ScopedName {
        ScopedName {
            hub: hub.cloned(),
            name: name.to_string(),
        }
    }
}

/// What a reload changes. Whether an updated plugin keeps its connection
/// depends on the bytes of its certificate files, which only the build reads.
pub(super) struct Plan<'a> {
    /// The sources in order, each with the plugins it defines.
    pub(super) sources: Vec<SourcePlan<'a>>,
    /// Every pipeline not clashing with an earlier name, in source order.
    pub(super) pipelines: Vec<PipelinePlan<'a>>,
    /// The live snapshot's plugins that the new registry no longer has.
    pub(super) removed: Vec<Arc<Plugin>>,
    /// What is wrong, found without reading a file.
    pub(super) problems: Vec<Problem>,
}

/// One source's config and its plugins.
pub(super) struct SourcePlan<'a> {
    pub(super) label: &'a str,
    pub(super) config: &'a Config,
    /// Its plugins whose name no earlier file defines for the same hub.
    pub(super) plugins: Vec<PluginPlan<'a>>,
}

/// One plugin of the new registry.
pub(super) struct PluginPlan<'a> {
    pub(super) config: &'a PluginConfig,
    /// Where its entry is, for problems: `LABEL: plugins[I] (NAME)`.
    pub(super) at: String,
    /// The registered hubs that may call it, which share its concurrency
    /// bound.
    pub(super) hubs: Vec<Hub>,
    pub(super) change: Change,
}

/// What becomes of one plugin's name.
pub(super) enum Change {
    /// The live snapshot has no plugin of this name in this scope.
    Add,
    /// The live snapshot has one, with this upstream: kept if its key
    /// (endpoint and TLS material) is the same, else replaced by a new one.
    Update(Arc<Upstream>),
}

/// One pipeline of the new registry.
pub(super) struct PipelinePlan<'a> {
    pub(super) hub: Option<Hub>,
    pub(super) config: &'a PipelineConfig,
}

/// Plans the registry that combines the `sources`' configs against the
/// `live` snapshot.
pub(super) fn plan<'a>(sources: &[SourceConfig<'a>], live: Option<&Snapshot>) -> Plan<'a> {
    let mut problems = Vec::new();
    // The file defining each name of a scope, for a clash's message.
    let mut defined: HashMap<ScopedName, String> = HashMap::new();
    let sources = plan_plugins(sources, live, &mut defined, &mut problems);
    // Before the pipelines take their names: a plugin replaced by a
    // pipeline of the same name is removed.
    let removed = live
        .iter()
        .flat_map(|snap| snap.plugins.iter())
        .filter(|p| !defined.contains_key(&ScopedName::new(p.hub.as_ref(), &p.name)))
        .cloned()
        .collect();
    let pipelines = plan_pipelines(&sources, &mut defined, &mut problems);
    Plan {
        sources,
        pipelines,
        removed,
        problems,
    }
}

/// The plugins of every source, in order: the first file to define a name
/// for a hub has it, a later one is a problem.
fn plan_plugins<'a>(
    sources: &[SourceConfig<'a>],
    live: Option<&Snapshot>,
    defined: &mut HashMap<ScopedName, String>,
    problems: &mut Vec<Problem>,
) -> Vec<SourcePlan<'a>> {
    // The hubs of central mode, each named by its registry file.
    let all_hubs: Vec<Hub> = sources
        .iter()
        .filter_map(|s| s.config?.hub.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut planned = Vec::new();
    for &SourceConfig { label, config } in sources {
        let Some(config) = config else { continue };
        let mut plugins = Vec::new();
        for (pi, pc) in config.plugins.iter().enumerate() {
            let at = format!("{label}: plugins[{pi}] ({})", pc.name);
            let name = ScopedName::new(config.hub.as_ref(), &pc.name);
            if let Some(problem) = clash(defined, &name, &at) {
                problems.push(problem);
                continue;
            }
            defined.insert(name, label.to_string());
            let hubs = match (&pc.hubs, &config.hub) {
                (Some(hubs), _) => hubs.clone(),
                (None, Some(hub)) => vec![hub.clone()],
                (None, None) => all_hubs.clone(),
            };
            let change = match live_plugin(live, config.hub.as_ref(), &pc.name) {
                Some(p) => Change::Update(p.upstream.clone()),
                None => Change::Add,
            };
            plugins.push(PluginPlan {
                config: pc,
                at,
                hubs,
                change,
            });
        }
        planned.push(SourcePlan {
            label,
            config,
            plugins,
        });
    }
    planned
}

/// The plugin the live snapshot has under `name` in `hub`'s scope.
fn live_plugin<'s>(
    live: Option<&'s Snapshot>,
    hub: Option<&Hub>,
    name: &str,
) -> Option<&'s Arc<Plugin>> {
    match live?.in_scope(hub, name)? {
        Target::Plugin(p) => Some(p),
        Target::Pipeline { .. } => None,
    }
}

/// The pipelines of every source: each member must be a plugin of its
/// file's hub or a shared one, and a pipeline's name must be new to its
/// scope.
fn plan_pipelines<'a>(
    sources: &[SourcePlan<'a>],
    defined: &mut HashMap<ScopedName, String>,
    problems: &mut Vec<Problem>,
) -> Vec<PipelinePlan<'a>> {
    let mut named = Vec::new();
    for source in sources {
        let hub = source.config.hub.as_ref();
        for (pi, pl) in source.config.pipelines.iter().enumerate() {
            let at = format!("{}: pipelines[{pi}] ({})", source.label, pl.name);
            for (mi, member) in pl.plugins.iter().enumerate() {
                let declared =
                    |scope: Option<&Hub>| defined.contains_key(&ScopedName::new(scope, member));
                if declared(hub) || (hub.is_some() && declared(None)) {
                    continue;
                }
                problems.push(Problem {
                    path: format!("{at}.plugins[{mi}]"),
                    message: match hub {
                        Some(h) => {
                            format!("\"{member}\" is not a plugin of hub {h} or a shared plugin")
                        }
                        None => format!("\"{member}\" is not a shared plugin"),
                    },
                });
            }
            named.push(NamedPipeline {
                label: source.label,
                hub: hub.cloned(),
                config: pl,
                at,
            });
        }
    }
    // Names after members: a pipeline's members are plugins, never another
    // pipeline, whatever the order of the files.
    let mut pipelines = Vec::new();
    for NamedPipeline {
        label,
        hub,
        config,
        at,
    } in named
    {
        let key = ScopedName::new(hub.as_ref(), &config.name);
        if let Some(problem) = clash(defined, &key, &at) {
            problems.push(problem);
            continue;
        }
        defined.insert(key, label.to_string());
        pipelines.push(PipelinePlan { hub, config });
    }
    pipelines
}

/// A pipeline whose members were checked, waiting for its name to be.
struct NamedPipeline<'a> {
    label: &'a str,
    hub: Option<Hub>,
    config: &'a PipelineConfig,
    /// Where its entry is, for problems.
    at: String,
}

/// The problem of `name` at `at` when a file already defines it for the
/// same hub, naming that file.
fn clash(defined: &HashMap<ScopedName, String>, name: &ScopedName, at: &str) -> Option<Problem> {
    defined.get(name).map(|file| Problem {
        path: at.to_owned(),
        message: format!(
            "\"{}\" is already defined by {file} for the same hub",
            name.name
        ),
    })
}

#[cfg(test)]
mod tests {
    //! The plan as a table, in vector's config-diff manner: a live snapshot
    //! (the files it was loaded from) and the new files go in, what the
    //! plan adds, updates, removes and finds wrong comes out.

    use super::*;
    use crate::config;
    use crate::registry::{Registry, SourceInfo};
    use crate::upstream::ChannelSettings;

    /// Two shared plugins and a pipeline of both.
    const SHARED: &str = "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    insecure: true\n  - name: b\n    endpoint: 127.0.0.1:7002\n    insecure: true\npipelines:\n  - name: p\n    plugins: [a, b]\n";
    /// hub-a's own plugin `a` (beside the shared one) and a pipeline of
    /// its plugin and a shared one.
    const HUB_A: &str = "hub: hub-a\nplugins:\n  - name: a\n    endpoint: 127.0.0.1:7003\n    insecure: true\npipelines:\n  - name: q\n    plugins: [a, b]\n";

    /// What a plan says, names as `hub/name` (`name` when shared).
    #[derive(Debug, PartialEq, Default)]
    struct Planned {
        added: Vec<String>,
        /// Updates handed the live snapshot's upstream of the same name.
        updated: Vec<String>,
        removed: Vec<String>,
        pipelines: Vec<String>,
        /// The paths of the problems.
        problems: Vec<String>,
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn want(
        added: &[&str],
        updated: &[&str],
        removed: &[&str],
        pipelines: &[&str],
        problems: &[&str],
    ) -> Planned {
        Planned {
            added: names(added),
            updated: names(updated),
            removed: names(removed),
            pipelines: names(pipelines),
            problems: names(problems),
        }
    }

    fn scoped(hub: Option<&Hub>, name: &str) -> String {
        match hub {
            Some(hub) => format!("{hub}/{name}"),
            None => name.to_string(),
        }
    }

    /// The live snapshot of a registry that loaded `files` (source i is
    /// `file{i}`), or none when no file is given.
    fn live(files: &[&str]) -> Option<Arc<Snapshot>> {
        let registry = Registry::new(
            (0..files.len())
                .map(|i| SourceInfo {
                    label: format!("file{i}"),
                })
                .collect(),
            ChannelSettings::default(),
        );
        for (i, text) in files.iter().enumerate() {
            registry
                .apply(&format!("file{i}"), text)
                .expect("a live file loads");
        }
        registry.load()
    }

    fn planned(live: Option<&Snapshot>, files: &[Option<String>]) -> Planned {
        let parsed: Vec<Option<Config>> = files
            .iter()
            .map(|f| {
                f.as_deref()
                    .map(|t| config::parse(t).expect("a valid file"))
            })
            .collect();
        let labels: Vec<String> = (0..files.len()).map(|i| format!("file{i}")).collect();
        let sources: Vec<SourceConfig<'_>> = labels
            .iter()
            .zip(&parsed)
            .map(|(label, config)| SourceConfig {
                label,
                config: config.as_ref(),
            })
            .collect();
        let plan = plan(&sources, live);
        let mut out = Planned::default();
        for source in &plan.sources {
            for p in &source.plugins {
                let name = scoped(source.config.hub.as_ref(), &p.config.name);
                match &p.change {
                    Change::Add => out.added.push(name),
                    Change::Update(upstream) => {
                        let same = live.is_some_and(|snap| {
                            snap.plugins.iter().any(|l| {
                                scoped(l.hub.as_ref(), &l.name) == name
                                    && Arc::ptr_eq(&l.upstream, upstream)
                            })
                        });
                        assert!(same, "{name}: an update carries the live plugin's upstream");
                        out.updated.push(name);
                    }
                }
            }
        }
        out.removed = plan
            .removed
            .iter()
            .map(|p| scoped(p.hub.as_ref(), &p.name))
            .collect();
        out.pipelines = plan
            .pipelines
            .iter()
            .map(|p| scoped(p.hub.as_ref(), &p.config.name))
            .collect();
        out.problems = plan.problems.iter().map(|p| p.path.clone()).collect();
        out
    }

    /// One row: what it is, the files the live snapshot loaded, the new
    /// files (`None`: a source with no valid config yet), the plan.
    type Row = (
        &'static str,
        &'static [&'static str],
        Vec<Option<String>>,
        Planned,
    );

    #[tokio::test]
    async fn the_plan_of_a_reload_against_the_live_snapshot() {
        let shared = || Some(SHARED.to_string());
        let rows: Vec<Row> = vec![
            (
                "a first load adds every plugin and pipeline",
                &[],
                vec![shared()],
                want(&["a", "b"], &[], &[], &["p"], &[]),
            ),
            (
                "the same file again updates each plugin with its live upstream",
                &[SHARED],
                vec![shared()],
                want(&[], &["a", "b"], &[], &["p"], &[]),
            ),
            (
                "a changed endpoint is an update too: the build, which reads the TLS files, decides to replace the upstream",
                &[SHARED],
                vec![Some(SHARED.replace("127.0.0.1:7002", "127.0.0.1:7009"))],
                want(&[], &["a", "b"], &[], &["p"], &[]),
            ),
            (
                "a plugin left out of the file is removed",
                &[SHARED],
                vec![Some(
                    "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    insecure: true\n"
                        .into(),
                )],
                want(&[], &["a"], &["b"], &[], &[]),
            ),
            (
                "a renamed plugin is one removed and one added",
                &[SHARED],
                vec![Some(SHARED.replace("name: b", "name: c").replace("[a, b]", "[a, c]"))],
                want(&["c"], &["a"], &["b"], &["p"], &[]),
            ),
            (
                "a plugin replaced by a pipeline of its name is removed",
                &[SHARED],
                vec![Some(
                    "plugins:\n  - name: a\n    endpoint: 127.0.0.1:7001\n    insecure: true\npipelines:\n  - name: b\n    plugins: [a]\n"
                        .into(),
                )],
                want(&[], &["a"], &["b"], &["b"], &[]),
            ),
            (
                "a hub's plugin may share a shared plugin's name; its pipeline may use shared plugins",
                &[SHARED],
                vec![shared(), Some(HUB_A.into())],
                want(&["hub-a/a"], &["a", "b"], &[], &["p", "hub-a/q"], &[]),
            ),
            (
                "a name two files define for one hub: the first file keeps it, the second's is a problem",
                &[SHARED],
                vec![shared(), shared()],
                want(
                    &[],
                    &["a", "b"],
                    &[],
                    &["p"],
                    &["file1: plugins[0] (a)", "file1: plugins[1] (b)", "file1: pipelines[0] (p)"],
                ),
            ),
            (
                "a hub's pipeline naming a shared plugin that no file defines is a problem",
                &[],
                vec![Some(HUB_A.into())],
                want(&["hub-a/a"], &[], &[], &["hub-a/q"], &["file0: pipelines[0] (q).plugins[1]"]),
            ),
            (
                "a hub's pipeline cannot name another hub's plugin",
                &[],
                vec![
                    Some(HUB_A.replace("[a, b]", "[a]")),
                    Some(HUB_A.replace("hub-a", "hub-b").replace("7003", "7004").replace("[a, b]", "[a]").replace("name: q", "name: r")),
                    Some("hub: hub-c\npipelines:\n  - name: s\n    plugins: [a]\n".into()),
                ],
                want(
                    &["hub-a/a", "hub-b/a"],
                    &[],
                    &[],
                    &["hub-a/q", "hub-b/r", "hub-c/s"],
                    &["file2: pipelines[0] (s).plugins[0]"],
                ),
            ),
            (
                "a source with no valid config yet plans nothing, and the live plugins only it had are removed",
                &[SHARED, HUB_A],
                vec![None, Some(HUB_A.into())],
                want(&[], &["hub-a/a"], &["a", "b"], &["hub-a/q"], &["file1: pipelines[0] (q).plugins[1]"]),
            ),
        ];
        let mut failed = Vec::new();
        for (name, before, files, expected) in rows {
            let snapshot = live(before);
            let got = planned(snapshot.as_deref(), &files);
            if got != expected {
                failed.push(format!("{name}:\n  got  {got:?}\n  want {expected:?}"));
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}
