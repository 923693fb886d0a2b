//! Wiring: the per-node reconcile (gather from the caches -> plan ->
//! apply), the watches that fill the caches and trigger reconciles, the
//! kube-runtime Controller that drives it all, and the orphan sweep.

use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::controller::apply::gather::plan_from_caches;
use crate::controller::apply::node::{Applier, ApplyError, Versions};
use crate::controller::apply::orphans::orphans;
use crate::controller::cache::in_flight::Written;
use crate::controller::cache::stores::{Caches, Feeds, Unlisted, project_pod};
use crate::controller::metrics::{Metrics, NodeLabel, Stage, StageLabel};
use crate::controller::plan::NodePlan;
use crate::controller::reports::judge::raw_workload;
use crate::controller::reports::owners::{JobMeta, ReplicaSetMeta};
use crate::controller::reports::write::{ReportQueue, ReportWriter};
use crate::judgement::Bounded;
use crate::projection::SlimNode;
use crate::runtime::clock::Clock;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Preconditions};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::controller::timing::{IMAGE_DEADLINE, LIST_WAIT, RESYNC, RETRY};

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("node {node}: {source}")]
    Unlisted {
        node: String,
        #[source]
        source: Unlisted,
    },
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

/// Shared by every reconcile.
pub struct Ctx {
    pub client: kube::Client,
    pub images: Arc<Bounded>,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
    pub recorder: Recorder,
    /// Everything a reconcile reads (no API reads).
    pub caches: Caches,
    /// Workloads whose policy report a reconcile may have changed.
    pub reports: Arc<ReportQueue>,
}

/// One node: gather from the caches, plan (pure), apply. Returns the plan
/// it applied. The only API calls are the writes and image look-ups.
///
/// While the caches' first lists are still coming in (100,000 pods take
/// over 20 s at 5,000 nodes), a node whose Node and profile are listed gets
/// its labels only ([`labels_first`]); its whole plan follows once every
/// list is in. Once [`LIST_WAIT`] has passed since the caches were made, a
/// reconcile waits up to [`LIST_WAIT`] for the lists still missing, then
/// fails with an RBAC hint.
pub async fn reconcile_node(node: &SlimNode, ctx: &Ctx) -> Result<NodePlan, ReconcileError> {
    let started = Instant::now();
    let name = node.name().to_string();
    let unlisted = |source: Unlisted| {
        ctx.metrics
            .reconcile_errors
            .get_or_create(&StageLabel {
                stage: Stage::gather,
            })
            .inc();
        ReconcileError::Unlisted {
            node: name.clone(),
            source,
        }
    };
    let lists_due = LIST_WAIT.saturating_sub(ctx.caches.since_made());
    let labels_only = !ctx.caches.all_listed() && !lists_due.is_zero();
    // Past the deadline each reconcile waits the whole LIST_WAIT again
    // before it fails: with a list refused for good, 5,000 nodes would
    // otherwise each fail (and warn) every RETRY.
    let listed = if labels_only {
        ctx.caches.wait_label_lists(lists_due).await
    } else {
        ctx.caches.wait_listed(LIST_WAIT).await
    };
    listed.map_err(unlisted)?;
    // Planning before the watches show this controller's last writes to
    // the node would write them again (see `in_flight`); the feed that
    // shows the last one triggers the node.
    if let Some(wait) = ctx.caches.in_flight.wait_for(&name) {
        tracing::debug!(node = %name, "waiting for the watch to show the last writes");
        return Ok(NodePlan {
            node: name,
            requeue_after: Some(wait),
            ..Default::default()
        });
    }
    // Otherwise every list is in (waited for above, or came in meanwhile).
    if labels_only && !ctx.caches.all_listed() {
        return labels_first(node, ctx, lists_due).await;
    }
    tracing::debug!(node = %name, waited_ms = started.elapsed().as_millis() as u64, "planning");
    let deadline = tokio::time::Instant::now() + IMAGE_DEADLINE;
    let plan = plan_from_caches(
        node,
        &ctx.caches,
        ctx.images.as_ref(),
        deadline,
        ctx.clock.now(),
    )
    .await;
    tracing::debug!(node = %name, elapsed_ms = started.elapsed().as_millis() as u64, "planned");
    let profile = ctx.caches.profile(&name);
    let written = Applier {
        client: &ctx.client,
        recorder: &ctx.recorder,
        metrics: &ctx.metrics,
    }
    .apply(node, profile.as_deref(), &plan)
    .await?;
    expect_written(&ctx.caches, &name, written);
    let mut plan = plan;
    if let Some(wait) = end_round(ctx, &name) {
        plan.requeue_after = Some(plan.requeue_after.map_or(wait, |d| d.min(wait)));
    }
    let tainted = {
        let mut t = ctx.caches.tainted();
        t.wrote(&name, plan.taints.tainted_after);
        t.tainted()
    };
    ctx.metrics.tainted_nodes.set(tainted as i64);
    ctx.metrics
        .reconcile_duration
        .observe(started.elapsed().as_secs_f64());
    Ok(plan)
}

