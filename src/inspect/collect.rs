//! TODO(inspect helper): run every probe over a root and merge the evidence.

use super::rootfs::RootFs;
use crate::compat::IptablesFacts;
use std::collections::BTreeMap;

/// What the probes concluded, and whether layers not yet read could still change it.
#[derive(Debug, Clone, PartialEq)]
pub struct Collected {
    /// None: no iptables in this root.
    pub facts: Option<IptablesFacts>,
    /// True when no lower (unread) layer can change `facts`'s version or backend.
    /// Always true for a complete root.
    pub settled: bool,
}

/// Probe `root`. `labels` are the image config labels (empty for a host);
/// `io.nfguard.iptables.version` / `.backend` are used when the filesystem says nothing.
pub fn collect(root: &dyn RootFs, labels: &BTreeMap<String, String>) -> Collected {
    let _ = (root, labels);
    todo!("inspect helper")
}
