use super::*;
use crate::check::test_data::{reason, result, source};

const NFT: &str = "nodes with iptables 1.8.9 nft";

#[test]
fn escape_markup_quotes_and_characters_xml_cannot_hold() {
    let text = "a<b>&\"c'\u{1b}\u{0}\t\n\r\u{fffe}é";
    assert_eq!(
        escape(text, true),
        "a&lt;b&gt;&amp;&quot;c&apos;\\u{1b}\\u{0}&#9;&#10;&#13;\\u{fffe}é"
    );
    assert_eq!(
        escape(text, false),
        "a&lt;b&gt;&amp;\"c'\\u{1b}\\u{0}\t\n&#13;\\u{fffe}é"
    );
}

#[test]
fn outcome_failure_beats_error_beats_warning() {
    let deny = reason(
        "BackendMismatch",
        "deny",
        Some("app"),
        &["a"],
        "split rule sets",
    );
    let unresolved = reason(
        "ImageUnresolved",
        "warn",
        Some("app"),
        &["a"],
        "no registry",
    );
    let unresolved_deny = reason("ImageUnresolved", "deny", Some("app"), &["a"], "x");
    let warn = reason(
        "WrapperNoMarkerChains",
        "warn",
        Some("app"),
        &["a"],
        "defaults",
    );
    let info = reason("NodeHazard", "allow", None, &["a"], "hazard");
    let unresolved_allowed = reason("ImageUnresolved", "allow", Some("app"), &["a"], "y");
    let code = |o: Outcome| match o {
        Outcome::Failure { code, .. } => format!("failure {code}"),
        Outcome::Error { code, .. } => format!("error {code}"),
        Outcome::Skipped { .. } => "skipped".into(),
        Outcome::Passed => "passed".into(),
    };
    assert_eq!(
        code(outcome(&[&warn, &unresolved, &deny], 5)),
        "failure BackendMismatch"
    );
    assert_eq!(
        code(outcome(&[&warn, &unresolved], 5)),
        "error ImageUnresolved"
    );
    assert_eq!(
        code(outcome(&[&unresolved_deny], 5)),
        "error ImageUnresolved"
    );
    assert_eq!(code(outcome(&[&info, &warn], 5)), "skipped");
    assert_eq!(code(outcome(&[&info, &unresolved_allowed], 5)), "passed");
    assert_eq!(code(outcome(&[], 5)), "passed");
    match outcome(&[&deny], 5) {
        Outcome::Failure { message, .. } => assert_eq!(
            message, "[BackendMismatch] container app (reg/img:v1): split rule sets",
            "the case names its own nodes, the message does not"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn cases_per_node_class_with_location_of_the_decisive_container() {
    let mut r = result(
        "DaemonSet/kube-system/kube-router",
        vec![
            reason(
                "OldReaderNewRules",
                "deny",
                Some("app"),
                &["a", "b"],
                "old reader",
            ),
            reason(
                "ImageUnresolved",
                "warn",
                Some("app (init)"),
                &["c"],
                "timed out",
            ),
            reason(
                "HostNetworkWithoutNetAdmin",
                "allow",
                Some("side"),
                &[],
                "read only",
            ),
        ],
        &[("a", NFT), ("b", NFT), ("c", NFT), ("d", NFT)],
    );
    r.source = Some(source(Some("cni/kube-router.yaml")));
    let cs = cases(&r, 1);
    let got: Vec<(&str, &Outcome)> = cs.iter().map(|c| (c.name.as_str(), &c.outcome)).collect();
    assert_eq!(got.len(), 4, "{got:#?}");
    assert_eq!(
        got[0].0,
        format!("DaemonSet/kube-system/kube-router :: {NFT} (2 nodes)")
    );
    assert!(matches!(
        got[0].1,
        Outcome::Failure {
            code: ReasonCode::OldReaderNewRules,
            ..
        }
    ));
    assert!(matches!(
        got[1].1,
        Outcome::Error {
            code: ReasonCode::ImageUnresolved,
            ..
        }
    ));
    assert_eq!(
        got[2].0,
        format!("DaemonSet/kube-system/kube-router :: {NFT} (1 node) [no findings]")
    );
    assert_eq!(got[2].1, &Outcome::Passed);
    assert_eq!(got[3].0, "DaemonSet/kube-system/kube-router :: workload");
    assert_eq!(got[3].1, &Outcome::Passed);
    // Details: where, which nodes (capped), every finding of the case.
    assert_eq!(
        cs[0].details,
        "DaemonSet/kube-system/kube-router at cni/kube-router.yaml:9\n\
         nodes (2): a, +1 more\n\
         deny  critical [OldReaderNewRules] container app (reg/img:v1): old reader\n"
    );
    assert!(
        cs[1]
            .details
            .starts_with("DaemonSet/kube-system/kube-router at cni/kube-router.yaml:7\n")
    );
    assert!(
        cs[3]
            .details
            .contains("allow info     [HostNetworkWithoutNetAdmin]")
    );
}

#[test]
fn workload_without_candidates_still_has_a_case() {
    let r = result("Deployment/shop/web", vec![], &[]);
    let cs = cases(&r, 5);
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0].name, "Deployment/shop/web :: no candidate nodes");
    assert_eq!(cs[0].outcome, Outcome::Passed);
}

fn report(results: Vec<ObjectResult>, files: &[&str]) -> Report {
    Report {
        verdict: results
            .iter()
            .map(|r| r.verdict)
            .max()
            .unwrap_or(Verdict::Allow),
        results,
        notes: vec!["skipped ConfigMap/c (b.yaml, document 2): not a workload kind".into()],
        note_files: vec!["b.yaml".into()],
        files: files.iter().map(|f| f.to_string()).collect(),
        what_if: None,
    }
}

#[test]
fn one_suite_per_file_in_command_line_order_with_counts() {
    let mut deny = result(
        "DaemonSet/kube-system/a",
        vec![reason("BackendMismatch", "deny", Some("app"), &["n1"], "m")],
        &[("n1", NFT), ("n2", NFT)],
    );
    deny.source = Some(source(Some("a.yaml")));
    let mut warn = result(
        "Pod/x/<evil & \"name\">\u{7}",
        vec![reason(
            "WrapperNoMarkerChains",
            "warn",
            Some("app"),
            &["n1"],
            "w <b>",
        )],
        &[("n1", NFT)],
    );
    warn.source = Some(source(Some("b.yaml")));
    let mut stdin = result("Pod/x/s", vec![], &[("n1", NFT)]);
    stdin.source = Some(source(None));
    let xml = render(
        &report(vec![deny, warn, stdin], &["b.yaml", "a.yaml", "-"]),
        5,
    );
    let suites: Vec<&str> = xml.lines().filter(|l| l.contains("<testsuite ")).collect();
    assert_eq!(
        suites,
        vec![
            r#"  <testsuite name="b.yaml" tests="1" failures="0" errors="0" skipped="1" file="b.yaml">"#,
            r#"  <testsuite name="a.yaml" tests="2" failures="1" errors="0" skipped="0" file="a.yaml">"#,
            r#"  <testsuite name="stdin" tests="1" failures="0" errors="0" skipped="0">"#,
        ]
    );
    assert!(xml.contains(r#"<testsuites name="nfguard check" tests="4" failures="1" errors="0">"#));
    assert!(xml.contains(
        r#"<testcase classname="Pod/x/&lt;evil &amp; &quot;name&quot;&gt;\u{7}" name="Pod/x/&lt;evil &amp; &quot;name&quot;&gt;\u{7} :: nodes with iptables 1.8.9 nft (1 node)">"#
    ));
    assert!(xml.contains(r#"<skipped message="warning: [WrapperNoMarkerChains] container app (reg/img:v1): w &lt;b&gt;">"#));
    assert!(xml.contains("<system-out>note: skipped ConfigMap/c (b.yaml, document 2): not a workload kind\n</system-out>"));
    assert!(
        xml.chars().all(|c| c == '\n' || c >= ' '),
        "no raw control characters"
    );
    assert_eq!(
        xml.matches("<testcase ").count(),
        xml.matches("</testcase>").count()
    );
}
