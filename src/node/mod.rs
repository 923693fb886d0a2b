//! What this node really runs: the host's iptables, the live rule sets of
//! both backends, kubelet's marker chains, bridge netfilter, the minimum safe
//! reader of the live rules, and the hazards these facts add up to.
//!
//! `probe` = `gather` (all I/O, read-only) + `status_from_facts` (pure).
//!
//! OWNER: node helper.

pub mod backends;
pub mod cli;
pub mod hazards;
pub mod kmod;
pub mod kube_proxy;
pub mod min_reader;
mod module_lists;
pub mod native;
pub mod nft_skew;
pub mod system;
pub mod text;
pub mod xt_modules;

use crate::api::{
    BackendsFacts, BridgeFacts, KernelFacts, KernelModules, ModuleState, NodeNetfilterProfileStatus,
};
use crate::facts::{IptablesFacts, NftablesFacts};
use crate::kernel::{self, RuleSet};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the probe looks. The kernel rule sets and sysctls are always those
/// of the calling thread's network namespace.
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    /// The node's root filesystem (the host's iptables package lives there): "/" or "/host".
    pub host_root: PathBuf,
    /// procfs of the network namespace to describe (normally "/proc").
    pub proc_dir: PathBuf,
    /// sysfs (normally "/sys"), for /sys/module/br_netfilter.
    pub sys_dir: PathBuf,
    /// The operator's word that the host's libnftables carries the fix for
    /// unknown set userdata (a vendor backport nfguard does not know).
    pub host_nft_fixed: bool,
}

impl ProbeConfig {
    pub fn new(host_root: impl Into<PathBuf>) -> Self {
        Self {
            host_root: host_root.into(),
            proc_dir: "/proc".into(),
            sys_dir: "/sys".into(),
            host_nft_fixed: false,
        }
    }
}

/// Everything gathered, before judgement. A rule set that could not be read
/// carries the error text (reported, never a crash).
#[derive(Clone, Debug)]
pub struct NodeFacts {
    pub iptables: Option<IptablesFacts>,
    /// The host's libnftables and `nft`; None when it has none.
    pub nftables: Option<NftablesFacts>,
    /// Why the host's iptables could not be determined, when it could not.
    pub host_error: Option<String>,
    pub kernel_release: String,
    /// nf_tables answered (loaded now).
    pub nf_tables_supported: bool,
    /// Legacy ip_tables is loaded in this namespace (its tables can be read).
    pub ip_tables_supported: bool,
    /// Whether each module is loaded, built in, loadable or absent.
    pub kernel_modules: KernelModules,
    pub nft: Result<RuleSet, String>,
    pub legacy: Result<RuleSet, String>,
    pub bridge: BridgeFacts,
    pub ip_forward: Option<bool>,
}

impl NodeFacts {
    /// The host has no `iptables` command (and its probe did not fail):
    /// kubelet then writes no marker chains.
    pub fn no_iptables_command(&self) -> bool {
        self.host_error.is_none() && self.iptables.as_ref().is_none_or(|i| i.backend.is_none())
    }
}

/// Read everything (blocking; call from `spawn_blocking` in async code).
pub fn gather(cfg: &ProbeConfig) -> NodeFacts {
    gather_with_host(cfg, host_facts(cfg))
}

/// What the node's files say (its iptables package, the kernel's module
/// lists), or the error that replaced the iptables facts. These change on
/// package upgrades, not with rules: the reporter caches them between
/// heartbeats.
#[derive(Clone, Debug, Default)]
pub struct HostFacts {
    pub iptables: Option<IptablesFacts>,
    pub nftables: Option<NftablesFacts>,
    pub error: Option<String>,
    pub modules: kmod::Installed,
}

/// Everything but the host's files, which the caller passes in: the kernel
/// and sysctls change often, the host's packages rarely.
pub fn gather_with_host(cfg: &ProbeConfig, host: HostFacts) -> NodeFacts {
    let mut nft = kernel::nftables::read().map_err(|e| e.to_string());
    // nf_tables is supported when a read worked, or failed for another reason
    // than absence; a kernel without it simply holds no nf_tables rules.
    let nf_tables_supported = nft.is_ok() || kernel::nftables::available();
    if !nf_tables_supported {
        nft = Ok(RuleSet::default());
    }
    let ip_tables_supported = kernel::xtables::available();
    let legacy = kernel::xtables::read().map_err(|e| e.to_string());
    let loaded = kmod::loaded(&cfg.sys_dir, ip_tables_supported, nf_tables_supported);
    NodeFacts {
        iptables: host.iptables,
        nftables: host.nftables,
        host_error: host.error,
        kernel_release: system::kernel_release(),
        nf_tables_supported,
        ip_tables_supported,
        kernel_modules: kmod::assess(loaded, &xt_modules::loaded(&cfg.sys_dir), &host.modules),
        nft,
        legacy,
        bridge: system::bridge(&cfg.proc_dir, &cfg.sys_dir),
        ip_forward: system::ip_forward(&cfg.proc_dir),
    }
}

/// The host's iptables and the running kernel's module lists.
pub fn host_facts(cfg: &ProbeConfig) -> HostFacts {
    let (iptables, mut nftables, error) = host_userspace(&cfg.host_root);
    if cfg.host_nft_fixed {
        nftables = nftables.map(|n| n.classified(true));
    }
    HostFacts {
        iptables,
        nftables,
        error,
        modules: kmod::read_installed(&cfg.host_root, &cfg.proc_dir, &system::kernel_release()),
    }
}

