//! Hazard rules: pure functions over the gathered node facts.

use super::NodeFacts;
use super::backends::{backend_facts, has_kube_chains, holds_rules, kubelet_markers};
use super::kube_proxy;
use super::nft_skew::crashes_release;
use crate::api::{MarkerState, NodeNetfilterProfileStatus, NodeNftables, Writer};
use crate::facts::version::is_known_bad;
use crate::facts::{Backend, Hazard, HazardCode, IptablesFacts, Severity, Version};
use crate::kernel::{Expr, Rule, RuleSet, Verdict, render_rule};

/// At most this many FirewallUnconditionalDrop hazards are listed one by one.
const MAX_RULE_HAZARDS: usize = 20;

fn hazard(code: HazardCode, severity: Severity, message: String) -> Hazard {
    Hazard {
        code,
        severity,
        message,
        backend: None,
        table: None,
        chain: None,
        rule: None,
    }
}

/// Every hazard of the node, most severe first (stable order within a severity).
/// `nft_sets`: [`super::nft_skew::node_nftables`] of the same facts (the
/// probe builds it once for the status and the hazards).
pub fn assess(
    facts: &NodeFacts,
    min_reader: Option<Version>,
    nft_sets: &NodeNftables,
) -> Vec<Hazard> {
    let empty = RuleSet::default();
    let nft = facts.nft.as_ref().unwrap_or(&empty);
    let legacy = facts.legacy.as_ref().unwrap_or(&empty);
    let mut out = Vec::new();
    out.extend(unconditional_drops(nft, Backend::Nft));
    out.extend(unconditional_drops(legacy, Backend::Legacy));
    out.extend(mixed_backends(nft, legacy));
    if facts.nft.is_ok() && facts.legacy.is_ok() {
        out.extend(kubelet_chains_missing(
            nft,
            legacy,
            facts.no_iptables_command(),
        ));
    }
    out.extend(kube_proxy_mode_leftovers(nft, legacy));
    out.extend(bridge_disabled(facts));
    out.extend(host_tool_hazards(facts.iptables.as_ref(), min_reader));
    out.extend(nft_sets_crash_host_nft(nft_sets));
    out.extend(xt_modules_absent(facts));
    out.extend(probe_failures(facts));
    out.sort_by_key(|h| std::cmp::Reverse(h.severity));
    out
}

/// True when a rule DROPs/REJECTs with no condition but a comment: every
/// packet reaching it dies. What 1.8.7's save/restore leaves of a native
/// `-m mark ... -j DROP` (the Kubernetes 1.25 KUBE-FIREWALL incident).
pub fn is_unconditional_drop(rule: &Rule) -> bool {
    let mut kills = false;
    for e in &rule.exprs {
        match e {
            Expr::Counter => {}
            Expr::Match { name, .. } if name == "comment" => {}
            Expr::Verdict(Verdict::Drop) => kills = true,
            Expr::Target { name } if name == "REJECT" => kills = true,
            Expr::Other(name) if name == "reject" => kills = true,
            _ => return false,
        }
    }
    kills
}

fn unconditional_drops(set: &RuleSet, backend: Backend) -> Vec<Hazard> {
    let mut out = Vec::new();
    let mut more = 0usize;
    for t in set.tables.iter().filter(|t| t.iptables_owned()) {
        for c in t.chains.iter().filter(|c| c.name.starts_with("KUBE-")) {
            for (i, r) in c.rules.iter().enumerate() {
                if !is_unconditional_drop(r) {
                    continue;
                }
                if out.len() >= MAX_RULE_HAZARDS {
                    more += 1;
                    continue;
                }
                let text = render_rule(&c.name, r);
                let mut h = hazard(
                    HazardCode::FirewallUnconditionalDrop,
                    Severity::Critical,
                    format!(
                        "{backend} {}/{} chain {} rule {}: `{text}` drops every packet that reaches it \
                         (its only condition is a comment); an old iptables (<= 1.8.7) probably saved and \
                         restored a rule whose native match it could not read",
                        t.family,
                        t.name,
                        c.name,
                        i + 1
                    ),
                );
                h.backend = Some(backend);
                h.table = Some(t.name.clone());
                h.chain = Some(c.name.clone());
                h.rule = Some(text);
                out.push(h);
            }
        }
    }
    if more > 0 {
        let mut h = hazard(
            HazardCode::FirewallUnconditionalDrop,
            Severity::Critical,
            format!(
                "{backend}: {more} more unconditional DROP/REJECT rules in KUBE-* chains not listed"
            ),
        );
        h.backend = Some(backend);
        out.push(h);
    }
    out
}

