//! The Helm chart charts/nfguard: each step of scripts/check-helm.sh as a test
//! of its own (lint, the default render against manifests/, the monitoring
//! render against `kustomize build monitoring/`, the release namespace, every
//! value's effect, bad values refused, the README's values table), plus the
//! chart's CRDs against src/api, its copies of monitoring/'s rules and
//! dashboard against scripts/sync-monitoring.sh, and broken copies of the
//! chart that the comparisons must catch, naming object and field.
//! helm (and kustomize) come from $NFGUARD_HELM ($NFGUARD_KUSTOMIZE) or
//! scripts/go-tool.sh (Go): without either these tests fail. So do they
//! without the Python modules of scripts/check-install.sh: the script's
//! "skipped" is for developers running it by hand, never a passing test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CHART_CRDS: &str = "charts/nfguard/crds/nfguard.io_crds.yaml";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check_helm(steps: &[&str], chart: Option<&Path>) -> (Output, String) {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("scripts/check-helm.sh"))
        .args(steps)
        .env("NFGUARD_REQUIRE_INSTALL_TOOLS", "1");
    if let Some(dir) = chart {
        cmd.env("NFGUARD_CHART", dir);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/check-helm.sh: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    (out, stdout)
}

/// Runs one step; it must pass.
fn step_passes(step: &str) {
    let (out, stdout) = check_helm(&[step], None);
    assert!(
        out.status.success(),
        "scripts/check-helm.sh {step} failed (output above)"
    );
    assert!(
        stdout.contains(&format!("check-helm: {step}: ok")),
        "scripts/check-helm.sh {step} did not say it passed: {stdout}"
    );
}

#[test]
fn helm_chart_lints_strict() {
    step_passes("lint");
}

#[test]
fn helm_default_render_equals_manifests() {
    step_passes("same");
}

#[test]
fn helm_monitoring_equals_kustomize_build_of_monitoring() {
    step_passes("monitoring");
}

#[test]
fn helm_release_namespace_reaches_every_reference() {
    step_passes("namespace");
}

#[test]
fn helm_every_value_takes_effect() {
    step_passes("values");
}

#[test]
fn helm_bad_values_are_refused() {
    step_passes("refuse");
}

#[test]
fn helm_readme_documents_every_value() {
    step_passes("readme");
}

/// The chart's crds/ is a copy of the generated CRDs (Helm installs CRDs only
/// from the chart's own crds/ directory); NFGUARD_UPDATE_CRDS=1 rewrites it.
#[test]
fn helm_chart_crds_are_the_generated_ones() {
    let path = repo().join(CHART_CRDS);
    let generated = nfguard::api::crds_yaml();
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    if on_disk != generated && std::env::var("NFGUARD_UPDATE_CRDS").as_deref() == Ok("1") {
        std::fs::write(&path, &generated).expect("write the chart's CRDs");
        println!("NFGUARD_UPDATE_CRDS=1: rewrote {CHART_CRDS}");
        return;
    }
    assert!(
        on_disk == generated,
        "{CHART_CRDS} differs from the CRDs of src/api: cargo run -- crd > {CHART_CRDS} (or NFGUARD_UPDATE_CRDS=1 cargo test --test it install_helm::)"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read chart dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy chart file");
        }
    }
}

/// The comparison can fail: a copy of the chart with one probe period and
/// one quoted env value changed is reported object by object, field by field.
#[test]
fn helm_drift_from_manifests_is_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let chart = tmp.path().join("nfguard");
    copy_dir(&repo().join("charts/nfguard"), &chart);
    let edit = |file: &str, from: &str, to: &str| {
        let path = chart.join(file);
        let text = std::fs::read_to_string(&path).expect("read template");
        assert!(text.contains(from), "{file} no longer contains {from:?}");
        std::fs::write(&path, text.replacen(from, to, 1)).expect("write template");
    };
    edit(
        "templates/webhook.yaml",
        "periodSeconds: 5",
        "periodSeconds: 6",
    );
    edit("templates/reporter.yaml", "value: \"2\"", "value: 2");
    let (out, stdout) = check_helm(&["same"], Some(&chart));
    assert!(
        !out.status.success(),
        "a drifted chart passed the comparison"
    );
    for want in [
        "Deployment nfguard-system/nfguard-webhook: spec.template.spec.containers[0].readinessProbe.periodSeconds: manifests/ 5, chart 6",
        "DaemonSet nfguard-system/nfguard-reporter: spec.template.spec.containers[0].env[1].value: manifests/ '2', chart 2",
    ] {
        assert!(
            stdout.contains(want),
            "the comparison did not name {want:?}: {stdout}"
        );
    }
}

fn sync_monitoring(chart: Option<&Path>, args: &[&str]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(repo().join("scripts/sync-monitoring.sh"))
        .args(args);
    if let Some(dir) = chart {
        cmd.env("NFGUARD_CHART", dir);
    }
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run scripts/sync-monitoring.sh: {e}"))
}

