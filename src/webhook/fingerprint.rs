//! What of a watched object can change a verdict, hashed: the facts
//! generation (and with it the decision cache) moves only when that changes.
//!
//! Reporters rewrite every profile's `lastProbeTime` each heartbeat, and
//! kubelets rewrite Node status; in a cluster of thousands of nodes that is
//! a watch event every few milliseconds. Counting each one would void the
//! decision cache before anything could hit it. Only fields `evaluate` and
//! candidate selection read are hashed.

use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::runtime::watch::hash_json;
use k8s_openapi::api::core::v1::{Namespace, Node};

/// A watched kind's verdict-relevant content.
pub trait Fingerprint: kube::Resource {
    fn fingerprint(&self) -> u64;

    /// Drop what no verdict reads before the object is stored: every
    /// kind's managedFields (a JSON tree per field manager, often the
    /// largest part of a small object), and more where a kind says so.
    fn slim(&mut self) {
        self.meta_mut().managed_fields = None;
    }
}

impl Fingerprint for NodeNetfilterProfile {
    fn fingerprint(&self) -> u64 {
        let status = self.status.as_ref().map(|s| {
            let mut s = s.clone();
            // Heartbeat and controller bookkeeping: never read by `evaluate`.
            s.last_probe_time = None;
            s.probe_interval_seconds = None;
            s.conditions = None;
            s
        });
        hash_json(&(&self.metadata.name, &self.spec, &status))
    }
}

impl Fingerprint for Node {
    fn fingerprint(&self) -> u64 {
        // Candidate selection reads the name, labels and taints (platform
        // labels included); the rest of a Node's status churns.
        let spec = self.spec.as_ref();
        hash_json(&(
            &self.metadata.name,
            &self.metadata.labels,
            spec.and_then(|s| s.taints.as_ref()),
            spec.and_then(|s| s.unschedulable),
        ))
    }

    /// The status (kubelet's heartbeats, the images it holds, conditions)
    /// and annotations are never read: candidate selection reads the
    /// fingerprint's fields.
    fn slim(&mut self) {
        self.metadata.managed_fields = None;
        self.metadata.annotations = None;
        self.status = None;
    }
}

impl Fingerprint for Namespace {
    fn fingerprint(&self) -> u64 {
        hash_json(&(&self.metadata.name, &self.metadata.labels))
    }
}

impl Fingerprint for NetfilterPolicy {
    fn fingerprint(&self) -> u64 {
        hash_json(&(&self.metadata.name, &self.spec))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn profile(probe_time: &str, min_reader: &str) -> NodeNetfilterProfile {
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": probe_time},
            "spec": {"nodeName": "n1"},
            "status": {"minReaderVersion": min_reader, "lastProbeTime": probe_time,
                       "conditions": [{"type": "Fresh", "status": "True", "reason": "R", "message": "",
                                       "lastTransitionTime": probe_time}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_slimmed_node_keeps_what_candidates_read() {
        let mut n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/arch": "arm64"},
                         "annotations": {"a": "b"},
                         "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "unschedulable": true},
            "status": {"images": [{"names": ["reg.test/big:1"], "sizeBytes": 1}]}
        }))
        .unwrap();
        let before = n.fingerprint();
        n.slim();
        assert_eq!(n.fingerprint(), before);
        assert!(n.status.is_none() && n.metadata.annotations.is_none());
        assert!(n.metadata.managed_fields.is_none());
    }

    #[test]
    fn heartbeats_do_not_count_facts_do() {
        let a = profile("2026-01-01T00:00:00Z", "1.8.8");
        let b = profile("2026-01-01T00:01:00Z", "1.8.8");
        let c = profile("2026-01-01T00:01:00Z", "1.8.9");
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(b.fingerprint(), c.fingerprint());
    }

    #[test]
    fn node_status_churn_does_not_count_labels_and_taints_do() {
        let node = |labels: serde_json::Value, ready: &str| -> Node {
            serde_json::from_value(json!({
                "metadata": {"name": "n1", "labels": labels},
                "spec": {},
                "status": {"conditions": [{"type": "Ready", "status": ready}]}
            }))
            .unwrap()
        };
        let a = node(json!({"kubernetes.io/arch": "amd64"}), "True");
        let b = node(json!({"kubernetes.io/arch": "amd64"}), "False");
        let c = node(json!({"kubernetes.io/arch": "arm64"}), "False");
        assert_eq!(a.fingerprint(), b.fingerprint());
        assert_ne!(b.fingerprint(), c.fingerprint());
        let mut d = c.clone();
        d.spec.as_mut().unwrap().taints = Some(vec![k8s_openapi::api::core::v1::Taint {
            key: "k".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
        assert_ne!(c.fingerprint(), d.fingerprint());
    }
}
