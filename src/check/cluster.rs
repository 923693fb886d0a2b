//! Facts from a live cluster (instead of files): every NodeNetfilterProfile,
//! Node, NetfilterPolicy and Namespace, read with plain `list` calls.

use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::runtime::list::ClusterKind;
use k8s_openapi::api::core::v1::{Namespace, Node};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("listing {what}: {error}")]
    List {
        what: &'static str,
        error: kube::Error,
    },
}

/// What the cluster knows; namespace labels feed namespaceSelector matching.
#[derive(Debug, Default)]
pub struct ClusterFacts {
    pub profiles: Vec<NodeNetfilterProfile>,
    pub nodes: Vec<Node>,
    pub policies: Vec<NetfilterPolicy>,
    pub namespace_labels: HashMap<String, BTreeMap<String, String>>,
}

async fn list_all<K: ClusterKind>(
    client: &kube::Client,
    what: &'static str,
) -> Result<Vec<K>, ClusterError> {
    crate::runtime::list::list_all(client)
        .await
        .map_err(|error| ClusterError::List { what, error })
}

/// List profiles, nodes (unless `with_nodes` is false: the user gave a file),
/// policies (likewise) and namespaces.
pub async fn load(
    client: kube::Client,
    with_nodes: bool,
    with_policies: bool,
) -> Result<ClusterFacts, ClusterError> {
    let profiles = list_all::<NodeNetfilterProfile>(&client, "nodenetfilterprofiles").await?;
    let nodes = if with_nodes {
        list_all::<Node>(&client, "nodes").await?
    } else {
        Vec::new()
    };
    load_around(client, Listed { profiles, nodes }, with_policies).await
}

/// Profiles and Nodes a caller already listed (`status` before its
/// what-if: one snapshot, not two).
#[derive(Debug, Default)]
pub struct Listed {
    pub profiles: Vec<NodeNetfilterProfile>,
    pub nodes: Vec<Node>,
}

/// `load` around profiles and nodes already listed: policies (unless
/// `with_policies` is false) and namespaces.
pub async fn load_around(
    client: kube::Client,
    listed: Listed,
    with_policies: bool,
) -> Result<ClusterFacts, ClusterError> {
    let policies = if with_policies {
        list_all::<NetfilterPolicy>(&client, "netfilterpolicies").await?
    } else {
        Vec::new()
    };
    // Namespace labels matter for any policy's namespaceSelector, file or cluster.
    let namespace_labels = list_all::<Namespace>(&client, "namespaces")
        .await?
        .into_iter()
        .filter_map(|n| Some((n.metadata.name?, n.metadata.labels.unwrap_or_default())))
        .collect();
    Ok(ClusterFacts {
        profiles: listed.profiles,
        nodes: listed.nodes,
        policies,
        namespace_labels,
    })
}
