//! The x_tables extension modules Kubernetes' netfilter writers load, and
//! whether the running kernel offers them. iptables-nft needs `nft_compat`
//! *and* the `xt_*` module of every match and target it does not translate
//! natively; iptables-legacy needs them directly. Kernels of 2026 trim them:
//! Talos first removed xt_CT, xt_MARK and xt_TPROXY that iptables-nft users
//! still need (siderolabs/talos#13935, fixed in pkgs#1634), and a rule that
//! needs an absent one fails to load. Evidence as for the core modules
//! (`kmod`): loaded now, the running kernel's module lists, its config.
//! Pure, but for `loaded`.

use super::module_lists;
use crate::api::{ModuleState, XtModule};
use std::path::Path;

/// One extension: its module (and sysfs) name, the config symbol that builds
/// it, and who needs it (for the hazard's message).
pub struct Extension {
    pub module: &'static str,
    pub config: &'static str,
    pub used_by: &'static str,
}

/// The extensions checked, in the order a profile lists them.
pub const EXTENSIONS: [Extension; 12] = [
    ext(
        "xt_comment",
        "CONFIG_NETFILTER_XT_MATCH_COMMENT",
        "every KUBE-* rule's -m comment",
    ),
    ext(
        "xt_mark",
        "CONFIG_NETFILTER_XT_MARK",
        "-m mark / -j MARK: kube-proxy, kubelet, CNIs",
    ),
    ext(
        "xt_conntrack",
        "CONFIG_NETFILTER_XT_MATCH_CONNTRACK",
        "-m conntrack: kube-proxy, CNIs",
    ),
    ext(
        "xt_addrtype",
        "CONFIG_NETFILTER_XT_MATCH_ADDRTYPE",
        "-m addrtype: kube-proxy's NodePorts",
    ),
    ext(
        "xt_statistic",
        "CONFIG_NETFILTER_XT_MATCH_STATISTIC",
        "-m statistic: kube-proxy's load balancing",
    ),
    ext(
        "xt_multiport",
        "CONFIG_NETFILTER_XT_MATCH_MULTIPORT",
        "-m multiport: CNIs, network policy agents",
    ),
    ext(
        "xt_nat",
        "CONFIG_NETFILTER_XT_NAT",
        "-j DNAT / SNAT: kube-proxy",
    ),
    ext(
        "xt_MASQUERADE",
        "CONFIG_NETFILTER_XT_TARGET_MASQUERADE",
        "-j MASQUERADE: kube-proxy, CNIs",
    ),
    ext(
        "xt_CT",
        "CONFIG_NETFILTER_XT_TARGET_CT",
        "-j CT: Cilium, Calico",
    ),
    ext(
        "xt_TPROXY",
        "CONFIG_NETFILTER_XT_TARGET_TPROXY",
        "-j TPROXY: Cilium, Istio",
    ),
    ext(
        "xt_socket",
        "CONFIG_NETFILTER_XT_MATCH_SOCKET",
        "-m socket: Cilium, Istio",
    ),
    ext(
        "xt_set",
        "CONFIG_NETFILTER_XT_SET",
        "-m set (ipset): Calico, kube-router",
    ),
];

const fn ext(module: &'static str, config: &'static str, used_by: &'static str) -> Extension {
    Extension {
        module,
        config,
        used_by,
    }
}

/// What the module lists (both needed) or else the config say of each.
pub fn from_files(
    builtin: Option<&str>,
    dep: Option<&str>,
    config: Option<&str>,
) -> Vec<Option<ModuleState>> {
    EXTENSIONS
        .iter()
        .map(|e| module_lists::installed_state(builtin, dep, config, e.module, &[e.config]))
        .collect()
}

/// Loaded now: its /sys/module entry. Its absence says nothing (a built-in
/// module without parameters has none).
pub fn loaded(sys_dir: &Path) -> Vec<Option<bool>> {
    EXTENSIONS
        .iter()
        .map(|e| {
            sys_dir
                .join("module")
                .join(e.module)
                .exists()
                .then_some(true)
        })
        .collect()
}

