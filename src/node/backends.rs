//! Per-backend counts, kubelet's marker chains and the active backend. Pure.

use crate::api::{ActiveBackend, BackendFacts, KubeletMarkers, MarkerState};
use crate::facts::Backend;
use crate::kernel::{Family, RuleSet, Table};

pub const HINT_CHAIN: &str = "KUBE-IPTABLES-HINT";
pub const CANARY_CHAIN: &str = "KUBE-KUBELET-CANARY";

fn is_marker(name: &str) -> bool {
    name == HINT_CHAIN || name == CANARY_CHAIN
}

/// Only iptables-owned tables count (legacy tables always are).
fn owned(set: &RuleSet) -> impl Iterator<Item = &Table> {
    set.tables.iter().filter(|t| t.iptables_owned())
}

pub fn backend_facts(set: &RuleSet) -> BackendFacts {
    let mut f = BackendFacts::default();
    for t in owned(set) {
        f.tables += 1;
        f.chains += t.chains.len() as u32;
        f.rules += t.rule_count() as u32;
        let mut marker_here = false;
        for c in &t.chains {
            f.hint_chain |= c.name == HINT_CHAIN;
            f.canary_chain |= c.name == CANARY_CHAIN;
            marker_here |= is_marker(&c.name);
        }
        if marker_here {
            f.marker_tables.push(format!("{}/{}", t.family, t.name));
        }
    }
    f
}

/// "Holds" = has a user-defined chain or any rule in an iptables-owned table.
/// Empty built-in chains (a table merely created by a `-S`) do not count.
pub fn holds_rules(set: &RuleSet) -> bool {
    owned(set).any(|t| t.chains.iter().any(|c| !c.builtin || !c.rules.is_empty()))
}

/// Whether any iptables-owned table has a KUBE-* chain.
pub fn has_kube_chains(set: &RuleSet) -> bool {
    owned(set).any(|t| t.chains.iter().any(|c| c.name.starts_with("KUBE-")))
}

fn marker_in(set: &RuleSet, family: Family, table: Option<&str>) -> bool {
    owned(set)
        .filter(|t| t.family == family && table.is_none_or(|n| t.name == n))
        .any(|t| t.chains.iter().any(|c| is_marker(&c.name)))
}

/// iptables-wrappers' choice: nft when nft's mangle table (IPv4, then IPv6)
/// has a marker chain; else legacy when any legacy table has one; else nft.
pub fn wrapper_choice(nft: &RuleSet, legacy: &RuleSet) -> Backend {
    if marker_in(nft, Family::Ip, Some("mangle")) || marker_in(nft, Family::Ip6, Some("mangle")) {
        Backend::Nft
    } else if marker_in(legacy, Family::Ip, None) || marker_in(legacy, Family::Ip6, None) {
        Backend::Legacy
    } else {
        Backend::Nft
    }
}

/// The backend kubelet (and so the node) uses:
/// 1. `mixed` when both backends hold rules in iptables-owned tables (the
///    MixedBackends condition);
/// 2. else the wrappers rule on marker chains: nft mangle (v4, v6) -> nft;
///    any legacy table -> legacy; a marker in another nft table -> nft;
/// 3. else, without markers, the one backend holding rules, where nf_tables
///    holds rules in its iptables-owned tables or in native ones (kube-proxy's
///    nftables mode, firewalld): native only -> nft; native and legacy ->
///    `mixed` (a legacy writer is judged against both);
/// 4. else `none`.
pub fn active_backend(nft: &RuleSet, legacy: &RuleSet) -> ActiveBackend {
    let (n, l) = (holds_rules(nft), holds_rules(legacy));
    if n && l {
        return ActiveBackend::Mixed;
    }
    if marker_in(nft, Family::Ip, Some("mangle")) || marker_in(nft, Family::Ip6, Some("mangle")) {
        return ActiveBackend::Nft;
    }
    if marker_in(legacy, Family::Ip, None) || marker_in(legacy, Family::Ip6, None) {
        return ActiveBackend::Legacy;
    }
    if marker_in(nft, Family::Ip, None) || marker_in(nft, Family::Ip6, None) {
        return ActiveBackend::Nft;
    }
    match (n || super::native::holds_rules(nft), l) {
        (true, true) => ActiveBackend::Mixed,
        (true, false) => ActiveBackend::Nft,
        (false, true) => ActiveBackend::Legacy,
        (false, false) => ActiveBackend::None,
    }
}

/// Whether either backend has a marker chain (in an iptables-owned table).
pub fn markers_present(nft: &RuleSet, legacy: &RuleSet) -> bool {
    let (n, l) = (backend_facts(nft), backend_facts(legacy));
    n.hint_chain || n.canary_chain || l.hint_chain || l.canary_chain
}

/// Why kubelet leaves no marker chains on a host without iptables.
pub const NO_IPTABLES_REASON: &str = "the host has no iptables command, so kubelet does not create \
    KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY: its initNetworkUtil skips them when neither \
    `iptables` nor `ip6tables` can list nat POSTROUTING, kubernetes#129826";

/// kubelet's marker chains: present in either backend; else not expected when
/// the host has no `iptables` command (`no_iptables`); else missing.
pub fn kubelet_markers(nft: &RuleSet, legacy: &RuleSet, no_iptables: bool) -> KubeletMarkers {
    if markers_present(nft, legacy) {
        KubeletMarkers {
            state: MarkerState::Present,
            reason: None,
        }
    } else if no_iptables {
        KubeletMarkers {
            state: MarkerState::NotExpected,
            reason: Some(NO_IPTABLES_REASON.into()),
        }
    } else {
        KubeletMarkers {
            state: MarkerState::Missing,
            reason: Some(
                "neither backend has KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY although the host has \
                 an iptables command: kubelet has not run here, or could not write them"
                    .into(),
            ),
        }
    }
}

