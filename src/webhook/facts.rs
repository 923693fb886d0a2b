//! Where the webhook's facts come from: kube-runtime reflectors over
//! NodeNetfilterProfiles, Nodes, NetfilterPolicies and Namespaces (cluster
//! mode), or files loaded once with `nfguard check`'s loaders (file mode).

use super::fingerprint::Fingerprint;
use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::check::load;
use crate::compat::evaluate::NodeIndex;
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
    /// The last snapshot and the generation it was taken at: requests share
    /// it instead of copying every store (thousands of Arcs) each time.
    pub last: Arc<Mutex<Option<GenerationSnapshot>>>,
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

    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self {
            Facts::Static(s) => s.clone(),
            Facts::Cluster(c) => {
                // Read before copying: a change during the copy bumps the
                // generation again, so the next request copies anew.
                let generation = c.generation.load(Ordering::Acquire);
                let mut last = c.last.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((g, snap)) = last.as_ref()
                    && *g == generation
                {
                    return snap.clone();
                }
                let snap = Arc::new(c.copy());
                *last = Some((generation, snap.clone()));
                snap
            }
        }
    }

    /// Changes whenever any fact may have changed (0 forever for files).
    pub fn generation(&self) -> u64 {
        match self {
            Facts::Static(_) => 0,
            Facts::Cluster(c) => c.generation.load(Ordering::Acquire),
        }
    }

    /// Ready: files are loaded at start; reflectors once their first list is in.
    pub fn is_ready(&self) -> bool {
        match self {
            Facts::Static(_) => true,
            Facts::Cluster(c) => {
                is_listed(&c.profiles)
                    && c.nodes.as_ref().is_none_or(is_listed)
                    && c.policies.as_ref().is_none_or(is_listed)
                // Namespaces are not waited for: without them (e.g. RBAC
                // lacks list/watch) only `kubernetes.io/metadata.name` is
                // known, as in `nfguard check` without a cluster.
            }
        }
    }
}

impl ClusterStores {
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

fn spawn_reflector<K>(api: kube::Api<K>, generation: Arc<AtomicU64>) -> reflector::Store<K>
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

/// Start reflectors. Nodes/policies given as files are used instead of watching.
pub fn start_cluster(
    client: kube::Client,
    nodes_file: Option<Vec<Node>>,
    policies_file: Option<Vec<NetfilterPolicy>>,
) -> Facts {
    let generation = Arc::new(AtomicU64::new(0));
    let profiles = spawn_reflector(
        kube::Api::<NodeNetfilterProfile>::all(client.clone()),
        generation.clone(),
    );
    let namespaces = spawn_reflector(
        kube::Api::<Namespace>::all(client.clone()),
        generation.clone(),
    );
    let (nodes, static_nodes) = match nodes_file {
        Some(v) => (None, v.into_iter().map(Arc::new).collect()),
        None => (
            Some(spawn_reflector(
                kube::Api::<Node>::all(client.clone()),
                generation.clone(),
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
            )),
            Vec::new(),
        ),
    };
    Facts::Cluster(ClusterStores {
        profiles,
        nodes,
        policies,
        namespaces,
        static_nodes,
        static_policies,
        generation,
        last: Default::default(),
    })
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
