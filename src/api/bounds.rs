//! Size bounds of the CRDs' schemas (#37): every string has a `maxLength`,
//! every list a `maxItems`, every map a `maxProperties`, so the API server
//! refuses an oversized write (a compromised reporter or controller cannot
//! grow a profile towards etcd's 1.5 MiB) and CEL cost estimates are finite.
//!
//! A bound is never below what nfguard itself writes: where the producer
//! caps a field, a compile-time assertion beside that cap (in the producer's
//! module: this one depends on nothing above `crate::facts`) says it fits;
//! where it does not, the bound is generous and says so, and
//! [`super::fit`] cuts what would pass it before a write. Lengths count
//! characters, as the API server does.
//! tests/it/install_crds.rs checks that no field is left unbounded, the
//! largest profile the bounds allow, and that the biggest status nfguard's
//! own code produces validates.
//!
//! Types of `crate::facts` are shared with the CLI and image profiles, so
//! their bounds are set here, at the CRD fields that hold them, by
//! [`Bounds`].

use schemars::Schema;

// ---- Kubernetes names ----

/// A Node's name (DNS-1123 subdomain): `spec.nodeName`.
pub const NODE_NAME: usize = 253;
/// A writer's `namespace/name`: a namespace (DNS-1123 label, 63) and a pod
/// name (subdomain, 253), as the API server admitted them.
pub const POD_REF: usize = 63 + 1 + 253;
/// A container name (DNS-1123 label), as the API server admitted it.
pub const CONTAINER_NAME: usize = 63;
/// A container's image as its pod spec has it. The inventory copies it
/// uncapped; every parsable reference fits (name 255, `:` tag 128, `@`
/// digest 135: 520).
pub const IMAGE: usize = 768;
/// A manifest digest, `algorithm:hex` (sha256: 71, sha512: 135).
pub const DIGEST: usize = 256;

// ---- versions ----

/// An iptables or nftables release ("1.8.7", "1.0.6.1"): u16 parts, at most
/// 17 (three) or 23 (four) characters.
pub const VERSION: usize = 32;
/// A package database's version string ("1.8.7-1", "1:1.8.9-2"), copied
/// from the host's database uncapped; real ones are under 64.
pub const PACKAGE_VERSION: usize = 256;
/// `uname -r`: the kernel's `utsname.release` holds 64 bytes and a NUL.
pub const KERNEL_RELEASE: usize = 64;
/// A kernel module's name (the kernel's MODULE_NAME_LEN is 56).
pub const MODULE_NAME: usize = 64;
/// The x_tables extensions a profile lists: those nfguard checks (12,
/// `node::xt_modules::EXTENSIONS`).
pub const XT_MODULES: usize = 16;

// ---- nf_tables names ----

/// A family as a profile spells it ("ip6", "netdev", "family42").
pub const FAMILY: usize = 16;
/// An nf_tables table, chain or set name: the kernel's NFT_NAME_MAXLEN is
/// 256 with the NUL (x_tables names are shorter); decoded lossily, each
/// byte is at most one character.
pub const NFT_NAME: usize = 255;
/// "family/table".
pub const TABLE_REF: usize = FAMILY + 1 + NFT_NAME;
/// "family/table/chain" or "family/table/set".
pub const OBJECT_REF: usize = TABLE_REF + 1 + NFT_NAME;
/// Tables holding a marker chain: iptables-owned tables only (ip and ip6,
/// five names), "ip6/security" the longest.
pub const MARKER_TABLES: usize = 16;
pub const MARKER_TABLE: usize = 32;
/// Native tables listed (`nativeTablesNotListed` counts the rest;
/// `node::native::MAX_LISTED`).
pub const NATIVE_TABLES: usize = 64;
/// Kinds of native encodings (`min_reader::rule_features` knows 7).
pub const NATIVE_FEATURES: usize = 16;
/// A native feature's name ("transport-ports").
pub const FEATURE_NAME: usize = 64;
/// Crashing sets named ("family/table/set"; `node::nft_skew::MAX_EXAMPLES`).
pub const CRASHING_EXAMPLES: usize = 16;
/// Tables holding them ("family/table"; `node::nft_skew::MAX_TABLES`).
pub const CRASHING_TABLES: usize = 64;

// ---- hazards ----

/// Hazards of a profile: at most 2 x (20 FirewallUnconditionalDrop + 1
/// "and N more"), one of each of the other 8 kinds and two ProbeFailed
/// (`node::hazards::assess`; the reporter's own ProbeFailed replaces
/// those): 52.
pub const HAZARDS: usize = 56;
/// A hazard's message. Most are under 1 KiB; NftSetsCrashHostNft names up
/// to 16 sets (kube-proxy's affinity sets run to ~120 characters), and
/// only names of 200 and more, near the kernel's limit, go past this.
pub const HAZARD_MESSAGE: usize = 4096;
/// The offending rule as iptables prints it (`kernel::render_rule` of an
/// unconditional drop): `-A` a chain (255), a comment (255), `-j DROP`.
pub const HAZARD_RULE: usize = 768;

