//! Kubernetes label selector semantics (metav1.LabelSelector and the node
//! affinity NodeSelectorRequirement), pure.

use k8s_openapi::api::core::v1::NodeSelectorRequirement;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use std::collections::BTreeMap;

/// metav1.LabelSelector: matchLabels AND every matchExpression
/// (In / NotIn / Exists / DoesNotExist). An empty selector matches everything;
/// an unknown operator matches nothing (as the API server would reject it).
pub fn label_selector_matches(sel: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = sel
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    labels_ok
        && sel.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or(&[]);
            let got = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => got.is_some_and(|g| values.contains(g)),
                "NotIn" => got.is_none_or(|g| !values.contains(g)),
                "Exists" => got.is_some(),
                "DoesNotExist" => got.is_none(),
                _ => false,
            }
        })
}

/// One node affinity requirement against a label (or field) map. Gt/Lt
/// compare integers; a non-integer on either side does not match.
pub fn node_selector_requirement_matches(
    req: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> bool {
    requirement_matches_value(req, labels.get(&req.key).map(String::as_str))
}

/// One requirement against the value its key has (None: key absent).
pub fn requirement_matches_value(req: &NodeSelectorRequirement, got: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or(&[]);
    let int_cmp = |want_greater: bool| -> bool {
        let (Some(g), [v]) = (got, values) else {
            return false;
        };
        match (g.trim().parse::<i64>(), v.trim().parse::<i64>()) {
            (Ok(g), Ok(v)) => {
                if want_greater {
                    g > v
                } else {
                    g < v
                }
            }
            _ => false,
        }
    };
    match req.operator.as_str() {
        "In" => got.is_some_and(|g| values.iter().any(|v| v == g)),
        "NotIn" => got.is_none_or(|g| !values.iter().any(|v| v == g)),
        "Exists" => got.is_some(),
        "DoesNotExist" => got.is_none(),
        "Gt" => int_cmp(true),
        "Lt" => int_cmp(false),
        _ => false,
    }
}
