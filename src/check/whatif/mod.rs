//! `nfguard check --assume-nodes SELECTOR --assume PATCH`: judge workloads
//! against nodes changed as described (an OS upgrade moving the host's
//! iptables, kube-proxy switching modes, a kernel without legacy xtables).
//! The patched profiles go through the very same `check`; this module only
//! patches the inputs and labels the findings as predictions.

pub mod apply;
pub mod memo;
pub mod patch;
pub mod predict;
pub mod selector;

use super::{Inputs, ObjectResult, Report};
use crate::compat::evaluate::{Reason, Verdict, label_selector_matches, profile_node_name};
use patch::{Fact, Patch};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    #[error(transparent)]
    Selector(#[from] selector::SelectorError),
    #[error(transparent)]
    Patch(#[from] patch::PatchError),
    #[error(
        "--assume-nodes {0:?}: no Node objects to match labels against (pass --nodes, or read the cluster)"
    )]
    NoNodeLabels(String),
    #[error("--assume-nodes {0:?} matches no node with a NodeNetfilterProfile")]
    NoMatch(String),
}

/// The assumption, as the report states it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WhatIf {
    /// The label selector as given; empty: every node.
    pub selector: String,
    /// The patches as given.
    pub assume: Vec<String>,
    /// The nodes whose profiles were patched.
    pub nodes: Vec<String>,
    /// Workloads the change gets a denying finding on an assumed node
    /// (one today's profiles do not give already).
    pub denied: usize,
    /// Likewise for warnings (workloads not counted as denied).
    pub warned: usize,
}

impl WhatIf {
    /// `pool=old: os=debian-13`, or `all nodes: ...`.
    pub fn describe(&self) -> String {
        let nodes = if self.selector.trim().is_empty() {
            "all nodes"
        } else {
            self.selector.trim()
        };
        format!("{nodes}: {}", self.assume.join(" "))
    }

    /// `2 workloads would be denied, 1 warned on 3 assumed nodes (...)`.
    pub fn summary(&self) -> String {
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "{} would be denied, {} warned on {} ({})",
            plural(self.denied, "workload", "workloads"),
            self.warned,
            plural(self.nodes.len(), "assumed node", "assumed nodes"),
            self.describe()
        )
    }
}

/// Patch the profiles of the nodes `selector` matches (pure). Without Node
/// objects only the empty selector (every profile) can be honoured.
pub fn assume(
    inputs: &mut Inputs,
    selector_text: &str,
    patches: &[Patch],
) -> Result<WhatIf, WhatIfError> {
    let sel = selector::parse_label_selector(selector_text)?;
    let everyone = selector_text.trim().is_empty();
    let chosen: Option<BTreeSet<String>> = if everyone {
        None
    } else if inputs.nodes.is_empty() {
        return Err(WhatIfError::NoNodeLabels(selector_text.into()));
    } else {
        let empty = BTreeMap::new();
        Some(
            inputs
                .nodes
                .iter()
                .filter(|n| {
                    label_selector_matches(&sel, n.metadata.labels.as_ref().unwrap_or(&empty))
                })
                .filter_map(|n| n.metadata.name.clone())
                .collect(),
        )
    };
    let kube_proxy_nft = patches
        .iter()
        .any(|p| p.fact == Fact::KubeProxyMode(crate::api::KubeProxyMode::Nftables));
    let mut nodes = Vec::new();
    for p in &mut inputs.profiles {
        let Some(name) = profile_node_name(p).map(str::to_string) else {
            continue;
        };
        if chosen.as_ref().is_some_and(|c| !c.contains(&name)) {
            continue;
        }
        let status = p.status.get_or_insert_with(Default::default);
        apply::apply(status, patches);
        if kube_proxy_nft && let Some(release) = apply::kernel_too_old_for_nftables_mode(status) {
            inputs.notes.push(format!(
                "node {name}: kernel {release} is older than 5.13, which kube-proxy's nftables mode needs"
            ));
            inputs.note_files.push(String::new());
        }
        nodes.push(name);
    }
    if let Some(c) = &chosen {
        let profiled: BTreeSet<&String> = nodes.iter().collect();
        for missing in c.iter().filter(|n| !profiled.contains(n)) {
            inputs.notes.push(format!(
                "node {missing} matches --assume-nodes but has no NodeNetfilterProfile: not patched"
            ));
            inputs.note_files.push(String::new());
        }
    }
    if nodes.is_empty() {
        return Err(WhatIfError::NoMatch(selector_text.into()));
    }
    nodes.sort();
    Ok(WhatIf {
        selector: selector_text.trim().into(),
        assume: patches.iter().map(|p| p.text.clone()).collect(),
        nodes,
        denied: 0,
        warned: 0,
    })
}

