//! Namespace labels, which `namespaceSelector`s of NetfilterPolicies are
//! matched against: a metadata-only reflector store of Namespaces (as the
//! webhook keeps one), and which watch events change a namespace's labels
//! (the controller then re-judges the nodes).

use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use std::collections::{BTreeMap, HashMap};

/// A Namespace's metadata: labels are all a policy selects on.
pub type NamespaceMeta = PartialObjectMeta<Namespace>;

pub type Labels = BTreeMap<String, String>;

/// The labels of namespace `ns` in `store`; None when the store does not
/// know it (then only `kubernetes.io/metadata.name` is assumed, as the
/// webhook does).
pub fn labels_in(store: &Store<NamespaceMeta>, ns: &str) -> Option<Labels> {
    store
        .get(&ObjectRef::new(ns))
        .map(|n| n.metadata.labels.clone().unwrap_or_default())
}

/// Tells, event by event, whether a namespace seen before changed labels.
/// A namespace seen for the first time runs no pods yet (its pods' own
/// watch events bring their nodes), and a deleted one takes its pods along.
#[derive(Debug, Default)]
pub struct LabelChanges {
    known: HashMap<String, Labels>,
    /// During a re-list: what was known before it.
    before_relist: HashMap<String, Labels>,
    changed_in_relist: bool,
}

impl LabelChanges {
    /// Whether this event changes the labels of a namespace known before.
    /// A re-list (after a watch gap) reports a change once, at its end.
    pub fn observe(&mut self, event: &Event<NamespaceMeta>) -> bool {
        match event {
            Event::Apply(ns) => {
                let Some((name, labels)) = name_and_labels(ns) else {
                    return false;
                };
                self.known
                    .insert(name, labels.clone())
                    .is_some_and(|before| before != labels)
            }
            Event::Delete(ns) => {
                if let Some(name) = ns.metadata.name.as_deref() {
                    self.known.remove(name);
                }
                false
            }
            Event::Init => {
                self.before_relist = std::mem::take(&mut self.known);
                self.changed_in_relist = false;
                false
            }
            Event::InitApply(ns) => {
                if let Some((name, labels)) = name_and_labels(ns) {
                    let changed = self
                        .before_relist
                        .get(&name)
                        .is_some_and(|before| *before != labels);
                    self.changed_in_relist |= changed;
                    self.known.insert(name, labels);
                }
                false
            }
            Event::InitDone => {
                self.before_relist = HashMap::new();
                std::mem::take(&mut self.changed_in_relist)
            }
        }
    }
}

fn name_and_labels(ns: &NamespaceMeta) -> Option<(String, Labels)> {
    let name = ns.metadata.name.clone()?;
    Some((name, ns.metadata.labels.clone().unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector;

    fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceMeta {
        let mut m = NamespaceMeta::default();
        m.metadata.name = Some(name.into());
        m.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        m
    }

    #[test]
    fn only_a_known_namespace_changing_labels_is_a_change() {
        let mut c = LabelChanges::default();
        let initial = [
            Event::Init,
            Event::InitApply(ns("net", &[("team", "net")])),
            Event::InitDone,
        ];
        assert!(
            initial.iter().all(|e| !c.observe(e)),
            "first list: no change"
        );
        assert!(!c.observe(&Event::Apply(ns("new", &[]))), "a new namespace");
        let mut other_meta = ns("net", &[("team", "net")]);
        other_meta.metadata.resource_version = Some("9".into());
        assert!(!c.observe(&Event::Apply(other_meta)), "same labels");
        assert!(c.observe(&Event::Apply(ns("net", &[]))), "label removed");
        assert!(c.observe(&Event::Apply(ns("net", &[("team", "x")]))));
        assert!(!c.observe(&Event::Delete(ns("net", &[]))));
        assert!(!c.observe(&Event::Apply(ns("net", &[]))), "re-created");
    }

    #[test]
    fn a_relist_reports_a_change_made_during_the_gap_once_at_its_end() {
        let mut c = LabelChanges::default();
        c.observe(&Event::Apply(ns("net", &[("team", "net")])));
        assert!(!c.observe(&Event::Init));
        assert!(!c.observe(&Event::InitApply(ns("net", &[]))));
        assert!(c.observe(&Event::InitDone));
        // An unchanged re-list is no change.
        c.observe(&Event::Init);
        c.observe(&Event::InitApply(ns("net", &[])));
        assert!(!c.observe(&Event::InitDone));
    }

    #[test]
    fn labels_come_from_the_store_and_unknown_is_none() {
        let (store, mut writer) = reflector::store::<NamespaceMeta>();
        writer.apply_watcher_event(&Event::Apply(ns("net", &[("team", "net")])));
        let mut bare = NamespaceMeta::default();
        bare.metadata.name = Some("bare".into());
        writer.apply_watcher_event(&Event::Apply(bare));
        assert_eq!(
            labels_in(&store, "net"),
            Some(Labels::from([("team".into(), "net".into())]))
        );
        assert_eq!(labels_in(&store, "bare"), Some(Labels::new()));
        assert_eq!(labels_in(&store, "gone"), None);
    }
}
