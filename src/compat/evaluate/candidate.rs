//! One node a workload can run on, and what deciding it needs of a Node
//! alone (its platform, its taints against tolerations): shared by the
//! selection (`candidates`) and the per-node index (`node_index`).

use crate::api::NodeNetfilterProfile;
use crate::facts::Platform;
use k8s_openapi::api::core::v1::{Taint, Toleration};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// One node the workload can run on.
#[derive(Clone, Debug)]
pub struct Candidate<'a> {
    pub name: &'a str,
    /// The platform to resolve images for (borrowed from a [`NodeIndex`](super::NodeIndex)).
    pub platform: Cow<'a, Platform>,
    /// None: a Node with no NodeNetfilterProfile (reported as NodeProfileMissing).
    pub profile: Option<&'a NodeNetfilterProfile>,
    /// The node's class in the scene's [`NodeIndex`](super::NodeIndex), if it has one.
    pub class: Option<u32>,
}

impl<'a> Candidate<'a> {
    pub fn new(
        name: &'a str,
        platform: Platform,
        profile: Option<&'a NodeNetfilterProfile>,
    ) -> Self {
        Candidate {
            name,
            platform: Cow::Owned(platform),
            profile,
            class: None,
        }
    }
}

/// The node a profile describes: its metadata.name, never spec.nodeName. The
/// reporter's admission policy binds a node's token to the profile of that
/// name only, so a profile whose spec.nodeName names another node must not
/// speak for that node (the CRD also keeps spec.nodeName equal to the name).
pub fn profile_node_name(p: &NodeNetfilterProfile) -> Option<&str> {
    p.metadata.name.as_deref()
}

/// A Node's platform from its well-known labels (none: `default_platform`).
pub fn node_platform(
    labels: Option<&BTreeMap<String, String>>,
    default_platform: &Platform,
) -> Platform {
    labels.map_or_else(
        || default_platform.clone(),
        |l| Platform::from_labels(l, default_platform),
    )
}

/// Whether `tolerations` tolerate a node's `taints` (and `unschedulable`).
pub(super) fn tolerated(
    taints: &[Taint],
    unschedulable: bool,
    tolerations: &[Toleration],
    no_execute_only: bool,
) -> bool {
    const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
    let relevant = |t: &&Taint| match t.effect.as_str() {
        "NoExecute" => true,
        "NoSchedule" => !no_execute_only,
        _ => false,
    };
    if !taints
        .iter()
        .filter(relevant)
        .all(|t| tolerations.iter().any(|tol| tolerates(tol, t)))
    {
        return false;
    }
    // spec.unschedulable acts as this taint (rare: built only when needed).
    if !no_execute_only && unschedulable && !taints.iter().any(|t| t.key == UNSCHEDULABLE) {
        let t = Taint {
            key: UNSCHEDULABLE.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        return tolerations.iter().any(|tol| tolerates(tol, &t));
    }
    true
}

/// Kubernetes' Toleration.ToleratesTaint.
pub fn tolerates(tol: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = tol.effect.as_deref().filter(|e| !e.is_empty())
        && e != taint.effect
    {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match tol.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            // An empty key with Equal is invalid; it tolerates nothing.
            !key.is_empty()
                && tol.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}
