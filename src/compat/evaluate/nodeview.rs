//! A node profile reduced to what the decision table needs: which backend
//! the node's rules live in, the newest writer and the oldest reader of its
//! nft rules (host tools + writer pods), and the live minimum reader.

use crate::api::NodeNetfilterProfile;
use crate::api::{ActiveBackend, KubeProxyMode, MarkerState, NodeNetfilterProfileStatus};
use crate::facts::{Backend, HazardCode, NftVersion, Severity, UserdataReader, Version};

/// Who wrote (or reads) a node's rules.
#[derive(Clone, Copy, Debug)]
pub enum Party<'a> {
    /// The node's own iptables (kubelet, firewalld, the OS).
    Host,
    /// A running writer pod's container (`status.writers`).
    Pod {
        /// An example: DaemonSet pods differ per node, so equality ignores it.
        pod: &'a str,
        container: &'a str,
        image: &'a str,
    },
    /// Only the summary field the controller wrote (no per-writer detail).
    Summary,
}

/// The same writer on every node (container + image), so findings about a
/// DaemonSet's pods aggregate over nodes instead of one reason per pod.
impl PartialEq for Party<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Party::Host, Party::Host) | (Party::Summary, Party::Summary) => true,
            (
                Party::Pod {
                    container: c1,
                    image: i1,
                    ..
                },
                Party::Pod {
                    container: c2,
                    image: i2,
                    ..
                },
            ) => c1 == c2 && i1 == i2,
            _ => false,
        }
    }
}

impl Eq for Party<'_> {}

impl std::hash::Hash for Party<'_> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        if let Party::Pod {
            container, image, ..
        } = self
        {
            container.hash(h);
            image.hash(h);
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Versioned<'a> {
    pub party: Party<'a>,
    pub version: Version,
}

/// Where the node's rules live.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum RulesBackend {
    Nft,
    Legacy,
    /// Both backends hold rules; `kube` is where kubelet's marker chains are.
    Mixed {
        kube: Option<Backend>,
    },
}

impl RulesBackend {
    /// The backend new rules must go to for kube-proxy's chains to be seen.
    pub fn target(self) -> Option<Backend> {
        match self {
            RulesBackend::Nft => Some(Backend::Nft),
            RulesBackend::Legacy => Some(Backend::Legacy),
            RulesBackend::Mixed { kube } => kube,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RulesBackend::Nft => "nft",
            RulesBackend::Legacy => "legacy",
            RulesBackend::Mixed { .. } => "mixed",
        }
    }
}

/// Equal views give equal findings (a writer pod's name aside, see [`Party`]),
/// so `evaluate` judges each distinct view once.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct NodeView<'a> {
    /// None when nothing says (empty rule sets and unknown host backend).
    pub rules: Option<RulesBackend>,
    /// Marker chains per backend; None when the reporter gave no backend facts.
    pub nft_markers: Option<bool>,
    pub legacy_markers: Option<bool>,
    /// False where kubelet writes no marker chains on purpose (a host
    /// without iptables): their absence is then no sign of trouble.
    pub markers_expected: bool,
    pub kernel_nf_tables: Option<bool>,
    pub kernel_ip_tables: Option<bool>,
    pub min_reader: Option<Version>,
    /// Newest iptables-nft writing this node's nft rules.
    pub newest_writer: Option<Versioned<'a>>,
    /// Oldest iptables-nft among writer pods (presumed to save/restore).
    pub oldest_pod_reader: Option<Versioned<'a>>,
    /// The host's own iptables-nft release, when the host uses nft.
    pub host_nft: Option<Version>,
    /// Codes only: that is all a finding keeps of a hazard.
    pub critical_hazards: Vec<HazardCode>,
    /// Who reads and writes the node's nft sets (docs/nft-skew.md).
    pub nft: NftView<'a>,
}

/// A reader or writer of the node's nft sets, with its libnftables release.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct NftParty<'a> {
    pub party: Party<'a>,
    pub version: Option<NftVersion>,
    /// The host's nft is kube-proxy's: nftables mode, and no writer pod
    /// named kube-proxy (a host service runs the host's `nft`).
    pub kube_proxy: bool,
}

