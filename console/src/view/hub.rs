//! The live view's I/O: reads one ManifestWorkReplicaSet and what belongs
//! to it through the Kubernetes API ([`snapshot`]), or watches it all and
//! redraws on change ([`watch`]).
//!
//! What is read: the ManifestWorkReplicaSet; its ManifestWorkReplicaSetRollout
//! (same namespace and name; absent when the CRD is not installed); the
//! ManifestWorks carrying its owner label, in every namespace; the
//! PlacementDecisions of its namespace labelled with a placement; the
//! `events.k8s.io/v1` Events about it.
//!
//! [`watch`] redraws at most [`MAX_FRAMES_PER_SECOND`] times a second, only
//! when something changed (on a terminal also once a second, for the
//! countdowns); on a terminal each frame clears the screen, otherwise
//! frames are appended, separated by a line. It returns when `stop`
//! completes (Ctrl-C, SIGTERM) or the ManifestWorkReplicaSet is deleted.

use std::fmt::Debug;
use std::future::Future;
use std::io::{self, Write};
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{BoxStream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use thiserror::Error;

use rollout_controller::kubeconfig::{ConnectError, NotFound, connect};

use super::{Snapshot, View, build, render};
use crate::format::{duration, write_line};
use rollout_controller::api::labels::{MWRS_OWNER_LABEL, PLACEMENT_LABEL};
use rollout_controller::api::manifestworkreplicasetrollout::{Choice, choose};
use rollout_controller::api::{
    ManifestWork, ManifestWorkReplicaSet, ManifestWorkReplicaSetRollout, PlacementDecision,
};

/// The most frames [`watch`] draws in a second.
pub(crate) const MAX_FRAMES_PER_SECOND: u32 = 4;

/// How long the first read may take before the API server counts as
/// unreachable, unless the caller says otherwise (`--request-timeout`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Clears a terminal and moves the cursor home.
const CLEAR_SCREEN: &str = "\x1b[H\x1b[2J";

/// Between two frames appended to a file or pipe.
const FRAME_SEPARATOR: &str = "────────────────────────────────────────";

/// Why the view could not be drawn.
#[derive(Debug, Error)]
pub enum GetError {
    /// The ManifestWorkReplicaSet does not exist.
    #[error(transparent)]
    NotFound(#[from] NotFound),
    /// No answer from the API server.
    #[error(
        "cannot reach the Kubernetes API server{at} (check --kubeconfig and the cluster's address)"
    )]
    Unreachable {
        /// ` at URL`, when known.
        at: String,
        /// What the client said.
        #[source]
        source: kube::Error,
    },
    /// No answer within [`Target::request_timeout`].
    #[error(
        "the Kubernetes API server{at} did not answer within {after} (check --kubeconfig and the cluster's address)"
    )]
    Timeout {
        /// ` at URL`, when known.
        at: String,
        /// The time waited, as a Go duration.
        after: String,
    },
    /// The API server refused a read.
    #[error("reading {what}: {source}")]
    Api {
        /// What was read.
        what: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
    /// No client configuration (kubeconfig, in-cluster) could be used.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The output could not be written.
    #[error("writing the view: {0}")]
    Output(#[from] io::Error),
}

/// What the API calls are about, for errors.
#[derive(Debug, Clone)]
pub struct Target {
    /// The ManifestWorkReplicaSet's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The API server's address, for errors (empty when unknown).
    pub server: String,
    /// How long the first read may take.
    pub request_timeout: Duration,
}

impl Target {
    pub(crate) fn at(&self) -> String {
        if self.server.is_empty() {
            String::new()
        } else {
            format!(" at {}", self.server)
        }
    }

    /// `error` of reading `what`, classified: no answer at all is
    /// [`GetError::Unreachable`], a refusal is [`GetError::Api`].
    pub(crate) fn error(&self, what: &str, error: kube::Error) -> GetError {
        match error {
            kube::Error::Api(_) => GetError::Api {
                what: what.to_owned(),
                source: error,
            },
            other => GetError::Unreachable {
                at: self.at(),
                source: other,
            },
        }
    }
}

/// What `rollout-controller get` shows, and how.
#[derive(Debug, Clone)]
pub struct GetOptions {
    /// The kubeconfig file; `None`: in-cluster, else $KUBECONFIG or
    /// ~/.kube/config.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The ManifestWorkReplicaSet's namespace; `None`: the context's.
    pub namespace: Option<String>,
    /// The ManifestWorkReplicaSet's name.
    pub name: String,
    /// Keep watching and redraw on every change, until `stop`.
    pub watch: bool,
    /// How long the first read may take (see [`Target::request_timeout`]).
    pub request_timeout: Duration,
    /// JSON lines instead of text.
    pub json: bool,
}

/// `rollout-controller get`: draws the view on standard output once, or
/// with [`GetOptions::watch`] on every change until `stop` completes or
/// the ManifestWorkReplicaSet is deleted. Text is redrawn in place on a
/// terminal and appended elsewhere; a single frame never clears the
/// screen.
pub async fn get(options: &GetOptions, stop: impl Future<Output = ()>) -> Result<(), GetError> {
    use std::io::IsTerminal;
    let (client, server, default_namespace) = connect(options.kubeconfig.as_deref()).await?;
    let target = Target {
        namespace: options.namespace.clone().unwrap_or(default_namespace),
        name: options.name.clone(),
        server,
        request_timeout: options.request_timeout,
    };
    let stdout = io::stdout();
    let output = match (options.json, stdout.is_terminal()) {
        (true, _) => Output::Json,
        (false, true) => Output::Terminal,
        (false, false) => Output::Appended,
    };
    let mut out = stdout.lock();
    if options.watch {
        return watch(&client, &target, output, &mut out, stop).await;
    }
    let snapshot = first_snapshot(&client, &target).await?;
    let view = build(&snapshot, Timestamp::now());
    let once = if output == Output::Json {
        Output::Json
    } else {
        Output::Appended
    };
    write_frame(&mut out, &view, once, true)?;
    Ok(())
}

fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// The value of the owner label on the ManifestWorks of `mwrs`.
pub(crate) fn owner_of_works(mwrs: &ManifestWorkReplicaSet) -> String {
    mwrs.owner_label_value().0
}

/// The value of `work`'s owner label: the works of a set are those whose
/// value is [`owner_of_works`] of it.
pub(crate) fn owner_of(work: &ManifestWork) -> Option<&str> {
    work.labels().get(MWRS_OWNER_LABEL).map(String::as_str)
}

/// The label selector of the ManifestWorks of `mwrs`.
fn works_selector(mwrs: &ManifestWorkReplicaSet) -> String {
    format!("{MWRS_OWNER_LABEL}={}", owner_of_works(mwrs))
}

/// The label selector of the ManifestWorks of every set.
pub(crate) const ALL_WORKS_SELECTOR: &str = MWRS_OWNER_LABEL;

/// The kind of object the Events a view shows are about.
pub(crate) const EVENTS_KIND: &str = "ManifestWorkReplicaSet";

/// The field selector of the Events about `name`.
fn events_selector(name: &str) -> String {
    format!("regarding.kind={EVENTS_KIND},regarding.name={name}")
}

/// The field selector of the Events about every set.
pub(crate) fn all_events_selector() -> String {
    format!("regarding.kind={EVENTS_KIND}")
}

/// Whether `event` is about the set `name` of `namespace`: what
/// [`events_selector`] selects in that namespace.
pub(crate) fn is_about(event: &Event, namespace: &str, name: &str) -> bool {
    let regarding = event.regarding.as_ref();
    event.namespace().as_deref() == Some(namespace)
        && regarding.and_then(|r| r.kind.as_deref()) == Some(EVENTS_KIND)
        && regarding.and_then(|r| r.name.as_deref()) == Some(name)
}

/// The carrier of the set named `set` among `carriers` (one namespace's),
/// by the controller's rule; none when none or several bind to it.
pub(crate) fn bound_carrier<'a>(
    set: &str,
    carriers: impl Iterator<Item = &'a ManifestWorkReplicaSetRollout>,
) -> Option<ManifestWorkReplicaSetRollout> {
    match choose(set, carriers) {
        Choice::Bound(carrier, _) => Some(carrier.clone()),
        Choice::None | Choice::Ambiguous(_) => None,
    }
}

