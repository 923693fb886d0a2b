//! Which `nft` readers the live named sets crash (shared doc §8). Pure: a
//! function of the nf_tables rule set and the host's libnftables.
//!
//! A reader that builds its cache (`nft list ruleset`, kube-proxy's `-f`
//! batches) rebuilds every set's key and data from their "typeof" userdata
//! records. Before the fix (nftables be737a1986bf, 1.1.4 and 1.0.6.1) it
//! calls the named expression type's `parse_udata` without checking that
//! one exists, and jumps to address 0 when it does not. The cache spans
//! every table and family, so no table is out of reach: a set anywhere
//! crashes a reader that came for its own table (kube-proxy's did).

use crate::api::NodeNftables;
use crate::facts::nftables::{NftVersion, NftablesFacts, UserdataReader};
use crate::kernel::RuleSet;
use crate::kernel::set_userdata::SetUserdata;

/// At most this many crashing sets and tables are named in a profile.
pub const MAX_EXAMPLES: usize = 16;
pub const MAX_TABLES: usize = 64;
// The profile CRD's bounds.
const _: () = assert!(MAX_EXAMPLES <= crate::api::bounds::CRASHING_EXAMPLES);
const _: () = assert!(MAX_TABLES <= crate::api::bounds::CRASHING_TABLES);

/// nftables' `enum expr_types`, the numbers the typeof records carry (the
/// same up to 28 in every release: include/expression.h of 0.9.8 to 1.1.3).
pub mod expr_type {
    pub const VERDICT: u32 = 1;
    pub const VALUE: u32 = 4;
    pub const PAYLOAD: u32 = 7;
    pub const EXTHDR: u32 = 8;
    pub const META: u32 = 9;
    pub const SOCKET: u32 = 10;
    pub const OSF: u32 = 11;
    pub const CT: u32 = 12;
    pub const CONCAT: u32 = 13;
    pub const NUMGEN: u32 = 23;
    pub const HASH: u32 = 24;
    pub const RT: u32 = 25;
    pub const FIB: u32 = 26;
    pub const XFRM: u32 = 27;
}

use expr_type::*;

const fn bits(types: &[u32]) -> u64 {
    let mut m = 0u64;
    let mut i = 0;
    while i < types.len() {
        m |= 1 << types[i];
        i += 1;
    }
    m
}

/// What 0.9.8 rebuilds from a typeof record: the expression types whose ops
/// have `parse_udata` (`git grep '\.parse_udata\s*=' v0.9.8 -- src`).
const PARSED_BY_0_9_8: u64 = bits(&[
    PAYLOAD, EXTHDR, META, SOCKET, OSF, CT, CONCAT, NUMGEN, HASH, RT, FIB, XFRM,
]);

/// Oldest first: from `since` on, an unfixed release parses the types of
/// `parses`; any other type sends it to address 0. The first row is the
/// oldest reader nfguard models (bullseye's 0.9.8). Measured with Debian's
/// releases (tests/it/node_nft_skew.rs) and read in nftables' source.
const READERS: [(NftVersion, u64); 3] = [
    (NftVersion::new(0, 9, 8, 0), PARSED_BY_0_9_8),
    // 4ab1e5e6 "src: allow use of 'verdict' in typeof definitions".
    (
        NftVersion::new(0, 9, 9, 0),
        PARSED_BY_0_9_8 | bits(&[VERDICT]),
    ),
    // 058246016188 gave `value` a parser (and made every `type` set write it).
    (
        NftVersion::new(1, 1, 2, 0),
        PARSED_BY_0_9_8 | bits(&[VERDICT, VALUE]),
    ),
];

/// What one set asks of a reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Every modelled release reads it.
    Any,
    /// Unfixed releases from this one on read it.
    Since(NftVersion),
    /// No released parser knows a type it names: only fixed builds read it.
    Fixed,
}

fn survives(parses: u64, u: &SetUserdata) -> bool {
    [u.key_typeof, u.data_typeof]
        .into_iter()
        .flatten()
        .all(|t| t < 64 && parses & (1 << t) != 0)
}