/// A node's labels while the other first lists are still coming in: they
/// read the profile alone, so they are written as the floor would write
/// them, the same patch the whole plan would make. Nothing else is planned
/// yet (the status and taints need the node's pods and the policies): the
/// whole plan follows when every list is in (`run_controller` re-plans
/// every node then), or at `lists_due`, when the lists are late.
async fn labels_first(
    node: &SlimNode,
    ctx: &Ctx,
    lists_due: Duration,
) -> Result<NodePlan, ReconcileError> {
    let name = node.name().to_string();
    let profile = ctx.caches.profile(&name);
    let (label_patch, event) = crate::controller::plan::plan_labels(
        node,
        profile.as_ref().and_then(|p| p.status.as_ref()),
    );
    let plan = NodePlan {
        node: name,
        label_patch,
        events: event.into_iter().collect(),
        requeue_after: Some(lists_due),
        ..Default::default()
    };
    let Some(patch) = &plan.label_patch else {
        return Ok(plan);
    };
    let applier = Applier {
        client: &ctx.client,
        recorder: &ctx.recorder,
        metrics: &ctx.metrics,
    };
    let version = applier.write_labels(node, patch).await?;
    expect_written(
        &ctx.caches,
        &plan.node,
        Versions {
            node: version,
            profile: None,
        },
    );
    applier
        .publish_all(&plan.events, node, profile.as_deref())
        .await;
    Ok(plan)
}

/// After a reconcile applied its plan. Writes the watches have not shown
/// yet: the feed that shows the last one triggers the node again (and that
/// reconcile, writing nothing, ends the round); Some(how soon to look again
/// if the watch never shows them). Otherwise the caches hold the node's
/// facts as planned: its first round is over, and the reports of the
/// workloads on it are marked (whatever made this node reconcile, its
/// facts, a policy, a pod, the resync, may change them). Marked only now,
/// not when the reconcile starts: a report pass in between would judge
/// from the writer inventory before this reconcile's status write, and
/// write the report again once it arrives.
fn end_round(ctx: &Ctx, name: &str) -> Option<Duration> {
    if let Some(wait) = ctx.caches.in_flight.wait_for(name) {
        return Some(wait);
    }
    round_over(ctx, name);
    None
}

/// `name`'s round is over: the report writer may judge its pods.
fn round_over(ctx: &Ctx, name: &str) {
    ctx.caches.first_rounds.done(name);
    ctx.reports.mark(
        ctx.caches
            .pods_on(name)
            .iter()
            .filter_map(|p| raw_workload(p)),
    );
}

/// Record the versions just written as expected from the watches.
fn expect_written(caches: &Caches, name: &str, written: Versions) {
    caches
        .in_flight
        .expect(name, Written::Node, written.node, || {
            caches
                .nodes
                .get(&ObjectRef::new(name))
                .and_then(|n| n.metadata.resource_version.clone())
        });
    caches
        .in_flight
        .expect(name, Written::Profile, written.profile, || {
            caches
                .profile(name)
                .and_then(|p| p.metadata.resource_version.clone())
        });
}

async fn reconcile(node: Arc<SlimNode>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let plan = reconcile_node(&node, &ctx).await?;
    let after = plan.requeue_after.map_or(RESYNC, |d| d.min(RESYNC));
    Ok(Action::requeue(after))
}