fn describe(set: &RuleSet) -> String {
    let f = backend_facts(set);
    let tables: Vec<String> = set
        .tables
        .iter()
        .filter(|t| {
            t.iptables_owned() && t.chains.iter().any(|c| !c.builtin || !c.rules.is_empty())
        })
        .map(|t| format!("{}/{}", t.family, t.name))
        .collect();
    format!(
        "{} chains, {} rules in {}",
        f.chains,
        f.rules,
        tables.join(", ")
    )
}

fn mixed_backends(nft: &RuleSet, legacy: &RuleSet) -> Option<Hazard> {
    if !(holds_rules(nft) && holds_rules(legacy)) {
        return None;
    }
    // Kubernetes chains in both: a component jumps across rule sets that
    // neither tool can see together. Otherwise both rule sets may be
    // self-contained, which works (node-problem-detector PR 844).
    let kube_both = has_kube_chains(nft) && has_kube_chains(legacy);
    Some(hazard(
        HazardCode::MixedBackends,
        if kube_both {
            Severity::Critical
        } else {
            Severity::Warning
        },
        format!(
            "both backends hold rules: nft ({}) and legacy ({}); the kernel runs both and neither tool shows the other's rules{}",
            describe(nft),
            describe(legacy),
            if kube_both {
                "; KUBE-* chains exist in both"
            } else {
                ""
            }
        ),
    ))
}

/// Only where kubelet writes them: a host without an iptables command has none on purpose.
fn kubelet_chains_missing(nft: &RuleSet, legacy: &RuleSet, no_iptables: bool) -> Option<Hazard> {
    if kubelet_markers(nft, legacy, no_iptables).state != MarkerState::Missing {
        return None;
    }
    Some(hazard(
        HazardCode::KubeletChainsMissing,
        Severity::Warning,
        "neither backend has KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY: components that detect the \
         backend from kubelet's marker chains (iptables-wrappers, azure-npm) guess nft or fail"
            .into(),
    ))
}

/// At most this many shared Service addresses are named in a message.
const MAX_SHARED_LISTED: usize = 5;

/// kube-proxy's nftables table next to iptables-mode Service chains: a mode
/// switch that was not finished (kubernetes#131243). Critical when both
/// route the same Service address: which one DNATs a packet then depends on
/// hook order, and the stale one sends it to endpoints that may be gone.
fn kube_proxy_mode_leftovers(nft: &RuleSet, legacy: &RuleSet) -> Option<Hazard> {
    let native: Vec<String> = kube_proxy::nft_tables(nft)
        .map(|t| format!("{}/{}", t.family, t.name))
        .collect();
    let chains = kube_proxy::iptables_dispatch_chains(nft, legacy);
    if native.is_empty() || chains.is_empty() {
        return None;
    }
    let nft_addrs = kube_proxy::nft_service_addrs(nft);
    let shared: Vec<String> = kube_proxy::iptables_service_addrs(nft, legacy)
        .intersection(&nft_addrs)
        .map(|a| a.to_string())
        .collect();
    let routes = if shared.is_empty() {
        String::new()
    } else {
        let more = shared.len().saturating_sub(MAX_SHARED_LISTED);
        format!(
            "; both route Service address(es) {}{}",
            shared[..shared.len().min(MAX_SHARED_LISTED)].join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        )
    };
    Some(hazard(
        HazardCode::KubeProxyModeLeftovers,
        if shared.is_empty() {
            Severity::Warning
        } else {
            Severity::Critical
        },
        format!(
            "kube-proxy's nftables rules ({}) and iptables-mode Service chains ({}) exist at once: \
             a kube-proxy mode switch left the old mode's rules behind (kubernetes#131243){routes}; \
             finish the switch with `kube-proxy --cleanup` in the old mode, or reboot the node",
            native.join(", "),
            chains.join(", ")
        ),
    ))
}

