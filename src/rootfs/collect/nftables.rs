//! Merge what the nftables probes found into `NftablesFacts`: the trust
//! order and the settle rule are documented on [`super::collect`].

use super::source_name;
use crate::facts::{Evidence, EvidenceSource, NftVersion, NftablesFacts};
use crate::rootfs::probes::label::{NFT_VERSION_LABEL, NftLabelProbe};
use crate::rootfs::probes::nft::{NftFile, NftFilesProbe};
use crate::rootfs::probes::{PackageHit, PackageProbe};

/// The library's own package decides (dpkg `libnftables1`, apk `libnftables`).
const LIBRARY_PACKAGES: [&str; 2] = ["libnftables1", "libnftables"];
/// The program's package (the library's too on rpm and unsplit apk).
const PROGRAM_PACKAGES: [&str; 1] = ["nftables"];

pub(super) struct Merged {
    pub facts: Option<NftablesFacts>,
    pub settled: bool,
}

/// Who gave the version, for evidence and conflicts.
#[derive(Clone, Copy)]
enum Said<'a> {
    Package(&'a PackageHit),
    Library(&'a NftFile),
    Program(&'a NftFile),
}

impl Said<'_> {
    fn who(&self) -> String {
        match self {
            Said::Package(h) => format!(
                "{} package {} {} ({})",
                source_name(h),
                h.name,
                h.version,
                h.path
            ),
            Said::Library(f) => format!("libnftables {}", f.path),
            Said::Program(f) => format!("the nft program {}", f.path),
        }
    }

    /// Why the winner wins, said after a disagreement.
    fn wins_because(&self) -> &'static str {
        match self {
            Said::Package(_) => "the package wins (it carries distribution patches)",
            Said::Library(_) => "the library decides",
            Said::Program(_) => "the program's literal stands in for a library nowhere found",
        }
    }
}

/// One source of the version, in trust order.
struct Source<'a> {
    value: Option<(NftVersion, Said<'a>)>,
    /// No unread lower layer can change `value` (or give one, when None).
    determined: bool,
}

/// `packages`: the nftables probes of dpkg, apk and rpm, in that order.
pub(super) fn merge(
    packages: &[PackageProbe],
    files: &NftFilesProbe,
    label: &NftLabelProbe,
) -> Merged {
    let library = files.library.found.as_ref();
    let program = files.program.found.as_ref();
    let literal = |f: &NftFile| f.literal.as_ref().ok().map(|l| l.version);
    let sources = [
        package_source(packages, &LIBRARY_PACKAGES),
        package_source(packages, &PROGRAM_PACKAGES),
        Source {
            value: library.and_then(|f| Some((literal(f)?, Said::Library(f)))),
            determined: files.library.determined,
        },
        // A present library decides alone, even when it says nothing: the
        // program's literal only speaks for a static `nft`.
        Source {
            value: program
                .filter(|_| library.is_none())
                .and_then(|f| Some((literal(f)?, Said::Program(f)))),
            determined: library.is_some() || files.program.determined,
        },
    ];
    let mut version_settled = true;
    for s in &sources {
        if !s.determined {
            version_settled = false;
            break;
        }
        if s.value.is_some() {
            break;
        }
    }
    let program_settled = program.is_some() || files.program.determined;
    let chosen = sources.iter().find_map(|s| s.value);

    let mut evidence: Vec<Evidence> = Vec::new();
    let mut conflicts: Vec<String> = Vec::new();
    let hits: Vec<&PackageHit> = packages.iter().flat_map(|p| &p.hits).collect();
    for h in &hits {
        evidence.push(Evidence {
            source: h.source,
            path: h.path.clone(),
            detail: format!("package {} {}", h.name, h.version),
        });
    }
    evidence.extend(files.evidence.iter().cloned());
    for p in packages {
        evidence.extend(p.notes.iter().cloned());
    }
    if let Some((_, Said::Program(f))) = chosen {
        evidence.push(Evidence {
            source: EvidenceSource::Binary,
            path: f.path.clone(),
            detail: if f.links_library {
                "no libnftables.so.1 in the library directories although this nft links it: \
                 its own literal stands in for the library's"
                    .into()
            } else {
                "no libnftables found: the version is this (static) nft's own literal".into()
            },
        });
    }

    let mut version = chosen.map(|(v, _)| v);
    if let Some((v, winner)) = chosen {
        let mut disagree = |other: &str, u: NftVersion, why: &str| {
            if u != v {
                conflicts.push(format!(
                    "{other} says {u}, {} says {v}: {why}",
                    winner.who()
                ));
            }
        };
        for h in &hits {
            let same = matches!(winner, Said::Package(w) if std::ptr::eq(w, *h));
            if let Ok(u) = h.version.parse::<NftVersion>()
                && !same
            {
                disagree(&Said::Package(h).who(), u, winner.wins_because());
            }
        }
        if let Some(f) = library
            && let Some(u) = literal(f)
        {
            disagree(&Said::Library(f).who(), u, winner.wins_because());
        }
        if let Some(f) = program
            && let Some(u) = literal(f)
            && !matches!(winner, Said::Program(_))
        {
            disagree(
                &Said::Program(f).who(),
                u,
                "only libnftables decides (an nft program runs whichever library it loads)",
            );
        }
    }
    for h in &hits {
        if h.version.parse::<NftVersion>().is_err() {
            conflicts.push(format!(
                "{} package {} has an unparsable version {:?}",
                source_name(h),
                h.name,
                h.version
            ));
        }
    }

    // Labels: the version only where the filesystem is silent.
    conflicts.extend(label.problems.iter().cloned());
    evidence.extend(label.evidence.iter().cloned());
    match (version, label.version) {
        (None, Some(l)) => version = Some(l),
        (Some(v), Some(l)) if v != l => conflicts.push(format!(
            "label {NFT_VERSION_LABEL} says {l}, the filesystem says {v}: the filesystem wins"
        )),
        _ => {}
    }

    let anything = !hits.is_empty() || library.is_some() || program.is_some() || version.is_some();
    let facts = anything.then(|| {
        NftablesFacts {
            version,
            package_version: match chosen {
                Some((_, Said::Package(h))) => Some(h.version.clone()),
                _ => None,
            },
            program: program.is_some(),
            evidence,
            conflicts,
            ..NftablesFacts::default()
        }
        .classified(label.fixed)
    });
    // No nftables: settled once every probe is determined, or when a whole
    // package database was read that lists none and no nft file is in the
    // read layers. A package manager's nftables in a lower layer would be in
    // that database (the topmost copy of it wins), so only an nft copied in
    // without a package below the layer that wrote the database is missed;
    // without this, every image with iptables and no nft would be read to
    // its last layer.
    let absent_by_database = facts.is_none()
        && files.library.found.is_none()
        && files.program.found.is_none()
        && packages.iter().any(|p| p.whole_database);
    Merged {
        facts,
        settled: (version_settled && program_settled) || absent_by_database,
    }
}