fn error_policy(node: Arc<SlimNode>, err: &ReconcileError, ctx: Arc<Ctx>) -> Action {
    tracing::warn!(error = %err, "reconcile failed");
    // Its reports are judged from the facts the caches hold: the retry
    // may fail as long (RBAC, an admission webhook), and they are no
    // worse than before.
    if let Some(name) = node.metadata.name.as_deref() {
        round_over(&ctx, name);
    }
    Action::requeue(RETRY)
}

/// A watch of `api` whose every event goes to `feed` (which fills the
/// caches); yields what `feed` returns for it. Watch errors are logged and
/// retried with backoff.
fn watch<K, T>(
    api: Api<K>,
    feed: impl FnMut(watcher::Event<K>) -> Vec<T> + Send + 'static,
) -> impl Stream<Item = T> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    T: Send + 'static,
{
    follow(watcher(api, watcher::Config::default()), feed)
}

/// A watch's events fed to `feed`, its errors logged and retried with
/// kube's default backoff.
fn follow<K, E, T>(
    events: impl Stream<Item = Result<watcher::Event<K>, E>> + Send + 'static,
    mut feed: impl FnMut(watcher::Event<K>) -> Vec<T> + Send + 'static,
) -> impl Stream<Item = T> + Send + 'static
where
    K: Send + 'static,
    E: std::fmt::Display + Send + 'static,
    T: Send + 'static,
{
    events.default_backoff().flat_map(move |event| {
        let out = match event {
            Ok(event) => feed(event),
            Err(error) => {
                let kind = std::any::type_name::<K>();
                tracing::warn!(%error, kind, "watch failed (retrying)");
                Vec::new()
            }
        };
        futures::stream::iter(out)
    })
}

/// Keep `node_last_probe_timestamp_seconds` on every heartbeat, though a
/// heartbeat alone no longer reconciles: only a node that already has the
/// series (a reconcile made it; deletion removes it).
fn follow_heartbeat(metrics: &Metrics, event: &watcher::Event<NodeNetfilterProfile>) {
    let (watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event else {
        return;
    };
    let Some(node) = crate::controller::plan::profile_node(p) else {
        return;
    };
    let probed = p
        .status
        .as_ref()
        .and_then(|s| s.last_probe_time.as_deref())
        .and_then(|t| t.trim().parse::<Timestamp>().ok());
    let label = NodeLabel {
        node: node.to_string(),
    };
    if let (Some(t), Some(gauge)) = (probed, metrics.node_last_probe.get(&label)) {
        gauge.set(t.as_second());
    }
}

fn node_refs(names: Vec<String>) -> Vec<ObjectRef<SlimNode>> {
    names.iter().map(|n| ObjectRef::new(n)).collect()
}

/// Nodes reconciled at once unless `--concurrency` says otherwise.
pub const CONCURRENCY: u16 = 4;

/// How [`run_controller`] runs.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Nodes reconciled at once.
    pub concurrency: u16,
    /// Time between orphan sweeps (the first once the caches are listed).
    pub orphan_interval: Duration,
    /// At most so many policy reports and bytes in a namespace.
    pub report_caps: crate::reports::NamespaceCaps,
    /// How the pods are listed and watched.
    pub pods_encoding: crate::kube_protobuf::pods::Choice,
}