/// Whether `reason` (of the predicted report) already holds today on every
/// assumed node it names: a finding of the same code about the same
/// container in today's result for the same workload covers those nodes.
fn holds_today(reason: &Reason, today: Option<&ObjectResult>, assumed: &BTreeSet<&str>) -> bool {
    let Some(today) = today else {
        return false;
    };
    reason
        .nodes
        .iter()
        .filter(|n| assumed.contains(n.as_str()))
        .all(|n| {
            today.reasons.iter().any(|t| {
                t.code == reason.code && t.container == reason.container && t.nodes.contains(n)
            })
        })
}

/// How the change touches one workload's findings (indexes into the
/// predicted result's `reasons`): those about an assumed node that today's
/// profiles do not give (`new`), and those they give already (`as_today`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Touched {
    pub new: Vec<usize>,
    pub as_today: Vec<usize>,
}

impl Touched {
    /// The worst effect of the new findings (Allow: none).
    pub fn worst_new(&self, result: &ObjectResult) -> Verdict {
        self.new
            .iter()
            .map(|&i| result.reasons[i].effect)
            .max()
            .unwrap_or(Verdict::Allow)
    }
}

/// For every result of the predicted `report` (same order), which findings
/// on the `assumed` nodes are new and which hold today already. The one rule
/// `check` and `status` both count by.
pub fn classify(report: &Report, today: &Report, assumed: &BTreeSet<&str>) -> Vec<Touched> {
    report
        .results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let before = today.results.get(i).filter(|t| t.object == r.object);
            let mut t = Touched::default();
            for (k, reason) in r.reasons.iter().enumerate() {
                if !reason.nodes.iter().any(|n| assumed.contains(n.as_str())) {
                    continue;
                }
                if holds_today(reason, before, assumed) {
                    t.as_today.push(k);
                } else {
                    t.new.push(k);
                }
            }
            t
        })
        .collect()
}

/// Label every finding about an assumed node as a prediction (its message
/// names the assumption, in every output format; `, as today` when today's
/// profiles give it too) and count the workloads the change itself would
/// get denied or warned: findings that hold today already are not counted.
/// `today`: the same workloads judged on today's profiles.
pub fn annotate(report: &mut Report, today: &Report, mut what_if: WhatIf) {
    let touched = {
        let assumed: BTreeSet<&str> = what_if.nodes.iter().map(String::as_str).collect();
        classify(report, today, &assumed)
    };
    let described = what_if.describe();
    let (mut denied, mut warned) = (0, 0);
    for (r, t) in report.results.iter_mut().zip(&touched) {
        match t.worst_new(r) {
            Verdict::Deny => denied += 1,
            Verdict::Warn => warned += 1,
            Verdict::Allow => {}
        }
        for &k in &t.new {
            r.reasons[k]
                .message
                .insert_str(0, &format!("what-if [{described}]: "));
        }
        for &k in &t.as_today {
            r.reasons[k]
                .message
                .insert_str(0, &format!("what-if [{described}], as today: "));
        }
    }
    what_if.denied = denied;
    what_if.warned = warned;
    report.what_if = Some(what_if);
}

#[cfg(test)]
pub(crate) mod tests;
