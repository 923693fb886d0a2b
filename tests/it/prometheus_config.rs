//! scripts/prometheus_config.py, which gives the e2e's live Prometheus
//! (e2e/lib/monitoring.sh) what the Prometheus Operator would: scrape jobs
//! translated from monitoring/podmonitors.yaml, the PrometheusRule's spec as
//! a rule file, the dashboard's queries. Its output must be what promtool
//! accepts, carry the shipped selectors, port name, job relabelings and the
//! reporter's HTTPS + bearer token, and shorten `for:` only in the copy.

use crate::monitoring_support::files::{self, Rule};
use crate::monitoring_support::tools::{self, run, text};
use serde_yaml::Value as Yaml;
use std::path::Path;
use std::process::{Command, Output};

fn script(args: &[&str]) -> Output {
    run(Command::new("python3")
        .arg(files::root().join("scripts/prometheus_config.py"))
        .args(args))
}

fn ok_stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "prometheus_config.py failed (needs python3 with PyYAML): {}",
        text(out)
    );
    String::from_utf8(out.stdout.clone()).expect("UTF-8")
}

/// The scrape config for monitoring/podmonitors.yaml (or another file),
/// written into `dir` with the files it names, as the e2e calls it.
fn scrape_config(dir: &Path, podmonitors: &Path) -> Output {
    scrape_config_with(
        dir,
        podmonitors,
        &files::monitoring("prometheus-scrape-class.yaml"),
    )
}

/// In-pod path of the reporter scrape class's token (the shipped file).
const POD_TOKEN: &str = "/var/run/secrets/nfguard/reporter-metrics/token";

fn scrape_config_with(dir: &Path, podmonitors: &Path, prometheus: &Path) -> Output {
    let secrets = dir.join("secrets");
    std::fs::create_dir_all(&secrets).unwrap();
    for f in ["ca.crt", "sd-token", "rules.yaml", "reporter-token"] {
        std::fs::write(dir.join(f), "").unwrap();
    }
    std::fs::write(dir.join("rules.yaml"), "groups: []\n").unwrap();
    let p = |f: &str| dir.join(f).display().to_string();
    script(&[
        "scrape",
        &podmonitors.display().to_string(),
        "--api-server",
        "https://127.0.0.1:6443",
        "--ca-file",
        &p("ca.crt"),
        "--token-file",
        &p("sd-token"),
        "--secrets-dir",
        &secrets.display().to_string(),
        "--interval",
        "2s",
        "--rule-file",
        &p("rules.yaml"),
        "--configmaps-dir",
        &dir.join("configmaps").display().to_string(),
        "--prometheus",
        &prometheus.display().to_string(),
        "--pod-file",
        &format!("{POD_TOKEN}={}", p("reporter-token")),
    ])
}

fn relabel(job: &Yaml) -> Vec<Yaml> {
    job["relabel_configs"]
        .as_sequence()
        .expect("relabel_configs")
        .clone()
}

fn has_rule(rules: &[Yaml], want: &str) -> bool {
    let want: Yaml = serde_yaml::from_str(want).unwrap();
    rules.contains(&want)
}

