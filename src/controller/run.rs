//! Wiring: the per-node reconcile (gather -> plan -> apply), the
//! kube-runtime Controller that drives it, and the orphan sweep.

use super::apply::{Applier, ApplyError};
use super::clock::Clock;
use super::gather::{self, ImageSource};
use super::metrics::{Metrics, Stage, StageLabel};
use super::namespaces::{LabelChanges, NamespaceMeta, labels_in};
use super::orphans::orphans;
use super::plan::{NodeFacts, NodePlan, PolicyCache, images_to_inspect, plan_node, profile_node};
use super::taints::{TaintSettings, has_nfguard_taint};
use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Reconcile every node at least this often (catches missed events).
pub const RESYNC: Duration = Duration::from_secs(300);
/// Retry a failed reconcile after this long.
pub const RETRY: Duration = Duration::from_secs(30);
/// How long a reconcile waits for the Namespaces' first list.
pub const NAMESPACES_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("node {node}: reading its profile, pods or policies: {source}")]
    Gather {
        node: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "node {node}: Namespaces not listed within {NAMESPACES_WAIT:?} (their labels select policies); does the controller's ClusterRole allow list and watch on namespaces?"
    )]
    NamespacesUnlisted { node: String },
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

/// Shared by every reconcile.
pub struct Ctx {
    pub client: kube::Client,
    pub images: Arc<dyn ImageSource>,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// All Nodes (the controller's own store): the brake's denominator.
    pub nodes: Store<Node>,
    /// All Namespaces' metadata: policies select namespaces by their labels.
    pub namespaces: Store<NamespaceMeta>,
    /// Whether a node carries an nfguard taint, as last written by us; wins
    /// over the store, which may not have seen our own patch yet.
    pub tainted: Mutex<HashMap<String, bool>>,
}

impl Ctx {
    /// (nodes tainted by nfguard other than `node`, all nodes).
    fn tainted_counts(&self, node: &str) -> (usize, usize) {
        let ours = self.tainted.lock().unwrap_or_else(|e| e.into_inner());
        let all = self.nodes.state();
        let total = all.len().max(1);
        let tainted = all
            .iter()
            .filter_map(|n| {
                let name = n.metadata.name.as_deref()?;
                let t = ours.get(name).copied().unwrap_or_else(|| {
                    has_nfguard_taint(n.spec.as_ref().and_then(|s| s.taints.as_ref()))
                });
                (t && name != node).then_some(())
            })
            .count();
        (tainted, total)
    }
}

/// One node: gather, plan (pure), apply. Returns the plan it applied.
pub async fn reconcile_node(node: &Node, ctx: &Ctx) -> Result<NodePlan, ReconcileError> {
    let started = Instant::now();
    let name = node.metadata.name.clone().unwrap_or_default();
    let gather_failed = |e: ReconcileError| {
        ctx.metrics
            .reconcile_errors
            .get_or_create(&StageLabel {
                stage: Stage::gather,
            })
            .inc();
        e
    };
    if !gather::namespaces_listed(&ctx.namespaces, NAMESPACES_WAIT).await {
        return Err(gather_failed(ReconcileError::NamespacesUnlisted {
            node: name,
        }));
    }
    let g = gather::gather(&ctx.client, node).await.map_err(|source| {
        gather_failed(ReconcileError::Gather {
            node: name.clone(),
            source,
        })
    })?;
    let pods: Vec<&Pod> = g.pods.iter().collect();
    let namespace_labels = |ns: &str| labels_in(&ctx.namespaces, ns);
    let policies = PolicyCache::with_namespace_labels(&g.policies, &namespace_labels);
    let keys = images_to_inspect(node, &pods, &policies);
    let images = ctx.images.resolve(&keys).await;
    let (tainted_elsewhere, total_nodes) = ctx.tainted_counts(&name);
    let plan = plan_node(&NodeFacts {
        node,
        profile: g.profile.as_ref(),
        pods: &pods,
        policies: &policies,
        settings: TaintSettings::from_policies(&g.policies),
        images: &images,
        tainted_elsewhere,
        total_nodes,
        now: ctx.clock.now(),
    });
    Applier {
        client: &ctx.client,
        recorder: &ctx.recorder,
        metrics: &ctx.metrics,
    }
    .apply(node, g.profile.as_ref(), &plan)
    .await?;
    {
        let mut t = ctx.tainted.lock().unwrap_or_else(|e| e.into_inner());
        t.insert(name, plan.taints.tainted_after);
        let count = ctx
            .nodes
            .state()
            .iter()
            .filter(|n| {
                let nn = n.metadata.name.as_deref().unwrap_or("");
                t.get(nn).copied().unwrap_or_else(|| {
                    has_nfguard_taint(n.spec.as_ref().and_then(|s| s.taints.as_ref()))
                })
            })
            .count();
        ctx.metrics.tainted_nodes.set(count as i64);
    }
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    Ok(plan)
}