/// Fill the caches from watches and run the node Controller on them until
/// `stop` completes. Up to `concurrency` nodes are reconciled at once (an
/// image look-up of one no longer holds up the others); the brake holds
/// across them because a plan reserves its taint when it is made
/// ([`plan_from_caches`]).
///
/// What triggers a node's reconcile: its Node's labels or spec changing
/// (not its status), its profile changing (not a heartbeat while Fresh),
/// a pod on it that can write rules changing in what the plan reads (not
/// its status), any policy's spec, a namespace's labels, every first list
/// coming in (these three: every node), the requeue at the moment its
/// heartbeat would turn stale, and the resync. Beside it run the orphan sweep (every `orphan_interval`,
/// from the caches) and the policy reports' writer
/// ([`ReportWriter`]): each node's round (a reconcile, and the watches
/// showing what it wrote) marks the workloads on its node when it is over,
/// a deleted pod its own, a ReplicaSet or Job its pods'.
pub async fn run_controller(
    client: kube::Client,
    images: Arc<Bounded>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    options: RunOptions,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let RunOptions {
        concurrency,
        orphan_interval,
        report_caps,
        pods_encoding,
    } = options;
    let (caches, feeds) = crate::controller::cache::stores::caches();
    let (parents, parent_feeds) = crate::controller::reports::owners::parents();
    let queue = Arc::new(ReportQueue::default());
    let stop = stop.shared();
    let Feeds {
        mut nodes,
        mut profiles,
        mut pods,
        mut policies,
        mut namespaces,
    } = feeds;
    let heartbeats = metrics.clone();
    let per_node = futures::stream::select_all([
        // Decoded straight into the projection.
        watch(Api::<SlimNode>::all(client.clone()), move |e| {
            node_refs(nodes.feed(e))
        })
        .boxed(),
        watch(Api::<NodeNetfilterProfile>::all(client.clone()), move |e| {
            follow_heartbeat(&heartbeats, &e);
            node_refs(profiles.feed(e))
        })
        .boxed(),
        {
            let queue = queue.clone();
            let told = metrics.clone();
            // As protobuf (JSON where refused): the largest list by far.
            let events =
                crate::kube_protobuf::pods::all(client.clone(), pods_encoding, move |encoding| {
                    told.set_pods_encoding(encoding)
                });
            follow(events, move |e| {
                // Projected once, for the store and for the reports.
                let Some(e) = project_pod(e) else {
                    return Vec::new();
                };
                // A deleted writer pod is on no node any more: mark its
                // workload here (other pods are in no report).
                if let watcher::Event::Delete(f) = &e {
                    queue.mark(raw_workload(f));
                }
                node_refs(pods.feed_projected(e))
            })
            .boxed()
        },
    ]);
    let (mut replica_sets, mut jobs) = (parent_feeds.replica_sets, parent_feeds.jobs);
    let (rs_queue, job_queue) = (queue.clone(), queue.clone());
    // Metadata only (owner references): the reports' owner resolution.
    let parents_fed = futures::stream::select(
        watch(Api::<ReplicaSetMeta>::all(client.clone()), move |e| {
            rs_queue.mark(replica_sets.feed(e));
            Vec::<()>::new()
        }),
        watch(Api::<JobMeta>::all(client.clone()), move |e| {
            job_queue.mark(jobs.feed(e));
            Vec::<()>::new()
        }),
    )
    .for_each(|_| std::future::ready(()));
    let policy_changed = watch(Api::<NetfilterPolicy>::all(client.clone()), move |e| {
        policies.feed(e).then_some(()).into_iter().collect()
    });
    // An Api of PartialObjectMeta asks for metadata only.
    let relabelled = watch(
        Api::<crate::controller::cache::namespaces::NamespaceMeta>::all(client.clone()),
        move |e| namespaces.feed(e).then_some(()).into_iter().collect(),
    );
    let node_store = caches.nodes.clone();
    let first_rounds = caches.first_rounds.clone();
    // The first lists decode every watched object (100,000 pods at 5,000
    // x 20) on whichever threads polled them, and keep a few bytes of each:
    // give the arenas' freed pages back once, rather than have the
    // reconciles grow on top of them.
    let trim_after_lists = {
        let (caches, stop) = (caches.clone(), stop.clone());
        async move {
            tokio::select! {
                listed = caches.wait_listed(LIST_WAIT) => if listed.is_ok() {
                    crate::runtime::allocator::release_free_pages();
                },
                _ = stop => {}
            }
        }
    };
    // Every first list in: each node's whole plan (until then a node got
    // its labels only, see `labels_first`).
    let all_listed = {
        let caches = caches.clone();
        futures::stream::once(async move { caches.wait_listed(LIST_WAIT).await.ok() })
            .filter_map(std::future::ready)
    };
    let sweeper = sweep_every(
        client.clone(),
        caches.clone(),
        metrics.clone(),
        orphan_interval,
        stop.clone(),
    );
    let writer = ReportWriter {
        client: client.clone(),
        caches: caches.clone(),
        parents,
        images: images.clone(),
        queue: queue.clone(),
        metrics: metrics.clone(),
        caps: report_caps,
    };
    let ctx = Arc::new(Ctx {
        client,
        images,
        clock,
        metrics: metrics.clone(),
        recorder,
        caches,
        reports: queue,
    });
    // Every trigger comes from the feeds: the Controller's own stream is
    // idle, its store is the Node cache.
    let nodes = Controller::for_stream(futures::stream::pending(), node_store)
        .reconcile_on(per_node)
        // A policy, or a namespace's new labels (which may select it into
        // or out of a Taint policy), re-judge every node: rare admin
        // actions, and which nodes run a namespace's writers is not indexed.
        .reconcile_all_on(all_listed)
        .reconcile_all_on(policy_changed)
        .reconcile_all_on(relabelled)
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .graceful_shutdown_on(stop.clone())
        .run(reconcile, error_policy, ctx)
        .for_each(|res| {
            match res {
                Ok((obj, _)) => tracing::debug!(node = %obj.name, "reconciled"),
                // A deleted Node is scheduled once more and found gone.
                Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => {
                    metrics.forget_node(&obj.name);
                    first_rounds.forget(&obj.name);
                }
                Err(e) => tracing::debug!(error = %e, "controller"),
            }
            std::future::ready(())
        });
    let parents_stop = stop.clone();
    let parents_fed = async move {
        tokio::select! {
            _ = parents_fed => {}
            _ = parents_stop => {}
        }
    };
    futures::join!(
        nodes,
        writer.run(stop),
        parents_fed,
        sweeper,
        trim_after_lists
    );
}