/// Reads everything the view of `target` needs, once.
pub(crate) async fn snapshot(client: &Client, target: &Target) -> Result<Snapshot, GetError> {
    let ns = target.namespace.as_str();
    let mwrs = Api::<ManifestWorkReplicaSet>::namespaced(client.clone(), ns)
        .get(&target.name)
        .await
        .map_err(|e| {
            if is_not_found(&e) {
                GetError::NotFound(NotFound {
                    namespace: ns.to_owned(),
                    name: target.name.clone(),
                })
            } else {
                target.error("the ManifestWorkReplicaSet", e)
            }
        })?;
    let carriers = match Api::<ManifestWorkReplicaSetRollout>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        // No such CRD on this hub.
        Err(e) if is_not_found(&e) => Vec::new(),
        Err(e) => return Err(target.error("the ManifestWorkReplicaSetRollouts", e)),
    };
    let carrier = bound_carrier(&target.name, carriers.iter());
    let works = Api::<ManifestWork>::all(client.clone())
        .list(&ListParams::default().labels(&works_selector(&mwrs)))
        .await
        .map_err(|e| target.error("the ManifestWorks", e))?
        .items;
    let decisions = Api::<PlacementDecision>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(PLACEMENT_LABEL))
        .await
        .map_err(|e| target.error("the PlacementDecisions", e))?
        .items;
    let events = match Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default().fields(&events_selector(&target.name)))
        .await
    {
        Ok(list) => list.items,
        // Events only add to the view: one the reader may not list (403) is
        // left out; an API server that stopped answering is not.
        Err(kube::Error::Api(status)) if status.code == 403 => Vec::new(),
        Err(e) => return Err(target.error("the Events", e)),
    };
    Ok(Snapshot {
        mwrs,
        carrier,
        works,
        decisions,
        events,
    })
}

