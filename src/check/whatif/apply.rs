//! Applying `--assume` patches to a profile's status (pure). The patched
//! status is what the reporter and controller would write once the change
//! is done, as far as the judgement reads it:
//!
//! - the host's iptables: release (and backend) as given; the package
//!   evidence is dropped (it described the old package). A host that had no
//!   iptables command gains kubelet's marker chains in that backend (kubelet
//!   skips them only without one). A backend change
//!   moves the node's rules with it, as after the reboot an OS upgrade
//!   implies (kubelet, kube-proxy and wrapper-based CNIs follow the host's
//!   backend): active backend, marker chains and wrapper choice; the live
//!   rules' minimum reader becomes none for legacy, unknown for nft.
//! - kube-proxy's mode as given; a finished switch leaves no
//!   `KubeProxyModeLeftovers`. The writer inventory stays: the controller
//!   lists kube-proxy (hostNetwork, privileged) as a writer in every mode.
//!   `minReaderVersion` stays too: features are not traced to the chain
//!   that holds them, so the iptables-mode rules' share is unknown (it can
//!   only overstate what a reader needs).
//! - kernel modules: the module states and the availability flags.
//! - the host's libnftables (`nftables=`, and each `os=` preset's package):
//!   classified as the reporter would; the live sets stay as they are, so
//!   `NftSetsCrashHostNft` follows the new reader.
//!
//! Then what depends on those inputs is derived by the reporter's and the
//! controller's own pure code: the host-tool hazards
//! ([`host_tool_hazards`]) and the newest/oldest iptables-nft summaries
//! ([`nft_writer_range`]).

use super::patch::{Fact, KernelPart, Patch};
use crate::api::{
    ActiveBackend, KernelFacts, KubeProxyMode, KubeletMarkers, MarkerState, ModuleState,
    NodeNetfilterProfileStatus,
};
use crate::controller::plan::inventory::nft_writer_range;
use crate::facts::{Backend, HazardCode, NftVersion, NftablesFacts, Version};
use crate::node::hazards::{host_tool_hazards, nft_sets_crash_host_nft};

/// `status` as it would be after `patches` (applied in order).
pub fn apply(status: &mut NodeNetfilterProfileStatus, patches: &[Patch]) {
    for p in patches {
        match &p.fact {
            Fact::Iptables { version, backend } => set_host(status, *version, *backend),
            Fact::KubeProxyMode(m) => set_kube_proxy_mode(status, *m),
            Fact::Kernel(part, state) => set_kernel(status, *part, *state),
            Fact::Nftables(package) => set_host_nft(status, package),
            Fact::Os { iptables, nftables } => {
                set_host(status, *iptables, None);
                // An OS upgrade upgrades nftables where it is installed.
                if status.nftables.as_ref().is_some_and(|n| n.host.is_some()) {
                    set_host_nft(status, nftables);
                }
            }
        }
    }
    rederive(status);
}

fn set_host(s: &mut NodeNetfilterProfileStatus, version: Version, backend: Option<Backend>) {
    let ipt = s.iptables.get_or_insert_with(Default::default);
    let had_command = ipt.backend.is_some();
    ipt.version = Some(version);
    ipt.package_version = None;
    ipt.evidence.clear();
    ipt.conflicts.clear();
    if let Some(b) = backend {
        ipt.backend = Some(b);
        if !had_command {
            markers_appear(s, b);
        }
        move_rules(s, b);
    }
}

/// The host's libnftables becomes `package` (a package version or an
/// upstream release): its classification follows, its old evidence goes.
/// The live sets stay: an upgrade rewrites none of them.
fn set_host_nft(s: &mut NodeNetfilterProfileStatus, package: &str) {
    let n = s.nftables.get_or_insert_with(Default::default);
    let program = n.host.as_ref().is_none_or(|h| h.program);
    let upstream = package.parse::<NftVersion>().ok();
    n.host = Some(
        NftablesFacts {
            version: upstream,
            package_version: (upstream.map(|u| u.to_string()).as_deref() != Some(package))
                .then(|| package.to_string()),
            program,
            ..Default::default()
        }
        .classified(false),
    );
}

/// A host that gains an iptables command: after the reboot kubelet writes
/// its marker chains through it (it skips them only without one).
fn markers_appear(s: &mut NodeNetfilterProfileStatus, b: Backend) {
    if s.kubelet_markers
        .as_ref()
        .is_some_and(|m| m.state == MarkerState::NotExpected)
    {
        s.kubelet_markers = Some(KubeletMarkers {
            state: MarkerState::Present,
            reason: None,
        });
    }
    if let Some(all) = s.backends.as_mut() {
        let facts = if b == Backend::Legacy {
            &mut all.legacy
        } else {
            &mut all.nft
        };
        facts.hint_chain = true;
        facts.canary_chain = true;
    }
    if s.wrapper_backend.is_some() {
        s.wrapper_backend = Some(b);
    }
}