fn bridge_disabled(facts: &NodeFacts) -> Option<Hazard> {
    let b = &facts.bridge;
    let message = if !b.br_netfilter {
        "br_netfilter is not loaded: bridged pod-to-pod traffic bypasses iptables (same-node ClusterIP times out)".to_string()
    } else if !b.call_iptables {
        format!(
            "net.bridge.bridge-nf-call-iptables = 0{}: bridged IPv4 traffic bypasses iptables (same-node ClusterIP times out)",
            if b.call_ip6tables {
                ""
            } else {
                " (and bridge-nf-call-ip6tables = 0)"
            }
        )
    } else {
        return None;
    };
    Some(hazard(
        HazardCode::BridgeNetfilterDisabled,
        Severity::Warning,
        message,
    ))
}

/// The hazards of the host's own iptables (its release, and whether it can
/// read the live rules): the only ones a change of the host's package alone
/// changes. `nfguard check --assume` re-derives them for a patched profile.
pub fn host_tool_hazards(
    iptables: Option<&IptablesFacts>,
    min_reader: Option<Version>,
) -> Vec<Hazard> {
    known_bad(iptables)
        .into_iter()
        .chain(old_reader(iptables, min_reader))
        .collect()
}

fn known_bad(iptables: Option<&IptablesFacts>) -> Option<Hazard> {
    let v = iptables?.version?;
    is_known_bad(v).then(|| {
        hazard(
            HazardCode::KnownBadIptables,
            Severity::Critical,
            format!("the host's iptables is {v}: 1.8.0 to 1.8.3 have a broken -C that adds duplicate rules endlessly"),
        )
    })
}

fn old_reader(iptables: Option<&IptablesFacts>, min_reader: Option<Version>) -> Option<Hazard> {
    let ipt = iptables?;
    let (v, min) = (ipt.version?, min_reader?);
    if v >= min {
        return None;
    }
    // The host's iptables-nft (same package) misreads them either way; when it
    // is also the default `iptables`, a save/restore on the host corrupts rules.
    let default_nft = matches!(ipt.backend, Some(Backend::Nft | Backend::Wrapper));
    let mut h = hazard(
        HazardCode::OldReaderNewRules,
        if default_nft {
            Severity::Critical
        } else {
            Severity::Warning
        },
        format!(
            "the host's iptables is {v} but the live nf_tables rules need iptables-nft >= {min} to be read \
             without loss: an iptables-save/restore by the host's tools silently drops native matches"
        ),
    );
    h.backend = Some(Backend::Nft);
    Some(h)
}

/// The host's own `nft` segfaults on the live sets (shared doc §8): every
/// command that builds its cache fails, `nft list ruleset` included. Re-derived
/// by `nfguard check --assume` when the host's nftables changes.
pub fn nft_sets_crash_host_nft(n: &NodeNftables) -> Option<Hazard> {
    let host = n.host.as_ref()?;
    if n.crashing_sets.unwrap_or(0) == 0 {
        return None;
    }
    if super::nft_skew::crashes(host, n.min_reader, n.fixed_reader_required) != Some(true) {
        return None;
    }
    let count = n.crashing_sets.unwrap_or(0);
    let shown = n.crashing_examples.join(", ");
    let more = (count as usize)
        .checked_sub(n.crashing_examples.len())
        .filter(|m| *m > 0)
        .map(|m| format!(" and {m} more"))
        .unwrap_or_default();
    let release = match (&host.version, &host.package_version) {
        (Some(v), Some(p)) => format!("{v} (package {p})"),
        (Some(v), None) => v.to_string(),
        (None, Some(p)) => format!("package {p}"),
        (None, None) => "of an unknown release".into(),
    };
    let need = match (n.fixed_reader_required, n.min_reader) {
        (true, _) | (false, None) => "a build with the fix (nftables 1.1.4+, 1.0.6.1)".to_string(),
        (false, Some(min)) => {
            format!("libnftables >= {min} or a build with the fix (1.1.4+, 1.0.6.1)")
        }
    };
    let mut h = hazard(
        HazardCode::NftSetsCrashHostNft,
        Severity::Critical,
        format!(
            "the live nf_tables sets {shown}{more} carry userdata written by libnftables >= 1.1.2 that the \
             host's nft {release} segfaults on: every command that lists them (nft list ruleset, nft -f \
             batches) fails; they need {need}: upgrade the host's nftables, or delete the sets"
        ),
    );
    h.table = n.crashing_tables.first().cloned();
    Some(h)
}

