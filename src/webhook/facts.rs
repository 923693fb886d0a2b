//! Where the webhook's facts come from: kube-runtime reflectors over
//! NodeNetfilterProfiles, Nodes, NetfilterPolicies and Namespaces (cluster
//! mode), or files loaded once with `nfguard check`'s loaders (file mode).
//!
//! In cluster mode each facts generation's snapshot and node index are
//! built in the background ([`build_snapshots`]) and published whole: a
//! review takes the newest published one and never waits for a rebuild (a
//! review during one is judged with the facts of a moment before, and its
//! answer is cached under that generation, not the new one).

use super::fingerprint::Fingerprint;
use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::check::load;
use crate::compat::evaluate::NodeIndex;
use crate::facts::Platform;
use crate::judgement::PolicyBook;
use crate::runtime::watch::{Changes, is_listed};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One consistent-enough view for one request (Arcs, no deep clones).
#[derive(Default)]
pub struct Snapshot {
    pub profiles: Vec<Arc<NodeNetfilterProfile>>,
    pub nodes: Vec<Arc<Node>>,
    /// The policies and, in cluster mode, the namespaces' labels (in file
    /// mode unknown, as `nfguard check` without a cluster); each
    /// namespace's effective policy is built once per snapshot.
    pub policies: PolicyBook,
    /// Per-node facts every judgement of this snapshot shares, built on
    /// first use (the judge knows the default platform).
    pub index: std::sync::OnceLock<NodeIndex>,
}

impl Snapshot {
    pub fn new(
        profiles: Vec<Arc<NodeNetfilterProfile>>,
        nodes: Vec<Arc<Node>>,
        policies: PolicyBook,
    ) -> Self {
        Snapshot {
            profiles,
            nodes,
            policies,
            index: Default::default(),
        }
    }
}

/// A snapshot and the facts generation it was taken at.
pub type GenerationSnapshot = (u64, Arc<Snapshot>);

/// Source of facts.
pub enum Facts {
    /// Loaded once from files (`--profiles`, `--nodes`, `--policy`).
    Static(Arc<Snapshot>),
    Cluster(ClusterStores),
}

#[derive(Clone)]
pub struct ClusterStores {
    pub profiles: reflector::Store<NodeNetfilterProfile>,
    pub nodes: Option<reflector::Store<Node>>,
    pub policies: Option<reflector::Store<NetfilterPolicy>>,
    pub namespaces: reflector::Store<Namespace>,
    /// File overrides (e.g. `--policy` given together with a cluster).
    pub static_nodes: Vec<Arc<Node>>,
    pub static_policies: Vec<Arc<NetfilterPolicy>>,
    /// Bumped on every watch event of any store (decisions depend on them).
    pub generation: Arc<AtomicU64>,
    /// Told after every bump and every first list: [`build_snapshots`]'s cue.
    pub changed: Arc<tokio::sync::Notify>,
    /// The newest snapshot [`build_snapshots`] finished (its index built)
    /// and the generation it was copied at: requests share it. The lock is
    /// held only to clone or swap the Arc, never while building.
    pub published: Arc<Mutex<Option<GenerationSnapshot>>>,
}

impl Facts {
    /// Load the files exactly as `nfguard check` does.
    pub fn from_files(
        profiles: &Path,
        nodes: Option<&Path>,
        policy: Option<&Path>,
    ) -> Result<Self, load::LoadError> {
        let profiles = load::load_profiles(profiles)?;
        let nodes = match nodes {
            Some(p) => load::load_nodes(p)?,
            None => Vec::new(),
        };
        let policies = match policy {
            Some(p) => load::load_policies(p)?,
            None => Vec::new(),
        };
        Ok(Facts::Static(Arc::new(Snapshot::new(
            profiles.into_iter().map(Arc::new).collect(),
            nodes.into_iter().map(Arc::new).collect(),
            PolicyBook::new(policies),
        ))))
    }

    /// The facts to judge with and their generation (0 for files): in
    /// cluster mode the newest published snapshot; before the first one
    /// (stores not listed yet) a copy of the stores made for this caller.
    pub fn snapshot(&self) -> GenerationSnapshot {
        match self {
            Facts::Static(s) => (0, s.clone()),
            Facts::Cluster(c) => {
                if let Some(published) = c.published().as_ref() {
                    return published.clone();
                }
                let generation = c.generation.load(Ordering::Acquire);
                (generation, Arc::new(c.copy()))
            }
        }
    }

    /// Ready: files are loaded at start; reflectors once their first list
    /// is in and its snapshot is published.
    pub fn is_ready(&self) -> bool {
        match self {
            Facts::Static(_) => true,
            // And the first snapshot of the listed stores is published.
            Facts::Cluster(c) => c.listed() && c.published().is_some(),
        }
    }
}

impl ClusterStores {
    /// Every first list is in. Namespaces are not waited for: without them
    /// (e.g. RBAC lacks list/watch) only `kubernetes.io/metadata.name` is
    /// known, as in `nfguard check` without a cluster.
    fn listed(&self) -> bool {
        is_listed(&self.profiles)
            && self.nodes.as_ref().is_none_or(is_listed)
            && self.policies.as_ref().is_none_or(is_listed)
    }