/// The node's rules move to `to` (only from a single backend: a mixed node
/// keeps its two rule sets, whose owners are unknown).
fn move_rules(s: &mut NodeNetfilterProfileStatus, to: Backend) {
    let from = match s.active_backend {
        Some(ActiveBackend::Nft) => Backend::Nft,
        Some(ActiveBackend::Legacy) => Backend::Legacy,
        _ => return,
    };
    if from == to {
        return;
    }
    if let Some(b) = s.backends.as_mut() {
        std::mem::swap(&mut b.nft, &mut b.legacy);
    }
    s.active_backend = Some(match to {
        Backend::Legacy => ActiveBackend::Legacy,
        _ => ActiveBackend::Nft,
    });
    // The marker chains moved too, and a wrapper follows them.
    if s.wrapper_backend.is_some() {
        s.wrapper_backend = Some(to);
    }
    s.min_reader_version = None;
    // Legacy: no iptables rule left in nf_tables. Nft: not measured yet.
    s.native_features = (to == Backend::Legacy).then(Vec::new);
}

fn set_kube_proxy_mode(s: &mut NodeNetfilterProfileStatus, mode: KubeProxyMode) {
    s.kube_proxy_mode = Some(mode);
    if let Some(h) = s.hazards.as_mut() {
        h.retain(|h| h.code != HazardCode::KubeProxyModeLeftovers);
    }
}

fn set_kernel(s: &mut NodeNetfilterProfileStatus, part: KernelPart, state: ModuleState) {
    // Unknown stays available: nfguard never refuses on a guess.
    let k = s.kernel.get_or_insert_with(|| KernelFacts {
        release: String::new(),
        nf_tables: true,
        ip_tables: true,
        modules: None,
    });
    let m = k.modules.get_or_insert_with(Default::default);
    match part {
        KernelPart::IpTables => {
            m.ip_tables = state;
            m.ip6_tables = state;
            k.ip_tables = state.available();
        }
        KernelPart::NfTables => {
            m.nf_tables = state;
            k.nf_tables = state.available();
        }
    }
}

/// Re-derive what the changed facts feed, with the reporter's and the
/// controller's own code.
fn rederive(s: &mut NodeNetfilterProfileStatus) {
    let hazards = s.hazards.get_or_insert_with(Vec::new);
    hazards.retain(|h| {
        !matches!(
            h.code,
            HazardCode::KnownBadIptables
                | HazardCode::OldReaderNewRules
                | HazardCode::NftSetsCrashHostNft
        )
    });
    hazards.extend(host_tool_hazards(s.iptables.as_ref(), s.min_reader_version));
    hazards.extend(s.nftables.as_ref().and_then(nft_sets_crash_host_nft));
    hazards.sort_by_key(|h| std::cmp::Reverse(h.severity));
    // Only where the controller wrote its summaries (a profile captured by
    // `inspect node --as-profile` has none, and gains none here).
    if s.writers.is_some() || s.newest_writer_version.is_some() {
        let (newest, oldest) = nft_writer_range(s.writers.as_deref().unwrap_or(&[]), Some(s));
        s.newest_writer_version = newest;
        s.oldest_reader_version = oldest;
    }
}

