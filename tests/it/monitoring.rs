//! monitoring/ against the real thing: every metric and label the alerts,
//! the dashboard and the promtool unit tests use is checked against the
//! /metrics the three components really serve; promtool checks and
//! unit-tests the rules; kustomize renders the directory; the docs list
//! exactly the exported metrics and one runbook section per alert.

use crate::monitoring_support;

use monitoring_support::components::{Scrapes, scrape_all};
use monitoring_support::exposition::Family;
use monitoring_support::files::{self, Rule};
use monitoring_support::promql::{self, Parsed, Selector};
use monitoring_support::tools::{self, run, text};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// Labels Prometheus attaches to every scraped series of a PodMonitor target.
const TARGET_LABELS: [&str; 6] = [
    "job",
    "instance",
    "pod",
    "namespace",
    "container",
    "endpoint",
];
/// Labels whose values come from a closed set: a value used in a query must
/// be one the component really exports.
const CLOSED_LABELS: [&str; 10] = [
    "outcome",
    "condition",
    "status",
    "verdict",
    "stage",
    "change",
    "taint",
    "cause",
    "backend",
    "kind",
];
const RUNBOOK_BASE: &str = "https://github.com/nfguard/nfguard/blob/main/docs/alerts.md";

fn component_of(metric: &str) -> Option<&'static str> {
    ["webhook", "controller", "reporter"]
        .into_iter()
        .find(|c| metric.starts_with(&format!("nfguard_{c}_")))
}

/// Checks selectors against the scrapes and the PodMonitors' target labels.
struct Checker {
    scrapes: Scrapes,
    /// component -> (job, extra target labels)
    monitors: BTreeMap<String, (String, Vec<String>)>,
}

impl Checker {
    async fn new() -> Self {
        let monitors = files::pod_monitors()
            .into_iter()
            .map(|(c, job, extra)| (c, (job, extra)))
            .collect();
        Checker {
            scrapes: scrape_all().await,
            monitors,
        }
    }

    fn family(&self, metric: &str) -> Result<(&'static str, &Family), String> {
        let component = component_of(metric)
            .ok_or_else(|| format!("{metric}: not a metric of an nfguard component"))?;
        let exposition = self
            .scrapes
            .all()
            .into_iter()
            .find(|(c, _)| *c == component)
            .map(|(_, e)| e)
            .unwrap();
        let family = exposition.family_of(metric).ok_or_else(|| {
            let known: Vec<String> = exposition
                .families
                .values()
                .flat_map(|f| f.series_names())
                .collect();
            format!("{metric}: the {component}'s /metrics has no such series (it has {known:?})")
        })?;
        Ok((component, family))
    }

    fn jobs(&self) -> BTreeSet<&str> {
        self.monitors.values().map(|(j, _)| j.as_str()).collect()
    }

    fn target_labels(&self, component: &str) -> BTreeSet<String> {
        let extra = self
            .monitors
            .get(component)
            .map(|(_, e)| e.clone())
            .unwrap_or_default();
        TARGET_LABELS
            .iter()
            .map(|s| s.to_string())
            .chain(extra)
            .collect()
    }

