//! [`SlimNode`]: a Node as the controller keeps it. Decoded straight from
//! the API server's JSON (a Node's status, images and most of its spec are
//! skipped by the decoder, never built), or made from a whole [`Node`].

use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::ClusterResourceScope;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// The Node labels the controller reads: the platform's (which manifest of
/// an image the node runs) and nfguard's own. A label the plan starts to
/// read must be added here, or it reads as absent.
pub const NODE_LABELS_READ: [&str; 5] = [
    crate::facts::platform::OS_LABEL,
    crate::facts::platform::ARCH_LABEL,
    crate::wellknown::LABEL_BACKEND,
    crate::wellknown::LABEL_VERSION,
    crate::wellknown::LABEL_MIN_READER,
];

/// A Node as the controller reads it: name, uid, resourceVersion (the taint
/// patch's precondition), deletionTimestamp, the labels in
/// [`NODE_LABELS_READ`] (by position, not as the `BTreeMap` of
/// `metadata.labels`, which stays None: a map's first node alone takes
/// 544 bytes), and the taints. k8s-openapi's `Node` takes 1,496 bytes
/// inline before any of its strings (its status alone 888): at 5,000 nodes
/// the controller's Node store, its index and change tracker held 13.9 MiB
/// as slimmed `Node`s (`bench_cluster store-memory`).
///
/// It is a kube [`Resource`](kube::Resource) of kind Node, so the
/// Controller's store and `Api<SlimNode>` watches use it as they would a
/// Node. Changes to what it drops (heartbeats, other labels, annotations)
/// are no change to it: the controller's fingerprint is taken of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SlimNode {
    pub metadata: ObjectMeta,
    /// The value of each label of [`NODE_LABELS_READ`], in its order.
    labels: [Option<Box<str>>; NODE_LABELS_READ.len()],
    pub taints: Option<Vec<Taint>>,
}

impl SlimNode {
    /// The node's name ("" if the object has none).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The labels read ([`NODE_LABELS_READ`]) that the node carries.
    pub fn labels(&self) -> BTreeMap<String, String> {
        NODE_LABELS_READ
            .iter()
            .zip(&self.labels)
            .filter_map(|(k, v)| Some((k.to_string(), v.as_deref()?.to_string())))
            .collect()
    }

    fn of(metadata: ObjectMeta, taints: Option<Vec<Taint>>) -> Self {
        let mut all = metadata.labels.unwrap_or_default();
        SlimNode {
            metadata: ObjectMeta {
                name: metadata.name,
                uid: metadata.uid,
                resource_version: metadata.resource_version,
                deletion_timestamp: metadata.deletion_timestamp,
                ..ObjectMeta::default()
            },
            labels: NODE_LABELS_READ.map(|k| all.remove(k).map(Box::from)),
            taints,
        }
    }
}

impl From<Node> for SlimNode {
    fn from(node: Node) -> Self {
        SlimNode::of(node.metadata, node.spec.and_then(|s| s.taints))
    }
}

/// The parts of a Node's JSON that are decoded; serde skips the rest
/// without building it.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Option<WireSpec>,
}

#[derive(Deserialize)]
struct WireSpec {
    #[serde(default)]
    taints: Option<Vec<Taint>>,
}

impl<'de> Deserialize<'de> for SlimNode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Wire { metadata, spec } = Wire::deserialize(d)?;
        Ok(SlimNode::of(metadata, spec.and_then(|s| s.taints)))
    }
}

impl kube::Resource for SlimNode {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Node".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;
    use serde_json::json;

    fn node_json() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "7",
                         "labels": {"kubernetes.io/arch": "arm64", "topology.kubernetes.io/zone": "z1",
                                    "nfguard.io/iptables-backend": "nft"},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                         "managedFields": [{"manager": "kubelet", "operation": "Update",
                                            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {}}}]},
            "spec": {"podCIDR": "10.0.0.0/24",
                     "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "images": [{"names": ["reg.test/big:1"], "sizeBytes": 1}]}
        })
    }

    #[test]
    fn decoding_keeps_what_is_read_and_equals_projecting_a_whole_node() {
        let slim: SlimNode = serde_json::from_value(node_json()).unwrap();
        let whole: Node = serde_json::from_value(node_json()).unwrap();
        assert_eq!(slim, SlimNode::from(whole));
        assert_eq!(slim.name(), "n1");
        assert_eq!(slim.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(slim.metadata.resource_version.as_deref(), Some("7"));
        let labels = slim.labels();
        assert_eq!(
            labels.keys().collect::<Vec<_>>(),
            ["kubernetes.io/arch", crate::wellknown::LABEL_BACKEND]
        );
        assert_eq!(labels["kubernetes.io/arch"], "arm64");
        let meta = &slim.metadata;
        assert!(
            meta.labels.is_none() && meta.annotations.is_none() && meta.managed_fields.is_none()
        );
        assert_eq!(slim.taints.as_ref().unwrap()[0].key, "k");
    }

    #[test]
    fn a_node_without_spec_or_labels_decodes() {
        let slim: SlimNode = serde_json::from_value(json!({"metadata": {"name": "bare"}})).unwrap();
        assert_eq!(slim.name(), "bare");
        assert!(slim.taints.is_none() && slim.labels().is_empty());
    }

    #[test]
    fn it_is_addressed_as_a_node() {
        assert_eq!(SlimNode::url_path(&(), None), "/api/v1/nodes");
        let r =
            SlimNode::from(serde_json::from_value::<Node>(node_json()).unwrap()).object_ref(&());
        assert_eq!(
            (
                r.kind.as_deref(),
                r.api_version.as_deref(),
                r.name.as_deref()
            ),
            (Some("Node"), Some("v1"), Some("n1"))
        );
        assert_eq!(r.uid.as_deref(), Some("u1"));
    }
}
