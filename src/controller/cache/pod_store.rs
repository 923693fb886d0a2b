//! The controller's pods: the projections ([`PodFacts`]) of the pods that
//! can write netfilter rules, by namespace and name and by node, fed from
//! the Pod watch (pure, tested by feeding events in). A pod's projection is
//! its change test: an event whose projection equals the stored one
//! (status churn, labels, a new resourceVersion) changes no node's plan.
//! A re-list after a watch gap reports what changed or went away in the
//! gap once, at its end, as the other stores do.

use crate::projection::PodFacts;
use kube::runtime::watcher::Event;
use std::sync::Arc;

/// (namespace, name): the store's key. Shares the projection's strings.
type PodKey = (Arc<str>, Arc<str>);

fn key(p: &PodFacts) -> PodKey {
    (p.namespace.clone(), p.name.clone())
}

/// How a LIST sorts pods: by namespace, then name.
fn order(p: &PodFacts) -> (&str, &str) {
    (&p.namespace, &p.name)
}

type ByKey = foldhash::HashMap<PodKey, Arc<PodFacts>>;

/// Writer pods by namespace and name, and by the node they are bound to.
#[derive(Debug, Default)]
pub struct PodStore {
    pods: ByKey,
    /// Each node's pods in [`order`]: a sorted vector, not a tree (a node
    /// runs a few writers; a tree's first leaf alone takes ~0.5 KiB).
    by_node: foldhash::HashMap<Box<str>, Vec<Arc<PodFacts>>>,
    /// During a re-list: what it has listed so far.
    relist: Option<ByKey>,
}

/// The nodes of `before` and `after`, when they differ.
fn touched(before: Option<&PodFacts>, after: Option<&PodFacts>, nodes: &mut Vec<String>) {
    if before == after {
        return;
    }
    for p in [before, after].into_iter().flatten() {
        if let Some(n) = p.node.as_deref() {
            nodes.push(n.to_string());
        }
    }
}

