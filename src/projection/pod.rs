//! [`PodFacts`]: what is read of a running pod. Built by [`PodFacts::of`]
//! and nowhere else.

use crate::compat::evaluate::{ContainerFacts, exempt_annotation, pod_containers};
use crate::reports::ObjectId;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use std::sync::Arc;

/// Pull secrets kept of one pod at most (its own, first ones first); a pod
/// naming more is judged with these, as `judgement::pull_secrets` reads
/// no more than this many of a pod's and its ServiceAccount's together.
pub const MAX_PULL_SECRETS: usize = 16;

/// Where a pod's registry credentials come from: its ServiceAccount and
/// its own `imagePullSecrets` (names, without repeats, at most
/// [`MAX_PULL_SECRETS`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PullSecretRefs {
    /// None: the namespace's `default`.
    pub service_account: Option<Box<str>>,
    pub names: Box<[Box<str>]>,
}

impl PullSecretRefs {
    pub fn of(spec: &PodSpec) -> Self {
        let mut names: Vec<Box<str>> = Vec::new();
        for r in spec.image_pull_secrets.iter().flatten() {
            if names.len() == MAX_PULL_SECRETS {
                break;
            }
            if !names.iter().any(|n| **n == *r.name) {
                names.push(r.name.as_str().into());
            }
        }
        PullSecretRefs {
            service_account: spec.service_account_name.as_deref().map(Box::from),
            names: names.into_boxed_slice(),
        }
    }

    /// The ServiceAccount whose secrets count too.
    pub fn service_account(&self) -> &str {
        self.service_account.as_deref().unwrap_or("default")
    }
}

/// A pod as the judgement (`Subject::RunningPod`), the controller's plan,
/// writer inventory and policy reports read it. Equal projections plan
/// alike: the controller's pod store compares them to tell which events
/// change a node's plan (status churn, labels, resourceVersion do not).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodFacts {
    /// "default" when the object names none.
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub uid: Box<str>,
    /// The controlling owner (the report's workload, or its ReplicaSet or Job).
    pub controller: Option<ObjectId>,
    /// The node it is bound to; None while pending.
    pub node: Option<Box<str>>,
    /// [`is_running`]: only running pods are judged and inventoried.
    pub running: bool,
    /// The `nfguard.io/exempt` annotation's reason.
    pub exempt_reason: Option<Box<str>>,
    pub pull_secrets: PullSecretRefs,
    /// Init, app, then ephemeral containers, each with its netfilter scope
    /// (which carries `hostNetwork`).
    pub containers: Box<[ContainerFacts]>,
}

