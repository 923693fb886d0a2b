//! What the controller keeps in memory, so that a reconcile reads nothing
//! from the API server: reflector stores of Nodes, NodeNetfilterProfiles,
//! Pods, NetfilterPolicies and Namespace metadata, an index from each node
//! to its pods, and the nodes nfguard taints (the brake's numerator).
//!
//! The write side is one feed per watched kind ([`Feeds`]): each applies a
//! watch event to its store and index and tells which nodes to reconcile
//! ([`predicates`] decide which changes matter). Feeds are plain functions
//! of events, so tests and the benchmark fill the caches by feeding objects
//! in, exactly as the watches do.
//!
//! Memory stays bounded in large clusters (5,000 nodes × 20 pods): only
//! pods that can write netfilter rules are kept (see [`keep_pod`]), as
//! their projections ([`PodFacts`], a few hundred bytes each), and the
//! other objects are slimmed to what the plan reads before they are stored.

use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::compat::evaluate::pod_spec_can_write;
use crate::controller::cache::first_rounds::FirstRounds;
use crate::controller::cache::in_flight::{InFlight, Written};
use crate::controller::cache::index::TaintedNodes;
use crate::controller::cache::namespaces::{Labels, NamespaceMeta, labels_in};
use crate::controller::cache::pod_store::PodStore;
use crate::controller::cache::predicates::{self, Changes, Touched};
use crate::controller::plan::profile_node;
use crate::judgement::PolicyBook;
use crate::projection::{PodFacts, SlimNode};
use crate::runtime::watch::{Listed, MarkListed, listed_flag};
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::watcher::Event;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::Duration;

/// The read side, shared by every reconcile. Cheap to clone.
#[derive(Clone)]
pub struct Caches {
    /// All Nodes (the Controller's own store): the brake's denominator.
    pub nodes: Store<SlimNode>,
    pub profiles: Store<NodeNetfilterProfile>,
    /// Pods that can write netfilter rules, projected, by node.
    pods: Arc<RwLock<PodStore>>,
    pub policies: Store<NetfilterPolicy>,
    /// All Namespaces' metadata: policies select namespaces by their labels.
    pub namespaces: Store<NamespaceMeta>,
    pub tainted: Arc<Mutex<TaintedNodes>>,
    /// The controller's writes the Node and profile watches have not shown yet.
    pub in_flight: Arc<InFlight>,
    /// The nodes whose first round since start is over (the policy
    /// reports wait for it).
    pub first_rounds: Arc<FirstRounds>,
    /// Bumped by every change of a policy or a namespace's labels.
    policy_generation: Arc<AtomicU64>,
    /// The policy book of a generation, shared by reconciles.
    policy_book: Arc<Mutex<Option<BookOf>>>,
    /// Each store's first list, in [`Caches::listed`]'s order (waited on by
    /// reconciles and the report writer at once: not the stores' own
    /// single-waiter readiness).
    first_lists: [Listed; STORES],
    /// When the caches were made: the first lists are due a fixed time
    /// after it ([`Caches::since_made`]).
    made: tokio::time::Instant,
}

/// The stores whose first lists reconciles wait for, in
/// [`Caches::listed`]'s order: a new store changes this count, and with it
/// every array below, or the build fails.
const STORES: usize = 5;
const NODES: usize = 0;
const PROFILES: usize = 1;
const PODS: usize = 2;
const POLICIES: usize = 3;
const NAMESPACES: usize = 4;
/// Every store's first list, as indexes into [`Caches::listed`].
const ALL_LISTS: [usize; STORES] = [NODES, PROFILES, PODS, POLICIES, NAMESPACES];
/// The Nodes' and the profiles' first lists (a node's labels read no more).
const LABEL_LISTS: [usize; 2] = [NODES, PROFILES];

/// A policy book and the generation it was built at.
type BookOf = (u64, Arc<PolicyBook>);

/// Stores whose first list never arrived, named as RBAC names them.
#[derive(Debug, thiserror::Error)]
#[error(
    "{kinds} not listed within {wait:?}; does the controller's ClusterRole allow list and watch on {resources}?"
)]
pub struct Unlisted {
    /// e.g. "Pods, Namespaces".
    pub kinds: String,
    /// e.g. "pods, namespaces".
    pub resources: String,
    pub wait: Duration,
}

impl Caches {
    /// (kind, resource, listed) for every store.
    fn listed(&self) -> [(&'static str, &'static str, bool); STORES] {
        const NAMES: [(&str, &str); STORES] = [
            ("Nodes", "nodes"),
            ("NodeNetfilterProfiles", "nodenetfilterprofiles"),
            ("Pods", "pods"),
            ("NetfilterPolicies", "netfilterpolicies"),
            ("Namespaces", "namespaces"),
        ];
        std::array::from_fn(|i| (NAMES[i].0, NAMES[i].1, self.first_lists[i].is_listed()))
    }