/// The hazards the controller derives from a profile: what the reporter's
/// facts mean for the writer pods the controller inventoried. Read beside
/// `status.hazards` by the `Healthy` condition and the degraded taint.
pub fn controller_hazards(status: &NodeNetfilterProfileStatus) -> Vec<Hazard> {
    nft_sets_crash_writers(
        status.nftables.as_ref(),
        status.writers.as_deref().unwrap_or(&[]),
    )
    .into_iter()
    .collect()
}

/// Live sets that writer pods' unfixed `nft` segfaults on: kube-proxy's sync
/// in nftables mode, a CNI agent's. Named: the sets and the containers.
pub fn nft_sets_crash_writers(n: Option<&NodeNftables>, writers: &[Writer]) -> Option<Hazard> {
    const SHOWN: usize = 5;
    let n = n?;
    if n.crashing_sets.unwrap_or(0) == 0 {
        return None;
    }
    let mut crashing: Vec<String> = writers
        .iter()
        .filter(|w| {
            w.nft_userdata_reader.is_some_and(|class| {
                crashes_release(class, w.nft_version, n.min_reader, n.fixed_reader_required)
                    == Some(true)
            })
        })
        .map(|w| {
            format!(
                "{} in {} (nft {})",
                w.container,
                w.pod,
                w.nft_version.map_or("?".into(), |v| v.to_string())
            )
        })
        .collect();
    if crashing.is_empty() {
        return None;
    }
    let total = crashing.len();
    crashing.truncate(SHOWN);
    let more = if total > SHOWN {
        format!(" and {} more", total - SHOWN)
    } else {
        String::new()
    };
    let mut h = hazard(
        HazardCode::NftSetsCrashWriterNft,
        Severity::Critical,
        format!(
            "the live nf_tables sets {} carry userdata that the unfixed nft of writer container(s) {}{more} \
             segfaults on: every command of theirs that lists the sets (kube-proxy's sync batches \
             included) fails; upgrade them to a build with the fix (nftables 1.1.4+, 1.0.6.1), or \
             delete the sets",
            n.crashing_examples.join(", "),
            crashing.join(", ")
        ),
    );
    h.table = n.crashing_tables.first().cloned();
    Some(h)
}

/// x_tables extensions the kernel lacks for sure (never on `unknown`).
/// A warning: which rules a node's writers will load is not known until they
/// fail, but these are the ones Kubernetes' writers use.
fn xt_modules_absent(facts: &NodeFacts) -> Option<Hazard> {
    let absent = super::xt_modules::absent(&facts.kernel_modules.xt);
    if absent.is_empty() {
        return None;
    }
    let list: Vec<String> = absent
        .iter()
        .map(|e| format!("{} ({})", e.module, e.used_by))
        .collect();
    Some(hazard(
        HazardCode::XtModulesAbsent,
        Severity::Warning,
        format!(
            "the kernel offers no {}: a rule that needs one fails to load, through iptables-nft \
             (nft_compat) and iptables-legacy alike",
            list.join(", ")
        ),
    ))
}

