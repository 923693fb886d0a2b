//! Watch the hollow Nodes and their profiles until every node carries the
//! labels its facts call for and its profile carries the controller's
//! conditions; report when that happened. The watches are listed before
//! the caller starts the controller (the ready file says so), so the time
//! is the controller's, not this watcher's.

use crate::shape::{self, HOLLOW_LABEL};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use nfguard::api::NodeNetfilterProfile;
use nfguard::controller::plan::conditions::ConditionType;
use nfguard::controller::plan::labels::desired_labels;
use nfguard::wellknown::MANAGED_LABELS;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

/// The nfguard labels node `i` must carry (`changed`: the node whose facts
/// the benchmark changed).
pub fn expected_labels(i: usize, changed: Option<usize>) -> BTreeMap<&'static str, String> {
    let f = shape::facts(i);
    let f = if changed == Some(i) {
        shape::changed(f)
    } else {
        f
    };
    desired_labels(Some(&shape::status(f, "", 0)))
}

/// Whether the node's nfguard labels are exactly the expected ones.
pub fn labels_ok(node: &Node, expected: &BTreeMap<&'static str, String>) -> bool {
    let empty = BTreeMap::new();
    let have = node.metadata.labels.as_ref().unwrap_or(&empty);
    MANAGED_LABELS
        .iter()
        .all(|k| have.get(*k) == expected.get(k))
}

/// Whether the profile carries every condition type the controller sets.
pub fn conditions_ok(p: &NodeNetfilterProfile) -> bool {
    let conds = p.status.as_ref().and_then(|s| s.conditions.as_deref());
    let conds = conds.unwrap_or(&[]);
    ConditionType::ALL
        .iter()
        .all(|t| conds.iter().any(|c| c.type_ == t.as_str()))
}

enum Seen {
    Node(Box<Event<Node>>),
    Profile(Box<Event<NodeNetfilterProfile>>),
}

/// Convergence bookkeeping, free of I/O.
#[derive(Default)]
pub struct Tracker {
    pub nodes: usize,
    pub changed: Option<usize>,
    labelled: HashSet<usize>,
    conditioned: HashSet<usize>,
}

impl Tracker {
    pub fn new(nodes: usize, changed: Option<usize>) -> Self {
        Self {
            nodes,
            changed,
            ..Default::default()
        }
    }

    pub fn node(&mut self, n: &Node) {
        let Some(i) = n.metadata.name.as_deref().and_then(shape::node_index) else {
            return;
        };
        if i >= self.nodes {
            return;
        }
        if labels_ok(n, &expected_labels(i, self.changed)) {
            self.labelled.insert(i);
        } else {
            self.labelled.remove(&i);
        }
    }

    pub fn profile(&mut self, p: &NodeNetfilterProfile) {
        let Some(i) = p.metadata.name.as_deref().and_then(shape::node_index) else {
            return;
        };
        if i >= self.nodes {
            return;
        }
        if conditions_ok(p) {
            self.conditioned.insert(i);
        } else {
            self.conditioned.remove(&i);
        }
    }

    pub fn converged(&self) -> usize {
        self.labelled.intersection(&self.conditioned).count()
    }

    pub fn done(&self) -> bool {
        self.converged() == self.nodes
    }
}

