//! Prometheus metrics with bounded labels: backends (5 values), hazard codes
//! (a fixed enum), taint keys (2), error stages (5). Never a node name.

use crate::api::ActiveBackend;
use crate::compat::HazardCode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackendLabel {
    pub backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HazardLabel {
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaintLabel {
    pub taint: String,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Stage {
    gather,
    labels,
    taints,
    status,
    orphans,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabel {
    pub stage: Stage,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Change {
    added,
    removed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaintChangeLabel {
    pub taint: String,
    pub change: Change,
}

const BACKENDS: [&str; 5] = ["nft", "legacy", "mixed", "none", "unknown"];

pub struct Metrics {
    registry: Registry,
    pub nodes_by_backend: Family<BackendLabel, Gauge>,
    pub nodes_by_hazard: Family<HazardLabel, Gauge>,
    pub reconcile_duration: Histogram,
    pub reconcile_errors: Family<StageLabel, Counter>,
    pub tainted_nodes: Gauge,
    pub taints_withheld: Family<TaintLabel, Counter>,
    pub taint_changes: Family<TaintChangeLabel, Counter>,
    pub orphans_deleted: Counter,
    pub leader: Gauge,
    /// Per-node facts behind the gauges (memory only, never a label).
    nodes: Mutex<HashMap<String, (Option<ActiveBackend>, Vec<HazardCode>)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nfguard_controller");
        let m = Metrics {
            nodes_by_backend: Family::default(),
            nodes_by_hazard: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            reconcile_errors: Family::default(),
            tainted_nodes: Gauge::default(),
            taints_withheld: Family::default(),
            taint_changes: Family::default(),
            orphans_deleted: Counter::default(),
            leader: Gauge::default(),
            nodes: Mutex::new(HashMap::new()),
            registry: Registry::default(),
        };
        registry.register(
            "nodes",
            "Nodes by the backend holding their rules",
            m.nodes_by_backend.clone(),
        );
        registry.register(
            "nodes_with_hazard",
            "Nodes whose profile reports a hazard, by hazard code",
            m.nodes_by_hazard.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time to reconcile one node",
            m.reconcile_duration.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Failed reconcile steps by stage",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "tainted_nodes",
            "Nodes carrying an nfguard taint",
            m.tainted_nodes.clone(),
        );
        registry.register(
            "taints_withheld",
            "Taints the safety brake withheld (maxTaintedNodesPercent reached)",
            m.taints_withheld.clone(),
        );
        registry.register(
            "taint_changes",
            "Taints added or removed",
            m.taint_changes.clone(),
        );
        registry.register(
            "orphans_deleted",
            "Profiles deleted because their Node was gone",
            m.orphans_deleted.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the lease",
            m.leader.clone(),
        );
        for b in BACKENDS {
            let _ = m
                .nodes_by_backend
                .get_or_create(&BackendLabel { backend: b.into() });
        }
        Metrics { registry, ..m }
    }

    /// Record a node's backend and hazards, refreshing the gauges.
    pub fn observe_node(&self, node: &str, backend: Option<ActiveBackend>, hazards: &[HazardCode]) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        nodes.insert(node.to_string(), (backend, hazards.to_vec()));
        self.refresh(&nodes);
    }

    /// A Node went away.
    pub fn forget_node(&self, node: &str) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if nodes.remove(node).is_some() {
            self.refresh(&nodes);
        }
    }

    fn refresh(&self, nodes: &HashMap<String, (Option<ActiveBackend>, Vec<HazardCode>)>) {
        let mut by_backend: HashMap<&str, i64> = BACKENDS.iter().map(|b| (*b, 0)).collect();
        let mut by_hazard: HashMap<String, i64> = HashMap::new();
        for (backend, hazards) in nodes.values() {
            *by_backend
                .entry(backend.map_or("unknown", |b| b.as_str()))
                .or_default() += 1;
            for h in hazards {
                *by_hazard.entry(h.to_string()).or_default() += 1;
            }
        }
        for (b, n) in by_backend {
            self.nodes_by_backend
                .get_or_create(&BackendLabel { backend: b.into() })
                .set(n);
        }
        // Codes no node has any more drop to 0 (the label set stays bounded by the enum).
        self.nodes_by_hazard.clear();
        for (code, n) in by_hazard {
            self.nodes_by_hazard
                .get_or_create(&HazardLabel { code })
                .set(n);
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_follow_the_nodes_seen() {
        let m = Metrics::new();
        m.observe_node(
            "a",
            Some(ActiveBackend::Nft),
            &[HazardCode::FirewallUnconditionalDrop],
        );
        m.observe_node("b", Some(ActiveBackend::Nft), &[]);
        m.observe_node("c", None, &[]);
        let text = m.encode();
        assert!(
            text.contains("nfguard_controller_nodes{backend=\"nft\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("nfguard_controller_nodes{backend=\"unknown\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "nfguard_controller_nodes_with_hazard{code=\"FirewallUnconditionalDrop\"} 1"
            ),
            "{text}"
        );
        m.observe_node("a", Some(ActiveBackend::Legacy), &[]);
        m.forget_node("c");
        let text = m.encode();
        assert!(
            text.contains("nfguard_controller_nodes{backend=\"nft\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("nfguard_controller_nodes{backend=\"legacy\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("nfguard_controller_nodes{backend=\"unknown\"} 0"),
            "{text}"
        );
        assert!(!text.contains("FirewallUnconditionalDrop\"} 1"), "{text}");
    }
}
