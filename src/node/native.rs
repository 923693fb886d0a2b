//! The nf_tables tables iptables does not own ("native" tables: kube-proxy's
//! nftables mode, firewalld, a CNI's own), listed with their counts. Pure.

use crate::api::NativeTable;
use crate::kernel::{RuleSet, Table};

/// At most this many native tables are listed in a profile.
pub const MAX_LISTED: usize = 64;
const _: () = assert!(
    MAX_LISTED <= crate::api::bounds::NATIVE_TABLES,
    "the profile CRD's bound"
);

/// Tables of an nf_tables rule set that iptables does not own.
pub fn native(set: &RuleSet) -> impl Iterator<Item = &Table> {
    set.tables.iter().filter(|t| !t.iptables_owned())
}

/// "Holds" = has any chain (a native table is created for its chains).
pub fn holds_rules(set: &RuleSet) -> bool {
    native(set).any(|t| !t.chains.is_empty())
}

/// The native tables, sorted by family then name, at most `MAX_LISTED`,
/// and how many more there are.
pub fn native_tables(set: &RuleSet) -> (Vec<NativeTable>, u32) {
    let mut all: Vec<NativeTable> = native(set)
        .map(|t| NativeTable {
            family: t.family.to_string(),
            name: t.name.clone(),
            chains: t.chains.len() as u32,
            rules: t.rule_count() as u32,
            sets: t.sets.len() as u32,
        })
        .collect();
    all.sort_by(|a, b| (&a.family, &a.name).cmp(&(&b.family, &b.name)));
    let more = all.len().saturating_sub(MAX_LISTED) as u32;
    all.truncate(MAX_LISTED);
    (all, more)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::Family;
    use crate::node::backends::tests::table;

    #[test]
    fn sorted_by_family_then_name_bounded_and_without_iptables_tables() {
        let mut tables = vec![
            table(Family::Ip6, "kube-proxy", &[("services", false, 2)]),
            table(Family::Ip, "nat", &[("KUBE-SERVICES", false, 1)]),
            table(Family::Inet, "firewalld", &[("filter_INPUT", true, 3)]),
            table(
                Family::Ip,
                "kube-proxy",
                &[("services", false, 1), ("x", false, 0)],
            ),
        ];
        tables[3].sets.push(crate::kernel::NamedSet::default());
        let set = RuleSet { tables };
        let (listed, more) = native_tables(&set);
        let names: Vec<String> = listed
            .iter()
            .map(|t| format!("{}/{}", t.family, t.name))
            .collect();
        assert_eq!(names, ["inet/firewalld", "ip/kube-proxy", "ip6/kube-proxy"]);
        assert_eq!(
            (listed[1].chains, listed[1].rules, listed[1].sets),
            (2, 1, 1)
        );
        assert_eq!(more, 0);
        assert!(holds_rules(&set));

        let many = RuleSet {
            tables: (0..MAX_LISTED + 5)
                .map(|i| table(Family::Inet, &format!("t{i:03}"), &[]))
                .collect(),
        };
        let (listed, more) = native_tables(&many);
        assert_eq!((listed.len(), more), (MAX_LISTED, 5));
        assert_eq!(listed[0].name, "t000");
        assert!(!holds_rules(&many), "tables without chains hold nothing");
    }
}