/// [`snapshot`], failing as [`GetError::Timeout`] after
/// [`Target::request_timeout`].
pub async fn first_snapshot(client: &Client, target: &Target) -> Result<Snapshot, GetError> {
    tokio::time::timeout(target.request_timeout, snapshot(client, target))
        .await
        .unwrap_or_else(|_| {
            Err(GetError::Timeout {
                at: target.at(),
                after: duration(target.request_timeout),
            })
        })
}

/// How frames are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Text, redrawn in place (a terminal).
    Terminal,
    /// Text frames appended, separated by a line.
    Appended,
    /// One JSON object per frame, one per line.
    Json,
}

/// Writes one frame of `view` to `out`.
pub fn write_frame(
    out: &mut dyn Write,
    view: &View,
    output: Output,
    first: bool,
) -> io::Result<()> {
    match output {
        Output::Json => {
            let line = serde_json::to_string(view).map_err(io::Error::other)?;
            writeln!(out, "{line}")?;
        }
        Output::Terminal => write!(out, "{CLEAR_SCREEN}{}", render(view))?,
        Output::Appended => {
            if !first {
                writeln!(out, "{FRAME_SEPARATOR}")?;
            }
            write!(out, "{}", render(view))?;
        }
    }
    out.flush()
}

/// What a watch stream says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// An object was added, changed or removed.
    Changed,
    /// The ManifestWorkReplicaSet itself was deleted.
    Deleted,
}

/// A stream of watch events, as [`Change`]s.
pub(crate) type Changes = BoxStream<'static, Result<Change, watcher::Error>>;

/// One kind's watcher: its store, and a stream that keeps the store up to
/// date and yields on every change (`deleted` says what a deletion is).
pub(crate) fn watched<K>(
    api: Api<K>,
    config: watcher::Config,
    deleted: Change,
) -> (Store<K>, Changes)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config).default_backoff())
        .map(move |event| {
            event.map(|e| match e {
                watcher::Event::Delete(_) => deleted,
                _ => Change::Changed,
            })
        })
        .boxed();
    (store, stream)
}

pub(crate) fn owned<K: Clone>(list: Vec<Arc<K>>) -> Vec<K> {
    list.iter().map(|o| (**o).clone()).collect()
}

/// The stores of every kind the view reads.
struct Stores {
    mwrs: Store<ManifestWorkReplicaSet>,
    carrier: Store<ManifestWorkReplicaSetRollout>,
    works: Store<ManifestWork>,
    decisions: Store<PlacementDecision>,
    events: Store<Event>,
}

