//! `NodeNetfilterProfile`: one per node, named after it, owned by the Node.
//! The reporter owns the probe fields of the status (field manager
//! `nfguard-reporter`); the controller owns `conditions` and the writer
//! inventory (`nfguard-controller`). Every status field is optional so each
//! manager's server-side apply carries only its own fields.

use super::bounds::{self, MaxItems};
use crate::facts::{
    Backend, Hazard, IptablesFacts, NftVersion, NftablesFacts, UserdataReader, Version,
};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "nfguard.io",
    version = "v1alpha1",
    kind = "NodeNetfilterProfile",
    plural = "nodenetfilterprofiles",
    shortname = "nnp",
    status = "NodeNetfilterProfileStatus",
    printcolumn = r#"{"name":"Backend","type":"string","jsonPath":".status.activeBackend"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.iptables.version"}"#,
    printcolumn = r#"{"name":"MinReader","type":"string","jsonPath":".status.minReaderVersion"}"#,
    printcolumn = r#"{"name":"Hazards","type":"string","jsonPath":".status.hazards[*].code"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    // A profile is a node's by name only (the reporter's admission policy
    // binds a node's token to that name): the spec cannot claim another node.
    validation = Rule::new("has(self.spec.nodeName) && self.spec.nodeName == self.metadata.name")
        .message("spec.nodeName must equal metadata.name (a profile describes the node it is named after)")
        .field_path(".spec.nodeName")
)]
#[serde(rename_all = "camelCase")]
pub struct NodeNetfilterProfileSpec {
    /// The node this profile describes (equal to metadata.name; immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.nodeName is immutable"))]
    #[schemars(length(max = bounds::NODE_NAME))]
    pub node_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeNetfilterProfileStatus {
    // ---- reporter-owned ----
    /// The host's own iptables (from the node's root filesystem).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = bounds::iptables_facts)]
    pub iptables: Option<IptablesFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backends: Option<BackendsFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_backend: Option<ActiveBackend>,
    /// Oldest iptables-nft release that reads every live rule without loss; None when only xt-compat expressions are present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::VERSION))]
    pub min_reader_version: Option<Version>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<BridgeFacts>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_forward: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = bounds::hazard_list)]
    pub hazards: Option<Vec<Hazard>>,
    /// Native nf_tables encodings found in iptables-owned tables, each with
    /// the oldest iptables-nft that reads it without loss (None: every release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = MaxItems(bounds::NATIVE_FEATURES))]
    pub native_features: Option<Vec<NativeFeature>>,
    /// What iptables-wrappers would pick here (nft mangle marker, else legacy
    /// marker in any table, else nft); None when no rule set could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wrapper_backend: Option<Backend>,
    /// Every nf_tables table iptables does not own (kube-proxy's `ip/kube-proxy`,
    /// `inet/firewalld`, a CNI's own), sorted by family then name, with its
    /// counts; at most 64 are listed (`nativeTablesNotListed` says how many
    /// more). Not counted in `backends.nft`. None when nf_tables could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = MaxItems(bounds::NATIVE_TABLES))]
    pub native_tables: Option<Vec<NativeTable>>,
    /// Native tables beyond the 64 listed in `nativeTables`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native_tables_not_listed: Option<u32>,
    /// kube-proxy's mode as the live rules show it; None when either rule set could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_proxy_mode: Option<KubeProxyMode>,
    /// Whether kubelet's marker chains are there, and whether they should be; None when
    /// either rule set could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_markers: Option<KubeletMarkers>,
    /// The host's nftables userspace, and which `nft` readers the live named
    /// sets' userdata crashes (docs/nft-skew.md); absent from older reporters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nftables: Option<NodeNftables>,
    /// RFC 3339 time of the last probe (the reporter's heartbeat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::TIMESTAMP))]
    pub last_probe_time: Option<String>,
    /// Set when the last probe failed; the other fields keep the last good values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::PROBE_ERROR))]
    pub probe_error: Option<String>,
    /// The reporter's heartbeat interval, so the controller can judge freshness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_interval_seconds: Option<u32>,

    // ---- controller-owned ----
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = MaxItems(bounds::PROFILE_CONDITIONS))]
    pub conditions: Option<Vec<Condition>>,
    /// Containers of running pods on this node that can write its rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = MaxItems(bounds::WRITERS))]
    pub writers: Option<Vec<Writer>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::VERSION))]
    pub newest_writer_version: Option<Version>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::VERSION))]
    pub oldest_reader_version: Option<Version>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KernelFacts {
    #[schemars(length(max = bounds::KERNEL_RELEASE))]
    pub release: String,
    /// nf_tables is available: loaded, built in or loadable (see `modules`).
    pub nf_tables: bool,
    /// Legacy ip_tables is available: loaded, built in, loadable, or unknown
    /// (never refused on a guess). False only when the kernel lacks it.
    pub ip_tables: bool,
    /// How the kernel offers each netfilter module; absent from reporters
    /// older than this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modules: Option<KernelModules>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KernelModules {
    pub ip_tables: ModuleState,
    pub ip6_tables: ModuleState,
    pub nf_tables: ModuleState,
    pub nft_compat: ModuleState,
    /// The x_tables extensions Kubernetes' writers load (kube-proxy's
    /// comment, mark, conntrack, statistic, ...; CNIs' CT, TPROXY, socket,
    /// set): iptables-nft loads them through nft_compat, iptables-legacy
    /// directly, and a rule that needs an absent one fails to load (Talos
    /// once dropped xt_CT, xt_MARK and xt_TPROXY). Absent from older reporters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = bounds::XT_MODULES))]
    pub xt: Vec<XtModule>,
}