#[test]
fn the_podmonitors_become_scrape_jobs_promtool_accepts_with_the_shipped_selectors_port_and_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let out = scrape_config(dir.path(), &files::monitoring("podmonitors.yaml"));
    let config = ok_stdout(&out);
    let path = dir.path().join("prometheus.yml");
    std::fs::write(&path, &config).unwrap();
    let check = run(Command::new(tools::promtool())
        .args(["check", "config"])
        .arg(&path));
    assert!(
        check.status.success(),
        "promtool check config: {}",
        text(&check)
    );

    let config: Yaml = serde_yaml::from_str(&config).unwrap();
    assert_eq!(config["global"]["scrape_interval"].as_str(), Some("2s"));
    assert_eq!(config["global"]["evaluation_interval"].as_str(), Some("2s"));
    let jobs = config["scrape_configs"].as_sequence().unwrap();
    let monitors = files::pod_monitors();
    assert_eq!(
        jobs.len(),
        monitors.len(),
        "one job per PodMonitor endpoint"
    );
    for (component, job_label, extra) in &monitors {
        let name = format!("podMonitor/nfguard-system/nfguard-{component}/0");
        let job = jobs
            .iter()
            .find(|j| j["job_name"].as_str() == Some(name.as_str()))
            .unwrap_or_else(|| panic!("no job {name}"));
        let sd = &job["kubernetes_sd_configs"][0];
        assert_eq!(sd["role"].as_str(), Some("pod"), "{name}");
        assert_eq!(
            sd["namespaces"]["names"][0].as_str(),
            Some("nfguard-system"),
            "{name}: the PodMonitor's own namespace"
        );
        assert_eq!(job["scrape_interval"].as_str(), Some("2s"), "{name}");
        assert_eq!(job["metrics_path"].as_str(), Some("/metrics"), "{name}");
        let rules = relabel(job);
        for (key, value) in [
            ("app_kubernetes_io_name", "nfguard"),
            ("app_kubernetes_io_component", component.as_str()),
        ] {
            assert!(
                has_rule(
                    &rules,
                    &format!(
                        "{{action: keep, source_labels: [__meta_kubernetes_pod_label_{key}, __meta_kubernetes_pod_labelpresent_{key}], regex: '({value});true'}}"
                    )
                ),
                "{name}: no keep for {key}={value}: {rules:?}"
            );
        }
        assert!(
            has_rule(
                &rules,
                "{action: keep, source_labels: [__meta_kubernetes_pod_container_port_name], regex: metrics}"
            ),
            "{name}: the port named metrics"
        );
        // The PodMonitor's own job relabel comes after the operator's default.
        let jobs_set: Vec<&str> = rules
            .iter()
            .filter(|r| r["target_label"].as_str() == Some("job"))
            .filter_map(|r| r["replacement"].as_str())
            .collect();
        assert_eq!(
            jobs_set,
            [
                format!("nfguard-system/nfguard-{component}").as_str(),
                job_label.as_str()
            ],
            "{name}"
        );
        for label in extra {
            assert!(
                rules
                    .iter()
                    .any(|r| r["target_label"].as_str() == Some(label.as_str())),
                "{name}: the PodMonitor's relabeling to {label} is missing"
            );
        }
        if component == "reporter" {
            assert_eq!(job["scheme"].as_str(), Some("https"));
            assert!(
                job["tls_config"]["insecure_skip_verify"].is_null(),
                "the reporter's certificate is verified"
            );
            assert_eq!(
                job["tls_config"]["ca_file"].as_str().map(Path::new),
                Some(
                    dir.path()
                        .join("configmaps/nfguard-system/nfguard-reporter-metrics-ca/ca.crt")
                        .as_path()
                ),
                "the CA the controller publishes"
            );
            assert_eq!(job["authorization"]["type"].as_str(), Some("Bearer"));
            let file = job["authorization"]["credentials_file"].as_str().unwrap();
            assert_eq!(
                Path::new(file),
                dir.path().join("reporter-token"),
                "the scrape class's projected token, as the local file"
            );
            assert!(has_rule(
                &rules,
                "{source_labels: [__meta_kubernetes_pod_node_name], target_label: node}"
            ));
        } else {
            assert!(job["scheme"].is_null(), "{name}: plain HTTP");
            assert!(job["authorization"].is_null(), "{name}: no token");
        }
    }
}

#[test]
fn a_podmonitor_field_the_translation_does_not_know_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let text_in = std::fs::read_to_string(files::monitoring("podmonitors.yaml"))
        .unwrap()
        .replace(
            "      scheme: https\n",
            "      scheme: https\n      basicAuth: {username: {name: s, key: u}}\n",
        );
    let pm = dir.path().join("pm.yaml");
    std::fs::write(&pm, text_in).unwrap();
    let out = scrape_config(dir.path(), &pm);
    assert!(
        !out.status.success(),
        "basicAuth must not be dropped quietly"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PodMonitor nfguard-system/nfguard-reporter: podMetricsEndpoints[0]: basicAuth not supported"),
        "{err}"
    );

    let big = dir.path().join("big.yaml");
    std::fs::write(&big, "#".repeat((1 << 20) + 1)).unwrap();
    let out = scrape_config(dir.path(), &big);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("larger than 1048576 bytes"),
        "{}",
        text(&out)
    );
}

