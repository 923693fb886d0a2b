//! Which objects were written in a time window, from the API server's audit
//! log (JSON lines, one per request stage): the metrics count writes, the
//! audit log names them, so "writes only for that node" can be checked.

use serde::Deserialize;
use std::collections::BTreeMap;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    stage: String,
    verb: String,
    #[serde(default)]
    user_agent: String,
    #[serde(default)]
    object_ref: Option<ObjectRef>,
    request_received_timestamp: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(default)]
    resource: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    subresource: String,
}

/// One write: `resource[/subresource]` and the object's name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Write {
    pub resource: String,
    pub name: String,
    pub verb: String,
}

const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// The writes received in [since_ms, until_ms) (Unix ms) by any client
/// whose user agent does not start with `exclude_agent`.
pub fn writes(log: &str, since_ms: i64, until_ms: i64, exclude_agent: &str) -> Vec<Write> {
    let mut out = Vec::new();
    for line in log.lines() {
        let Ok(e) = serde_json::from_str::<Entry>(line) else {
            continue;
        };
        if e.stage != "ResponseComplete" || !WRITES.contains(&e.verb.as_str()) {
            continue;
        }
        if e.user_agent.starts_with(exclude_agent) {
            continue;
        }
        let Ok(t) = e
            .request_received_timestamp
            .parse::<k8s_openapi::jiff::Timestamp>()
        else {
            continue;
        };
        let ms = t.as_millisecond();
        if ms < since_ms || ms >= until_ms {
            continue;
        }
        let Some(o) = e.object_ref else { continue };
        let resource = if o.subresource.is_empty() {
            o.resource
        } else {
            format!("{}/{}", o.resource, o.subresource)
        };
        out.push(Write {
            resource,
            name: o.name,
            verb: e.verb,
        });
    }
    out
}

/// Whether a write concerns `node`: the Node, its profile, or an event
/// about either (kube-rs names events `<object>.<hex time>`).
pub fn concerns(w: &Write, node: &str) -> bool {
    w.name == node
        || w.name
            .strip_prefix(node)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// Writes by resource, for the report.
pub fn by_resource(ws: &[Write]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for w in ws {
        *m.entry(format!("{} {}", w.resource, w.verb)).or_default() += 1;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(
        stage: &str,
        verb: &str,
        agent: &str,
        res: &str,
        sub: &str,
        name: &str,
        t: &str,
    ) -> String {
        serde_json::json!({"kind": "Event", "stage": stage, "verb": verb, "userAgent": agent,
            "objectRef": {"resource": res, "subresource": sub, "name": name},
            "requestReceivedTimestamp": t})
        .to_string()
    }

    #[test]
    fn only_completed_writes_in_the_window_from_others() {
        let log = [
            line(
                "RequestReceived",
                "patch",
                "",
                "nodes",
                "",
                "n1",
                "2026-01-01T00:00:01.000000Z",
            ),
            line(
                "ResponseComplete",
                "patch",
                "",
                "nodes",
                "",
                "n1",
                "2026-01-01T00:00:01.000000Z",
            ),
            line(
                "ResponseComplete",
                "get",
                "",
                "nodes",
                "",
                "n1",
                "2026-01-01T00:00:01.500000Z",
            ),
            line(
                "ResponseComplete",
                "patch",
                "",
                "nodenetfilterprofiles",
                "status",
                "n1",
                "2026-01-01T00:00:02Z",
            ),
            line(
                "ResponseComplete",
                "create",
                "nfguard-bench/1",
                "nodes",
                "",
                "n9",
                "2026-01-01T00:00:02Z",
            ),
            line(
                "ResponseComplete",
                "create",
                "",
                "events",
                "",
                "n1.1861f",
                "2026-01-01T00:00:03Z",
            ),
            line(
                "ResponseComplete",
                "patch",
                "",
                "nodes",
                "",
                "n2",
                "2026-01-01T00:00:09Z",
            ),
            "not json".into(),
        ]
        .join("\n");
        let since = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        let ws = writes(&log, since, since + 5000, "nfguard-bench");
        let names: Vec<_> = ws
            .iter()
            .map(|w| (w.resource.as_str(), w.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("nodes", "n1"),
                ("nodenetfilterprofiles/status", "n1"),
                ("events", "n1.1861f")
            ]
        );
        assert!(ws.iter().all(|w| concerns(w, "n1")));
        assert!(
            !concerns(&ws[0], "n"),
            "a prefix of another name is not enough"
        );
        assert_eq!(by_resource(&ws)["nodes patch"], 1);
    }
}