    fn published(&self) -> std::sync::MutexGuard<'_, Option<GenerationSnapshot>> {
        self.published.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of the stores with its node index built.
    fn indexed_copy(&self, platform: &Platform) -> Snapshot {
        let snap = self.copy();
        let profiles: Vec<_> = snap.profiles.iter().map(|p| p.as_ref()).collect();
        let nodes: Vec<_> = snap.nodes.iter().map(|n| n.as_ref()).collect();
        let index = NodeIndex::new(&profiles, &nodes, platform);
        let _ = snap.index.set(index);
        snap
    }

    fn copy(&self) -> Snapshot {
        let ns = self.namespaces.clone();
        Snapshot::new(
            self.profiles.state(),
            match &self.nodes {
                Some(s) => s.state(),
                None => self.static_nodes.clone(),
            },
            PolicyBook::shared(match &self.policies {
                Some(s) => s.state(),
                None => self.static_policies.clone(),
            })
            .with_namespace_labels(Arc::new(move |name: &str| {
                ns.get(&reflector::ObjectRef::new(name))
                    .map(|n| n.metadata.labels.clone().unwrap_or_default())
            })),
        )
    }
}

/// Builds and publishes a snapshot of every facts generation, once the
/// stores are listed, off the request path: the copy and the node index
/// (tens of ms at 5,000 nodes) on a blocking thread. Changes arriving
/// during a build are taken by the next one; a generation already
/// published is not built again.
pub async fn build_snapshots(stores: ClusterStores, platform: Platform) {
    let mut built = None;
    loop {
        let generation = stores.generation.load(Ordering::Acquire);
        if stores.listed() && built != Some(generation) {
            let (s, p) = (stores.clone(), platform.clone());
            match tokio::task::spawn_blocking(move || s.indexed_copy(&p)).await {
                Ok(snap) => {
                    *stores.published() = Some((generation, Arc::new(snap)));
                    built = Some(generation);
                }
                Err(e) => tracing::error!(error = %e, "building the facts snapshot failed"),
            }
            continue;
        }
        // A bump while building left a permit: no change is missed.
        stores.changed.notified().await;
    }
}

fn spawn_reflector<K>(
    api: kube::Api<K>,
    generation: Arc<AtomicU64>,
    changed: Arc<tokio::sync::Notify>,
) -> reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Fingerprint
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = reflector(
        writer,
        watcher(api, watcher::Config::default()).modify(K::slim),
    )
    .default_backoff();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        let mut seen = fingerprints::<K>();
        while let Some(ev) = stream.next().await {
            match ev {
                // After the store applied the event: answers cached under
                // the previous generation are not served again.
                Ok(ev) => {
                    if !seen.observe(&ev).is_empty() {
                        generation.fetch_add(1, Ordering::Release);
                        changed.notify_one();
                    } else if matches!(ev, watcher::Event::InitDone) {
                        changed.notify_one();
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, kind = std::any::type_name::<K>(), "watch error (retrying)");
                }
            }
        }
    });
    reader
}

/// Tracks the verdict-relevant fingerprints of the objects a reflector
/// holds: heartbeats change none, so they leave the generation alone.
fn fingerprints<K: kube::Resource + Fingerprint>() -> Changes<K, ()> {
    Changes::new(K::fingerprint, |_| ())
}

/// Start reflectors and the snapshot builder (node indexes for
/// `platform`, the judge's default). Nodes/policies given as files are
/// used instead of watching.
pub fn start_cluster(
    client: kube::Client,
    nodes_file: Option<Vec<Node>>,
    policies_file: Option<Vec<NetfilterPolicy>>,
    platform: Platform,
) -> Facts {
    let generation = Arc::new(AtomicU64::new(0));
    let changed = Arc::new(tokio::sync::Notify::new());
    let profiles = spawn_reflector(
        kube::Api::<NodeNetfilterProfile>::all(client.clone()),
        generation.clone(),
        changed.clone(),
    );
    let namespaces = spawn_reflector(
        kube::Api::<Namespace>::all(client.clone()),
        generation.clone(),
        changed.clone(),
    );
    let (nodes, static_nodes) = match nodes_file {
        Some(v) => (None, v.into_iter().map(Arc::new).collect()),
        None => (
            Some(spawn_reflector(
                kube::Api::<Node>::all(client.clone()),
                generation.clone(),
                changed.clone(),
            )),
            Vec::new(),
        ),
    };
    let (policies, static_policies) = match policies_file {
        Some(v) => (None, v.into_iter().map(Arc::new).collect()),
        None => (
            Some(spawn_reflector(
                kube::Api::<NetfilterPolicy>::all(client),
                generation.clone(),
                changed.clone(),
            )),
            Vec::new(),
        ),
    };
    let stores = ClusterStores {
        profiles,
        nodes,
        policies,
        namespaces,
        static_nodes,
        static_policies,
        generation,
        changed,
        published: Default::default(),
    };
    tokio::spawn(build_snapshots(stores.clone(), platform));
    Facts::Cluster(stores)
}