// ---- the host's iptables and nftables (`rootfs::collect`) ----

/// Evidence of one tool: up to `MAX_HITS` package hits and `MAX_NOTES`
/// notes from each of dpkg, apk and rpm, one per command path and multi
/// binary (iptables) or library directory, library and program (nftables),
/// and two labels.
pub const EVIDENCE: usize = 128;
/// A path as evidence shows it: `rootfs::paths::shorten` keeps 256
/// characters and says how long the rest was (at most 288).
pub const EVIDENCE_PATH: usize = 320;
/// What a piece of evidence says: a link chain, a version literal, a
/// package and its version, why a (shortened) path could not be read.
pub const EVIDENCE_DETAIL: usize = 512;
/// Disagreements of one tool: one per package hit of each database, the
/// binaries or files, the labels.
pub const CONFLICTS: usize = 64;
/// One disagreement: two sources, a package's version and its database's
/// (shortened) path; 641 with a package version at [`PACKAGE_VERSION`].
pub const CONFLICT: usize = 768;

// ---- free text and times ----

/// `probeError`: the nft, legacy and host probe errors joined.
pub const PROBE_ERROR: usize = 4096;
/// Short free text: `kubeletMarkers.reason` (fixed sentences), a writer's
/// `note` (fixed sentences and a registry's error, which the inventory
/// quotes uncapped).
pub const NOTE: usize = 1024;
/// An RFC 3339 time (`lastProbeTime`, `lastTransitionTime`): 35 characters
/// with nanoseconds.
pub const TIMESTAMP: usize = 64;

// ---- conditions (metav1.Condition's own bounds) ----

/// Conditions of a profile (Fresh, Healthy, Consistent) and of a policy
/// (Valid, Accepted): the controller writes each type once.
/// (`controller::conditions::ConditionType`, `policy_status::PolicyConditionType`).
pub const PROFILE_CONDITIONS: usize = 3;
pub const POLICY_CONDITIONS: usize = 2;
pub const CONDITION_TYPE: usize = 316;
/// "True", "False" or "Unknown".
pub const CONDITION_STATUS: usize = 16;
pub const CONDITION_REASON: usize = 1024;
pub const CONDITION_MESSAGE: usize = 32768;

// ---- the controller's writer inventory ----

/// Writer containers of one node (hostNetwork and NET_ADMIN, or
/// privileged): kube-proxy, a CNI agent and its init containers, a few
/// node agents; 30 is a busy node. The inventory does not cap them.
pub const WRITERS: usize = 64;

// ---- NetfilterPolicy spec (written by people) ----

/// Exempt-image globs. A policy's `Valid` condition quotes them all when
/// they cannot be compiled together, so their total stays under
/// [`CONDITION_MESSAGE`].
pub const EXEMPT_IMAGES: usize = 64;
pub const IMAGE_PATTERN: usize = 255;
/// A label selector's `matchLabels` and `matchExpressions`.
pub const SELECTOR_LABELS: usize = 64;
pub const SELECTOR_EXPRESSIONS: usize = 16;
pub const SELECTOR_VALUES: usize = 128;
/// A label key: a DNS subdomain prefix (253), `/`, a name (63).
pub const LABEL_KEY: usize = 253 + 1 + 63;
/// A label value (a longer one matches no label).
pub const LABEL_VALUE: usize = 63;
/// "In", "NotIn", "Exists", "DoesNotExist".
pub const SELECTOR_OPERATOR: usize = 16;

const _: () = assert!(EXEMPT_IMAGES * (IMAGE_PATTERN + 1) + 256 <= CONDITION_MESSAGE);

/// One bound: `maxLength`, `maxItems` or `maxProperties`; a map's keys,
/// which a structural schema cannot bound, by a validation rule.
#[derive(Clone, Copy, Debug)]
pub enum Limit {
    Len(usize),
    Items(usize),
    Props(usize),
    KeyLen(usize),
}

/// A schemars transform that sets bounds on a field's schema at paths below
/// it: property names separated by `.`, `[]` for a list's items, `""` for
/// the field itself (`"evidence[].path"`). `Option`'s null alternative is
/// seen through. A path that is not there, or a bound on the wrong type,
/// panics when the CRD is generated (every test that builds it fails).
#[derive(Clone, Copy, Debug)]
pub struct Bounds(pub &'static [(&'static str, Limit)]);

use schemars::transform::Transform;

impl Transform for Bounds {
    fn transform(&mut self, schema: &mut Schema) {
        for (path, limit) in self.0 {
            let node = at(schema, path);
            let (key, kind, value) = match *limit {
                Limit::Len(n) => ("maxLength", "string", n),
                Limit::Items(n) => ("maxItems", "array", n),
                Limit::Props(n) => ("maxProperties", "object", n),
                Limit::KeyLen(n) => {
                    assert!(has_type(node, "object"), "key bound at {path:?}: {node:?}");
                    let rule = serde_json::json!({
                        "rule": format!("self.all(k, size(k) <= {n})"),
                        "message": format!("keys must be at most {n} characters"),
                    });
                    node.insert("x-kubernetes-validations".into(), vec![rule].into());
                    continue;
                }
            };
            assert!(
                has_type(node, kind),
                "bound {key} at {path:?}: not a {kind} schema: {node:?}"
            );
            node.insert(key.into(), value.into());
        }
    }
}