/// The oldest unfixed release that rebuilds this set without crashing.
pub fn need(u: &SetUserdata) -> Need {
    // Malformed userdata is not what any released writer leaves: its
    // effect on a reader is unknown, and nfguard does not guess a crash.
    if u.malformed || (u.key_typeof.is_none() && u.data_typeof.is_none()) {
        return Need::Any;
    }
    match READERS.iter().position(|(_, parses)| survives(*parses, u)) {
        Some(0) => Need::Any,
        Some(i) => Need::Since(READERS[i].0),
        None => Need::Fixed,
    }
}

/// Whether a reader (a libnftables' facts) crashes on sets that need
/// `min_reader` (or a fixed build when `fixed_required`). None: its release
/// is unknown, so nothing is claimed.
pub fn crashes(
    reader: &NftablesFacts,
    min_reader: Option<NftVersion>,
    fixed_required: bool,
) -> Option<bool> {
    crashes_release(
        reader.userdata_reader?,
        reader.release(),
        min_reader,
        fixed_required,
    )
}

/// [`crashes`] for a reader known by its class and release (a writer pod's,
/// as the controller's inventory keeps it).
pub fn crashes_release(
    class: UserdataReader,
    release: Option<NftVersion>,
    min_reader: Option<NftVersion>,
    fixed_required: bool,
) -> Option<bool> {
    if class == UserdataReader::Fixed {
        return Some(false);
    }
    if fixed_required {
        return Some(true);
    }
    let Some(min) = min_reader else {
        return Some(false);
    };
    Some(release.is_none_or(|v| v < min))
}