/// The first hit of `names` with a version, in database order (dpkg, apk,
/// rpm). Determined when no unread lower layer can add one ahead of it: it
/// was found while its probe was determined, and every earlier database was.
fn package_source<'a>(probes: &'a [PackageProbe], names: &[&str]) -> Source<'a> {
    let mut earlier_determined = true;
    for p in probes {
        let first = p.hits.iter().enumerate().find_map(|(i, h)| {
            let v = h.version.parse::<NftVersion>().ok()?;
            names.contains(&h.name.as_str()).then_some((i, v, h))
        });
        if let Some((i, v, h)) = first {
            return Source {
                value: Some((v, Said::Package(h))),
                determined: earlier_determined && i < p.settled_hits,
            };
        }
        earlier_determined &= p.determined;
    }
    Source {
        value: None,
        determined: earlier_determined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::UserdataReader;
    use crate::rootfs::probes::nft::Search;
    use crate::rootfs::probes::nft_literal::NftLiteral;

    fn hit(name: &str, version: &str) -> PackageHit {
        PackageHit {
            source: EvidenceSource::Dpkg,
            path: "/var/lib/dpkg/status".into(),
            name: name.into(),
            version: version.into(),
        }
    }

    /// A dpkg probe with `hits`, the first `settled` of them final.
    fn dpkg(hits: &[(&str, &str)], settled: usize, determined: bool) -> PackageProbe {
        let mut p = PackageProbe::new();
        p.hits = hits.iter().map(|(n, v)| hit(n, v)).collect();
        p.settled_hits = settled;
        p.determined = determined;
        p
    }

    fn determined_empty() -> PackageProbe {
        PackageProbe::new()
    }

    fn file(path: &str, version: &str) -> NftFile {
        NftFile {
            path: path.into(),
            literal: Ok(NftLiteral {
                version: version.parse().unwrap(),
                text: version.into(),
                release_name: None,
            }),
            links_library: true,
        }
    }

    fn files(library: Option<(&str, bool)>, program: Option<(&str, bool)>) -> NftFilesProbe {
        let search = |f: Option<(&str, bool)>, path: &str| match f {
            Some((v, determined)) if !v.is_empty() => Search {
                found: Some(file(path, v)),
                determined,
            },
            Some((_, determined)) => Search {
                found: None,
                determined,
            },
            None => Search {
                found: None,
                determined: true,
            },
        };
        NftFilesProbe {
            library: search(library, "/usr/lib/libnftables.so.1"),
            program: search(program, "/usr/sbin/nft"),
            evidence: vec![],
        }
    }

    fn run(packages: [PackageProbe; 3], f: NftFilesProbe) -> Merged {
        merge(&packages, &f, &NftLabelProbe::default())
    }

    #[test]
    fn first_determined_source_in_trust_order_settles() {
        // A final libnftables1 hit settles, whatever lies below it.
        let m = run(
            [
                dpkg(&[("libnftables1", "1.1.3-1")], 1, false),
                determined_empty(),
                determined_empty(),
            ],
            files(Some(("", false)), Some(("1.1.3", false))),
        );
        assert!(m.settled);
        let f = m.facts.unwrap();
        assert_eq!(f.package_version.as_deref(), Some("1.1.3-1"));
        assert_eq!(f.userdata_reader, Some(UserdataReader::Current));

        // The same hit from a status.d still open is not final.
        let m = run(
            [
                dpkg(&[("libnftables1", "1.1.3-1")], 0, false),
                determined_empty(),
                determined_empty(),
            ],
            files(None, Some(("1.1.3", true))),
        );
        assert!(!m.settled);

        // An apk hit is final only once dpkg can add none ahead of it.
        let mut apk = dpkg(&[("libnftables", "1.1.1-r0")], 1, true);
        apk.hits[0].source = EvidenceSource::Apk;
        let m = run(
            [dpkg(&[], 0, false), apk.clone(), determined_empty()],
            files(None, Some(("1.1.1", true))),
        );
        assert!(!m.settled);
        let m = run(
            [determined_empty(), apk, determined_empty()],
            files(None, Some(("1.1.1", true))),
        );
        assert!(m.settled);
    }

    #[test]
    fn literals_settle_only_below_determined_empty_packages() {
        let lib = || files(Some(("1.0.6", true)), Some(("1.0.6", true)));
        let m = run(
            [dpkg(&[], 0, false), determined_empty(), determined_empty()],
            lib(),
        );
        assert!(!m.settled, "a lower layer could still hold a dpkg status");
        let m = run(
            [determined_empty(), determined_empty(), determined_empty()],
            lib(),
        );
        assert!(m.settled);
        assert_eq!(
            m.facts.unwrap().userdata_reader,
            Some(UserdataReader::Crashes)
        );

        // The library search itself still open.
        let m = run(
            [determined_empty(), determined_empty(), determined_empty()],
            files(Some(("1.0.6", false)), Some(("1.0.6", true))),
        );
        assert!(!m.settled);
    }

    #[test]
    fn nothing_settles_only_when_every_probe_is_determined() {
        let empty = || [determined_empty(), determined_empty(), determined_empty()];
        let m = run(empty(), files(None, None));
        assert!(m.settled);
        assert_eq!(m.facts, None);
        let m = run(empty(), files(None, Some(("", false))));
        assert!(!m.settled, "an nft could still turn up below");
        let m = run(empty(), files(Some(("", false)), None));
        assert!(!m.settled, "a library could still turn up below");
    }

    #[test]
    fn a_settled_version_still_waits_for_the_program() {
        let m = run(
            [
                dpkg(&[("libnftables1", "1.1.3-1")], 1, true),
                determined_empty(),
                determined_empty(),
            ],
            files(None, Some(("", false))),
        );
        assert!(!m.settled);
        assert!(!m.facts.unwrap().program);
    }

    #[test]
    fn conflicts_name_both_sides_and_the_rule() {
        let m = run(
            [
                dpkg(
                    &[
                        ("libnftables1", "1.0.6-2.1+k8s1"),
                        ("nftables", "1.1.3-1"),
                        ("libnftables1", "junk"),
                    ],
                    3,
                    true,
                ),
                determined_empty(),
                determined_empty(),
            ],
            files(Some(("1.0.6", true)), Some(("1.1.3", true))),
        );
        let f = m.facts.unwrap();
        assert_eq!(f.version, Some("1.0.6".parse().unwrap()));
        assert_eq!(f.userdata_reader, Some(UserdataReader::Fixed));
        assert_eq!(
            f.conflicts,
            [
                "dpkg package nftables 1.1.3-1 (/var/lib/dpkg/status) says 1.1.3, dpkg package \
                 libnftables1 1.0.6-2.1+k8s1 (/var/lib/dpkg/status) says 1.0.6: the package wins \
                 (it carries distribution patches)",
                "the nft program /usr/sbin/nft says 1.1.3, dpkg package libnftables1 \
                 1.0.6-2.1+k8s1 (/var/lib/dpkg/status) says 1.0.6: only libnftables decides (an \
                 nft program runs whichever library it loads)",
                "dpkg package libnftables1 has an unparsable version \"junk\"",
            ]
        );
    }
}
