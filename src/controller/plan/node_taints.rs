//! The Node's nfguard taints: which it should carry (a critical hazard, a
//! running pod found unsafe under `action: Taint`), held back by the brake,
//! and an event for each change.

use super::{EventTarget, NodeFacts, PlannedEvent, Violation};
use crate::api::NodeNetfilterProfileStatus;
use crate::controller::plan::taints::{Brake, TaintChange, TaintPlan, WantedTaints, plan_taints};
use crate::facts::{HazardCode, Severity};

/// Plan the node's taints; `violations` are the status step's.
pub(super) fn plan_node_taints(
    facts: &NodeFacts<'_>,
    status: Option<&NodeNetfilterProfileStatus>,
    violations: &[Violation],
) -> (TaintPlan, Vec<PlannedEvent>) {
    let wanted = WantedTaints {
        degraded: facts
            .settings
            .taint_degraded
            .then(|| first_critical(status))
            .flatten(),
        incompatible: !violations.is_empty(),
    };
    let current_taints = facts.node.taints.as_deref().unwrap_or(&[]);
    let taints = plan_taints(
        current_taints,
        &wanted,
        &Brake {
            tainted_elsewhere: facts.tainted_elsewhere,
            total_nodes: facts.total_nodes,
            max_percent: facts.settings.max_percent,
        },
    );
    let events = taints
        .changes
        .iter()
        .map(|change| taint_event(facts, status, violations, change))
        .collect();
    (taints, events)
}

/// Why a taint is wanted, for its events.
fn why(key: &str, status: Option<&NodeNetfilterProfileStatus>, violations: &[Violation]) -> String {
    if key == crate::wellknown::TAINT_INCOMPATIBLE {
        violations
            .iter()
            .map(|v| {
                format!(
                    "pod {} ({}): {}",
                    v.pod,
                    v.codes
                        .iter()
                        .map(|c| c.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    v.message
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    } else {
        match first_critical(status) {
            Some(code) => format!("critical hazard {code}"),
            None => String::new(),
        }
    }
}

fn taint_event(
    facts: &NodeFacts<'_>,
    status: Option<&NodeNetfilterProfileStatus>,
    violations: &[Violation],
    change: &TaintChange,
) -> PlannedEvent {
    match change {
        TaintChange::Added(t) => PlannedEvent {
            warning: true,
            reason: "Tainted",
            action: "Taint",
            note: format!(
                "added {}: {}",
                taint_text(t),
                why(&t.key, status, violations)
            ),
            target: EventTarget::Both,
            related_pod: (t.key == crate::wellknown::TAINT_INCOMPATIBLE)
                .then(|| violations.first().map(|v| v.pod.clone()))
                .flatten(),
        },
        TaintChange::Removed(t) => PlannedEvent {
            warning: false,
            reason: "Untainted",
            action: "Untaint",
            note: format!("removed {}: the cause has cleared", taint_text(t)),
            target: EventTarget::Both,
            related_pod: None,
        },
        TaintChange::Withheld {
            taint,
            tainted,
            limit,
        } => PlannedEvent {
            warning: true,
            reason: "TaintWithheld",
            action: "Taint",
            note: format!(
                "safety brake: would add {} ({}), but nfguard already taints {tainted} node(s), the most allowed is {limit} ({}% of {} nodes)",
                taint_text(taint),
                why(&taint.key, status, violations),
                facts.settings.max_percent,
                facts.total_nodes
            ),
            target: EventTarget::Both,
            related_pod: None,
        },
    }
}

/// The reporter's critical hazards and the controller's derived ones.
fn first_critical(status: Option<&NodeNetfilterProfileStatus>) -> Option<HazardCode> {
    let status = status?;
    status
        .hazards
        .iter()
        .flatten()
        .chain(&crate::node::hazards::controller_hazards(status))
        .filter(|h| h.severity == Severity::Critical)
        .map(|h| h.code)
        .min()
}

fn taint_text(t: &k8s_openapi::api::core::v1::Taint) -> String {
    match t.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}