/// The live named sets that crash some unfixed `nft` reader.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct LiveSets<'a> {
    /// The oldest unfixed release that reads them all (None with `fixed_required`).
    pub min_reader: Option<NftVersion>,
    /// Only builds with the fix read them.
    pub fixed_required: bool,
    /// The first of them, `family/table/set`.
    pub example: &'a str,
    pub count: u32,
}

/// The nft side of a node, from its profile (the reporter's `nftables`, the
/// controller's writer inventory).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct NftView<'a> {
    /// None: no live set crashes any reader (or nf_tables was not read).
    pub live: Option<LiveSets<'a>>,
    /// A reader that crashes on the userdata libnftables >= 1.1.2 writes:
    /// a writer pod's first (kube-proxy's, a CNI's), else the host's.
    pub crashing_reader: Option<NftParty<'a>>,
    /// A writer pod whose libnftables writes that userdata.
    pub new_writer: Option<NftParty<'a>>,
}

fn nft_view(status: &NodeNetfilterProfileStatus) -> NftView<'_> {
    let n = status.nftables.as_ref();
    let live = n.and_then(|n| {
        let count = n.crashing_sets.filter(|c| *c > 0)?;
        Some(LiveSets {
            min_reader: n.min_reader,
            fixed_required: n.fixed_reader_required,
            example: n.crashing_examples.first().map_or("", String::as_str),
            count,
        })
    });
    fn pod(w: &crate::api::Writer) -> NftParty<'_> {
        NftParty {
            party: Party::Pod {
                pod: &w.pod,
                container: &w.container,
                image: &w.image,
            },
            version: w.nft_version,
            kube_proxy: false,
        }
    }
    let writers = status.writers.as_deref().unwrap_or(&[]);
    let kube_proxy_on_host = matches!(
        status.kube_proxy_mode,
        Some(KubeProxyMode::Nftables | KubeProxyMode::Mixed)
    ) && !writers.iter().any(|w| w.container == "kube-proxy");
    let host = n.and_then(|n| n.host.as_ref());
    let crashing_reader = writers
        .iter()
        .find(|w| w.nft_userdata_reader == Some(UserdataReader::Crashes))
        .map(pod)
        .or_else(|| {
            host.filter(|h| h.userdata_reader == Some(UserdataReader::Crashes))
                .map(|h| NftParty {
                    party: Party::Host,
                    version: h.release(),
                    kube_proxy: kube_proxy_on_host,
                })
        });
    let new_writer = writers
        .iter()
        .find(|w| w.nft_writes_type_userdata == Some(true))
        .map(pod);
    NftView {
        live,
        crashing_reader,
        new_writer,
    }
}

