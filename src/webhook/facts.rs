//! Where the webhook's facts come from: kube-runtime reflectors over
//! NodeNetfilterProfiles, Nodes, NetfilterPolicies and Namespaces (cluster
//! mode), or files loaded once with `nfguard check`'s loaders (file mode).

use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::check::load;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// Namespace name -> its labels (None: not known).
pub type NamespaceLabels = Arc<dyn Fn(&str) -> Option<BTreeMap<String, String>> + Send + Sync>;

/// One consistent-enough view for one request (Arcs, no deep clones).
#[derive(Default, Clone)]
pub struct Snapshot {
    pub profiles: Vec<Arc<NodeNetfilterProfile>>,
    pub nodes: Vec<Arc<Node>>,
    pub policies: Vec<Arc<NetfilterPolicy>>,
    /// None in file mode: namespace labels unknown (as `nfguard check` without a cluster).
    pub namespace_labels: Option<NamespaceLabels>,
}

/// Source of facts.
pub enum Facts {
    /// Loaded once from files (`--profiles`, `--nodes`, `--policy`).
    Static(Snapshot),
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
        Ok(Facts::Static(Snapshot {
            profiles: profiles.into_iter().map(Arc::new).collect(),
            nodes: nodes.into_iter().map(Arc::new).collect(),
            policies: policies.into_iter().map(Arc::new).collect(),
            namespace_labels: None,
        }))
    }

    pub fn snapshot(&self) -> Snapshot {
        match self {
            Facts::Static(s) => s.clone(),
            Facts::Cluster(c) => {
                let ns = c.namespaces.clone();
                Snapshot {
                    profiles: c.profiles.state(),
                    nodes: match &c.nodes {
                        Some(s) => s.state(),
                        None => c.static_nodes.clone(),
                    },
                    policies: match &c.policies {
                        Some(s) => s.state(),
                        None => c.static_policies.clone(),
                    },
                    namespace_labels: Some(Arc::new(move |name: &str| {
                        ns.get(&reflector::ObjectRef::new(name))
                            .map(|n| n.metadata.labels.clone().unwrap_or_default())
                    })),
                }
            }
        }
    }

    /// Ready: files are loaded at start; reflectors once their first list is in.
    pub fn is_ready(&self) -> bool {
        match self {
            Facts::Static(_) => true,
            Facts::Cluster(c) => {
                c.profiles.is_ready()
                    && c.nodes.as_ref().is_none_or(|s| s.is_ready())
                    && c.policies.as_ref().is_none_or(|s| s.is_ready())
                // Namespaces are not waited for: without them (e.g. RBAC
                // lacks list/watch) only `kubernetes.io/metadata.name` is
                // known, as in `nfguard check` without a cluster.
            }
        }
    }
}

trait ReadyExt {
    fn is_ready(&self) -> bool;
}

impl<K> ReadyExt for reflector::Store<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn is_ready(&self) -> bool {
        // `wait_until_ready` resolves once the first full list was applied.
        futures::FutureExt::now_or_never(self.wait_until_ready()).is_some_and(|r| r.is_ok())
    }
}

fn spawn_reflector<K>(api: kube::Api<K>) -> reflector::Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store::<K>();
    let stream = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if let Err(e) = ev {
                tracing::warn!(error = %e, kind = std::any::type_name::<K>(), "watch error (retrying)");
            }
        }
    });
    reader
}

/// Start reflectors. Nodes/policies given as files are used instead of watching.
pub fn start_cluster(
    client: kube::Client,
    nodes_file: Option<Vec<Node>>,
    policies_file: Option<Vec<NetfilterPolicy>>,
) -> Facts {
    let profiles = spawn_reflector(kube::Api::<NodeNetfilterProfile>::all(client.clone()));
    let namespaces = spawn_reflector(kube::Api::<Namespace>::all(client.clone()));
    let (nodes, static_nodes) = match nodes_file {
        Some(v) => (None, v.into_iter().map(Arc::new).collect()),
        None => (
            Some(spawn_reflector(kube::Api::<Node>::all(client.clone()))),
            Vec::new(),
        ),
    };
    let (policies, static_policies) = match policies_file {
        Some(v) => (None, v.into_iter().map(Arc::new).collect()),
        None => (
            Some(spawn_reflector(kube::Api::<NetfilterPolicy>::all(client))),
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
    })
}
