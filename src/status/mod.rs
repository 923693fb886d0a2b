//! `nfguard status` / `kubectl nfguard status`: one row per node from its
//! NodeNetfilterProfile and its Node, and with `--assume` a what-if section. This module is the
//! pure part (objects
//! and a clock in, a report out); `fetch` lists, `table` renders, `cli` wires.

pub mod cli;
pub mod clusters;
pub mod fetch;
pub mod reports;
pub mod table;
pub mod whatif;

use crate::api::{ActiveBackend, NodeNetfilterProfile, Writer};
use crate::controller::plan::conditions::fresh_until;
use crate::controller::plan::taints::is_nfguard_taint;
use crate::facts::{Backend, HazardCode, Severity, Version};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use std::collections::HashMap;

/// The structured document `-o json|yaml` prints. Every field is always
/// present (null when unknown), so pipelines can rely on the shape.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    pub nodes: Vec<NodeStatus>,
    pub summary: Summary,
    /// nfguard's policy reports (docs/reports.md).
    pub reports: reports::ReportsStatus,
    /// Only with `--assume`: what the assumed node change does to what
    /// runs today (docs/kubectl-plugin.md#what-if).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what_if: Option<whatif::WhatIfStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub nodes: usize,
    pub degraded: usize,
    pub stale: usize,
    pub without_profile: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    pub name: String,
    /// The Node's Ready condition (None: the Node does not say).
    pub ready: Option<bool>,
    /// Whether the reporter has written a NodeNetfilterProfile for it.
    pub profile: bool,
    /// The backend of the host's default `iptables` command.
    pub backend: Option<Backend>,
    /// Where the live rules are: nft, legacy, mixed or none.
    pub active_backend: Option<ActiveBackend>,
    pub iptables_version: Option<Version>,
    /// Oldest iptables-nft that reads every live rule (None: any reads them).
    pub min_reader_version: Option<Version>,
    pub hazards: Vec<HazardSummary>,
    /// nfguard's taints on the Node.
    pub taints: Vec<TaintSummary>,
    /// The controller's writer inventory (None: not recorded yet).
    pub writers: Option<Vec<Writer>>,
    pub newest_writer_version: Option<Version>,
    pub oldest_reader_version: Option<Version>,
    pub kernel: Option<String>,
    pub last_probe_time: Option<String>,
    /// Seconds since the last probe (None: no parsable heartbeat).
    pub heartbeat_age_seconds: Option<i64>,
    /// The heartbeat is missing or older than 3 probe intervals (the
    /// controller's `Fresh` rule).
    pub stale: bool,
    /// A critical hazard, mixed backends, or an nfguard taint.
    pub degraded: bool,
    pub probe_error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HazardSummary {
    pub code: HazardCode,
    pub severity: Severity,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaintSummary {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

impl NodeStatus {
    fn without_profile(name: String, ready: Option<bool>, taints: Vec<TaintSummary>) -> Self {
        let degraded = !taints.is_empty();
        NodeStatus {
            name,
            ready,
            profile: false,
            backend: None,
            active_backend: None,
            iptables_version: None,
            min_reader_version: None,
            hazards: Vec::new(),
            taints,
            writers: None,
            newest_writer_version: None,
            oldest_reader_version: None,
            kernel: None,
            last_probe_time: None,
            heartbeat_age_seconds: None,
            stale: false,
            degraded,
            probe_error: None,
        }
    }
}

fn node_ready(node: &Node) -> Option<bool> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
    Some(ready.status == "True")
}

fn nfguard_taints(node: &Node) -> Vec<TaintSummary> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| is_nfguard_taint(t))
        .map(|t| TaintSummary {
            key: t.key.clone(),
            value: t.value.clone().filter(|v| !v.is_empty()),
            effect: t.effect.clone(),
        })
        .collect()
}

/// Distinct hazards (the reporter's and the controller's derived ones),
/// most severe first, then by code.
fn hazard_summaries(profile: &NodeNetfilterProfile) -> Vec<HazardSummary> {
    let Some(status) = profile.status.as_ref() else {
        return Vec::new();
    };
    let derived = crate::node::hazards::controller_hazards(status);
    let mut out: Vec<HazardSummary> = status
        .hazards
        .iter()
        .flatten()
        .chain(&derived)
        .map(|h| HazardSummary {
            code: h.code,
            severity: h.severity,
        })
        .collect();
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.code.cmp(&b.code)));
    out.dedup_by(|a, b| a.code == b.code);
    out
}

fn with_profile(
    name: String,
    ready: Option<bool>,
    taints: Vec<TaintSummary>,
    profile: &NodeNetfilterProfile,
    now: Timestamp,
) -> NodeStatus {
    let status = profile.status.clone().unwrap_or_default();
    let hazards = hazard_summaries(profile);
    let heartbeat: Option<Timestamp> = status
        .last_probe_time
        .as_deref()
        .and_then(|t| t.trim().parse().ok());
    let stale = fresh_until(&status).is_none_or(|until| now > until);
    let degraded = hazards.iter().any(|h| h.severity == Severity::Critical)
        || status.active_backend == Some(ActiveBackend::Mixed)
        || !taints.is_empty();
    let iptables = status.iptables.as_ref();
    NodeStatus {
        name,
        ready,
        profile: true,
        backend: iptables.and_then(|f| f.backend),
        active_backend: status.active_backend,
        iptables_version: iptables.and_then(|f| f.version),
        min_reader_version: status.min_reader_version,
        hazards,
        taints,
        writers: status.writers.clone(),
        newest_writer_version: status.newest_writer_version,
        oldest_reader_version: status.oldest_reader_version,
        kernel: status.kernel.as_ref().map(|k| k.release.clone()),
        last_probe_time: status.last_probe_time.clone(),
        heartbeat_age_seconds: heartbeat.map(|t| now.duration_since(t).as_secs()),
        stale,
        degraded,
        probe_error: status.probe_error.clone(),
    }
}

/// The report for every Node, sorted by name. A profile is matched to its
/// Node by name; profiles whose Node is gone are left out (the controller
/// deletes them).
pub fn build_report(
    profiles: &[NodeNetfilterProfile],
    nodes: &[Node],
    now: Timestamp,
) -> StatusReport {
    let by_name: HashMap<&str, &NodeNetfilterProfile> = profiles
        .iter()
        .filter_map(|p| Some((p.metadata.name.as_deref()?, p)))
        .collect();
    let mut rows: Vec<NodeStatus> = nodes
        .iter()
        .filter_map(|node| {
            let name = node.metadata.name.clone()?;
            let ready = node_ready(node);
            let taints = nfguard_taints(node);
            Some(match by_name.get(name.as_str()) {
                Some(p) => with_profile(name, ready, taints, p, now),
                None => NodeStatus::without_profile(name, ready, taints),
            })
        })
        .collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    let summary = Summary {
        nodes: rows.len(),
        degraded: rows.iter().filter(|r| r.degraded).count(),
        stale: rows.iter().filter(|r| r.stale).count(),
        without_profile: rows.iter().filter(|r| !r.profile).count(),
    };
    StatusReport {
        nodes: rows,
        summary,
        reports: reports::ReportsStatus::default(),
        what_if: None,
    }
}

#[cfg(test)]
mod tests;
