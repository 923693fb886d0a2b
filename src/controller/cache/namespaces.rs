//! Namespace labels, which `namespaceSelector`s of NetfilterPolicies are
//! matched against: a metadata-only reflector store of Namespaces (as the
//! webhook keeps one). Which watch events change a namespace's labels (the
//! controller then re-judges the nodes) is `stores::NamespaceFeed`'s call.

use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use std::collections::BTreeMap;

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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    /// A namespace's metadata with these labels.
    pub(crate) fn ns(name: &str, labels: &[(&str, &str)]) -> NamespaceMeta {
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