async fn reconcile(node: Arc<Node>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let plan = reconcile_node(&node, &ctx).await?;
    let after = plan.requeue_after.map_or(RESYNC, |d| d.min(RESYNC));
    Ok(Action::requeue(after))
}

fn error_policy(_node: Arc<Node>, err: &ReconcileError, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(error = %err, "reconcile failed");
    Action::requeue(RETRY)
}

/// Whether a pod can matter to the plan (writers and `action: Taint` subjects).
fn pod_matters(pod: &Pod) -> bool {
    super::plan::pod_can_write(pod)
}

/// Build the context around a Controller's node store and run it until
/// `stop` completes. Nodes are reconciled one at a time so the brake counts
/// every taint it allows.
pub async fn run_controller(
    client: kube::Client,
    images: Arc<dyn ImageSource>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let wc = watcher::Config::default();
    let controller = Controller::new(Api::<Node>::all(client.clone()), wc.clone());
    let store = controller.store();
    let all_nodes = store.clone();
    let (namespaces, relabelled) = watch_namespace_labels(client.clone());
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        images,
        clock,
        metrics: metrics.clone(),
        recorder,
        nodes: store,
        namespaces,
        tainted: Mutex::new(HashMap::new()),
    });
    controller
        .watches(
            Api::<NodeNetfilterProfile>::all(client.clone()),
            wc.clone(),
            |p| profile_node(&p).map(ObjectRef::<Node>::new),
        )
        .watches(Api::<Pod>::all(client.clone()), wc.clone(), |pod| {
            if !pod_matters(&pod) {
                return None;
            }
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .map(ObjectRef::<Node>::new)
        })
        .watches(Api::<NetfilterPolicy>::all(client), wc, move |_| {
            all_nodes
                .state()
                .iter()
                .map(|n| ObjectRef::from_obj(n.as_ref()))
                .collect::<Vec<_>>()
        })
        // A namespace's new labels may select it into or out of a Taint
        // policy: re-judge every node, as for a policy change (both are rare
        // admin actions; which nodes run its writers is not in any store).
        .reconcile_all_on(relabelled)
        .with_config(ControllerConfig::default().concurrency(1))
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| {
            match res {
                Ok((obj, _)) => tracing::debug!(node = %obj.name, "reconciled"),
                // A deleted Node is scheduled once more and found gone.
                Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => {
                    metrics.forget_node(&obj.name)
                }
                Err(e) => tracing::debug!(error = %e, "controller"),
            }
            std::future::ready(())
        })
        .await;
}

/// A metadata-only reflector store of Namespaces and a stream that yields
/// once per label change of a known namespace. The Controller polls the
/// stream, which keeps the store filled.
fn watch_namespace_labels(
    client: kube::Client,
) -> (
    Store<NamespaceMeta>,
    impl futures::Stream<Item = ()> + Send + 'static,
) {
    let (store, writer) = reflector::store::<NamespaceMeta>();
    let mut changes = LabelChanges::default();
    // An Api of PartialObjectMeta asks for metadata only.
    let api = Api::<NamespaceMeta>::all(client);
    let events = watcher(api, watcher::Config::default());
    let relabelled = reflector::reflector(writer, events)
        .default_backoff()
        .filter_map(move |event| {
            std::future::ready(match event {
                Ok(e) => changes.observe(&e).then_some(()),
                Err(error) => {
                    tracing::warn!(%error, "watching Namespaces");
                    None
                }
            })
        });
    (store, relabelled)
}

/// Delete profiles whose Node is gone. Returns how many were deleted.
pub async fn sweep_orphans(client: &kube::Client, metrics: &Metrics) -> Result<usize, kube::Error> {
    let profiles: Api<NodeNetfilterProfile> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let fail = |e: kube::Error| {
        metrics
            .reconcile_errors
            .get_or_create(&StageLabel {
                stage: Stage::orphans,
            })
            .inc();
        e
    };
    // Profiles first, then nodes (see `orphans`).
    let listed = profiles
        .list(&ListParams::default())
        .await
        .map_err(fail)?
        .items;
    let names: HashSet<String> = nodes
        .list_metadata(&ListParams::default())
        .await
        .map_err(fail)?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    metrics.retain_nodes(&names);
    let mut deleted = 0;
    for o in orphans(&listed, &names) {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: o.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match profiles.delete(&o.name, &dp).await {
            Ok(_) => {
                deleted += 1;
                metrics.orphans_deleted.inc();
                metrics.forget_node(&o.node);
                tracing::info!(profile = %o.name, node = %o.node, "deleted the profile of a node that no longer exists");
            }
            // Already gone, or replaced meanwhile (uid precondition): nothing to do.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(fail(e)),
        }
    }
    Ok(deleted)
}