/// Every extension's state, from the loaded signs and the files.
pub fn assess(
    loaded: &[Option<bool>],
    files: &[Option<ModuleState>],
    modules_supported: Option<bool>,
) -> Vec<XtModule> {
    EXTENSIONS
        .iter()
        .enumerate()
        .map(|(i, e)| XtModule {
            name: e.module.into(),
            state: module_lists::state(
                loaded.get(i).copied().flatten(),
                files.get(i).copied().flatten(),
                modules_supported,
            ),
        })
        .collect()
}

/// The extensions the kernel lacks for sure (never `unknown`), with who needs each.
pub fn absent(modules: &[XtModule]) -> Vec<&'static Extension> {
    EXTENSIONS
        .iter()
        .filter(|e| {
            modules
                .iter()
                .any(|m| m.name == e.module && m.state == ModuleState::Absent)
        })
        .collect()
}

// Every extension, by a name the profile CRD's bounds hold.
const _: () = {
    use crate::api::bounds::{MODULE_NAME, XT_MODULES};
    assert!(EXTENSIONS.len() <= XT_MODULES);
    let mut i = 0;
    while i < EXTENSIONS.len() {
        assert!(EXTENSIONS[i].module.len() <= MODULE_NAME);
        i += 1;
    }
};

#[cfg(test)]
mod tests {
    use super::*;

    const BUILTIN: &str = "kernel/net/netfilter/xt_comment.ko\nkernel/net/netfilter/xt_mark.ko\n";
    const DEP: &str = "kernel/net/netfilter/xt_conntrack.ko.xz: kernel/net/netfilter/x_tables.ko\n\
                       kernel/net/netfilter/xt_CT.ko.zst:\n";

    fn state_of(m: &[XtModule], name: &str) -> ModuleState {
        m.iter().find(|x| x.name == name).unwrap().state
    }

    #[test]
    fn lists_say_builtin_module_or_absent_and_loaded_wins() {
        let files = from_files(Some(BUILTIN), Some(DEP), None);
        let mut loaded = vec![None; EXTENSIONS.len()];
        loaded[6] = Some(true); // xt_nat loaded although no list names it
        let m = assess(&loaded, &files, Some(true));
        assert_eq!(state_of(&m, "xt_comment"), ModuleState::Builtin);
        assert_eq!(state_of(&m, "xt_conntrack"), ModuleState::Module);
        assert_eq!(
            state_of(&m, "xt_CT"),
            ModuleState::Module,
            "case kept in the name"
        );
        assert_eq!(state_of(&m, "xt_nat"), ModuleState::Loaded);
        assert_eq!(state_of(&m, "xt_TPROXY"), ModuleState::Absent);
        let names: Vec<&str> = absent(&m).iter().map(|e| e.module).collect();
        assert!(
            names.contains(&"xt_TPROXY") && !names.contains(&"xt_CT"),
            "{names:?}"
        );
    }

    #[test]
    fn config_decides_without_lists_and_nothing_readable_is_unknown() {
        let cfg = "CONFIG_NETFILTER_XT_TARGET_CT=m\n# CONFIG_NETFILTER_XT_TARGET_TPROXY is not set\n\
                   CONFIG_NETFILTER_XT_MATCH_COMMENT=y\n";
        let m = assess(&[None; 12], &from_files(None, None, Some(cfg)), Some(true));
        assert_eq!(state_of(&m, "xt_CT"), ModuleState::Module);
        assert_eq!(state_of(&m, "xt_TPROXY"), ModuleState::Absent);
        assert_eq!(state_of(&m, "xt_comment"), ModuleState::Builtin);
        // Unmentioned in a config: the kernel was built without it.
        assert_eq!(state_of(&m, "xt_socket"), ModuleState::Absent);
        // Nothing to read: unknown, never absent on a guess.
        let m = assess(&[None; 12], &from_files(None, None, None), Some(true));
        assert!(m.iter().all(|x| x.state == ModuleState::Unknown));
        assert!(absent(&m).is_empty());
    }
}
