//! Every decision-table row, the scope rules, candidate selection and the
//! policy helpers, fed straight in (no I/O).

use super::*;
use crate::api::{
    ActiveBackend, BackendFacts, BackendsFacts, KernelFacts, KubeletMarkers, MarkerState,
    NetfilterPolicy, NetfilterPolicySpec, NodeNetfilterProfile, NodeNetfilterProfileSpec,
    NodeNetfilterProfileStatus, PolicyAction, UnresolvedAction, Writer,
};
use crate::facts::{Hazard, HazardCode, ImageProfile, IptablesFacts, Severity};
use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use std::collections::BTreeMap;

const PLATFORM: &str = "linux/amd64";

fn pf(s: &str) -> crate::facts::Platform {
    s.parse().unwrap()
}

/// A whole workload's judgement, as `crate::judgement` prepares it.
struct EvalInput<'a> {
    workload: &'a Workload,
    candidates: &'a [Candidate<'a>],
    images: &'a ImageResolutions,
    policy: &'a EffectivePolicy,
}

fn evaluate(input: &EvalInput<'_>) -> Decision {
    let w = input.workload;
    super::evaluate(&SubjectInput {
        containers: &w.containers(),
        exempt_reason: w.exempt_reason(),
        candidates: input.candidates,
        images: input.images,
        policy: input.policy,
        min_severity: Severity::Info,
    })
}

fn images_to_resolve(
    w: &Workload,
    candidates: &[Candidate<'_>],
    policy: &EffectivePolicy,
) -> Vec<ImageKey> {
    super::images_to_resolve(&w.containers(), w.exempt_reason(), candidates, policy)
}

fn v(s: &str) -> Version {
    s.parse().unwrap()
}

struct C {
    name: &'static str,
    image: &'static str,
    caps: &'static [&'static str],
    privileged: bool,
}

fn c(name: &'static str, image: &'static str, caps: &'static [&'static str]) -> C {
    C {
        name,
        image,
        caps,
        privileged: false,
    }
}

fn container_json(c: &C) -> serde_json::Value {
    json!({
        "name": c.name,
        "image": c.image,
        "securityContext": {"privileged": c.privileged, "capabilities": {"add": c.caps}},
    })
}

fn daemonset(host_network: bool, containers: &[C]) -> Workload {
    daemonset_with(host_network, containers, json!({}))
}

fn daemonset_with(host_network: bool, containers: &[C], extra_spec: serde_json::Value) -> Workload {
    let mut spec = json!({
        "hostNetwork": host_network,
        "containers": containers.iter().map(container_json).collect::<Vec<_>>(),
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, val) in e {
            s.insert(k.clone(), val.clone());
        }
    }
    let obj = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kube-router", "namespace": "kube-system"},
        "spec": {"selector": {}, "template": {"metadata": {}, "spec": spec}},
    });
    Workload::from_value(&obj).unwrap().unwrap()
}

