//! Node labels that let workloads be steered to compatible nodes (pure).
//!
//! Applied with a JSON merge patch that names only nfguard's keys, `null`
//! removing a key: the patch is computed against the Node's current labels,
//! so a node already in sync costs no write.

use crate::api::NodeNetfilterProfileStatus;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

use crate::wellknown::{LABEL_BACKEND, LABEL_MIN_READER, LABEL_VERSION, MANAGED_LABELS};

/// The labels a node should carry for its profile status (None: no profile,
/// so none of nfguard's labels). A fact the profile does not state is absent.
pub fn desired_labels(
    status: Option<&NodeNetfilterProfileStatus>,
) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    let Some(s) = status else {
        return out;
    };
    if let Some(b) = s.active_backend {
        out.insert(LABEL_BACKEND, b.as_str().to_string());
    }
    if let Some(v) = s.iptables.as_ref().and_then(|f| f.version) {
        out.insert(LABEL_VERSION, v.to_string());
    }
    if let Some(v) = s.min_reader_version {
        out.insert(LABEL_MIN_READER, v.to_string());
    }
    out
}

/// The merge patch bringing `current` to `desired` for nfguard's keys only;
/// None when they already agree.
pub fn label_patch(
    current: Option<&BTreeMap<String, String>>,
    desired: &BTreeMap<&'static str, String>,
) -> Option<Value> {
    let mut changes = Map::new();
    for key in MANAGED_LABELS {
        let have = current.and_then(|c| c.get(key));
        match (have, desired.get(key)) {
            (Some(h), Some(d)) if h == d => {}
            (None, None) => {}
            (_, Some(d)) => {
                changes.insert(key.to_string(), Value::String(d.clone()));
            }
            (Some(_), None) => {
                changes.insert(key.to_string(), Value::Null);
            }
        }
    }
    if changes.is_empty() {
        return None;
    }
    Some(serde_json::json!({ "metadata": { "labels": Value::Object(changes) } }))
}

/// Whether `patch` changes or removes a label the node already had (not
/// only adds first values).
pub fn relabels(current: Option<&BTreeMap<String, String>>, patch: &Value) -> bool {
    let Some(current) = current else {
        return false;
    };
    patch["metadata"]["labels"]
        .as_object()
        .is_some_and(|changes| changes.keys().any(|k| current.contains_key(k)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ActiveBackend;
    use crate::facts::{Backend, IptablesFacts};

    fn status(
        backend: ActiveBackend,
        version: &str,
        min: Option<&str>,
    ) -> NodeNetfilterProfileStatus {
        NodeNetfilterProfileStatus {
            active_backend: Some(backend),
            iptables: Some(IptablesFacts {
                version: Some(version.parse().unwrap()),
                backend: Some(Backend::Nft),
                ..Default::default()
            }),
            min_reader_version: min.map(|m| m.parse().unwrap()),
            ..Default::default()
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn labels_from_a_profile() {
        let s = status(ActiveBackend::Nft, "1:1.8.9-2", Some("1.8.8"));
        let d = desired_labels(Some(&s));
        assert_eq!(d.get(LABEL_BACKEND).map(String::as_str), Some("nft"));
        assert_eq!(d.get(LABEL_VERSION).map(String::as_str), Some("1.8.9"));
        assert_eq!(d.get(LABEL_MIN_READER).map(String::as_str), Some("1.8.8"));
    }

    #[test]
    fn min_reader_absent_when_none_and_every_backend_value() {
        for (b, want) in [
            (ActiveBackend::Nft, "nft"),
            (ActiveBackend::Legacy, "legacy"),
            (ActiveBackend::Mixed, "mixed"),
            (ActiveBackend::None, "none"),
        ] {
            let d = desired_labels(Some(&status(b, "1.8.7", None)));
            assert_eq!(d.get(LABEL_BACKEND).map(String::as_str), Some(want));
            assert!(!d.contains_key(LABEL_MIN_READER));
        }
    }

    #[test]
    fn patch_sets_changes_and_removes_stale_keys_only() {
        let s = status(ActiveBackend::Legacy, "1.8.7", None);
        let current = labels(&[
            ("kubernetes.io/arch", "amd64"),
            (LABEL_BACKEND, "nft"),
            (LABEL_VERSION, "1.8.7"),
            (LABEL_MIN_READER, "1.8.8"),
        ]);
        let p = label_patch(Some(&current), &desired_labels(Some(&s))).unwrap();
        assert_eq!(
            p,
            serde_json::json!({"metadata": {"labels": {
                LABEL_BACKEND: "legacy", LABEL_MIN_READER: null
            }}})
        );
    }

    #[test]
    fn in_sync_node_needs_no_patch() {
        let s = status(ActiveBackend::Nft, "1.8.9", Some("1.8.8"));
        let current = labels(&[
            (LABEL_BACKEND, "nft"),
            (LABEL_VERSION, "1.8.9"),
            (LABEL_MIN_READER, "1.8.8"),
        ]);
        assert_eq!(label_patch(Some(&current), &desired_labels(Some(&s))), None);
    }

    #[test]
    fn no_profile_removes_every_managed_label() {
        let current = labels(&[
            (LABEL_BACKEND, "nft"),
            (LABEL_VERSION, "1.8.9"),
            ("other", "x"),
        ]);
        let p = label_patch(Some(&current), &desired_labels(None)).unwrap();
        assert_eq!(
            p,
            serde_json::json!({"metadata": {"labels": {LABEL_BACKEND: null, LABEL_VERSION: null}}})
        );
        assert_eq!(label_patch(None, &desired_labels(None)), None);
    }

    #[test]
    fn only_changing_or_removing_a_label_relabels() {
        let desired = desired_labels(Some(&status(ActiveBackend::Nft, "1.8.9", None)));
        let first = label_patch(Some(&labels(&[("team", "a")])), &desired).unwrap();
        assert!(!relabels(Some(&labels(&[("team", "a")])), &first));
        assert!(!relabels(None, &first));
        let had = labels(&[(LABEL_BACKEND, "legacy"), (LABEL_VERSION, "1.8.9")]);
        let change = label_patch(Some(&had), &desired).unwrap();
        assert!(relabels(Some(&had), &change));
        let removal = label_patch(Some(&had), &desired_labels(None)).unwrap();
        assert!(relabels(Some(&had), &removal));
    }
}
