//! Which watch events can change a node's plan. Each watched kind has a
//! fingerprint: a hash of exactly what the plan reads of it (pods have
//! their projection instead, compared whole: `controller::pod_store`). An event that
//! leaves an object's fingerprint as it was triggers no reconcile; that is
//! how reporter heartbeats, kubelet Node status and pod status churn are
//! ignored (in a cluster of thousands of nodes, several events a second).
//!
//! Deletions always count, and so does a re-list after a watch gap (what
//! changed or went away meanwhile is reported once, at its end). A
//! suppressed event is still applied to the stores: only the trigger is
//! dropped. Missed triggers (a 64-bit collision) are caught by the periodic
//! resync.

use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::controller::plan::conditions::ConditionType;
use crate::projection::SlimNode;
use crate::runtime::watch::hash_json;
pub use crate::runtime::watch::{Changes, Touched};
use kube::Resource;

/// Whether the profile's `Fresh` condition (as the controller last wrote
/// it) is True.
fn is_fresh(p: &NodeNetfilterProfile) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == ConditionType::Fresh.as_str()))
        .is_some_and(|c| c.status == "True")
}

/// A profile: the reporter's facts, spec, generation and deletion. The
/// heartbeat (`lastProbeTime`) counts only while `Fresh` is not True: then
/// it makes the node Fresh again. While Fresh, a heartbeat changes no plan
/// until it is late, and the reconcile's requeue (`requeue_after`, at the
/// moment it would turn stale) covers that. The controller's own fields
/// (conditions, writers, their summaries) are its output, not its input.
pub fn profile(p: &NodeNetfilterProfile) -> u64 {
    let fresh = is_fresh(p);
    let status = p.status.as_ref().map(|s| {
        let mut reporter = s.reporter_fields();
        if fresh {
            reporter.last_probe_time = None;
        }
        reporter
    });
    hash_json(&(
        &p.metadata.name,
        p.metadata.generation,
        &p.metadata.deletion_timestamp,
        &p.spec,
        fresh,
        &status,
    ))
}

/// A Node as kept (its projection: the labels read, the taints); a
/// heartbeat (new resourceVersion) alone is no change.
pub fn node(n: &SlimNode) -> u64 {
    hash_json(&(
        &n.metadata.name,
        &n.labels(),
        &n.metadata.deletion_timestamp,
        &n.taints,
    ))
}

/// A policy: its spec. Its status (written by nfguard) is not read.
pub fn policy(p: &NetfilterPolicy) -> u64 {
    hash_json(&(&p.metadata.name, &p.spec))
}