#[derive(Default, Clone)]
struct P {
    host: Option<(&'static str, Backend)>,
    active: Option<ActiveBackend>,
    min_reader: Option<&'static str>,
    nft_markers: bool,
    legacy_markers: bool,
    writers: Vec<(&'static str, Backend)>,
    kernel: Option<(bool, bool)>,
    hazards: Vec<HazardCode>,
    /// The reporter's `kubeletMarkers: notExpected` (a host without iptables).
    markers_not_expected: bool,
}

fn nft_node(host: &'static str) -> P {
    P {
        host: Some((host, Backend::Nft)),
        active: Some(ActiveBackend::Nft),
        nft_markers: true,
        ..P::default()
    }
}

fn legacy_node(host: &'static str) -> P {
    P {
        host: Some((host, Backend::Legacy)),
        active: Some(ActiveBackend::Legacy),
        legacy_markers: true,
        ..P::default()
    }
}

fn profile(name: &str, p: &P) -> NodeNetfilterProfile {
    let mut prof = NodeNetfilterProfile::new(
        name,
        NodeNetfilterProfileSpec {
            node_name: Some(name.into()),
        },
    );
    let bf = |m: bool| BackendFacts {
        tables: 1,
        chains: 1,
        rules: 1,
        hint_chain: m,
        canary_chain: m,
        marker_tables: vec![],
    };
    prof.status = Some(NodeNetfilterProfileStatus {
        iptables: p.host.map(|(ver, b)| IptablesFacts {
            version: Some(v(ver)),
            backend: Some(b),
            ..Default::default()
        }),
        active_backend: p.active,
        kubelet_markers: p.markers_not_expected.then(|| KubeletMarkers {
            state: MarkerState::NotExpected,
            reason: Some("the host has no iptables command".into()),
        }),
        min_reader_version: p.min_reader.map(v),
        backends: Some(BackendsFacts {
            nft: bf(p.nft_markers),
            legacy: bf(p.legacy_markers),
        }),
        kernel: p.kernel.map(|(nf, ip)| KernelFacts {
            release: "6.1".into(),
            nf_tables: nf,
            ip_tables: ip,
            modules: None,
        }),
        writers: (!p.writers.is_empty()).then(|| {
            p.writers
                .iter()
                .enumerate()
                .map(|(i, (ver, b))| Writer {
                    pod: format!("kube-system/writer-{i}"),
                    container: "main".into(),
                    image: format!("writer:{i}"),
                    version: Some(v(ver)),
                    backend: Some(*b),
                    ..Default::default()
                })
                .collect()
        }),
        hazards: (!p.hazards.is_empty()).then(|| {
            p.hazards
                .iter()
                .map(|code| Hazard {
                    code: *code,
                    severity: Severity::Critical,
                    message: "x".into(),
                    backend: None,
                    table: None,
                    chain: None,
                    rule: None,
                })
                .collect()
        }),
        ..Default::default()
    });
    prof
}

fn image(reference: &str, version: Option<&str>, backend: Option<Backend>) -> ImageProfile {
    ImageProfile {
        image: reference.into(),
        digest: format!("sha256:{}", "ab".repeat(32)),
        platform: PLATFORM.into(),
        iptables: Some(IptablesFacts {
            version: version.map(v),
            backend,
            ..Default::default()
        }),
        nftables: None,
    }
}

struct Run {
    decision: Decision,
}

impl Run {
    fn codes(&self) -> Vec<ReasonCode> {
        self.decision.reasons.iter().map(|r| r.code).collect()
    }
    fn reason(&self, code: ReasonCode) -> &Reason {
        self.decision
            .reasons
            .iter()
            .find(|r| r.code == code)
            .unwrap_or_else(|| panic!("no {code} in {:#?}", self.decision.reasons))
    }
}

/// Evaluate `w` on the given nodes with images resolved from `imgs`
/// (reference, version, backend) under `policy`.
fn run_with(
    w: &Workload,
    nodes: &[(&str, P)],
    imgs: &[(&str, Option<&str>, Option<Backend>)],
    policy: &EffectivePolicy,
) -> Run {
    let profiles: Vec<NodeNetfilterProfile> = nodes.iter().map(|(n, p)| profile(n, p)).collect();
    let refs: Vec<&NodeNetfilterProfile> = profiles.iter().collect();
    let cands = select_candidates(w, &refs, &[], &pf(DEFAULT_PLATFORM), None);
    let mut res = ImageResolutions::new();
    for key in images_to_resolve(w, &cands, policy) {
        match imgs.iter().find(|(r, _, _)| *r == key.image) {
            Some((r, ver, b)) => res.insert_profile(r, &key.platform, image(r, *ver, *b)),
            None => res.insert_error(&key.image, &key.platform, "connection refused"),
        }
    }
    let decision = evaluate(&EvalInput {
        workload: w,
        candidates: &cands,
        images: &res,
        policy,
    });
    Run { decision }
}

fn run(w: &Workload, nodes: &[(&str, P)], imgs: &[(&str, Option<&str>, Option<Backend>)]) -> Run {
    run_with(w, nodes, imgs, &EffectivePolicy::default())
}

fn host_writer(image: &'static str) -> Workload {
    daemonset(true, &[c("main", image, &["NET_ADMIN"])])
}

// ---- decision table rows ----

#[test]
fn row_known_bad_release_is_unsafe_on_any_node() {
    for node in [nft_node("1.8.9"), legacy_node("1.8.9")] {
        let r = run(
            &host_writer("bad:1"),
            &[("n1", node.clone())],
            &[("bad:1", Some("1.8.2"), Some(Backend::Legacy))],
        );
        assert!(r.codes().contains(&ReasonCode::KnownBadIptables));
        assert_eq!(r.decision.verdict, Verdict::Deny);
    }
}

#[test]
fn row_legacy_node_fixed_nft_image_is_unsafe() {
    let r = run(
        &host_writer("nft:1"),
        &[("n1", legacy_node("1.8.9"))],
        &[("nft:1", Some("1.8.9"), Some(Backend::Nft))],
    );
    let reason = r.reason(ReasonCode::BackendMismatch);
    assert_eq!(reason.severity, Severity::Critical);
    assert_eq!(reason.node.as_deref(), Some("n1"));
    assert_eq!(reason.node_backend.as_deref(), Some("legacy"));
    assert!(
        reason
            .remedy
            .as_deref()
            .unwrap()
            .contains("nfguard.io/iptables-backend=nft")
    );
    assert_eq!(r.decision.verdict, Verdict::Deny);
}

#[test]
fn row_nft_node_fixed_legacy_image_is_unsafe() {
    let r = run(
        &host_writer("leg:1"),
        &[("n1", nft_node("1.8.9"))],
        &[("leg:1", Some("1.8.9"), Some(Backend::Legacy))],
    );
    assert_eq!(r.codes(), vec![ReasonCode::BackendMismatch]);
    assert_eq!(r.decision.verdict, Verdict::Deny);
}

/// A node whose rules live only in native nf_tables tables (kube-proxy in
/// nftables mode, no iptables command on the host): the reporter says
/// `activeBackend: nft`, no marker chains, no live minimum reader (that is
/// computed over iptables-owned rules only).
fn native_only_node() -> P {
    P {
        host: None,
        active: Some(ActiveBackend::Nft),
        kernel: Some((true, true)),
        markers_not_expected: true,
        ..P::default()
    }
}

#[test]
fn wrapper_on_a_host_without_iptables_is_judged_not_warned_about_markers() {
    // kubelet writes no marker chains there on purpose: the wrapper's nft
    // default is no guess, and the node's rules are nft.
    let r = run(
        &host_writer("wrap:1"),
        &[("n1", native_only_node())],
        &[("wrap:1", Some("1.8.9"), Some(Backend::Wrapper))],
    );
    assert_eq!(r.codes(), vec![], "{:#?}", r.decision.reasons);
    assert_eq!(r.decision.verdict, Verdict::Allow);
    // The same node with legacy rules: the nft default is judged, and wrong.
    let mut node = native_only_node();
    node.active = Some(ActiveBackend::Legacy);
    let r = run(
        &host_writer("wrap:1"),
        &[("n1", node)],
        &[("wrap:1", Some("1.8.9"), Some(Backend::Wrapper))],
    );
    assert!(
        r.codes().contains(&ReasonCode::BackendMismatch),
        "{:?}",
        r.codes()
    );
    assert!(!r.codes().contains(&ReasonCode::WrapperNoMarkerChains));
}

#[test]
fn native_only_node_refuses_a_legacy_writer_like_any_nft_node() {
    let r = run(
        &host_writer("leg:1"),
        &[("n1", native_only_node())],
        &[("leg:1", Some("1.8.9"), Some(Backend::Legacy))],
    );
    let reason = r.reason(ReasonCode::BackendMismatch);
    assert_eq!(reason.node_backend.as_deref(), Some("nft"));
    assert_eq!(r.decision.verdict, Verdict::Deny);
}

#[test]
fn native_only_node_allows_an_old_iptables_nft_writer() {
    // iptables-nft 1.8.7 never lists kube-proxy's native table, so nothing it
    // could save/restore there needs a newer reader: no minimum, no newer
    // writer, the same backend.
    let r = run(
        &host_writer("nft:old"),
        &[("n1", native_only_node())],
        &[("nft:old", Some("1.8.7"), Some(Backend::Nft))],
    );
    assert!(
        !r.codes().contains(&ReasonCode::BackendMismatch)
            && !r.codes().contains(&ReasonCode::OldReaderNewRules),
        "{:#?}",
        r.decision.reasons
    );
    assert_eq!(
        r.decision.verdict,
        Verdict::Allow,
        "{:#?}",
        r.decision.reasons
    );
}

#[test]
fn row_wrapper_follows_marker_chains_then_checks_version() {
    // nft markers -> nft, versions fine -> allow.
    let r = run(
        &host_writer("wrap:1"),
        &[("n1", nft_node("1.8.9"))],
        &[("wrap:1", Some("1.8.9"), Some(Backend::Wrapper))],
    );
    assert_eq!(r.decision.verdict, Verdict::Allow, "{:?}", r.codes());
    // legacy markers -> legacy on a legacy node -> allow.
    let r = run(
        &host_writer("wrap:1"),
        &[("n1", legacy_node("1.8.9"))],
        &[("wrap:1", Some("1.8.7"), Some(Backend::Wrapper))],
    );
    assert_eq!(r.decision.verdict, Verdict::Allow, "{:?}", r.codes());
    // Wrapper resolving to nft, but an old version against a 1.8.9 writer -> deny.
    let r = run(
        &host_writer("wrap:1"),
        &[("n1", nft_node("1.8.9"))],
        &[("wrap:1", Some("1.8.7"), Some(Backend::Wrapper))],
    );
    assert!(r.codes().contains(&ReasonCode::OldReaderNewRules));
}

#[test]
fn row_wrapper_without_marker_chains_warns() {
    let mut node = nft_node("1.8.9");
    node.nft_markers = false;
    let r = run(
        &host_writer("wrap:1"),
        &[("n1", node)],
        &[("wrap:1", Some("1.8.9"), Some(Backend::Wrapper))],
    );
    assert_eq!(r.codes(), vec![ReasonCode::WrapperNoMarkerChains]);
    assert_eq!(r.decision.verdict, Verdict::Warn);
}

#[test]
fn row_legacy_node_legacy_image_is_safe() {
    for ver in ["1.8.4", "1.8.7", "1.8.11"] {
        let r = run(
            &host_writer("leg:1"),
            &[("n1", legacy_node("1.8.9"))],
            &[("leg:1", Some(ver), Some(Backend::Legacy))],
        );
        assert_eq!(r.decision.verdict, Verdict::Allow, "{ver}: {:?}", r.codes());
        assert!(r.decision.reasons.is_empty());
    }
}

#[test]
fn row_incident_old_nft_reader_on_node_written_by_189_is_unsafe() {
    let r = run(
        &host_writer("kube-router:old"),
        &[("n1", nft_node("1.8.9"))],
        &[("kube-router:old", Some("1.8.7"), Some(Backend::Nft))],
    );
    let reason = r.reason(ReasonCode::OldReaderNewRules);
    assert_eq!(reason.severity, Severity::Critical);
    assert_eq!(reason.image_version, Some(v("1.8.7")));
    assert_eq!(reason.other_version, Some(v("1.8.9")));
    assert!(reason.message.contains("drops"), "{}", reason.message);
    assert!(reason.remedy.as_deref().unwrap().contains(">= 1.8.9"));
    assert_eq!(r.decision.verdict, Verdict::Deny);
    // The verdict names the content it judged, not only the tag (which may move).
    let digest = format!("sha256:{}", "ab".repeat(32));
    assert_eq!(reason.image_digest.as_deref(), Some(digest.as_str()));
    let line = reason.line(3);
    assert!(
        line.contains("container main (kube-router:old, sha256:abababababab): "),
        "{line}"
    );
}

#[test]
fn row_old_reader_against_live_min_reader_even_with_old_host() {
    // Host tools 1.8.7, but the live rules (another writer) need 1.8.8.
    let mut node = nft_node("1.8.7");
    node.min_reader = Some("1.8.8");
    let r = run(
        &host_writer("old:1"),
        &[("n1", node)],
        &[("old:1", Some("1.8.7"), Some(Backend::Nft))],
    );
    let reason = r.reason(ReasonCode::OldReaderNewRules);
    assert_eq!(reason.min_reader_version, Some(v("1.8.8")));
    assert_eq!(r.decision.verdict, Verdict::Deny);
}

#[test]
fn row_old_reader_against_writer_pod() {
    // Host 1.8.7 and only compat rules, but a writer pod runs 1.8.11.
    let mut node = nft_node("1.8.7");
    node.writers = vec![("1.8.11", Backend::Nft)];
    let r = run(
        &host_writer("old:1"),
        &[("n1", node)],
        &[("old:1", Some("1.8.7"), Some(Backend::Nft))],
    );
    let reason = r.reason(ReasonCode::OldReaderNewRules);
    assert_eq!(reason.other_version, Some(v("1.8.11")));
    assert!(reason.other.as_deref().unwrap().contains("writer-0"));
}

#[test]
fn row_old_node_new_image_is_unsafe_when_writer_pods_save_restore() {
    // A kube-proxy-like writer pod on 1.8.7 reads (save/restore) the image's native rules.
    let mut node = nft_node("1.8.7");
    node.writers = vec![("1.8.7", Backend::Nft)];
    let r = run(
        &host_writer("new:1"),
        &[("n1", node)],
        &[("new:1", Some("1.8.9"), Some(Backend::Nft))],
    );
    let reason = r.reason(ReasonCode::NewWriterOldReader);
    assert_eq!(reason.severity, Severity::Critical);
    assert_eq!(r.decision.verdict, Verdict::Deny);
}

#[test]
fn row_old_node_new_image_warns_when_only_host_tools_are_old() {
    let r = run(
        &host_writer("new:1"),
        &[("n1", nft_node("1.8.7"))],
        &[("new:1", Some("1.8.9"), Some(Backend::Nft))],
    );
    let reason = r.reason(ReasonCode::NewWriterOldReader);
    assert_eq!(reason.severity, Severity::Warning);
    assert_eq!(r.decision.verdict, Verdict::Warn);
}

#[test]
fn row_both_native_image_older_than_writer_warns() {
    let r = run(
        &host_writer("mid:1"),
        &[("n1", nft_node("1.8.11"))],
        &[("mid:1", Some("1.8.9"), Some(Backend::Nft))],
    );
    assert_eq!(r.codes(), vec![ReasonCode::ReaderOlderThanWriter]);
    assert_eq!(r.decision.verdict, Verdict::Warn);
}

#[test]
fn row_image_at_least_every_writer_is_safe() {
    for (host, img) in [("1.8.9", "1.8.9"), ("1.8.9", "1.8.11"), ("1.8.7", "1.8.7")] {
        let r = run(
            &host_writer("i:1"),
            &[("n1", nft_node(host))],
            &[("i:1", Some(img), Some(Backend::Nft))],
        );
        assert_eq!(
            r.decision.verdict,
            Verdict::Allow,
            "{host}/{img}: {:?}",
            r.codes()
        );
    }
    // Old image on a node where every writer is old too: newer reads older, old reads compat.
    let mut node = nft_node("1.8.7");
    node.writers = vec![("1.8.7", Backend::Nft)];
    let r = run(
        &host_writer("i:1"),
        &[("n1", node)],
        &[("i:1", Some("1.8.5"), Some(Backend::Nft))],
    );
    assert_eq!(r.decision.verdict, Verdict::Allow, "{:?}", r.codes());
}

#[test]
fn row_unknown_version_follows_policy() {
    let w = host_writer("u:1");
    let imgs = [("u:1", None, Some(Backend::Nft))];
    let r = run(&w, &[("n1", nft_node("1.8.9"))], &imgs);
    assert_eq!(r.codes(), vec![ReasonCode::ImageVersionUnknown]);
    assert_eq!(r.decision.verdict, Verdict::Warn);
    for (action, want) in [
        (UnresolvedAction::Allow, Verdict::Allow),
        (UnresolvedAction::Deny, Verdict::Deny),
    ] {
        let pol = policy_with(|s| s.unresolved_images = action);
        let r = run_with(&w, &[("n1", nft_node("1.8.9"))], &imgs, &pol);
        assert_eq!(r.decision.verdict, want);
    }
}

#[test]
fn unresolved_image_follows_policy_and_names_the_error() {
    let w = host_writer("gone:1");
    let r = run(&w, &[("n1", nft_node("1.8.9"))], &[]);
    let reason = r.reason(ReasonCode::ImageUnresolved);
    assert!(reason.message.contains("connection refused"));
    assert_eq!(r.decision.verdict, Verdict::Warn);
    let pol = policy_with(|s| s.unresolved_images = UnresolvedAction::Deny);
    assert_eq!(
        run_with(&w, &[("n1", nft_node("1.8.9"))], &[], &pol)
            .decision
            .verdict,
        Verdict::Deny
    );
}

#[test]
fn image_without_iptables_is_allowed_with_a_note() {
    let r = run(
        &host_writer("cilium:1"),
        &[("n1", nft_node("1.8.9"))],
        &[("cilium:1", None, None)],
    );
    assert_eq!(r.codes(), vec![ReasonCode::NoIptables]);
    assert_eq!(r.decision.verdict, Verdict::Allow);
}

#[test]
fn kernel_without_the_backend_is_unsafe() {
    let mut node = nft_node("1.8.9");
    node.kernel = Some((true, false));
    let r = run(
        &daemonset(false, &[c("main", "leg:1", &["NET_ADMIN"])]),
        &[("n1", node)],
        &[("leg:1", Some("1.8.9"), Some(Backend::Legacy))],
    );
    assert_eq!(r.codes(), vec![ReasonCode::KernelLacksBackend]);
    assert_eq!(r.decision.verdict, Verdict::Deny);
}

#[test]
fn mixed_node_judged_against_the_kubelet_backend_and_hazard_mentioned() {
    let mut node = nft_node("1.8.9");
    node.active = Some(ActiveBackend::Mixed);
    node.hazards = vec![
        HazardCode::MixedBackends,
        HazardCode::FirewallUnconditionalDrop,
    ];
    let r = run(
        &host_writer("leg:1"),
        &[("n1", node)],
        &[("leg:1", Some("1.8.9"), Some(Backend::Legacy))],
    );
    assert!(r.codes().contains(&ReasonCode::BackendMismatch));
    let hazards: Vec<_> = r
        .decision
        .reasons
        .iter()
        .filter(|x| x.code == ReasonCode::NodeHazard)
        .collect();
    assert_eq!(hazards.len(), 2);
    assert!(hazards.iter().all(|h| h.effect == Verdict::Allow));
}

#[test]
fn node_hazard_alone_does_not_deny_the_workload() {
    let mut node = nft_node("1.8.9");
    node.hazards = vec![HazardCode::FirewallUnconditionalDrop];
    let r = run(
        &host_writer("ok:1"),
        &[("n1", node)],
        &[("ok:1", Some("1.8.9"), Some(Backend::Nft))],
    );
    assert_eq!(r.codes(), vec![ReasonCode::NodeHazard]);
    assert_eq!(r.decision.verdict, Verdict::Allow);
    assert!(
        r.decision.reasons[0]
            .message
            .contains("FirewallUnconditionalDrop")
    );
}

#[test]
fn incomplete_profile_follows_unresolved_policy() {
    let w = host_writer("ok:1");
    let profiles = [NodeNetfilterProfile::new(
        "n1",
        NodeNetfilterProfileSpec::default(),
    )];
    let refs: Vec<_> = profiles.iter().collect();
    let cands = select_candidates(&w, &refs, &[], &pf(DEFAULT_PLATFORM), None);
    let mut res = ImageResolutions::new();
    res.insert_profile(
        "ok:1",
        &pf(PLATFORM),
        image("ok:1", Some("1.8.9"), Some(Backend::Nft)),
    );
    let d = evaluate(&EvalInput {
        workload: &w,
        candidates: &cands,
        images: &res,
        policy: &EffectivePolicy::default(),
    });
    assert_eq!(d.reasons[0].code, ReasonCode::NodeProfileIncomplete);
    assert_eq!(d.verdict, Verdict::Warn);
}

#[test]
fn policy_action_warn_and_taint_turn_unsafe_into_warn() {
    let w = host_writer("old:1");
    let imgs = [("old:1", Some("1.8.7"), Some(Backend::Nft))];
    for action in [PolicyAction::Warn, PolicyAction::Taint] {
        let pol = policy_with(|s| s.action = action);
        let r = run_with(&w, &[("n1", nft_node("1.8.9"))], &imgs, &pol);
        assert_eq!(r.decision.verdict, Verdict::Warn);
        assert_eq!(r.decision.reasons[0].severity, Severity::Critical);
    }
}

#[test]
fn identical_findings_aggregate_over_nodes() {
    let nodes: Vec<(String, P)> = (0..50)
        .map(|i| (format!("n{i}"), nft_node("1.8.9")))
        .collect();
    let nodes: Vec<(&str, P)> = nodes.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
    let r = run(
        &host_writer("old:1"),
        &nodes,
        &[("old:1", Some("1.8.7"), Some(Backend::Nft))],
    );
    assert_eq!(r.decision.reasons.len(), 1);
    assert_eq!(r.decision.reasons[0].nodes.len(), 50);
    let line = &r.decision.lines(Verdict::Warn, 3)[0];
    assert!(line.contains("50 nodes (n0, n1, n2, +47 more)"), "{line}");
}

// ---- scope ----

#[test]
fn scope_no_host_network_no_net_admin_is_not_judged() {
    let w = daemonset(false, &[c("app", "old:1", &[])]);
    let r = run(&w, &[("n1", nft_node("1.8.9"))], &[]);
    assert!(r.decision.reasons.is_empty());
    assert_eq!(r.decision.verdict, Verdict::Allow);
    assert_eq!(r.decision.containers_in_scope, 0);
}

#[test]
fn scope_host_network_without_net_admin_is_info_only_and_needs_no_registry() {
    let w = daemonset(true, &[c("exporter", "old:1", &["NET_RAW"])]);
    let pol = EffectivePolicy::default();
    let profiles = [profile("n1", &nft_node("1.8.9"))];
    let refs: Vec<_> = profiles.iter().collect();
    let cands = select_candidates(&w, &refs, &[], &pf(DEFAULT_PLATFORM), None);
    assert!(images_to_resolve(&w, &cands, &pol).is_empty());
    let r = run(&w, &[("n1", nft_node("1.8.9"))], &[]);
    assert_eq!(r.codes(), vec![ReasonCode::HostNetworkWithoutNetAdmin]);
    assert_eq!(r.decision.verdict, Verdict::Allow);
}

#[test]
fn scope_privileged_and_all_and_cap_prefix_count_as_net_admin() {
    let mut priv_c = c("p", "old:1", &[]);
    priv_c.privileged = true;
    for w in [
        daemonset(true, &[priv_c]),
        daemonset(true, &[c("a", "old:1", &["ALL"])]),
        daemonset(true, &[c("a", "old:1", &["cap_net_admin"])]),
    ] {
        let r = run(
            &w,
            &[("n1", nft_node("1.8.9"))],
            &[("old:1", Some("1.8.7"), Some(Backend::Nft))],
        );
        assert_eq!(r.decision.verdict, Verdict::Deny, "{:?}", w.containers());
    }
}

#[test]
fn scope_init_and_ephemeral_containers_are_judged() {
    let obj = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "debug", "namespace": "default"},
        "spec": {
            "hostNetwork": true,
            "initContainers": [{"name": "init", "image": "ok:1"}],
            "containers": [{"name": "app", "image": "ok:1"}],
            "ephemeralContainers": [{"name": "debugger", "image": "old:1",
                "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}],
        },
    });
    let w = Workload::from_value(&obj).unwrap().unwrap();
    let r = run(
        &w,
        &[("n1", nft_node("1.8.9"))],
        &[("old:1", Some("1.8.7"), Some(Backend::Nft))],
    );
    let reason = r.reason(ReasonCode::OldReaderNewRules);
    assert_eq!(reason.container.as_deref(), Some("debugger (ephemeral)"));

    let obj = json!({
        "kind": "Pod", "metadata": {"name": "p"},
        "spec": {
            "hostNetwork": true,
            "initContainers": [{"name": "setup", "image": "old:1",
                "securityContext": {"privileged": true}}],
            "containers": [{"name": "app", "image": "ok:1"}],
        },
    });
    let w = Workload::from_value(&obj).unwrap().unwrap();
    let r = run(
        &w,
        &[("n1", nft_node("1.8.9"))],
        &[("old:1", Some("1.8.7"), Some(Backend::Nft))],
    );
    assert_eq!(
        r.reason(ReasonCode::OldReaderNewRules).container.as_deref(),
        Some("setup (init)")
    );
}

#[test]
fn scope_own_netns_compares_containers_not_node_versions() {
    // In its own netns an old 1.8.7 is fine against a 1.8.9 node...
    let w = daemonset(false, &[c("a", "old:1", &["NET_ADMIN"])]);
    let r = run(
        &w,
        &[("n1", nft_node("1.8.9"))],
        &[("old:1", Some("1.8.7"), Some(Backend::Nft))],
    );
    assert_eq!(r.decision.verdict, Verdict::Allow, "{:?}", r.codes());
    // ...and a legacy image on an nft node too (separate rule sets).
    let w = daemonset(false, &[c("a", "leg:1", &["NET_ADMIN"])]);
    let r = run(
        &w,
        &[("n1", nft_node("1.8.9"))],
        &[("leg:1", Some("1.8.9"), Some(Backend::Legacy))],
    );
    assert_eq!(r.decision.verdict, Verdict::Allow, "{:?}", r.codes());
    // But two containers of one pod: 1.8.7 reader vs 1.8.9 writer.
    let w = daemonset(
        false,
        &[
            c("a", "old:1", &["NET_ADMIN"]),
            c("b", "new:1", &["NET_ADMIN"]),
        ],
    );
    let r = run(
        &w,
        &[("n1", nft_node("1.8.9"))],
        &[
            ("old:1", Some("1.8.7"), Some(Backend::Nft)),
            ("new:1", Some("1.8.9"), Some(Backend::Nft)),
        ],
    );
    let reason = r.reason(ReasonCode::PodOldReaderNewWriter);
    assert_eq!(reason.container.as_deref(), Some("a"));
    assert_eq!(reason.other.as_deref(), Some("container b"));
    assert_eq!(r.decision.verdict, Verdict::Deny);
    // Backends split inside the pod.
    let w = daemonset(
        false,
        &[
            c("a", "leg:1", &["NET_ADMIN"]),
            c("b", "new:1", &["NET_ADMIN"]),
        ],
    );
    let r = run(
        &w,
        &[("n1", nft_node("1.8.9"))],
        &[
            ("leg:1", Some("1.8.9"), Some(Backend::Legacy)),
            ("new:1", Some("1.8.9"), Some(Backend::Nft)),
        ],
    );
    assert_eq!(r.codes(), vec![ReasonCode::PodBackendMismatch]);
    // Both native, one older: warn.
    let w = daemonset(
        false,
        &[
            c("a", "mid:1", &["NET_ADMIN"]),
            c("b", "new:1", &["NET_ADMIN"]),
        ],
    );
    let r = run(
        &w,
        &[("n1", nft_node("1.8.9"))],
        &[
            ("mid:1", Some("1.8.9"), Some(Backend::Nft)),
            ("new:1", Some("1.8.11"), Some(Backend::Nft)),
        ],
    );
    assert_eq!(r.codes(), vec![ReasonCode::PodReaderOlderThanWriter]);
    assert_eq!(r.decision.verdict, Verdict::Warn);
}

#[test]
fn scope_host_shared_containers_of_one_pod_are_compared_too() {
    // Node host 1.8.7 (compat only): each container alone is fine vs the node,
    // but b (1.8.9) writes native rules that a (1.8.7) then misreads.
    let w = daemonset(
        true,
        &[
            c("a", "old:1", &["NET_ADMIN"]),
            c("b", "new:1", &["NET_ADMIN"]),
        ],
    );
    let r = run(
        &w,
        &[("n1", nft_node("1.8.7"))],
        &[
            ("old:1", Some("1.8.7"), Some(Backend::Nft)),
            ("new:1", Some("1.8.9"), Some(Backend::Nft)),
        ],
    );
    assert!(
        r.codes().contains(&ReasonCode::PodOldReaderNewWriter),
        "{:?}",
        r.codes()
    );
    assert_eq!(r.decision.verdict, Verdict::Deny);
}

// ---- policy ----

fn policy_with(f: impl FnOnce(&mut NetfilterPolicySpec)) -> EffectivePolicy {
    let mut spec = NetfilterPolicySpec {
        unresolved_images: UnresolvedAction::Warn,
        ..Default::default()
    };
    f(&mut spec);
    let p = NetfilterPolicy::new("p", spec);
    let e = EffectivePolicy::from_policies([&p], "kube-system", None);
    assert!(e.ignored().is_empty(), "{:?}", e.ignored());
    e
}

/// A DaemonSet in `namespace` that can write the node's rules with iptables-nft
/// 1.8.7 (unsafe on an nft 1.8.9 node), annotated `nfguard.io/exempt`.
fn exempt_annotated(namespace: &str) -> Workload {
    let obj = json!({
        "kind": "DaemonSet",
        "metadata": {"name": "kr", "namespace": namespace,
            "annotations": {"nfguard.io/exempt": "vendor-certified, ticket NET-42"}},
        "spec": {"template": {"spec": {"hostNetwork": true, "containers": [
            {"name": "a", "image": "old:1", "securityContext": {"privileged": true}}]}}},
    });
    Workload::from_value(&obj).unwrap().unwrap()
}

const OLD_NFT: [(&str, Option<&str>, Option<Backend>); 1] =
    [("old:1", Some("1.8.7"), Some(Backend::Nft))];

/// A policy judging every namespace that lets `nfguard.io/exempt` count in
/// namespaces labelled `nfguard.io/exemptions=allowed`.
fn exemptions_policy() -> NetfilterPolicy {
    NetfilterPolicy::new(
        "exemptions",
        NetfilterPolicySpec {
            exemption_namespace_selector: Some(
                serde_json::from_value(
                    json!({"matchLabels": {"nfguard.io/exemptions": "allowed"}}),
                )
                .unwrap(),
            ),
            ..Default::default()
        },
    )
}

/// The judgement of [`exempt_annotated`] in `namespace` under `policy`.
fn judge_exempt_annotated(namespace: &str, policy: &EffectivePolicy) -> (Run, Vec<ImageKey>) {
    let w = exempt_annotated(namespace);
    let profiles = [profile("n1", &nft_node("1.8.9"))];
    let refs: Vec<_> = profiles.iter().collect();
    let cands = select_candidates(&w, &refs, &[], &pf(DEFAULT_PLATFORM), None);
    let keys = images_to_resolve(&w, &cands, policy);
    (
        run_with(&w, &[("n1", nft_node("1.8.9"))], &OLD_NFT, policy),
        keys,
    )
}

#[test]
fn exempt_annotation_counts_in_a_namespace_the_policy_selects() {
    let p = exemptions_policy();
    let ns_labels = BTreeMap::from([("nfguard.io/exemptions".to_string(), "allowed".to_string())]);
    let e = EffectivePolicy::from_policies([&p], "kube-system", Some(&ns_labels));
    assert!(e.allows_exemptions());
    let (r, keys) = judge_exempt_annotated("kube-system", &e);
    assert!(
        keys.is_empty(),
        "an exempt workload costs no look-up: {keys:?}"
    );
    assert_eq!(r.decision.verdict, Verdict::Allow);
    assert_eq!(r.codes(), vec![ReasonCode::Exempt]);
    assert!(r.decision.exemptions_allowed);
    let reason = r.reason(ReasonCode::Exempt);
    assert!(
        reason.message.contains("vendor-certified, ticket NET-42"),
        "{}",
        reason.message
    );
}

#[test]
fn exempt_annotation_is_ignored_in_a_namespace_the_policy_does_not_select() {
    let p = exemptions_policy();
    let other = BTreeMap::from([("nfguard.io/exemptions".to_string(), "no".to_string())]);
    for (ns, ns_labels) in [("apps", Some(&other)), ("apps", None)] {
        let e = EffectivePolicy::from_policies([&p], ns, ns_labels);
        assert!(e.applies() && !e.allows_exemptions());
        let (r, keys) = judge_exempt_annotated(ns, &e);
        assert!(
            !keys.is_empty(),
            "an ignored annotation does not spare the look-up"
        );
        assert_eq!(r.decision.verdict, Verdict::Deny);
        assert!(!r.decision.exemptions_allowed);
        let codes = r.codes();
        assert!(codes.contains(&ReasonCode::OldReaderNewRules), "{codes:?}");
        assert!(!codes.contains(&ReasonCode::Exempt), "{codes:?}");
        let line = r.reason(ReasonCode::ExemptionNotAllowed).line(3);
        assert!(
            line.contains(
                "nfguard.io/exempt ignored: no NetfilterPolicy allows exemptions in namespace apps"
            ),
            "{line}"
        );
        assert!(line.contains("exemptImages"), "{line}");
    }
}

#[test]
fn exempt_annotation_is_ignored_without_a_policy_or_without_the_field() {
    let without_field = NetfilterPolicy::new("plain", NetfilterPolicySpec::default());
    let everywhere = BTreeMap::from([("nfguard.io/exemptions".to_string(), "allowed".to_string())]);
    for e in [
        EffectivePolicy::from_policies([], "kube-system", Some(&everywhere)),
        EffectivePolicy::default(),
        EffectivePolicy::from_policies([&without_field], "kube-system", Some(&everywhere)),
    ] {
        assert!(!e.allows_exemptions());
        let (r, _) = judge_exempt_annotated("kube-system", &e);
        assert_eq!(r.decision.verdict, Verdict::Deny);
        assert!(r.codes().contains(&ReasonCode::ExemptionNotAllowed));
        assert!(!r.codes().contains(&ReasonCode::Exempt));
    }
    let e = EffectivePolicy::from_policies([], "kube-system", None);
    let (r, _) = judge_exempt_annotated("kube-system", &e);
    let line = r.reason(ReasonCode::ExemptionNotAllowed).line(3);
    assert!(line.contains("in namespace kube-system"), "{line}");
    // Without the annotation nothing is said about exemptions.
    let (r, _) = judge_exempt_annotated("kube-system", &e);
    let mut plain = exempt_annotated("kube-system");
    plain.annotations.clear();
    let r2 = run_with(&plain, &[("n1", nft_node("1.8.9"))], &OLD_NFT, &e);
    assert!(!r2.codes().contains(&ReasonCode::ExemptionNotAllowed));
    assert_eq!(r2.decision.verdict, r.decision.verdict);
}

#[test]
fn only_a_policy_that_selects_the_namespace_allows_exemptions_there() {
    let sel = |v: serde_json::Value| serde_json::from_value(v).unwrap();
    // Allows exemptions everywhere, but judges only team-a.
    let team_a = NetfilterPolicy::new(
        "team-a",
        NetfilterPolicySpec {
            namespace_selector: Some(sel(json!({"matchLabels": {"team": "a"}}))),
            exemption_namespace_selector: Some(sel(json!({}))),
            ..Default::default()
        },
    );
    let team_b = NetfilterPolicy::new(
        "team-b",
        NetfilterPolicySpec {
            namespace_selector: Some(sel(json!({"matchLabels": {"team": "b"}}))),
            ..Default::default()
        },
    );
    let a = BTreeMap::from([("team".to_string(), "a".to_string())]);
    let b = BTreeMap::from([("team".to_string(), "b".to_string())]);
    assert!(EffectivePolicy::from_policies([&team_a, &team_b], "a", Some(&a)).allows_exemptions());
    assert!(!EffectivePolicy::from_policies([&team_a, &team_b], "b", Some(&b)).allows_exemptions());
    // Two policies select team-a: one allowing is enough.
    let strict_a = NetfilterPolicy::new(
        "strict-a",
        NetfilterPolicySpec {
            namespace_selector: Some(sel(json!({"matchLabels": {"team": "a"}}))),
            ..Default::default()
        },
    );
    let e = EffectivePolicy::from_policies([&strict_a, &team_a], "a", Some(&a));
    assert!(e.allows_exemptions());
    assert_eq!(e.sources, vec!["strict-a", "team-a"]);
}

#[test]
fn an_invalid_exemption_selector_makes_the_policy_invalid() {
    let bad = NetfilterPolicySpec {
        exemption_namespace_selector: Some(
            serde_json::from_value(
                json!({"matchExpressions": [{"key": "team", "operator": "In", "values": []}]}),
            )
            .unwrap(),
        ),
        ..Default::default()
    };
    let err = validate_policy(&bad).unwrap_err();
    assert_eq!(err.field(), "exemptionNamespaceSelector");
    assert_eq!(err.reason(), "InvalidExemptionNamespaceSelector");
    assert!(
        err.to_string()
            .contains("exemptionNamespaceSelector.matchExpressions[0] (key \"team\")"),
        "{err}"
    );
    // Left out of the combination: it allows nothing.
    let p = NetfilterPolicy::new("bad", bad);
    let e = EffectivePolicy::from_policies([&p], "kube-system", None);
    assert!(!e.allows_exemptions());
    assert_eq!(e.ignored().len(), 1);
}

#[test]
fn exempt_images_globs() {
    let pol = policy_with(|s| s.exempt_images = vec!["registry.k8s.io/kube-proxy:*".into()]);
    assert_eq!(
        pol.exempt_image_pattern("registry.k8s.io/kube-proxy:v1.30.0"),
        Some("registry.k8s.io/kube-proxy:*")
    );
    assert_eq!(pol.exempt_image_pattern("docker.io/kube-router:v1"), None);
    let w = host_writer("registry.k8s.io/kube-proxy:v1.30.0");
    let r = run_with(&w, &[("n1", nft_node("1.8.9"))], &[], &pol);
    assert_eq!(r.codes(), vec![ReasonCode::ImageExempt]);
    assert_eq!(r.decision.verdict, Verdict::Allow);
}

#[test]
fn bad_glob_is_ignored_and_named() {
    let broken = NetfilterPolicy::new(
        "broken",
        NetfilterPolicySpec {
            action: PolicyAction::Warn,
            exempt_images: vec!["ok:*".into(), "a[".into()],
            ..Default::default()
        },
    );
    let err = validate_policy(&broken.spec).unwrap_err();
    assert_eq!(
        (err.field(), err.reason()),
        ("exemptImages", "InvalidExemptImages")
    );
    assert!(err.to_string().contains("exemptImages[1] \"a[\""), "{err}");
    // Left out as if absent: the built-in default judges, and it is listed.
    let e = EffectivePolicy::from_policies([&broken], "x", None);
    assert_eq!(e.action, PolicyAction::Deny);
    assert!(e.sources.is_empty() && e.applies());
    assert_eq!(e.exempt_image_pattern("ok:1"), None);
    assert_eq!(e.ignored().len(), 1);
    assert_eq!(e.ignored()[0].name, "broken");
    assert!(
        e.ignored()[0]
            .to_string()
            .contains("NetfilterPolicy broken")
    );
    // A valid policy beside it still judges; the broken one does not break it.
    let lax = NetfilterPolicy::new(
        "lax",
        NetfilterPolicySpec {
            action: PolicyAction::Warn,
            exempt_images: vec!["ok:*".into()],
            ..Default::default()
        },
    );
    let e = EffectivePolicy::from_policies([&broken, &lax], "x", None);
    assert_eq!(
        (e.action, e.sources.clone()),
        (PolicyAction::Warn, vec!["lax".into()])
    );
    assert_eq!(e.exempt_image_pattern("ok:1"), Some("ok:*"));
    assert_eq!(e.ignored().len(), 1);
}

#[test]
fn an_invalid_policy_is_listed_only_where_it_would_select() {
    let sel = |v: serde_json::Value| serde_json::from_value(v).unwrap();
    let broken_for = |selector| {
        NetfilterPolicy::new(
            "broken",
            NetfilterPolicySpec {
                exempt_images: vec!["a[".into()],
                namespace_selector: Some(selector),
                ..Default::default()
            },
        )
    };
    let team_net = broken_for(sel(json!({"matchLabels": {"team": "net"}})));
    let net = [("team".to_string(), "net".to_string())].into();
    let listed = |p: &NetfilterPolicy, labels: Option<&BTreeMap<String, String>>| {
        EffectivePolicy::from_policies([p], "apps", labels)
            .ignored()
            .len()
    };
    assert_eq!(listed(&team_net, Some(&net)), 1);
    assert_eq!(listed(&team_net, None), 0);
    // An invalid selector cannot tell: listed everywhere.
    let bad_selector = NetfilterPolicy::new(
        "typo",
        NetfilterPolicySpec {
            namespace_selector: Some(sel(
                json!({"matchExpressions": [{"key": "team", "operator": "in", "values": ["net"]}]}),
            )),
            ..Default::default()
        },
    );
    assert_eq!(listed(&bad_selector, None), 1);
}

#[test]
fn validation_names_each_field() {
    let sel = |e: serde_json::Value| {
        Some(serde_json::from_value(json!({"matchExpressions": [e]})).unwrap())
    };
    let cases: [(NetfilterPolicySpec, &str, &str); 4] = [
        (
            NetfilterPolicySpec {
                namespace_selector: sel(json!({"key": "team", "operator": "In"})),
                ..Default::default()
            },
            "InvalidNamespaceSelector",
            "operator In needs at least one value",
        ),
        (
            NetfilterPolicySpec {
                namespace_selector: sel(
                    json!({"key": "team", "operator": "Exists", "values": ["x"]}),
                ),
                ..Default::default()
            },
            "InvalidNamespaceSelector",
            "operator Exists takes no values",
        ),
        (
            NetfilterPolicySpec {
                namespace_selector: sel(json!({"key": "team", "operator": "Has"})),
                ..Default::default()
            },
            "InvalidNamespaceSelector",
            "unknown operator \"Has\"",
        ),
        (
            NetfilterPolicySpec {
                max_tainted_nodes_percent: Some(101),
                ..Default::default()
            },
            "InvalidMaxTaintedNodesPercent",
            "maxTaintedNodesPercent 101 is above 100",
        ),
    ];
    for (spec, reason, text) in cases {
        let err = validate_policy(&spec).unwrap_err();
        assert_eq!(err.reason(), reason, "{err}");
        assert!(err.to_string().contains(text), "{err}");
    }
    let fine = NetfilterPolicySpec {
        namespace_selector: sel(json!({"key": "team", "operator": "NotIn", "values": ["web"]})),
        exempt_images: vec!["registry.k8s.io/kube-proxy:*".into()],
        max_tainted_nodes_percent: Some(100),
        ..Default::default()
    };
    assert_eq!(validate_policy(&fine), Ok(()));
}

#[test]
fn an_ignored_policy_warns_writers_only() {
    let broken = NetfilterPolicy::new(
        "broken",
        NetfilterPolicySpec {
            exempt_images: vec!["a[".into()],
            ..Default::default()
        },
    );
    let e = EffectivePolicy::from_policies([&broken], "kube-system", None);
    let nodes = [("n1", nft_node("1.8.9"))];
    let safe = [("new:1", Some("1.8.9"), Some(Backend::Nft))];
    let r = run_with(&host_writer("new:1"), &nodes, &safe, &e);
    assert_eq!(r.decision.verdict, Verdict::Warn);
    let line = r.reason(ReasonCode::InvalidPolicyIgnored).line(3);
    assert!(
        line.contains("NetfilterPolicy broken") && line.contains("exemptImages[0]"),
        "{line}"
    );
    // Unsafe under the default (Deny) that applies without it.
    let r = run_with(
        &host_writer("old:1"),
        &nodes,
        &[("old:1", Some("1.8.7"), Some(Backend::Nft))],
        &e,
    );
    assert_eq!(r.decision.verdict, Verdict::Deny);
    assert!(r.codes().contains(&ReasonCode::InvalidPolicyIgnored));
    // Nothing that can write rules, or exempt: the policy would not matter.
    let plain = daemonset(false, &[c("main", "new:1", &[])]);
    assert!(run_with(&plain, &nodes, &safe, &e).codes().is_empty());
    // An exemption allowed by a valid policy beside it.
    let allowing = exemptions_policy();
    let ns_labels = BTreeMap::from([("nfguard.io/exemptions".to_string(), "allowed".to_string())]);
    let e = EffectivePolicy::from_policies([&broken, &allowing], "kube-system", Some(&ns_labels));
    let mut exempt = host_writer("new:1");
    exempt
        .annotations
        .insert(crate::wellknown::ANNOTATION_EXEMPT.into(), "vendor".into());
    assert_eq!(
        run_with(&exempt, &nodes, &safe, &e).codes(),
        vec![ReasonCode::Exempt]
    );
}

#[test]
fn namespace_selector_and_combination() {
    let sel = |ns: &str| {
        serde_json::from_value(json!({"matchLabels": {"kubernetes.io/metadata.name": ns}})).unwrap()
    };
    let strict = NetfilterPolicy::new(
        "strict",
        NetfilterPolicySpec {
            action: PolicyAction::Deny,
            namespace_selector: Some(sel("kube-system")),
            unresolved_images: UnresolvedAction::Allow,
            ..Default::default()
        },
    );
    let lax = NetfilterPolicy::new(
        "lax",
        NetfilterPolicySpec {
            action: PolicyAction::Warn,
            unresolved_images: UnresolvedAction::Deny,
            registry_timeout_seconds: Some(3),
            ..Default::default()
        },
    );
    let e = EffectivePolicy::from_policies([&strict, &lax], "kube-system", None);
    assert_eq!(e.action, PolicyAction::Deny);
    assert_eq!(e.unresolved_images, UnresolvedAction::Deny);
    assert_eq!(e.registry_timeout_seconds, Some(3));
    assert_eq!(e.sources, vec!["strict", "lax"]);
    let e = EffectivePolicy::from_policies([&strict, &lax], "apps", None);
    assert_eq!(e.action, PolicyAction::Warn);
    // Policies exist, none selects the namespace: not judged.
    let e = EffectivePolicy::from_policies([&strict], "apps", None);
    assert!(!e.applies());
    let r = run_with(&host_writer("old:1"), &[("n1", nft_node("1.8.9"))], &[], &e);
    assert_eq!(r.codes(), vec![ReasonCode::NamespaceNotSelected]);
    // No policy at all: Deny + Warn.
    let e = EffectivePolicy::from_policies([], "apps", None);
    assert_eq!(
        (e.action, e.unresolved_images),
        (PolicyAction::Deny, UnresolvedAction::Warn)
    );
}

// ---- candidates ----

fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
    }))
    .unwrap()
}

