use super::*;

/// Documents as serde_yaml counts them: the scanner must number alike.
fn serde_count(text: &str) -> usize {
    serde_yaml::Deserializer::from_str(text).count()
}

/// (name, line of its `name` key) of every item under `path` -> `field`.
fn names_at(o: &Outline, path: &[&str], field: &str) -> Vec<(String, usize)> {
    let spec = path.iter().try_fold(o, |o, k| o.get(k)).expect("path");
    spec.get(field)
        .expect("field")
        .items()
        .iter()
        .map(|i| {
            let e = i.entry("name").expect("name key");
            (e.value.as_str().unwrap().to_string(), e.line)
        })
        .collect()
}

fn pairs(v: &[(&str, usize)]) -> Vec<(String, usize)> {
    v.iter().map(|(n, l)| (n.to_string(), *l)).collect()
}

const MULTI: &str = "# leading comment, not a document
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data:
  script: |
    containers:
    - name: not-a-container
---
---
# a DaemonSet whose container is not named first
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-router   # trailing comment
  namespace: kube-system
spec:
  template:
    spec:
      hostNetwork: true
      initContainers:
        - image: busybox
          name: \"install-cni\"
      containers:
      - name: 'kube-router'
        image: \"reg/kube-router:v1 # not a comment\"
        env:
        - name: NOT_A_CONTAINER
          value: x
      -   name: sidecar
...
";

#[test]
fn multi_document_numbering_matches_serde_yaml() {
    let docs = yaml_documents(MULTI);
    assert_eq!(docs.len(), serde_count(MULTI));
    assert_eq!(docs.len(), 3, "ConfigMap, the empty document, DaemonSet");
    assert_eq!(
        docs[0].get("kind").and_then(Outline::as_str),
        Some("ConfigMap")
    );
    assert_eq!(docs[0].line, 3);
    assert_eq!(docs[1].as_str(), Some(""), "empty document");
    let ds = &docs[2];
    assert_eq!(ds.line, 13, "first key, after the comment");
    let name = ds.get("metadata").and_then(|m| m.get("name"));
    assert_eq!(name.and_then(Outline::as_str), Some("kube-router"));
}

#[test]
fn containers_found_with_name_anywhere_quoted_and_not_nested() {
    let docs = yaml_documents(MULTI);
    let spec = ["spec", "template", "spec"];
    assert_eq!(
        names_at(&docs[2], &spec, "initContainers"),
        pairs(&[("install-cni", 24)])
    );
    assert_eq!(
        names_at(&docs[2], &spec, "containers"),
        pairs(&[("kube-router", 26), ("sidecar", 31)])
    );
    let image = docs[2]
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("spec"))
        .and_then(|s| s.get("containers"))
        .and_then(|c| c.items().first())
        .and_then(|c| c.get("image"))
        .and_then(Outline::as_str);
    assert_eq!(image, Some("reg/kube-router:v1 # not a comment"));
}

#[test]
fn block_scalar_content_is_not_structure() {
    let docs = yaml_documents(MULTI);
    let data = docs[0].get("data").unwrap();
    assert_eq!(data.get("script").and_then(Outline::as_str), Some(""));
    assert!(data.get("containers").is_none());
}