/// None when the status says nothing usable (no host facts, no backends).
pub fn view(status: &NodeNetfilterProfileStatus) -> Option<NodeView<'_>> {
    if status.iptables.is_none() && status.active_backend.is_none() && status.backends.is_none() {
        return None;
    }
    let host = status.iptables.as_ref();
    let host_backend = host.and_then(|f| f.backend);
    let nft_markers = status
        .backends
        .as_ref()
        .map(|b| b.nft.hint_chain || b.nft.canary_chain);
    let legacy_markers = status
        .backends
        .as_ref()
        .map(|b| b.legacy.hint_chain || b.legacy.canary_chain);
    let marker_backend = match (nft_markers, legacy_markers) {
        (Some(true), _) => Some(Backend::Nft),
        (_, Some(true)) => Some(Backend::Legacy),
        _ => None,
    };
    let host_as_rules = |b: Option<Backend>| match b {
        Some(Backend::Nft) => Some(RulesBackend::Nft),
        Some(Backend::Legacy) => Some(RulesBackend::Legacy),
        _ => None,
    };
    let rules = match status.active_backend {
        Some(ActiveBackend::Nft) => Some(RulesBackend::Nft),
        Some(ActiveBackend::Legacy) => Some(RulesBackend::Legacy),
        Some(ActiveBackend::Mixed) => Some(RulesBackend::Mixed {
            kube: marker_backend,
        }),
        // No rules yet: whatever the host's tools will write decides.
        Some(ActiveBackend::None) | None => {
            host_as_rules(host_backend).or_else(|| host_as_rules(marker_backend))
        }
    };
    let nft_target = rules.and_then(RulesBackend::target) == Some(Backend::Nft);

    let host_nft = match host_backend {
        Some(Backend::Nft) => host.and_then(|f| f.version),
        // A wrapper host follows the rules' backend.
        Some(Backend::Wrapper) if nft_target => host.and_then(|f| f.version),
        _ => None,
    };
    let mut newest: Option<Versioned> = host_nft.map(|version| Versioned {
        party: Party::Host,
        version,
    });
    let mut oldest_pod: Option<Versioned> = None;
    for w in status.writers.iter().flatten() {
        let is_nft = match w.backend {
            Some(Backend::Nft) => true,
            Some(Backend::Wrapper) => nft_target,
            _ => false,
        };
        let Some(version) = w.version.filter(|_| is_nft) else {
            continue;
        };
        let v = Versioned {
            party: Party::Pod {
                pod: &w.pod,
                container: &w.container,
                image: &w.image,
            },
            version,
        };
        if newest.is_none_or(|n| version > n.version) {
            newest = Some(v);
        }
        if oldest_pod.is_none_or(|o| version < o.version) {
            oldest_pod = Some(v);
        }
    }
    // The controller's summaries cover writers we may not have in detail.
    if let Some(v) = status.newest_writer_version
        && nft_target
        && newest.is_none_or(|n| v > n.version)
    {
        newest = Some(Versioned {
            party: Party::Summary,
            version: v,
        });
    }
    if let Some(v) = status.oldest_reader_version
        && nft_target
        && status.writers.as_ref().is_none_or(|w| w.is_empty())
        && host_nft != Some(v)
        && oldest_pod.is_none_or(|o| v < o.version)
    {
        oldest_pod = Some(Versioned {
            party: Party::Summary,
            version: v,
        });
    }
    Some(NodeView {
        rules,
        nft_markers,
        legacy_markers,
        markers_expected: status
            .kubelet_markers
            .as_ref()
            .is_none_or(|m| m.state != MarkerState::NotExpected),
        kernel_nf_tables: status.kernel.as_ref().map(|k| k.nf_tables),
        kernel_ip_tables: status.kernel.as_ref().map(|k| k.ip_tables),
        min_reader: status.min_reader_version,
        newest_writer: newest,
        oldest_pod_reader: oldest_pod,
        host_nft,
        critical_hazards: status
            .hazards
            .iter()
            .flatten()
            .filter(|h| h.severity == Severity::Critical)
            .map(|h| h.code)
            .collect(),
        nft: nft_view(status),
    })
}

impl NodeView<'_> {
    /// What an `iptables-wrapper` picks on this node: nft markers -> nft,
    /// legacy markers -> legacy, neither -> nft; and whether that choice is
    /// settled (`false`: the markers kubelet should have written are
    /// missing, so the wrapper guesses). Where kubelet writes none on purpose
    /// the nft default is no guess: the node's backend is judged as usual.
    pub fn wrapper_choice(&self) -> (Backend, bool) {
        match (self.nft_markers, self.legacy_markers) {
            (Some(true), _) => (Backend::Nft, true),
            (_, Some(true)) => (Backend::Legacy, true),
            _ => (Backend::Nft, !self.markers_expected),
        }
    }
}

// `Known` is the common case (every profiled node) and lives on the stack
// for one candidate at a time: boxing it would allocate per candidate.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(super) enum NodeState<'a> {
    /// A Node with no NodeNetfilterProfile.
    Missing,
    /// A profile without usable status; the probe's error, if any.
    Incomplete(Option<&'a str>),
    Known(NodeView<'a>),
}

/// What a node's profile says, for judging (its class, platform aside).
pub(super) fn node_state(profile: Option<&NodeNetfilterProfile>) -> NodeState<'_> {
    match profile {
        None => NodeState::Missing,
        Some(p) => match p.status.as_ref().and_then(view) {
            Some(v) => NodeState::Known(v),
            None => NodeState::Incomplete(p.status.as_ref().and_then(|s| s.probe_error.as_deref())),
        },
    }
}
