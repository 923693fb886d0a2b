//! Which netfilter modules the running kernel offers, not just which are
//! loaded. On a modular kernel `ip_tables` loads on first use, so "no
//! `/proc/net/ip_tables_names`" means "nothing used legacy yet", not "legacy
//! cannot work" (RHEL 10 and Talos kernels really lack it).
//!
//! `read_installed` and `loaded` read (bounded); the rest is pure. Evidence, strongest first:
//! loaded now, then the running kernel's `modules.builtin`/`modules.dep`
//! under the host root (what is installed), then the kernel's config
//! (`/proc/config.gz`), then "a kernel without module support cannot load it
//! later". Nothing is ever loaded to find out.

use super::module_lists::{config_value, installed_state, state};
use crate::api::{KernelModules, ModuleState};
use crate::rootfs::{HostRoot, Lookup, RootFs};
use std::io::Read;
use std::path::Path;

/// modules.dep of a distribution kernel is ~1 MiB; far more is not one.
const MAX_MODULE_LIST: u64 = 8 << 20;
/// A kernel config is ~250 KiB uncompressed.
const MAX_CONFIG: u64 = 4 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Module {
    IpTables,
    Ip6Tables,
    NfTables,
    NftCompat,
}

impl Module {
    pub const ALL: [Module; 4] = [
        Module::IpTables,
        Module::Ip6Tables,
        Module::NfTables,
        Module::NftCompat,
    ];

    fn file_stem(self) -> &'static str {
        match self {
            Module::IpTables => "ip_tables",
            Module::Ip6Tables => "ip6_tables",
            Module::NfTables => "nf_tables",
            Module::NftCompat => "nft_compat",
        }
    }

    /// Config symbols that build the module, most specific first: kernels
    /// since 6.15 build the legacy tables only with `*_IPTABLES_LEGACY`.
    fn config_symbols(self) -> &'static [&'static str] {
        match self {
            Module::IpTables => &["CONFIG_IP_NF_IPTABLES_LEGACY", "CONFIG_IP_NF_IPTABLES"],
            Module::Ip6Tables => &["CONFIG_IP6_NF_IPTABLES_LEGACY", "CONFIG_IP6_NF_IPTABLES"],
            Module::NfTables => &["CONFIG_NF_TABLES"],
            Module::NftCompat => &["CONFIG_NFT_COMPAT"],
        }
    }
}

/// What the node's files say of each module (module lists, else the kernel
/// config), read with the host's iptables and cached like it: they change
/// only when a kernel package does. None: the files say nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Installed {
    pub from_files: [Option<ModuleState>; 4],
    /// The same for `xt_modules::EXTENSIONS`, in their order.
    pub xt_from_files: Vec<Option<ModuleState>>,
    /// `/proc/modules` exists: the kernel can load modules at all.
    pub modules_supported: Option<bool>,
}

/// `loaded`: Some(true) in the kernel now, Some(false) a reliable sign says
/// it is not, None no such sign (a built-in nft_compat shows nowhere).
/// `xt_loaded`: `xt_modules::loaded`, in `EXTENSIONS` order.
pub fn assess(
    loaded: [Option<bool>; 4],
    xt_loaded: &[Option<bool>],
    installed: &Installed,
) -> KernelModules {
    let s = |m: Module| {
        let i = index(m);
        state(
            loaded[i],
            installed.from_files[i],
            installed.modules_supported,
        )
    };
    KernelModules {
        ip_tables: s(Module::IpTables),
        ip6_tables: s(Module::Ip6Tables),
        nf_tables: s(Module::NfTables),
        nft_compat: s(Module::NftCompat),
        xt: super::xt_modules::assess(
            xt_loaded,
            &installed.xt_from_files,
            installed.modules_supported,
        ),
    }
}

fn index(m: Module) -> usize {
    Module::ALL.iter().position(|x| *x == m).unwrap_or(0)
}

/// Pure: what the module lists (both needed: a module in neither is absent)
/// or else the config say of each module.
pub fn installed_from(
    builtin: Option<&str>,
    dep: Option<&str>,
    config: Option<&str>,
    modules_supported: Option<bool>,
) -> Installed {
    let one = |m: Module| {
        // Linux 6.17 builds no legacy xtables at all without
        // CONFIG_NETFILTER_XTABLES_LEGACY, whatever else the config says.
        let legacy = matches!(m, Module::IpTables | Module::Ip6Tables);
        if legacy
            && (builtin.is_none() || dep.is_none())
            && config.and_then(|c| config_value(c, LEGACY_GATE)) == Some('n')
        {
            return Some(ModuleState::Absent);
        }
        installed_state(builtin, dep, config, m.file_stem(), m.config_symbols())
    };
    Installed {
        from_files: Module::ALL.map(one),
        xt_from_files: super::xt_modules::from_files(builtin, dep, config),
        modules_supported,
    }
}

/// Linux 6.17's switch for every legacy xtables table (off by default).
const LEGACY_GATE: &str = "CONFIG_NETFILTER_XTABLES_LEGACY";