/// The node's nftables facts: the host's libnftables and what the live sets
/// ask of readers. `nft`: None when nf_tables could not be read.
pub fn node_nftables(nft: Option<&RuleSet>, host: Option<&NftablesFacts>) -> NodeNftables {
    let mut out = NodeNftables {
        host: host.cloned(),
        ..Default::default()
    };
    let Some(nft) = nft else {
        return out;
    };
    let mut min: Option<NftVersion> = None;
    let mut count = 0u32;
    let mut examples = Vec::new();
    let mut tables = Vec::new();
    for t in &nft.tables {
        let mut in_table = false;
        for s in &t.sets {
            let n = need(&s.userdata);
            match n {
                Need::Any => continue,
                Need::Since(v) => min = min.max(Some(v)),
                Need::Fixed => out.fixed_reader_required = true,
            }
            count = count.saturating_add(1);
            in_table = true;
            examples.push(format!("{}/{}/{}", t.family, t.name, s.name));
        }
        if in_table {
            tables.push(format!("{}/{}", t.family, t.name));
        }
    }
    examples.sort();
    examples.truncate(MAX_EXAMPLES);
    tables.sort();
    tables.dedup();
    tables.truncate(MAX_TABLES);
    out.min_reader = min;
    out.crashing_sets = Some(count);
    out.crashing_examples = examples;
    out.crashing_tables = tables;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::nftables::NftablesFacts;
    use crate::kernel::{Family, NamedSet, Table};

    fn ud(key: Option<u32>, data: Option<u32>) -> SetUserdata {
        SetUserdata {
            key_typeof: key,
            data_typeof: data,
            ..Default::default()
        }
    }

    fn reader(pkg: &str) -> NftablesFacts {
        NftablesFacts {
            version: pkg.parse().ok(),
            package_version: Some(pkg.into()),
            ..Default::default()
        }
        .classified(false)
    }

    fn v(s: &str) -> NftVersion {
        s.parse().unwrap()
    }

    #[test]
    fn what_each_writer_leaves_needs() {
        // 1.0.6 and older on a `type` set: no typeof record.
        assert_eq!(need(&SetUserdata::default()), Need::Any);
        // 1.1.2+ on a `type` set: key typeof "value"; on a `type` map, data too.
        assert_eq!(need(&ud(Some(VALUE), None)), Need::Since(v("1.1.2")));
        assert_eq!(
            need(&ud(Some(CONCAT), Some(VALUE))),
            Need::Since(v("1.1.2"))
        );
        // `typeof ip daddr` and typeof concatenations by any writer.
        assert_eq!(need(&ud(Some(PAYLOAD), None)), Need::Any);
        assert_eq!(need(&ud(Some(CONCAT), None)), Need::Any);
        // `typeof ip daddr : verdict` (0.9.9+): 0.9.8 crashes on the verdict.
        assert_eq!(
            need(&ud(Some(PAYLOAD), Some(VERDICT))),
            Need::Since(v("0.9.9"))
        );
        // A type no released parser knows (symbol, prefix, 29, 30): fixed only.
        for t in [2, 5, 29, 30, 200] {
            assert_eq!(need(&ud(Some(t), None)), Need::Fixed, "{t}");
        }
        // Malformed userdata claims nothing.
        let mut m = ud(Some(VALUE), None);
        m.malformed = true;
        assert_eq!(need(&m), Need::Any);
    }

    #[test]
    fn readers_crash_only_below_the_minimum_and_without_the_fix() {
        let min = Some(v("1.1.2"));
        assert_eq!(crashes(&reader("1.0.6-2+deb12u2"), min, false), Some(true));
        assert_eq!(
            crashes(&reader("0.9.8-3.1+deb11u2"), min, false),
            Some(true)
        );
        assert_eq!(crashes(&reader("1.1.3-1"), min, false), Some(false));
        assert_eq!(crashes(&reader("1.0.6-2.1+k8s1"), min, false), Some(false));
        assert_eq!(crashes(&reader("1.0.6.1"), min, false), Some(false));
        // A `typeof ... : verdict` map by 0.9.9+ crashes only 0.9.8.
        let verdict = Some(v("0.9.9"));
        assert_eq!(
            crashes(&reader("0.9.8-3.1+deb11u2"), verdict, false),
            Some(true)
        );
        assert_eq!(
            crashes(&reader("1.0.6-2+deb12u2"), verdict, false),
            Some(false)
        );
        // No live set needs anything: no reader crashes.
        assert_eq!(
            crashes(&reader("0.9.8-3.1+deb11u2"), None, false),
            Some(false)
        );
        // Only fixed builds read an unknown expression type.
        assert_eq!(crashes(&reader("1.1.3-1"), None, true), Some(true));
        assert_eq!(crashes(&reader("1.1.7-1"), None, true), Some(false));
        // Unknown release: nothing claimed.
        assert_eq!(crashes(&NftablesFacts::default(), min, false), None);
    }

    #[test]
    fn node_facts_name_sets_and_tables_and_count_only_crashing_ones() {
        let table = |family, name: &str, sets: Vec<(&str, SetUserdata)>| Table {
            family,
            name: name.into(),
            chains: Vec::new(),
            sets: sets
                .into_iter()
                .map(|(n, u)| NamedSet {
                    name: n.into(),
                    userdata: u,
                    ..Default::default()
                })
                .collect(),
        };
        let set = RuleSet {
            tables: vec![
                table(
                    Family::Ip,
                    "kube-proxy",
                    vec![("cluster-ips", SetUserdata::default())],
                ),
                table(
                    Family::Ip,
                    "t",
                    vec![
                        ("s", ud(Some(VALUE), None)),
                        ("typeof-only", ud(Some(PAYLOAD), None)),
                    ],
                ),
                table(
                    Family::Inet,
                    "m",
                    vec![("map", ud(Some(CONCAT), Some(VALUE)))],
                ),
            ],
        };
        let host = reader("1.0.6-2+deb12u2");
        let n = node_nftables(Some(&set), Some(&host));
        assert_eq!(n.crashing_sets, Some(2));
        assert_eq!(n.crashing_examples, ["inet/m/map", "ip/t/s"]);
        assert_eq!(n.crashing_tables, ["inet/m", "ip/t"]);
        assert_eq!(n.min_reader, Some(v("1.1.2")));
        assert!(!n.fixed_reader_required);
        assert_eq!(n.host.as_ref(), Some(&host));
        // Unreadable nf_tables: nothing claimed.
        let n = node_nftables(None, None);
        assert_eq!((n.crashing_sets, n.min_reader), (None, None));
        // Old writers only: nothing crashes.
        let old = RuleSet {
            tables: vec![table(Family::Ip, "t", vec![("s", SetUserdata::default())])],
        };
        let n = node_nftables(Some(&old), Some(&host));
        assert_eq!((n.crashing_sets, n.min_reader), (Some(0), None));
    }
}
