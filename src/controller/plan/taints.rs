//! Opt-in taints and the safety brake (pure).
//!
//! - `nfguard.io/netfilter-degraded=<hazard code>:NoSchedule` on a node with a
//!   critical hazard, when a NetfilterPolicy sets `taintDegradedNodes`;
//! - `nfguard.io/iptables-incompatible:NoSchedule` on a node running a
//!   workload that violates a policy with `action: Taint`.
//!
//! The brake: a node that carries no nfguard taint yet is only tainted while
//! the nodes tainted by nfguard stay within `maxTaintedNodesPercent` (default
//! 10) of all nodes; past that the taint is withheld and reported. Removing a
//! taint, or changing one on an already tainted node, is always allowed.

use crate::api::NetfilterPolicy;
use crate::facts::HazardCode;
use k8s_openapi::api::core::v1::Taint;

use crate::wellknown::{TAINT_DEGRADED, TAINT_INCOMPATIBLE};
pub const TAINT_EFFECT: &str = "NoSchedule";
pub const DEFAULT_MAX_TAINTED_PERCENT: u32 = 10;

/// Cluster-wide taint settings from every NetfilterPolicy: degraded nodes
/// are tainted when any policy asks; the brake is the strictest percentage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaintSettings {
    pub taint_degraded: bool,
    pub max_percent: u32,
}

impl Default for TaintSettings {
    fn default() -> Self {
        Self {
            taint_degraded: false,
            max_percent: DEFAULT_MAX_TAINTED_PERCENT,
        }
    }
}

impl TaintSettings {
    /// From the valid policies (an invalid one is ignored, as when judging).
    pub fn from_policies<'a>(policies: impl IntoIterator<Item = &'a NetfilterPolicy>) -> Self {
        let mut out = Self::default();
        let mut max: Option<u32> = None;
        let valid = policies
            .into_iter()
            .filter(|p| crate::compat::evaluate::validate_policy(&p.spec).is_ok());
        for p in valid {
            out.taint_degraded |= p.spec.taint_degraded_nodes;
            if let Some(m) = p.spec.max_tainted_nodes_percent {
                max = Some(max.map_or(m, |cur| cur.min(m)));
            }
        }
        out.max_percent = max.unwrap_or(DEFAULT_MAX_TAINTED_PERCENT).min(100);
        out
    }
}

pub fn is_nfguard_taint(t: &Taint) -> bool {
    t.key == TAINT_DEGRADED || t.key == TAINT_INCOMPATIBLE
}

/// Whether a node's taint list holds any nfguard taint.
pub fn has_nfguard_taint(taints: Option<&Vec<Taint>>) -> bool {
    taints.is_some_and(|ts| ts.iter().any(is_nfguard_taint))
}

/// The nfguard taints a node should carry, before the brake.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WantedTaints {
    /// The critical hazard to taint for (None: no degraded taint).
    pub degraded: Option<HazardCode>,
    /// A violating workload runs here under `action: Taint`.
    pub incompatible: bool,
}

impl WantedTaints {
    fn taints(&self) -> Vec<Taint> {
        let mut out = Vec::new();
        if let Some(code) = self.degraded {
            out.push(taint(TAINT_DEGRADED, Some(code.to_string())));
        }
        if self.incompatible {
            out.push(taint(TAINT_INCOMPATIBLE, None));
        }
        out
    }
}

fn taint(key: &str, value: Option<String>) -> Taint {
    Taint {
        key: key.into(),
        value,
        effect: TAINT_EFFECT.into(),
        time_added: None,
    }
}

/// How many nodes nfguard taints now (not counting the node being planned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Brake {
    pub tainted_elsewhere: usize,
    pub total_nodes: usize,
    pub max_percent: u32,
}

impl Brake {
    /// The most nodes nfguard may hold tainted at once.
    pub fn limit(&self) -> usize {
        self.total_nodes * self.max_percent as usize / 100
    }

