//! Pod UPDATE: of a running pod's spec only container images can change
//! (`kubectl set image pod/x`), and a new image is a new iptables. An UPDATE
//! that swaps an image is judged like a CREATE; any other pod update (labels,
//! annotations, finalizers) is admitted at once. The webhook configuration's
//! matchConditions make the same cut before the request is even sent.

use serde::Deserialize;

/// What of a pod an image swap changes: each container's name and image.
#[derive(Deserialize, PartialEq, Eq, Debug)]
struct Images {
    spec: ImageSpec,
}

#[derive(Deserialize, PartialEq, Eq, Debug)]
#[serde(rename_all = "camelCase")]
struct ImageSpec {
    #[serde(default)]
    init_containers: Option<Vec<NamedImage>>,
    #[serde(default)]
    containers: Option<Vec<NamedImage>>,
    #[serde(default)]
    ephemeral_containers: Option<Vec<NamedImage>>,
}

#[derive(Deserialize, PartialEq, Eq, Debug)]
struct NamedImage {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    image: Option<String>,
}

/// Whether an UPDATE from `old` to `new` (the review's oldObject and object,
/// JSON) changes what any container runs. When either side cannot be read,
/// or `old` is missing, it may: true (judged, never waved through).
pub fn images_changed(old: Option<&str>, new: &str) -> bool {
    let read = |json: &str| serde_json::from_str::<Images>(json).ok();
    match (old.and_then(read), read(new)) {
        (Some(old), Some(new)) => old != new,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(init: &str, app: &str) -> String {
        json!({"metadata": {"name": "p", "labels": {"a": "1"}},
               "spec": {"hostNetwork": true,
                        "initContainers": [{"name": "i", "image": init}],
                        "containers": [{"name": "c", "image": app, "command": ["sleep"]}]}})
        .to_string()
    }

    #[test]
    fn an_image_swap_in_any_container_is_a_change() {
        let old = pod("busybox:1", "iptables:1.8.11");
        assert!(images_changed(
            Some(&old),
            &pod("busybox:1", "iptables:1.8.7")
        ));
        assert!(images_changed(
            Some(&old),
            &pod("busybox:2", "iptables:1.8.11")
        ));
    }

    #[test]
    fn metadata_only_updates_are_not() {
        let old = pod("busybox:1", "iptables:1.8.11");
        let mut relabelled: serde_json::Value = serde_json::from_str(&old).unwrap();
        relabelled["metadata"]["labels"]["a"] = json!("2");
        relabelled["metadata"]["finalizers"] = json!(["x/y"]);
        relabelled["spec"]["activeDeadlineSeconds"] = json!(30);
        assert!(!images_changed(Some(&old), &relabelled.to_string()));
    }

    #[test]
    fn unreadable_or_missing_old_objects_are_judged() {
        let new = pod("busybox:1", "iptables:1.8.11");
        assert!(images_changed(None, &new));
        assert!(images_changed(Some("{\"spec\": 5}"), &new));
        assert!(images_changed(Some(&new), "[]"));
    }
}