/// The host's iptables and nftables, by the same probes as images. A probe
/// bug must not take the reporter down with it, so a panic becomes a
/// reported error.
pub fn host_userspace(
    host_root: &Path,
) -> (Option<IptablesFacts>, Option<NftablesFacts>, Option<String>) {
    let root = crate::rootfs::HostRoot::new(host_root.to_path_buf());
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        crate::rootfs::collect(&root, &BTreeMap::new())
    })) {
        Ok(c) => (c.facts, c.nftables, None),
        Err(_) => (
            None,
            None,
            Some(format!(
                "host iptables probe of {} failed unexpectedly",
                host_root.display()
            )),
        ),
    }
}

/// The reporter-owned part of a profile status, from gathered facts. Pure.
/// `last_probe_time` is left to the caller (time is passed in, not read here).
pub fn status_from_facts(facts: &NodeFacts) -> NodeNetfilterProfileStatus {
    let empty = RuleSet::default();
    let nft = facts.nft.as_ref().unwrap_or(&empty);
    let legacy = facts.legacy.as_ref().unwrap_or(&empty);
    let features = min_reader::native_features(nft);
    let min = min_reader::min_reader(&features);
    let mut errors: Vec<String> = [("nft", &facts.nft), ("legacy", &facts.legacy)]
        .into_iter()
        .filter_map(|(b, r)| r.as_ref().err().map(|e| format!("{b}: {e}")))
        .collect();
    errors.extend(facts.host_error.iter().cloned());
    let both_read = facts.nft.is_ok() && facts.legacy.is_ok();
    let (native_tables, not_listed) = native::native_tables(nft);
    let nft_sets = nft_skew::node_nftables(facts.nft.as_ref().ok(), facts.nftables.as_ref());
    NodeNetfilterProfileStatus {
        iptables: facts.iptables.clone(),
        kernel: Some(kernel_facts(facts)),
        backends: Some(BackendsFacts {
            nft: backends::backend_facts(nft),
            legacy: backends::backend_facts(legacy),
        }),
        // Without both rule sets the backend cannot be judged honestly.
        active_backend: both_read.then(|| backends::active_backend(nft, legacy)),
        wrapper_backend: both_read.then(|| backends::wrapper_choice(nft, legacy)),
        min_reader_version: min,
        // Unknown, not "none", when nf_tables could not be read.
        native_features: facts.nft.is_ok().then_some(features),
        native_tables: facts.nft.is_ok().then_some(native_tables),
        kube_proxy_mode: both_read.then(|| kube_proxy::mode(nft, legacy)),
        kubelet_markers: both_read
            .then(|| backends::kubelet_markers(nft, legacy, facts.no_iptables_command())),
        native_tables_not_listed: (not_listed > 0).then_some(not_listed),
        bridge: Some(facts.bridge.clone()),
        ip_forward: facts.ip_forward,
        hazards: Some(hazards::assess(facts, min, &nft_sets)),
        nftables: Some(nft_sets),
        probe_error: (!errors.is_empty()).then(|| errors.join("; ")),
        ..Default::default()
    }
}

/// Availability, not "loaded": legacy loads on first use on a modular
/// kernel. nf_tables is asked over netlink, which loads it when it can, so
/// a failed answer is only overruled by a module list that names it.
fn kernel_facts(facts: &NodeFacts) -> KernelFacts {
    let m = &facts.kernel_modules;
    KernelFacts {
        release: facts.kernel_release.clone(),
        nf_tables: facts.nf_tables_supported
            || matches!(m.nf_tables, ModuleState::Builtin | ModuleState::Module),
        ip_tables: facts.ip_tables_supported || m.ip_tables.available(),
        modules: Some(m.clone()),
    }
}

/// Probe the current network namespace and the node root at `cfg.host_root`.
/// Never fails: unreadable parts are reported in `probe_error` and as
/// `ProbeFailed` hazards.
pub fn probe(cfg: &ProbeConfig) -> NodeNetfilterProfileStatus {
    status_from_facts(&gather(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(ip_tables_loaded: bool, modules: KernelModules) -> NodeFacts {
        NodeFacts {
            iptables: None,
            nftables: None,
            host_error: None,
            kernel_release: "6.12.0".into(),
            nf_tables_supported: true,
            ip_tables_supported: ip_tables_loaded,
            kernel_modules: modules,
            nft: Ok(RuleSet::default()),
            legacy: Ok(RuleSet::default()),
            bridge: BridgeFacts::default(),
            ip_forward: None,
        }
    }

    #[test]
    fn ip_tables_not_loaded_but_installed_is_available_and_absent_is_not() {
        let mut m = KernelModules {
            ip_tables: ModuleState::Module,
            ..Default::default()
        };
        let k = kernel_facts(&facts(false, m.clone()));
        assert!(k.ip_tables, "a loadable module is available");
        assert_eq!(k.modules.as_ref().unwrap().ip_tables, ModuleState::Module);
        m.ip_tables = ModuleState::Absent;
        assert!(!kernel_facts(&facts(false, m.clone())).ip_tables);
        // Unknown (nothing readable) never refuses.
        m.ip_tables = ModuleState::Unknown;
        assert!(kernel_facts(&facts(false, m)).ip_tables);
    }
}