    /// Problems with one selector; pushes the labels it can carry into `labels`.
    fn check_selector(&self, s: &Selector, labels: &mut BTreeSet<String>) -> Vec<String> {
        let mut problems = Vec::new();
        if s.name == "up" {
            labels.extend(TARGET_LABELS.iter().map(|l| l.to_string()));
            let job = s.matchers.iter().find(|m| m.label == "job");
            let jobs: Vec<&str> = match job {
                Some(m) if m.op == "=" => vec![m.value.as_str()],
                Some(m) if m.op == "=~" => m.value.split('|').collect(),
                _ => vec![],
            };
            if jobs.is_empty() {
                problems.push("up without a job matcher".into());
            }
            for j in jobs {
                if !self.jobs().contains(j) {
                    problems.push(format!("up{{job=\"{j}\"}}: no PodMonitor sets that job"));
                }
            }
            return problems;
        }
        let (component, family) = match self.family(&s.name) {
            Ok(x) => x,
            Err(e) => return vec![e],
        };
        let targets = self.target_labels(component);
        labels.extend(family.labels.keys().cloned());
        labels.extend(targets.iter().cloned());
        for m in &s.matchers {
            if m.label == "job" {
                let job = &self.monitors[component].0;
                if m.op == "=" && &m.value != job {
                    problems.push(format!(
                        "{}: job {:?}, the PodMonitor sets {job:?}",
                        s.name, m.value
                    ));
                }
            } else if targets.contains(&m.label) {
            } else if let Some(values) = family.labels.get(&m.label) {
                if m.op == "="
                    && CLOSED_LABELS.contains(&m.label.as_str())
                    && !values.contains(&m.value)
                {
                    problems.push(format!(
                        "{}{{{}=\"{}\"}}: the component exports only {values:?}",
                        s.name, m.label, m.value
                    ));
                }
            } else {
                problems.push(format!(
                    "{}: no label {:?} in the real samples (labels: {:?})",
                    s.name,
                    m.label,
                    family.labels.keys().collect::<Vec<_>>()
                ));
            }
        }
        problems
    }

    /// Problems with a whole expression (selectors and grouping labels).
    fn check(&self, parsed: &Parsed) -> Vec<String> {
        let mut labels = BTreeSet::new();
        let mut problems: Vec<String> = parsed
            .selectors
            .iter()
            .flat_map(|s| self.check_selector(s, &mut labels))
            .collect();
        for g in &parsed.grouping {
            if !labels.contains(g) {
                problems.push(format!(
                    "grouping label {g:?} is on none of the selected series"
                ));
            }
        }
        problems
    }
}

/// Every expression: (where, PromQL as Prometheus receives it).
fn all_expressions() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = files::rules()
        .iter()
        .map(|r| {
            (
                format!("rule {}", r.alert().unwrap_or("?")),
                r.expr().to_string(),
            )
        })
        .collect();
    for (panel, ref_id, expr) in files::dashboard_queries(&files::dashboard()) {
        let expr = promql::substitute_grafana_variables(&expr)
            .unwrap_or_else(|e| panic!("panel {panel:?} {ref_id}: {e}"));
        out.push((format!("panel {panel:?} {ref_id}"), expr));
    }
    out
}

