//! `nfguard check` as a user runs it: the real binary, real files, exit codes
//! and one-line errors. Workloads here never need a registry look-up (no
//! NET_ADMIN, exempt, or no candidates), so no network is involved.

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::{Path, PathBuf};

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const PROFILE: &str = r#"
apiVersion: nfguard.io/v1alpha1
kind: NodeNetfilterProfile
metadata: {name: node-a}
spec: {nodeName: node-a}
status:
  iptables: {version: "1.8.9", backend: nft, evidence: []}
  activeBackend: nft
  minReaderVersion: "1.8.8"
"#;

const PLAIN_DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: web, image: "nginx:1.27"}
"#;

const HOSTNET_EXPORTER: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-exporter, namespace: monitoring}
spec:
  selector: {matchLabels: {app: ne}}
  template:
    metadata: {labels: {app: ne}}
    spec:
      hostNetwork: true
      containers:
      - {name: exporter, image: "prom/node-exporter:v1"}
"#;

fn nfguard() -> Command {
    let mut c = Command::cargo_bin("nfguard").unwrap();
    // Keep the environment from leaking flags into the test.
    for (k, _) in std::env::vars() {
        if k.starts_with("NFGUARD_") && k != "NFGUARD_FIXTURES" {
            c.env_remove(k);
        }
    }
    c
}

/// `nfguard check -f MANIFEST --profiles PROFILES`.
fn check_files(manifest: &Path, profiles: &Path) -> Command {
    let mut c = nfguard();
    c.args(["check", "-f"])
        .arg(manifest)
        .arg("--profiles")
        .arg(profiles);
    c
}

#[test]
fn plain_workload_allows_with_exit_0() {
    let d = tempfile::tempdir().unwrap();
    let m = write(d.path(), "m.yaml", PLAIN_DEPLOYMENT);
    let p = write(d.path(), "p.yaml", PROFILE);
    nfguard()
        .args(["check", "-f"])
        .arg(&m)
        .arg("--profiles")
        .arg(&p)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("ALLOW Deployment/shop/web"))
        .stdout(predicate::str::contains("verdict: allow"));
}

#[test]
fn json_output_has_the_contract_shape() {
    let d = tempfile::tempdir().unwrap();
    let m = write(
        d.path(),
        "m.yaml",
        &format!("{HOSTNET_EXPORTER}\n---\n{PLAIN_DEPLOYMENT}"),
    );
    let p = write(d.path(), "p.yaml", PROFILE);
    let out = nfguard()
        .args(["check", "-o", "json", "-f"])
        .arg(&m)
        .arg("--profiles")
        .arg(&p)
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(v["verdict"], "allow");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["object"], "DaemonSet/monitoring/node-exporter");
    assert_eq!(results[0]["verdict"], "allow");
    let r = &results[0]["reasons"][0];
    for key in ["code", "severity", "node", "container", "image", "message"] {
        assert!(r.get(key).is_some(), "reason lacks {key}: {r}");
    }
    assert_eq!(r["code"], "HostNetworkWithoutNetAdmin");
    assert_eq!(r["severity"], "info");
    assert_eq!(r["container"], "exporter");
    assert_eq!(r["image"], "prom/node-exporter:v1");
    assert_eq!(results[1]["object"], "Deployment/shop/web");
    assert_eq!(results[1]["reasons"].as_array().unwrap().len(), 0);
}

#[test]
fn stdin_and_json_manifests_and_lists() {
    let d = tempfile::tempdir().unwrap();
    let p = write(d.path(), "p.yaml", PROFILE);
    let list = serde_json::json!({
        "apiVersion": "v1", "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "x"},
             "spec": {"containers": [{"name": "c", "image": "i"}]}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"}}
        ]
    });
    nfguard()
        .args(["check", "-f", "-", "--profiles"])
        .arg(&p)
        .write_stdin(list.to_string())
        .assert()
        .code(0)
        .stdout(predicate::str::contains("ALLOW Pod/x/a"))
        .stdout(predicate::str::contains("note: skipped Service/svc"));
}

#[test]
fn exempt_annotation_allows_and_shows_the_reason() {
    let d = tempfile::tempdir().unwrap();
    let m = write(
        d.path(),
        "m.yaml",
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kube-router
  namespace: kube-system
  annotations: {nfguard.io/exempt: "pinned by NET-42 until the 1.8.9 image ships"}
spec:
  selector: {matchLabels: {app: kr}}
  template:
    metadata: {labels: {app: kr}}
    spec:
      hostNetwork: true
      containers:
      - name: kube-router
        image: 127.0.0.1:1/kube-router:old
        securityContext: {privileged: true}
"#,
    );
    let p = write(d.path(), "p.yaml", PROFILE);
    // Counts only where a NetfilterPolicy allows it (here: kube-system).
    let pol = write(
        d.path(),
        "pol.yaml",
        "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: exemptions}\nspec:\n  exemptionNamespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}\n",
    );
    check_files(&m, &p)
        .arg("--policy")
        .arg(&pol)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("[Exempt]"))
        .stdout(predicate::str::contains(
            "pinned by NET-42 until the 1.8.9 image ships",
        ));
    // Without it the annotation is ignored, and the report says so.
    check_files(&m, &p)
        .assert()
        .stdout(predicate::str::contains("[ExemptionNotAllowed]"))
        .stdout(predicate::str::contains(
            "nfguard.io/exempt ignored: no NetfilterPolicy allows exemptions in namespace kube-system",
        ))
        .stdout(predicate::str::contains("[Exempt]").not());
}