fn cand_names(w: &Workload, profiles: &[NodeNetfilterProfile], nodes: &[Node]) -> Vec<String> {
    cand_details(w, profiles, nodes)
        .into_iter()
        .map(|c| c.split(' ').next().unwrap_or_default().to_string())
        .collect()
}

/// `node@platform (Some("profile name"))` per candidate, the same with and
/// without a NodeIndex.
fn cand_details(w: &Workload, profiles: &[NodeNetfilterProfile], nodes: &[Node]) -> Vec<String> {
    let p: Vec<_> = profiles.iter().collect();
    let n: Vec<_> = nodes.iter().collect();
    let show = |cs: Vec<Candidate<'_>>| -> Vec<String> {
        cs.iter()
            .map(|c| {
                let profile = c.profile.and_then(|p| p.metadata.name.as_deref());
                format!("{}@{} ({profile:?})", c.name, c.platform)
            })
            .collect()
    };
    let default = pf(DEFAULT_PLATFORM);
    let plain = show(select_candidates(w, &p, &n, &default, None));
    // A NodeIndex of the same nodes gives the same candidates.
    let index = NodeIndex::new(&p, &n, &default);
    assert_eq!(
        show(select_candidates(w, &p, &n, &default, Some(&index))),
        plain
    );
    plain
}

