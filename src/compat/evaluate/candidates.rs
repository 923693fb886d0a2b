//! The nodes a workload's pods can land on, as the scheduler (or the
//! DaemonSet controller) would see them, and each node's platform.

use super::candidate::{Candidate, node_platform, profile_node_name, tolerated};
use super::node_index::NodeIndex;
use super::selector::{node_selector_requirement_matches, requirement_matches_value};
use super::workload::{Workload, WorkloadKind};
use crate::api::NodeNetfilterProfile;
use crate::facts::Platform;
use foldhash::HashMap;
use k8s_openapi::api::core::v1::{Node, NodeSelectorTerm, Taint, Toleration};
use std::collections::BTreeMap;

/// Used when neither a Node's labels nor the pod's nodeSelector name a platform.
pub const DEFAULT_PLATFORM: &str = "linux/amd64";

/// Candidates in the order given (`nodes` order when Nodes are at hand,
/// else `profiles` order).
///
/// With Node objects: nodeName, required node affinity (matchExpressions on
/// labels, matchFields on metadata.name), nodeSelector, and NoSchedule /
/// NoExecute taints against tolerations (plus the tolerations the DaemonSet
/// controller adds). Profiles whose Node is absent are not candidates.
///
/// Without Node objects (`nodes` empty) labels and taints are unknown, so every
/// profile is a candidate except those excluded by name (nodeName, matchFields
/// metadata.name); the platform then comes from the pod's own nodeSelector
/// `kubernetes.io/os`/`arch`, else `default_platform`.
///
/// `index`, when built from these very `profiles` and `nodes`, supplies
/// each node's profile, platform and class (same candidates, faster).
pub fn select_candidates<'a>(
    workload: &Workload,
    profiles: &[&'a NodeNetfilterProfile],
    nodes: &[&'a Node],
    default_platform: &Platform,
    index: Option<&'a NodeIndex>,
) -> Vec<Candidate<'a>> {
    let within =
        select_candidates_within(workload, profiles, nodes, default_platform, index, &|| {
            false
        });
    match within {
        Some(candidates) => candidates,
        None => unreachable!("a selection that never stops finishes"),
    }
}

/// Nodes matched between two questions to `stop`: a pod's scheduling
/// constraints are the tenant's, and thousands of affinity terms against
/// thousands of nodes take seconds.
const STOP_EVERY: usize = 64;

/// [`select_candidates`], asking `stop` every [`STOP_EVERY`] nodes (or
/// taint sets): None when it said stop.
pub fn select_candidates_within<'a>(
    workload: &Workload,
    profiles: &[&'a NodeNetfilterProfile],
    nodes: &[&'a Node],
    default_platform: &Platform,
    index: Option<&'a NodeIndex>,
    stop: &dyn Fn() -> bool,
) -> Option<Vec<Candidate<'a>>> {
    let stop_at = |i: usize| i % STOP_EVERY == STOP_EVERY - 1 && stop();
    let spec = &workload.pod_spec;
    if nodes.is_empty() {
        let platform = pod_platform(workload, default_platform);
        let mut out = Vec::new();
        for (i, p) in profiles.iter().enumerate() {
            if stop_at(i) {
                return None;
            }
            if let Some(name) = profile_node_name(p)
                && name_allowed(workload, name)
            {
                out.push(Candidate::new(name, platform.clone(), Some(*p)));
            }
        }
        return Some(out);
    }
    let tolerations = effective_tolerations(workload);
    let index = index.filter(|x| x.fits(nodes.len()));
    if let Some(index) = index
        && spec.node_name.is_none()
        && spec.node_selector.as_ref().is_none_or(|s| s.is_empty())
        && required_terms(workload).is_none()
    {
        // Only taints decide: judged once per distinct taint set, and the
        // Nodes themselves (thousands, scattered in memory) are not read.
        return index.schedulable(&tolerations, profiles, &stop_at);
    }
    let empty = BTreeMap::new();
    let mut schedulable = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        if stop_at(i) {
            return None;
        }
        let Some(name) = node.metadata.name.as_deref() else {
            continue;
        };
        let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
        if !name_allowed(workload, name) {
            continue;
        }
        let fits = if spec.node_name.is_none() {
            node_selector_ok(workload, labels)
                && affinity_ok(workload, name, labels)
                && taints_tolerated(node, &tolerations, false)
        } else {
            // nodeName bypasses the scheduler, but NoExecute still evicts.
            taints_tolerated(node, &tolerations, true)
        };
        if fits {
            schedulable.push((i, name, labels));
        }
    }
    if let Some(index) = index {
        return Some(
            schedulable
                .into_iter()
                .filter_map(|(i, _, _)| index.candidate(i, profiles))
                .collect(),
        );
    }
    let by_node: HashMap<&str, &'a NodeNetfilterProfile> = profiles
        .iter()
        .filter_map(|p| Some((profile_node_name(p)?, *p)))
        .collect();
    Some(
        schedulable
            .into_iter()
            .map(|(_, name, labels)| {
                Candidate::new(
                    name,
                    node_platform(Some(labels), default_platform),
                    by_node.get(name).copied(),
                )
            })
            .collect(),
    )
}