impl PodStore {
    /// Apply one watch event of projected pods; the nodes whose pods changed
    /// in what is read of them (sorted, once each). A deletion needs only
    /// the projection's namespace and name.
    pub fn apply(&mut self, event: Event<PodFacts>) -> Vec<String> {
        let mut nodes = Vec::new();
        match event {
            Event::Apply(p) => {
                let k = key(&p);
                let before = self.pods.get(&k).cloned();
                if before.as_deref() != Some(&p) {
                    let p = Arc::new(p);
                    if let Some(before) = &before {
                        self.unindex(before);
                    }
                    self.index(&p);
                    self.pods.insert(k, p.clone());
                    touched(before.as_deref(), Some(&p), &mut nodes);
                }
            }
            Event::Delete(p) => {
                let k = key(&p);
                if let Some(before) = self.pods.remove(&k) {
                    self.unindex(&before);
                    touched(Some(&before), None, &mut nodes);
                }
            }
            Event::Init => self.relist = Some(ByKey::default()),
            Event::InitApply(p) => {
                self.relist
                    .get_or_insert_with(ByKey::default)
                    .insert(key(&p), Arc::new(p));
            }
            Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                let mut before = std::mem::replace(&mut self.pods, listed);
                for (k, now) in &self.pods {
                    touched(before.remove(k).as_deref(), Some(now), &mut nodes);
                }
                // Whatever the re-list no longer holds went away in the gap.
                for gone in before.values() {
                    touched(Some(gone), None, &mut nodes);
                }
                self.by_node.clear();
                let pods: Vec<_> = self.pods.values().cloned().collect();
                for p in &pods {
                    self.index(p);
                }
            }
        }
        nodes.sort();
        nodes.dedup();
        nodes
    }

    fn index(&mut self, p: &Arc<PodFacts>) {
        let Some(node) = p.node.as_deref() else {
            return;
        };
        if !self.by_node.contains_key(node) {
            self.by_node.insert(node.into(), Vec::new());
        }
        let Some(pods) = self.by_node.get_mut(node) else {
            return;
        };
        match pods.binary_search_by(|q| order(q).cmp(&order(p))) {
            Ok(i) => pods[i] = p.clone(),
            Err(i) => pods.insert(i, p.clone()),
        }
    }

    fn unindex(&mut self, before: &PodFacts) {
        let Some(node) = before.node.as_deref() else {
            return;
        };
        let Some(pods) = self.by_node.get_mut(node) else {
            return;
        };
        if let Ok(i) = pods.binary_search_by(|q| order(q).cmp(&order(before))) {
            pods.remove(i);
        }
        if pods.is_empty() {
            self.by_node.remove(node);
        }
    }

    /// The pods on `node`, by namespace and name.
    pub fn on(&self, node: &str) -> Vec<Arc<PodFacts>> {
        self.by_node
            .get(node)
            .map(|pods| pods.to_vec())
            .unwrap_or_default()
    }

    /// Every pod kept, bound or not.
    pub fn all(&self) -> Vec<Arc<PodFacts>> {
        self.pods.values().cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    fn pod(ns: &str, name: &str, node: Option<&str>, image: &str) -> PodFacts {
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"nodeName": node, "hostNetwork": true,
                     "containers": [{"name": "c", "image": image,
                                     "securityContext": {"privileged": true}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        PodFacts::of(&p)
    }

    fn names(s: &PodStore, node: &str) -> Vec<String> {
        s.on(node).iter().map(|p| p.key()).collect()
    }

    #[test]
    fn pods_are_indexed_by_node_in_list_order_and_report_their_nodes() {
        let mut s = PodStore::default();
        let mut apply = |p| s.apply(Event::Apply(p));
        assert_eq!(
            apply(pod("kube-system", "proxy", Some("n1"), "i:1")),
            ["n1"]
        );
        assert_eq!(apply(pod("default", "vpn", Some("n1"), "i:1")), ["n1"]);
        assert_eq!(apply(pod("default", "cni", Some("n2"), "i:1")), ["n2"]);
        assert!(apply(pod("default", "pending", None, "i:1")).is_empty());
        assert!(
            apply(pod("default", "vpn", Some("n1"), "i:1")).is_empty(),
            "same"
        );
        assert_eq!(names(&s, "n1"), ["default/vpn", "kube-system/proxy"]);
        assert_eq!(names(&s, "n2"), ["default/cni"]);
        assert!(names(&s, "n9").is_empty());
        assert_eq!(s.len(), 4, "a pending pod is kept, on no node");
        // Bound: the pending pod joins its node; moved: both nodes.
        let mut apply = |p| s.apply(Event::Apply(p));
        assert_eq!(apply(pod("default", "pending", Some("n2"), "i:1")), ["n2"]);
        assert_eq!(
            apply(pod("default", "cni", Some("n3"), "i:2")),
            ["n2", "n3"]
        );
        assert_eq!(names(&s, "n2"), ["default/pending"]);
        let gone = pod("default", "vpn", Some("n1"), "");
        assert_eq!(s.apply(Event::Delete(gone.clone())), ["n1"]);
        assert!(s.apply(Event::Delete(gone)).is_empty(), "unknown");
        assert_eq!(names(&s, "n1"), ["kube-system/proxy"]);
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn a_relist_reports_what_changed_in_the_gap_once_at_its_end() {
        let mut s = PodStore::default();
        for p in [
            pod("a", "same", Some("n1"), "i:1"),
            pod("a", "changed", Some("n2"), "i:1"),
            pod("a", "gone", Some("n3"), "i:1"),
        ] {
            s.apply(Event::Apply(p));
        }
        let relisted = || {
            [
                pod("a", "same", Some("n1"), "i:1"),
                pod("a", "changed", Some("n2"), "i:2"),
                pod("a", "new", Some("n4"), "i:1"),
            ]
        };
        assert!(s.apply(Event::Init).is_empty());
        for p in relisted() {
            assert!(s.apply(Event::InitApply(p)).is_empty());
        }
        // Until the re-list ends, the store answers from before it.
        assert_eq!(names(&s, "n3"), ["a/gone"]);
        assert_eq!(s.apply(Event::InitDone), ["n2", "n3", "n4"]);
        assert!(names(&s, "n3").is_empty());
        assert_eq!(names(&s, "n4"), ["a/new"]);
        assert_eq!(s.len(), 3);
        // An unchanged re-list reports nothing.
        s.apply(Event::Init);
        for p in relisted() {
            s.apply(Event::InitApply(p));
        }
        assert!(s.apply(Event::InitDone).is_empty());
        assert_eq!(names(&s, "n2"), ["a/changed"]);
    }
}