// Marker tables are iptables-owned tables of ip and ip6: within the profile
// CRD's bounds ("ip6/security" the longest).
const _: () = {
    use crate::api::bounds::{MARKER_TABLE, MARKER_TABLES};
    use crate::kernel::IPTABLES_TABLES;
    assert!(2 * IPTABLES_TABLES.len() <= MARKER_TABLES);
    let mut i = 0;
    while i < IPTABLES_TABLES.len() {
        assert!("ip6/".len() + IPTABLES_TABLES[i].len() <= MARKER_TABLE);
        i += 1;
    }
};

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kernel::{Chain, Expr, Rule, Verdict};

    pub fn table(family: Family, name: &str, chains: &[(&str, bool, usize)]) -> Table {
        Table {
            family,
            name: name.into(),
            chains: chains
                .iter()
                .map(|(n, builtin, rules)| Chain {
                    name: (*n).into(),
                    builtin: *builtin,
                    rules: vec![
                        Rule {
                            exprs: vec![Expr::Counter, Expr::Verdict(Verdict::Accept)]
                        };
                        *rules
                    ],
                })
                .collect(),
            sets: Vec::new(),
        }
    }

    #[test]
    fn markers_in_ipv6_mangle_only_mean_nft() {
        let nft = RuleSet {
            tables: vec![table(
                Family::Ip6,
                "mangle",
                &[("KUBE-IPTABLES-HINT", false, 0)],
            )],
        };
        let f = backend_facts(&nft);
        assert!(f.hint_chain && !f.canary_chain);
        assert_eq!(f.marker_tables, vec!["ip6/mangle"]);
        assert_eq!(
            active_backend(&nft, &RuleSet::default()),
            ActiveBackend::Nft
        );
        assert_eq!(wrapper_choice(&nft, &RuleSet::default()), Backend::Nft);
    }

    #[test]
    fn empty_legacy_tables_do_not_make_mixed() {
        let nft = RuleSet {
            tables: vec![table(
                Family::Ip,
                "mangle",
                &[("KUBE-KUBELET-CANARY", false, 0)],
            )],
        };
        let legacy = RuleSet {
            tables: vec![table(Family::Ip, "filter", &[("INPUT", true, 0)])],
        };
        assert_eq!(active_backend(&nft, &legacy), ActiveBackend::Nft);
        let legacy = RuleSet {
            tables: vec![table(Family::Ip, "filter", &[("INPUT", true, 1)])],
        };
        assert_eq!(active_backend(&nft, &legacy), ActiveBackend::Mixed);
    }

    #[test]
    fn no_markers_no_rules_is_none_and_wrapper_defaults_to_nft() {
        let e = RuleSet::default();
        assert_eq!(active_backend(&e, &e), ActiveBackend::None);
        assert_eq!(wrapper_choice(&e, &e), Backend::Nft);
    }

    #[test]
    fn native_tables_are_not_counted_but_make_a_node_nft() {
        let nft = RuleSet {
            tables: vec![table(Family::Inet, "firewalld", &[("x", false, 3)])],
        };
        assert!(!holds_rules(&nft));
        assert_eq!(backend_facts(&nft).tables, 0);
        let e = RuleSet::default();
        assert_eq!(active_backend(&nft, &e), ActiveBackend::Nft, "native only");
    }

    #[test]
    fn native_and_legacy_rules_without_markers_are_mixed() {
        let nft = RuleSet {
            tables: vec![table(Family::Ip, "kube-proxy", &[("services", false, 1)])],
        };
        let legacy = RuleSet {
            tables: vec![table(Family::Ip, "filter", &[("INPUT", true, 1)])],
        };
        assert_eq!(active_backend(&nft, &legacy), ActiveBackend::Mixed);
        // A legacy marker decides as before (step 2): the native table is not iptables'.
        let legacy = RuleSet {
            tables: vec![table(Family::Ip, "mangle", &[(HINT_CHAIN, false, 0)])],
        };
        assert_eq!(active_backend(&nft, &legacy), ActiveBackend::Legacy);
    }

    #[test]
    fn marker_state_present_missing_not_expected() {
        let e = RuleSet::default();
        let marked = RuleSet {
            tables: vec![table(Family::Ip, "mangle", &[(CANARY_CHAIN, false, 0)])],
        };
        assert_eq!(
            kubelet_markers(&marked, &e, true).state,
            MarkerState::Present
        );
        assert_eq!(
            kubelet_markers(&e, &marked, false).state,
            MarkerState::Present
        );
        let m = kubelet_markers(&e, &e, true);
        assert_eq!(m.state, MarkerState::NotExpected);
        assert!(m.reason.unwrap().contains("kubernetes#129826"));
        assert_eq!(kubelet_markers(&e, &e, false).state, MarkerState::Missing);
        // A marker in a native table is not kubelet's.
        let native = RuleSet {
            tables: vec![table(Family::Inet, "x", &[(HINT_CHAIN, false, 0)])],
        };
        assert_eq!(
            kubelet_markers(&native, &e, false).state,
            MarkerState::Missing
        );
    }
}
