//! The nf_tables tables iptables does not own ("native" tables: kube-proxy's
//! nftables mode, firewalld, a CNI's own), listed with their counts. Pure.

use crate::api::NativeTable;
use crate::kernel::{RuleSet, Table};

/// At most this many native tables are listed in a profile.
pub const MAX_LISTED: usize = 64;

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