    /// Wait up to `wait` for every store's first list. Judging before it
    /// would e.g. match `namespaceSelector`s against no labels, or see no
    /// writer on a node that runs some, and lift taints the policies ask for.
    pub async fn wait_listed(&self, wait: Duration) -> Result<(), Unlisted> {
        self.wait_lists(&ALL_LISTS, wait).await
    }

    /// Wait up to `wait` for the first lists a node's labels read: the
    /// Nodes and the profiles (the labels are the profile's facts).
    pub async fn wait_label_lists(&self, wait: Duration) -> Result<(), Unlisted> {
        self.wait_lists(&LABEL_LISTS, wait).await
    }

    /// How long ago the caches were made (the watches started then).
    pub fn since_made(&self) -> Duration {
        self.made.elapsed()
    }

    /// Whether every store's first list is in.
    pub fn all_listed(&self) -> bool {
        self.listed().iter().all(|(_, _, listed)| *listed)
    }

    /// Wait up to `wait` for the first lists of the stores at `which`
    /// (indexes into [`Caches::listed`]).
    async fn wait_lists(&self, which: &[usize], wait: Duration) -> Result<(), Unlisted> {
        let listed = self.listed();
        if which.iter().all(|&i| listed[i].2) {
            return Ok(());
        }
        let all = async {
            // Errors (a dropped writer) show as unlisted below.
            futures::future::join_all(which.iter().map(|&i| self.first_lists[i].wait())).await;
        };
        let _ = tokio::time::timeout(wait, all).await;
        let listed = self.listed();
        let missing: Vec<_> = which
            .iter()
            .map(|&i| listed[i])
            .filter(|(_, _, listed)| !listed)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let join = |f: fn(&(&'static str, &'static str, bool)) -> &'static str| {
            missing.iter().map(f).collect::<Vec<_>>().join(", ")
        };
        Err(Unlisted {
            kinds: join(|m| m.0),
            resources: join(|m| m.1),
            wait,
        })
    }

    /// The profile describing `node` (the reporter names it after the node).
    pub fn profile(&self, node: &str) -> Option<Arc<NodeNetfilterProfile>> {
        self.profiles.get(&ObjectRef::new(node))
    }

    /// The pods on `node` the plan reads, by namespace and name.
    pub fn pods_on(&self, node: &str) -> Vec<Arc<PodFacts>> {
        read(&self.pods).on(node)
    }

    /// Every pod kept (the writers), in no order.
    pub fn pods(&self) -> Vec<Arc<PodFacts>> {
        read(&self.pods).all()
    }

    /// Every policy, by name (as a LIST returns them).
    pub fn policies(&self) -> Vec<Arc<NetfilterPolicy>> {
        let mut all = self.policies.state();
        all.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        all
    }

    /// Every policy with the namespaces' labels, shared by reconciles until
    /// a policy or a namespace's labels change: each namespace's effective
    /// policy is computed once, not once per reconcile.
    pub fn policy_book(&self) -> Arc<PolicyBook> {
        // Read before building: a change meanwhile leaves this book stale
        // under an old generation, so the next call rebuilds.
        let generation = self.policy_generation.load(Ordering::Acquire);
        let mut cached = self.policy_book.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((g, book)) = cached.as_ref()
            && *g == generation
        {
            return book.clone();
        }
        let namespaces = self.namespaces.clone();
        let book = Arc::new(
            PolicyBook::shared(self.policies())
                .with_namespace_labels(Arc::new(move |ns: &str| labels_in(&namespaces, ns))),
        );
        *cached = Some((generation, book.clone()));
        book
    }

    /// The labels of namespace `ns`; None when it is not known.
    pub fn namespace_labels(&self, ns: &str) -> Option<Labels> {
        labels_in(&self.namespaces, ns)
    }

    pub fn tainted(&self) -> MutexGuard<'_, TaintedNodes> {
        self.tainted.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

/// Whether the controller keeps a pod: it can write netfilter rules (a
/// writer, or an `action: Taint` subject); `plan_node` ignores every other
/// pod. Dropping the rest at the watch is safe because a pod never turns
/// from writer into non-writer: containers' securityContext is immutable
/// and ephemeral containers can only be added. A pod that becomes a writer
/// (an ephemeral container added) is kept from that event on. Tested on
/// the Pod itself, before projecting it: most pods are not kept.
pub fn keep_pod(pod: &Pod) -> bool {
    pod.spec.as_ref().is_some_and(pod_spec_can_write)
}

