//! `kubectl`'s label selector syntax (`-l`), parsed strictly into a
//! metav1.LabelSelector so nodes are matched by the one selector code the
//! judgement uses (`label_selector_matches`).
//!
//! `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`, joined by
//! commas; every requirement must hold.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use std::collections::BTreeMap;

/// Longer selectors are refused: nothing real needs more.
pub const MAX_SELECTOR_BYTES: usize = 4096;
/// Label keys are at most 253 (prefix) + 1 + 63 bytes, values 63.
const MAX_KEY_BYTES: usize = 317;
const MAX_VALUE_BYTES: usize = 63;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("label selector longer than {MAX_SELECTOR_BYTES} bytes")]
    TooLong,
    #[error("label selector: empty requirement (stray comma?)")]
    Empty,
    #[error("label selector: {0:?} is not a label key")]
    BadKey(String),
    #[error("label selector: {0:?} is not a label value")]
    BadValue(String),
    #[error("label selector: unclosed '(' after {0:?}")]
    Unclosed(String),
    #[error("label selector: cannot read {0:?}")]
    Syntax(String),
}

/// Split at top-level commas (commas inside `( )` belong to a set).
fn requirements(s: &str) -> Result<Vec<&str>, SelectorError> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0usize, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| SelectorError::Syntax(s.into()))?
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError::Unclosed(s[start..].trim().into()));
    }
    out.push(&s[start..]);
    Ok(out)
}

fn key(k: &str) -> Result<String, SelectorError> {
    let k = k.trim();
    let (prefix, name) = k.rsplit_once('/').unwrap_or(("", k));
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let prefix_ok = prefix.len() <= 253
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'));
    if k.len() > MAX_KEY_BYTES || !name_ok || !prefix_ok || (k.contains('/') && prefix.is_empty()) {
        return Err(SelectorError::BadKey(k.into()));
    }
    Ok(k.into())
}

fn value(v: &str) -> Result<String, SelectorError> {
    let v = v.trim();
    let ok = v.len() <= MAX_VALUE_BYTES
        && (v.is_empty()
            || (v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric())
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))));
    if !ok {
        return Err(SelectorError::BadValue(v.into()));
    }
    Ok(v.into())
}

fn set(rest: &str, whole: &str) -> Result<Vec<String>, SelectorError> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Syntax(whole.into()))?;
    inner.split(',').map(value).collect()
}

fn expr(key: String, operator: &str, values: Option<Vec<String>>) -> LabelSelectorRequirement {
    LabelSelectorRequirement {
        key,
        operator: operator.into(),
        values,
    }
}

/// Parse `s`; an empty (or all-blank) selector matches every node.
pub fn parse_label_selector(s: &str) -> Result<LabelSelector, SelectorError> {
    if s.len() > MAX_SELECTOR_BYTES {
        return Err(SelectorError::TooLong);
    }
    let mut labels = BTreeMap::new();
    let mut exprs = Vec::new();
    if !s.trim().is_empty() {
        for r in requirements(s)? {
            let r = r.trim();
            if r.is_empty() {
                return Err(SelectorError::Empty);
            }
            if let Some((k, v)) = r.split_once("!=") {
                exprs.push(expr(key(k)?, "NotIn", Some(vec![value(v)?])));
            } else if let Some((k, v)) = r.split_once("==").or_else(|| r.split_once('=')) {
                labels.insert(key(k)?, value(v)?);
            } else if let Some(k) = r.strip_prefix('!') {
                exprs.push(expr(key(k)?, "DoesNotExist", None));
            } else if let Some((k, rest)) = r.split_once(" notin ") {
                exprs.push(expr(key(k)?, "NotIn", Some(set(rest, r)?)));
            } else if let Some((k, rest)) = r.split_once(" in ") {
                exprs.push(expr(key(k)?, "In", Some(set(rest, r)?)));
            } else {
                exprs.push(expr(key(r)?, "Exists", None));
            }
        }
    }
    Ok(LabelSelector {
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::evaluate::label_selector_matches;

    #[test]
    fn every_form_matches_as_kubectl_does() {
        let node = BTreeMap::from([
            ("pool".to_string(), "old".to_string()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
        ]);
        for (sel, want) in [
            ("", true),
            ("pool=old", true),
            ("pool==old", true),
            ("pool!=old", false),
            ("pool=new", false),
            ("pool", true),
            ("!pool", false),
            ("!zone", true),
            ("pool in (new, old)", true),
            ("pool notin (new,old)", false),
            ("pool=old,kubernetes.io/os=linux", true),
            ("pool=old, zone", false),
        ] {
            let s = parse_label_selector(sel).unwrap();
            assert_eq!(label_selector_matches(&s, &node), want, "{sel}");
        }
    }

    #[test]
    fn malformed_selectors_are_refused_by_name() {
        for (sel, want) in [
            ("pool=old,", SelectorError::Empty),
            (
                "pool in (a,b",
                SelectorError::Unclosed("pool in (a,b".into()),
            ),
            ("po ol=x", SelectorError::BadKey("po ol".into())),
            ("pool=a b", SelectorError::BadValue("a b".into())),
            ("pool in a", SelectorError::Syntax("pool in a".into())),
            ("/x=1", SelectorError::BadKey("/x".into())),
        ] {
            assert_eq!(parse_label_selector(sel).unwrap_err(), want, "{sel}");
        }
        let long = "a=b,".repeat(MAX_SELECTOR_BYTES);
        assert_eq!(
            parse_label_selector(&long).unwrap_err(),
            SelectorError::TooLong
        );
    }
}