/// One x_tables extension module and how the kernel offers it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct XtModule {
    /// The module's name (`xt_comment`, `xt_CT`).
    #[schemars(length(max = bounds::MODULE_NAME))]
    pub name: String,
    pub state: ModuleState,
}

/// How the running kernel offers a module: `loaded` now, `builtin`,
/// `module` (installed for this kernel, loads on first use), `absent`, or
/// `unknown` (nothing readable says).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModuleState {
    Loaded,
    Builtin,
    Module,
    Absent,
    #[default]
    Unknown,
}

impl ModuleState {
    /// Whether rules through it can work; `unknown` counts, so nfguard never
    /// refuses on a guess.
    pub fn available(self) -> bool {
        self != ModuleState::Absent
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ModuleState::Loaded => "loaded",
            ModuleState::Builtin => "builtin",
            ModuleState::Module => "module",
            ModuleState::Absent => "absent",
            ModuleState::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BackendsFacts {
    pub nft: BackendFacts,
    pub legacy: BackendFacts,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackendFacts {
    pub tables: u32,
    pub chains: u32,
    pub rules: u32,
    pub hint_chain: bool,
    pub canary_chain: bool,
    /// Tables holding a marker chain, e.g. ["ip/mangle", "ip6/filter"].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = bounds::MARKER_TABLES), inner(length(max = bounds::MARKER_TABLE)))]
    pub marker_tables: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ActiveBackend {
    Nft,
    Legacy,
    Mixed,
    None,
}

impl ActiveBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            ActiveBackend::Nft => "nft",
            ActiveBackend::Legacy => "legacy",
            ActiveBackend::Mixed => "mixed",
            ActiveBackend::None => "none",
        }
    }
}

/// One nf_tables table that iptables does not own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NativeTable {
    /// "ip", "ip6", "inet", "bridge", "netdev", "arp".
    #[schemars(length(max = bounds::FAMILY))]
    pub family: String,
    #[schemars(length(max = bounds::NFT_NAME))]
    pub name: String,
    /// Base and regular chains.
    pub chains: u32,
    pub rules: u32,
    /// Named sets and maps (verdict maps included); anonymous sets are not counted.
    pub sets: u32,
}

/// kube-proxy's mode, derived from the rules it leaves:
/// `nftables`: a native `kube-proxy` table (ip or ip6) with chains;
/// `ipvs`: its IPVS-mode chains (`KUBE-IPVS-FILTER`, `KUBE-IPVS-OUT-FILTER`,
/// `KUBE-LOAD-BALANCER`) or `ip_set` matches in `KUBE-SERVICES`;
/// `iptables`: `KUBE-SERVICES`/`KUBE-NODEPORTS` (nat) or `KUBE-PROXY-CANARY`
/// in an iptables-owned table, without IPVS signs;
/// `mixed`: nftables and iptables or ipvs at once; `none`: no sign of kube-proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum KubeProxyMode {
    Iptables,
    Nftables,
    Ipvs,
    None,
    Mixed,
}

impl KubeProxyMode {
    pub fn as_str(self) -> &'static str {
        match self {
            KubeProxyMode::Iptables => "iptables",
            KubeProxyMode::Nftables => "nftables",
            KubeProxyMode::Ipvs => "ipvs",
            KubeProxyMode::None => "none",
            KubeProxyMode::Mixed => "mixed",
        }
    }
}

/// kubelet's marker chains (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletMarkers {
    pub state: MarkerState,
    /// Why, when the chains are missing or not expected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::NOTE))]
    pub reason: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum MarkerState {
    /// At least one marker chain exists in either backend.
    Present,
    /// The host has an iptables command but neither backend has a marker chain.
    Missing,
    /// The host has no iptables command, so kubelet creates no marker chains.
    NotExpected,
}

