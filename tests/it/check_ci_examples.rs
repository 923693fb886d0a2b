//! The CI examples in docs/examples are run, not just shown: each example's
//! shell lines that call `nfguard check` run as written under bash, with the
//! variables the example itself declares pointed at the fixture fleet and
//! manifests (tests/fixtures/check-ci) and the built binary first on PATH.

use crate::check_ci_support;

use check_ci_support::{World, repo, validate};
use serde_yaml::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

fn example(name: &str) -> Value {
    let path = repo().join("docs/examples").join(name);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// String-valued entries of a mapping (`env:` or `variables:`).
fn vars(v: Option<&Value>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(Value::Mapping(m)) = v {
        for (k, v) in m {
            if let (Some(k), Some(v)) = (k.as_str(), v.as_str()) {
                out.insert(k.to_string(), v.to_string());
            }
        }
    }
    out
}

/// Lines of `script` that run `nfguard check`.
fn check_lines(script: &str) -> Vec<String> {
    script
        .lines()
        .filter(|l| l.contains("nfguard check"))
        .map(str::to_string)
        .collect()
}

/// The example's variables with the fixture inputs substituted: it must
/// declare each of them, or the substitution would test nothing.
fn substituted(declared: &BTreeMap<String, String>, manifest: &str) -> BTreeMap<String, String> {
    let fixture = [
        ("NFGUARD_PROFILES", "fleet/profiles.yaml"),
        ("NFGUARD_NODES", "fleet/nodes.yaml"),
        ("CNI_MANIFESTS", manifest),
    ];
    let mut env = declared.clone();
    for (k, v) in fixture {
        assert!(declared.contains_key(k), "the example declares no {k}");
        env.insert(k.to_string(), v.to_string());
    }
    env
}

/// Run `line` with bash as the CI runners do (errexit), in the work directory.
fn run(w: &World, line: &str, env: &BTreeMap<String, String>) -> Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_nfguard")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("bash");
    cmd.args(["--noprofile", "--norc", "-e", "-o", "pipefail", "-c", line])
        .current_dir(w.path())
        .env("PATH", path)
        // The fixture images are in a plain-HTTP registry on loopback.
        .env("NFGUARD_INSECURE_REGISTRIES", w.host());
    for (k, _) in std::env::vars() {
        if k.starts_with("NFGUARD_") && k != "NFGUARD_INSECURE_REGISTRIES" {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env);
    cmd.output().expect("run bash")
}

const ALLOW: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: shop}\nspec:\n  containers:\n  - {name: web, image: nginx}\n";

#[test]
fn github_actions_example_annotates_a_deny_and_passes_a_safe_change() {
    let wf = example("github-actions-cni-gate.yml");
    let jobs = wf["jobs"].as_mapping().expect("jobs");
    assert_eq!(jobs.len(), 1);
    let job = jobs.values().next().unwrap();
    let mut declared = vars(wf.get("env"));
    declared.extend(vars(job.get("env")));
    let steps = job["steps"].as_sequence().expect("steps");
    assert_eq!(steps[0]["uses"].as_str(), Some("actions/checkout@v4"));
    let mut lines = Vec::new();
    for step in steps {
        let mut env = declared.clone();
        env.extend(vars(step.get("env")));
        if let Some(script) = step.get("run").and_then(Value::as_str) {
            lines.extend(check_lines(script).into_iter().map(|l| (l, env.clone())));
        }
    }
    assert_eq!(lines.len(), 1, "one gate step: {lines:?}");
    let (line, declared) = &lines[0];
    assert!(line.contains("-o github"), "{line}");

    let w = World::new();
    let out = run(&w, line, &substituted(declared, "manifests/cni.yaml"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "a deny fails the step: {text}");
    let router = w.line_of("manifests/cni.yaml", "name: kube-router");
    // line_of finds the metadata name first; the container's is further down.
    assert!(router > 0);
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("::error ")).collect();
    assert_eq!(errors.len(), 2, "{text}");
    for e in &errors {
        assert!(
            e.starts_with("::error file=manifests/cni.yaml,line="),
            "{e}"
        );
        let line_no: usize = e["::error file=manifests/cni.yaml,line=".len()..]
            .split(',')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let content = std::fs::read_to_string(w.path().join("manifests/cni.yaml")).unwrap();
        let at = content.lines().nth(line_no - 1).unwrap().trim();
        assert_eq!(
            at, "name: kube-router",
            "the annotation's line names the container"
        );
        assert!(line_no > router, "not the metadata name");
    }
    assert!(
        text.contains("::warning file=manifests/cni.yaml,"),
        "{text}"
    );

    std::fs::write(w.path().join("allow.yaml"), ALLOW).unwrap();
    let ok = run(&w, line, &substituted(declared, "allow.yaml"));
    let text = String::from_utf8_lossy(&ok.stdout);
    assert_eq!(ok.status.code(), Some(0), "{text}");
    assert_eq!(text, "verdict: allow\n");
}

#[test]
fn gitlab_example_writes_the_junit_report_it_declares() {
    let ci = example("gitlab-ci-cni-gate.yml");
    let mut gates = Vec::new();
    for (name, job) in ci.as_mapping().expect("jobs") {
        let Some(script) = job.get("script").and_then(Value::as_sequence) else {
            continue;
        };
        let mut declared = vars(ci.get("variables"));
        declared.extend(vars(job.get("variables")));
        let report = job["artifacts"]["reports"]["junit"]
            .as_str()
            .unwrap_or_else(|| panic!("{name:?}: artifacts:reports:junit"))
            .to_string();
        assert_eq!(
            job["artifacts"]["when"].as_str(),
            Some("always"),
            "deny reports too"
        );
        for l in script.iter().filter_map(Value::as_str) {
            for line in check_lines(l) {
                gates.push((line, declared.clone(), report.clone()));
            }
        }
    }
    assert_eq!(gates.len(), 1, "{gates:?}");
    let (line, declared, report) = &gates[0];

    let w = World::new();
    let out = run(&w, line, &substituted(declared, "manifests/cni.yaml"));
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = validate("junit", &w.path().join(report)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary["suites"][0]["name"], "manifests/cni.yaml");
    assert_eq!(summary["counts"], serde_json::json!(["7", "2", "2"]));

    std::fs::write(w.path().join("allow.yaml"), ALLOW).unwrap();
    let ok = run(&w, line, &substituted(declared, "allow.yaml"));
    assert_eq!(ok.status.code(), Some(0));
    let summary = validate("junit", &w.path().join(report)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary["counts"][1], "0");
    assert_eq!(summary["counts"][2], "0");
}
