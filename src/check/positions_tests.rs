use super::*;
use crate::compat::evaluate::{ImageResolutions, Workload};

fn yaml(text: &str) -> Vec<Outline> {
    let n = serde_yaml::Deserializer::from_str(text).count();
    file_outlines(text, false, n).expect("scanner agrees with serde_yaml")
}

const LIST: &str = "apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Pod
  metadata: {name: a}
  spec:
    containers:
    - {name: c, image: i}
- apiVersion: v1
  kind: Pod
  metadata: {name: b}
  spec:
    containers:
    - name: c
      image: i
";

#[test]
fn list_items_are_located_by_index_and_checked_by_name() {
    let docs = yaml(LIST);
    let a = object_outline(&docs, 1, Some(0), "Pod", Some("a")).expect("item 0");
    let b = object_outline(&docs, 1, Some(1), "Pod", Some("b")).expect("item 1");
    assert_eq!(locate(a, WorkloadKind::Pod).0, 4);
    let (line, containers) = locate(b, WorkloadKind::Pod);
    assert_eq!(line, 10);
    assert_eq!(
        containers,
        vec![ContainerLine {
            kind: ContainerKind::App,
            name: "c".into(),
            line: 15
        }]
    );
    // A mismatch (wrong name, kind or index) is no location rather than a wrong one.
    assert!(object_outline(&docs, 1, Some(1), "Pod", Some("a")).is_none());
    assert!(object_outline(&docs, 1, Some(0), "DaemonSet", Some("a")).is_none());
    assert!(object_outline(&docs, 1, Some(2), "Pod", Some("a")).is_none());
    assert!(object_outline(&docs, 0, None, "List", None).is_none());
}

#[test]
fn document_counts_that_disagree_give_no_outlines() {
    assert!(file_outlines("kind: A\n---\nkind: B\n", false, 3).is_none());
    assert!(file_outlines("kind: A\n---\nkind: B\n", false, 2).is_some());
    assert!(file_outlines("[{\"kind\": \"A\"}]", true, 1).is_some());
}

#[test]
fn cronjob_containers_of_every_kind_at_their_name_key() {
    let text = "kind: CronJob
metadata: {name: j}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          initContainers:
          - image: busybox
            name: init
          containers:
          - name: app
          ephemeralContainers:
          - name: debug
";
    let docs = yaml(text);
    let o = object_outline(&docs, 1, None, "CronJob", Some("j")).unwrap();
    let (_, containers) = locate(o, WorkloadKind::CronJob);
    let got: Vec<_> = containers
        .iter()
        .map(|c| (c.kind, c.name.as_str(), c.line))
        .collect();
    assert_eq!(
        got,
        vec![
            (ContainerKind::Init, "init", 10),
            (ContainerKind::App, "app", 12),
            (ContainerKind::Ephemeral, "debug", 14),
        ]
    );
    // The Pod path does not reach a CronJob's template.
    assert!(locate(o, WorkloadKind::Pod).1.is_empty());
}

/// The names the verdict engine gives containers in reasons ("x (init)")
/// must lead back to their lines: a real evaluation with unresolved images.
#[test]
fn reasons_container_names_map_back_to_lines() {
    let text = "apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, namespace: kube-system}
spec:
  template:
    spec:
      hostNetwork: true
      initContainers:
      - name: app
        image: init-image
        securityContext: {capabilities: {add: [NET_ADMIN]}}
      containers:
      - name: app
        image: app-image
        securityContext: {privileged: true}
";
    let docs = yaml(text);
    let o = object_outline(&docs, 1, None, "DaemonSet", Some("ds")).unwrap();
    let (line, containers) = locate(o, WorkloadKind::DaemonSet);
    let src = ObjectSource {
        file: Some("m.yaml".into()),
        line: Some(line),
        containers,
    };
    let value: serde_json::Value = serde_yaml::from_str(text).unwrap();
    let w = Workload::from_value(&value).unwrap().unwrap();
    let profile: crate::api::NodeNetfilterProfile = serde_json::from_value(serde_json::json!({
        "apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
        "metadata": {"name": "n"}, "spec": {"nodeName": "n"},
        "status": {"iptables": {"version": "1.8.9", "backend": "nft", "evidence": []},
                   "activeBackend": "nft"}
    }))
    .unwrap();
    let policies = crate::judgement::PolicyBook::default();
    let scene = crate::judgement::Scene {
        profiles: &[&profile],
        nodes: &[],
        policies: &policies,
        default_platform: &"linux/amd64".parse().unwrap(),
        index: None,
    };
    let d = scene
        .prepare(crate::judgement::Subject::Workload(&w))
        .decide(&ImageResolutions::new(), crate::facts::Severity::Info);
    let mut lines: Vec<(String, Option<usize>)> = d
        .reasons
        .iter()
        .map(|r| {
            let c = r.container.clone().unwrap_or_default();
            let l = src.line_for(r.container.as_deref());
            (c, l)
        })
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            ("app".to_string(), Some(13)),
            ("app (init)".to_string(), Some(9)),
        ],
        "{:?}",
        d.reasons
    );
    assert_eq!(
        src.line_for(Some("gone")),
        Some(1),
        "unknown container: the object's line"
    );
    assert_eq!(src.line_for(None), Some(1));
}
