//! `nfguard check -o junit|github|sarif` as a CI job runs it: the real
//! binary, manifests and fleet files (tests/fixtures/check-ci), images with
//! real Debian iptables releases in a real registry on loopback. Reports
//! are validated against the official JUnit XSD and SARIF 2.1.0 schema.

use crate::check_ci_support;

use check_ci_support::{World, nfguard, stdout, validate};
use serde_json::Value;
use std::io::Write;

/// The 1-based line of the `n`-th line of `file` that is `text` (trimmed)
/// or, for `text` ending in `*`, starts with the rest (trimmed).
fn line_with(w: &World, file: &str, text: &str, n: usize) -> usize {
    let content = std::fs::read_to_string(w.path().join(file)).unwrap();
    let matches = |l: &str| match text.strip_suffix('*') {
        Some(prefix) => l.trim().starts_with(prefix),
        None => l.trim() == text,
    };
    content
        .lines()
        .enumerate()
        .filter(|(_, l)| matches(l))
        .nth(n - 1)
        .unwrap_or_else(|| panic!("{text:?} #{n} not in {file}"))
        .0
        + 1
}

/// (level, file, line, title) of every workflow command, sorted.
fn annotations(out: &str) -> Vec<(String, String, String, String)> {
    let mut v: Vec<_> = out
        .lines()
        .filter(|l| l.starts_with("::"))
        .map(|l| {
            let rest = &l[2..];
            let (head, _message) = rest.split_once("::").expect("::level props::message");
            let (level, props) = head.split_once(' ').unwrap_or((head, ""));
            let prop = |k: &str| {
                props
                    .split(',')
                    .find_map(|p| p.strip_prefix(&format!("{k}=")))
                    .unwrap_or("")
                    .to_string()
            };
            (level.to_string(), prop("file"), prop("line"), prop("title"))
        })
        .collect();
    v.sort();
    v
}

fn a(level: &str, file: &str, line: usize, title: &str) -> (String, String, String, String) {
    (level.into(), file.into(), line.to_string(), title.into())
}

