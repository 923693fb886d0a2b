//! kube-proxy's mode as the live rules show it, and the Service addresses
//! each mode routes. Pure. Chain and set names are those of kube-proxy 1.34
//! (pkg/proxy/{iptables,ipvs,nftables}/proxier.go).

use crate::api::KubeProxyMode;
use crate::kernel::{Expr, Family, RuleSet, Table, addr_prefix};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// The nftables proxier's table (`ip kube-proxy`, `ip6 kube-proxy`).
pub const NFT_TABLE: &str = "kube-proxy";
/// Its ClusterIP/ExternalIP/LB map: `ipvX_addr . inet_proto . inet_service : verdict`.
pub const SERVICE_IPS_MAP: &str = "service-ips";
/// The nat chains the iptables proxier dispatches Services from (the ipvs
/// proxier creates KUBE-SERVICES too).
pub const SERVICES_CHAIN: &str = "KUBE-SERVICES";
pub const NODEPORTS_CHAIN: &str = "KUBE-NODEPORTS";
/// The iptables proxier's canary (mangle, nat, filter).
pub const PROXY_CANARY: &str = "KUBE-PROXY-CANARY";
/// Chains only the ipvs proxier creates (KUBE-NODE-PORT is singular there;
/// the iptables proxier's is KUBE-NODEPORTS).
pub const IPVS_CHAINS: [&str; 4] = [
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
    "KUBE-LOAD-BALANCER",
    "KUBE-NODE-PORT",
];

/// kube-proxy's nftables tables (ip or ip6) that have chains.
pub fn nft_tables(nft: &RuleSet) -> impl Iterator<Item = &Table> {
    nft.tables.iter().filter(|t| {
        matches!(t.family, Family::Ip | Family::Ip6) && t.name == NFT_TABLE && !t.chains.is_empty()
    })
}

fn owned(sets: [&RuleSet; 2]) -> impl Iterator<Item = &Table> {
    sets.into_iter()
        .flat_map(|s| s.tables.iter())
        .filter(|t| t.iptables_owned())
}

fn ipvs_signs(t: &Table) -> bool {
    t.chains.iter().any(|c| {
        IPVS_CHAINS.contains(&c.name.as_str())
            // `-m set --match-set KUBE-CLUSTER-IP dst,dst`: ipvs routes by ipset.
            || (c.name == SERVICES_CHAIN
                && c.rules.iter().any(|r| {
                    r.exprs
                        .iter()
                        .any(|e| matches!(e, Expr::Match { name, .. } if name == "set"))
                }))
    })
}

fn iptables_signs(t: &Table) -> bool {
    t.chains.iter().any(|c| {
        c.name == PROXY_CANARY
            || (t.name == "nat" && (c.name == SERVICES_CHAIN || c.name == NODEPORTS_CHAIN))
    })
}

/// The iptables-owned nat chains a Service dispatch lives in
/// ("nft ip/nat KUBE-SERVICES"), in either backend.
pub fn iptables_dispatch_chains(nft: &RuleSet, legacy: &RuleSet) -> Vec<String> {
    let mut out = Vec::new();
    for (backend, set) in [("nft", nft), ("legacy", legacy)] {
        for t in set
            .tables
            .iter()
            .filter(|t| t.iptables_owned() && t.name == "nat")
        {
            for c in &t.chains {
                if c.name == SERVICES_CHAIN || c.name == NODEPORTS_CHAIN {
                    out.push(format!("{backend} {}/nat {}", t.family, c.name));
                }
            }
        }
    }
    out
}

/// The mode, from the rules each proxier leaves (see `KubeProxyMode`).
pub fn mode(nft: &RuleSet, legacy: &RuleSet) -> KubeProxyMode {
    let nftables = nft_tables(nft).next().is_some();
    let ipvs = owned([nft, legacy]).any(ipvs_signs);
    let iptables = !ipvs && owned([nft, legacy]).any(iptables_signs);
    match (nftables, iptables || ipvs) {
        (true, true) => KubeProxyMode::Mixed,
        (true, false) => KubeProxyMode::Nftables,
        (false, _) if ipvs => KubeProxyMode::Ipvs,
        (false, _) if iptables => KubeProxyMode::Iptables,
        _ => KubeProxyMode::None,
    }
}

/// The addresses in kube-proxy's nftables `service-ips` maps (the key's
/// first field; its proto and port fields are padded to 4 bytes each).
pub fn nft_service_addrs(nft: &RuleSet) -> BTreeSet<IpAddr> {
    let mut out = BTreeSet::new();
    for t in nft_tables(nft) {
        for s in t.sets.iter().filter(|s| s.name == SERVICE_IPS_MAP) {
            for k in &s.keys {
                out.extend(addr_prefix(k, t.family == Family::Ip6));
            }
        }
    }
    out
}