/// Wait until every one of `nodes` hollow nodes converged; returns the
/// wall-clock time (Unix ms) at which the last one did. Writes
/// `ready_file` once both watches have listed.
pub async fn wait(
    client: &kube::Client,
    nodes: usize,
    changed: Option<usize>,
    ready_file: Option<&Path>,
    timeout: Duration,
) -> anyhow::Result<u128> {
    let hollow = watcher::Config::default().labels(&format!("{HOLLOW_LABEL}=true"));
    let node_events = watch(Api::<Node>::all(client.clone()), hollow)
        .default_backoff()
        .map(|e| e.map(|e| Seen::Node(Box::new(e))))
        .boxed();
    let profile_events = watch(
        Api::<NodeNetfilterProfile>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .map(|e| e.map(|e| Seen::Profile(Box::new(e))))
    .boxed();
    let mut events = futures::stream::select(node_events, profile_events);
    let mut tracker = Tracker::new(nodes, changed);
    let mut listed = 0;
    let mut last_report = std::time::Instant::now();
    let run = async {
        while let Some(ev) = events.next().await {
            match ev {
                Ok(Seen::Node(e)) => match *e {
                    Event::Apply(n) | Event::InitApply(n) => tracker.node(&n),
                    Event::InitDone => listed += 1,
                    _ => {}
                },
                Ok(Seen::Profile(e)) => match *e {
                    Event::Apply(p) | Event::InitApply(p) => tracker.profile(&p),
                    Event::InitDone => listed += 1,
                    _ => {}
                },
                Err(e) => eprintln!("bench: watch error (retrying): {e}"),
            }
            if listed == 2
                && let Some(f) = ready_file
                && !f.exists()
            {
                std::fs::write(f, "listed\n")?;
            }
            if listed >= 2 && tracker.done() {
                return Ok(unix_ms());
            }
            if last_report.elapsed() > Duration::from_secs(5) {
                eprintln!("bench: converged {}/{}", tracker.converged(), nodes);
                last_report = std::time::Instant::now();
            }
        }
        anyhow::bail!("the watches ended")
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(r) => r,
        Err(_) => anyhow::bail!(
            "not converged within {timeout:?}: {}/{nodes} nodes carry their labels and conditions",
            tracker.converged()
        ),
    }
}

pub fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(i: usize, labels: &BTreeMap<&str, String>) -> Node {
        serde_json::from_value(json!({"metadata": {"name": shape::node_name(i), "labels": labels}}))
            .unwrap()
    }

    fn profile(i: usize, types: &[&str]) -> NodeNetfilterProfile {
        let conds: Vec<_> = types
            .iter()
            .map(|t| json!({"type": t, "status": "True", "reason": "R", "lastTransitionTime": "2026-01-01T00:00:00Z"}))
            .collect();
        serde_json::from_value(
            json!({"metadata": {"name": shape::node_name(i)}, "spec": {},
                                      "status": {"conditions": conds}}),
        )
        .unwrap()
    }

    #[test]
    fn a_node_converges_with_its_labels_and_every_condition() {
        let mut t = Tracker::new(2, None);
        let all = ["Fresh", "Healthy", "Consistent"];
        t.node(&node(0, &expected_labels(0, None)));
        t.profile(&profile(0, &all));
        assert_eq!(t.converged(), 1);
        t.profile(&profile(1, &all));
        t.node(&node(1, &BTreeMap::new()));
        assert!(!t.done(), "node 1 has no labels yet");
        t.node(&node(1, &expected_labels(1, None)));
        assert!(t.done());
        t.profile(&profile(1, &["Fresh"]));
        assert!(!t.done(), "a condition went missing");
    }

    #[test]
    fn the_changed_node_must_show_its_new_version() {
        let mut t = Tracker::new(1, Some(0));
        t.profile(&profile(0, &["Fresh", "Healthy", "Consistent"]));
        t.node(&node(0, &expected_labels(0, None)));
        assert!(!t.done(), "still the old version label");
        t.node(&node(0, &expected_labels(0, Some(0))));
        assert!(t.done());
        assert_ne!(expected_labels(0, None), expected_labels(0, Some(0)));
    }

    #[test]
    fn other_managed_labels_count_and_other_nodes_do_not() {
        let mut want = expected_labels(3, None);
        assert!(!want.contains_key("nfguard.io/min-reader"));
        want.insert("nfguard.io/min-reader", "1.8.8".into());
        let mut t = Tracker::new(4, None);
        t.node(&node(3, &want));
        t.profile(&profile(3, &["Fresh", "Healthy", "Consistent"]));
        assert_eq!(t.converged(), 0, "a stray managed label is not converged");
        t.node(&node(9, &expected_labels(9, None)));
        t.profile(&profile(9, &["Fresh", "Healthy", "Consistent"]));
        assert_eq!(t.converged(), 0, "node 9 is outside the 4 benchmarked");
    }
}
