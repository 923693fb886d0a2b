//! The admission gate's two halves agree on which workloads it judges: the
//! webhook's `pod_spec_reaches_gate` and the CEL matchConditions of the
//! webhook configuration. Both are held to one table, e2e/gate-match.yaml:
//! this test the Rust side, the e2e (scenario 13) the CEL on the API server.

use nfguard::compat::evaluate::{Workload, WorkloadKind, pod_spec_reaches_gate};
use serde_json::Value;

const TABLE: &str = "e2e/gate-match.yaml";

fn table() -> Vec<Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(TABLE);
    let text = std::fs::read_to_string(&path).expect("the table is readable");
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("each document is an object"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

#[test]
fn pod_spec_reaches_gate_agrees_with_the_table() {
    let objects = table();
    assert!(objects.len() >= 10, "{TABLE} has {} objects", objects.len());
    let (mut yes, mut no) = (0, 0);
    for o in &objects {
        let name = o["metadata"]["name"].as_str().unwrap();
        let want = match o["metadata"]["annotations"]["nfguard-e2e/reaches-gate"].as_str() {
            Some("yes") => true,
            Some("no") => false,
            other => panic!("{name}: nfguard-e2e/reaches-gate is {other:?}, not yes or no"),
        };
        let kind = WorkloadKind::parse(o["kind"].as_str().unwrap()).expect("a kind nfguard judges");
        let w = Workload::of_kind_json(kind, &o.to_string()).expect("readable");
        assert_eq!(pod_spec_reaches_gate(&w.pod_spec), want, "{name}");
        if want { yes += 1 } else { no += 1 }
    }
    // Both outcomes, for pods and for templates.
    assert!(yes >= 3 && no >= 3, "yes {yes}, no {no}");
}

#[test]
fn ephemeral_containers_reach_the_gate_too() {
    // `kubectl debug --profile=netadmin`: not creatable as a table entry (the
    // API server refuses ephemeral containers on CREATE), judged all the same.
    let pod: Value = serde_json::json!({"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "app", "image": "x"}],
        "ephemeralContainers": [{"name": "debug", "image": "y",
            "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]}});
    let w = Workload::of_kind_json(WorkloadKind::Pod, &pod.to_string()).unwrap();
    assert!(pod_spec_reaches_gate(&w.pod_spec));
}
