//! The hook calls of one step in flight together, through a real gateway to
//! a real plugin: each cluster's calls keep the design's order (BeginRollout,
//! MutateManifestWork, then the apply), the phases keep theirs (validations,
//! then the decision and ProgressRollout, then the roll-outs), no more than
//! `hook_concurrency` clusters are in flight, and a target that asked for
//! the counts only gets no per-cluster list.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::gateway;
use jiff::Timestamp;
use rollout_controller::api::{ManifestWork, ManifestWorkSpec};
use rollout_controller::hooks::{GatewayHooks, GatewayOptions, StateDetail};
use rollout_controller::orchestrate::memory::MemoryWorld;
use rollout_controller::orchestrate::{
    self, DeployInput, Owner, PlacementTarget, Settings, World, WorldError,
};
use rollout_controller::revision::Revision;
use rollout_controller::rollout::{ClusterGroup, RawStrategy, Strategy};
use rollout_controller::telemetry::Tracing;
use rollout_proto::v1alpha1::rollout_plugin_service_server::{
    RolloutPluginService, RolloutPluginServiceServer,
};
use rollout_proto::v1alpha1::*;
use serde_json::json;
use tokio::sync::watch;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::Status;

/// One event, in the order it happened: a hook call as the plugin received
/// it, or an apply as the world received it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Hook(&'static str, String),
    Apply(String),
}

type Log = Arc<Mutex<Vec<Event>>>;

/// A plugin that records every call and holds each per-cluster call until
/// two have been in flight together (or a guard time passed, so a
/// controller that calls one at a time fails the assertions rather than
/// hanging).
#[derive(Clone)]
struct Holding {
    log: Log,
    requests: Arc<Mutex<Vec<RolloutPluginRequest>>>,
    in_flight: Arc<AtomicUsize>,
    peak: Arc<watch::Sender<usize>>,
}

impl Holding {
    fn new(log: Log) -> Holding {
        Holding {
            log,
            requests: Arc::default(),
            in_flight: Arc::default(),
            peak: Arc::new(watch::channel(0).0),
        }
    }

    async fn enter(&self, hook: &'static str, request: &RolloutPluginRequest) {
        self.log
            .lock()
            .unwrap()
            .push(Event::Hook(hook, request.cluster_name.clone()));
        self.requests.lock().unwrap().push(request.clone());
        if request.cluster_name.is_empty() {
            return;
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.send_modify(|peak| *peak = (*peak).max(now));
        let mut peak = self.peak.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(2), peak.wait_for(|p| *p >= 2)).await;
    }

