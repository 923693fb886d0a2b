//! The Node's nfguard labels: the merge patch that brings them to what the
//! profile says, and the event a relabelling gets.

use super::{EventTarget, PlannedEvent};
use crate::api::NodeNetfilterProfileStatus;
use crate::controller::plan::labels::{desired_labels, label_patch, relabels};
use crate::projection::SlimNode;
use serde_json::Value;

/// The labels' merge patch (None: in sync) and its event. A node's first
/// labels are routine (a fresh install would write an event per node): only
/// a change or removal of a label it had is news.
pub fn plan_labels(
    node: &SlimNode,
    status: Option<&NodeNetfilterProfileStatus>,
) -> (Option<Value>, Option<PlannedEvent>) {
    let labels = node.labels();
    let labels = Some(&labels);
    let patch = label_patch(labels, &desired_labels(status));
    let event = patch
        .as_ref()
        .filter(|p| relabels(labels, p))
        .map(|p| PlannedEvent {
            warning: false,
            reason: "LabelsUpdated",
            action: "Label",
            note: describe_labels(p),
            target: EventTarget::Node,
            related_pod: None,
        });
    (patch, event)
}

fn describe_labels(patch: &Value) -> String {
    let Some(map) = patch.pointer("/metadata/labels").and_then(Value::as_object) else {
        return String::new();
    };
    map.iter()
        .map(|(k, v)| match v.as_str() {
            Some(v) => format!("{k}={v}"),
            None => format!("{k} removed"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