/// A profile named `name` whose spec.nodeName says `claims`.
fn spoofing_profile(name: &str, claims: &str) -> NodeNetfilterProfile {
    let mut p = profile(name, &legacy_node("1.8.9"));
    p.spec.node_name = Some(claims.into());
    p
}

#[test]
fn a_profile_naming_another_node_in_spec_never_speaks_for_it() {
    let w = host_writer("x");
    let nodes = three_nodes();
    let w_all = daemonset_with(
        true,
        &[c("m", "x", &[])],
        json!({"tolerations": [{"operator": "Exists"}]}),
    );
    // Node b has no profile of its own: "x" claiming b does not become b's.
    let profiles = vec![profile("a", &nft_node("1.8.9")), spoofing_profile("x", "b")];
    assert_eq!(
        cand_details(&w_all, &profiles, &nodes),
        vec![
            "a@linux/amd64 (Some(\"a\"))",
            "b@linux/arm64 (None)",
            "c@linux/amd64 (None)"
        ]
    );
    // Without Node objects the profile stands for the node it is named after.
    assert_eq!(
        cand_names(&w, &profiles, &[]),
        vec!["a@linux/amd64", "x@linux/amd64"]
    );
    let pinned = daemonset_with(true, &[c("m", "x", &[])], json!({"nodeName": "b"}));
    assert!(cand_names(&pinned, &profiles, &[]).is_empty());
    // b's own profile wins whatever the order (no "last duplicate wins").
    for profiles in [
        vec![profile("b", &nft_node("1.8.9")), spoofing_profile("x", "b")],
        vec![spoofing_profile("x", "b"), profile("b", &nft_node("1.8.9"))],
    ] {
        assert_eq!(
            cand_details(&w_all, &profiles, &nodes)[1],
            "b@linux/arm64 (Some(\"b\"))"
        );
        assert_eq!(
            cand_details(&pinned, &profiles, &nodes),
            vec!["b@linux/arm64 (Some(\"b\"))"]
        );
    }
    // A profile named after b that claims a is b's, and never a's.
    let profiles = vec![spoofing_profile("b", "a")];
    assert_eq!(
        cand_details(&w_all, &profiles, &nodes),
        vec![
            "a@linux/amd64 (None)",
            "b@linux/arm64 (Some(\"b\"))",
            "c@linux/amd64 (None)"
        ]
    );
}