#[tokio::test]
async fn every_metric_and_label_in_the_rules_and_the_dashboard_is_really_exported() {
    let checker = Checker::new().await;
    let promtool = tools::promtool();
    let mut problems = Vec::new();
    let mut selectors = 0;
    for (place, expr) in all_expressions() {
        match promql::parse(&promtool, &expr) {
            Ok(parsed) => {
                selectors += parsed.selectors.len();
                problems.extend(
                    checker
                        .check(&parsed)
                        .into_iter()
                        .map(|p| format!("{place}: {p}")),
                );
            }
            Err(e) => problems.push(format!("{place}: {e}")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        selectors > 50,
        "only {selectors} selectors found: the extraction is broken"
    );
}

#[tokio::test]
async fn a_misspelt_metric_or_label_is_caught() {
    let checker = Checker::new().await;
    let promtool = tools::promtool();
    for (expr, why) in [
        ("nfguard_webhook_verdicts", "a counter is stored as _total"),
        (
            "nfguard_webhook_admission_duration_seconds",
            "a histogram has no bare series",
        ),
        (
            "nfguard_controller_node_condition{state=\"False\"}",
            "no label state",
        ),
        (
            "nfguard_controller_node_condition{status=\"false\"}",
            "status values are True/False/Unknown",
        ),
        (
            "sum by (verdict) (nfguard_reporter_probes_total)",
            "the reporter has no verdict label",
        ),
        ("up{job=\"nfguard\"}", "no such job"),
        (
            "nfguard_reporter_probes_total{job=\"nfguard-webhook\"}",
            "the reporter's job is nfguard-reporter",
        ),
    ] {
        let parsed = promql::parse(&promtool, expr).unwrap();
        assert!(!checker.check(&parsed).is_empty(), "{expr} passed ({why})");
    }
}

#[tokio::test]
async fn unit_test_inputs_are_series_the_components_really_export() {
    let checker = Checker::new().await;
    let promtool = tools::promtool();
    let mut problems = Vec::new();
    for file in files::unit_test_files() {
        for doc in files::yaml_documents(&file) {
            for test in doc["tests"].as_sequence().into_iter().flatten() {
                for input in test["input_series"].as_sequence().into_iter().flatten() {
                    let series = input["series"].as_str().unwrap();
                    let place = format!("{}: {series}", file.display());
                    match promql::parse(&promtool, series) {
                        // Prometheus makes `up` itself, for any job.
                        Ok(p) if p.selectors.iter().all(|s| s.name == "up") => {}
                        Ok(p) => problems.extend(
                            checker
                                .check(&p)
                                .into_iter()
                                .map(|e| format!("{place}: {e}")),
                        ),
                        Err(e) => problems.push(format!("{place}: {e}")),
                    }
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The rules as a plain rules file in `dir`, named as the unit tests expect.
fn write_rules(dir: &Path, text: &str) {
    std::fs::write(dir.join("nfguard.rules.yaml"), text).unwrap();
}

#[test]
fn promtool_accepts_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    write_rules(dir.path(), &files::rules_file_text());
    let out = run(Command::new(tools::promtool())
        .args(["check", "rules"])
        .arg(dir.path().join("nfguard.rules.yaml")));
    assert!(out.status.success(), "{}", text(&out));
    let n = files::rules().len();
    assert!(
        text(&out).contains(&format!("SUCCESS: {n} rules found")),
        "{}",
        text(&out)
    );
}

/// `promtool test rules` on monitoring/tests/*.yaml against `rules_text`.
fn promtool_test(rules_text: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    write_rules(dir.path(), rules_text);
    let mut names = Vec::new();
    for f in files::unit_test_files() {
        let name = f.file_name().unwrap().to_owned();
        std::fs::copy(&f, dir.path().join(&name)).unwrap();
        names.push(name);
    }
    run(Command::new(tools::promtool())
        .current_dir(dir.path())
        .args(["test", "rules"])
        .args(&names))
}

#[test]
fn promtool_unit_tests_pass_and_every_alert_is_tested_firing() {
    let out = promtool_test(&files::rules_file_text());
    assert!(out.status.success(), "{}", text(&out));
    let mut fired = BTreeSet::new();
    let mut quiet = 0;
    for file in files::unit_test_files() {
        for doc in files::yaml_documents(&file) {
            assert_eq!(
                doc["rule_files"].as_sequence().map(|s| s.len()),
                Some(1),
                "{}: rule_files [nfguard.rules.yaml]",
                file.display()
            );
            for test in doc["tests"].as_sequence().into_iter().flatten() {
                for case in test["alert_rule_test"].as_sequence().into_iter().flatten() {
                    let name = case["alertname"].as_str().unwrap().to_string();
                    match case["exp_alerts"].as_sequence() {
                        Some(a) if !a.is_empty() => {
                            fired.insert(name);
                        }
                        _ => quiet += 1,
                    }
                }
            }
        }
    }
    let alerts: BTreeSet<String> = files::rules()
        .iter()
        .filter_map(|r| r.alert().map(String::from))
        .collect();
    let untested: Vec<_> = alerts.difference(&fired).collect();
    assert!(
        untested.is_empty(),
        "no test makes these fire: {untested:?}"
    );
    assert!(
        quiet >= alerts.len(),
        "only {quiet} cases where an alert must stay quiet"
    );
}

#[test]
fn the_unit_tests_catch_a_rule_that_reads_the_standby_controller() {
    const FILTER: &str = "and on (instance) (nfguard_controller_leader == 1)";
    let broken = files::rules_file_text_with(|e| e.replace(FILTER, ""));
    assert_ne!(
        broken,
        files::rules_file_text(),
        "the mutation changed nothing"
    );
    let out = promtool_test(&broken);
    assert!(
        !out.status.success(),
        "still passes without the leader filter:\n{}",
        text(&out)
    );
    assert!(text(&out).contains("FAILED"), "{}", text(&out));
}

fn duration_seconds(d: &str) -> Option<u64> {
    let (n, unit) = d.split_at(d.len().checked_sub(1)?);
    let n: u64 = n.parse().ok()?;
    Some(
        n * match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            _ => return None,
        },
    )
}

/// `## Name` headings of docs/alerts.md, as GitHub anchors (lower case).
fn alert_doc_anchors() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(files::root().join("docs/alerts.md")).unwrap();
    doc.lines()
        .filter_map(|l| l.strip_prefix("## "))
        .filter(|h| h.starts_with("Nfguard"))
        .map(|h| h.trim().to_lowercase())
        .collect()
}

#[test]
fn every_alert_has_a_severity_annotations_a_runbook_section_and_a_for() {
    let anchors = alert_doc_anchors();
    let rules: Vec<Rule> = files::rules();
    let mut names = BTreeSet::new();
    for r in &rules {
        let name = r
            .alert()
            .unwrap_or_else(|| panic!("{}: a recording rule", r.group));
        assert!(names.insert(name.to_string()), "{name} twice");
        let b = &r.body;
        let severity = b["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("critical" | "warning")),
            "{name}: severity {severity:?}"
        );
        for a in ["summary", "description"] {
            let t = b["annotations"][a].as_str().unwrap_or("");
            assert!(t.len() > 20, "{name}: {a} {t:?}");
        }
        let anchor = name.to_lowercase();
        assert_eq!(
            b["annotations"]["runbook_url"].as_str(),
            Some(format!("{RUNBOOK_BASE}#{anchor}").as_str()),
            "{name}"
        );
        assert!(
            anchors.contains(&anchor),
            "docs/alerts.md has no section ## {name}"
        );
        let for_ = b["for"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no for"));
        let secs = duration_seconds(for_).unwrap_or_else(|| panic!("{name}: for {for_:?}"));
        assert!((60..=3 * 3600).contains(&secs), "{name}: for {for_}");
    }
    let stray: Vec<_> = anchors
        .iter()
        .filter(|a| !names.iter().any(|n| &n.to_lowercase() == *a))
        .collect();
    assert!(
        stray.is_empty(),
        "docs/alerts.md documents alerts that do not exist: {stray:?}"
    );
}

#[test]
fn dashboard_panels_use_the_datasource_variable_and_promtool_parses_every_query() {
    let d = files::dashboard();
    assert!(
        d["schemaVersion"].as_u64().unwrap_or(0) >= 39,
        "schemaVersion"
    );
    assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty()));
    let vars = d["templating"]["list"].as_array().expect("templating");
    assert!(
        vars.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a datasource variable of type prometheus"
    );
    let uses_variable =
        |ds: &serde_json::Value| ds["uid"] == "${datasource}" && ds["type"] == "prometheus";
    let mut ids = BTreeSet::new();
    let mut rules = Vec::new();
    for p in files::panels(&d) {
        let title = p["title"].as_str().unwrap_or("?");
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "{title}: id twice"
        );
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
        assert!(
            x + w <= 24 && g["h"].as_u64().unwrap() > 0,
            "{title}: gridPos {g}"
        );
        if p["type"] == "row" {
            assert!(p.get("targets").is_none(), "{title}: a row with queries");
            continue;
        }
        assert!(
            uses_variable(&p["datasource"]),
            "{title}: datasource {}",
            p["datasource"]
        );
        let targets = p["targets"].as_array().filter(|t| !t.is_empty());
        for t in targets.unwrap_or_else(|| panic!("{title}: no queries")) {
            assert!(
                uses_variable(&t["datasource"]),
                "{title}: query datasource {}",
                t["datasource"]
            );
            let expr = promql::substitute_grafana_variables(t["expr"].as_str().unwrap_or(""))
                .unwrap_or_else(|e| panic!("{title}: {e}"));
            assert!(!expr.trim().is_empty(), "{title}: empty query");
            let record = format!(
                "nfguard:dashboard_panel{}_{}",
                p["id"],
                t["refId"].as_str().unwrap()
            );
            rules.push(serde_json::json!({"record": record, "expr": expr}));
        }
    }
    // Each query as a recording rule: promtool parses and lints them.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard.rules.yaml");
    let groups = serde_json::json!({"groups": [{"name": "dashboard", "rules": rules}]});
    std::fs::write(&file, serde_yaml::to_string(&groups).unwrap()).unwrap();
    let out = run(Command::new(tools::promtool())
        .args(["check", "rules"])
        .arg(&file));
    assert!(out.status.success(), "{}", text(&out));
}

/// Rows `| \`name\` | type | labels |` of docs/observability.md.
fn documented_metrics() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let doc = std::fs::read_to_string(files::root().join("docs/observability.md")).unwrap();
    let tick =
        |s: &str| -> Vec<String> { s.split('`').skip(1).step_by(2).map(String::from).collect() };
    doc.lines()
        .filter(|l| l.starts_with("| `nfguard_"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = tick(cells[1]).remove(0);
            (
                name,
                (cells[2].to_string(), tick(cells[3]).into_iter().collect()),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_observability_doc_lists_exactly_the_exported_metrics() {
    let scrapes = scrape_all().await;
    let documented = documented_metrics();
    let mut exported = BTreeMap::new();
    for (component, e) in scrapes.all() {
        for f in e.families.values() {
            assert!(
                f.labels.is_empty() || f.samples > 0,
                "{component}: {} has no samples to read its labels from",
                f.name
            );
            exported.insert(f.query_name(), (f.kind.clone(), f.label_names()));
        }
    }
    let mut problems = Vec::new();
    for (name, want) in &exported {
        match documented.get(name) {
            None => problems.push(format!("{name} {want:?} is exported but not documented")),
            Some(doc) if doc != want => {
                problems.push(format!("{name}: documented {doc:?}, exported {want:?}"))
            }
            Some(_) => {}
        }
    }
    for name in documented.keys().filter(|n| !exported.contains_key(*n)) {
        problems.push(format!("{name} is documented but not exported"));
    }
    assert!(
        problems.is_empty(),
        "docs/observability.md:\n{}",
        problems.join("\n")
    );
}

#[test]
fn kustomize_renders_the_rules_the_monitors_and_the_dashboard() {
    let out = run(Command::new(tools::kustomize())
        .arg("build")
        .arg(files::root().join("monitoring")));
    assert!(out.status.success(), "{}", text(&out));
    let rendered = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_yaml::Value> = {
        use serde::Deserialize;
        serde_yaml::Deserializer::from_str(&rendered)
            .map(|d| serde_yaml::Value::deserialize(d).unwrap())
            .collect()
    };
    let kinds: BTreeSet<(String, String)> = docs
        .iter()
        .map(|d| {
            let namespace = match d["kind"].as_str() {
                Some("ClusterRoleBinding") => None,
                _ => Some("nfguard-system"),
            };
            assert_eq!(d["metadata"]["namespace"].as_str(), namespace);
            (
                d["kind"].as_str().unwrap().into(),
                d["metadata"]["name"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = [
        ("ClusterRoleBinding", "nfguard-metrics-scraper"),
        ("ConfigMap", "nfguard-grafana-dashboard"),
        ("PodMonitor", "nfguard-controller"),
        ("PodMonitor", "nfguard-reporter"),
        ("PodMonitor", "nfguard-webhook"),
        ("PrometheusRule", "nfguard"),
    ]
    .iter()
    .map(|(k, n)| (k.to_string(), n.to_string()))
    .collect();
    assert_eq!(kinds, want);
    let rule = docs.iter().find(|d| d["kind"] == "PrometheusRule").unwrap();
    assert_eq!(rule["spec"], files::prometheus_rule()["spec"]);
    let cm = docs.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    assert_eq!(
        cm["metadata"]["labels"]["grafana_dashboard"].as_str(),
        Some("1")
    );
    let json: serde_json::Value =
        serde_json::from_str(cm["data"]["nfguard.json"].as_str().unwrap()).unwrap();
    assert_eq!(json, files::dashboard());
}
