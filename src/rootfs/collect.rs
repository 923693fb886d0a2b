//! Run every probe over a root and merge the evidence into `IptablesFacts`
//! and `NftablesFacts`. Each package database is read once for both.
//!
//! iptables trust order. Version: the version literal of the binary the
//! `iptables` command runs (for iptables-wrapper: the bundled
//! `xtables-nft-multi`, else `xtables-legacy-multi`; with no command or a
//! broken chain: any xtables multi binary), then
//! the package databases (dpkg, apk, rpm), then the image label. Backend: the
//! command's link chain, then the label. A lower-ranked source that disagrees
//! is recorded in `conflicts`; the binary wins over package metadata, which
//! can be hand-written.
//!
//! nftables trust order (only libnftables decides what is written and read,
//! and a package version carries the distribution's patches, which the
//! upstream string does not): the `libnftables1` package (apk `libnftables`),
//! then the `nftables` package (dpkg, apk, rpm), then the literal in
//! `libnftables.so.1`, then the `nft` program's own literal (only where no
//! library is present: a static nft), then the `io.nfguard.nftables.version`
//! label. Disagreements go to `conflicts`; the higher-ranked source wins.
//! `io.nfguard.nftables.fixed: "true"` marks the build as carrying the fix.

mod nftables;

use super::fs::RootFs;
use super::probes::{PackageHit, PackageProbe};
use super::probes::{apk, binary, command, dpkg, label, nft, rpm};
use crate::facts::{Backend, Evidence, IptablesFacts, NftablesFacts, Version};
use std::collections::BTreeMap;

/// What the probes concluded, and whether layers not yet read could still change it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Collected {
    /// None: no iptables in this root.
    pub facts: Option<IptablesFacts>,
    /// None: no nftables userspace (library, program or package) in this root.
    pub nftables: Option<NftablesFacts>,
    /// True when no lower (unread) layer can change either answer: the
    /// iptables version and backend, the nftables version and whether an
    /// `nft` program exists. Always true for a complete root.
    pub settled: bool,
}

/// Probe `root`. `labels` are the image config labels (empty for a host);
/// `io.nfguard.iptables.version` / `.backend` and `io.nfguard.nftables.version`
/// are used when the filesystem says nothing.
///
/// # The settle rule
/// `settled` is true when both answers are settled.
///
/// iptables: no unread lower layer could change the reported version or backend:
/// - backend: the command search was determined, i.e. every look-up up to
///   the `iptables` that was found (or all of them, when none was) answered
///   from the read layers (Found or Absent, never Unknown), and so did every
///   hop of its link chain;
/// - version: walking the sources in trust order, the first one that has a
///   value was determined and every higher-ranked one was determined empty.
///   In practice: the command resolves within the read layers to a binary
///   whose version literal was read.
///
/// Package databases and their evidence are supplementary once a binary gave
/// the version: an unread lower layer holding `/var/lib/dpkg/status` does not
/// keep the answer open.
///
/// nftables:
/// - version: walking the sources in trust order (module docs), the first
///   one that has a value was determined and every higher-ranked one was
///   determined empty; or every source was determined empty (nothing will
///   turn up). A package hit is determined when no unread layer can put a
///   hit of the same rank ahead of it: a stanza of a `status` file read
///   from a layer is (the file is whole), one of a `status.d` whose listing
///   is still open is not. A library or program literal is determined when
///   every look-up before the file found answered from the read layers (and
///   the multiarch directories were listed in full). In practice: a layer
///   that installed nftables with dpkg holds the whole `status` file, and
///   the scan stops there;
/// - program: an `nft` was found, or every command directory answered Absent.
///
/// "No nftables" is settled when every probe is determined (in a layered
/// image: every layer read), or as soon as a whole package database (dpkg's
/// `status`, apk's `installed`, an rpmdb) was read that lists no nftables
/// package while no `nft` or libnftables file is in the read layers: a
/// package manager's nftables below would be listed in it. Only an nft
/// copied in without a package, below the layer that wrote the database, is
/// missed; the alternative reads every image without nftables to its last
/// layer. A complete root is always settled.
pub fn collect(root: &dyn RootFs, labels: &BTreeMap<String, String>) -> Collected {
    let cmd = command::probe(root);
    let bins = probe_binaries(root, &cmd);
    let [dpkg_ipt, dpkg_nft] = dpkg::probe(root, [dpkg::IPTABLES, dpkg::NFTABLES]);
    let [apk_ipt, apk_nft] = apk::probe(root, [apk::IPTABLES, apk::NFTABLES]);
    let [rpm_ipt, rpm_nft] = rpm::probe(root, [rpm::IPTABLES, rpm::NFTABLES]);
    let merged = merge(
        &cmd,
        &bins,
        &[dpkg_ipt, apk_ipt, rpm_ipt],
        &label::probe(labels),
    );
    let nft = nftables::merge(
        &[dpkg_nft, apk_nft, rpm_nft],
        &nft::probe(root),
        &label::probe_nftables(labels),
    );
    Collected {
        facts: merged.facts,
        nftables: nft.facts,
        settled: merged.settled && nft.settled,
    }
}