fn three_profiles() -> Vec<NodeNetfilterProfile> {
    ["a", "b", "c"]
        .iter()
        .map(|n| profile(n, &nft_node("1.8.9")))
        .collect()
}

fn three_nodes() -> Vec<Node> {
    vec![
        node(
            "a",
            json!({"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "nfguard.io/iptables-backend": "nft"}),
            json!([]),
        ),
        node(
            "b",
            json!({"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64", "nfguard.io/iptables-backend": "legacy", "rank": "5"}),
            json!([{"key": "dedicated", "value": "net", "effect": "NoSchedule"}]),
        ),
        node(
            "c",
            json!({"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "rank": "10"}),
            json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]),
        ),
    ]
}

#[test]
fn candidates_without_nodes_are_every_profile() {
    let w = host_writer("x");
    assert_eq!(
        cand_names(&w, &three_profiles(), &[]),
        vec!["a@linux/amd64", "b@linux/amd64", "c@linux/amd64"]
    );
    // nodeSelector on arch sets the platform even without Node objects.
    let w = daemonset_with(
        true,
        &[c("m", "x", &[])],
        json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
    );
    assert_eq!(cand_names(&w, &three_profiles(), &[])[0], "a@linux/arm64");
}

#[test]
fn candidates_node_name_and_daemonset_match_fields() {
    let w = daemonset_with(true, &[c("m", "x", &[])], json!({"nodeName": "b"}));
    assert_eq!(
        cand_names(&w, &three_profiles(), &[]),
        vec!["b@linux/amd64"]
    );
    let aff = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["c"]}]}]}}}});
    let w = daemonset_with(true, &[c("m", "x", &[])], aff);
    assert_eq!(
        cand_names(&w, &three_profiles(), &[]),
        vec!["c@linux/amd64"]
    );
    assert_eq!(
        cand_names(&w, &three_profiles(), &three_nodes()),
        vec!["c@linux/amd64"]
    );
}

