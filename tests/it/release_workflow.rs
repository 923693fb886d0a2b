//! The release workflow cannot run here (it needs GitHub's runners, GHCR and
//! its OIDC identity), so this reads it: what it publishes, with which
//! permissions, and that the scripts it calls do what it relies on.
//! actionlint checks it with the other workflows (tests/it/ci_workflows.rs).

use serde_yaml::Value;
use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

fn workflow() -> Value {
    serde_yaml::from_str(&read(".github/workflows/release.yml")).unwrap()
}

fn job<'a>(w: &'a Value, id: &str) -> &'a Value {
    let j = &w["jobs"][id];
    assert!(j.is_mapping(), "release.yml has no job {id}");
    j
}

/// Every `run:` and `uses:` of a job, as text, to search.
fn steps_text(j: &Value) -> String {
    serde_yaml::to_string(&j["steps"]).unwrap()
}

fn permissions(j: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = j["permissions"]
        .as_mapping()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.as_str().unwrap().to_string(),
                        v.as_str().unwrap().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn runs_only_on_version_tags_with_no_default_permissions() {
    let w = workflow();
    let on = &w["on"];
    assert!(on["push"]["tags"].is_sequence(), "{on:?}");
    assert!(on["push"]["branches"].is_null() && on["pull_request"].is_null());
    assert_eq!(w["permissions"].as_mapping().map(|m| m.len()), Some(0));
}

#[test]
fn each_job_asks_only_for_what_it_uses() {
    let w = workflow();
    let p = |id: &str| permissions(job(&w, id));
    let s = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        let mut v: Vec<_> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        v.sort();
        v
    };
    assert_eq!(p("prepare"), s(&[("contents", "read")]));
    assert_eq!(p("binaries"), s(&[("contents", "read")]));
    assert_eq!(
        p("image"),
        s(&[("contents", "read"), ("packages", "write")])
    );
    // Signing needs the OIDC token; only these jobs sign.
    assert_eq!(
        p("index"),
        s(&[
            ("attestations", "write"),
            ("contents", "read"),
            ("id-token", "write"),
            ("packages", "write")
        ])
    );
    assert_eq!(
        p("chart"),
        s(&[
            ("contents", "read"),
            ("id-token", "write"),
            ("packages", "write")
        ])
    );
    // Only the last job writes to the repository (the release itself).
    assert_eq!(p("publish"), s(&[("contents", "write")]));
    let jobs = w["jobs"].as_mapping().unwrap();
    assert_eq!(
        jobs.len(),
        6,
        "a new job needs its permissions checked here"
    );
}

#[test]
fn image_is_multi_arch_pinned_signed_with_sbom_and_provenance() {
    let w = workflow();
    let image = job(&w, "image");
    let platforms: Vec<&str> = image["strategy"]["matrix"]["include"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|m| m["platform"].as_str().unwrap())
        .collect();
    assert_eq!(platforms, ["linux/amd64", "linux/arm64"]);
    let build = image["steps"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("docker/build-push-action@"))
        })
        .expect("a docker/build-push-action step");
    let with = &build["with"];
    assert_eq!(with["provenance"], "mode=max");
    assert_eq!(with["sbom"], true);
    let args = with["build-args"].as_str().unwrap();
    assert!(args.contains("BUILDER_IMAGE=${{ needs.prepare.outputs.builder }}"));
    assert!(args.contains("RUNTIME_IMAGE=${{ needs.prepare.outputs.runtime }}"));
    // The Dockerfile takes both bases as those ARGs.
    let dockerfile = read("Dockerfile");
    assert!(dockerfile.contains("FROM ${BUILDER_IMAGE} AS builder"));
    assert!(dockerfile.contains("FROM ${RUNTIME_IMAGE} AS runtime"));
    // ...resolved to digests once, for both architectures.
    let prepare = steps_text(job(&w, "prepare"));
    assert!(prepare.contains("imagetools inspect") && prepare.contains("sha256:[0-9a-f]{64}"));

    let index = steps_text(job(&w, "index"));
    assert!(
        index.contains("cosign sign --yes \"$IMAGE@$DIGEST\""),
        "{index}"
    );
    assert!(index.contains("actions/attest-build-provenance@"));
    let chart = steps_text(job(&w, "chart"));
    assert!(chart.contains("helm push") && chart.contains("cosign sign --yes"));
}

