//! Prometheus metrics with bounded labels: backends (5 values), hazard codes
//! (a fixed enum), taint keys (2), error stages (6), condition types (3) and
//! statuses (3), host iptables versions (the releases the nodes run: a
//! handful). Two per-node families carry a `node` label: an alert on a
//! degraded or stale node must name it, and there are as many of those
//! series as the cluster has Nodes (the bound kube-state-metrics' per-node
//! series live with too): `node_condition` (9 per node with a profile) and
//! `node_last_probe_timestamp_seconds` (1 per node with a heartbeat).

use crate::api::{ActiveBackend, NodeNetfilterProfile};
use crate::controller::plan::NodePlan;
use crate::controller::plan::conditions::{ConditionStatus, ConditionType};
use crate::facts::HazardCode;
use crate::runtime::admin::Exposition;
use k8s_openapi::jiff::Timestamp;
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
pub struct VersionLabel {
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TaintLabel {
    pub taint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabel {
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeConditionLabel {
    pub node: String,
    pub condition: &'static str,
    pub status: &'static str,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Stage {
    gather,
    labels,
    taints,
    status,
    orphans,
    policy_status,
    reports,
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

/// A policy report write.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum WriteOp {
    apply,
    delete,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReportWriteLabel {
    pub op: WriteOp,
    /// `openreports.io/v1alpha1` or `wgpolicyk8s.io/v1alpha2`.
    pub api: &'static str,
}

/// How nfguard's reporter-metrics signer answered a certificate request.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum CertificateOutcome {
    signed,
    /// Not a reporter asking for its own node (the request's Denied condition).
    denied,
    /// Approved by someone else, but not a request nfguard signs.
    failed,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertificateLabel {
    pub outcome: CertificateOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EncodingLabel {
    pub encoding: &'static str,
}

/// `encoding` of `pods_encoding`.
const POD_ENCODINGS: [&str; 2] = ["protobuf", "json"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReportApiLabel {
    pub api: &'static str,
}

/// `api` of `reports_api` when no report API is served.
pub const REPORTS_API_NONE: &str = "none";

const BACKENDS: [&str; 5] = ["nft", "legacy", "mixed", "none", "unknown"];
/// The condition types the controller writes, and their statuses.
const CONDITIONS: [&str; 3] = [
    ConditionType::Fresh.as_str(),
    ConditionType::Healthy.as_str(),
    ConditionType::Consistent.as_str(),
];
const STATUSES: [&str; 3] = [
    ConditionStatus::True.as_str(),
    ConditionStatus::False.as_str(),
    ConditionStatus::Unknown.as_str(),
];

/// The taint kubeadm and most installers put on control-plane nodes.
pub const CONTROL_PLANE_TAINT: &str = "node-role.kubernetes.io/control-plane";

/// `node` repels pods without a toleration for the control-plane taint
/// (the reporter's default: docs/reporter.md, "Control-plane nodes").
pub fn has_control_plane_taint(node: &crate::projection::SlimNode) -> bool {
    node.taints.as_ref().is_some_and(|ts| {
        ts.iter()
            .any(|t| t.key == CONTROL_PLANE_TAINT && t.effect != "PreferNoSchedule")
    })
}

/// What one reconcile learned about a node (kept in memory, never a label
/// except the node name of the per-node families).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeObservation {
    pub backend: Option<ActiveBackend>,
    /// The host's iptables release (`status.iptables.version`).
    pub iptables_version: Option<String>,
    pub hazards: Vec<HazardCode>,
    /// Whether the node has a NodeNetfilterProfile at all.
    pub has_profile: bool,
    /// The node carries the control-plane taint, which the reporter
    /// tolerates only when opted in: no profile there is expected.
    pub control_plane_tainted: bool,
    /// (type, status) of the profile's conditions after the reconcile.
    pub conditions: Vec<(String, String)>,
    /// The reporter's last probe (`lastProbeTime`), Unix seconds.
    pub last_probe: Option<i64>,
}

impl NodeObservation {
    /// The node as the plan leaves it: the conditions the plan writes, or
    /// (when it writes none) the profile's, which are then already in sync.
    pub fn of(profile: Option<&NodeNetfilterProfile>, plan: &NodePlan) -> Self {
        let current = profile.and_then(|p| p.status.as_ref());
        let conditions = plan
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .or_else(|| current.and_then(|s| s.conditions.as_ref()))
            .map(|cs| {
                cs.iter()
                    .map(|c| (c.type_.clone(), c.status.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let last_probe = current
            .and_then(|s| s.last_probe_time.as_deref())
            .and_then(|t| t.trim().parse::<Timestamp>().ok())
            .map(|t| t.as_second());
        NodeObservation {
            backend: plan.backend,
            iptables_version: current
                .and_then(|s| s.iptables.as_ref())
                .and_then(|i| i.version)
                .map(|v| v.to_string()),
            hazards: plan.hazards.clone(),
            has_profile: profile.is_some(),
            control_plane_tainted: false,
            conditions,
            last_probe,
        }
    }

    /// The same, noting whether `node` carries the control-plane taint.
    pub fn on_node(mut self, node: &crate::projection::SlimNode) -> Self {
        self.control_plane_tainted = has_control_plane_taint(node);
        self
    }

    fn status_of(&self, condition: &str) -> Option<&str> {
        self.conditions
            .iter()
            .find(|(t, _)| t == condition)
            .map(|(_, s)| s.as_str())
    }
}

pub struct Metrics {
    registry: Registry,
    pub nodes_by_backend: Family<BackendLabel, Gauge>,
    pub nodes_by_version: Family<VersionLabel, Gauge>,
    pub nodes_by_hazard: Family<HazardLabel, Gauge>,
    pub reconcile_duration: Histogram,
    pub reconcile_errors: Family<StageLabel, Counter>,
    pub tainted_nodes: Gauge,
    pub taints_withheld: Family<TaintLabel, Counter>,
    pub taint_changes: Family<TaintChangeLabel, Counter>,
    pub orphans_deleted: Counter,
    pub leader: Gauge,
    pub nodes_without_profile: Gauge,
    pub control_plane_nodes_without_profile: Gauge,
    /// NetfilterPolicies whose spec is invalid (ignored when judging).
    pub invalid_policies: Gauge,
    /// 1 for a node's current condition status, 0 for the other two.
    pub node_condition: Family<NodeConditionLabel, Gauge>,
    pub node_last_probe: Family<NodeLabel, Gauge>,
    /// 1 for the policy report API in use (or `none`), 0 for the others.
    pub reports_api: Family<ReportApiLabel, Gauge>,
    /// Policy reports applied or deleted.
    pub report_writes: Family<ReportWriteLabel, Counter>,
    /// Policy reports nfguard holds in the API in use.
    pub reports: Gauge,
    /// Workloads whose report the last pass did not write: their
    /// namespace was at its cap.
    pub reports_over_cap: Gauge,
    /// Reporter-metrics certificate requests the signer answered.
    pub certificate_requests: Family<CertificateLabel, Counter>,
    /// 1 for the encoding the pods were last listed in, 0 for the other.
    pub pods_encoding: Family<EncodingLabel, Gauge>,
    /// Per-node facts behind the gauges.
    nodes: Mutex<HashMap<String, NodeObservation>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("nfguard_controller");
        registry.register_collector(Box::new(crate::runtime::allocator::HeapCollector));
        // The controller inspects images too: its stale answers (registry down).
        registry.register_collector(Box::new(crate::registry::StaleCollector));
        let m = Metrics {
            nodes_by_backend: Family::default(),
            nodes_by_version: Family::default(),
            nodes_by_hazard: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            reconcile_errors: Family::default(),
            tainted_nodes: Gauge::default(),
            taints_withheld: Family::default(),
            taint_changes: Family::default(),
            orphans_deleted: Counter::default(),
            leader: Gauge::default(),
            nodes_without_profile: Gauge::default(),
            control_plane_nodes_without_profile: Gauge::default(),
            invalid_policies: Gauge::default(),
            node_condition: Family::default(),
            node_last_probe: Family::default(),
            reports_api: Family::default(),
            report_writes: Family::default(),
            reports: Gauge::default(),
            reports_over_cap: Gauge::default(),
            certificate_requests: Family::default(),
            pods_encoding: Family::default(),
            nodes: Mutex::new(HashMap::new()),
            registry: Registry::default(),
        };
        registry.register(
            "nodes",
            "Nodes by the backend holding their rules",
            m.nodes_by_backend.clone(),
        );
        registry.register(
            "nodes_by_iptables_version",
            "Nodes by the release of the host's iptables (unknown: not probed)",
            m.nodes_by_version.clone(),
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
        registry.register(
            "nodes_without_profile",
            "Nodes that have no NodeNetfilterProfile (no reporter has written one), control-plane-tainted nodes aside",
            m.nodes_without_profile.clone(),
        );
        registry.register(
            "control_plane_nodes_without_profile",
            "Nodes with the control-plane taint and no NodeNetfilterProfile (the reporter goes there only when opted in)",
            m.control_plane_nodes_without_profile.clone(),
        );
        registry.register(
            "invalid_policies",
            "NetfilterPolicies whose spec is invalid: ignored when judging (status condition Valid=False)",
            m.invalid_policies.clone(),
        );
        registry.register(
            "node_condition",
            "1 for the current status of each NodeNetfilterProfile condition, 0 for the others",
            m.node_condition.clone(),
        );
        registry.register(
            "node_last_probe_timestamp_seconds",
            "Unix time of the reporter's last probe of the node (lastProbeTime)",
            m.node_last_probe.clone(),
        );
        registry.register(
            "reports_api",
            "1 for the policy report API the controller writes (openreports.io/v1alpha1, wgpolicyk8s.io/v1alpha2, or none when neither is served), 0 for the others",
            m.reports_api.clone(),
        );
        registry.register(
            "report_writes",
            "Policy reports applied (content changed) or deleted (workload gives no result), by API",
            m.report_writes.clone(),
        );
        registry.register(
            "reports",
            "Policy reports nfguard holds in the API it writes",
            m.reports.clone(),
        );
        registry.register(
            "reports_over_cap",
            "Workloads whose policy report the last pass did not write because their namespace held its cap of reports or bytes (--max-reports-per-namespace, --max-report-bytes-per-namespace)",
            m.reports_over_cap.clone(),
        );
        registry.register(
            "certificate_requests",
            "Reporter-metrics certificate requests nfguard's signer answered: signed, denied (not a reporter asking for its own node's addresses), failed (approved by someone else, not signed)",
            m.certificate_requests.clone(),
        );
        registry.register(
            "pods_encoding",
            "1 for the encoding the controller lists and watches pods in (protobuf; json where the API server or a proxy refuses protobuf), 0 for the other; both 0 until the first list",
            m.pods_encoding.clone(),
        );
        for encoding in POD_ENCODINGS {
            let _ = m.pods_encoding.get_or_create(&EncodingLabel { encoding });
        }
        // Every series from the start (0 until discovery answers, and
        // counters at 0), so dashboards and rate() see them before a write.
        for outcome in [
            CertificateOutcome::signed,
            CertificateOutcome::denied,
            CertificateOutcome::failed,
        ] {
            let _ = m
                .certificate_requests
                .get_or_create(&CertificateLabel { outcome });
        }
        let apis = crate::reports::ReportApi::ALL.map(|a| a.api_version());
        for api in apis.into_iter().chain([REPORTS_API_NONE]) {
            let _ = m.reports_api.get_or_create(&ReportApiLabel { api });
        }
        for api in apis {
            for op in [WriteOp::apply, WriteOp::delete] {
                let _ = m.report_writes.get_or_create(&ReportWriteLabel { op, api });
            }
        }
        for b in BACKENDS {
            let _ = m
                .nodes_by_backend
                .get_or_create(&BackendLabel { backend: b.into() });
        }
        Metrics { registry, ..m }
    }

    /// The encoding the pods were listed in.
    pub fn set_pods_encoding(&self, encoding: crate::kube_protobuf::pods::Encoding) {
        let current = match encoding {
            crate::kube_protobuf::pods::Encoding::Protobuf => "protobuf",
            crate::kube_protobuf::pods::Encoding::Json => "json",
        };
        for encoding in POD_ENCODINGS {
            self.pods_encoding
                .get_or_create(&EncodingLabel { encoding })
                .set(i64::from(encoding == current));
        }
    }

    /// The policy report API in use (None: neither is served).
    pub fn set_reports_api(&self, api: Option<crate::reports::ReportApi>) {
        let current = api.map_or(REPORTS_API_NONE, |a| a.api_version());
        let all = crate::reports::ReportApi::ALL.map(|a| a.api_version());
        for name in all.into_iter().chain([REPORTS_API_NONE]) {
            self.reports_api
                .get_or_create(&ReportApiLabel { api: name })
                .set(i64::from(name == current));
        }
    }

    /// Record what a reconcile learned about a node, refreshing the gauges.
    pub fn observe_node(&self, node: &str, seen: &NodeObservation) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        self.publish_node(node, Some(seen));
        nodes.insert(node.to_string(), seen.clone());
        self.refresh(&nodes);
    }

    /// A Node went away.
    pub fn forget_node(&self, node: &str) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        if nodes.remove(node).is_some() {
            self.publish_node(node, None);
            self.refresh(&nodes);
        }
    }

    /// Forget every node not in `existing` (the orphan sweep's Node list:
    /// catches deletions this replica did not see, e.g. while standing by).
    pub fn retain_nodes(&self, existing: &std::collections::HashSet<String>) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<String> = nodes
            .keys()
            .filter(|n| !existing.contains(*n))
            .cloned()
            .collect();
        for n in &gone {
            nodes.remove(n);
            self.publish_node(n, None);
        }
        if !gone.is_empty() {
            self.refresh(&nodes);
        }
    }

    /// The per-node series of one node (None: remove them). Only this
    /// node's series are touched, so a reconcile costs O(1) here.
    fn publish_node(&self, node: &str, seen: Option<&NodeObservation>) {
        for condition in CONDITIONS {
            let current = seen.and_then(|s| s.status_of(condition));
            for status in STATUSES {
                let labels = NodeConditionLabel {
                    node: node.to_string(),
                    condition,
                    status,
                };
                match current {
                    Some(c) => {
                        self.node_condition
                            .get_or_create(&labels)
                            .set(i64::from(c == status));
                    }
                    None => {
                        self.node_condition.remove(&labels);
                    }
                }
            }
        }
        let labels = NodeLabel {
            node: node.to_string(),
        };
        match seen.and_then(|s| s.last_probe) {
            Some(t) => {
                self.node_last_probe.get_or_create(&labels).set(t);
            }
            None => {
                self.node_last_probe.remove(&labels);
            }
        }
    }

    fn refresh(&self, nodes: &HashMap<String, NodeObservation>) {
        let mut by_backend: HashMap<&str, i64> = BACKENDS.iter().map(|b| (*b, 0)).collect();
        let mut by_version: HashMap<&str, i64> = HashMap::new();
        let mut by_hazard: HashMap<String, i64> = HashMap::new();
        let (mut without_profile, mut control_plane_without) = (0, 0);
        for seen in nodes.values() {
            *by_backend
                .entry(seen.backend.map_or("unknown", |b| b.as_str()))
                .or_default() += 1;
            *by_version
                .entry(seen.iptables_version.as_deref().unwrap_or("unknown"))
                .or_default() += 1;
            for h in &seen.hazards {
                *by_hazard.entry(h.to_string()).or_default() += 1;
            }
            match seen.control_plane_tainted {
                false => without_profile += i64::from(!seen.has_profile),
                true => control_plane_without += i64::from(!seen.has_profile),
            }
        }
        self.nodes_without_profile.set(without_profile);
        self.control_plane_nodes_without_profile
            .set(control_plane_without);
        for (b, n) in by_backend {
            self.nodes_by_backend
                .get_or_create(&BackendLabel { backend: b.into() })
                .set(n);
        }
        // Versions no node runs any more go away.
        self.nodes_by_version.clear();
        for (version, n) in by_version {
            self.nodes_by_version
                .get_or_create(&VersionLabel {
                    version: version.to_string(),
                })
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
}

impl Exposition for Metrics {
    fn registry(&self) -> &Registry {
        &self.registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Condition, NodeNetfilterProfileStatus};

    fn seen(backend: Option<ActiveBackend>, hazards: &[HazardCode]) -> NodeObservation {
        NodeObservation {
            backend,
            hazards: hazards.to_vec(),
            has_profile: true,
            ..Default::default()
        }
    }

    fn conditions(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(t, s)| (t.to_string(), s.to_string()))
            .collect()
    }

    #[test]
    fn gauges_follow_the_nodes_seen() {
        let m = Metrics::new();
        m.observe_node(
            "a",
            &seen(
                Some(ActiveBackend::Nft),
                &[HazardCode::FirewallUnconditionalDrop],
            ),
        );
        m.observe_node("b", &seen(Some(ActiveBackend::Nft), &[]));
        m.observe_node("c", &seen(None, &[]));
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
        m.observe_node("a", &seen(Some(ActiveBackend::Legacy), &[]));
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

    #[test]
    fn conditions_are_one_for_the_current_status_and_zero_for_the_others() {
        let m = Metrics::new();
        let mut a = seen(Some(ActiveBackend::Nft), &[]);
        a.iptables_version = Some("1.8.9".into());
        a.conditions = conditions(&[("Fresh", "Unknown"), ("Healthy", "False")]);
        a.last_probe = Some(1_700_000_000);
        m.observe_node("a", &a);
        let text = m.encode();
        for (condition, status, value) in [
            ("Fresh", "Unknown", 1),
            ("Fresh", "True", 0),
            ("Fresh", "False", 0),
            ("Healthy", "False", 1),
            ("Healthy", "True", 0),
        ] {
            let line = format!(
                "nfguard_controller_node_condition{{node=\"a\",condition=\"{condition}\",status=\"{status}\"}} {value}\n"
            );
            assert!(text.contains(&line), "{line} in {text}");
        }
        assert!(
            !text.contains("condition=\"Consistent\""),
            "not reported: {text}"
        );
        assert!(
            text.contains("nfguard_controller_nodes_by_iptables_version{version=\"1.8.9\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "nfguard_controller_node_last_probe_timestamp_seconds{node=\"a\"} 1700000000\n"
            ),
            "{text}"
        );
        // A status change flips the values in place; a node that goes away
        // takes its series with it.
        a.conditions = conditions(&[("Fresh", "True")]);
        a.last_probe = None;
        m.observe_node("a", &a);
        let text = m.encode();
        assert!(
            text.contains("node_condition{node=\"a\",condition=\"Fresh\",status=\"True\"} 1"),
            "{text}"
        );
        assert!(!text.contains("condition=\"Healthy\""), "{text}");
        assert!(!text.contains("last_probe_timestamp_seconds{"), "{text}");
        m.forget_node("a");
        assert!(!m.encode().contains("node=\"a\""), "{}", m.encode());
    }

    #[test]
    fn control_plane_nodes_without_profile_are_counted_apart() {
        use crate::projection::SlimNode;
        let node = |effect: &str| -> SlimNode {
            serde_json::from_value(serde_json::json!({
                "spec": {"taints": [{"key": CONTROL_PLANE_TAINT, "effect": effect}]}
            }))
            .unwrap()
        };
        assert!(has_control_plane_taint(&node("NoSchedule")));
        assert!(has_control_plane_taint(&node("NoExecute")));
        assert!(!has_control_plane_taint(&node("PreferNoSchedule")));
        assert!(!has_control_plane_taint(&SlimNode::default()));

        let m = Metrics::new();
        let bare = || NodeObservation::default();
        m.observe_node("cp-1", &bare().on_node(&node("NoSchedule")));
        m.observe_node("worker-1", &bare());
        let mut profiled_cp = seen(Some(ActiveBackend::Nft), &[]).on_node(&node("NoSchedule"));
        profiled_cp.conditions = conditions(&[("Healthy", "True")]);
        m.observe_node("cp-2", &profiled_cp);
        let text = m.encode();
        assert!(
            text.contains("nfguard_controller_nodes_without_profile 1\n"),
            "{text}"
        );
        assert!(
            text.contains("nfguard_controller_control_plane_nodes_without_profile 1\n"),
            "{text}"
        );
    }

    #[test]
    fn nodes_without_profile_are_counted_and_vanished_nodes_pruned() {
        let m = Metrics::new();
        m.observe_node("bare", &NodeObservation::default());
        let mut p = seen(Some(ActiveBackend::Nft), &[]);
        p.conditions = conditions(&[("Healthy", "True")]);
        m.observe_node("profiled", &p);
        assert!(
            m.encode()
                .contains("nfguard_controller_nodes_without_profile 1\n"),
            "{}",
            m.encode()
        );
        m.retain_nodes(&["bare".to_string()].into_iter().collect());
        let text = m.encode();
        assert!(!text.contains("node=\"profiled\""), "{text}");
        assert!(
            text.contains("nfguard_controller_nodes{backend=\"nft\"} 0"),
            "{text}"
        );
        m.retain_nodes(&Default::default());
        assert!(
            m.encode()
                .contains("nfguard_controller_nodes_without_profile 0\n"),
            "{}",
            m.encode()
        );
    }

    fn condition(type_: &str, status: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: String::new(),
            last_transition_time: String::new(),
            observed_generation: None,
        }
    }

    #[test]
    fn an_observation_takes_the_conditions_the_plan_writes_else_the_profiles() {
        let mut profile = NodeNetfilterProfile::new("n1", Default::default());
        profile.status = Some(NodeNetfilterProfileStatus {
            last_probe_time: Some("2026-03-01T12:00:00Z".into()),
            iptables: Some(crate::facts::IptablesFacts {
                version: Some("1.8.7".parse().unwrap()),
                ..Default::default()
            }),
            conditions: Some(vec![condition("Healthy", "True")]),
            ..Default::default()
        });
        let mut plan = NodePlan {
            backend: Some(ActiveBackend::Legacy),
            hazards: vec![HazardCode::MixedBackends],
            ..Default::default()
        };
        let o = NodeObservation::of(Some(&profile), &plan);
        assert_eq!(o.conditions, conditions(&[("Healthy", "True")]));
        assert_eq!(o.last_probe, Some(1_772_366_400));
        assert_eq!(o.backend, Some(ActiveBackend::Legacy));
        assert_eq!(o.iptables_version.as_deref(), Some("1.8.7"));
        assert_eq!(o.hazards, vec![HazardCode::MixedBackends]);
        assert!(o.has_profile);
        plan.status = Some(NodeNetfilterProfileStatus {
            conditions: Some(vec![condition("Healthy", "False")]),
            ..Default::default()
        });
        let o = NodeObservation::of(Some(&profile), &plan);
        assert_eq!(o.conditions, conditions(&[("Healthy", "False")]));
        profile.status.as_mut().unwrap().last_probe_time = Some("yesterday".into());
        assert_eq!(NodeObservation::of(Some(&profile), &plan).last_probe, None);
        let bare = NodeObservation::of(None, &NodePlan::default());
        assert!(!bare.has_profile);
        assert!(bare.conditions.is_empty());
    }
}