#[test]
fn candidates_node_selector_affinity_and_taints() {
    // DaemonSet tolerates not-ready (c) automatically, not `dedicated` (b).
    let w = host_writer("x");
    assert_eq!(
        cand_names(&w, &three_profiles(), &three_nodes()),
        vec!["a@linux/amd64", "c@linux/amd64"]
    );
    // A Deployment does not tolerate not-ready NoExecute.
    let mut d = host_writer("x");
    d.kind = WorkloadKind::Deployment;
    assert_eq!(
        cand_names(&d, &three_profiles(), &three_nodes()),
        vec!["a@linux/amd64"]
    );
    // Toleration for `dedicated` brings b in, with its arm64 platform.
    let w = daemonset_with(
        true,
        &[c("m", "x", &[])],
        json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "net", "effect": "NoSchedule"}]}),
    );
    assert_eq!(
        cand_names(&w, &three_profiles(), &three_nodes()),
        vec!["a@linux/amd64", "b@linux/arm64", "c@linux/amd64"]
    );
    // Tolerate everything; select by label.
    let all = json!([{"operator": "Exists"}]);
    let w = daemonset_with(
        true,
        &[c("m", "x", &[])],
        json!({"tolerations": all, "nodeSelector": {"nfguard.io/iptables-backend": "nft"}}),
    );
    assert_eq!(
        cand_names(&w, &three_profiles(), &three_nodes()),
        vec!["a@linux/amd64"]
    );
    // Required affinity: In / NotIn / Exists / DoesNotExist / Gt / Lt.
    let expr = |e: serde_json::Value| {
        json!({"tolerations": all, "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [e]}]}}}})
    };
    for (e, want) in [
        (
            json!({"key": "nfguard.io/iptables-backend", "operator": "In", "values": ["legacy"]}),
            vec!["b"],
        ),
        (
            json!({"key": "nfguard.io/iptables-backend", "operator": "NotIn", "values": ["legacy"]}),
            vec!["a", "c"],
        ),
        (json!({"key": "rank", "operator": "Exists"}), vec!["b", "c"]),
        (
            json!({"key": "rank", "operator": "DoesNotExist"}),
            vec!["a"],
        ),
        (
            json!({"key": "rank", "operator": "Gt", "values": ["6"]}),
            vec!["c"],
        ),
        (
            json!({"key": "rank", "operator": "Lt", "values": ["6"]}),
            vec!["b"],
        ),
    ] {
        let w = daemonset_with(true, &[c("m", "x", &[])], expr(e.clone()));
        let got: Vec<String> = cand_names(&w, &three_profiles(), &three_nodes())
            .into_iter()
            .map(|s| s.split('@').next().unwrap().to_string())
            .collect();
        assert_eq!(got, want, "{e}");
    }
}

#[test]
fn candidates_by_taint_set_ignore_time_added_and_see_unschedulable() {
    // The NodeIndex groups nodes by what toleration matching reads: a and b
    // share a taint added at different times; c is cordoned.
    let taint = |at: &str| json!([{"key": "dedicated", "value": "net", "effect": "NoSchedule", "timeAdded": at}]);
    let mut nodes = vec![
        node("a", json!({}), taint("2026-01-01T00:00:00Z")),
        node("b", json!({}), taint("2026-02-01T00:00:00Z")),
        node("c", json!({}), json!([])),
        node("d", json!({}), json!([])),
    ];
    nodes[2].spec.as_mut().unwrap().unschedulable = Some(true);
    let profiles: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|n| profile(n, &nft_node("1.8.9")))
        .collect();
    let tolerant = daemonset_with(
        true,
        &[c("m", "x", &["NET_ADMIN"])],
        json!({"tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]}),
    );
    // A DaemonSet tolerates the cordon (the DaemonSet controller adds it);
    // a bare pod does not.
    assert_eq!(
        cand_names(&tolerant, &profiles, &nodes),
        [
            "a@linux/amd64",
            "b@linux/amd64",
            "c@linux/amd64",
            "d@linux/amd64"
        ]
    );
    assert_eq!(
        cand_names(&host_writer("x"), &profiles, &nodes),
        ["c@linux/amd64", "d@linux/amd64"]
    );
    let pod = Workload::from_value(&json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"hostNetwork": true, "containers": [{"name": "m", "image": "x"}],
                 "tolerations": [{"key": "dedicated", "operator": "Exists"}]}
    }))
    .unwrap()
    .unwrap();
    assert_eq!(
        cand_names(&pod, &profiles, &nodes),
        ["a@linux/amd64", "b@linux/amd64", "d@linux/amd64"]
    );
}