/// kube-proxy's nftables mode needs kernel 5.13 or newer (KEP-3866); None
/// when the release is unknown or new enough.
pub fn kernel_too_old_for_nftables_mode(s: &NodeNetfilterProfileStatus) -> Option<String> {
    let release = &s.kernel.as_ref()?.release;
    let mut parts = release.split(['.', '-']);
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    ((major, minor) < (5, 13)).then(|| release.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{BackendFacts, BackendsFacts, Writer};
    use crate::compat::evaluate::nodeview::view;
    use crate::facts::{Hazard, IptablesFacts, Severity};

    fn patch(s: &str) -> Patch {
        s.parse().unwrap()
    }

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    /// An nft node: host 1.8.9, rules needing 1.8.8, an old 1.8.7 writer pod,
    /// the controller's summaries, and the host hazard 1.8.9 does not have.
    fn nft_node() -> NodeNetfilterProfileStatus {
        NodeNetfilterProfileStatus {
            iptables: Some(IptablesFacts {
                version: Some(v("1.8.9")),
                backend: Some(Backend::Nft),
                package_version: Some("1.8.9-2".into()),
                ..Default::default()
            }),
            active_backend: Some(ActiveBackend::Nft),
            backends: Some(BackendsFacts {
                nft: BackendFacts {
                    tables: 3,
                    rules: 12,
                    hint_chain: true,
                    canary_chain: true,
                    ..Default::default()
                },
                legacy: BackendFacts::default(),
            }),
            wrapper_backend: Some(Backend::Nft),
            min_reader_version: Some(v("1.8.8")),
            hazards: Some(vec![Hazard {
                code: HazardCode::KubeProxyModeLeftovers,
                severity: Severity::Warning,
                message: "leftovers".into(),
                backend: None,
                table: None,
                chain: None,
                rule: None,
            }]),
            writers: Some(vec![Writer {
                pod: "kube-system/kr-1".into(),
                container: "kr".into(),
                image: "kr:old".into(),
                version: Some(v("1.8.7")),
                backend: Some(Backend::Nft),
                ..Default::default()
            }]),
            newest_writer_version: Some(v("1.8.9")),
            oldest_reader_version: Some(v("1.8.7")),
            ..Default::default()
        }
    }

    fn codes(s: &NodeNetfilterProfileStatus) -> Vec<HazardCode> {
        s.hazards.iter().flatten().map(|h| h.code).collect()
    }

    #[test]
    fn the_hosts_nftables_moves_with_the_os_and_the_nft_hazard_follows() {
        use crate::api::NodeNftables;
        let mut s = nft_node();
        // Sets that libnftables >= 1.1.2 wrote, on a trixie host (1.1.3 reads them).
        s.nftables = Some(NodeNftables {
            min_reader: Some("1.1.2".parse().unwrap()),
            crashing_sets: Some(1),
            crashing_examples: vec!["ip/t/s".into()],
            crashing_tables: vec!["ip/t".into()],
            ..Default::default()
        });
        apply(&mut s, &[patch("nftables=1.1.3-1")]);
        assert!(!codes(&s).contains(&HazardCode::NftSetsCrashHostNft));
        // Back to bookworm: its 1.0.6 segfaults on them.
        apply(&mut s, &[patch("os=debian-12")]);
        let host = s.nftables.as_ref().unwrap().host.as_ref().unwrap();
        assert_eq!(host.package_version.as_deref(), Some("1.0.6-2+deb12u2"));
        assert!(codes(&s).contains(&HazardCode::NftSetsCrashHostNft));
        // The fixed stable release ends it.
        apply(&mut s, &[patch("nftables=1.0.6.1")]);
        assert!(!codes(&s).contains(&HazardCode::NftSetsCrashHostNft));
        // A host without nftables gains none from an OS preset.
        let mut bare = nft_node();
        apply(&mut bare, &[patch("os=forky")]);
        assert!(bare.nftables.is_none());
    }

    #[test]
    fn host_release_moves_and_the_summaries_follow() {
        let mut s = nft_node();
        apply(&mut s, &[patch("os=debian-13")]);
        let ipt = s.iptables.as_ref().unwrap();
        assert_eq!(ipt.version, Some(v("1.8.11")));
        assert_eq!(
            ipt.backend,
            Some(Backend::Nft),
            "the preset keeps the backend"
        );
        assert_eq!(ipt.package_version, None, "old package evidence dropped");
        assert_eq!(s.newest_writer_version, Some(v("1.8.11")));
        assert_eq!(s.oldest_reader_version, Some(v("1.8.7")));
        // The judgement's view reads the new host as the newest writer.
        let nv = view(&s).unwrap();
        assert_eq!(nv.host_nft, Some(v("1.8.11")));
        assert_eq!(nv.newest_writer.unwrap().version, v("1.8.11"));

        // Downgrading the host: the stale 1.8.9 summary must not survive.
        let mut s = nft_node();
        apply(&mut s, &[patch("iptables=1.8.7")]);
        assert_eq!(s.newest_writer_version, Some(v("1.8.7")));
        // ...and the reporter's own rule now flags the host as an old reader.
        let old = s
            .hazards
            .iter()
            .flatten()
            .find(|h| h.code == HazardCode::OldReaderNewRules)
            .expect("OldReaderNewRules derived");
        assert_eq!(old.severity, Severity::Critical);
        assert_eq!(
            s.hazards.as_ref().unwrap()[0].code,
            HazardCode::OldReaderNewRules,
            "critical first"
        );

        // A known-bad release is derived the same way, and goes with an upgrade.
        let mut s = nft_node();
        apply(&mut s, &[patch("iptables=1.8.2")]);
        assert!(codes(&s).contains(&HazardCode::KnownBadIptables));
        apply(&mut s, &[patch("iptables=1.8.11")]);
        assert!(!codes(&s).contains(&HazardCode::KnownBadIptables));
        assert!(!codes(&s).contains(&HazardCode::OldReaderNewRules));
    }

    #[test]
    fn a_backend_change_moves_the_rules() {
        let mut s = nft_node();
        apply(&mut s, &[patch("iptables=1.8.11/legacy")]);
        assert_eq!(s.active_backend, Some(ActiveBackend::Legacy));
        assert_eq!(s.wrapper_backend, Some(Backend::Legacy));
        let b = s.backends.as_ref().unwrap();
        assert!(b.legacy.hint_chain && !b.nft.hint_chain, "markers moved");
        assert_eq!(s.min_reader_version, None);
        assert_eq!(s.native_features, Some(vec![]));
        // A legacy host writes no nft: only the 1.8.7 nft pod is an nft writer now.
        assert_eq!(s.newest_writer_version, Some(v("1.8.7")));
        let nv = view(&s).unwrap();
        assert_eq!(nv.host_nft, None);

        // The same backend again changes no rules.
        let mut s = nft_node();
        apply(&mut s, &[patch("iptables=1.8.11/nft")]);
        assert_eq!(s.active_backend, Some(ActiveBackend::Nft));
        assert_eq!(s.min_reader_version, Some(v("1.8.8")));
    }

    #[test]
    fn kube_proxy_switch_finishes_and_keeps_the_writers() {
        let mut s = nft_node();
        apply(&mut s, &[patch("kubeProxyMode=nftables")]);
        assert_eq!(s.kube_proxy_mode, Some(KubeProxyMode::Nftables));
        assert!(!codes(&s).contains(&HazardCode::KubeProxyModeLeftovers));
        assert_eq!(s.writers.as_ref().unwrap().len(), 1);
        assert_eq!(s.min_reader_version, Some(v("1.8.8")));
        assert_eq!(s.iptables.as_ref().unwrap().version, Some(v("1.8.9")));
    }

    #[test]
    fn kernel_modules_set_state_and_availability() {
        let mut s = nft_node();
        apply(&mut s, &[patch("kernel.ipTables=absent")]);
        let k = s.kernel.as_ref().unwrap();
        assert!(!k.ip_tables && k.nf_tables, "nf_tables stays available");
        let m = k.modules.as_ref().unwrap();
        assert_eq!(
            (m.ip_tables, m.ip6_tables),
            (ModuleState::Absent, ModuleState::Absent)
        );
        assert_eq!(m.nf_tables, ModuleState::Unknown);
        assert_eq!(view(&s).unwrap().kernel_ip_tables, Some(false));
        apply(
            &mut s,
            &[
                patch("kernel.nfTables=builtin"),
                patch("kernel.ipTables=module"),
            ],
        );
        let k = s.kernel.as_ref().unwrap();
        assert!(k.ip_tables && k.nf_tables);
    }

    #[test]
    fn a_host_gaining_iptables_gains_kubelets_markers() {
        // The node without iptables: rules only in kube-proxy's own table.
        let mut s = NodeNetfilterProfileStatus {
            iptables: Some(IptablesFacts::default()),
            active_backend: Some(ActiveBackend::Nft),
            backends: Some(BackendsFacts::default()),
            kubelet_markers: Some(KubeletMarkers {
                state: MarkerState::NotExpected,
                reason: Some("no iptables command".into()),
            }),
            ..Default::default()
        };
        assert!(!view(&s).unwrap().markers_expected);
        apply(&mut s, &[patch("iptables=1.8.11/nft")]);
        assert_eq!(
            s.kubelet_markers.as_ref().unwrap().state,
            MarkerState::Present
        );
        assert!(s.backends.as_ref().unwrap().nft.hint_chain);
        let nv = view(&s).unwrap();
        assert!(nv.markers_expected);
        assert_eq!(nv.nft_markers, Some(true));
        assert_eq!(nv.host_nft, Some(v("1.8.11")));
    }

    #[test]
    fn profiles_without_controller_summaries_gain_none() {
        let mut s = nft_node();
        s.writers = None;
        s.newest_writer_version = None;
        s.oldest_reader_version = None;
        apply(&mut s, &[patch("iptables=1.8.11")]);
        assert_eq!(
            (s.newest_writer_version, s.oldest_reader_version),
            (None, None)
        );
    }

    #[test]
    fn old_kernels_are_named_for_nftables_mode() {
        let with = |r: &str| NodeNetfilterProfileStatus {
            kernel: Some(KernelFacts {
                release: r.into(),
                nf_tables: true,
                ip_tables: true,
                modules: None,
            }),
            ..Default::default()
        };
        assert_eq!(
            kernel_too_old_for_nftables_mode(&with("5.10.0-35-amd64")).as_deref(),
            Some("5.10.0-35-amd64")
        );
        assert_eq!(kernel_too_old_for_nftables_mode(&with("5.13.0")), None);
        assert_eq!(
            kernel_too_old_for_nftables_mode(&with("6.12.57+deb13-amd64")),
            None
        );
        assert_eq!(kernel_too_old_for_nftables_mode(&with("")), None);
    }
}
