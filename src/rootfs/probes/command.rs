//! The default `iptables` command: `/usr/sbin/iptables`, else `/sbin/iptables`
//! (then `/usr/bin`, `/bin`), followed link by link through usrmerge links and
//! `/etc/alternatives` to the binary that runs. The names on the way decide
//! the backend: `xtables-nft-multi`/`iptables-nft` -> nft,
//! `xtables-legacy-multi`/`iptables-legacy`/`xtables-multi` -> legacy,
//! `iptables-wrapper*` -> wrapper.

use super::MAX_BINARY_BYTES;
use crate::facts::{Backend, Evidence, EvidenceSource};
use crate::rootfs::fs::{Hop, Lookup, NodeKind, RootFs, follow_chain};
use crate::rootfs::paths;

/// Where the command is looked for, in this order. /usr/sbin precedes /sbin
/// as in Debian's PATH; with usrmerge both are the same file.
pub const COMMAND_PATHS: [&str; 4] = [
    "/usr/sbin/iptables",
    "/sbin/iptables",
    "/usr/bin/iptables",
    "/bin/iptables",
];

/// The command that was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Where it was found (`/usr/sbin/iptables`).
    pub path: String,
    pub hops: Vec<Hop>,
    /// Canonical path of the file that runs, when the chain ends at a file.
    pub binary: Option<String>,
    pub backend: Option<Backend>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandProbe {
    pub command: Option<Command>,
    pub evidence: Vec<Evidence>,
    /// False when an unread lower layer could still supply or change the command.
    pub determined: bool,
}

/// Backend implied by a file name on the chain.
pub fn classify_name(name: &str) -> Option<Backend> {
    match name {
        "xtables-nft-multi" | "iptables-nft" => Some(Backend::Nft),
        "xtables-legacy-multi" | "iptables-legacy" | "xtables-multi" => Some(Backend::Legacy),
        n if n.starts_with("iptables-wrapper") => Some(Backend::Wrapper),
        _ => None,
    }
}

/// Backend of a file whose name says nothing (e.g. a real `iptables` file).
fn sniff(data: &[u8]) -> Option<Backend> {
    let has = |needle: &[u8]| data.windows(needle.len()).any(|w| w == needle);
    if data.starts_with(b"#!") && has(b"xtables-nft-multi") && has(b"xtables-legacy-multi") {
        return Some(Backend::Wrapper);
    }
    match (has(b"(nf_tables)"), has(b"(legacy)")) {
        (true, false) => Some(Backend::Nft),
        (false, true) => Some(Backend::Legacy),
        _ => None,
    }
}

pub fn probe(root: &dyn RootFs) -> CommandProbe {
    let mut p = CommandProbe {
        determined: true,
        ..CommandProbe::default()
    };
    for path in COMMAND_PATHS {
        match follow(root, path, &mut p) {
            Lookup::Found(cmd) => {
                p.command = Some(cmd);
                return p;
            }
            Lookup::Absent => {}
            // A lower layer could put the command here, ahead of later paths.
            Lookup::Unknown => {
                p.determined = false;
            }
        }
    }
    p
}

fn chain_text(start: &str, hops: &[Hop]) -> String {
    let mut s = start.to_string();
    for h in hops {
        s.push_str(" -> ");
        s.push_str(&h.target);
    }
    s
}

fn follow(root: &dyn RootFs, path: &str, p: &mut CommandProbe) -> Lookup<Command> {
    let chain = follow_chain(root, path);
    let text = chain_text(path, &chain.hops);
    let binary = match &chain.end {
        Lookup::Unknown => return Lookup::Unknown,
        Lookup::Found(r) if matches!(r.kind, NodeKind::File { .. }) => Some(r.path.clone()),
        // Nothing, or a directory, at the path itself.
        _ if chain.hops.is_empty() && chain.broken.is_none() => return Lookup::Absent,
        _ => None,
    };
    if binary.is_none() && chain.broken.is_none() {
        p.evidence.push(Evidence {
            source: EvidenceSource::Alternatives,
            path: path.to_string(),
            detail: format!("{text}: dangling link, the command cannot run"),
        });
        return Lookup::Absent;
    }
    // The final file's name decides; else the names on the way
    // (`iptables -> /etc/alternatives/iptables -> iptables-nft` as a real file);
    // else what the file itself prints.
    let mut backend = binary
        .as_deref()
        .and_then(|b| classify_name(paths::file_name(b)));
    if backend.is_none() {
        backend = chain
            .hops
            .iter()
            .rev()
            .find_map(|h| classify_name(paths::file_name(&paths::normalize(&h.target))));
    }
    if backend.is_none()
        && let Some(bin) = &binary
        && let Ok(Lookup::Found(data)) = root.read(bin, MAX_BINARY_BYTES)
    {
        backend = sniff(&data);
    }
    let mut detail = match backend {
        Some(b) => format!("{text}: {b}"),
        None => format!("{text}: backend not recognized"),
    };
    if let Some(why) = &chain.broken {
        detail.push_str(&format!(" (cannot follow further: {why})"));
    }
    p.evidence.push(Evidence {
        source: EvidenceSource::Alternatives,
        path: path.to_string(),
        detail,
    });
    Lookup::Found(Command {
        path: path.to_string(),
        hops: chain.hops,
        binary,
        backend,
    })
}