/// The exact destinations (`-d A/32`) of the rules in iptables-owned nat
/// KUBE-SERVICES chains of either backend: the iptables proxier's ClusterIPs.
pub fn iptables_service_addrs(nft: &RuleSet, legacy: &RuleSet) -> BTreeSet<IpAddr> {
    owned([nft, legacy])
        .filter(|t| t.name == "nat")
        .flat_map(|t| t.chains.iter().filter(|c| c.name == SERVICES_CHAIN))
        .flat_map(|c| c.rules.iter().flat_map(|r| r.exprs.iter()))
        .filter_map(|e| match e {
            Expr::Daddr(a) => Some(*a),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kernel::{Chain, NamedSet, Rule, Verdict};
    use crate::node::backends::tests::table;

    pub fn kube_proxy_nft(family: Family, addrs: &[IpAddr]) -> Table {
        let mut t = table(
            family,
            NFT_TABLE,
            &[("nat-prerouting", true, 1), ("services", false, 1)],
        );
        t.sets.push(NamedSet {
            name: SERVICE_IPS_MAP.into(),
            keys: addrs
                .iter()
                .map(|a| {
                    let mut k = match a {
                        IpAddr::V4(v) => v.octets().to_vec(),
                        IpAddr::V6(v) => v.octets().to_vec(),
                    };
                    k.extend_from_slice(&[6, 0, 0, 0, 1, 187, 0, 0]); // tcp . 443
                    k
                })
                .collect(),
            ..Default::default()
        });
        t
    }

    pub fn kube_services(addr: IpAddr) -> Table {
        Table {
            family: if addr.is_ipv4() {
                Family::Ip
            } else {
                Family::Ip6
            },
            name: "nat".into(),
            chains: vec![Chain {
                name: SERVICES_CHAIN.into(),
                builtin: false,
                rules: vec![Rule {
                    exprs: vec![
                        Expr::IpHeader,
                        Expr::Daddr(addr),
                        Expr::Match {
                            name: "tcp".into(),
                            comment: None,
                        },
                        Expr::Verdict(Verdict::Jump("KUBE-SVC-X".into())),
                    ],
                }],
            }],
            sets: Vec::new(),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn nftables_mode_from_a_native_table_with_chains_only() {
        let nft = RuleSet {
            tables: vec![kube_proxy_nft(Family::Ip, &[ip("10.96.0.1")])],
        };
        let e = RuleSet::default();
        assert_eq!(mode(&nft, &e), KubeProxyMode::Nftables);
        assert_eq!(nft_service_addrs(&nft), BTreeSet::from([ip("10.96.0.1")]));
        let empty = RuleSet {
            tables: vec![table(Family::Ip, NFT_TABLE, &[])],
        };
        assert_eq!(
            mode(&empty, &e),
            KubeProxyMode::None,
            "a table without chains"
        );
        let inet = RuleSet {
            tables: vec![table(Family::Inet, NFT_TABLE, &[("x", false, 1)])],
        };
        assert_eq!(
            mode(&inet, &e),
            KubeProxyMode::None,
            "only ip/ip6 are kube-proxy's"
        );
    }

    #[test]
    fn iptables_ipvs_and_mixed_modes() {
        let e = RuleSet::default();
        let ipt = RuleSet {
            tables: vec![kube_services(ip("10.96.0.1"))],
        };
        assert_eq!(mode(&e, &ipt), KubeProxyMode::Iptables, "legacy backend");
        assert_eq!(mode(&ipt, &e), KubeProxyMode::Iptables, "nft backend");
        assert_eq!(
            iptables_service_addrs(&e, &ipt),
            BTreeSet::from([ip("10.96.0.1")])
        );
        let canary = RuleSet {
            tables: vec![table(Family::Ip6, "mangle", &[(PROXY_CANARY, false, 0)])],
        };
        assert_eq!(mode(&canary, &e), KubeProxyMode::Iptables);
        // KUBE-SERVICES outside nat is not the dispatch chain.
        let filter = RuleSet {
            tables: vec![table(Family::Ip, "filter", &[(SERVICES_CHAIN, false, 1)])],
        };
        assert_eq!(mode(&filter, &e), KubeProxyMode::None);

        let mut ipvs = ipt.clone();
        ipvs.tables.push(table(
            Family::Ip,
            "filter",
            &[("KUBE-IPVS-FILTER", false, 0)],
        ));
        assert_eq!(mode(&ipvs, &e), KubeProxyMode::Ipvs);
        let mut by_set = kube_services(ip("10.96.0.1"));
        by_set.chains[0].rules[0].exprs = vec![
            Expr::Match {
                name: "set".into(),
                comment: None,
            },
            Expr::Verdict(Verdict::Accept),
        ];
        let by_set = RuleSet {
            tables: vec![by_set],
        };
        assert_eq!(
            mode(&e, &by_set),
            KubeProxyMode::Ipvs,
            "ipset match in KUBE-SERVICES"
        );

        let native = RuleSet {
            tables: vec![kube_proxy_nft(Family::Ip6, &[ip("fd00::1")])],
        };
        assert_eq!(mode(&native, &ipt), KubeProxyMode::Mixed);
        assert_eq!(mode(&native, &by_set), KubeProxyMode::Mixed);
        assert_eq!(nft_service_addrs(&native), BTreeSet::from([ip("fd00::1")]));
        assert_eq!(mode(&e, &e), KubeProxyMode::None);
    }
}
