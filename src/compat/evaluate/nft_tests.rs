//! The nft rows of the decision table (docs/nft-skew.md), fed straight in:
//! Debian's releases as the classification reads their package versions.

use super::*;
use crate::api::{
    ActiveBackend, KubeProxyMode, NodeNetfilterProfile, NodeNetfilterProfileSpec,
    NodeNetfilterProfileStatus, NodeNftables, Writer,
};
use crate::facts::{ImageProfile, IptablesFacts, NftablesFacts, Platform};
use serde_json::json;

const BULLSEYE: &str = "0.9.8-3.1+deb11u2";
const BOOKWORM: &str = "1.0.6-2+deb12u2";
const TRIXIE: &str = "1.1.3-1";
const FORKY: &str = "1.1.7-3";
const K8S_PATCHED: &str = "1.0.6-2.1+k8s1";

fn nft(pkg: &str) -> NftablesFacts {
    NftablesFacts {
        version: pkg.parse().ok(),
        package_version: Some(pkg.into()),
        program: true,
        ..Default::default()
    }
    .classified(false)
}

/// A node: the host's nft, its writer pods' nft, the live sets' minimum reader.
#[derive(Default)]
struct N {
    host: Option<&'static str>,
    writers: Vec<(&'static str, &'static str)>,
    live_min: Option<&'static str>,
    live_fixed_only: bool,
    kube_proxy_nftables: bool,
}

fn profile(name: &str, n: &N) -> NodeNetfilterProfile {
    let mut p = NodeNetfilterProfile::new(
        name,
        NodeNetfilterProfileSpec {
            node_name: Some(name.into()),
        },
    );
    let live = n.live_min.is_some() || n.live_fixed_only;
    p.status = Some(NodeNetfilterProfileStatus {
        iptables: Some(IptablesFacts {
            version: Some(Version::new(1, 8, 9)),
            backend: Some(Backend::Nft),
            ..Default::default()
        }),
        active_backend: Some(ActiveBackend::Nft),
        kube_proxy_mode: n.kube_proxy_nftables.then_some(KubeProxyMode::Nftables),
        nftables: Some(NodeNftables {
            host: n.host.map(nft),
            min_reader: n.live_min.map(|v| v.parse().unwrap()),
            fixed_reader_required: n.live_fixed_only,
            crashing_sets: Some(u32::from(live)),
            crashing_examples: if live { vec!["ip/t/s".into()] } else { vec![] },
            crashing_tables: if live { vec!["ip/t".into()] } else { vec![] },
        }),
        writers: Some(
            n.writers
                .iter()
                .map(|(name, pkg)| {
                    let f = nft(pkg);
                    Writer {
                        pod: format!("kube-system/{name}-x1"),
                        container: (*name).into(),
                        image: format!("{name}:v1"),
                        nft_version: f.release(),
                        nft_writes_type_userdata: f.writes_type_userdata,
                        nft_userdata_reader: f.userdata_reader,
                        ..Default::default()
                    }
                })
                .collect(),
        ),
        ..Default::default()
    });
    p
}

fn workload(host_network: bool) -> Workload {
    let obj = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"selector": {}, "template": {"metadata": {}, "spec": {
            "hostNetwork": host_network,
            "containers": [{"name": "agent", "image": "agent:v2",
                "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}],
        }}},
    });
    Workload::from_value(&obj).unwrap().unwrap()
}

/// The workload (whose image bundles `image_nft`, and iptables 1.8.9 unless
/// `no_iptables`) judged on `node` under the default policy.
fn judge(image_nft: Option<&str>, node: &N, host_network: bool) -> Decision {
    let w = workload(host_network);
    let profiles = [profile("n1", node)];
    let refs: Vec<&NodeNetfilterProfile> = profiles.iter().collect();
    let default = Platform::linux_amd64();
    let cands = select_candidates(&w, &refs, &[], &default, None);
    let policy = EffectivePolicy::default();
    let mut res = ImageResolutions::new();
    let containers = w.containers();
    for key in super::images_to_resolve(&containers, None, &cands, &policy) {
        let profile = ImageProfile {
            image: key.image.clone(),
            digest: format!("sha256:{}", "cd".repeat(32)),
            platform: "linux/amd64".into(),
            iptables: Some(IptablesFacts {
                version: Some(Version::new(1, 8, 9)),
                backend: Some(Backend::Nft),
                ..Default::default()
            }),
            nftables: image_nft.map(nft),
        };
        res.insert_profile(&key.image, &key.platform, profile);
    }
    super::evaluate(&SubjectInput {
        containers: &containers,
        exempt_reason: None,
        candidates: &cands,
        images: &res,
        policy: &policy,
        min_severity: Severity::Info,
    })
}

fn nft_reasons(d: &Decision) -> Vec<(ReasonCode, Severity)> {
    d.reasons
        .iter()
        .filter(|r| {
            matches!(
                r.code,
                ReasonCode::NftNewWriterOldReader | ReasonCode::NftOldReaderNewSets
            )
        })
        .map(|r| (r.code, r.severity))
        .collect()
}

#[test]
fn a_new_writer_is_refused_where_kube_proxys_nft_is_unfixed_naming_it() {
    let node = N {
        host: Some(BOOKWORM),
        writers: vec![("kube-proxy", BOOKWORM)],
        ..Default::default()
    };
    let d = judge(Some(TRIXIE), &node, true);
    assert_eq!(d.verdict, Verdict::Deny, "{:#?}", d.reasons);
    assert_eq!(
        nft_reasons(&d),
        [(ReasonCode::NftNewWriterOldReader, Severity::Critical)]
    );
    let r = &d.reasons[d
        .reasons
        .iter()
        .position(|r| r.code == ReasonCode::NftNewWriterOldReader)
        .unwrap()];
    assert!(r.message.contains("kube-proxy"), "{}", r.message);
    assert!(r.message.contains("nft 1.0.6"), "{}", r.message);
    assert_eq!(
        r.image_nft_version.map(|v| v.to_string()).as_deref(),
        Some("1.1.3")
    );
    assert_eq!(
        r.other_nft_version.map(|v| v.to_string()).as_deref(),
        Some("1.0.6")
    );
    assert!(r.remedy.as_deref().unwrap().contains("1.1.4"));
}