fn probe_failures(facts: &NodeFacts) -> Vec<Hazard> {
    let mut out = Vec::new();
    for (backend, res, supported) in [
        (Backend::Nft, &facts.nft, facts.nf_tables_supported),
        (Backend::Legacy, &facts.legacy, facts.ip_tables_supported),
    ] {
        if let (Err(e), true) = (res, supported) {
            let mut h = hazard(
                HazardCode::ProbeFailed,
                Severity::Warning,
                format!("reading the {backend} rule set failed: {e}"),
            );
            h.backend = Some(backend);
            out.push(h);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `assess` as the probe calls it.
    fn assess(facts: &NodeFacts, min: Option<Version>) -> Vec<Hazard> {
        let n =
            crate::node::nft_skew::node_nftables(facts.nft.as_ref().ok(), facts.nftables.as_ref());
        super::assess(facts, min, &n)
    }
    use crate::api::BridgeFacts;
    use crate::facts::IptablesFacts;
    use crate::kernel::{Chain, Family, Table};

    fn facts(nft: RuleSet, legacy: RuleSet) -> NodeFacts {
        NodeFacts {
            iptables: None,
            nftables: None,
            host_error: None,
            kernel_release: "6.1".into(),
            nf_tables_supported: true,
            ip_tables_supported: true,
            kernel_modules: Default::default(),
            nft: Ok(nft),
            legacy: Ok(legacy),
            bridge: BridgeFacts {
                br_netfilter: true,
                call_iptables: true,
                call_ip6tables: true,
            },
            ip_forward: Some(true),
        }
    }

    fn firewall(rule: Rule) -> RuleSet {
        RuleSet {
            tables: vec![
                Table {
                    family: Family::Ip,
                    name: "filter".into(),
                    chains: vec![Chain {
                        name: "KUBE-FIREWALL".into(),
                        builtin: false,
                        rules: vec![rule],
                    }],
                    sets: Vec::new(),
                },
                super::super::backends::tests::table(
                    Family::Ip,
                    "mangle",
                    &[("KUBE-IPTABLES-HINT", false, 0)],
                ),
            ],
        }
    }

    fn comment() -> Expr {
        Expr::Match {
            name: "comment".into(),
            comment: Some("block incoming localnet connections".into()),
        }
    }

    #[test]
    fn corrupted_firewall_rule_is_critical_intact_one_is_not() {
        let corrupted = Rule {
            exprs: vec![comment(), Expr::Counter, Expr::Verdict(Verdict::Drop)],
        };
        let hs = assess(&facts(firewall(corrupted), RuleSet::default()), None);
        assert_eq!(hs.len(), 1, "{hs:?}");
        assert_eq!(hs[0].code, HazardCode::FirewallUnconditionalDrop);
        assert_eq!(hs[0].severity, Severity::Critical);
        assert_eq!(hs[0].chain.as_deref(), Some("KUBE-FIREWALL"));
        assert!(hs[0].rule.as_deref().unwrap().contains("-j DROP"));

        let intact = Rule {
            exprs: vec![
                comment(),
                Expr::Meta { key: 3, set: false },
                Expr::Bitwise,
                Expr::Cmp,
                Expr::Counter,
                Expr::Verdict(Verdict::Drop),
            ],
        };
        assert!(assess(&facts(firewall(intact), RuleSet::default()), None).is_empty());
    }

    #[test]
    fn old_host_reader_under_new_rules() {
        let mut f = facts(firewall(Rule::default()), RuleSet::default());
        f.iptables = Some(IptablesFacts {
            version: Some(Version::new(1, 8, 7)),
            backend: Some(Backend::Nft),
            ..Default::default()
        });
        let hs = assess(&f, Some(Version::new(1, 8, 8)));
        assert!(
            hs.iter().any(
                |h| h.code == HazardCode::OldReaderNewRules && h.severity == Severity::Critical
            )
        );
        assert!(assess(&f, None).is_empty());
    }

    #[test]
    fn known_bad_missing_markers_bridge_and_probe_failure() {
        let mut f = facts(RuleSet::default(), RuleSet::default());
        f.iptables = Some(IptablesFacts {
            version: Some(Version::new(1, 8, 2)),
            backend: Some(Backend::Legacy),
            ..Default::default()
        });
        f.bridge.call_iptables = false;
        let codes: Vec<_> = assess(&f, None).iter().map(|h| h.code).collect();
        for c in [
            HazardCode::KnownBadIptables,
            HazardCode::KubeletChainsMissing,
            HazardCode::BridgeNetfilterDisabled,
        ] {
            assert!(codes.contains(&c), "{c} missing from {codes:?}");
        }
        assert_eq!(codes[0], HazardCode::KnownBadIptables, "critical first");
        // One backend unreadable: reported, and no guess about marker chains.
        f.legacy = Err("boom".into());
        let codes: Vec<_> = assess(&f, None).iter().map(|h| h.code).collect();
        assert!(codes.contains(&HazardCode::ProbeFailed), "{codes:?}");
        assert!(
            !codes.contains(&HazardCode::KubeletChainsMissing),
            "{codes:?}"
        );
    }

    #[test]
    fn no_markers_expected_without_an_iptables_command() {
        let mut f = facts(RuleSet::default(), RuleSet::default());
        let codes =
            |f: &NodeFacts| -> Vec<HazardCode> { assess(f, None).iter().map(|h| h.code).collect() };
        assert!(
            !codes(&f).contains(&HazardCode::KubeletChainsMissing),
            "no iptables at all"
        );
        f.iptables = Some(IptablesFacts {
            version: Some(Version::new(1, 8, 9)),
            backend: None, // a package without the `iptables` command
            ..Default::default()
        });
        assert!(!codes(&f).contains(&HazardCode::KubeletChainsMissing));
        f.host_error = Some("host probe failed".into());
        assert!(
            codes(&f).contains(&HazardCode::KubeletChainsMissing),
            "unknown host: the chains are expected"
        );
    }

    #[test]
    fn kube_proxy_leftovers_warning_and_critical_on_a_shared_address() {
        use crate::node::kube_proxy::tests::{kube_proxy_nft, kube_services};
        let ip = |s: &str| -> std::net::IpAddr { s.parse().unwrap() };
        let nft = RuleSet {
            tables: vec![kube_proxy_nft(
                Family::Ip,
                &[ip("10.96.0.1"), ip("10.96.0.10")],
            )],
        };
        let leftovers = |legacy: &RuleSet| -> Vec<Hazard> {
            assess(&facts(nft.clone(), legacy.clone()), None)
                .into_iter()
                .filter(|h| h.code == HazardCode::KubeProxyModeLeftovers)
                .collect()
        };
        assert!(leftovers(&RuleSet::default()).is_empty(), "native only");
        let other = RuleSet {
            tables: vec![kube_services(ip("10.96.0.99"))],
        };
        let hs = leftovers(&other);
        assert_eq!(hs.len(), 1, "{hs:?}");
        assert_eq!(hs[0].severity, Severity::Warning);
        assert!(hs[0].message.contains("ip/kube-proxy"), "{}", hs[0].message);
        assert!(
            hs[0].message.contains("legacy ip/nat KUBE-SERVICES"),
            "{}",
            hs[0].message
        );
        let same = RuleSet {
            tables: vec![kube_services(ip("10.96.0.10"))],
        };
        let hs = leftovers(&same);
        assert_eq!(hs[0].severity, Severity::Critical);
        assert!(hs[0].message.contains("10.96.0.10"), "{}", hs[0].message);
        assert!(!hs[0].message.contains("10.96.0.1,"), "{}", hs[0].message);
    }

    #[test]
    fn sets_by_a_new_writer_crash_only_an_unfixed_old_host_nft() {
        use crate::facts::NftablesFacts;
        use crate::kernel::NamedSet;
        use crate::kernel::set_userdata::SetUserdata;
        // What libnftables 1.1.3 leaves on `type ifname` (shared doc §8).
        let new = SetUserdata::parse(&[0, 4, 2, 0, 0, 0, 3, 8, 0, 4, 4, 0, 0, 0, 1, 0]);
        // What 1.0.6 leaves on `type ipv4_addr`.
        let old = SetUserdata::parse(&[0, 4, 2, 0, 0, 0]);
        let sets = |u: SetUserdata| RuleSet {
            tables: vec![Table {
                family: Family::Ip,
                name: "t".into(),
                chains: vec![],
                sets: vec![NamedSet {
                    name: "s".into(),
                    userdata: u,
                    ..Default::default()
                }],
            }],
        };
        let host = |pkg: &str| {
            Some(
                NftablesFacts {
                    version: pkg.parse().ok(),
                    package_version: Some(pkg.into()),
                    program: true,
                    ..Default::default()
                }
                .classified(false),
            )
        };
        let found = |u: SetUserdata, nft: Option<NftablesFacts>| -> Vec<Hazard> {
            let mut f = facts(sets(u), RuleSet::default());
            f.nftables = nft;
            assess(&f, None)
                .into_iter()
                .filter(|h| h.code == HazardCode::NftSetsCrashHostNft)
                .collect()
        };
        let hs = found(new, host("1.0.6-2+deb12u2"));
        assert_eq!(hs.len(), 1, "{hs:?}");
        assert_eq!(hs[0].severity, Severity::Critical);
        assert_eq!(hs[0].table.as_deref(), Some("ip/t"));
        for part in ["ip/t/s", "1.0.6 (package 1.0.6-2+deb12u2)", ">= 1.1.2"] {
            assert!(hs[0].message.contains(part), "{part}: {}", hs[0].message);
        }
        // No false hazard: an old writer, a current or fixed reader, no host nft.
        assert!(found(old, host("1.0.6-2+deb12u2")).is_empty());
        assert!(found(new, host("1.1.3-1")).is_empty());
        assert!(found(new, host("1.0.6-2.1+k8s1")).is_empty());
        assert!(found(new, host("0.9.8-3.1+deb11u2")).len() == 1);
        assert!(found(new, None).is_empty());
    }

    #[test]
    fn absent_xt_modules_are_a_warning_naming_their_users_and_unknown_is_silent() {
        use crate::api::{ModuleState, XtModule};
        let mut f = facts(RuleSet::default(), RuleSet::default());
        let xt = |name: &str, state| XtModule {
            name: name.into(),
            state,
        };
        f.kernel_modules.xt = vec![
            xt("xt_comment", ModuleState::Builtin),
            xt("xt_CT", ModuleState::Absent),
            xt("xt_TPROXY", ModuleState::Unknown),
        ];
        let hs: Vec<Hazard> = assess(&f, None)
            .into_iter()
            .filter(|h| h.code == HazardCode::XtModulesAbsent)
            .collect();
        assert_eq!(hs.len(), 1, "{hs:?}");
        assert_eq!(hs[0].severity, Severity::Warning);
        assert!(
            hs[0].message.contains("xt_CT (-j CT: Cilium, Calico)"),
            "{}",
            hs[0].message
        );
        assert!(
            !hs[0].message.contains("TPROXY"),
            "unknown is no sign: {}",
            hs[0].message
        );
        f.kernel_modules.xt[1].state = ModuleState::Module;
        assert!(
            !assess(&f, None)
                .iter()
                .any(|h| h.code == HazardCode::XtModulesAbsent)
        );
    }

    #[test]
    fn writer_pods_whose_nft_crashes_on_the_live_sets_are_named() {
        use crate::api::{NodeNftables, Writer};
        use crate::facts::UserdataReader;
        let n = NodeNftables {
            min_reader: Some("1.1.2".parse().unwrap()),
            crashing_sets: Some(1),
            crashing_examples: vec!["ip/t/s".into()],
            crashing_tables: vec!["ip/t".into()],
            ..Default::default()
        };
        let w = |container: &str, v: &str, class| Writer {
            pod: format!("kube-system/{container}-1"),
            container: container.into(),
            nft_version: Some(v.parse().unwrap()),
            nft_userdata_reader: Some(class),
            ..Default::default()
        };
        let writers = [
            w("kube-proxy", "1.0.6", UserdataReader::Crashes),
            w("calico-node", "1.1.3", UserdataReader::Current),
            w("patched", "1.0.6", UserdataReader::Fixed),
        ];
        let h = nft_sets_crash_writers(Some(&n), &writers).unwrap();
        assert_eq!(
            (h.code, h.severity),
            (HazardCode::NftSetsCrashWriterNft, Severity::Critical)
        );
        assert!(
            h.message
                .contains("kube-proxy in kube-system/kube-proxy-1 (nft 1.0.6)"),
            "{}",
            h.message
        );
        assert!(
            !h.message.contains("calico") && !h.message.contains("patched"),
            "{}",
            h.message
        );
        assert_eq!(h.table.as_deref(), Some("ip/t"));
        // No false hazard: readers that survive, or no crashing set at all.
        assert!(nft_sets_crash_writers(Some(&n), &writers[1..]).is_none());
        let quiet = NodeNftables {
            crashing_sets: Some(0),
            ..n.clone()
        };
        assert!(nft_sets_crash_writers(Some(&quiet), &writers).is_none());
        assert!(nft_sets_crash_writers(None, &writers).is_none());
    }
}
