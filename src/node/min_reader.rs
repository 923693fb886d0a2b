//! The minimum safe reader: which native nf_tables encodings the live
//! iptables rules use, and the oldest iptables-nft that decodes each without
//! loss. Pure: a function of the rule set only.
//!
//! Every mapping is proved by a test that writes with one real release and
//! reads back with another (tests/it/node_min_reader.rs):
//! - `meta mark` load (native `-m mark`, 1.8.8+)       -> 1.8.8
//! - `payload` in the transport header (native `--sport/--dport`, `--tcp-flags`, 1.8.8+) -> 1.8.8
//! - `range` (native port ranges, 1.8.8+)                -> 1.8.8
//! - `log` (native NFLOG, 1.8.8+)                        -> 1.8.8
//! - `payload` network header +9 len 1 (IPv4 `-p` since 1.8.10): recorded,
//!   but measured readable by 1.8.7 (it prints `-p tcp` back), so no minimum.
//!
//! Writers measured: 1.8.7, 1.8.9, 1.8.11 and 1.8.13 (Debian forky). 1.8.13
//! writes the same expressions as 1.8.11 and no rule userdata: the opt-in
//! "compat extensions in rule userdata" (`--compat` / `XTABLES_COMPAT`) that
//! would let a reader fall back to the xt extension was reverted upstream
//! before 1.8.12 was tagged, so no release writes it and no minimum changes
//! (tests/it/node_min_reader.rs, `no_release_writes_compat_userdata`).
//!
//! What iptables-nft has always written natively (`meta iifname/oifname/l4proto`,
//! network-header addresses, `cmp`, `bitwise`, `counter`, verdicts) needs no minimum.

use crate::api::NativeFeature;
use crate::facts::Version;
use crate::kernel::{
    Expr, NFT_META_IIFNAME, NFT_META_L4PROTO, NFT_META_MARK, NFT_META_OIFNAME, NFT_PAYLOAD_NETWORK,
    NFT_PAYLOAD_TRANSPORT, Rule, RuleSet,
};
use std::collections::BTreeMap;

pub const V1_8_8: Version = Version::new(1, 8, 8);

/// The native features one rule uses: (feature name, minimum reader).
pub fn rule_features(rule: &Rule, ipv6: bool) -> Vec<(&'static str, Option<Version>)> {
    let mut out = Vec::new();
    for e in &rule.exprs {
        let f = match e {
            Expr::Meta { key, set: false } if *key == NFT_META_MARK => ("meta-mark", Some(V1_8_8)),
            Expr::Meta { key, set: false }
                if [NFT_META_IIFNAME, NFT_META_OIFNAME, NFT_META_L4PROTO].contains(key) =>
            {
                continue;
            }
            Expr::Meta { key: 1, set: false } => continue, // meta protocol (ebtables/arptables)
            Expr::Meta { .. } => ("meta-other", None),
            Expr::Payload { base, offset, len } if *base == NFT_PAYLOAD_TRANSPORT => {
                match (offset, len) {
                    (13, 1) => ("tcp-flags", Some(V1_8_8)),
                    _ => ("transport-ports", Some(V1_8_8)),
                }
            }
            Expr::Payload {
                base,
                offset: 9,
                len: 1,
            } if *base == NFT_PAYLOAD_NETWORK && !ipv6 => ("payload-protocol", None),
            Expr::Range => ("port-range", Some(V1_8_8)),
            Expr::Log => ("log", Some(V1_8_8)),
            _ => continue,
        };
        if !out.contains(&f) {
            out.push(f);
        }
    }
    out
}

/// Inventory of native features in the iptables-owned tables of an nf_tables rule set.
pub fn native_features(nft: &RuleSet) -> Vec<NativeFeature> {
    let mut found: BTreeMap<&'static str, NativeFeature> = BTreeMap::new();
    for table in nft.tables.iter().filter(|t| t.iptables_owned()) {
        let ipv6 = table.family == crate::kernel::Family::Ip6;
        for chain in &table.chains {
            for rule in &chain.rules {
                for (name, min) in rule_features(rule, ipv6) {
                    let entry = found.entry(name).or_insert_with(|| NativeFeature {
                        feature: name.to_string(),
                        min_reader: min,
                        rules: 0,
                        example: format!("{}/{}/{}", table.family, table.name, chain.name),
                    });
                    entry.rules += 1;
                }
            }
        }
    }
    found.into_values().collect()
}

/// The oldest iptables-nft that reads every feature; None when nothing needs one.
pub fn min_reader(features: &[NativeFeature]) -> Option<Version> {
    features.iter().filter_map(|f| f.min_reader).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xt_compat_only_needs_no_minimum() {
        let rule = Rule {
            exprs: vec![
                Expr::Meta {
                    key: NFT_META_L4PROTO,
                    set: false,
                },
                Expr::Cmp,
                Expr::Match {
                    name: "tcp".into(),
                    comment: None,
                },
                Expr::Counter,
            ],
        };
        assert!(rule_features(&rule, false).is_empty());
    }

    #[test]
    fn native_mark_and_ports_need_1_8_8() {
        let rule = Rule {
            exprs: vec![
                Expr::Meta {
                    key: NFT_META_MARK,
                    set: false,
                },
                Expr::Bitwise,
                Expr::Cmp,
                Expr::Payload {
                    base: 2,
                    offset: 2,
                    len: 2,
                },
                Expr::Range,
            ],
        };
        let f = rule_features(&rule, false);
        assert_eq!(f.len(), 3);
        assert!(f.iter().all(|(_, v)| *v == Some(V1_8_8)));
    }

    #[test]
    fn payload_protocol_is_recorded_without_minimum() {
        let rule = Rule {
            exprs: vec![
                Expr::Payload {
                    base: 1,
                    offset: 9,
                    len: 1,
                },
                Expr::Cmp,
            ],
        };
        assert_eq!(
            rule_features(&rule, false),
            vec![("payload-protocol", None)]
        );
        // In IPv6, network header +9 is not the protocol: not that feature.
        assert!(rule_features(&rule, true).is_empty());
    }
}