fn pod_platform(workload: &Workload, default_platform: &Platform) -> Platform {
    node_platform(workload.pod_spec.node_selector.as_ref(), default_platform)
}

/// nodeName and every `matchFields metadata.name` the pod can satisfy.
fn name_allowed(workload: &Workload, name: &str) -> bool {
    let spec = &workload.pod_spec;
    if let Some(n) = &spec.node_name {
        return n == name;
    }
    let Some(terms) = required_terms(workload) else {
        return true;
    };
    // Without labels a term passes unless its matchFields exclude the name.
    terms.iter().any(|t| {
        t.match_fields
            .iter()
            .flatten()
            .all(|r| field_matches(r, name))
    })
}

fn required_terms(workload: &Workload) -> Option<&Vec<NodeSelectorTerm>> {
    workload
        .pod_spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
        .map(|s| &s.node_selector_terms)
}

fn node_selector_ok(workload: &Workload, labels: &BTreeMap<String, String>) -> bool {
    workload
        .pod_spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
}

/// Terms are ORed; within a term expressions and fields are ANDed; a term
/// with neither matches nothing (Kubernetes semantics).
fn affinity_ok(workload: &Workload, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let Some(terms) = required_terms(workload) else {
        return true;
    };
    terms.iter().any(|t| {
        let exprs = t.match_expressions.as_deref().unwrap_or(&[]);
        let flds = t.match_fields.as_deref().unwrap_or(&[]);
        (!exprs.is_empty() || !flds.is_empty())
            && exprs
                .iter()
                .all(|r| node_selector_requirement_matches(r, labels))
            && flds.iter().all(|r| field_matches(r, name))
    })
}

/// matchFields supports only `metadata.name` (as in Kubernetes).
fn field_matches(req: &k8s_openapi::api::core::v1::NodeSelectorRequirement, name: &str) -> bool {
    let got = (req.key == "metadata.name").then_some(name);
    requirement_matches_value(req, got)
}

/// The pod's tolerations plus those the DaemonSet controller adds to every
/// DaemonSet pod (so a DaemonSet still lands on not-ready or pressured nodes).
fn effective_tolerations(workload: &Workload) -> Vec<Toleration> {
    let mut out = workload.pod_spec.tolerations.clone().unwrap_or_default();
    if workload.kind == WorkloadKind::DaemonSet {
        let tol = |key: &str, effect: &str| Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some(effect.into()),
            ..Default::default()
        };
        out.push(tol("node.kubernetes.io/not-ready", "NoExecute"));
        out.push(tol("node.kubernetes.io/unreachable", "NoExecute"));
        out.push(tol("node.kubernetes.io/disk-pressure", "NoSchedule"));
        out.push(tol("node.kubernetes.io/memory-pressure", "NoSchedule"));
        out.push(tol("node.kubernetes.io/pid-pressure", "NoSchedule"));
        out.push(tol("node.kubernetes.io/unschedulable", "NoSchedule"));
        if workload.host_network() {
            out.push(tol("node.kubernetes.io/network-unavailable", "NoSchedule"));
        }
    }
    out
}

fn taints_tolerated(node: &Node, tolerations: &[Toleration], no_execute_only: bool) -> bool {
    let spec = node.spec.as_ref();
    let taints: &[Taint] = spec.and_then(|s| s.taints.as_deref()).unwrap_or(&[]);
    let unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    tolerated(taints, unschedulable, tolerations, no_execute_only)
}
