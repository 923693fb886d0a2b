//! The pure reconcile core: one node's facts in, everything the controller
//! should change on that node out (labels, profile status, taints, events).
//! No I/O, no clock (`now` is an argument), so it is unit-tested directly and
//! benchmarked for a whole cluster through the caches
//! ([`super::gather::plan_from_caches`], as every reconcile runs it).

use super::conditions::{self, ConditionStatus, ConditionType, fresh_until};
use super::inventory::{self, Inventory, node_platform};
use super::labels::{desired_labels, label_patch, relabels};
use super::taints::{Brake, TaintChange, TaintPlan, TaintSettings, WantedTaints, plan_taints};
use crate::api::{ActiveBackend, NodeNetfilterProfile, NodeNetfilterProfileStatus, PolicyAction};
use crate::compat::evaluate::{Candidate, ImageKey, ImageResolutions, Reason, ReasonCode};
use crate::facts::{HazardCode, Platform, Severity};
use crate::judgement::{PolicyBook, Scene, Subject};
use crate::projection::PodFacts;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

/// Everything gathered about one node.
#[derive(Clone, Copy, Debug)]
pub struct NodeFacts<'a> {
    pub node: &'a Node,
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

/// The event action for a condition's new status. kube-runtime's recorder
/// folds events with the same type, reason and action on one object into a
/// series for six minutes and keeps only the first note, so one action for
/// every condition change hid e.g. `Healthy True -> False` behind the
/// `Fresh` change before it (seen on a real cluster).
fn condition_action(type_: &str, status: &str) -> &'static str {
    use ConditionStatus as S;
    use ConditionType as T;
    let (Some(t), Some(s)) = (T::parse(type_), S::parse(status)) else {
        return "UpdateStatus";
    };
    match (t, s) {
        (T::Fresh, S::True) => "SetFreshTrue",
        (T::Fresh, S::False) => "SetFreshFalse",
        (T::Fresh, S::Unknown) => "SetFreshUnknown",
        (T::Healthy, S::True) => "SetHealthyTrue",
        (T::Healthy, S::False) => "SetHealthyFalse",
        (T::Healthy, S::Unknown) => "SetHealthyUnknown",
        (T::Consistent, S::True) => "SetConsistentTrue",
        (T::Consistent, S::False) => "SetConsistentFalse",
        (T::Consistent, S::Unknown) => "SetConsistentUnknown",
    }
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
pub fn images_to_inspect(node: &Node, pods: &[&PodFacts], policies: &PolicyBook) -> Vec<ImageKey> {
    let platform = node_platform(node.metadata.labels.as_ref());
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
        if let Ok(prepared) = scene.prepare(subject) {
            keys.extend(prepared.images);
        }
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

/// The subjects the judgement finds unsafe on this node.
fn violations(
    facts: &NodeFacts<'_>,
    subjects: &[&PodFacts],
    profile: &NodeNetfilterProfile,
    platform: &Platform,
) -> Vec<Violation> {
    let name = facts.node.metadata.name.as_deref().unwrap_or("");
    let scene = running_scene(facts.policies);
    let mut out = Vec::new();
    for pod in subjects {
        let subject = Subject::RunningPod {
            pod,
            node: Candidate::new(name, platform.clone(), Some(profile)),
        };
        let Ok(prepared) = scene.prepare(subject) else {
            continue;
        };
        // Only critical reasons make a violation: skip rendering the rest.
        let decision = prepared.decide(facts.images, Severity::Critical);
        if let Some(first) = decision.unsafe_reasons().next() {
            out.push(Violation {
                pod: pod.key(),
                codes: decision.unsafe_codes(),
                message: violation_message(first),
            });
        }
    }
    out
}

/// The reason's line, led by the container and image it is about: the
/// taint's event must say which image to replace (the message itself says
/// only "in the image").
fn violation_message(reason: &Reason) -> String {
    match (&reason.container, &reason.image) {
        (Some(c), Some(i)) => format!("container {c} ({i}): {}", reason.message),
        (None, Some(i)) => format!("{i}: {}", reason.message),
        _ => reason.message.clone(),
    }
}

fn first_critical(status: Option<&NodeNetfilterProfileStatus>) -> Option<HazardCode> {
    status?
        .hazards
        .iter()
        .flatten()
        .filter(|h| h.severity == Severity::Critical)
        .map(|h| h.code)
        .min()
}

fn describe_labels(patch: &Value) -> String {
    let Some(map) = patch.pointer("/metadata/labels").and_then(Value::as_object) else {
        return String::new();
    };
    map.iter()
        .map(|(k, v)| match v.as_str() {
            Some(v) => format!("{k}={v}"),
            None => format!("{k} removed"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn taint_text(t: &k8s_openapi::api::core::v1::Taint) -> String {
    match t.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}

/// Runs `judge` on the profile as it will be once the desired writer
/// inventory is applied. Copies only what `evaluate` can read: not the
/// metadata (managedFields grow large) nor the conditions, and lends the
/// desired writers instead of cloning them.
fn judge_with_writers<R>(
    profile: &NodeNetfilterProfile,
    desired: &mut NodeNetfilterProfileStatus,
    judge: impl FnOnce(&NodeNetfilterProfile) -> R,
) -> R {
    let empty = NodeNetfilterProfileStatus::default();
    let s = profile.status.as_ref().unwrap_or(&empty);
    // The reporter's facts (the conditions are never read by `evaluate`)
    // with the desired writers lent.
    let status = NodeNetfilterProfileStatus {
        writers: desired.writers.take(),
        newest_writer_version: desired.newest_writer_version,
        oldest_reader_version: desired.oldest_reader_version,
        ..s.reporter_fields()
    };
    let mut merged = NodeNetfilterProfile {
        metadata: Default::default(),
        spec: profile.spec.clone(),
        status: Some(status),
    };
    let out = judge(&merged);
    desired.writers = merged.status.take().and_then(|s| s.writers);
    out
}

/// Plan one node.
pub fn plan_node(facts: &NodeFacts<'_>) -> NodePlan {
    let node_name = facts.node.metadata.name.clone().unwrap_or_default();
    let platform = node_platform(facts.node.metadata.labels.as_ref());
    let status = facts.profile.and_then(|p| p.status.as_ref());
    let mut events = Vec::new();

    // Labels.
    let label_patch = label_patch(facts.node.metadata.labels.as_ref(), &desired_labels(status));
    // A node's first labels are routine (a fresh install would write an
    // event per node): only a change or removal of a label it had is news.
    if let Some(p) = label_patch
        .as_ref()
        .filter(|p| relabels(facts.node.metadata.labels.as_ref(), p))
    {
        events.push(PlannedEvent {
            warning: false,
            reason: "LabelsUpdated",
            action: "Label",
            note: describe_labels(p),
            target: EventTarget::Node,
            related_pod: None,
        });
    }

    // Status: conditions + writer inventory.
    let mut new_status = None;
    let mut found = Vec::new();
    let mut requeue_after = None;
    if let Some(profile) = facts.profile {
        let empty = NodeNetfilterProfileStatus::default();
        let current = status.unwrap_or(&empty);
        let Inventory {
            writers,
            newest_writer_version,
            oldest_reader_version,
        } = inventory::inventory(facts.pods.iter().copied(), status, facts.images, &platform);
        let previous = current.conditions.as_deref().unwrap_or(&[]);
        let conds =
            conditions::conditions(current, previous, facts.now, profile.metadata.generation);
        for c in &conds {
            let before = previous.iter().find(|p| p.type_ == c.type_);
            // A condition's first value is news only when it is not True.
            let changed = match before {
                Some(b) => b.status != c.status,
                None => c.status != ConditionStatus::True.as_str(),
            };
            if changed {
                events.push(PlannedEvent {
                    warning: c.status != "True",
                    reason: "ConditionChanged",
                    action: condition_action(&c.type_, &c.status),
                    note: format!(
                        "{} {} -> {} ({}): {}",
                        c.type_,
                        before.map_or("none", |b| b.status.as_str()),
                        c.status,
                        c.reason,
                        c.message
                    ),
                    target: EventTarget::Profile,
                    related_pod: None,
                });
            }
        }
        let mut desired = NodeNetfilterProfileStatus {
            conditions: Some(conds),
            writers: Some(writers),
            newest_writer_version,
            oldest_reader_version,
            ..Default::default()
        };
        if desired.writers != current.writers && current.writers.is_some() {
            let n = desired.writers.as_ref().map_or(0, Vec::len);
            events.push(PlannedEvent {
                warning: false,
                reason: "WritersChanged",
                action: "UpdateStatus",
                note: format!("{n} container(s) on this node can write its iptables rules"),
                target: EventTarget::Profile,
                related_pod: None,
            });
        }
        // Judge running workloads against the profile as it will be (new
        // writers); the copy is only made when some pod is to be judged.
        let subjects = taint_subjects(facts.pods, facts.policies);
        if !subjects.is_empty() {
            let in_sync = desired.writers == current.writers
                && desired.newest_writer_version == current.newest_writer_version
                && desired.oldest_reader_version == current.oldest_reader_version;
            found = if in_sync {
                violations(facts, &subjects, profile, &platform)
            } else {
                judge_with_writers(profile, &mut desired, |merged| {
                    violations(facts, &subjects, merged, &platform)
                })
            };
        }
        if controller_fields(current) != desired {
            new_status = Some(desired);
        }
        if let Some(until) = fresh_until(current)
            && facts.now <= until
        {
            let secs = until.as_second() - facts.now.as_second() + 1;
            requeue_after = Some(Duration::from_secs(secs.max(1) as u64));
        }
    }

    // Taints.
    let violations = found;
    let wanted = WantedTaints {
        degraded: facts
            .settings
            .taint_degraded
            .then(|| first_critical(status))
            .flatten(),
        incompatible: !violations.is_empty(),
    };
    let current_taints = facts
        .node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[]);
    let taints = plan_taints(
        current_taints,
        &wanted,
        &Brake {
            tainted_elsewhere: facts.tainted_elsewhere,
            total_nodes: facts.total_nodes,
            max_percent: facts.settings.max_percent,
        },
    );
    let why = |key: &str| -> String {
        if key == crate::wellknown::TAINT_INCOMPATIBLE {
            violations
                .iter()
                .map(|v| {
                    format!(
                        "pod {} ({}): {}",
                        v.pod,
                        v.codes
                            .iter()
                            .map(|c| c.to_string())
                            .collect::<Vec<_>>()
                            .join(","),
                        v.message
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        } else {
            match first_critical(status) {
                Some(code) => format!("critical hazard {code}"),
                None => String::new(),
            }
        }
    };
    for change in &taints.changes {
        let e = match change {
            TaintChange::Added(t) => PlannedEvent {
                warning: true,
                reason: "Tainted",
                action: "Taint",
                note: format!("added {}: {}", taint_text(t), why(&t.key)),
                target: EventTarget::Both,
                related_pod: (t.key == crate::wellknown::TAINT_INCOMPATIBLE)
                    .then(|| violations.first().map(|v| v.pod.clone()))
                    .flatten(),
            },
            TaintChange::Removed(t) => PlannedEvent {
                warning: false,
                reason: "Untainted",
                action: "Untaint",
                note: format!("removed {}: the cause has cleared", taint_text(t)),
                target: EventTarget::Both,
                related_pod: None,
            },
            TaintChange::Withheld {
                taint,
                tainted,
                limit,
            } => PlannedEvent {
                warning: true,
                reason: "TaintWithheld",
                action: "Taint",
                note: format!(
                    "safety brake: would add {} ({}), but nfguard already taints {tainted} node(s), the most allowed is {limit} ({}% of {} nodes)",
                    taint_text(taint),
                    why(&taint.key),
                    facts.settings.max_percent,
                    facts.total_nodes
                ),
                target: EventTarget::Both,
                related_pod: None,
            },
        };
        events.push(e);
    }

    let mut hazards: Vec<HazardCode> = status
        .and_then(|s| s.hazards.as_ref())
        .map(|hs| hs.iter().map(|h| h.code).collect())
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

    pub(crate) fn node(i: usize) -> Node {
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
        let node = node(0);
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
        let node = node(0);
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