/// Which binaries' version literals speak for the command.
fn probe_binaries(root: &dyn RootFs, cmd: &command::CommandProbe) -> binary::BinaryProbe {
    let mut bins = binary::BinaryProbe::new();
    match &cmd.command {
        Some(c) if c.backend != Some(Backend::Wrapper) => {
            if let Some(path) = &c.binary {
                bins.scan_path(root, path);
            } else {
                // The chain is broken (a loop, a link out of the tracked
                // paths): the bundled multi binaries still tell the release.
                for name in binary::MULTI_BINARIES {
                    bins.find(root, &binary::BINARY_DIRS, name);
                }
            }
        }
        // The wrapper execs the multi binaries it finds next to itself or in
        // the usual directories; report the version they bundle.
        Some(c) => {
            let mut dirs: Vec<String> = Vec::new();
            if let Some(b) = &c.binary {
                dirs.push(super::paths::parent(b).to_string());
            }
            dirs.extend(binary::BINARY_DIRS.iter().map(|d| d.to_string()));
            dirs.dedup();
            let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
            // The nft binary speaks for the wrapper (its default); the legacy
            // one only adds evidence and must not keep the answer open.
            let [nft, legacy, _] = binary::MULTI_BINARIES;
            if bins.find(root, &dirs, nft) {
                let determined = bins.determined;
                bins.find(root, &dirs, legacy);
                bins.determined = determined;
            } else {
                bins.find(root, &dirs, legacy);
            }
        }
        None => {
            for name in binary::MULTI_BINARIES {
                bins.find(root, &binary::BINARY_DIRS, name);
            }
        }
    }
    if !cmd.determined {
        bins.determined = false;
    }
    bins
}

struct Merged {
    facts: Option<IptablesFacts>,
    settled: bool,
}