/// Exit 2 with exactly one stderr line containing every `needles`.
fn assert_error(cmd: &mut Command, needles: &[&str]) {
    let out = cmd.assert().code(2).get_output().clone();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{n:?} not in {stderr}");
    }
    assert!(out.stdout.is_empty(), "no partial report on error");
}

#[test]
fn malformed_yaml_is_exit_2_naming_file_and_document() {
    let d = tempfile::tempdir().unwrap();
    let m = write(
        d.path(),
        "bad.yaml",
        &format!("{PLAIN_DEPLOYMENT}\n---\nkind: Pod\nmetadata: {{name: [unclosed\n"),
    );
    let p = write(d.path(), "p.yaml", PROFILE);
    assert_error(
        nfguard()
            .args(["check", "-f"])
            .arg(&m)
            .arg("--profiles")
            .arg(&p),
        &["bad.yaml", "document 2", "malformed YAML"],
    );
}

#[test]
fn only_unknown_kinds_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let m = write(
        d.path(),
        "m.yaml",
        "apiVersion: example.com/v1\nkind: Frobnicator\nmetadata: {name: f}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
    );
    let p = write(d.path(), "p.yaml", PROFILE);
    assert_error(
        nfguard()
            .args(["check", "-f"])
            .arg(&m)
            .arg("--profiles")
            .arg(&p),
        &["no workload", "Frobnicator/f", "ConfigMap/c"],
    );
}

#[test]
fn document_without_kind_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let m = write(d.path(), "m.yaml", "just: a map\n");
    let p = write(d.path(), "p.yaml", PROFILE);
    assert_error(
        nfguard()
            .args(["check", "-f"])
            .arg(&m)
            .arg("--profiles")
            .arg(&p),
        &["m.yaml", "document 1", "not an object with a kind"],
    );
}

#[test]
fn broken_pod_spec_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let m = write(
        d.path(),
        "m.yaml",
        "kind: Pod\nmetadata: {name: p}\nspec: {containers: nope}\n",
    );
    let p = write(d.path(), "p.yaml", PROFILE);
    assert_error(
        nfguard()
            .args(["check", "-f"])
            .arg(&m)
            .arg("--profiles")
            .arg(&p),
        &["Pod p: invalid pod spec"],
    );
}

#[test]
fn missing_profiles_path_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let m = write(d.path(), "m.yaml", PLAIN_DEPLOYMENT);
    assert_error(
        nfguard()
            .args(["check", "-f"])
            .arg(&m)
            .arg("--profiles")
            .arg(d.path().join("nope")),
        &["nope", "No such file"],
    );
}

#[test]
fn no_profiles_flag_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let m = write(d.path(), "m.yaml", PLAIN_DEPLOYMENT);
    assert_error(
        nfguard().args(["check", "-f"]).arg(&m),
        &["no node profiles", "--profiles"],
    );
}

#[test]
fn empty_profiles_directory_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let m = write(d.path(), "m.yaml", PLAIN_DEPLOYMENT);
    let pd = d.path().join("profiles");
    std::fs::create_dir(&pd).unwrap();
    assert_error(
        nfguard()
            .args(["check", "-f"])
            .arg(&m)
            .arg("--profiles")
            .arg(&pd),
        &["no NodeNetfilterProfile found"],
    );
}

#[test]
fn profiles_file_holding_another_kind_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let m = write(d.path(), "m.yaml", PLAIN_DEPLOYMENT);
    let p = write(
        d.path(),
        "p.yaml",
        "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n",
    );
    assert_error(
        nfguard()
            .args(["check", "-f"])
            .arg(&m)
            .arg("--profiles")
            .arg(&p),
        &["p.yaml", "\"Node\"", "expected NodeNetfilterProfile"],
    );
}

#[test]
fn profile_status_not_in_contract_shape_is_exit_2_naming_the_field() {
    let d = tempfile::tempdir().unwrap();
    let m = write(d.path(), "m.yaml", PLAIN_DEPLOYMENT);
    for (bad, field) in [
        ("  activeBackend: sideways\n", "status.activeBackend"),
        (
            "  minReaderVersion: \"one point eight\"\n",
            "status.minReaderVersion",
        ),
        ("  writers: {pod: x}\n", "status.writers"),
        (
            "  kernel: {release: 6, nfTables: yes-ish}\n",
            "status.kernel",
        ),
    ] {
        let p = write(
            d.path(),
            "p.yaml",
            &format!(
                "apiVersion: nfguard.io/v1alpha1\nkind: NodeNetfilterProfile\nmetadata: {{name: node-a}}\nspec: {{}}\nstatus:\n{bad}"
            ),
        );
        assert_error(
            nfguard()
                .args(["check", "-f"])
                .arg(&m)
                .arg("--profiles")
                .arg(&p),
            &["p.yaml", "NodeNetfilterProfile node-a", field],
        );
    }
}