/// Any object without managedFields and annotations (never read).
fn slim_meta<K: Resource>(mut o: K) -> K {
    let m = o.meta_mut();
    m.managed_fields = None;
    m.annotations = None;
    o
}

/// One watched kind's store and change tracker.
struct Feed<K: Resource<DynamicType = ()> + Clone + 'static, T> {
    writer: Writer<K>,
    listed: MarkListed,
    changes: Changes<K, T>,
    /// The object as stored; None: not kept.
    prepare: fn(K) -> Option<K>,
}

impl<K, T> Feed<K, T>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    T: Clone + PartialEq,
{
    fn new(
        (writer, listed): (Writer<K>, MarkListed),
        fingerprint: fn(&K) -> u64,
        tag: fn(&K) -> T,
    ) -> Self {
        Feed {
            writer,
            listed,
            changes: Changes::new(fingerprint, tag),
            prepare: Some,
        }
    }

    /// Prepare the event's object, apply the event to the store, and tell
    /// which objects changed. None: the event is about an object not kept.
    ///
    /// A feed that keeps an index beside its store takes the index's lock
    /// before calling this and updates it before letting go: `InitDone`
    /// marks the store listed, which wakes a reconcile waiting in
    /// [`Caches::wait_listed`] on another thread, and that reconcile must
    /// find the index replaced, not still empty (scripts/bench-cluster.sh
    /// --check caught a node planned without its writers after every
    /// restart; the tainted-node count had the same window).
    fn apply(&mut self, event: Event<K>) -> Option<(Event<K>, Vec<Touched<T>>)> {
        let event = match event {
            Event::Apply(o) => Event::Apply((self.prepare)(o)?),
            Event::InitApply(o) => Event::InitApply((self.prepare)(o)?),
            // Removing an object never stored removes nothing.
            other => other,
        };
        self.writer.apply_watcher_event(&event);
        self.listed.observe(&event);
        let touched = self.changes.observe(&event);
        Some((event, touched))
    }
}

