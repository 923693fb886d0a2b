//! The pure reconcile core: one node's facts in, everything the controller
//! should change on that node out (labels, profile status, taints, events).
//! No I/O, no clock (`now` is an argument), so it is unit-tested directly and
//! benchmarked for a whole cluster through the caches
//! ([`crate::controller::apply::gather::plan_from_caches`], as every reconcile runs it).
//! Here too the pure parts the plan is made of: profile conditions, node
//! labels, taints and the brake, the writer inventory.
//!
//! May call: the crate's API types and `crate::compat` (pure). Nothing of
//! the controller's I/O.

pub mod conditions;
pub mod inventory;
pub mod labels;
mod node_labels;
pub use node_labels::plan_labels;
mod node_taints;
mod profile_status;
pub mod taints;

use crate::api::{ActiveBackend, NodeNetfilterProfile, NodeNetfilterProfileStatus, PolicyAction};
use crate::compat::evaluate::{Candidate, ImageKey, ImageResolutions, ReasonCode};
use crate::controller::plan::taints::{TaintPlan, TaintSettings};
use crate::facts::HazardCode;
use crate::judgement::{PolicyBook, Scene, Subject};
use crate::projection::PodFacts;
use crate::projection::SlimNode;
use inventory::node_platform;
use k8s_openapi::jiff::Timestamp;
use profile_status::StatusPlan;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

/// Everything gathered about one node.
#[derive(Clone, Copy, Debug)]
pub struct NodeFacts<'a> {
    pub node: &'a SlimNode,
    pub profile: Option<&'a NodeNetfilterProfile>,
    /// The node's pods (not running ones are ignored).
    pub pods: &'a [&'a PodFacts],
    /// Every policy and the namespaces' labels (judgements of running pods).
    pub policies: &'a PolicyBook,
    pub settings: TaintSettings,
    pub images: &'a ImageResolutions,
    /// Nodes other than this one that carry an nfguard taint.
    pub tainted_elsewhere: usize,
    pub total_nodes: usize,
    pub now: Timestamp,
}

/// A workload running on the node that a `action: Taint` policy finds unsafe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// `namespace/name` of the pod.
    pub pod: String,
    pub codes: Vec<ReasonCode>,
    /// The first unsafe reason, one line.
    pub message: String,
}

/// Which object an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventTarget {
    Node,
    Profile,
    Both,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    pub warning: bool,
    /// PascalCase, stable.
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
    pub target: EventTarget,
    /// The pod the event is about ("namespace/name"), its `related` object.
    /// The recorder folds events of equal type, reason, action, object and
    /// related object into one series and keeps the first note, so without
    /// it a second pod's taint soon after the first read as the first's.
    pub related_pod: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodePlan {
    pub node: String,
    /// JSON merge patch for the Node's nfguard labels; None when in sync.
    pub label_patch: Option<Value>,
    /// The controller-owned status fields to apply; None when in sync or no profile.
    pub status: Option<NodeNetfilterProfileStatus>,
    pub taints: TaintPlan,
    pub violations: Vec<Violation>,
    pub events: Vec<PlannedEvent>,
    /// Reconcile again by then (e.g. when the heartbeat turns stale).
    pub requeue_after: Option<Duration>,
    /// For metrics: the node's backend and critical/any hazard codes.
    pub backend: Option<ActiveBackend>,
    pub hazards: Vec<HazardCode>,
}

/// The controller-owned part of a status (what its apply carries).
pub fn controller_fields(s: &NodeNetfilterProfileStatus) -> NodeNetfilterProfileStatus {
    NodeNetfilterProfileStatus {
        conditions: s.conditions.clone(),
        writers: s.writers.clone(),
        newest_writer_version: s.newest_writer_version,
        oldest_reader_version: s.oldest_reader_version,
        ..Default::default()
    }
}

/// The judgement scene for pods running on known nodes: no candidates to
/// select, only the policies.
fn running_scene(policies: &PolicyBook) -> Scene<'_> {
    Scene {
        profiles: &[],
        nodes: &[],
        policies,
        default_platform: &inventory::DEFAULT_PLATFORM,
        index: None,
    }
}

/// Every (image, platform) the plan for this node looks at: the writers'
/// images and, for pods under `action: Taint`, what their judgement needs.
pub fn images_to_inspect(
    node: &SlimNode,
    pods: &[&PodFacts],
    policies: &PolicyBook,
) -> Vec<ImageKey> {
    let platform = node_platform(Some(&node.labels()));
    let mut keys: BTreeSet<ImageKey> = inventory::images_needed(pods.iter().copied(), &platform)
        .into_iter()
        .collect();
    let name = node.metadata.name.as_deref().unwrap_or("");
    let scene = running_scene(policies);
    for pod in taint_subjects(pods, policies) {
        let subject = Subject::RunningPod {
            pod,
            node: Candidate::new(name, platform.clone(), None),
        };
        keys.extend(scene.prepare(subject).images);
    }
    keys.into_iter().collect()
}