/// The loaded signs of the calling thread's network namespace;
/// `ip_tables_loaded` and `nf_tables_loaded` are what the caller already
/// asked the kernel (the probe reads each once).
pub fn loaded(sys_dir: &Path, ip_tables_loaded: bool, nf_tables_loaded: bool) -> [Option<bool>; 4] {
    let sysfs = |name: &str| sys_dir.join("module").join(name).exists();
    [
        Some(ip_tables_loaded),
        Some(crate::kernel::xtables::available_v6()),
        Some(nf_tables_loaded || sysfs("nf_tables")),
        sysfs("nft_compat").then_some(true),
    ]
}

/// Read what the node's files say: the running kernel's module lists under
/// the host root (`/lib/modules` or `/usr/lib/modules`: the reporter mounts
/// /usr), `config.gz` and `modules` under `proc_dir`. Reads are bounded and
/// links resolve inside the host root.
pub fn read_installed(host_root: &Path, proc_dir: &Path, release: &str) -> Installed {
    let root = HostRoot::new(host_root.to_path_buf());
    let builtin = module_list(&root, release, "modules.builtin");
    let dep = module_list(&root, release, "modules.dep");
    let config = read_config(&proc_dir.join("config.gz"));
    installed_from(
        builtin.as_deref(),
        dep.as_deref(),
        config.as_deref(),
        Some(proc_dir.join("modules").exists()),
    )
}

fn module_list(root: &HostRoot, release: &str, name: &str) -> Option<String> {
    // A release names one directory; anything else is not a release.
    if release.is_empty() || release.contains('/') || release.starts_with('.') {
        return None;
    }
    ["/lib/modules", "/usr/lib/modules"].iter().find_map(|dir| {
        match root.read(&format!("{dir}/{release}/{name}"), MAX_MODULE_LIST) {
            Ok(Lookup::Found(b)) => Some(String::from_utf8_lossy(&b).into_owned()),
            _ => None,
        }
    })
}