    fn leave(&self, request: &RolloutPluginRequest) {
        if !request.cluster_name.is_empty() {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn peak(&self) -> usize {
        *self.peak.borrow()
    }
}

#[tonic::async_trait]
impl RolloutPluginService for Holding {
    async fn initialize(
        &self,
        _: tonic::Request<InitializeRequest>,
    ) -> Result<tonic::Response<InitializeResponse>, Status> {
        Ok(tonic::Response::new(InitializeResponse::default()))
    }

    async fn begin_rollout(
        &self,
        req: tonic::Request<RolloutPluginRequest>,
    ) -> Result<tonic::Response<()>, Status> {
        self.enter("Begin", req.get_ref()).await;
        self.leave(req.get_ref());
        Ok(tonic::Response::new(()))
    }

    async fn progress_rollout(
        &self,
        req: tonic::Request<RolloutPluginRequest>,
    ) -> Result<tonic::Response<()>, Status> {
        self.enter("Progress", req.get_ref()).await;
        Ok(tonic::Response::new(()))
    }

    async fn validate_rollout_completion(
        &self,
        req: tonic::Request<ValidateCompletionRequest>,
    ) -> Result<tonic::Response<ValidateResponse>, Status> {
        let rollout = req.into_inner().rollout.unwrap_or_default();
        self.enter("Validate", &rollout).await;
        self.leave(&rollout);
        Ok(tonic::Response::new(ValidateResponse {
            result: ValidationResult::Succeeded as i32,
            message: "ok".into(),
            recheck_after: None,
        }))
    }

    async fn mutate_manifest_work(
        &self,
        req: tonic::Request<MutateManifestWorkRequest>,
    ) -> Result<tonic::Response<MutateManifestWorkResponse>, Status> {
        let rollout = req.into_inner().rollout.unwrap_or_default();
        self.enter("Mutate", &rollout).await;
        self.leave(&rollout);
        // Unchanged.
        Ok(tonic::Response::new(MutateManifestWorkResponse::default()))
    }
}

/// The in-memory world, logging each apply into the plugin's log.
struct Logged {
    memory: MemoryWorld,
    log: Log,
}

impl World for Logged {
    async fn list_works(&self, owner_label: &str) -> Result<Vec<Arc<ManifestWork>>, WorldError> {
        self.memory.list_works(owner_label).await
    }

    async fn apply_work(
        &self,
        work: ManifestWork,
        force: bool,
    ) -> Result<ManifestWork, WorldError> {
        let cluster = work.metadata.namespace.clone().unwrap_or_default();
        let stored = self.memory.apply_work(work, force).await?;
        self.log.lock().unwrap().push(Event::Apply(cluster));
        Ok(stored)
    }

    async fn annotate_work(
        &self,
        namespace: &str,
        name: &str,
        annotations: BTreeMap<String, String>,
    ) -> Result<(), WorldError> {
        self.memory
            .annotate_work(namespace, name, annotations)
            .await
    }

    async fn delete_work(&self, namespace: &str, name: &str) -> Result<(), WorldError> {
        self.memory.delete_work(namespace, name).await
    }
}

struct Rig {
    plugin: Holding,
    world: Logged,
    log: Log,
    hooks: GatewayHooks,
    _gateway: common::Gateway,
    strategy: Strategy,
    groups: Vec<ClusterGroup>,
    update: Revision,
    settings: Settings,
}

const CLUSTERS: [&str; 6] = ["c1", "c2", "c3", "c4", "c5", "c6"];

async fn rig(concurrency: usize) -> Rig {
    let log = Log::default();
    let plugin = Holding::new(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = RolloutPluginServiceServer::new(plugin.clone());
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await;
    });
    let gw = gateway(&[("held", addr)]).await;
    let hooks = GatewayHooks::new(
        &GatewayOptions {
            url: gw.url.clone(),
            timeout: Duration::from_secs(20),
            tls: None,
        },
        Tracing::disabled(),
    )
    .unwrap();
    let raw: RawStrategy =
        serde_json::from_value(json!({"type": "All", "plugin": "held"})).unwrap();
    let template: ManifestWorkSpec = serde_json::from_value(json!({"workload": {"manifests": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default"},
         "data": {"version": "v2"}}
    ]}}))
    .unwrap();
    Rig {
        plugin,
        world: Logged {
            memory: MemoryWorld::new(),
            log: log.clone(),
        },
        log,
        hooks,
        _gateway: gw,
        strategy: Strategy::from_raw(&raw).unwrap(),
        groups: vec![ClusterGroup {
            index: 0,
            name: String::new(),
            clusters: CLUSTERS.iter().map(|c| c.to_string()).collect(),
        }],
        update: Revision::of(&template),
        settings: Settings {
            hook_concurrency: concurrency,
            ..Settings::default()
        },
    }
}

impl Rig {
    async fn step(&self, detail: StateDetail, now: Timestamp) -> orchestrate::DeployOutcome {
        let works = self.world.list_works("default.hello").await.unwrap();
        let targets = [PlacementTarget {
            name: "p",
            strategy: &self.strategy,
            groups: &self.groups,
            hold: None,
            state_detail: detail,
        }];
        let labels = BTreeMap::new();
        let trace = opentelemetry::Context::new();
        let input = DeployInput {
            owner: Owner {
                namespace: "default",
                name: "hello",
                label: "default.hello",
                labels: &labels,
            },
            spec_placements: &["p".to_owned()],
            placements: &targets,
            works: &works,
            update: &self.update,
            current_hash: None,
            current: None,
            aborted_at: None,
            clock: &now,
            settings: &self.settings,
            trace: &trace,
            control: orchestrate::ManualControl::default(),
        };
        orchestrate::deploy(&self.hooks, &self.world, &input).await
    }