/// Running pods that can write netfilter rules under a `action: Taint` policy.
fn taint_subjects<'p>(pods: &[&'p PodFacts], policies: &PolicyBook) -> Vec<&'p PodFacts> {
    pods.iter()
        .filter(|p| p.running && p.can_write())
        .filter(|p| {
            let policy = policies.for_namespace(&p.namespace);
            policy.action == PolicyAction::Taint && policy.applies()
        })
        .copied()
        .collect()
}

/// Plan one node: its labels, its profile's status (conditions, writer
/// inventory, the running pods found unsafe), its taints, and their events,
/// in that order (the taints read the status step's violations).
pub fn plan_node(facts: &NodeFacts<'_>) -> NodePlan {
    let node_name = facts.node.metadata.name.clone().unwrap_or_default();
    let platform = node_platform(Some(&facts.node.labels()));
    let status = facts.profile.and_then(|p| p.status.as_ref());
    let (label_patch, label_event) = node_labels::plan_labels(facts.node, status);
    let StatusPlan {
        status: new_status,
        violations,
        events: status_events,
        requeue_after,
    } = facts
        .profile
        .map(|profile| profile_status::plan_status(facts, profile, &platform))
        .unwrap_or_default();
    let (taints, taint_events) = node_taints::plan_node_taints(facts, status, &violations);
    let events = label_event
        .into_iter()
        .chain(status_events)
        .chain(taint_events)
        .collect();
    // The reporter's hazards and the controller's derived ones (metrics
    // count both, as `Healthy` and the taint do).
    let mut hazards: Vec<HazardCode> = status
        .map(|s| {
            let derived = crate::node::hazards::controller_hazards(s);
            s.hazards
                .iter()
                .flatten()
                .chain(&derived)
                .map(|h| h.code)
                .collect()
        })
        .unwrap_or_default();
    hazards.sort();
    hazards.dedup();
    NodePlan {
        node: node_name,
        label_patch,
        status: new_status,
        taints,
        violations,
        events,
        requeue_after,
        backend: status.and_then(|s| s.active_backend),
        hazards,
    }
}