/// monitoring/ is the one source of the rules and the dashboard; the chart's
/// files/ holds the copies scripts/sync-monitoring.sh generates from it.
#[test]
fn helm_monitoring_files_are_the_generated_copies() {
    let out = sync_monitoring(None, &["--check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A stale copy fails naming the command that regenerates it, and that
/// command makes the check pass again.
#[test]
fn helm_stale_monitoring_copy_names_the_sync_command() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let chart = tmp.path().join("nfguard");
    copy_dir(&repo().join("charts/nfguard"), &chart);
    let copy = chart.join("files/grafana-dashboard.json");
    let text = std::fs::read_to_string(&copy).expect("read the dashboard copy");
    std::fs::write(&copy, text.replacen("\"nfguard\"", "\"nfguard-edited\"", 1)).unwrap();
    std::fs::remove_file(chart.join("files/prometheus-rules.yaml")).unwrap();

    let out = sync_monitoring(Some(&chart), &["--check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a stale copy passed: {stderr}");
    for name in ["grafana-dashboard.json", "prometheus-rules.yaml"] {
        assert!(
            stderr.contains(&format!(
                "files/{name} is not the generated copy of monitoring/{name}: run scripts/sync-monitoring.sh"
            )),
            "{name} not named with the command: {stderr}"
        );
    }

    let out = sync_monitoring(Some(&chart), &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sync_monitoring(Some(&chart), &["--check"]);
    assert!(
        out.status.success(),
        "still stale after scripts/sync-monitoring.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dashboard = |dir: &Path| std::fs::read(dir.join("files/grafana-dashboard.json")).unwrap();
    assert_eq!(
        dashboard(&chart),
        std::fs::read(repo().join("monitoring/grafana-dashboard.json")).unwrap()
    );
}

/// The monitoring comparison can fail: a chart whose PodMonitors scrape
/// another path and whose copies of the dashboard and one alert's text
/// drifted is reported object by object, field by field, and the stale
/// copies with the command that regenerates them.
#[test]
fn helm_monitoring_drift_is_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let chart = tmp.path().join("nfguard");
    copy_dir(&repo().join("charts/nfguard"), &chart);
    let edit = |file: &str, from: &str, to: &str| {
        let path = chart.join(file);
        let text = std::fs::read_to_string(&path).expect("read chart file");
        assert!(text.contains(from), "{file} no longer contains {from:?}");
        std::fs::write(&path, text.replacen(from, to, 1)).expect("write chart file");
    };
    edit(
        "templates/podmonitors.yaml",
        "path: /metrics",
        "path: /metrix",
    );
    edit(
        "files/grafana-dashboard.json",
        "\"refresh\": \"1m\"",
        "\"refresh\": \"5m\"",
    );
    edit(
        "files/prometheus-rules.yaml",
        "summary: Node {{ $labels.node }} has a critical netfilter hazard.",
        "summary: Node {{ $labels.instance }} has a critical netfilter hazard.",
    );
    let (out, stdout) = check_helm(&["monitoring"], Some(&chart));
    assert!(
        !out.status.success(),
        "a drifted chart passed the comparison"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for want in [
        "PodMonitor nfguard-system/nfguard-webhook: spec.podMetricsEndpoints[0].path: monitoring/ '/metrics', chart '/metrix'",
        "ConfigMap nfguard-system/nfguard-grafana-dashboard: data.nfguard.json: monitoring/ and chart differ:",
        "PrometheusRule nfguard-system/nfguard: spec.groups[0].rules[0].annotations.summary: monitoring/ 'Node {{ $labels.node }} has a critical netfilter hazard.', chart 'Node {{ $labels.instance }}",
    ] {
        assert!(
            stdout.contains(want),
            "the comparison did not name {want:?}: {stdout}"
        );
    }
    assert!(
        stderr.contains("files/grafana-dashboard.json is not the generated copy")
            && stderr.contains("run scripts/sync-monitoring.sh"),
        "the stale copies were not named with the command: {stderr}"
    );
}

/// A missing helm is a failure with the reason, never a skip: a named helm
/// that is not there, and no Go to build one with.
#[test]
fn helm_missing_is_a_clear_failure() {
    let out = Command::new("bash")
        .arg(repo().join("scripts/check-helm.sh"))
        .arg("lint")
        .env("NFGUARD_HELM", "/nonexistent/helm")
        .output()
        .expect("run scripts/check-helm.sh");
    assert!(!out.status.success(), "check-helm.sh passed without helm");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("NFGUARD_HELM=/nonexistent/helm is not an executable"),
        "unclear error for a missing NFGUARD_HELM: {stderr}"
    );

    let empty_cache = tempfile::tempdir().expect("tempdir");
    let out = Command::new("bash")
        .arg(repo().join("scripts/check-helm.sh"))
        .arg("lint")
        .env_remove("NFGUARD_HELM")
        .env("NFGUARD_E2E_CACHE", empty_cache.path())
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run scripts/check-helm.sh");
    assert!(!out.status.success(), "check-helm.sh passed without Go");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("go-tool.sh: needs Go") && stderr.contains("check-helm: no helm"),
        "unclear error without Go: {stderr}"
    );
}