#[test]
fn a_host_kube_proxy_in_nftables_mode_makes_the_hosts_nft_critical() {
    let node = N {
        host: Some(BOOKWORM),
        kube_proxy_nftables: true,
        ..Default::default()
    };
    let d = judge(Some(TRIXIE), &node, true);
    assert_eq!(
        nft_reasons(&d),
        [(ReasonCode::NftNewWriterOldReader, Severity::Critical)]
    );
    assert!(
        d.reasons.iter().any(|r| r
            .message
            .contains("kube-proxy (nftables mode, on the host) through the host's nft 1.0.6")),
        "{:#?}",
        d.reasons
    );
    // kube-proxy as a pod: its own nft speaks (here fixed), the host's only warns.
    let pod = N {
        host: Some(BOOKWORM),
        writers: vec![("kube-proxy", K8S_PATCHED)],
        kube_proxy_nftables: true,
        ..Default::default()
    };
    assert_eq!(
        nft_reasons(&judge(Some(TRIXIE), &pod, true)),
        [(ReasonCode::NftNewWriterOldReader, Severity::Warning)]
    );
}

#[test]
fn only_the_hosts_unfixed_nft_is_a_warning() {
    let node = N {
        host: Some(BOOKWORM),
        ..Default::default()
    };
    let d = judge(Some(TRIXIE), &node, true);
    assert_eq!(
        nft_reasons(&d),
        [(ReasonCode::NftNewWriterOldReader, Severity::Warning)]
    );
    assert_eq!(d.verdict, Verdict::Warn);
}

#[test]
fn an_unfixed_reader_is_refused_on_live_sets_it_crashes_on_and_beside_new_writers() {
    // The node already holds sets that 1.1.2+ wrote.
    let live = N {
        host: Some(TRIXIE),
        live_min: Some("1.1.2"),
        ..Default::default()
    };
    let d = judge(Some(BOOKWORM), &live, true);
    assert_eq!(
        nft_reasons(&d),
        [(ReasonCode::NftOldReaderNewSets, Severity::Critical)]
    );
    let r = d
        .reasons
        .iter()
        .find(|r| r.code == ReasonCode::NftOldReaderNewSets)
        .unwrap();
    assert!(r.message.contains("ip/t/s"), "{}", r.message);
    assert_eq!(
        r.nft_min_reader.map(|v| v.to_string()).as_deref(),
        Some("1.1.2")
    );
    // A writer pod with a new libnftables will write them.
    let writer = N {
        host: Some(TRIXIE),
        writers: vec![("calico-node", TRIXIE)],
        ..Default::default()
    };
    let d = judge(Some(BULLSEYE), &writer, true);
    assert_eq!(
        nft_reasons(&d),
        [(ReasonCode::NftOldReaderNewSets, Severity::Critical)]
    );
    assert!(d.reasons.iter().any(|r| r.message.contains("calico-node")));
    // A `typeof ... : verdict` map (0.9.9+) crashes 0.9.8 but not 1.0.6.
    let verdict = N {
        host: Some(BOOKWORM),
        live_min: Some("0.9.9"),
        ..Default::default()
    };
    assert_eq!(nft_reasons(&judge(Some(BOOKWORM), &verdict, true)), []);
    assert_eq!(
        nft_reasons(&judge(Some(BULLSEYE), &verdict, true)),
        [(ReasonCode::NftOldReaderNewSets, Severity::Critical)]
    );
}

#[test]
fn no_false_refusal() {
    let unfixed = N {
        host: Some(BOOKWORM),
        writers: vec![("kube-proxy", BOOKWORM)],
        ..Default::default()
    };
    // Old writers only: 1.0.6 next to 1.0.6 and 0.9.8.
    assert_eq!(nft_reasons(&judge(Some(BOOKWORM), &unfixed, true)), []);
    assert_eq!(nft_reasons(&judge(Some(BULLSEYE), &unfixed, true)), []);
    // Every reader fixed or current: the new writer harms nobody.
    let fixed = N {
        host: Some(FORKY),
        writers: vec![("kube-proxy", K8S_PATCHED)],
        ..Default::default()
    };
    assert_eq!(nft_reasons(&judge(Some(TRIXIE), &fixed, true)), []);
    let current = N {
        host: Some(TRIXIE),
        writers: vec![("kube-proxy", TRIXIE)],
        live_min: Some("1.1.2"),
        ..Default::default()
    };
    assert_eq!(nft_reasons(&judge(Some(FORKY), &current, true)), []);
    assert_eq!(nft_reasons(&judge(Some(TRIXIE), &current, true)), []);
    // A fixed reader on sets only fixed readers read.
    let future = N {
        host: Some(FORKY),
        live_fixed_only: true,
        ..Default::default()
    };
    assert_eq!(nft_reasons(&judge(Some(K8S_PATCHED), &future, true)), []);
    assert_eq!(
        nft_reasons(&judge(Some(TRIXIE), &future, true)),
        [(ReasonCode::NftOldReaderNewSets, Severity::Critical)]
    );
    // No nft in the image; or its own netns (the node's sets are not its).
    assert_eq!(nft_reasons(&judge(None, &unfixed, true)), []);
    assert_eq!(nft_reasons(&judge(Some(TRIXIE), &unfixed, false)), []);
}