/// The node a profile describes: its metadata.name (see `profile_node_name`).
pub fn profile_node(p: &NodeNetfilterProfile) -> Option<&str> {
    crate::compat::evaluate::profile_node_name(p)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::NetfilterPolicy;
    use serde_json::json;
    use std::collections::BTreeMap;

    pub(crate) fn node(i: usize) -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(
            json!({"metadata": {"name": format!("n{i}"), "resourceVersion": "1"}, "spec": {}}),
        )
        .unwrap()
    }

    /// Node n`i`'s profile: a critical hazard, probed at 00:00.
    pub(crate) fn degraded_profile(i: usize) -> NodeNetfilterProfile {
        serde_json::from_value(json!({
            "metadata": {"name": format!("n{i}")}, "spec": {},
            "status": {"activeBackend": "nft",
                       "iptables": {"version": "1.8.9", "backend": "nft", "evidence": []},
                       "hazards": [{"code": "FirewallUnconditionalDrop", "severity": "critical", "message": "drop"}],
                       "lastProbeTime": "2026-01-01T00:00:00Z"}
        }))
        .unwrap()
    }

    /// The plan for node n0 (rules need iptables >= 1.8.8) running a
    /// NET_ADMIN pod in namespace `payments` that bundles iptables 1.8.7,
    /// under a Taint policy selecting namespaces labelled `team=net`;
    /// `payments` carries `labels` (None: namespace not known).
    fn plan_under_team_selector(labels: Option<&[(&str, &str)]>) -> NodePlan {
        let node = SlimNode::from(node(0));
        let profile: NodeNetfilterProfile = serde_json::from_value(json!({
            "metadata": {"name": "n0"}, "spec": {"nodeName": "n0"},
            "status": {"activeBackend": "nft", "minReaderVersion": "1.8.8",
                       "iptables": {"version": "1.8.9", "backend": "nft", "evidence": []},
                       "hazards": [], "lastProbeTime": "2026-01-01T00:00:00Z"}
        }))
        .unwrap();
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
            "metadata": {"name": "router", "namespace": "payments"},
            "spec": {"nodeName": "n0", "hostNetwork": true,
                     "containers": [{"name": "c", "image": "router:old",
                                     "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        let policy: NetfilterPolicy = serde_json::from_value(json!({
            "apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
            "metadata": {"name": "net-team"},
            "spec": {"action": "Taint", "namespaceSelector": {"matchLabels": {"team": "net"}}}
        }))
        .unwrap();
        let mut images = ImageResolutions::new();
        images.insert_profile(
            "router:old",
            &"linux/amd64".parse().unwrap(),
            crate::facts::ImageProfile {
                image: "router:old".into(),
                digest: format!("sha256:{:0>64}", 187),
                platform: "linux/amd64".into(),
                iptables: Some(crate::facts::IptablesFacts {
                    version: Some("1.8.7".parse().unwrap()),
                    backend: Some(crate::facts::Backend::Nft),
                    ..Default::default()
                }),
                nftables: None,
            },
        );
        let known: Option<BTreeMap<String, String>> = labels.map(|l| {
            l.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        });
        let lookup = move |ns: &str| known.clone().filter(|_| ns == "payments");
        let policies = [policy];
        let cache = PolicyBook::new(policies.iter().cloned())
            .with_namespace_labels(std::sync::Arc::new(lookup));
        let pod = PodFacts::of(&pod);
        let pods = [&pod];
        let keys = images_to_inspect(&node, &pods, &cache);
        assert!(
            keys.iter()
                .all(|k| images.get(&k.image, &k.platform).is_some())
        );
        plan_node(&NodeFacts {
            node: &node,
            profile: Some(&profile),
            pods: &pods,
            policies: &cache,
            settings: TaintSettings::from_policies(&policies),
            images: &images,
            tainted_elsewhere: 0,
            total_nodes: 10,
            now: "2026-01-01T00:01:00Z".parse().unwrap(),
        })
    }

    #[test]
    fn taint_policy_selects_namespaces_by_their_real_labels() {
        let selected = plan_under_team_selector(Some(&[("team", "net")]));
        assert_eq!(selected.violations.len(), 1, "{:?}", selected.violations);
        assert_eq!(selected.violations[0].pod, "payments/router");
        // The taint's event names the container and the image to replace.
        let message = &selected.violations[0].message;
        assert!(
            message.starts_with("container c (router:old): "),
            "{message}"
        );
        assert_eq!(
            selected.violations[0].codes,
            [ReasonCode::OldReaderNewRules]
        );
        assert!(selected.taints.tainted_after);

        for other in [Some(&[("team", "web")][..]), Some(&[][..]), None] {
            let plan = plan_under_team_selector(other);
            assert!(
                plan.violations.is_empty(),
                "{other:?}: {:?}",
                plan.violations
            );
            assert!(!plan.taints.tainted_after, "{other:?}");
        }
    }

    /// The plan for one degraded node, no pods and no policy, a minute
    /// after its last heartbeat.
    fn one_degraded_node_plan() -> NodePlan {
        plan_degraded(&degraded_profile(0))
    }

    fn plan_degraded(profile: &NodeNetfilterProfile) -> NodePlan {
        let node = SlimNode::from(node(0));
        plan_node(&NodeFacts {
            node: &node,
            profile: Some(profile),
            pods: &[],
            policies: &PolicyBook::default(),
            settings: TaintSettings::default(),
            images: &ImageResolutions::new(),
            tainted_elsewhere: 0,
            total_nodes: 1,
            now: "2026-01-01T00:01:00Z".parse().unwrap(),
        })
    }

    #[test]
    fn each_condition_change_is_an_event_of_its_own_action() {
        let actions = |plan: &NodePlan| -> Vec<&'static str> {
            let changes = plan
                .events
                .iter()
                .filter(|e| e.reason == "ConditionChanged");
            changes.map(|e| e.action).collect()
        };
        let plan = one_degraded_node_plan();
        // First sight: only the condition that is not True is news; each
        // change has its own action, so the event recorder cannot fold one
        // condition's change into another's series.
        assert_eq!(actions(&plan), ["SetHealthyFalse"]);

        // Later: every status change is news, back to True included.
        let mut profile = degraded_profile(0);
        let mut previous = plan.status.unwrap().conditions.unwrap();
        for c in &mut previous {
            c.status = if c.type_ == "Healthy" {
                "False"
            } else {
                "Unknown"
            }
            .into();
        }
        profile.status.as_mut().unwrap().conditions = Some(previous);
        let again = plan_degraded(&profile);
        assert_eq!(actions(&again), ["SetFreshTrue", "SetConsistentTrue"]);
    }

    #[test]
    fn no_policy_no_taint_but_labels_and_conditions() {
        let p = &one_degraded_node_plan();
        assert!(p.taints.taints.is_none() && p.taints.changes.is_empty());
        assert!(p.label_patch.is_some());
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.conditions.as_ref().unwrap().len(), 3);
        assert_eq!(status.writers, Some(vec![]));
        assert!(status.iptables.is_none(), "never the reporter's fields");
        // Heartbeat at 00:00, interval 60 s: stale after 00:03, so requeue ~2 min later.
        assert_eq!(p.requeue_after, Some(Duration::from_secs(121)));
        assert_eq!(p.hazards, vec![HazardCode::FirewallUnconditionalDrop]);
    }
}
