//! Node classes for the per-node test cases of `-o junit`: the candidates
//! of one workload grouped by what the verdict engine said about them (the
//! set of reasons naming the node: the engine already aggregates identical
//! findings over nodes) and by a readable description of their profile.

use super::ObjectResult;
use crate::api::NodeNetfilterProfile;
use crate::compat::evaluate::Candidate;
use crate::facts::Platform;
use std::collections::{BTreeSet, HashMap};

/// A candidate node and the words describing its class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateNode {
    pub name: String,
    /// e.g. "nodes with iptables 1.8.9 nft", "linux/arm64 nodes with ...".
    pub class: String,
}

/// The candidates with their class descriptions; the platform is named only
/// when the candidates span several (images may differ per platform).
pub fn candidate_nodes(candidates: &[Candidate<'_>]) -> Vec<CandidateNode> {
    let platforms: BTreeSet<&Platform> = candidates.iter().map(|c| &*c.platform).collect();
    candidates
        .iter()
        .map(|c| {
            let nodes = if platforms.len() > 1 {
                format!("{} nodes", c.platform)
            } else {
                "nodes".to_string()
            };
            CandidateNode {
                name: c.name.to_string(),
                class: format!("{nodes} {}", profile_words(c.profile)),
            }
        })
        .collect()
}

/// "with iptables 1.8.9 nft", "with iptables 1.8.9 nft, rules in legacy", ...
fn profile_words(profile: Option<&NodeNetfilterProfile>) -> String {
    let Some(profile) = profile else {
        return "without a NodeNetfilterProfile".into();
    };
    let status = profile.status.as_ref();
    let host = status.and_then(|s| s.iptables.as_ref());
    let active = status.and_then(|s| s.active_backend);
    if host.is_none() && active.is_none() {
        return "with an incomplete NodeNetfilterProfile".into();
    }
    let host_backend = host.and_then(|f| f.backend).map(|b| b.to_string());
    let mut words = match host {
        Some(f) if f.backend.is_some() => format!(
            "with iptables {} {}",
            f.version
                .map_or("(version unknown)".into(), |v| v.to_string()),
            host_backend.as_deref().unwrap_or_default()
        ),
        _ => "without host iptables".to_string(),
    };
    if let Some(a) = active {
        let rules = a.as_str();
        if rules != "none" && Some(rules) != host_backend.as_deref() {
            words.push_str(&format!(", rules in {rules}"));
        }
    }
    words
}

/// One class: its description, its nodes (candidate order), and the indices
/// of the result's reasons that concern it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClass {
    pub class: String,
    pub nodes: Vec<String>,
    pub reasons: Vec<usize>,
}

/// A result split into node classes and the reasons about no node in particular.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grouping {
    pub classes: Vec<NodeClass>,
    pub workload_reasons: Vec<usize>,
}

pub fn group(result: &ObjectResult) -> Grouping {
    let mut by_node: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut workload_reasons = Vec::new();
    for (i, r) in result.reasons.iter().enumerate() {
        if r.nodes.is_empty() {
            workload_reasons.push(i);
        }
        for n in &r.nodes {
            by_node.entry(n.as_str()).or_default().push(i);
        }
    }
    let mut classes: Vec<NodeClass> = Vec::new();
    let mut index: HashMap<(&str, Vec<usize>), usize> = HashMap::new();
    for node in &result.nodes {
        let reasons = by_node.get(node.name.as_str()).cloned().unwrap_or_default();
        let key = (node.class.as_str(), reasons);
        match index.get(&key) {
            Some(&c) => classes[c].nodes.push(node.name.clone()),
            None => {
                index.insert(key.clone(), classes.len());
                classes.push(NodeClass {
                    class: node.class.clone(),
                    nodes: vec![node.name.clone()],
                    reasons: key.1,
                });
            }
        }
    }
    Grouping {
        classes,
        workload_reasons,
    }
}

/// Test case names, one per class: `OBJECT :: CLASS (N nodes)`. Classes
/// described alike are told apart by their reason codes, then by number.
pub fn case_names(result: &ObjectResult, classes: &[NodeClass]) -> Vec<String> {
    let mut names: Vec<String> = classes
        .iter()
        .map(|c| {
            let n = c.nodes.len();
            format!(
                "{} :: {} ({n} node{})",
                result.object,
                c.class,
                if n == 1 { "" } else { "s" }
            )
        })
        .collect();
    let mut uses: HashMap<String, usize> = HashMap::new();
    for name in &names {
        *uses.entry(name.clone()).or_insert(0) += 1;
    }
    for (name, c) in names.iter_mut().zip(classes) {
        if uses.get(name.as_str()).copied().unwrap_or(0) < 2 {
            continue;
        }
        let codes: BTreeSet<String> = c
            .reasons
            .iter()
            .filter_map(|&i| result.reasons.get(i))
            .map(|r| r.code.to_string())
            .collect();
        let codes = if codes.is_empty() {
            "no findings".to_string()
        } else {
            codes.into_iter().collect::<Vec<_>>().join(", ")
        };
        name.push_str(&format!(" [{codes}]"));
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for name in names.iter_mut() {
        let k = seen.entry(name.clone()).or_insert(0);
        *k += 1;
        if *k > 1 {
            name.push_str(&format!(" #{k}"));
        }
    }
    names
}

#[cfg(test)]
#[path = "classes_tests.rs"]
mod tests;