/// `type` is `ty`, or a list that holds it (`["string", "null"]`).
fn has_type(schema: &Schema, ty: &str) -> bool {
    match schema.get("type") {
        Some(serde_json::Value::String(t)) => t == ty,
        Some(serde_json::Value::Array(ts)) => ts.iter().any(|t| t == ty),
        _ => false,
    }
}

/// The schema itself, or the non-null alternative of `Option`'s `anyOf`.
fn unwrap_null(schema: &mut Schema) -> &mut Schema {
    if schema.get("anyOf").is_none() {
        return schema;
    }
    schema
        .get_mut("anyOf")
        .and_then(|v| v.as_array_mut())
        .into_iter()
        .flatten()
        .filter_map(|v| <&mut Schema>::try_from(v).ok())
        .find(|s| s.get("type").is_none_or(|t| t != "null"))
        .expect("an anyOf with a non-null alternative")
}

/// The subschema at `path`: `.`-separated property names, each followed by
/// `[]` (a list's items) or `{}` (a map's values) as often as it nests.
fn at<'s>(schema: &'s mut Schema, path: &str) -> &'s mut Schema {
    let mut node = unwrap_null(schema);
    for segment in path.split('.').filter(|s| !s.is_empty()) {
        let split = segment.find(['[', '{']).unwrap_or(segment.len());
        let (name, nesting) = segment.split_at(split);
        if !name.is_empty() {
            node = node
                .get_mut("properties")
                .and_then(|p| p.get_mut(name))
                .and_then(|v| <&mut Schema>::try_from(v).ok())
                .map(unwrap_null)
                .unwrap_or_else(|| panic!("bound at {path:?}: no property {name:?}"));
        }
        for step in nesting.as_bytes().chunks(2) {
            let key = match step {
                b"[]" => "items",
                b"{}" => "additionalProperties",
                _ => panic!("bound at {path:?}: `[]` or `{{}}` expected"),
            };
            node = node
                .get_mut(key)
                .and_then(|v| <&mut Schema>::try_from(v).ok())
                .map(unwrap_null)
                .unwrap_or_else(|| panic!("bound at {path:?}: {name:?} has no {key}"));
        }
    }
    node
}

/// `maxItems` on an optional list (the derive's `length` does not see
/// through `Option<Vec<_>>`); its items carry their own bounds.
#[derive(Clone, Copy, Debug)]
pub struct MaxItems(pub usize);

impl Transform for MaxItems {
    fn transform(&mut self, schema: &mut Schema) {
        let node = unwrap_null(schema);
        assert!(has_type(node, "array"), "maxItems on {node:?}");
        node.insert("maxItems".into(), self.0.into());
    }
}

use Limit::{Items, KeyLen, Len, Props};

/// A tool's facts: `IptablesFacts` and `NftablesFacts` share these fields.
const TOOL_FACTS: &[(&str, Limit)] = &[
    ("version", Len(VERSION)),
    ("packageVersion", Len(PACKAGE_VERSION)),
    ("evidence", Items(EVIDENCE)),
    ("evidence[].path", Len(EVIDENCE_PATH)),
    ("evidence[].detail", Len(EVIDENCE_DETAIL)),
    ("conflicts", Items(CONFLICTS)),
    ("conflicts[]", Len(CONFLICT)),
];

/// `IptablesFacts` (the host's iptables).
pub fn iptables_facts(schema: &mut Schema) {
    Bounds(TOOL_FACTS).transform(schema);
}

/// `NftablesFacts` (the host's nftables).
pub fn nftables_facts(schema: &mut Schema) {
    Bounds(TOOL_FACTS).transform(schema);
}

/// `Vec<Hazard>`.
pub fn hazard_list(schema: &mut Schema) {
    Bounds(&[
        ("", Items(HAZARDS)),
        ("[].message", Len(HAZARD_MESSAGE)),
        ("[].table", Len(TABLE_REF)),
        ("[].chain", Len(NFT_NAME)),
        ("[].rule", Len(HAZARD_RULE)),
    ])
    .transform(schema);
}

/// A k8s-openapi `LabelSelector`.
pub fn label_selector(schema: &mut Schema) {
    Bounds(&[
        ("matchLabels", Props(SELECTOR_LABELS)),
        ("matchLabels", KeyLen(LABEL_KEY)),
        ("matchLabels{}", Len(LABEL_VALUE)),
        ("matchExpressions", Items(SELECTOR_EXPRESSIONS)),
        ("matchExpressions[].key", Len(LABEL_KEY)),
        ("matchExpressions[].operator", Len(SELECTOR_OPERATOR)),
        ("matchExpressions[].values", Items(SELECTOR_VALUES)),
        ("matchExpressions[].values[]", Len(LABEL_VALUE)),
    ])
    .transform(schema);
}