/// Running, and not being deleted: the phase is all of the status that
/// counts (conditions and container statuses churn and are never read).
pub fn is_running(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

impl PodFacts {
    /// The one projection of a pod (a pod without a spec has no containers).
    pub fn of(pod: &Pod) -> Self {
        let m = &pod.metadata;
        let spec = pod.spec.as_ref();
        PodFacts {
            namespace: m.namespace.as_deref().unwrap_or("default").into(),
            name: m.name.as_deref().unwrap_or_default().into(),
            uid: m.uid.as_deref().unwrap_or_default().into(),
            controller: ObjectId::controller_of(m.owner_references.as_deref()),
            node: spec.and_then(|s| s.node_name.as_deref()).map(Box::from),
            running: is_running(pod),
            exempt_reason: m
                .annotations
                .as_ref()
                .and_then(exempt_annotation)
                .map(Box::from),
            pull_secrets: spec.map(PullSecretRefs::of).unwrap_or_default(),
            containers: spec.map(pod_containers).unwrap_or_default().into(),
        }
    }

    /// Whether any container can write netfilter rules (privileged or
    /// NET_ADMIN/ALL): a writer, and an `action: Taint` subject.
    pub fn can_write(&self) -> bool {
        self.containers.iter().any(ContainerFacts::can_write)
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::evaluate::Scope;
    use serde_json::{Value, json};
    use std::hash::{BuildHasher, Hash};

    /// A running hostNetwork + NET_ADMIN pod of a DaemonSet, with much the
    /// projection leaves out.
    fn base() -> Value {
        json!({
            "metadata": {"name": "proxy-1", "namespace": "kube-system", "uid": "u-1",
                         "resourceVersion": "7", "labels": {"app": "proxy"},
                         "deletionTimestamp": null,
                         "managedFields": [{"manager": "kubelet"}],
                         "annotations": {"nfguard.io/exempt": "audited", "other": "x"},
                         "ownerReferences": [
                             {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "proxy",
                              "uid": "ds-1", "controller": true},
                             {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "uid": "cm-1"}]},
            "spec": {"nodeName": "n1", "hostNetwork": true, "serviceAccountName": "sa",
                     "imagePullSecrets": [{"name": "regcred"}],
                     "initContainers": [{"name": "init", "image": "init:1"}],
                     "containers": [{"name": "c", "image": "proxy:1",
                                     "env": [{"name": "A", "value": "1"}],
                                     "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        })
    }

    fn changed(pointer: &str, value: Value) -> Pod {
        let mut v = base();
        match v.pointer_mut(pointer) {
            Some(slot) => *slot = value,
            None => panic!("no {pointer} in the base pod"),
        }
        serde_json::from_value(v).unwrap()
    }

    fn pod() -> Pod {
        serde_json::from_value(base()).unwrap()
    }

    fn hash(f: &PodFacts) -> u64 {
        let mut h = foldhash::quality::FixedState::default().build_hasher();
        f.hash(&mut h);
        std::hash::Hasher::finish(&h)
    }

    #[test]
    fn a_pod_projects_to_what_is_read_of_it() {
        let f = PodFacts::of(&pod());
        assert_eq!(
            (&*f.namespace, &*f.name, &*f.uid),
            ("kube-system", "proxy-1", "u-1")
        );
        let owner = f.controller.as_ref().unwrap();
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("DaemonSet", "proxy")
        );
        assert_eq!(f.node.as_deref(), Some("n1"));
        assert!(f.running && f.can_write());
        assert_eq!(f.exempt_reason.as_deref(), Some("audited"));
        assert_eq!(f.pull_secrets.service_account(), "sa");
        assert_eq!(&*f.pull_secrets.names, [Box::from("regcred")]);
        let scopes: Vec<_> = f.containers.iter().map(|c| (&*c.name, c.scope)).collect();
        assert_eq!(
            scopes,
            [("init", Scope::HostReadOnly), ("c", Scope::HostShared)]
        );
        assert_eq!(f.key(), "kube-system/proxy-1");
    }

    #[test]
    fn equal_pods_project_equal_and_unread_fields_do_not_count() {
        let f = PodFacts::of(&pod());
        assert_eq!(f, PodFacts::of(&pod()));
        for (pointer, value) in [
            ("/metadata/resourceVersion", json!("8")),
            ("/metadata/labels", json!({"app": "other"})),
            ("/metadata/managedFields", json!([])),
            ("/metadata/annotations/other", json!("y")),
            ("/metadata/ownerReferences/1/name", json!("cm2")),
            ("/spec/containers/0/env", json!([])),
            ("/status/podIP", json!("10.0.0.2")),
            ("/status/conditions/0/status", json!("False")),
        ] {
            let other = PodFacts::of(&changed(pointer, value));
            assert_eq!(other, f, "{pointer}");
            assert_eq!(hash(&other), hash(&f), "{pointer}");
        }
    }

    #[test]
    fn every_read_field_changes_the_projection_and_its_hash() {
        let f = PodFacts::of(&pod());
        for (pointer, value) in [
            ("/metadata/name", json!("proxy-2")),
            ("/metadata/namespace", json!("other")),
            ("/metadata/uid", json!("u-2")),
            ("/metadata/annotations/nfguard.io~1exempt", json!("why")),
            ("/metadata/ownerReferences/0/name", json!("proxy2")),
            ("/metadata/deletionTimestamp", json!("2026-01-01T00:00:00Z")),
            ("/spec/nodeName", json!("n2")),
            ("/spec/hostNetwork", json!(false)),
            ("/spec/serviceAccountName", json!("other")),
            ("/spec/imagePullSecrets", json!([{"name": "other"}])),
            ("/spec/initContainers/0/image", json!("init:2")),
            ("/spec/containers/0/name", json!("c2")),
            ("/spec/containers/0/image", json!("proxy:2")),
            (
                "/spec/containers/0/securityContext",
                json!({"privileged": true}),
            ),
            ("/status/phase", json!("Succeeded")),
        ] {
            let other = PodFacts::of(&changed(pointer, value));
            assert_ne!(other, f, "{pointer}");
            assert_ne!(hash(&other), hash(&f), "{pointer}");
        }
    }

    #[test]
    fn pull_secret_names_are_kept_once_and_bounded() {
        let spec: PodSpec = serde_json::from_value(json!({
            "imagePullSecrets": [{"name": "a"}, {"name": "b"}, {"name": "a"}],
            "containers": []
        }))
        .unwrap();
        let refs = PullSecretRefs::of(&spec);
        assert_eq!(&*refs.names, [Box::from("a"), Box::from("b")]);
        assert_eq!(refs.service_account(), "default");
        let many: PodSpec = serde_json::from_value(json!({
            "imagePullSecrets": (0..40).map(|i| json!({"name": format!("s{i}")})).collect::<Vec<_>>(),
            "containers": []
        }))
        .unwrap();
        assert_eq!(PullSecretRefs::of(&many).names.len(), MAX_PULL_SECRETS);
    }

    #[test]
    fn a_pod_without_spec_or_metadata_projects_to_nothing_to_judge() {
        let f = PodFacts::of(&Pod::default());
        assert_eq!((&*f.namespace, &*f.name), ("default", ""));
        assert!(f.containers.is_empty() && !f.running && !f.can_write() && f.node.is_none());
    }
}