    fn take_log(&self) -> Vec<Event> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    /// Plays the work agent: every work applied and done.
    fn all_done(&self, at: Timestamp) {
        for work in self.world.memory.all() {
            let cluster = work.metadata.namespace.clone().unwrap();
            let generation = work.metadata.generation.unwrap_or(0);
            let condition = |kind: &str, status: &str| {
                json!({"type": kind, "status": status, "observedGeneration": generation,
                       "lastTransitionTime": at.to_string(), "reason": "", "message": ""})
            };
            let conditions = json!([
                condition("Applied", "True"),
                condition("Available", "True"),
                condition("Progressing", "False")
            ]);
            let name = work.metadata.name.clone().unwrap();
            self.world.memory.update(&cluster, &name, |w| {
                w.status = serde_json::from_value(json!({ "conditions": conditions })).ok();
            });
        }
    }
}

fn position(log: &[Event], event: &Event) -> usize {
    log.iter()
        .position(|e| e == event)
        .unwrap_or_else(|| panic!("{event:?} is not in {log:?}"))
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

#[tokio::test]
async fn a_steps_calls_run_together_in_each_clusters_order() {
    let rig = rig(3).await;

    // Roll out: ProgressRollout, then each cluster's Begin, Mutate, apply.
    let out = rig.step(StateDetail::Full, at(0)).await;
    assert!(out.placements[0].hook_errors.is_empty(), "{out:?}");
    assert_eq!(out.placements[0].applied, CLUSTERS, "reported in order");
    let log = rig.take_log();
    let peak = rig.plugin.peak();
    assert!(
        peak > 1,
        "calls of different clusters overlap (peak {peak})"
    );
    assert!(peak <= 3, "at most hook_concurrency clusters (peak {peak})");
    let progress = position(&log, &Event::Hook("Progress", String::new()));
    for cluster in CLUSTERS {
        let begin = position(&log, &Event::Hook("Begin", cluster.into()));
        let mutate = position(&log, &Event::Hook("Mutate", cluster.into()));
        let apply = position(&log, &Event::Apply(cluster.into()));
        assert!(
            progress < begin && begin < mutate && mutate < apply,
            "{cluster}: {log:?}"
        );
    }

    // Validate: every cluster's validation before the decision's
    // ProgressRollout.
    rig.all_done(at(10));
    rig.plugin.peak.send_replace(0);
    let out = rig.step(StateDetail::Full, at(20)).await;
    assert!(out.placements[0].complete(), "{out:?}");
    let log = rig.take_log();
    assert!(rig.plugin.peak() > 1, "validations overlap");
    let progress = position(&log, &Event::Hook("Progress", String::new()));
    for cluster in CLUSTERS {
        assert!(position(&log, &Event::Hook("Validate", cluster.into())) < progress);
    }
    // Every request of a phase carried the same state, and the counts.
    let requests = rig.plugin.requests.lock().unwrap().clone();
    let last = requests.last().unwrap();
    let state = last.rollout_status.as_ref().expect("full state");
    assert_eq!(state.completed.len(), CLUSTERS.len());
    assert_eq!(last.counts.unwrap().succeeded, 6);
}

#[tokio::test]
async fn a_counts_only_target_gets_no_list() {
    let rig = rig(4).await;
    rig.step(StateDetail::Counts, at(0)).await;
    rig.all_done(at(10));
    let out = rig.step(StateDetail::Counts, at(20)).await;
    assert!(out.placements[0].complete(), "{out:?}");
    let requests = rig.plugin.requests.lock().unwrap().clone();
    // Progress + 6 × (Begin, Mutate), then 6 × Validate + Progress.
    assert_eq!(requests.len(), 1 + 12 + 6 + 1);
    for request in &requests {
        assert_eq!(request.rollout_status, None, "{request:?}");
        let counts = request.counts.expect("counts on every request");
        let total = counts.to_apply
            + counts.progressing
            + counts.validating
            + counts.succeeded
            + counts.failed
            + counts.timed_out
            + counts.skip;
        assert_eq!(total, 6, "{counts:?}");
    }
    assert_eq!(requests[0].counts.unwrap().to_apply, 6, "before any apply");
    assert_eq!(
        requests.last().unwrap().counts.unwrap().succeeded,
        6,
        "after the validations"
    );
}
