//! monitoring/: the PrometheusRule, the PodMonitors, the dashboard and the
//! promtool unit tests, read as Prometheus and Grafana read them.

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;
use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

pub fn monitoring(file: &str) -> PathBuf {
    root().join("monitoring").join(file)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every YAML document of a file.
pub fn yaml_documents(path: &Path) -> Vec<Yaml> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(&read(path))
        .map(|d| Yaml::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

pub fn prometheus_rule() -> Yaml {
    let docs = yaml_documents(&monitoring("prometheus-rules.yaml"));
    assert_eq!(docs.len(), 1, "one PrometheusRule");
    let rule = docs.into_iter().next().unwrap();
    assert_eq!(
        rule["apiVersion"].as_str(),
        Some("monitoring.coreos.com/v1")
    );
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    rule
}

/// spec.groups as a plain Prometheus rules file (what promtool reads).
pub fn rules_file_text() -> String {
    rules_file_text_with(|e| e.to_string())
}

/// The same with every expression passed through `edit` (mutation tests).
pub fn rules_file_text_with(edit: impl Fn(&str) -> String) -> String {
    let rule = prometheus_rule();
    let mut groups = rule["spec"]["groups"].clone();
    for g in groups.as_sequence_mut().expect("spec.groups") {
        for r in g["rules"].as_sequence_mut().expect("rules") {
            let expr = r["expr"].as_str().expect("expr").to_string();
            r["expr"] = edit(&expr).into();
        }
    }
    let mut file = serde_yaml::Mapping::new();
    file.insert("groups".into(), groups);
    serde_yaml::to_string(&file).unwrap()
}

pub struct Rule {
    pub group: String,
    pub body: Yaml,
}

impl Rule {
    pub fn alert(&self) -> Option<&str> {
        self.body["alert"].as_str()
    }
    pub fn expr(&self) -> &str {
        self.body["expr"]
            .as_str()
            .unwrap_or_else(|| panic!("rule without expr in {}", self.group))
    }
}

pub fn rules() -> Vec<Rule> {
    let rule = prometheus_rule();
    let groups = rule["spec"]["groups"].as_sequence().expect("spec.groups");
    groups
        .iter()
        .flat_map(|g| {
            let name = g["name"].as_str().expect("group name").to_string();
            g["rules"]
                .as_sequence()
                .expect("rules")
                .iter()
                .map(move |r| Rule {
                    group: name.clone(),
                    body: r.clone(),
                })
        })
        .collect()
}

pub fn dashboard() -> Json {
    let path = monitoring("grafana-dashboard.json");
    serde_json::from_str(&read(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Panels, those inside collapsed rows included.
pub fn panels(dashboard: &Json) -> Vec<Json> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        out.push(p.clone());
        if let Some(inner) = p["panels"].as_array() {
            out.extend(inner.iter().cloned());
        }
    }
    out
}

/// (panel title, refId, expr) of every query.
pub fn dashboard_queries(dashboard: &Json) -> Vec<(String, String, String)> {
    panels(dashboard)
        .iter()
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or("?").to_string();
            p["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |t| {
                    (
                        title.clone(),
                        t["refId"].as_str().unwrap_or("?").to_string(),
                        t["expr"].as_str().unwrap_or("").to_string(),
                    )
                })
        })
        .collect()
}

/// monitoring/tests/*.yaml, sorted.
pub fn unit_test_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(monitoring("tests"))
        .expect("monitoring/tests")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no promtool tests in monitoring/tests");
    files
}

/// The PodMonitors: (component, job label they set, extra target labels).
pub fn pod_monitors() -> Vec<(String, String, Vec<String>)> {
    yaml_documents(&monitoring("podmonitors.yaml"))
        .iter()
        .map(|pm| {
            assert_eq!(pm["kind"].as_str(), Some("PodMonitor"));
            let component = pm["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
                .as_str()
                .expect("component selector")
                .to_string();
            let endpoints = pm["spec"]["podMetricsEndpoints"].as_sequence().unwrap();
            assert_eq!(endpoints.len(), 1, "{component}: one endpoint");
            assert_eq!(
                endpoints[0]["port"].as_str(),
                Some("metrics"),
                "{component}"
            );
            let mut job = None;
            let mut extra = Vec::new();
            for r in endpoints[0]["relabelings"]
                .as_sequence()
                .into_iter()
                .flatten()
            {
                let target = r["targetLabel"].as_str().unwrap().to_string();
                if target == "job" {
                    job = r["replacement"].as_str().map(String::from);
                } else {
                    extra.push(target);
                }
            }
            (
                component.clone(),
                job.unwrap_or_else(|| panic!("{component}: no job relabel")),
                extra,
            )
        })
        .collect()
}