impl Stores {
    fn snapshot(&self) -> Option<Snapshot> {
        let mwrs = (*self.mwrs.state().into_iter().next()?).clone();
        let carriers = self.carrier.state();
        Some(Snapshot {
            carrier: bound_carrier(&mwrs.name_any(), carriers.iter().map(|c| &**c)),
            mwrs,
            works: owned(self.works.state()),
            decisions: owned(self.decisions.state()),
            events: owned(self.events.state()),
        })
    }
}

fn start_watches(client: &Client, target: &Target, first: &Snapshot) -> (Stores, Changes) {
    let ns = target.namespace.as_str();
    let by_name = || watcher::Config::default().fields(&format!("metadata.name={}", target.name));
    let (mwrs, a) = watched(
        Api::namespaced(client.clone(), ns),
        by_name(),
        Change::Deleted,
    );
    // Any carrier of the namespace may be the set's (`targetRef`).
    let (carrier, b) = watched(
        Api::namespaced(client.clone(), ns),
        watcher::Config::default(),
        Change::Changed,
    );
    let (works, c) = watched(
        Api::all(client.clone()),
        watcher::Config::default().labels(&works_selector(&first.mwrs)),
        Change::Changed,
    );
    let (decisions, d) = watched(
        Api::namespaced(client.clone(), ns),
        watcher::Config::default().labels(PLACEMENT_LABEL),
        Change::Changed,
    );
    let (events, e) = watched(
        Api::namespaced(client.clone(), ns),
        watcher::Config::default().fields(&events_selector(&target.name)),
        Change::Changed,
    );
    let stores = Stores {
        mwrs,
        carrier,
        works,
        decisions,
        events,
    };
    (stores, futures::stream::select_all([a, b, c, d, e]).boxed())
}

/// Draws the view of `target` to `out` until `stop` completes or the
/// ManifestWorkReplicaSet is deleted (see the module documentation).
/// Fails at once when the first read fails.
pub async fn watch<W: Write>(
    client: &Client,
    target: &Target,
    output: Output,
    out: &mut W,
    stop: impl Future<Output = ()>,
) -> Result<(), GetError> {
    let first = first_snapshot(client, target).await?;
    let view = build(&first, Timestamp::now());
    write_frame(out, &view, output, true)?;
    let mut last_text = render(&view);
    let (stores, mut changes) = start_watches(client, target, &first);
    let mut stop = pin!(stop);
    let mut tick = tokio::time::interval(Duration::from_secs(1) / MAX_FRAMES_PER_SECOND);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut dirty = false;
    let mut last_draw = tokio::time::Instant::now();
    let mut trouble: Option<String> = None;
    loop {
        tokio::select! {
            () = &mut stop => return Ok(()),
            change = changes.next() => match change {
                Some(Ok(Change::Changed)) => { dirty = true; trouble = None; }
                Some(Ok(Change::Deleted)) => {
                    write_line(out, &format!("ManifestWorkReplicaSet {}/{} was deleted", target.namespace, target.name))?;
                    return Ok(());
                }
                Some(Err(error)) => {
                    // Said at once: with the API server gone nothing
                    // changes, so no frame would say it.
                    if trouble.is_none() && output != Output::Json {
                        write_line(out, &format!("! the watch is interrupted ({error}); retrying"))?;
                        out.flush()?;
                    }
                    trouble = Some(error.to_string());
                }
                None => return Ok(()),
            },
            _ = tick.tick() => {
                // A terminal also redraws once a second, for the countdowns.
                let countdown = output == Output::Terminal
                    && last_draw.elapsed() >= Duration::from_secs(1);
                if !dirty && !countdown {
                    continue;
                }
                // Until the ManifestWorkReplicaSet's watch has listed it.
                let Some(snapshot) = stores.snapshot() else { continue };
                let view = build(&snapshot, Timestamp::now());
                let text = render(&view);
                if text != last_text {
                    write_frame(out, &view, output, false)?;
                    if let (Some(trouble), true) = (&trouble, output != Output::Json) {
                        write_line(out, &format!("! the watch is interrupted ({trouble}); retrying"))?;
                    }
                    last_text = text;
                }
                dirty = false;
                last_draw = tokio::time::Instant::now();
            }
        }
    }
}