    fn allows_another_node(&self) -> bool {
        self.tainted_elsewhere < self.limit()
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum TaintChange {
    Added(Taint),
    Removed(Taint),
    /// Wanted but withheld by the brake.
    Withheld {
        taint: Taint,
        tainted: usize,
        limit: usize,
    },
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TaintPlan {
    /// The node's complete new taint list; None when nothing changes.
    pub taints: Option<Vec<Taint>>,
    pub changes: Vec<TaintChange>,
    /// Whether the node carries an nfguard taint after the plan.
    pub tainted_after: bool,
}

fn same(a: &Taint, b: &Taint) -> bool {
    a.key == b.key
        && a.effect == b.effect
        && a.value.as_deref().unwrap_or("") == b.value.as_deref().unwrap_or("")
}

/// The taint changes for one node: other taints are kept as they are.
pub fn plan_taints(current: &[Taint], wanted: &WantedTaints, brake: &Brake) -> TaintPlan {
    let desired = wanted.taints();
    let tainted_before = current.iter().any(is_nfguard_taint);
    let mut changes = Vec::new();
    let mut next: Vec<Taint> = Vec::with_capacity(current.len() + desired.len());
    for t in current {
        if !is_nfguard_taint(t) || desired.iter().any(|d| same(d, t)) {
            next.push(t.clone());
        } else {
            changes.push(TaintChange::Removed(t.clone()));
        }
    }
    let additions: Vec<Taint> = desired
        .into_iter()
        .filter(|d| !current.iter().any(|t| same(d, t)))
        .collect();
    if !additions.is_empty() {
        if tainted_before || brake.allows_another_node() {
            for a in additions {
                next.push(a.clone());
                changes.push(TaintChange::Added(a));
            }
        } else {
            for a in additions {
                changes.push(TaintChange::Withheld {
                    taint: a,
                    tainted: brake.tainted_elsewhere,
                    limit: brake.limit(),
                });
            }
        }
    }
    let changed = changes
        .iter()
        .any(|c| matches!(c, TaintChange::Added(_) | TaintChange::Removed(_)));
    TaintPlan {
        tainted_after: next.iter().any(is_nfguard_taint),
        taints: changed.then_some(next),
        changes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NetfilterPolicySpec;

    fn brake(elsewhere: usize, total: usize) -> Brake {
        Brake {
            tainted_elsewhere: elsewhere,
            total_nodes: total,
            max_percent: 10,
        }
    }

    fn other() -> Taint {
        taint("dedicated", Some("gpu".into()))
    }

    #[test]
    fn degraded_taint_added_with_hazard_code_and_others_kept() {
        let wanted = WantedTaints {
            degraded: Some(HazardCode::FirewallUnconditionalDrop),
            incompatible: false,
        };
        let p = plan_taints(&[other()], &wanted, &brake(0, 100));
        let t = p.taints.unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0], other());
        assert_eq!(t[1].key, TAINT_DEGRADED);
        assert_eq!(t[1].value.as_deref(), Some("FirewallUnconditionalDrop"));
        assert_eq!(t[1].effect, "NoSchedule");
        assert!(p.tainted_after);
    }

    #[test]
    fn cleared_hazard_removes_only_nfguard_taints() {
        let current = vec![
            other(),
            taint(TAINT_DEGRADED, Some("MixedBackends".into())),
            taint(TAINT_INCOMPATIBLE, None),
        ];
        let p = plan_taints(&current, &WantedTaints::default(), &brake(50, 100));
        assert_eq!(p.taints, Some(vec![other()]));
        assert_eq!(p.changes.len(), 2);
        assert!(!p.tainted_after);
    }

    #[test]
    fn in_sync_is_no_change() {
        let current = vec![taint(TAINT_INCOMPATIBLE, None)];
        let wanted = WantedTaints {
            degraded: None,
            incompatible: true,
        };
        let p = plan_taints(&current, &wanted, &brake(99, 100));
        assert_eq!(p.taints, None);
        assert!(p.changes.is_empty());
        assert!(p.tainted_after);
    }

    #[test]
    fn brake_withholds_a_new_tainted_node_past_the_limit() {
        let wanted = WantedTaints {
            degraded: Some(HazardCode::MixedBackends),
            incompatible: true,
        };
        // 20 nodes at 10%: at most 2 tainted. 1 elsewhere -> allowed; 2 -> withheld.
        assert!(plan_taints(&[], &wanted, &brake(1, 20)).taints.is_some());
        let p = plan_taints(&[], &wanted, &brake(2, 20));
        assert_eq!(p.taints, None);
        assert_eq!(p.changes.len(), 2);
        assert!(matches!(
            p.changes[0],
            TaintChange::Withheld {
                tainted: 2,
                limit: 2,
                ..
            }
        ));
        // Fewer than 10 nodes at 10%: nothing may be tainted.
        assert!(plan_taints(&[], &wanted, &brake(0, 9)).taints.is_none());
    }

    #[test]
    fn brake_lets_an_already_tainted_node_change() {
        let current = vec![taint(TAINT_DEGRADED, Some("MixedBackends".into()))];
        let wanted = WantedTaints {
            degraded: Some(HazardCode::FirewallUnconditionalDrop),
            incompatible: false,
        };
        let p = plan_taints(&current, &wanted, &brake(100, 100));
        let t = p.taints.unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].value.as_deref(), Some("FirewallUnconditionalDrop"));
    }

    #[test]
    fn settings_any_policy_opts_in_and_strictest_brake_wins() {
        let pol = |degraded, max| {
            NetfilterPolicy::new(
                "p",
                NetfilterPolicySpec {
                    taint_degraded_nodes: degraded,
                    max_tainted_nodes_percent: max,
                    ..Default::default()
                },
            )
        };
        assert_eq!(TaintSettings::from_policies([]), TaintSettings::default());
        let s = TaintSettings::from_policies(&[
            pol(false, Some(30)),
            pol(true, Some(5)),
            pol(false, None),
        ]);
        assert_eq!(
            s,
            TaintSettings {
                taint_degraded: true,
                max_percent: 5
            }
        );
        // An invalid policy opts nothing in and brakes nothing.
        let mut broken = pol(true, Some(1));
        broken.spec.exempt_images = vec!["a[".into()];
        assert_eq!(
            TaintSettings::from_policies(&[broken, pol(false, Some(30))]),
            TaintSettings {
                taint_degraded: false,
                max_percent: 30
            }
        );
    }
}