#[test]
fn github_annotations_point_at_the_container_line_of_each_document() {
    let w = World::new();
    let out = w.check(&[
        "-o",
        "github",
        "-f",
        "manifests/cni.yaml",
        "-f",
        "manifests/extra.json",
    ]);
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "deny exits 1: {text}");
    // The container entries, found by their text (the metadata name comes first).
    let router = line_with(&w, "manifests/cni.yaml", "name: kube-router", 2);
    let agent = line_with(&w, "manifests/cni.yaml", "containers: [{name: agent,*", 1);
    let shell = line_with(&w, "manifests/extra.json", r#""name": "shell"}"#, 1);
    assert_eq!(
        annotations(&text),
        vec![
            a(
                "error",
                "manifests/cni.yaml",
                router,
                "BackendMismatch in DaemonSet/kube-system/kube-router"
            ),
            a(
                "error",
                "manifests/cni.yaml",
                router,
                "OldReaderNewRules in DaemonSet/kube-system/kube-router"
            ),
            a(
                "error",
                "manifests/extra.json",
                shell,
                "BackendMismatch in Pod/kube-system/router-debug"
            ),
            a(
                "error",
                "manifests/extra.json",
                shell,
                "OldReaderNewRules in Pod/kube-system/router-debug"
            ),
            a(
                "warning",
                "manifests/cni.yaml",
                agent,
                "ImageUnresolved in Deployment/ops/debug-agent"
            ),
        ],
        "{text}"
    );
    let old_reader = text
        .lines()
        .find(|l| l.contains("title=OldReaderNewRules in DaemonSet"))
        .unwrap();
    let message = old_reader.rsplit_once("::").unwrap().1;
    // The image as named, and the digest that was judged (12 hex digits).
    let (head, rest) = message.split_once(", sha256:").expect("the digest judged");
    assert_eq!(
        head,
        format!(
            "[OldReaderNewRules] container kube-router ({}/kube-router-old:v1",
            w.host()
        ),
        "{message}"
    );
    assert!(
        rest.starts_with(|c: char| c.is_ascii_hexdigit()),
        "{message}"
    );
    assert_eq!(rest.find(')'), Some(12), "{message}");
    assert!(rest[12..].starts_with("): iptables-nft 1.8.7"), "{message}");
    assert!(message.contains("[nodes node-a, node-c]"), "{message}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"verdict: deny"));
    assert!(
        text.contains("note: skipped ConfigMap/kube-router-cfg (manifests/cni.yaml, document 1)")
    );
}

#[test]
fn github_annotations_from_stdin_name_no_file() {
    let w = World::new();
    let manifest = std::fs::read_to_string(w.path().join("manifests/cni.yaml")).unwrap();
    let mut child = nfguard()
        .current_dir(w.path())
        .args(["check", "-o", "github", "-f", "-"])
        .args([
            "--profiles",
            "fleet/profiles.yaml",
            "--nodes",
            "fleet/nodes.yaml",
        ])
        .args(["--insecure-registry", &w.host()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifest.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let got = annotations(&stdout(&out));
    assert_eq!(got.len(), 3, "{got:?}");
    for (_, file, line, _) in got {
        assert_eq!(
            (file.as_str(), line.as_str()),
            ("", ""),
            "stdin has no file to point at"
        );
    }
}

/// (name, outcome, type) of every case of a suite in the validator's summary.
fn cases(suite: &Value) -> Vec<(String, String, String)> {
    suite["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["outcome"].as_str().unwrap().to_string(),
                c["type"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn c(name: &str, outcome: &str, kind: &str) -> (String, String, String) {
    (name.into(), outcome.into(), kind.into())
}

#[test]
fn junit_report_validates_with_one_case_per_workload_and_node_class() {
    let w = World::new();
    let out = w.check(&[
        "-o",
        "junit",
        "-f",
        "manifests/cni.yaml",
        "-f",
        "manifests/extra.json",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let report = w.path().join("report.xml");
    std::fs::write(&report, &out.stdout).unwrap();
    let summary = validate("junit", &report).unwrap_or_else(|e| panic!("{e}\n{}", stdout(&out)));
    assert_eq!(summary["counts"], serde_json::json!(["11", "4", "2"]));
    let suites = summary["suites"].as_array().unwrap();
    assert_eq!(suites.len(), 2);
    assert_eq!(suites[0]["name"], "manifests/cni.yaml");
    assert_eq!(suites[0]["file"], "manifests/cni.yaml");
    assert_eq!(suites[0]["counts"], serde_json::json!(["7", "2", "2", "0"]));
    let nft = "nodes with iptables 1.8.9 nft (2 nodes)";
    let legacy = "nodes with iptables 1.8.9 legacy (1 node)";
    assert_eq!(
        cases(&suites[0]),
        vec![
            c(
                &format!("DaemonSet/kube-system/kube-router :: {nft}"),
                "failure",
                "OldReaderNewRules"
            ),
            c(
                &format!("DaemonSet/kube-system/kube-router :: {legacy}"),
                "failure",
                "BackendMismatch"
            ),
            c(
                "DaemonSet/kube-system/kube-router :: workload",
                "passed",
                ""
            ),
            c(
                &format!("DaemonSet/kube-system/kube-proxy :: {nft}"),
                "passed",
                ""
            ),
            c(
                &format!("DaemonSet/kube-system/kube-proxy :: {legacy}"),
                "passed",
                ""
            ),
            c(
                &format!("Deployment/ops/debug-agent :: {nft}"),
                "error",
                "ImageUnresolved"
            ),
            c(
                &format!("Deployment/ops/debug-agent :: {legacy}"),
                "error",
                "ImageUnresolved"
            ),
        ]
    );
    assert_eq!(
        cases(&suites[1]),
        vec![
            c(&format!("Pod/shop/plain :: {nft}"), "passed", ""),
            c(&format!("Pod/shop/plain :: {legacy}"), "passed", ""),
            c(
                &format!("Pod/kube-system/router-debug :: {nft}"),
                "failure",
                "OldReaderNewRules"
            ),
            c(
                &format!("Pod/kube-system/router-debug :: {legacy}"),
                "failure",
                "BackendMismatch"
            ),
        ]
    );
    let router = line_with(&w, "manifests/cni.yaml", "name: kube-router", 2);
    let first = &suites[0]["cases"][0];
    assert_eq!(first["classname"], "DaemonSet/kube-system/kube-router");
    let body = first["text"].as_str().unwrap();
    assert!(
        body.starts_with(&format!(
            "DaemonSet/kube-system/kube-router at manifests/cni.yaml:{router}\nnodes (2): node-a, node-c\ndeny  critical [OldReaderNewRules]"
        )),
        "{body}"
    );
    let workload = &suites[0]["cases"][2]["text"].as_str().unwrap();
    assert!(
        workload.contains("[HostNetworkWithoutNetAdmin] container install-cni (init)"),
        "{workload}"
    );
}

#[test]
fn junit_stays_valid_with_hostile_names_from_stdin() {
    let w = World::new();
    // BEL, markup, quotes and a CDATA end in names nfguard only echoes.
    let manifest = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: \"evil<&\\\"'\\a]]>\"\n  namespace: x\n\
                    spec:\n  template:\n    spec:\n      hostNetwork: true\n      containers:\n      - name: \"c<1>\"\n        image: \"img&]]>\"\n";
    let mut child = nfguard()
        .current_dir(w.path())
        .args([
            "check",
            "-o",
            "junit",
            "-f",
            "-",
            "--profiles",
            "fleet/profiles.yaml",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(manifest.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let report = w.path().join("hostile.xml");
    std::fs::write(&report, &out.stdout).unwrap();
    let summary = validate("junit", &report).unwrap_or_else(|e| panic!("{e}\n{}", stdout(&out)));
    let suite = &summary["suites"][0];
    assert_eq!(suite["name"], "stdin");
    assert_eq!(suite["file"], Value::Null);
    let cases = suite["cases"].as_array().unwrap();
    assert_eq!(
        cases.len(),
        3,
        "two node classes and the workload: {cases:?}"
    );
    let case = &cases[2];
    assert_eq!(case["classname"], "DaemonSet/x/evil<&\"'\\u{7}]]>");
    assert_eq!(case["name"], "DaemonSet/x/evil<&\"'\\u{7}]]> :: workload");
    let text = case["text"].as_str().unwrap();
    assert!(
        text.starts_with("DaemonSet/x/evil<&\"'\\u{7}]]> at stdin:11\n"),
        "{text}"
    );
    assert!(text.contains("container c<1> (img&]]>)"), "{text}");
}

#[test]
fn sarif_validates_against_the_schema_and_locates_findings() {
    let w = World::new();
    let out = w.check(&["-o", "sarif", "-f", "manifests/cni.yaml"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let report = w.path().join("report.sarif");
    std::fs::write(&report, &out.stdout).unwrap();
    let log = validate("sarif", &report).unwrap_or_else(|e| panic!("{e}\n{}", stdout(&out)));
    let run = &log["runs"][0];
    let rules: Vec<&str> = run["tool"]["driver"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        rules,
        vec!["BackendMismatch", "OldReaderNewRules", "ImageUnresolved"]
    );
    let router = line_with(&w, "manifests/cni.yaml", "name: kube-router", 2);
    let agent = line_with(&w, "manifests/cni.yaml", "containers: [{name: agent,*", 1);
    let mut got: Vec<(String, String, i64)> = run["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let loc = &r["locations"][0]["physicalLocation"];
            assert_eq!(loc["artifactLocation"]["uri"], "manifests/cni.yaml");
            (
                r["ruleId"].as_str().unwrap().to_string(),
                r["level"].as_str().unwrap().to_string(),
                loc["region"]["startLine"].as_i64().unwrap(),
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            ("BackendMismatch".into(), "error".into(), router as i64),
            ("ImageUnresolved".into(), "warning".into(), agent as i64),
            ("OldReaderNewRules".into(), "error".into(), router as i64),
        ]
    );
}

#[test]
fn exit_codes_are_the_same_in_every_format() {
    let w = World::new();
    let allow = w.path().join("allow.yaml");
    std::fs::write(
        &allow,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec:\n  containers:\n  - {name: web, image: nginx}\n",
    )
    .unwrap();
    for format in ["text", "json", "junit", "github", "sarif"] {
        let ok = w.check(&["-o", format, "-f", "allow.yaml"]);
        assert_eq!(ok.status.code(), Some(0), "{format}: {}", stdout(&ok));
        let missing = w.check(&["-o", format, "-f", "nope.yaml"]);
        assert_eq!(missing.status.code(), Some(2), "{format}");
        assert!(missing.stdout.is_empty(), "{format}: no report on errors");
        let stderr = String::from_utf8_lossy(&missing.stderr);
        assert_eq!(stderr.lines().count(), 1, "{format}: {stderr}");
        assert!(stderr.contains("nope.yaml"), "{stderr}");
    }
    // The CI formats are check's own: other subcommands refuse them.
    let other = nfguard()
        .args(["inspect", "image", "-o", "junit", "x/y:z"])
        .output()
        .unwrap();
    assert_eq!(other.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&other.stderr).contains("invalid value 'junit'"));
}

#[test]
fn the_validator_rejects_reports_that_break_the_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("bad.xml");
    // testsuite without the required tests/failures/errors counts
    std::fs::write(
        &junit,
        "<testsuites><testsuite name=\"s\"><testcase name=\"c\"/></testsuite></testsuites>",
    )
    .unwrap();
    assert!(validate("junit", &junit).is_err());
    let sarif = dir.path().join("bad.sarif");
    std::fs::write(&sarif, r#"{"version": "2.0.0", "runs": []}"#).unwrap();
    assert!(validate("sarif", &sarif).is_err());
}
