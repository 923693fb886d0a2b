//! Hand-made results for the renderers' unit tests.

use super::ObjectResult;
use super::classes::CandidateNode;
use super::positions::{ContainerLine, ObjectSource};
use crate::compat::evaluate::{ContainerKind, Reason, Verdict};

/// A reason as the engine renders one; severity follows the effect.
pub fn reason(
    code: &str,
    effect: &str,
    container: Option<&str>,
    nodes: &[&str],
    message: &str,
) -> Reason {
    let severity = match effect {
        "deny" => "critical",
        "warn" => "warning",
        _ => "info",
    };
    serde_json::from_value(serde_json::json!({
        "code": code, "severity": severity, "effect": effect,
        "node": nodes.first(), "nodes": nodes, "container": container,
        "image": container.map(|_| "reg/img:v1"), "message": message,
    }))
    .expect("a reason")
}

/// A result with candidates `(name, class)`, its verdict the strongest effect.
pub fn result(object: &str, reasons: Vec<Reason>, nodes: &[(&str, &str)]) -> ObjectResult {
    ObjectResult {
        object: object.to_string(),
        verdict: reasons
            .iter()
            .map(|r| r.effect)
            .max()
            .unwrap_or(Verdict::Allow),
        candidate_nodes: nodes.len(),
        containers_in_scope: 1,
        reasons,
        source: None,
        nodes: nodes
            .iter()
            .map(|(name, class)| CandidateNode {
                name: name.to_string(),
                class: class.to_string(),
            })
            .collect(),
    }
}

/// A source in `file` at line 3 with container `app` on line 9 (init: 7).
pub fn source(file: Option<&str>) -> ObjectSource {
    ObjectSource {
        file: file.map(str::to_string),
        line: Some(3),
        containers: vec![
            ContainerLine {
                kind: ContainerKind::Init,
                name: "app".into(),
                line: 7,
            },
            ContainerLine {
                kind: ContainerKind::App,
                name: "app".into(),
                line: 9,
            },
        ],
    }
}