#[test]
fn unknown_extra_fields_in_profiles_are_tolerated() {
    let d = tempfile::tempdir().unwrap();
    let m = write(d.path(), "m.yaml", PLAIN_DEPLOYMENT);
    let pd = d.path().join("profiles");
    std::fs::create_dir(&pd).unwrap();
    write(
        &pd,
        "a.yaml",
        &format!("{PROFILE}  futureField: {{deep: [1, 2]}}\n  iptablesExtra: x\n"),
    );
    // A second file in the directory, JSON this time, as a List.
    write(
        &pd,
        "b.json",
        r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
             "metadata": {"name": "node-b"}, "spec": {"nodeName": "node-b", "newSpecField": 1},
             "status": {"activeBackend": "legacy", "someNewThing": true}}]}"#,
    );
    write(&pd, "README.txt", "not a manifest, ignored");
    nfguard()
        .args(["check", "-f"])
        .arg(&m)
        .arg("--profiles")
        .arg(&pd)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("2 candidate nodes"));
}

#[test]
fn bad_policy_glob_and_bad_platform_are_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let m = write(d.path(), "m.yaml", PLAIN_DEPLOYMENT);
    let p = write(d.path(), "p.yaml", PROFILE);
    let pol = write(
        d.path(),
        "pol.yaml",
        "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: strict}\nspec: {exemptImages: [\"a[\"]}\n",
    );
    assert_error(
        nfguard()
            .args(["check", "-f"])
            .arg(&m)
            .arg("--profiles")
            .arg(&p)
            .arg("--policy")
            .arg(&pol),
        &["NetfilterPolicy strict", "a["],
    );
    assert_error(
        nfguard()
            .args(["check", "--platform-default", "amd64", "-f"])
            .arg(&m)
            .arg("--profiles")
            .arg(&p),
        &["--platform-default", "os/arch"],
    );
}

#[test]
fn binary_garbage_is_exit_2_not_a_panic() {
    let d = tempfile::tempdir().unwrap();
    let m = d.path().join("m.yaml");
    std::fs::write(&m, [0xffu8, 0xfe, 0x00, 0x9c, 0x12]).unwrap();
    let p = write(d.path(), "p.yaml", PROFILE);
    assert_error(
        nfguard()
            .args(["check", "-f"])
            .arg(&m)
            .arg("--profiles")
            .arg(&p),
        &["m.yaml", "UTF-8"],
    );
}

/// A tenant's string (here an exemption reason, as an annotation can hold
/// anything) with an ANSI escape, a carriage return and a bidi override is
/// printed escaped in text and GitHub output: the operator's terminal or CI
/// log is not rewritten. JSON keeps the string as it is.
#[test]
fn tenant_strings_cannot_drive_the_terminal() {
    let d = tempfile::tempdir().unwrap();
    let hostile = "ok\u{1b}[2J\u{1b}[32mALLOWED\rforged\u{202e}txt";
    let m = write(
        d.path(),
        "m.yaml",
        &format!(
            r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {}
  namespace: kube-system
  annotations: {{nfguard.io/exempt: {}}}
spec:
  selector: {{matchLabels: {{app: kr}}}}
  template:
    metadata: {{labels: {{app: kr}}}}
    spec:
      hostNetwork: true
      containers:
      - name: kube-router
        image: 127.0.0.1:1/kube-router:old
        securityContext: {{privileged: true}}
"#,
            serde_json::to_string("kr\u{1b}[31m").unwrap(),
            serde_json::to_string(hostile).unwrap()
        ),
    );
    let p = write(d.path(), "p.yaml", PROFILE);
    let pol = write(
        d.path(),
        "pol.yaml",
        "apiVersion: nfguard.io/v1alpha1\nkind: NetfilterPolicy\nmetadata: {name: exemptions}\nspec:\n  exemptionNamespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}\n",
    );
    // Exempt (the reason printed), and not (a finding naming the object).
    for (format, policy, shown) in [
        (
            "text",
            true,
            r"ok\u{1b}[2J\u{1b}[32mALLOWED\u{d}forged\u{202e}txt",
        ),
        ("text", false, r"kr\u{1b}[31m"),
        ("github", false, r"kr\u{1b}[31m"),
    ] {
        let mut cmd = check_files(&m, &p);
        if policy {
            cmd.arg("--policy").arg(&pol);
        }
        let out = cmd.args(["-o", format]).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(shown), "{format}: {text}");
        for raw in ['\u{1b}', '\r', '\u{202e}'] {
            assert!(!text.contains(raw), "{format}: raw {raw:?} in {text:?}");
        }
    }
    let out = check_files(&m, &p)
        .arg("--policy")
        .arg(&pol)
        .args(["-o", "json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        json.to_string()
            .contains(&serde_json::to_string(hostile).unwrap()[1..20])
    );
}