fn read_config(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let gz = flate2::read::GzDecoder::new(file.take(MAX_CONFIG));
    let bytes = crate::capped::read_capped(gz, MAX_CONFIG).ok()??;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::module_lists::lists;

    const BUILTIN: &str =
        "kernel/net/netfilter/nf_tables.ko\nkernel/net/ipv4/netfilter/ip_tables.ko\n";
    const DEP: &str = "kernel/net/netfilter/nft_compat.ko.xz: kernel/net/netfilter/nf_tables.ko\n\
                       kernel/net/ipv6/netfilter/ip6_tables.ko.zst: kernel/net/netfilter/x_tables.ko.zst\n";
    /// Nothing loaded, with reliable signs for all but nft_compat.
    const NOT_LOADED: [Option<bool>; 4] = [Some(false), Some(false), Some(false), None];

    #[test]
    fn loaded_wins_over_every_list() {
        let files = installed_from(Some(""), Some(""), None, Some(true));
        let m = assess([Some(true), Some(false), Some(false), None], &[], &files);
        assert_eq!(m.ip_tables, ModuleState::Loaded);
        assert_eq!(m.ip6_tables, ModuleState::Absent);
    }

    #[test]
    fn unloaded_but_installed_is_available() {
        let m = assess(
            NOT_LOADED,
            &[],
            &installed_from(Some(BUILTIN), Some(DEP), None, Some(true)),
        );
        assert_eq!(m.ip_tables, ModuleState::Builtin);
        assert_eq!(m.ip6_tables, ModuleState::Module);
        assert_eq!(m.nf_tables, ModuleState::Builtin);
        assert_eq!(m.nft_compat, ModuleState::Module);
        assert!(m.ip_tables.available() && m.ip6_tables.available());
    }

    #[test]
    fn a_kernel_without_legacy_is_absent_when_the_lists_say_so() {
        // RHEL 10: nf_tables and nft_compat, no ip_tables anywhere.
        let files = installed_from(
            Some("kernel/net/netfilter/nf_tables.ko\n"),
            Some("kernel/net/netfilter/nft_compat.ko.xz:\n"),
            // The lists win over a config that claims more.
            Some("CONFIG_IP_NF_IPTABLES=m\n"),
            Some(true),
        );
        let m = assess(NOT_LOADED, &[], &files);
        assert_eq!(m.ip_tables, ModuleState::Absent);
        assert!(!m.ip_tables.available());
        assert_eq!(m.nft_compat, ModuleState::Module);
    }

    #[test]
    fn config_decides_without_lists_and_prefers_the_legacy_symbol() {
        let cfg = "CONFIG_IP_NF_IPTABLES=y\n# CONFIG_IP_NF_IPTABLES_LEGACY is not set\n\
                   CONFIG_IP6_NF_IPTABLES=m\nCONFIG_NF_TABLES=y\nCONFIG_NFT_COMPAT=y\n";
        // One list alone is not enough to call a module absent.
        let m = assess(
            NOT_LOADED,
            &[],
            &installed_from(Some(BUILTIN), None, Some(cfg), Some(true)),
        );
        assert_eq!(m.ip_tables, ModuleState::Absent);
        assert_eq!(m.ip6_tables, ModuleState::Module);
        assert_eq!(m.nft_compat, ModuleState::Builtin);
    }

    #[test]
    fn without_module_support_not_loaded_is_absent_but_no_sign_is_unknown() {
        let m = assess(
            NOT_LOADED,
            &[],
            &installed_from(None, None, None, Some(false)),
        );
        assert_eq!(m.ip_tables, ModuleState::Absent);
        // nft_compat has no loaded sign when built in: never guess absent.
        assert_eq!(m.nft_compat, ModuleState::Unknown);
        assert!(m.nft_compat.available());
        let m = assess(
            NOT_LOADED,
            &[],
            &installed_from(None, None, None, Some(true)),
        );
        assert_eq!(m.ip_tables, ModuleState::Unknown);
    }

    #[test]
    fn list_names_match_whole_module_names_only() {
        assert!(lists("kernel/x/ip-tables.ko.gz\n", "ip_tables"));
        assert!(!lists("kernel/x/ip6_tables.ko\n", "ip_tables"));
        assert!(!lists("kernel/x/nf_tables_set.ko\n", "nf_tables"));
        assert!(!lists("ip_tables\n", "ip_tables"));
    }

    #[test]
    fn the_lists_are_read_under_the_host_root_and_only_for_a_release_name() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("usr/lib/modules/6.1.0-test");
        std::fs::create_dir_all(&m).unwrap();
        std::fs::write(m.join("modules.builtin"), BUILTIN).unwrap();
        std::fs::write(m.join("modules.dep"), DEP).unwrap();
        let proc_dir = dir.path().join("proc");
        std::fs::create_dir_all(&proc_dir).unwrap();
        std::fs::write(proc_dir.join("modules"), "").unwrap();
        let got = read_installed(dir.path(), &proc_dir, "6.1.0-test");
        assert_eq!(
            got,
            installed_from(Some(BUILTIN), Some(DEP), None, Some(true))
        );
        // A release that is not one directory name is never looked up.
        let got = read_installed(dir.path(), &proc_dir, "../../etc");
        assert_eq!(got.from_files, [None; 4]);
    }

    #[test]
    fn config_gz_is_read_whole_when_small_and_refused_when_huge() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let gz = |path: &Path, body: &[u8]| {
            let mut e = flate2::write::GzEncoder::new(
                std::fs::File::create(path).unwrap(),
                flate2::Compression::default(),
            );
            e.write_all(body).unwrap();
            e.finish().unwrap();
        };
        let small = dir.path().join("config.gz");
        gz(&small, b"CONFIG_NFT_COMPAT=m\n");
        assert_eq!(
            read_config(&small).as_deref(),
            Some("CONFIG_NFT_COMPAT=m\n")
        );
        // A few KiB that inflate past the cap: read to the cap, then refused.
        let bomb = dir.path().join("bomb.gz");
        gz(&bomb, &vec![b'#'; (MAX_CONFIG + 1) as usize]);
        assert!(std::fs::metadata(&bomb).unwrap().len() < 64 * 1024);
        assert_eq!(read_config(&bomb), None);
        assert_eq!(read_config(&dir.path().join("missing.gz")), None);
    }

    #[test]
    fn linux_6_17_without_the_legacy_switch_has_no_legacy_tables() {
        // CONFIG_IP_NF_IPTABLES may stay (nft_compat's shared parts), but
        // without CONFIG_NETFILTER_XTABLES_LEGACY no legacy table is built.
        let cfg = "# CONFIG_NETFILTER_XTABLES_LEGACY is not set\nCONFIG_IP_NF_IPTABLES=m\n\
                   CONFIG_IP6_NF_IPTABLES=m\nCONFIG_NF_TABLES=m\nCONFIG_NFT_COMPAT=m\n";
        let m = assess(
            NOT_LOADED,
            &[],
            &installed_from(None, None, Some(cfg), Some(true)),
        );
        assert_eq!(m.ip_tables, ModuleState::Absent);
        assert_eq!(m.ip6_tables, ModuleState::Absent);
        assert_eq!(m.nf_tables, ModuleState::Module);
        assert_eq!(m.nft_compat, ModuleState::Module);
        // Switched on: the table's own symbol decides as before.
        let on = cfg.replace(
            "# CONFIG_NETFILTER_XTABLES_LEGACY is not set",
            "CONFIG_NETFILTER_XTABLES_LEGACY=y",
        );
        let m = assess(
            NOT_LOADED,
            &[],
            &installed_from(None, None, Some(&on), Some(true)),
        );
        assert_eq!(m.ip_tables, ModuleState::Module);
        // Loaded wins over the config (what the kernel does is the truth).
        let m = assess(
            [Some(true), Some(false), Some(false), None],
            &[],
            &installed_from(None, None, Some(cfg), Some(true)),
        );
        assert_eq!(m.ip_tables, ModuleState::Loaded);
    }
}
