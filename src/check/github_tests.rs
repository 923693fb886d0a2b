use super::*;
use crate::check::positions::ObjectSource;
use crate::check::test_data::{reason, result, source};

#[test]
fn escaping_follows_the_runner_rules() {
    assert_eq!(escape_data("100% a\r\nb:c,d"), "100%25 a%0D%0Ab:c,d");
    assert_eq!(
        escape_property("100% a\r\nb:c,d"),
        "100%25 a%0D%0Ab%3Ac%2Cd"
    );
}

#[test]
fn deny_and_warn_point_at_the_container_line() {
    let mut r = result(
        "DaemonSet/kube-system/kube-router",
        vec![
            reason(
                "BackendMismatch",
                "deny",
                Some("app (init)"),
                &["a"],
                "two rule sets\nsecond line 50%",
            ),
            reason(
                "WrapperNoMarkerChains",
                "warn",
                Some("gone"),
                &["a", "b"],
                "defaults to nft",
            ),
            reason("NodeHazard", "allow", None, &["a"], "info only"),
        ],
        &[("a", "x"), ("b", "x")],
    );
    r.source = Some(source(Some("deploy/cni,v2.yaml")));
    assert_eq!(
        command(&r, &r.reasons[0], 5).as_deref(),
        Some(
            "::error file=deploy/cni%2Cv2.yaml,line=7,title=BackendMismatch in DaemonSet/kube-system/kube-router::\
             [BackendMismatch] container app (init) (reg/img:v1): two rule sets%0Asecond line 50%25 [node a]"
        )
    );
    // An unknown container falls back to the object's line.
    assert_eq!(
        command(&r, &r.reasons[1], 1).as_deref(),
        Some(
            "::warning file=deploy/cni%2Cv2.yaml,line=3,title=WrapperNoMarkerChains in DaemonSet/kube-system/kube-router::\
             [WrapperNoMarkerChains] container gone (reg/img:v1): defaults to nft [2 nodes (a, +1 more)]"
        )
    );
    assert_eq!(command(&r, &r.reasons[2], 5), None, "info is not annotated");
}

#[test]
fn stdin_and_unlocated_objects() {
    let mut r = result(
        "Pod/ns/p",
        vec![reason("BackendMismatch", "deny", Some("app"), &["a"], "m")],
        &[("a", "x")],
    );
    r.source = Some(source(None));
    let line = command(&r, &r.reasons[0], 5).unwrap();
    assert!(
        line.starts_with("::error title=BackendMismatch in Pod/ns/p::"),
        "{line}"
    );
    r.source = Some(ObjectSource {
        file: Some("m.yaml".into()),
        line: None,
        containers: Vec::new(),
    });
    let line = command(&r, &r.reasons[0], 5).unwrap();
    assert!(line.starts_with("::error file=m.yaml,title="), "{line}");
}

#[test]
fn render_ends_with_notes_and_the_verdict() {
    let r = result(
        "Pod/ns/p",
        vec![reason("BackendMismatch", "deny", Some("app"), &["a"], "m")],
        &[("a", "x")],
    );
    let report = Report {
        verdict: Verdict::Deny,
        results: vec![r],
        notes: vec!["skipped Service/s (m.yaml, document 2): not a workload kind".into()],
        note_files: vec!["m.yaml".into()],
        files: vec!["m.yaml".into()],
        what_if: None,
    };
    let out = render(&report, 5);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(lines[0].starts_with("::error title=BackendMismatch in Pod/ns/p::[BackendMismatch]"));
    assert_eq!(
        lines[1],
        "note: skipped Service/s (m.yaml, document 2): not a workload kind"
    );
    assert_eq!(lines[2], "verdict: deny");
}