#[test]
fn publishes_krew_archives_the_install_and_notes_from_the_changelog() {
    let w = workflow();
    let publish = steps_text(job(&w, "publish"));
    assert!(publish.contains("plugins/krew-release.sh \"$GITHUB_REF_NAME\""));
    assert!(publish.contains("linux/amd64=") && publish.contains("linux/arm64="));
    assert!(publish.contains("scripts/release-notes.sh \"$GITHUB_REF_NAME\""));
    assert!(publish.contains("gh release create"));
    let prepare = steps_text(job(&w, "prepare"));
    assert!(prepare.contains("scripts/stamp-release.sh \"$GITHUB_REF_NAME\""));
    let chart = steps_text(job(&w, "chart"));
    assert!(chart.contains("scripts/stamp-release.sh \"$GITHUB_REF_NAME\""));
}

#[test]
fn no_expression_is_pasted_into_a_shell_script() {
    // `${{ ... }}` inside `run:` is pasted into the script before it runs:
    // a tag or actor name could inject commands. Values reach scripts
    // through `env:` instead (matrix values are this file's own).
    let text = read(".github/workflows/release.yml");
    let w: Value = serde_yaml::from_str(&text).unwrap();
    for (id, j) in w["jobs"].as_mapping().unwrap() {
        for s in j["steps"].as_sequence().unwrap() {
            if let Some(run) = s["run"].as_str() {
                for expr in run.split("${{").skip(1) {
                    assert!(
                        expr.trim_start().starts_with("matrix."),
                        "job {id:?}: an expression in run: {run}"
                    );
                }
            }
        }
    }
}

fn copy_for_stamping() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for rel in [
        "Cargo.toml",
        "charts/nfguard/Chart.yaml",
        "manifests/kustomization.yaml",
    ] {
        let dst = tmp.path().join(rel);
        std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
        std::fs::copy(repo().join(rel), dst).unwrap();
    }
    tmp
}

fn crate_version() -> String {
    read("Cargo.toml")
        .lines()
        .find_map(|l| l.strip_prefix("version = "))
        .unwrap()
        .trim_matches('"')
        .to_string()
}

#[test]
fn the_version_lives_in_cargo_toml_and_a_release_stamps_the_image_tag() {
    let version = crate_version();
    // The chart's version is the crate's.
    let chart = read("charts/nfguard/Chart.yaml");
    assert!(
        chart.lines().any(|l| l == format!("version: {version}")),
        "charts/nfguard/Chart.yaml version must equal Cargo.toml's {version}"
    );
    let stamp = |tag: &str, dir: &std::path::Path| {
        Command::new(repo().join("scripts/stamp-release.sh"))
            .arg(tag)
            .arg(dir)
            .output()
            .unwrap()
    };
    let tmp = copy_for_stamping();
    let out = stamp(&format!("v{version}"), tmp.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let chart = std::fs::read_to_string(tmp.path().join("charts/nfguard/Chart.yaml")).unwrap();
    assert!(
        chart.contains(&format!("appVersion: \"v{version}\"")),
        "{chart}"
    );
    let kust = std::fs::read_to_string(tmp.path().join("manifests/kustomization.yaml")).unwrap();
    assert!(kust.contains(&format!("newTag: v{version}")), "{kust}");
    assert!(!kust.contains("newTag: dev"));

    // A tag that is not the crate's version is refused, and nothing changes.
    let tmp = copy_for_stamping();
    let out = stamp("v99.0.0", tmp.path());
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bump Cargo.toml"));
    let kust = std::fs::read_to_string(tmp.path().join("manifests/kustomization.yaml")).unwrap();
    assert!(kust.contains("newTag: dev"));
    assert!(
        !stamp("0.1.0", tmp.path()).status.success(),
        "a tag needs its v"
    );
}

#[test]
fn release_notes_are_the_tags_changelog_section_and_required() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("CHANGELOG.md");
    std::fs::write(
        &log,
        "# Changelog\n\n## Unreleased\n\n- next\n\n## v0.2.0 - 2026-12-01\n\n- two\n- lines\n\n## v0.1.0\n\n## v0.0.1\n- old\n",
    )
    .unwrap();
    let notes = |tag: &str| {
        Command::new(repo().join("scripts/release-notes.sh"))
            .arg(tag)
            .arg(&log)
            .output()
            .unwrap()
    };
    let out = notes("v0.2.0");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "\n- two\n- lines\n\n");
    let empty = notes("v0.1.0");
    assert!(!empty.status.success());
    assert!(String::from_utf8_lossy(&empty.stderr).contains("is empty"));
    let missing = notes("v9.9.9");
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no section"));
    // The project's own changelog has the section the next release starts from.
    assert!(read("CHANGELOG.md").contains("\n## Unreleased\n"));
}