/// A namespace: its labels, which `namespaceSelector`s match.
pub fn namespace_labels<K: Resource>(ns: &K) -> u64 {
    hash_json(&ns.meta().labels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn profile_obj(probe: &str, fresh: Option<&str>, min_reader: &str) -> NodeNetfilterProfile {
        let conditions = fresh.map(|s| {
            json!([{"type": "Fresh", "status": s, "reason": "R", "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": probe, "generation": 1},
            "spec": {"nodeName": "n1"},
            "status": {"minReaderVersion": min_reader, "lastProbeTime": probe,
                       "probeIntervalSeconds": 60, "conditions": conditions}
        }))
        .unwrap()
    }

    #[test]
    fn a_heartbeat_counts_only_while_the_node_is_not_fresh() {
        let t0 = "2026-01-01T00:00:00Z";
        let t1 = "2026-01-01T00:01:00Z";
        // Fresh: the heartbeat alone changes nothing, a fact does.
        let a = profile(&profile_obj(t0, Some("True"), "1.8.8"));
        assert_eq!(a, profile(&profile_obj(t1, Some("True"), "1.8.8")));
        assert_ne!(a, profile(&profile_obj(t1, Some("True"), "1.8.9")));
        // Stale (Unknown), never judged (no condition) or False: it counts,
        // as it is what makes the node Fresh again.
        for fresh in [Some("Unknown"), None, Some("False")] {
            assert_ne!(
                profile(&profile_obj(t0, fresh, "1.8.8")),
                profile(&profile_obj(t1, fresh, "1.8.8")),
                "{fresh:?}"
            );
        }
    }

    #[test]
    fn the_controllers_own_status_fields_do_not_count() {
        let mut a = profile_obj("2026-01-01T00:00:00Z", Some("True"), "1.8.8");
        let fp = profile(&a);
        let s = a.status.as_mut().unwrap();
        s.writers = Some(vec![crate::api::Writer::default()]);
        s.newest_writer_version = Some("1.8.9".parse().unwrap());
        s.conditions.as_mut().unwrap()[0].reason = "Other".into();
        a.metadata.resource_version = Some("99".into());
        assert_eq!(fp, profile(&a));
        a.metadata.generation = Some(2);
        assert_ne!(fp, profile(&a), "a new spec generation counts");
    }

    #[test]
    fn node_status_does_not_count_labels_and_taints_do() {
        let node_obj =
            |labels: serde_json::Value, ready: &str, taints: serde_json::Value| -> SlimNode {
                serde_json::from_value(json!({
                    "metadata": {"name": "n1", "labels": labels, "resourceVersion": ready,
                                 "annotations": {"node.alpha.kubernetes.io/ttl": ready}},
                    "spec": {"taints": taints},
                    "status": {"conditions": [{"type": "Ready", "status": ready}]}
                }))
                .unwrap()
            };
        let arch = |a: &str| json!({"kubernetes.io/arch": a});
        let a = node(&node_obj(arch("amd64"), "True", json!([])));
        assert_eq!(a, node(&node_obj(arch("amd64"), "False", json!([]))));
        assert_ne!(a, node(&node_obj(arch("arm64"), "True", json!([]))));
        let tainted = json!([{"key": "k", "effect": "NoSchedule"}]);
        assert_ne!(a, node(&node_obj(arch("amd64"), "True", tainted)));
    }

    #[test]
    fn a_policy_counts_by_its_spec_only() {
        let pol = |action: &str, status: serde_json::Value| -> NetfilterPolicy {
            serde_json::from_value(json!({
                "apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
                "metadata": {"name": "p", "resourceVersion": status.to_string()},
                "spec": {"action": action}, "status": status
            }))
            .unwrap()
        };
        let a = policy(&pol("Warn", json!({})));
        assert_eq!(a, policy(&pol("Warn", json!({"conditions": []}))));
        assert_ne!(a, policy(&pol("Taint", json!({}))));
    }

    use k8s_openapi::api::core::v1::Pod;

    /// A fingerprint for the tracker's own tests.
    fn pod(p: &Pod) -> u64 {
        hash_json(&(&p.metadata.name, &p.spec))
    }

    fn tagged(name: &str, node: Option<&str>, image: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": image}]}
        }))
        .unwrap()
    }

    fn node_of(p: &Pod) -> Option<String> {
        p.spec.as_ref().and_then(|s| s.node_name.clone())
    }

    fn touched(before: Option<&str>, after: Option<&str>) -> Touched<Option<String>> {
        Touched {
            before: before.map(|n| Some(n.to_string())),
            after: after.map(|n| Some(n.to_string())),
        }
    }

    #[test]
    fn changes_reports_new_changed_moved_and_deleted_objects_once() {
        let mut c = Changes::new(pod, node_of);
        let a = tagged("a", Some("n1"), "i:1");
        assert_eq!(
            c.observe(&Event::Apply(a.clone())),
            [touched(None, Some("n1"))]
        );
        assert!(c.observe(&Event::Apply(a.clone())).is_empty(), "same");
        assert_eq!(
            c.observe(&Event::Apply(tagged("a", Some("n1"), "i:2"))),
            [touched(Some("n1"), Some("n1"))]
        );
        // A pending pod bound to a node: both tags.
        let pending = tagged("b", None, "i:1");
        assert_eq!(
            c.observe(&Event::Apply(pending)),
            [Touched {
                before: None,
                after: Some(None)
            }]
        );
        assert_eq!(
            c.observe(&Event::Apply(tagged("b", Some("n2"), "i:1"))),
            [Touched {
                before: Some(None),
                after: Some(Some("n2".into()))
            }]
        );
        assert_eq!(
            c.observe(&Event::Delete(a.clone())),
            [touched(Some("n1"), None)]
        );
        assert!(c.observe(&Event::Delete(a)).is_empty(), "unknown");
    }

    #[test]
    fn a_relist_reports_what_changed_in_the_gap_at_its_end() {
        let mut c = Changes::new(pod, node_of);
        for p in [
            tagged("same", Some("n1"), "i:1"),
            tagged("changed", Some("n2"), "i:1"),
            tagged("gone", Some("n3"), "i:1"),
        ] {
            c.observe(&Event::Apply(p));
        }
        assert!(c.observe(&Event::Init).is_empty());
        let relisted = || {
            [
                tagged("same", Some("n1"), "i:1"),
                tagged("changed", Some("n2"), "i:2"),
                tagged("new", Some("n4"), "i:1"),
            ]
        };
        for p in relisted() {
            assert!(c.observe(&Event::InitApply(p)).is_empty());
        }
        let mut out = c.observe(&Event::InitDone);
        out.sort_by_key(|t| format!("{t:?}"));
        let mut want = vec![
            touched(Some("n2"), Some("n2")),
            touched(None, Some("n4")),
            touched(Some("n3"), None),
        ];
        want.sort_by_key(|t| format!("{t:?}"));
        assert_eq!(out, want);
        // An unchanged re-list reports nothing.
        c.observe(&Event::Init);
        for p in relisted() {
            c.observe(&Event::InitApply(p));
        }
        assert!(c.observe(&Event::InitDone).is_empty());
    }
}