#[test]
fn candidates_nodes_without_profile_are_reported() {
    let w = host_writer("ok:1");
    let profiles = [profile("a", &nft_node("1.8.9"))];
    let nodes = [
        node("a", json!({}), json!([])),
        node("z", json!({}), json!([])),
    ];
    let p: Vec<_> = profiles.iter().collect();
    let n: Vec<_> = nodes.iter().collect();
    let cands = select_candidates(&w, &p, &n, &pf(DEFAULT_PLATFORM), None);
    assert_eq!(cands.len(), 2);
    assert!(cands[1].profile.is_none());
    let mut res = ImageResolutions::new();
    res.insert_profile(
        "ok:1",
        &pf(PLATFORM),
        image("ok:1", Some("1.8.9"), Some(Backend::Nft)),
    );
    let d = evaluate(&EvalInput {
        workload: &w,
        candidates: &cands,
        images: &res,
        policy: &EffectivePolicy::default(),
    });
    assert_eq!(d.reasons.len(), 1);
    assert_eq!(d.reasons[0].code, ReasonCode::NodeProfileMissing);
    assert_eq!(d.reasons[0].node.as_deref(), Some("z"));
}

#[test]
fn multi_arch_image_resolved_per_platform() {
    // The arm64 variant bundles an old iptables; only the arm64 node is unsafe.
    let w = daemonset_with(
        true,
        &[c("m", "multi:1", &["NET_ADMIN"])],
        json!({"tolerations": [{"operator": "Exists"}]}),
    );
    let profiles = three_profiles();
    let nodes = three_nodes();
    let p: Vec<_> = profiles.iter().collect();
    let n: Vec<_> = nodes.iter().collect();
    // Through a NodeIndex, as the webhook and `check` judge.
    let index = NodeIndex::new(&p, &n, &pf(DEFAULT_PLATFORM));
    let cands = select_candidates(&w, &p, &n, &pf(DEFAULT_PLATFORM), Some(&index));
    assert!(cands.iter().all(|c| c.class.is_some()));
    let keys = images_to_resolve(&w, &cands, &EffectivePolicy::default());
    assert_eq!(keys.len(), 2);
    let mut res = ImageResolutions::new();
    res.insert_profile(
        "multi:1",
        &pf("linux/amd64"),
        image("multi:1", Some("1.8.9"), Some(Backend::Nft)),
    );
    res.insert_profile(
        "multi:1",
        &pf("linux/arm64"),
        image("multi:1", Some("1.8.7"), Some(Backend::Nft)),
    );
    let d = evaluate(&EvalInput {
        workload: &w,
        candidates: &cands,
        images: &res,
        policy: &EffectivePolicy::default(),
    });
    assert_eq!(d.verdict, Verdict::Deny);
    assert_eq!(d.reasons.len(), 1, "{:#?}", d.reasons);
    assert_eq!(d.reasons[0].nodes, vec!["b"]);
    assert_eq!(d.reasons[0].platform.as_deref(), Some("linux/arm64"));
}

// ---- workloads ----

#[test]
fn pod_spec_of_every_kind() {
    let tpl = json!({"metadata": {"annotations": {"t": "1"}}, "spec": {"containers": [{"name": "x", "image": "i"}]}});
    for (kind, spec) in [
        ("Pod", json!({"containers": [{"name": "x", "image": "i"}]})),
        ("DaemonSet", json!({"template": tpl})),
        ("Deployment", json!({"template": tpl})),
        ("StatefulSet", json!({"template": tpl})),
        ("ReplicaSet", json!({"template": tpl})),
        ("Job", json!({"template": tpl})),
        (
            "CronJob",
            json!({"schedule": "* * * * *", "jobTemplate": {"spec": {"template": tpl}}}),
        ),
    ] {
        let obj = json!({"kind": kind, "metadata": {"name": "n", "namespace": "ns"}, "spec": spec});
        let w = Workload::from_value(&obj).unwrap().unwrap();
        assert_eq!(
            w.pod_spec.containers[0].image.as_deref(),
            Some("i"),
            "{kind}"
        );
        assert_eq!(w.object_ref(), format!("{kind}/ns/n"));
    }
    assert!(
        Workload::from_value(&json!({"kind": "ConfigMap"}))
            .unwrap()
            .is_none()
    );
    assert!(Workload::from_value(&json!({"metadata": {}})).is_err());
    let err =
        Workload::from_value(&json!({"kind": "DaemonSet", "metadata": {"name": "d"}, "spec": {}}))
            .unwrap_err();
    assert!(
        err.to_string()
            .contains("DaemonSet d: missing /spec/template/spec"),
        "{err}"
    );
    let err = Workload::from_value(
        &json!({"kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": "nope"}}),
    )
    .unwrap_err();
    assert!(err.to_string().contains("Pod p: invalid pod spec"), "{err}");
}

