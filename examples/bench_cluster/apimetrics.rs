//! The API server's own count of what it served: `apiserver_request_total`
//! by verb and resource, and the request body sizes, read from its
//! `/metrics` before and after a phase; the difference is what that phase
//! cost the API server.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Verbs that change something (server-side apply is counted as APPLY).
pub const WRITE_VERBS: [&str; 6] = [
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

/// `resource[/subresource]` with the verb, e.g. ("nodes", "PATCH").
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key {
    pub resource: String,
    pub verb: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// Requests served, summed over codes, scopes, versions and groups.
    pub requests: Vec<(Key, f64)>,
    /// Request body bytes (sum, count) from the body-size histogram.
    pub body_bytes: Vec<(Key, (f64, f64))>,
}

/// `name{a="x",b="y"} value` -> (name, labels, value); None for comments
/// and lines that are not samples.
pub fn parse_sample(line: &str) -> Option<(&str, BTreeMap<String, String>, f64)> {
    if line.starts_with('#') || line.is_empty() {
        return None;
    }
    let (name, rest) = match line.find('{') {
        Some(b) => (&line[..b], &line[b + 1..]),
        None => {
            let (name, value) = line.split_once(' ')?;
            return Some((name, BTreeMap::new(), value.trim().parse().ok()?));
        }
    };
    let mut labels = BTreeMap::new();
    let mut chars = rest.char_indices().peekable();
    let mut end = None;
    loop {
        // key
        let start = chars.peek()?.0;
        let mut eq = None;
        for (i, c) in chars.by_ref() {
            if c == '=' {
                eq = Some(i);
                break;
            }
            if c == '}' {
                end = Some(i);
                break;
            }
        }
        if end.is_some() {
            break;
        }
        let key = rest[start..eq?].trim_start_matches(',').to_string();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        while let Some((_, c)) = chars.next() {
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        labels.insert(key, value);
        match chars.peek() {
            Some((i, '}')) => {
                end = Some(*i);
                break;
            }
            Some((_, ',')) => {
                chars.next();
                if let Some((i, '}')) = chars.peek() {
                    end = Some(*i);
                    break;
                }
            }
            _ => return None,
        }
    }
    let value = rest[end? + 1..].split_whitespace().next()?.parse().ok()?;
    Some((name, labels, value))
}

fn key(labels: &BTreeMap<String, String>) -> Key {
    let get = |k: &str| labels.get(k).map(String::as_str).unwrap_or("");
    let resource = match get("subresource") {
        "" => get("resource").to_string(),
        sub => format!("{}/{sub}", get("resource")),
    };
    Key {
        resource,
        verb: get("verb").to_string(),
    }
}

pub fn parse(text: &str) -> Snapshot {
    let mut requests: BTreeMap<Key, f64> = BTreeMap::new();
    let mut bodies: BTreeMap<Key, (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        let Some((name, labels, value)) = parse_sample(line) else {
            continue;
        };
        match name {
            "apiserver_request_total" => *requests.entry(key(&labels)).or_default() += value,
            "apiserver_request_body_size_bytes_sum" => {
                bodies.entry(key(&labels)).or_default().0 += value
            }
            "apiserver_request_body_size_bytes_count" => {
                bodies.entry(key(&labels)).or_default().1 += value
            }
            _ => {}
        }
    }
    Snapshot {
        requests: requests.into_iter().collect(),
        body_bytes: bodies.into_iter().collect(),
    }
}

pub async fn snapshot(client: &kube::Client) -> anyhow::Result<Snapshot> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(req).await?;
    let s = parse(&text);
    anyhow::ensure!(
        !s.requests.is_empty(),
        "the API server's /metrics has no apiserver_request_total"
    );
    Ok(s)
}

/// What happened between two snapshots.
#[derive(Debug, Default, PartialEq)]
pub struct Delta {
    pub requests: BTreeMap<Key, f64>,
    pub body_bytes: BTreeMap<Key, (f64, f64)>,
}

pub fn delta(before: &Snapshot, after: &Snapshot) -> Delta {
    let b: BTreeMap<&Key, f64> = before.requests.iter().map(|(k, v)| (k, *v)).collect();
    let requests = after
        .requests
        .iter()
        .map(|(k, v)| (k.clone(), v - b.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    let bb: BTreeMap<&Key, (f64, f64)> = before.body_bytes.iter().map(|(k, v)| (k, *v)).collect();
    let body_bytes = after
        .body_bytes
        .iter()
        .map(|(k, (s, c))| {
            let (s0, c0) = bb.get(k).copied().unwrap_or_default();
            (k.clone(), (s - s0, c - c0))
        })
        .filter(|(_, (_, c))| *c > 0.0)
        .collect();
    Delta {
        requests,
        body_bytes,
    }
}

impl Delta {
    /// Writes to `resource` (`nodes` or `nodes/status`, not both), every verb.
    pub fn writes_to(&self, resource: &str) -> f64 {
        self.requests
            .iter()
            .filter(|(k, _)| WRITE_VERBS.contains(&k.verb.as_str()) && k.resource == resource)
            .map(|(_, v)| v)
            .sum()
    }

    /// One line per (resource, verb) with writes, and the per-node rate.
    pub fn writes_table(&self, per: usize) -> String {
        let mut out = String::new();
        for (k, v) in &self.requests {
            if WRITE_VERBS.contains(&k.verb.as_str()) {
                out.push_str(&format!(
                    "  {:<40} {:<8} {:>8} ({:.2} per node)\n",
                    k.resource,
                    k.verb,
                    v,
                    v / per.max(1) as f64
                ));
            }
        }
        if out.is_empty() {
            out.push_str("  (no writes)\n");
        }
        out
    }

    /// Reads (GET, LIST, WATCH) in all.
    pub fn reads(&self) -> f64 {
        self.requests
            .iter()
            .filter(|(k, _)| ["GET", "LIST", "WATCH"].contains(&k.verb.as_str()))
            .map(|(_, v)| v)
            .sum()
    }

    /// Mean request body of `resource` `verb` in this window, and how many.
    pub fn mean_body(&self, resource: &str, verb: &str) -> Option<(f64, f64)> {
        let k = Key {
            resource: resource.into(),
            verb: verb.into(),
        };
        self.body_bytes
            .get(&k)
            .map(|(sum, count)| (sum / count, *count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP apiserver_request_total x
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 10
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="",verb="PATCH",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="nfguard.io",resource="nodenetfilterprofiles",scope="resource",subresource="status",verb="APPLY",version="v1alpha1"} 5
apiserver_request_total{code="200",component="apiserver",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 3
apiserver_request_body_size_bytes_sum{resource="leases",verb="update"} 900
apiserver_request_body_size_bytes_count{resource="leases",verb="update"} 3
weird_metric{a="x\"y",} 1.5e3
"#;

    #[test]
    fn samples_parse_with_escapes_and_trailing_commas() {
        let weird = TEXT.lines().find(|l| l.starts_with("weird")).unwrap();
        let (n, l, v) = parse_sample(weird).unwrap();
        assert_eq!((n, v), ("weird_metric", 1500.0));
        assert_eq!(l["a"], "x\"y");
        assert!(parse_sample("# HELP x").is_none());
        assert!(parse_sample("up 1").is_some());
        assert!(parse_sample("broken{a=x} 1").is_none());
    }

    #[test]
    fn deltas_count_writes_by_resource() {
        let before = parse(TEXT);
        let after = parse(&TEXT.replace("} 10", "} 14").replace("} 5", "} 7"));
        let d = delta(&before, &after);
        assert_eq!(d.writes_to("nodes"), 4.0);
        assert_eq!(
            d.writes_to("nodenetfilterprofiles"),
            0.0,
            "the status is its own"
        );
        assert_eq!(d.writes_to("nodenetfilterprofiles/status"), 2.0);
        assert_eq!(d.writes_to("pods"), 0.0);
        assert!(d.writes_table(2).contains("(2.00 per node)"));
        assert_eq!(delta(&before, &before), Delta::default());
    }

    #[test]
    fn body_sizes_are_read_per_resource_and_verb() {
        let before = Snapshot::default();
        let d = delta(&before, &parse(TEXT));
        assert_eq!(d.mean_body("leases", "update"), Some((300.0, 3.0)));
        assert_eq!(d.reads(), 3.0);
    }
}