/// Delete profiles whose Node is gone. Returns how many were deleted.
///
/// The caches name the candidates: profiles (read first, see [`orphans`])
/// whose node the Node store lacks. The two watches may lag each other (a
/// new node's profile can arrive before its Node), so each candidate's Node
/// is looked up by name before its profile goes. Nothing is listed whole:
/// listing every profile and every Node's metadata (with their
/// managedFields) held 80 MiB at 5,000 nodes on a cold start and 105 MiB on
/// a restart, the controller's peak (heaptrack, docs/benchmarks.md).
pub async fn sweep_orphans(
    client: &kube::Client,
    caches: &Caches,
    metrics: &Metrics,
) -> Result<usize, kube::Error> {
    let fail = |e: kube::Error| {
        metrics
            .reconcile_errors
            .get_or_create(&StageLabel {
                stage: Stage::orphans,
            })
            .inc();
        e
    };
    let profiles = caches.profiles.state();
    let names: HashSet<String> = caches
        .nodes
        .state()
        .iter()
        .filter_map(|n| n.metadata.name.clone())
        .collect();
    metrics.retain_nodes(&names);
    let mut candidates = orphans(profiles.iter().map(AsRef::as_ref), &names);
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    drop((profiles, names));
    let profile_api: Api<NodeNetfilterProfile> = Api::all(client.clone());
    let node_api: Api<Node> = Api::all(client.clone());
    let mut deleted = 0;
    for o in candidates {
        // Node names are DNS subdomains: nothing to escape in a selector.
        // Anything else names no Node, and would widen the selector.
        let dns = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.';
        if !o.node.bytes().all(dns) {
            tracing::debug!(profile = %o.name, "a profile naming no possible Node is left alone");
            continue;
        }
        let by_name = ListParams::default().fields(&format!("metadata.name={}", o.node));
        if !node_api
            .list_metadata(&by_name)
            .await
            .map_err(fail)?
            .items
            .is_empty()
        {
            tracing::debug!(profile = %o.name, node = %o.node, "the Node store lags: not an orphan");
            continue;
        }
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: o.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match profile_api.delete(&o.name, &dp).await {
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

/// Sweep for orphans once the caches are listed, then every `every`,
/// until `stop`.
async fn sweep_every(
    client: kube::Client,
    caches: Caches,
    metrics: Arc<Metrics>,
    every: Duration,
    stop: impl std::future::Future<Output = ()>,
) {
    let sweeps = async {
        loop {
            match caches.wait_listed(LIST_WAIT).await {
                Err(e) => tracing::warn!(error = %e, "orphan sweep skipped"),
                Ok(()) => match sweep_orphans(&client, &caches, &metrics).await {
                    Ok(n) if n > 0 => tracing::info!(deleted = n, "orphaned profiles deleted"),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "orphan sweep failed"),
                },
            }
            tokio::time::sleep(every).await;
        }
    };
    tokio::select! {
        _ = sweeps => {}
        _ = stop => {}
    }
}
