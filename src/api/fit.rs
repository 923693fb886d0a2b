//! A status cut to the CRDs' bounds ([`super::bounds`]) before it is
//! written. Where a producer caps a field the cut never bites; where one does
//! not (a host's package version, a rule with many comments, a condition
//! quoting every critical hazard), a write over a bound would be refused
//! whole by the API server and the node would lose every fact with it. So
//! the reporter and the controller fit what they send: a string past its
//! bound keeps its head and ends in "…", a list keeps its first items.

use super::bounds as b;
use super::profile::{Condition, NodeNetfilterProfileStatus, Writer};
use crate::facts::{Evidence, Hazard};

/// Cut `s` to at most `max` characters (the API server counts characters),
/// the last one an ellipsis when anything was cut.
pub fn cut(s: &mut String, max: usize) {
    if max == 0 {
        s.clear();
        return;
    }
    if let Some((at, _)) = s.char_indices().nth(max) {
        let keep = s[..at].char_indices().nth(max - 1).map_or(at, |(i, _)| i);
        s.truncate(keep);
        s.push('…');
    }
}

fn cut_opt(s: &mut Option<String>, max: usize) {
    if let Some(s) = s {
        cut(s, max);
    }
}

fn cut_list<T>(v: &mut Vec<T>, max: usize) {
    v.truncate(max);
}

fn fit_evidence(evidence: &mut Vec<Evidence>, conflicts: &mut Vec<String>) {
    cut_list(evidence, b::EVIDENCE);
    for e in evidence {
        cut(&mut e.path, b::EVIDENCE_PATH);
        cut(&mut e.detail, b::EVIDENCE_DETAIL);
    }
    cut_list(conflicts, b::CONFLICTS);
    for c in conflicts {
        cut(c, b::CONFLICT);
    }
}

/// Hazards as the reporter writes them and the controller reads them back.
pub fn fit_hazards(hazards: &mut Vec<Hazard>) {
    cut_list(hazards, b::HAZARDS);
    for h in hazards {
        cut(&mut h.message, b::HAZARD_MESSAGE);
        cut_opt(&mut h.table, b::TABLE_REF);
        cut_opt(&mut h.chain, b::NFT_NAME);
        cut_opt(&mut h.rule, b::HAZARD_RULE);
    }
}

/// The controller's conditions.
pub fn fit_conditions(conditions: &mut Vec<Condition>, max: usize) {
    cut_list(conditions, max);
    for c in conditions {
        cut(&mut c.type_, b::CONDITION_TYPE);
        cut(&mut c.reason, b::CONDITION_REASON);
        cut(&mut c.message, b::CONDITION_MESSAGE);
    }
}

/// The controller's writer inventory.
pub fn fit_writers(writers: &mut Vec<Writer>) {
    cut_list(writers, b::WRITERS);
    for w in writers {
        cut(&mut w.pod, b::POD_REF);
        cut(&mut w.container, b::CONTAINER_NAME);
        cut(&mut w.image, b::IMAGE);
        cut_opt(&mut w.digest, b::DIGEST);
        cut_opt(&mut w.note, b::NOTE);
    }
}