/// The shipped scrape class projects a token for the audience the
/// reporter requires by default, and a class whose token file is not a
/// projected ServiceAccount token with an audience is refused.
#[test]
fn the_scrape_class_token_is_projected_for_the_reporter_s_audience() {
    let shipped = files::monitoring("prometheus-scrape-class.yaml");
    let out = script(&[
        "token-audience",
        &shipped.display().to_string(),
        "nfguard-reporter",
    ]);
    assert_eq!(
        ok_stdout(&out).trim(),
        nfguard::reporter::metrics_auth::DEFAULT_AUDIENCE
    );
    let dir = tempfile::tempdir().unwrap();
    let shipped_text = std::fs::read_to_string(&shipped).unwrap();
    for (from, to, why) in [
        (
            "              audience: nfguard-reporter-metrics\n",
            "",
            "no projected serviceAccountToken with an audience",
        ),
        (
            "credentialsFile: /var/run/secrets/nfguard/reporter-metrics/token",
            "credentialsFile: /etc/prometheus/token",
            "is in no one volumeMount",
        ),
        (
            "- name: nfguard-reporter\n",
            "- name: other\n",
            "no scrape class 'nfguard-reporter'",
        ),
    ] {
        assert!(shipped_text.contains(from), "{from}");
        let broken = dir.path().join("prometheus.yaml");
        std::fs::write(&broken, shipped_text.replace(from, to)).unwrap();
        let out = scrape_config_with(dir.path(), &files::monitoring("podmonitors.yaml"), &broken);
        assert!(!out.status.success(), "{why}: accepted");
        assert!(text(&out).contains(why), "{why}: {}", text(&out));
    }
}

fn seconds(d: &str) -> u64 {
    let (n, unit) = d.split_at(d.len() - 1);
    n.parse::<u64>().unwrap()
        * match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            _ => panic!("duration {d}"),
        }
}

#[test]
fn the_rules_copy_shortens_only_for_and_promtool_accepts_it() {
    let out = script(&[
        "rules",
        &files::monitoring("prometheus-rules.yaml")
            .display()
            .to_string(),
        "--max-for",
        "5s",
    ]);
    let copy = ok_stdout(&out);
    let shipped: Vec<Rule> = files::rules();
    let copied: Yaml = serde_yaml::from_str(&copy).unwrap();
    let copied: Vec<&Yaml> = copied["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .collect();
    assert_eq!(copied.len(), shipped.len());
    let mut shortened = 0;
    for (s, c) in shipped.iter().zip(&copied) {
        assert_eq!(c["alert"], s.body["alert"]);
        assert_eq!(c["expr"], s.body["expr"], "{:?}: expr unchanged", s.alert());
        assert_eq!(c["labels"], s.body["labels"]);
        assert_eq!(c["annotations"], s.body["annotations"]);
        let shipped_for = seconds(s.body["for"].as_str().unwrap());
        let copy_for = c["for"].as_str().unwrap();
        if shipped_for > 5 {
            assert_eq!(copy_for, "5s", "{:?}", s.alert());
            shortened += 1;
        } else {
            assert_eq!(copy_for, s.body["for"].as_str().unwrap());
        }
    }
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("{shortened} alert(s) with `for:` shortened to 5s")),
        "{}",
        text(&out)
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.yaml");
    std::fs::write(&path, &copy).unwrap();
    let check = run(Command::new(tools::promtool())
        .args(["check", "rules"])
        .arg(&path));
    assert!(
        check.status.success(),
        "promtool check rules: {}",
        text(&check)
    );

    // Without --max-for the copy is the spec as shipped.
    let plain = ok_stdout(&script(&[
        "rules",
        &files::monitoring("prometheus-rules.yaml")
            .display()
            .to_string(),
    ]));
    assert_eq!(
        serde_yaml::from_str::<Yaml>(&plain).unwrap(),
        serde_yaml::from_str::<Yaml>(&files::rules_file_text()).unwrap()
    );
}

#[test]
fn every_dashboard_query_comes_out_with_its_variables_substituted() {
    let out = ok_stdout(&script(&[
        "panels",
        &files::monitoring("grafana-dashboard.json")
            .display()
            .to_string(),
    ]));
    let got: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let want = files::dashboard_queries(&files::dashboard());
    assert_eq!(got.len(), want.len(), "one line per query");
    for (g, (title, _, expr)) in got.iter().zip(&want) {
        assert_eq!(g["panel"].as_str(), Some(title.as_str()));
        assert_eq!(
            g["expr"].as_str().unwrap(),
            expr.replace("$__rate_interval", "1m")
        );
        assert!(!g["expr"].as_str().unwrap().contains('$'), "{g}");
    }
    let out = script(&[
        "panels",
        &files::monitoring("grafana-dashboard.json")
            .display()
            .to_string(),
        "--var",
        "nope",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--var 'nope': not NAME=VALUE"));
}
