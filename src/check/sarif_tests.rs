use super::*;
use crate::check::test_data::{reason, result, source};

#[test]
fn paths_become_uri_references() {
    assert_eq!(
        path_uri("deploy/cni v2/a#1.yaml"),
        "deploy/cni%20v2/a%231.yaml"
    );
    assert_eq!(path_uri("/abs/x.yaml"), "file:///abs/x.yaml");
    assert_eq!(path_uri("é.yaml"), "%C3%A9.yaml");
}

#[test]
fn results_for_findings_that_raise_the_verdict() {
    let mut a = result(
        "DaemonSet/kube-system/a",
        vec![
            reason(
                "BackendMismatch",
                "deny",
                Some("app (init)"),
                &["n"],
                "split",
            ),
            reason("NodeHazard", "allow", None, &["n"], "info"),
            reason(
                "WrapperNoMarkerChains",
                "warn",
                Some("app"),
                &["n"],
                "wrapper",
            ),
        ],
        &[("n", "x")],
    );
    a.source = Some(source(Some("cni.yaml")));
    let mut b = result(
        "Pod/x/b",
        vec![reason(
            "BackendMismatch",
            "deny",
            Some("app"),
            &["n"],
            "again",
        )],
        &[("n", "x")],
    );
    b.source = Some(source(None));
    let report = Report {
        verdict: Verdict::Deny,
        results: vec![a, b],
        notes: vec![],
        note_files: vec![],
        files: vec!["cni.yaml".into(), "-".into()],
        what_if: None,
    };
    let log: Value = serde_json::from_str(&render(&report, 5).unwrap()).unwrap();
    assert_eq!(log["version"], "2.1.0");
    let run = &log["runs"][0];
    let rules: Vec<&str> = run["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(rules, vec!["BackendMismatch", "WrapperNoMarkerChains"]);
    let results = run["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "info left out");
    let summary: Vec<(String, String, i64, Value)> = results
        .iter()
        .map(|r| {
            (
                r["ruleId"].as_str().unwrap().to_string(),
                r["level"].as_str().unwrap().to_string(),
                r["ruleIndex"].as_i64().unwrap(),
                r["locations"][0]["physicalLocation"].clone(),
            )
        })
        .collect();
    assert_eq!(summary[0].0, "BackendMismatch");
    assert_eq!(summary[0].1, "error");
    assert_eq!(summary[0].2, 0);
    assert_eq!(
        summary[0].3,
        serde_json::json!({"artifactLocation": {"uri": "cni.yaml"}, "region": {"startLine": 7}})
    );
    assert_eq!(
        (summary[1].1.as_str(), summary[1].2),
        ("warning", 1),
        "{summary:?}"
    );
    assert_eq!(summary[1].3["region"]["startLine"], 9);
    assert_eq!(summary[2].3, Value::Null, "stdin: no physical location");
    assert_eq!(
        results[2]["locations"][0]["logicalLocations"][0]["fullyQualifiedName"],
        "Pod/x/b"
    );
}