#[cfg(test)]
mod tests {
    use super::*;
    use watcher::Event;

    fn ns(name: &str, team: &str) -> Namespace {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"team": team}}
        }))
        .unwrap()
    }

    /// Whether an event moves the generation, as `spawn_reflector` tells.
    struct Seen(Changes<Namespace, ()>);

    impl Seen {
        fn changed(&mut self, ev: &Event<Namespace>) -> bool {
            !self.0.observe(ev).is_empty()
        }
    }

    fn profile(node: &str, version: &str) -> NodeNetfilterProfile {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
            "metadata": {"name": node}, "spec": {"nodeName": node},
            "status": {"iptables": {"version": version, "backend": "nft", "evidence": []}}
        }))
        .unwrap()
    }

    /// Stores of profiles only (nodes and policies as files), listed, and
    /// the writer that changes them.
    fn listed_stores() -> (
        ClusterStores,
        reflector::store::Writer<NodeNetfilterProfile>,
    ) {
        let (profiles, mut writer) = reflector::store::<NodeNetfilterProfile>();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(profile("n1", "1.8.9")));
        writer.apply_watcher_event(&Event::InitDone);
        let (namespaces, _) = reflector::store::<Namespace>();
        let stores = ClusterStores {
            profiles,
            nodes: None,
            policies: None,
            namespaces,
            static_nodes: Vec::new(),
            static_policies: Vec::new(),
            generation: Arc::new(AtomicU64::new(1)),
            changed: Arc::new(tokio::sync::Notify::new()),
            published: Default::default(),
        };
        (stores, writer)
    }

    async fn published_at(facts: &Facts, generation: u64) -> Arc<Snapshot> {
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            loop {
                let (g, snap) = facts.snapshot();
                if g == generation && facts.is_ready() {
                    return snap;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("generation {generation} published within 10 s"))
    }

    /// Snapshots are built in the background with their index, published
    /// whole; a review between a change and its snapshot takes the one
    /// before, without building anything itself.
    #[tokio::test]
    async fn snapshots_are_built_in_the_background_and_reviews_take_the_newest() {
        let (stores, mut writer) = listed_stores();
        let facts = Facts::Cluster(stores.clone());
        // Not ready before the first snapshot is published.
        assert!(!facts.is_ready());
        // It builds what is listed when it starts; no permit is left over.
        let builder = tokio::spawn(build_snapshots(
            stores.clone(),
            "linux/amd64".parse().unwrap(),
        ));
        let first = published_at(&facts, 1).await;
        assert!(
            first.index.get().is_some(),
            "the index is built with the snapshot"
        );
        assert_eq!(first.profiles.len(), 1);

        // A change: the builder is not woken yet, so the change is not
        // published; the review gets the last snapshot, index and all, at
        // once: it neither copies nor indexes anything itself.
        writer.apply_watcher_event(&Event::Apply(profile("n2", "1.8.7")));
        stores.generation.fetch_add(1, Ordering::Release);
        let (g, during) = facts.snapshot();
        assert_eq!(g, 1);
        assert!(Arc::ptr_eq(&during, &first));

        stores.changed.notify_one();
        let second = published_at(&facts, 2).await;
        assert_eq!(second.profiles.len(), 2);
        assert!(second.index.get().is_some());
        // Changes during and after a build: the newest is published.
        for (i, node) in ["n3", "n4", "n5"].into_iter().enumerate() {
            writer.apply_watcher_event(&Event::Apply(profile(node, "1.8.9")));
            stores.generation.fetch_add(1, Ordering::Release);
            if i == 0 {
                stores.changed.notify_one();
            }
        }
        stores.changed.notify_one();
        assert_eq!(published_at(&facts, 5).await.profiles.len(), 5);
        builder.abort();
    }

    #[test]
    fn only_relevant_changes_move_the_generation() {
        let mut seen = Seen(fingerprints());
        // Initial list: one change, at its end.
        assert!(!seen.changed(&Event::<Namespace>::Init));
        assert!(!seen.changed(&Event::InitApply(ns("a", "x"))));
        assert!(seen.changed(&Event::<Namespace>::InitDone));
        // The same content again (a heartbeat-like update): no change.
        assert!(!seen.changed(&Event::Apply(ns("a", "x"))));
        assert!(seen.changed(&Event::Apply(ns("a", "y"))));
        assert!(seen.changed(&Event::Apply(ns("b", "y"))));
        assert!(seen.changed(&Event::Delete(ns("b", "y"))));
        // Re-created with the same content: the facts differ from "deleted".
        assert!(seen.changed(&Event::Apply(ns("b", "y"))));
        // A relist that no longer lists "b": after it, "b" coming back counts.
        assert!(!seen.changed(&Event::<Namespace>::Init));
        assert!(!seen.changed(&Event::InitApply(ns("a", "y"))));
        assert!(seen.changed(&Event::<Namespace>::InitDone));
        assert!(seen.changed(&Event::Apply(ns("b", "y"))));
        assert!(!seen.changed(&Event::Apply(ns("a", "y"))));
    }
}