#[test]
fn from_dynamic_matches_from_value() {
    let obj = json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kr", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"hostNetwork": true, "containers": [{"name": "a", "image": "i"}]}}},
    });
    let dynobj: kube::api::DynamicObject = serde_json::from_value(obj.clone()).unwrap();
    let a = Workload::from_dynamic(&dynobj).unwrap().unwrap();
    let b = Workload::from_value(&obj).unwrap().unwrap();
    assert_eq!(a, b);
}

// ---- labels ----

/// Every string a JSON schema allows by `enum` or `const`.
fn schema_enum_values(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            if let Some(serde_json::Value::Array(values)) = m.get("enum") {
                out.extend(values.iter().filter_map(|x| x.as_str().map(String::from)));
            }
            if let Some(serde_json::Value::String(value)) = m.get("const") {
                out.push(value.clone());
            }
            m.values().for_each(|x| schema_enum_values(x, out));
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| schema_enum_values(x, out)),
        _ => {}
    }
}

#[test]
fn every_reason_code_has_one_distinct_label_its_serialized_name() {
    // The schema is derived from the enum itself: a code missing from
    // `ReasonCode::ALL` shows up here.
    let schema = serde_json::to_value(schemars::schema_for!(ReasonCode)).unwrap();
    let mut declared = Vec::new();
    schema_enum_values(&schema, &mut declared);
    let labels: Vec<&str> = ReasonCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(labels, declared, "ReasonCode::ALL is every code, in order");
    let distinct: std::collections::BTreeSet<&str> = labels.iter().copied().collect();
    assert_eq!(distinct.len(), labels.len(), "{labels:?}");
    for code in ReasonCode::ALL {
        assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
        assert_eq!(code.to_string(), code.as_str());
    }
    for v in [Verdict::Allow, Verdict::Warn, Verdict::Deny] {
        assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
    }
}

// ---- judging within bounds (the webhook) ----

/// `w` on `nodes` (ImageResolutions as `run_with` makes them), within `bounds`.
fn run_within(w: &Workload, nodes: &[(&str, P)], bounds: Bounds<'_>) -> Option<Listed> {
    let profiles: Vec<NodeNetfilterProfile> = nodes.iter().map(|(n, p)| profile(n, p)).collect();
    let refs: Vec<&NodeNetfilterProfile> = profiles.iter().collect();
    let cands = select_candidates(w, &refs, &[], &pf(DEFAULT_PLATFORM), None);
    let mut res = ImageResolutions::new();
    for key in images_to_resolve(w, &cands, &EffectivePolicy::default()) {
        match key.image.as_str() {
            "bad:1" => res.insert_profile(
                "bad:1",
                &key.platform,
                image("bad:1", Some("1.8.2"), Some(Backend::Nft)),
            ),
            other => res.insert_error(other, &key.platform, "connection refused"),
        }
    }
    let containers = w.containers();
    evaluate_within(
        &SubjectInput {
            containers: &containers,
            exempt_reason: None,
            candidates: &cands,
            images: &res,
            policy: &EffectivePolicy::default(),
            min_severity: Severity::Info,
        },
        bounds,
    )
}

/// 40 containers of unresolved images, then one of a known-bad one.
fn many_containers() -> Workload {
    let mut cs: Vec<C> = (0..40)
        .map(|i| {
            let name: &'static str = Box::leak(format!("c{i}").into_boxed_str());
            let image: &'static str = Box::leak(format!("gone/{i}:1").into_boxed_str());
            c(name, image, &["NET_ADMIN"])
        })
        .collect();
    cs.push(c("last", "bad:1", &["NET_ADMIN"]));
    daemonset(true, &cs)
}

#[test]
fn a_bounded_listing_keeps_the_denying_reasons_and_counts_the_rest() {
    let w = many_containers();
    let nodes = [("n1", nft_node("1.8.9")), ("n2", legacy_node("1.8.9"))];
    let all = Bounds {
        max_reasons: usize::MAX,
        stop: &|| false,
    };
    let full = run_within(&w, &nodes, all).unwrap();
    assert_eq!(full.unlisted, 0);
    assert_eq!(
        full.decision,
        run(&w, &nodes, &[("bad:1", Some("1.8.2"), Some(Backend::Nft))]).decision
    );
    let total = full.decision.reasons.len();
    assert!(total > 40, "{total}");
    let five = Bounds {
        max_reasons: 5,
        stop: &|| false,
    };
    let bounded = run_within(&w, &nodes, five).unwrap();
    let d = &bounded.decision;
    assert_eq!(d.verdict, Verdict::Deny, "the verdict counts every reason");
    assert_eq!((d.reasons.len(), bounded.unlisted), (5, total - 5));
    let denying: Vec<&Reason> = full.decision.reasons_at_least(Verdict::Deny).collect();
    assert!(!denying.is_empty());
    for r in &denying {
        assert!(d.reasons.contains(r), "{} kept", r.code);
    }
    // The rest are the first warnings, in the full listing's order.
    let kept: Vec<&Reason> = full
        .decision
        .reasons
        .iter()
        .filter(|r| d.reasons.contains(r))
        .collect();
    assert_eq!(kept, d.reasons.iter().collect::<Vec<_>>());
}

#[test]
fn a_stopped_judgement_has_no_decision() {
    let w = many_containers();
    let nodes = [("n1", nft_node("1.8.9"))];
    let stop = Bounds {
        max_reasons: usize::MAX,
        stop: &|| true,
    };
    assert!(run_within(&w, &nodes, stop).is_none());
    // Nothing costly to stop: a workload that cannot write rules is judged.
    let plain = daemonset(false, &[c("app", "nginx:1", &[])]);
    let d = run_within(&plain, &nodes, stop).unwrap();
    assert_eq!(d.decision.verdict, Verdict::Allow);
}

#[test]
fn a_reason_on_nodes_of_several_classes_lists_them_in_candidate_order() {
    let w = host_writer("gone/x:1");
    // Alternating classes: the unresolved image holds on every node.
    let nodes: Vec<(String, P)> = (0..6)
        .map(|i| {
            let p = if i % 2 == 0 {
                nft_node("1.8.9")
            } else {
                legacy_node("1.8.9")
            };
            (format!("n{i}"), p)
        })
        .collect();
    let nodes: Vec<(&str, P)> = nodes.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
    let r = run(&w, &nodes, &[]);
    let unresolved = r.reason(ReasonCode::ImageUnresolved);
    assert_eq!(unresolved.nodes, ["n0", "n1", "n2", "n3", "n4", "n5"]);
    assert_eq!(unresolved.node.as_deref(), Some("n0"));
}

#[test]
fn candidate_selection_stops_when_asked() {
    let w = host_writer("x:1");
    let profiles: Vec<NodeNetfilterProfile> = (0..200)
        .map(|i| profile(&format!("n{i}"), &nft_node("1.8.9")))
        .collect();
    let refs: Vec<&NodeNetfilterProfile> = profiles.iter().collect();
    let nodes: Vec<Node> = (0..200)
        .map(|i| serde_json::from_value(json!({"metadata": {"name": format!("n{i}")}})).unwrap())
        .collect();
    let nrefs: Vec<&Node> = nodes.iter().collect();
    let platform = pf(DEFAULT_PLATFORM);
    for n in [&nrefs[..], &[]] {
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let stop = || asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 1;
        assert!(select_candidates_within(&w, &refs, n, &platform, None, &stop).is_none());
        let all = select_candidates_within(&w, &refs, n, &platform, None, &|| false).unwrap();
        assert_eq!(all.len(), 200);
    }
}

#[test]
fn an_unfinished_judgement_follows_unresolved_images_and_never_allows_silently() {
    let detail = "DaemonSet/kube-system/x within 8.0s";
    for (action, want) in [
        (UnresolvedAction::Deny, Verdict::Deny),
        (UnresolvedAction::Warn, Verdict::Warn),
        (UnresolvedAction::Allow, Verdict::Warn),
    ] {
        let d = unfinished(&policy_with(|s| s.unresolved_images = action), detail);
        assert_eq!(d.verdict, want, "{action:?}");
        let r = &d.reasons[0];
        assert_eq!((r.code, r.effect), (ReasonCode::JudgementTimedOut, want));
        assert!(r.message.contains(detail), "{}", r.message);
    }
    assert_eq!(
        unfinished(&EffectivePolicy::default(), detail).verdict,
        Verdict::Warn
    );
    // No policy selects the namespace: admitted, said.
    let other = policy_with(|s| {
        s.unresolved_images = UnresolvedAction::Deny;
        s.namespace_selector =
            Some(serde_json::from_value(json!({"matchLabels": {"team": "x"}})).unwrap());
    });
    assert!(!other.applies());
    assert_eq!(unfinished(&other, detail).verdict, Verdict::Warn);
}