impl NodeNetfilterProfileStatus {
    /// Every field within its bound (see the module's doc).
    pub fn fit_bounds(&mut self) {
        if let Some(f) = &mut self.iptables {
            cut_opt(&mut f.package_version, b::PACKAGE_VERSION);
            fit_evidence(&mut f.evidence, &mut f.conflicts);
        }
        if let Some(k) = &mut self.kernel {
            cut(&mut k.release, b::KERNEL_RELEASE);
        }
        if let Some(h) = &mut self.hazards {
            fit_hazards(h);
        }
        if let Some(fs) = &mut self.native_features {
            cut_list(fs, b::NATIVE_FEATURES);
            for f in fs {
                cut(&mut f.feature, b::FEATURE_NAME);
                cut(&mut f.example, b::OBJECT_REF);
            }
        }
        if let Some(ts) = &mut self.native_tables {
            cut_list(ts, b::NATIVE_TABLES);
            for t in ts {
                cut(&mut t.family, b::FAMILY);
                cut(&mut t.name, b::NFT_NAME);
            }
        }
        if let Some(m) = &mut self.kubelet_markers {
            cut_opt(&mut m.reason, b::NOTE);
        }
        if let Some(n) = &mut self.nftables {
            if let Some(f) = &mut n.host {
                cut_opt(&mut f.package_version, b::PACKAGE_VERSION);
                fit_evidence(&mut f.evidence, &mut f.conflicts);
            }
            cut_list(&mut n.crashing_examples, b::CRASHING_EXAMPLES);
            n.crashing_examples
                .iter_mut()
                .for_each(|s| cut(s, b::OBJECT_REF));
            cut_list(&mut n.crashing_tables, b::CRASHING_TABLES);
            n.crashing_tables
                .iter_mut()
                .for_each(|s| cut(s, b::TABLE_REF));
        }
        cut_opt(&mut self.probe_error, b::PROBE_ERROR);
        if let Some(c) = &mut self.conditions {
            fit_conditions(c, b::PROFILE_CONDITIONS);
        }
        if let Some(w) = &mut self.writers {
            fit_writers(w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_string_past_its_bound_keeps_its_head_and_says_it_was_cut() {
        let mut s = "abcdef".to_string();
        cut(&mut s, 6);
        assert_eq!(s, "abcdef");
        cut(&mut s, 4);
        assert_eq!(s, "abc…");
        assert_eq!(s.chars().count(), 4);
        let mut wide = "ééééé".to_string();
        cut(&mut wide, 3);
        assert_eq!(wide, "éé…");
        let mut one = "xyz".to_string();
        cut(&mut one, 1);
        assert_eq!(one, "…");
    }

    #[test]
    fn an_oversized_status_is_fitted_field_by_field() {
        let long = |n: usize| "r".repeat(n);
        let hazard = Hazard {
            message: long(b::HAZARD_MESSAGE * 3),
            rule: Some(long(40_000)),
            chain: Some(long(300)),
            ..serde_json::from_value(serde_json::json!({
                "code": "FirewallUnconditionalDrop", "severity": "critical", "message": ""
            }))
            .unwrap()
        };
        let writer: Writer = serde_json::from_value(serde_json::json!({
            "pod": "ns/p", "container": "c", "image": long(2_000), "note": long(5_000)
        }))
        .unwrap();
        let condition: Condition = serde_json::from_value(serde_json::json!({
            "type": "Healthy", "status": "False", "reason": "Hazards",
            "message": long(80_000), "lastTransitionTime": "2026-12-07T00:00:00Z"
        }))
        .unwrap();
        let mut s = NodeNetfilterProfileStatus {
            hazards: Some(vec![hazard; b::HAZARDS + 10]),
            writers: Some(vec![writer; b::WRITERS + 1]),
            conditions: Some(vec![condition]),
            probe_error: Some(long(10_000)),
            ..Default::default()
        };
        s.fit_bounds();
        let h = s.hazards.as_ref().unwrap();
        assert_eq!(h.len(), b::HAZARDS);
        assert_eq!(h[0].message.chars().count(), b::HAZARD_MESSAGE);
        assert_eq!(h[0].rule.as_ref().unwrap().chars().count(), b::HAZARD_RULE);
        assert_eq!(h[0].chain.as_ref().unwrap().chars().count(), b::NFT_NAME);
        let w = s.writers.as_ref().unwrap();
        assert_eq!(w.len(), b::WRITERS);
        assert_eq!(w[0].image.chars().count(), b::IMAGE);
        assert_eq!(w[0].note.as_ref().unwrap().chars().count(), b::NOTE);
        let c = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(c.message.chars().count(), b::CONDITION_MESSAGE);
        assert!(c.message.ends_with('…'));
        assert_eq!(
            s.probe_error.as_ref().unwrap().chars().count(),
            b::PROBE_ERROR
        );
    }
}