impl MarkerState {
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerState::Present => "present",
            MarkerState::Missing => "missing",
            MarkerState::NotExpected => "notExpected",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BridgeFacts {
    pub br_netfilter: bool,
    pub call_iptables: bool,
    pub call_ip6tables: bool,
}

/// The nft side of a node (shared doc §8): libnftables >= 1.1.2 writes set
/// userdata that unfixed older `nft` readers (the host's, kube-proxy's in
/// nftables mode, a CNI's) segfault on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeNftables {
    /// The host's own libnftables and `nft` (from its root filesystem); None
    /// when the host has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = bounds::nftables_facts)]
    pub host: Option<NftablesFacts>,
    /// The oldest unfixed libnftables release that lists every live named
    /// set without crashing; None when every release does (or nf_tables
    /// could not be read). Builds with the fix read every set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::VERSION))]
    pub min_reader: Option<NftVersion>,
    /// A live set's userdata names an expression no released libnftables
    /// parses: only builds with the fix read it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed_reader_required: bool,
    /// Named sets and maps whose userdata crashes a reader older than
    /// `minReader`; None when nf_tables could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crashing_sets: Option<u32>,
    /// The first of them, "family/table/set", sorted, at most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = bounds::CRASHING_EXAMPLES),
        inner(length(max = bounds::OBJECT_REF))
    )]
    pub crashing_examples: Vec<String>,
    /// The tables holding them, "family/table", sorted, at most 64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = bounds::CRASHING_TABLES), inner(length(max = bounds::TABLE_REF)))]
    pub crashing_tables: Vec<String>,
}

/// A standard Kubernetes condition (metav1.Condition shape).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    #[schemars(length(max = bounds::CONDITION_TYPE))]
    pub type_: String,
    /// "True", "False" or "Unknown".
    #[schemars(length(max = bounds::CONDITION_STATUS))]
    pub status: String,
    #[schemars(length(max = bounds::CONDITION_REASON))]
    pub reason: String,
    #[serde(default)]
    #[schemars(length(max = bounds::CONDITION_MESSAGE))]
    pub message: String,
    #[schemars(length(max = bounds::TIMESTAMP))]
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One container that can write the node's rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Writer {
    /// `namespace/name`.
    #[schemars(length(max = bounds::POD_REF))]
    pub pod: String,
    #[schemars(length(max = bounds::CONTAINER_NAME))]
    pub container: String,
    #[schemars(length(max = bounds::IMAGE))]
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::DIGEST))]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::VERSION))]
    pub version: Option<Version>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// The libnftables its image bundles (docs/nft-skew.md): its release,
    /// whether it writes the set userdata that unfixed old readers crash on,
    /// and how it reads userdata it does not know.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::VERSION))]
    pub nft_version: Option<NftVersion>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nft_writes_type_userdata: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nft_userdata_reader: Option<UserdataReader>,
    /// Why version/backend are missing (unresolved image, no iptables, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::NOTE))]
    pub note: Option<String>,
}

/// One kind of native nf_tables encoding present in the live iptables rules.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NativeFeature {
    /// "meta-mark", "transport-ports", "port-range", "tcp-flags", "log", "payload-protocol", ...
    #[schemars(length(max = bounds::FEATURE_NAME))]
    pub feature: String,
    /// Oldest iptables-nft that reads it without loss; None when every release does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = bounds::VERSION))]
    pub min_reader: Option<Version>,
    /// Rules using it.
    pub rules: u32,
    /// The first place it was seen: "ip/filter/KUBE-FIREWALL".
    #[schemars(length(max = bounds::OBJECT_REF))]
    pub example: String,
}

impl NodeNetfilterProfileStatus {
    /// The reporter-owned fields only: the controller's (`conditions`,
    /// `writers`, newest/oldest versions) are dropped. Every field is spelled
    /// out, so a new status field must be given an owner here.
    pub fn reporter_fields(&self) -> Self {
        let s = self;
        NodeNetfilterProfileStatus {
            iptables: s.iptables.clone(),
            kernel: s.kernel.clone(),
            backends: s.backends.clone(),
            active_backend: s.active_backend,
            min_reader_version: s.min_reader_version,
            bridge: s.bridge.clone(),
            ip_forward: s.ip_forward,
            hazards: s.hazards.clone(),
            native_features: s.native_features.clone(),
            wrapper_backend: s.wrapper_backend,
            native_tables: s.native_tables.clone(),
            native_tables_not_listed: s.native_tables_not_listed,
            kube_proxy_mode: s.kube_proxy_mode,
            kubelet_markers: s.kubelet_markers.clone(),
            nftables: s.nftables.clone(),
            last_probe_time: s.last_probe_time.clone(),
            probe_error: s.probe_error.clone(),
            probe_interval_seconds: s.probe_interval_seconds,
            conditions: None,
            writers: None,
            newest_writer_version: None,
            oldest_reader_version: None,
        }
    }
}