fn merge(
    cmd: &command::CommandProbe,
    bins: &binary::BinaryProbe,
    packages: &[PackageProbe],
    label: &label::LabelProbe,
) -> Merged {
    let mut evidence: Vec<Evidence> = Vec::new();
    let mut conflicts: Vec<String> = Vec::new();
    evidence.extend(cmd.evidence.iter().cloned());
    evidence.extend(bins.evidence.iter().cloned());
    let hits: Vec<&PackageHit> = packages.iter().flat_map(|p| p.hits.iter()).collect();
    for p in packages {
        evidence.extend(p.notes.iter().cloned());
    }
    for h in &hits {
        evidence.push(Evidence {
            source: h.source,
            path: h.path.clone(),
            detail: format!("package {} {}", h.name, h.version),
        });
    }

    // Version from binaries, first scanned first (the command's own binary,
    // or the nft multi binary for the wrapper).
    let bin_versions: Vec<(&str, Version)> = bins
        .hits
        .iter()
        .filter_map(|h| h.version.as_ref().map(|v| (h.path.as_str(), v.version)))
        .collect();
    let mut version = bin_versions.first().map(|(_, v)| *v);
    for (path, v) in bin_versions.iter().skip(1) {
        if Some(*v) != version {
            conflicts.push(format!(
                "{path} says {v}, {} says {}",
                bin_versions[0].0, bin_versions[0].1
            ));
        }
    }
    let version_from_binary = version.is_some();
    let mut version_settled = bins.determined && version_from_binary;
    if !bins.determined {
        version_settled = false;
    }

    // Package version: dpkg, then apk, then rpm; the `iptables` package first.
    let pkg = hits
        .iter()
        .find(|h| h.name == "iptables")
        .or_else(|| hits.first())
        .copied();
    let package_version = pkg.map(|h| h.version.clone());
    for h in &hits {
        let upstream = h.version.parse::<Version>().ok();
        match (version, upstream) {
            (Some(v), Some(u)) if v != u => conflicts.push(format!(
                "{} package {} {} ({}) disagrees with the {} binary: the binary wins",
                source_name(h),
                h.name,
                h.version,
                h.path,
                v
            )),
            (None, Some(u)) if !version_from_binary => {
                version = Some(u);
            }
            (Some(v), Some(u)) if v == u => {}
            (_, None) => conflicts.push(format!(
                "{} package {} has an unparsable version {:?}",
                source_name(h),
                h.name,
                h.version
            )),
            _ => {}
        }
    }
    if !version_from_binary && bins.determined {
        // Settled when the package answer cannot change: every database
        // probe determined (a lower layer could hold another database).
        version_settled = packages.iter().all(|p| p.determined);
    }

    let mut backend = cmd.command.as_ref().and_then(|c| c.backend);
    let backend_settled = cmd.determined;

    // Labels: only for what the filesystem does not say.
    conflicts.extend(label.problems.iter().cloned());
    if !label.evidence.is_empty() {
        evidence.extend(label.evidence.iter().cloned());
    }
    match (version, label.version) {
        (None, Some(l)) => version = Some(l),
        (Some(v), Some(l)) if v != l => conflicts.push(format!(
            "label {} says {l}, the filesystem says {v}: the filesystem wins",
            label::VERSION_LABEL
        )),
        _ => {}
    }
    match (backend, label.backend) {
        (None, Some(l)) => backend = Some(l),
        (Some(b), Some(l)) if b != l => conflicts.push(format!(
            "label {} says {l}, the filesystem says {b}: the filesystem wins",
            label::BACKEND_LABEL
        )),
        _ => {}
    }

    let anything = cmd.command.is_some()
        || !bins.hits.is_empty()
        || !hits.is_empty()
        || version.is_some()
        || backend.is_some();
    let facts = anything.then_some(IptablesFacts {
        version,
        backend,
        package_version,
        evidence,
        conflicts,
    });
    Merged {
        facts,
        settled: backend_settled && version_settled_or_empty(version_settled, bins, packages),
    }
}

/// With no binary and no package anywhere, the version is settled when every
/// probe was determined (nothing will turn up).
fn version_settled_or_empty(
    version_settled: bool,
    bins: &binary::BinaryProbe,
    packages: &[PackageProbe],
) -> bool {
    version_settled || (bins.determined && packages.iter().all(|p| p.determined))
}

fn source_name(h: &PackageHit) -> String {
    serde_json::to_value(h.source)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{:?}", h.source))
}

// What `merge` and `nftables::merge` can produce fits the profile CRD's
// bounds (`crate::api::bounds`): the command paths' and the multi binaries'
// evidence (iptables) or the unlisted multiarch parents, the library, the
// program and the program standing in for the library (nftables); the
// package databases' hits and notes; the labels.
mod fits_the_crd {
    use crate::api::bounds::{CONFLICTS, EVIDENCE};
    use crate::rootfs::paths::MULTIARCH_PARENTS;
    use crate::rootfs::probes::{MAX_HITS, MAX_NOTES, binary, command};
    const PACKAGE_DATABASES: usize = 3; // dpkg, apk, rpm
    const LABELS: usize = 2; // an image's version and backend (or fixed) labels
    const DATABASES: usize = PACKAGE_DATABASES * (MAX_HITS + MAX_NOTES);
    const _: () = assert!(
        command::COMMAND_PATHS.len() + binary::MULTI_BINARIES.len() + DATABASES + LABELS
            <= EVIDENCE
    );
    const _: () = assert!(MULTIARCH_PARENTS.len() + 3 + DATABASES + LABELS <= EVIDENCE);
    // One per package hit, two binaries or files, labels' problems and theirs.
    const _: () = assert!(PACKAGE_DATABASES * MAX_HITS + 2 + 2 * LABELS <= CONFLICTS);
}