/// The nodes named by `touched` tags (before and after), deduplicated.
fn nodes_of(touched: Vec<Touched<Option<String>>>) -> Vec<String> {
    let mut out: Vec<String> = touched
        .into_iter()
        .flat_map(|t| [t.before.flatten(), t.after.flatten()])
        .flatten()
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Tell `in_flight` which version of a node's object of `kind` the store
/// now holds; the node, if a reconcile waited for exactly that.
fn seen<K: Resource>(in_flight: &InFlight, kind: Written, event: &Event<K>) -> Option<String> {
    let (object, version) = match event {
        Event::Apply(o) | Event::InitApply(o) => (o, o.meta().resource_version.as_deref()),
        Event::Delete(o) => (o, None),
        Event::Init | Event::InitDone => return None,
    };
    let name = object.meta().name.as_deref()?;
    in_flight
        .observed(name, kind, version)
        .then(|| name.to_string())
}

/// `nodes` and `node`, once.
fn with(mut nodes: Vec<String>, node: Option<String>) -> Vec<String> {
    if let Some(n) = node
        && !nodes.contains(&n)
    {
        nodes.push(n);
    }
    nodes
}

/// Nodes: the store and the tainted-node count.
pub struct NodeFeed {
    feed: Feed<SlimNode, String>,
    tainted: Arc<Mutex<TaintedNodes>>,
    in_flight: Arc<InFlight>,
}

impl NodeFeed {
    /// Apply one event; the nodes to reconcile (changed labels or spec,
    /// deleted: then found gone and forgotten).
    pub fn feed(&mut self, event: Event<SlimNode>) -> Vec<String> {
        // Locked first, as every index beside a store (see `Feed::apply`).
        let mut tainted = self.tainted.lock().unwrap_or_else(|e| e.into_inner());
        let Some((event, touched)) = self.feed.apply(event) else {
            return Vec::new();
        };
        tainted.observe(&event);
        let mut out: Vec<String> = touched
            .into_iter()
            .flat_map(|t| t.after.or(t.before))
            .collect();
        out.dedup();
        with(out, seen(&self.in_flight, Written::Node, &event))
    }
}

/// NodeNetfilterProfiles.
pub struct ProfileFeed {
    feed: Feed<NodeNetfilterProfile, Option<String>>,
    in_flight: Arc<InFlight>,
}

impl ProfileFeed {
    /// Apply one event; the nodes whose profile changed (heartbeats while
    /// Fresh aside: [`predicates::profile`]).
    pub fn feed(&mut self, event: Event<NodeNetfilterProfile>) -> Vec<String> {
        let Some((event, touched)) = self.feed.apply(event) else {
            return Vec::new();
        };
        with(
            nodes_of(touched),
            seen(&self.in_flight, Written::Profile, &event),
        )
    }
}

/// Pods: the writer pods' projections and their node index.
pub struct PodFeed {
    store: Arc<RwLock<PodStore>>,
    listed: MarkListed,
}

/// The event's pod as the controller keeps it: projected once, or None
/// for a pod that is no writer (removing a pod never kept removes nothing:
/// most deletions, as a pod's writer test holds for its whole life).
pub fn project_pod(event: Event<Pod>) -> Option<Event<PodFacts>> {
    let kept = |p: Pod| keep_pod(&p).then(|| PodFacts::of(&p));
    Some(match event {
        Event::Apply(p) => Event::Apply(kept(p)?),
        Event::InitApply(p) => Event::InitApply(kept(p)?),
        Event::Delete(p) => Event::Delete(kept(p)?),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    })
}

impl PodFeed {
    /// Project the event's pod, apply it; the nodes whose kept pods changed
    /// in what is read of them (status churn aside: see [`PodStore`]).
    pub fn feed(&mut self, event: Event<Pod>) -> Vec<String> {
        project_pod(event).map_or_else(Vec::new, |e| self.feed_projected(e))
    }

    /// [`Self::feed`] for an event already projected ([`project_pod`]).
    pub fn feed_projected(&mut self, event: Event<PodFacts>) -> Vec<String> {
        let done = matches!(event, Event::InitDone);
        let nodes = self
            .store
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .apply(event);
        // After the store holds the list: `listed` wakes reconciles.
        if done {
            self.listed.observe(&Event::<PodFacts>::InitDone);
        }
        nodes
    }
}

/// NetfilterPolicies.
pub struct PolicyFeed {
    feed: Feed<NetfilterPolicy, ()>,
    generation: Arc<AtomicU64>,
}

impl PolicyFeed {
    /// Apply one event; whether every node is to be re-planned (a policy's
    /// spec changed, or one came or went; its status does not count).
    pub fn feed(&mut self, event: Event<NetfilterPolicy>) -> bool {
        let changed = self
            .feed
            .apply(event)
            .is_some_and(|(_, touched)| !touched.is_empty());
        if changed {
            self.generation.fetch_add(1, Ordering::Release);
        }
        changed
    }
}

/// Namespace metadata.
pub struct NamespaceFeed {
    feed: Feed<NamespaceMeta, ()>,
    generation: Arc<AtomicU64>,
}

impl NamespaceFeed {
    /// Apply one event; whether a namespace known before changed labels (it
    /// may select it into or out of a Taint policy: every node is re-judged,
    /// as for a policy change). A new namespace runs no pods yet (their own
    /// events bring their nodes) and a deleted one takes its pods along.
    pub fn feed(&mut self, event: Event<NamespaceMeta>) -> bool {
        let Some((_, touched)) = self.feed.apply(event) else {
            return false;
        };
        if !touched.is_empty() {
            // Any namespace with new labels (new ones too): policies select anew.
            self.generation.fetch_add(1, Ordering::Release);
        }
        touched
            .iter()
            .any(|t| t.before.is_some() && t.after.is_some())
    }
}

/// The write side: one feed per watched kind.
pub struct Feeds {
    pub nodes: NodeFeed,
    pub profiles: ProfileFeed,
    pub pods: PodFeed,
    pub policies: PolicyFeed,
    pub namespaces: NamespaceFeed,
}

/// Empty caches and the feeds that fill them.
pub fn caches() -> (Caches, Feeds) {
    let (nodes, node_writer) = reflector::store::<SlimNode>();
    let (profiles, profile_writer) = reflector::store::<NodeNetfilterProfile>();
    let (policies, policy_writer) = reflector::store::<NetfilterPolicy>();
    let (namespaces, namespace_writer) = reflector::store::<NamespaceMeta>();
    let pods = Arc::new(RwLock::new(PodStore::default()));
    let tainted = Arc::new(Mutex::new(TaintedNodes::default()));
    let policy_generation = Arc::new(AtomicU64::new(0));
    let in_flight = Arc::new(InFlight::default());
    let (mark_nodes, nodes_listed) = listed_flag();
    let (mark_profiles, profiles_listed) = listed_flag();
    let (mark_pods, pods_listed) = listed_flag();
    let (mark_policies, policies_listed) = listed_flag();
    let (mark_namespaces, namespaces_listed) = listed_flag();
    let node_name = |n: &SlimNode| n.name().to_string();
    let profile_tag = |p: &NodeNetfilterProfile| profile_node(p).map(str::to_string);
    let feeds = Feeds {
        nodes: NodeFeed {
            // Projected as decoded (`SlimNode`'s own Deserialize).
            feed: Feed::new((node_writer, mark_nodes), predicates::node, node_name),
            tainted: tainted.clone(),
            in_flight: in_flight.clone(),
        },
        profiles: ProfileFeed {
            feed: Feed {
                prepare: |p| Some(slim_meta(p)),
                ..Feed::new(
                    (profile_writer, mark_profiles),
                    predicates::profile,
                    profile_tag,
                )
            },
            in_flight: in_flight.clone(),
        },
        pods: PodFeed {
            store: pods.clone(),
            listed: mark_pods,
        },
        policies: PolicyFeed {
            feed: Feed {
                prepare: |p| Some(slim_meta(p)),
                ..Feed::new((policy_writer, mark_policies), predicates::policy, |_| ())
            },
            generation: policy_generation.clone(),
        },
        namespaces: NamespaceFeed {
            feed: Feed {
                prepare: |n| Some(slim_meta(n)),
                ..Feed::new(
                    (namespace_writer, mark_namespaces),
                    predicates::namespace_labels::<NamespaceMeta>,
                    |_| (),
                )
            },
            generation: policy_generation.clone(),
        },
    };
    let caches = Caches {
        nodes,
        profiles,
        pods,
        policies,
        namespaces,
        tainted,
        in_flight,
        first_rounds: Arc::default(),
        policy_generation,
        policy_book: Arc::default(),
        first_lists: [
            nodes_listed,
            profiles_listed,
            pods_listed,
            policies_listed,
            namespaces_listed,
        ],
        made: tokio::time::Instant::now(),
    };
    (caches, feeds)
}

/// The events of a watch's first list holding `objects` (for tests and
/// benchmarks feeding the caches as a watch does).
pub fn listed<K>(objects: impl IntoIterator<Item = K>) -> impl Iterator<Item = Event<K>> {
    std::iter::once(Event::Init)
        .chain(objects.into_iter().map(Event::InitApply))
        .chain(std::iter::once(Event::InitDone))
}

/// One first list of every watched kind.
#[derive(Clone, Debug, Default)]
pub struct FirstLists {
    /// Whole Nodes, projected as the watch's decoder does.
    pub nodes: Vec<k8s_openapi::api::core::v1::Node>,
    pub profiles: Vec<NodeNetfilterProfile>,
    pub pods: Vec<Pod>,
    pub policies: Vec<NetfilterPolicy>,
    pub namespaces: Vec<NamespaceMeta>,
}

impl Feeds {
    /// Feed every kind's first list, as the watches do at start (tests and
    /// benchmarks fill the caches this way).
    pub fn list(&mut self, lists: FirstLists) {
        for e in listed(lists.nodes.into_iter().map(SlimNode::from)) {
            self.nodes.feed(e);
        }
        for e in listed(lists.profiles) {
            self.profiles.feed(e);
        }
        for e in listed(lists.pods) {
            self.pods.feed(e);
        }
        for e in listed(lists.policies) {
            self.policies.feed(e);
        }
        for e in listed(lists.namespaces) {
            self.namespaces.feed(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::cache::namespaces::tests::ns;
    use serde_json::{Value, json};

    fn profile(probe: &str, fresh: Option<&str>) -> NodeNetfilterProfile {
        let conditions = fresh.map(|s| {
            json!([{"type": "Fresh", "status": s, "reason": "R", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": probe,
                         "managedFields": [{"manager": "nfguard-reporter"}]},
            "spec": {"nodeName": "n1"},
            "status": {"lastProbeTime": probe, "probeIntervalSeconds": 60,
                       "activeBackend": "nft", "conditions": conditions}
        }))
        .unwrap()
    }

    #[test]
    fn a_heartbeat_reconciles_only_a_node_that_is_not_fresh() {
        let (caches, mut feeds) = caches();
        let mut feed = |p| feeds.profiles.feed(p);
        let first: Vec<_> = listed([profile("2026-01-01T00:00:00Z", Some("True"))])
            .flat_map(&mut feed)
            .collect();
        assert_eq!(first, ["n1"], "a new profile");
        // Heartbeats while Fresh: stored, but no reconcile.
        let t1 = "2026-01-01T00:01:00Z";
        assert!(feed(Event::Apply(profile(t1, Some("True")))).is_empty());
        let stored = caches.profile("n1").unwrap();
        let s = stored.status.as_ref().unwrap();
        assert_eq!(s.last_probe_time.as_deref(), Some(t1));
        assert!(stored.metadata.managed_fields.is_none(), "slimmed");
        // The controller marks it stale (its requeue found the heartbeat
        // late); the next heartbeat makes it Fresh again, so it reconciles.
        assert_eq!(feed(Event::Apply(profile(t1, Some("Unknown")))), ["n1"]);
        let t2 = "2026-01-01T00:09:00Z";
        assert_eq!(feed(Event::Apply(profile(t2, Some("Unknown")))), ["n1"]);
        assert_eq!(feed(Event::Delete(profile(t2, Some("Unknown")))), ["n1"]);
        assert!(caches.profile("n1").is_none());
    }

    fn pod(name: &str, node: &str, caps: &[&str], phase: &str, extra: Value) -> Pod {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "kube-system", "uid": format!("u-{name}"),
                         "labels": {"app": name}, "managedFields": [{"manager": "kubelet"}],
                         "annotations": {"nfguard.io/exempt": "audited", "big": "x".repeat(100)}},
            "spec": {"nodeName": node, "hostNetwork": true, "serviceAccountName": "sa",
                     "containers": [{"name": "c", "image": format!("{name}:1"),
                                     "env": [{"name": "A", "value": "1"}],
                                     "securityContext": {"capabilities": {"add": caps}}}]},
            "status": {"phase": phase, "podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        });
        json_merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn json_merge(into: &mut Value, from: Value) {
        match (into, from) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    json_merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (slot, v) => *slot = v,
        }
    }

    #[test]
    fn only_writer_pods_are_kept_projected_and_status_churn_does_not_reconcile() {
        let (caches, mut feeds) = caches();
        let proxy = pod("proxy", "n1", &["NET_ADMIN"], "Running", json!({}));
        let app = pod("app", "n1", &[], "Running", json!({}));
        let triggered: Vec<_> = listed([proxy.clone(), app.clone()])
            .flat_map(|e| feeds.pods.feed(e))
            .collect();
        assert_eq!(triggered, ["n1"]);
        let on_n1 = caches.pods_on("n1");
        assert_eq!(on_n1.len(), 1, "the pod that cannot write is not kept");
        assert_eq!(*on_n1[0], PodFacts::of(&proxy), "kept as its projection");
        // What the image's credentials come from (see `Bounded::resolve_for_pods`).
        assert_eq!(on_n1[0].pull_secrets.service_account(), "sa");

        let churn = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]},
                           "metadata": {"resourceVersion": "7", "labels": {"app": "x"}}});
        let churned = pod("proxy", "n1", &["NET_ADMIN"], "Running", churn);
        assert!(feeds.pods.feed(Event::Apply(churned)).is_empty());
        assert!(feeds.pods.feed(Event::Apply(app.clone())).is_empty());
        let image = json!({"spec": {"containers": [{"name": "c", "image": "proxy:2",
                            "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}});
        let upgraded = pod("proxy", "n1", &["NET_ADMIN"], "Running", image);
        assert_eq!(feeds.pods.feed(Event::Apply(upgraded.clone())), ["n1"]);
        let done = pod("proxy", "n1", &["NET_ADMIN"], "Succeeded", json!({}));
        assert_eq!(feeds.pods.feed(Event::Apply(done)), ["n1"]);
        assert_eq!(feeds.pods.feed(Event::Delete(upgraded)), ["n1"]);
        assert!(feeds.pods.feed(Event::Delete(app)).is_empty());
        assert!(caches.pods_on("n1").is_empty());
        assert!(caches.pods().is_empty());
    }

    #[test]
    fn a_writer_pod_is_projected_once_for_the_store_and_the_reports() {
        let (caches, mut feeds) = caches();
        let proxy = pod("proxy", "n1", &["NET_ADMIN"], "Running", json!({}));
        let app = pod("app", "n1", &[], "Running", json!({}));
        assert!(
            project_pod(Event::Delete(app)).is_none(),
            "no writer: nothing to do"
        );
        let _ = feeds.pods.feed(Event::Apply(proxy.clone()));
        // The watch's path: one projection, read by the reports' queue and
        // handed to the store as it is.
        let Some(Event::Delete(facts)) = project_pod(Event::Delete(proxy.clone())) else {
            panic!("a deleted writer pod projects to a Delete");
        };
        assert_eq!(facts, PodFacts::of(&proxy));
        assert_eq!(feeds.pods.feed_projected(Event::Delete(facts)), ["n1"]);
        assert!(caches.pods_on("n1").is_empty());
    }

    #[test]
    fn a_pod_that_gains_a_privileged_ephemeral_container_is_kept_from_then_on() {
        let (caches, mut feeds) = caches();
        let app = pod("app", "n2", &[], "Running", json!({}));
        assert!(feeds.pods.feed(Event::Apply(app)).is_empty());
        let debug = json!({"spec": {"ephemeralContainers": [{"name": "dbg", "image": "busybox",
                           "securityContext": {"privileged": true}}]}});
        let debugged = pod("app", "n2", &[], "Running", debug);
        assert_eq!(feeds.pods.feed(Event::Apply(debugged)), ["n2"]);
        assert_eq!(caches.pods_on("n2").len(), 1);
    }

    fn node(labels: Value, taints: Value, ready: &str) -> SlimNode {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": labels, "resourceVersion": ready,
                         "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready}],
                       "images": [{"names": ["reg.test/big:1"], "sizeBytes": 1}]}
        }))
        .unwrap()
    }

    #[test]
    fn node_status_updates_do_not_reconcile_labels_and_taints_do() {
        let (caches, mut feeds) = caches();
        let degraded =
            json!([{"key": "nfguard.io/netfilter-degraded", "value": "X", "effect": "NoSchedule"}]);
        let triggered: Vec<_> = listed([node(json!({}), degraded.clone(), "True")])
            .flat_map(|e| feeds.nodes.feed(e))
            .collect();
        assert_eq!(triggered, ["n1"]);
        assert_eq!(caches.tainted().tainted(), 1);
        let stored = caches.nodes.get(&ObjectRef::new("n1")).unwrap();
        assert!(stored.metadata.annotations.is_none());
        assert_eq!(
            stored.metadata.resource_version.as_deref(),
            Some("True"),
            "the taint patch's precondition"
        );
        // A kubelet heartbeat: stored (new resourceVersion), no reconcile.
        let heartbeat = node(json!({}), degraded.clone(), "False");
        assert!(feeds.nodes.feed(Event::Apply(heartbeat)).is_empty());
        let stored = caches.nodes.get(&ObjectRef::new("n1")).unwrap();
        assert_eq!(stored.metadata.resource_version.as_deref(), Some("False"));
        let relabelled = node(
            json!({"kubernetes.io/arch": "arm64"}),
            degraded.clone(),
            "False",
        );
        assert_eq!(feeds.nodes.feed(Event::Apply(relabelled)), ["n1"]);
        // A label the plan does not read: not kept, and no reconcile.
        let zoned = json!({"kubernetes.io/arch": "arm64", "topology.kubernetes.io/zone": "z1"});
        assert!(
            feeds
                .nodes
                .feed(Event::Apply(node(zoned, degraded, "False")))
                .is_empty()
        );
        let stored = caches.nodes.get(&ObjectRef::new("n1")).unwrap();
        let labels = stored.labels();
        assert_eq!(labels.keys().collect::<Vec<_>>(), ["kubernetes.io/arch"]);
        let untainted = node(json!({"kubernetes.io/arch": "arm64"}), json!([]), "False");
        assert_eq!(feeds.nodes.feed(Event::Apply(untainted.clone())), ["n1"]);
        assert_eq!(caches.tainted().tainted(), 0);
        assert_eq!(feeds.nodes.feed(Event::Delete(untainted)), ["n1"]);
        assert_eq!(caches.tainted().total(), 0);
    }

    #[test]
    fn only_a_policys_spec_re_judges_every_node() {
        let (_caches, mut feeds) = caches();
        let policy = |action: &str, status: Value| -> NetfilterPolicy {
            serde_json::from_value(json!({
                "apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
                "metadata": {"name": "p"}, "spec": {"action": action}, "status": status
            }))
            .unwrap()
        };
        assert!(listed([policy("Warn", json!({}))]).any(|e| feeds.policies.feed(e)));
        let valid = json!({"type": "Valid", "status": "True", "reason": "Valid", "message": "",
                           "lastTransitionTime": "2026-01-01T00:00:00Z"});
        let with_status = policy("Warn", json!({"conditions": [valid]}));
        assert!(!feeds.policies.feed(Event::Apply(with_status)));
        assert!(
            feeds
                .policies
                .feed(Event::Apply(policy("Taint", json!({}))))
        );
        assert!(
            feeds
                .policies
                .feed(Event::Delete(policy("Taint", json!({}))))
        );
    }

    #[test]
    fn only_a_known_namespace_changing_labels_is_a_change() {
        let (caches, mut feeds) = caches();
        let mut c = |e| feeds.namespaces.feed(e);
        let initial = [
            Event::Init,
            Event::InitApply(ns("net", &[("team", "net")])),
            Event::InitDone,
        ];
        assert!(initial.into_iter().all(|e| !c(e)), "first list: no change");
        assert!(!c(Event::Apply(ns("new", &[]))), "a new namespace");
        let mut other_meta = ns("net", &[("team", "net")]);
        other_meta.metadata.resource_version = Some("9".into());
        assert!(!c(Event::Apply(other_meta)), "same labels");
        assert!(c(Event::Apply(ns("net", &[]))), "label removed");
        assert!(c(Event::Apply(ns("net", &[("team", "x")]))));
        assert!(!c(Event::Delete(ns("net", &[]))));
        assert!(!c(Event::Apply(ns("net", &[]))), "re-created");
        assert_eq!(caches.namespace_labels("new"), Some(Labels::new()));
    }

    #[test]
    fn a_relist_reports_a_namespace_relabelled_during_the_gap_once_at_its_end() {
        let (_caches, mut feeds) = caches();
        let mut c = |e| feeds.namespaces.feed(e);
        c(Event::Apply(ns("net", &[("team", "net")])));
        assert!(!c(Event::Init));
        assert!(!c(Event::InitApply(ns("net", &[]))));
        assert!(c(Event::InitDone));
        // An unchanged re-list is no change.
        c(Event::Init);
        c(Event::InitApply(ns("net", &[])));
        assert!(!c(Event::InitDone));
    }

    #[test]
    fn the_policy_book_is_shared_until_a_policy_or_namespace_changes() {
        let (caches, mut feeds) = caches();
        let taint_team_net: NetfilterPolicy = serde_json::from_value(json!({
            "apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
            "metadata": {"name": "p"},
            "spec": {"action": "Taint", "namespaceSelector": {"matchLabels": {"team": "net"}}}
        }))
        .unwrap();
        listed([taint_team_net.clone()]).for_each(|e| {
            feeds.policies.feed(e);
        });
        listed([ns("payments", &[("team", "web")])]).for_each(|e| {
            feeds.namespaces.feed(e);
        });
        let taints = |book: &PolicyBook| {
            book.for_namespace("payments").action == crate::api::PolicyAction::Taint
        };
        let first = caches.policy_book();
        assert!(Arc::ptr_eq(&first, &caches.policy_book()), "shared");
        assert!(!taints(&first));
        // Relabelled: a new book sees the new labels.
        feeds
            .namespaces
            .feed(Event::Apply(ns("payments", &[("team", "net")])));
        let relabelled = caches.policy_book();
        assert!(!Arc::ptr_eq(&first, &relabelled));
        assert!(taints(&relabelled));
        // A new namespace, or a policy's new spec: a new book too.
        feeds.namespaces.feed(Event::Apply(ns("new", &[])));
        let with_new = caches.policy_book();
        assert!(!Arc::ptr_eq(&relabelled, &with_new));
        let mut warn = taint_team_net;
        warn.spec.action = crate::api::PolicyAction::Warn;
        feeds.policies.feed(Event::Apply(warn));
        let rewritten = caches.policy_book();
        assert!(!Arc::ptr_eq(&with_new, &rewritten));
        assert!(!taints(&rewritten));
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_the_first_lists_names_the_kinds_never_listed() {
        let (caches, mut feeds) = caches();
        listed(Vec::<SlimNode>::new()).for_each(|e| {
            feeds.nodes.feed(e);
        });
        listed(Vec::<NodeNetfilterProfile>::new()).for_each(|e| {
            feeds.profiles.feed(e);
        });
        listed(Vec::<NetfilterPolicy>::new()).for_each(|e| {
            feeds.policies.feed(e);
        });
        let err = caches
            .wait_listed(Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(
            (err.kinds.as_str(), err.resources.as_str()),
            ("Pods, Namespaces", "pods, namespaces")
        );
        assert!(
            err.to_string().ends_with(
                "does the controller's ClusterRole allow list and watch on pods, namespaces?"
            ),
            "{err}"
        );
        listed(Vec::<Pod>::new()).for_each(|e| {
            feeds.pods.feed(e);
        });
        listed(Vec::<NamespaceMeta>::new()).for_each(|e| {
            feeds.namespaces.feed(e);
        });
        caches.wait_listed(Duration::from_secs(10)).await.unwrap();
    }

    /// A reconcile and the report writer wait for the first lists at once,
    /// and something checks them meanwhile: every waiter wakes when they
    /// arrive. (kube's store readiness wakes only its last poller: the
    /// others slept to their 10 s timeout on every cold start.)
    #[tokio::test(start_paused = true)]
    async fn every_waiter_wakes_when_the_first_lists_arrive() {
        let (caches, mut feeds) = caches();
        let started = tokio::time::Instant::now();
        let wait = Duration::from_secs(10);
        let first = tokio::spawn({
            let c = caches.clone();
            async move { c.wait_listed(wait).await.map(|_| started.elapsed()) }
        });
        let second = tokio::spawn({
            let c = caches.clone();
            async move { c.wait_listed(wait).await.map(|_| started.elapsed()) }
        });
        // Both waiting, then a check (the writer's `listed()`) in between.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(caches.listed().iter().all(|(_, _, listed)| !listed));
        feeds.list(FirstLists::default());
        let took = [
            first.await.unwrap().unwrap(),
            second.await.unwrap().unwrap(),
        ];
        assert_eq!(
            took,
            [Duration::from_secs(1); 2],
            "each waiter woke at once"
        );
    }
}