#[test]
fn cronjob_nested_template_and_flow_style() {
    let text = "apiVersion: batch/v1
kind: CronJob
metadata: {name: cleanup, namespace: ops}
spec:
  schedule: '*/5 * * * *'
  jobTemplate:
    spec:
      template:
        spec:
          hostNetwork: true
          containers: [{name: a, image: 'x:1'},
            {image: \"y\", \"name\": \"b\"}]
          initContainers: [ ]
";
    let docs = yaml_documents(text);
    assert_eq!(docs.len(), serde_count(text));
    let path = ["spec", "jobTemplate", "spec", "template", "spec"];
    assert_eq!(
        names_at(&docs[0], &path, "containers"),
        pairs(&[("a", 11), ("b", 12)])
    );
    assert!(names_at(&docs[0], &path, "initContainers").is_empty());
}

#[test]
fn anchors_tags_and_dash_on_its_own_line() {
    let text = "--- !!map
kind: Pod
metadata: &meta
  name: p
spec:
  containers:
  -
    image: i
    name: c1
  - &second
    name: c2
";
    let docs = yaml_documents(text);
    assert_eq!(docs.len(), serde_count(text));
    assert_eq!(
        names_at(&docs[0], &["spec"], "containers"),
        pairs(&[("c1", 9), ("c2", 11)])
    );
    assert_eq!(docs[0].line, 2);
}

#[test]
fn document_end_markers_and_bare_documents() {
    let text = "kind: A\n...\n---\nkind: B\n---\n# only a comment\n";
    let docs = yaml_documents(text);
    assert_eq!(docs.len(), serde_count(text));
    assert_eq!(docs.len(), 3);
    assert_eq!(docs[1].get("kind").and_then(Outline::as_str), Some("B"));
    assert_eq!(docs[1].line, 4);
}

#[test]
fn crlf_line_endings() {
    let text = "kind: Pod\r\nspec:\r\n  containers:\r\n  - name: c\r\n";
    let docs = yaml_documents(text);
    assert_eq!(
        names_at(&docs[0], &["spec"], "containers"),
        pairs(&[("c", 4)])
    );
}

#[test]
fn json_array_of_objects_and_escapes() {
    let text = r#"[
  {"kind": "Pod", "metadata": {"name": "a"},
   "spec": {"containers": [
     {"image": "i", "name": "c\"1"},
     {"name": "c2"}]}},
  {"kind": "Pod", "metadata": {"name": "b"}, "spec": {"containers": [{"name": "x"}]}}
]"#;
    let docs = json_documents(text);
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0].line, 2);
    assert_eq!(docs[1].line, 6);
    assert_eq!(
        names_at(&docs[0], &["spec"], "containers"),
        pairs(&[("c\"1", 4), ("c2", 5)])
    );
    assert_eq!(
        names_at(&docs[1], &["spec"], "containers"),
        pairs(&[("x", 6)])
    );
}

#[test]
fn hostile_input_never_panics_and_terminates() {
    let deep_flow = "[".repeat(20_000);
    let deep_block: String = (0..3_000)
        .map(|i| format!("{}- a:\n", " ".repeat(i)))
        .collect();
    let cases = [
        deep_flow.as_str(),
        deep_block.as_str(),
        "a: \"unterminated\nb: 'x",
        "{a: [1, 2}, ]]]",
        "key: [\n  {name: x,\n",
        "- - - - -\n  - :\n:\n::: ::\n",
        "\u{feff}kind: Pod\n\t- weird\n",
        "\"k\": v\n'q''q': w\n? complex\n: value\n",
        "",
        "---",
        "...",
    ];
    for text in cases {
        let _ = yaml_documents(text);
        let _ = json_documents(text);
    }
    let docs = yaml_documents("\"k\": v\n'q''q': w\n");
    assert_eq!(docs[0].get("q'q").and_then(Outline::as_str), Some("w"));
}

#[test]
fn double_quoted_escapes_decode_as_the_parsers_decode_them() {
    let yaml = "a: \"bel\\a esc\\e nul\\0 x\\x41 u\\u00e9 U\\U0001F600 q\\\" s\\\\ sp\\ \"\n";
    let parsed: serde_json::Value = serde_yaml::from_str(yaml).unwrap();
    let docs = yaml_documents(yaml);
    let a = docs[0].get("a").and_then(Outline::as_str);
    assert_eq!(a, parsed["a"].as_str());
    assert_eq!(
        a,
        Some("bel\u{7} esc\u{1b} nul\0 xA u\u{e9} U\u{1F600} q\" s\\ sp ")
    );
    let json = r#"{"b": ["\uD83D\uDE00 \/ \t\n"]}"#;
    let parsed: serde_json::Value = serde_json::from_str(json).unwrap();
    let docs = json_documents(json);
    let item = docs[0].get("b").unwrap().items()[0].as_str();
    assert_eq!(item, parsed["b"][0].as_str());
    assert_eq!(item, Some("\u{1F600} / \t\n"));
    // A lone surrogate (serde_json refuses it) decodes to U+FFFD, no panic.
    let lone = json_documents(r#"["\uD83D", "\uD83D\u0041"]"#);
    assert_eq!(lone[0].as_str(), Some("\u{fffd}"));
    assert_eq!(lone[1].as_str(), Some("\u{fffd}A"));
}
