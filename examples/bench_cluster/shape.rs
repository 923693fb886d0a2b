//! What the hollow cluster looks like, as pure functions of a node's index:
//! its Node (platform labels ~75 % amd64 / 25 % arm64, some with an
//! unrelated NoSchedule taint), the status its simulated reporter writes
//! (backend, iptables release, minReaderVersion, hazards) and its pods
//! (~90 % unprivileged, the rest hostNetwork + NET_ADMIN writers whose
//! images are in the test registry). Deterministic, so a re-run after a
//! crash produces the same objects and the convergence check knows what
//! every node must end up with.

use k8s_openapi::api::core::v1::{Node, Pod};
use nfguard::api::{
    ActiveBackend, BackendFacts, BackendsFacts, BridgeFacts, KernelFacts, KernelModules,
    ModuleState, NativeFeature, NodeNetfilterProfileStatus,
};
use nfguard::facts::{
    Backend, Evidence, EvidenceSource, Hazard, HazardCode, IptablesFacts, Severity, Version,
};
use serde_json::json;

/// Every hollow Node carries this label (value "true"): cleanup and the
/// reporter DaemonSet's anti-affinity select by it.
pub const HOLLOW_LABEL: &str = "bench.nfguard.io/hollow";
/// The namespace of the hollow pods.
pub const NAMESPACE: &str = "nfguard-bench";
/// The iptables images the writers run, as `e2e/push-images.sh` names them
/// under `$REGISTRY/nfguard-e2e/`.
pub const WRITER_IMAGES: [&str; 3] = [
    "incident:1.8.7-nft",
    "compatible:1.8.11-wrapper",
    "legacy:1.8.9-legacy",
];

pub fn node_name(i: usize) -> String {
    format!("hollow-{i:05}")
}

/// The index back from a hollow node's name.
pub fn node_index(name: &str) -> Option<usize> {
    name.strip_prefix("hollow-")?.parse().ok()
}

pub fn arch(i: usize) -> &'static str {
    if i % 4 == 3 { "arm64" } else { "amd64" }
}

/// A Node as a kubelet would register it, minus the status (no kubelet runs).
pub fn node(i: usize) -> Node {
    let name = node_name(i);
    let taints = if i % 10 == 7 {
        json!([{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch(i),
            "kubernetes.io/hostname": name,
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": arch(i),
            "node.kubernetes.io/instance-type": "hollow",
            HOLLOW_LABEL: "true",
        }},
        "spec": {"taints": taints},
    }))
    .expect("a valid Node")
}

/// The facts a node's reporter states, before they become a status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    pub backend: Backend,
    pub version: Version,
    /// Set on some nft nodes: rules a reader older than this misreads.
    pub min_reader: Option<Version>,
    /// A few nodes carry a critical hazard (the 1.25 incident's DROP).
    pub critical: bool,
}

const RELEASES: [Version; 3] = [
    Version::new(1, 8, 7),
    Version::new(1, 8, 9),
    Version::new(1, 8, 11),
];

pub fn facts(i: usize) -> Facts {
    let backend = if i % 5 == 4 {
        Backend::Legacy
    } else {
        Backend::Nft
    };
    Facts {
        backend,
        version: RELEASES[(i / 5) % 3],
        min_reader: (backend == Backend::Nft && i.is_multiple_of(7))
            .then_some(Version::new(1, 8, 8)),
        critical: i % 500 == 13,
    }
}

/// A node's facts after "someone upgraded iptables": the next release
/// (which changes the node's `nfguard.io/iptables-version` label).
pub fn changed(f: Facts) -> Facts {
    let at = RELEASES.iter().position(|v| *v == f.version).unwrap_or(0);
    Facts {
        version: RELEASES[(at + 1) % RELEASES.len()],
        ..f
    }
}

fn backend_facts(rules: u32, kubelet_chains: bool) -> BackendFacts {
    BackendFacts {
        tables: if rules > 0 { 3 } else { 0 },
        chains: if rules > 0 { 40 } else { 0 },
        rules,
        hint_chain: kubelet_chains,
        canary_chain: kubelet_chains,
        marker_tables: if kubelet_chains {
            vec!["ip/mangle".into(), "ip6/mangle".into()]
        } else {
            Vec::new()
        },
    }
}

/// The reporter-owned status of a node with these facts, as the real
/// reporter shapes it (a kube-proxy's worth of rules, dpkg and binary
/// evidence, the native features behind a minReaderVersion).
pub fn status(
    f: Facts,
    probe_time: &str,
    probe_interval_seconds: u32,
) -> NodeNetfilterProfileStatus {
    let nft = f.backend == Backend::Nft;
    let rules = 180;
    let mut hazards = Vec::new();
    if f.critical {
        hazards.push(Hazard {
            code: HazardCode::FirewallUnconditionalDrop,
            severity: Severity::Critical,
            message: "KUBE-FIREWALL drops every packet: the mark match was lost".into(),
            backend: Some(f.backend),
            table: Some("filter".into()),
            chain: Some("KUBE-FIREWALL".into()),
            rule: Some("-A KUBE-FIREWALL -m comment --comment \"kubernetes firewall for dropping marked packets\" -j DROP".into()),
        });
    }
    let native_features = f.min_reader.map(|v| {
        vec![
            NativeFeature {
                feature: "meta-mark".into(),
                min_reader: Some(v),
                rules: 4,
                example: "ip/filter/KUBE-FIREWALL".into(),
            },
            NativeFeature {
                feature: "transport-ports".into(),
                min_reader: None,
                rules: 37,
                example: "ip/nat/KUBE-SERVICES".into(),
            },
        ]
    });
    NodeNetfilterProfileStatus {
        iptables: Some(IptablesFacts {
            version: Some(f.version),
            backend: Some(f.backend),
            package_version: Some(format!("{}-1", f.version)),
            evidence: vec![
                Evidence {
                    source: EvidenceSource::Dpkg,
                    path: "/var/lib/dpkg/status".into(),
                    detail: format!("iptables {}-1", f.version),
                },
                Evidence {
                    source: EvidenceSource::Alternatives,
                    path: "/etc/alternatives/iptables".into(),
                    detail: format!("/usr/sbin/iptables-{}", f.backend),
                },
            ],
            conflicts: Vec::new(),
        }),
        kernel: Some(KernelFacts {
            release: "6.1.0-28-cloud-amd64".into(),
            nf_tables: true,
            ip_tables: true,
            // What a reporter writes: the profile's real size.
            modules: Some(KernelModules {
                ip_tables: ModuleState::Loaded,
                ip6_tables: ModuleState::Loaded,
                nf_tables: ModuleState::Loaded,
                nft_compat: ModuleState::Module,
                xt: nfguard::node::xt_modules::EXTENSIONS
                    .iter()
                    .map(|e| nfguard::api::XtModule {
                        name: e.module.into(),
                        state: ModuleState::Module,
                    })
                    .collect(),
            }),
        }),
        backends: Some(BackendsFacts {
            nft: backend_facts(if nft { rules } else { 0 }, nft),
            legacy: backend_facts(if nft { 0 } else { rules }, !nft),
        }),
        active_backend: Some(if nft {
            ActiveBackend::Nft
        } else {
            ActiveBackend::Legacy
        }),
        min_reader_version: f.min_reader,
        bridge: Some(BridgeFacts {
            br_netfilter: true,
            call_iptables: true,
            call_ip6tables: true,
        }),
        ip_forward: Some(true),
        hazards: Some(hazards),
        native_features,
        wrapper_backend: Some(f.backend),
        last_probe_time: Some(probe_time.to_string()),
        probe_error: None,
        probe_interval_seconds: Some(probe_interval_seconds),
        ..Default::default()
    }
}

/// How many of a node's `per_node` pods write netfilter rules: ~10 %, at
/// least one.
pub fn writers_per_node(per_node: usize) -> usize {
    if per_node == 0 {
        0
    } else {
        per_node.div_ceil(10)
    }
}

pub fn pod_name(i: usize, j: usize) -> String {
    format!("{}-p{j:02}", node_name(i))
}

/// Pod `j` of node `i`, bound to it (`spec.nodeName`: no scheduler).
/// Writers run the test registry's iptables images with hostNetwork and
/// NET_ADMIN; the others an ordinary application image that is never pulled.
pub fn pod(i: usize, j: usize, per_node: usize, registry: &str) -> Pod {
    let node = node_name(i);
    let writer = j < writers_per_node(per_node);
    let spec = if writer {
        let image = WRITER_IMAGES[(i + j) % WRITER_IMAGES.len()];
        json!({
            "nodeName": node, "hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet",
            "containers": [{
                "name": "agent", "image": format!("{registry}/nfguard-e2e/{image}"),
                "command": ["sleep", "infinity"],
                "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
            }],
            "tolerations": [{"operator": "Exists"}],
        })
    } else {
        json!({
            "nodeName": node,
            "containers": [{
                "name": "app", "image": format!("registry.example/team-{}/app:{}.0", j % 7, j % 3),
                "ports": [{"containerPort": 8080, "name": "http"}],
                "env": [{"name": "APP_MODE", "value": "production"}],
                "resources": {"requests": {"cpu": "50m", "memory": "64Mi"},
                              "limits": {"memory": "128Mi"}},
                "securityContext": {"runAsNonRoot": true, "runAsUser": 10001,
                                    "allowPrivilegeEscalation": false},
            }],
        })
    };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(i, j), "namespace": NAMESPACE,
                     "labels": {"app": if writer { "net-agent" } else { "web" }, "bench": "hollow"}},
        "spec": spec,
    }))
    .expect("a valid Pod")
}

pub fn is_writer(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.host_network) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(n: usize, pred: impl Fn(usize) -> bool) -> f64 {
        (0..n).filter(|&i| pred(i)).count() as f64 / n as f64
    }

    #[test]
    fn the_mix_is_as_documented() {
        let n = 1000;
        assert_eq!(share(n, |i| arch(i) == "arm64"), 0.25);
        assert_eq!(share(n, |i| facts(i).backend == Backend::Legacy), 0.2);
        assert_eq!(share(n, |i| i % 10 == 7), 0.1, "tainted");
        let critical = (0..n).filter(|&i| facts(i).critical).count();
        assert_eq!(critical, 2, "a few critical hazards");
        let with_min = (0..n).filter(|&i| facts(i).min_reader.is_some()).count();
        assert!((100..150).contains(&with_min), "{with_min}");
        for v in RELEASES {
            assert!((0..n).any(|i| facts(i).version == v), "{v} is used");
        }
    }

    #[test]
    fn min_reader_only_on_nft_and_changes_move_the_version() {
        for i in 0..200 {
            let f = facts(i);
            if f.min_reader.is_some() {
                assert_eq!(f.backend, Backend::Nft, "node {i}");
            }
            let c = changed(f);
            assert_ne!(c.version, f.version);
            assert_eq!((c.backend, c.min_reader), (f.backend, f.min_reader));
        }
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(node_name(42), "hollow-00042");
        assert_eq!(node_index("hollow-00042"), Some(42));
        assert_eq!(node_index("e2e-nft"), None);
        assert_eq!(pod_name(3, 7), "hollow-00003-p07");
    }

    #[test]
    fn writers_are_about_a_tenth_and_run_registry_images() {
        assert_eq!(writers_per_node(20), 2);
        assert_eq!(writers_per_node(5), 1);
        assert_eq!(writers_per_node(0), 0);
        let pods: Vec<Pod> = (0..20).map(|j| pod(1, j, 20, "127.0.0.1:35000")).collect();
        let writers: Vec<&Pod> = pods.iter().filter(|p| is_writer(p)).collect();
        assert_eq!(writers.len(), 2);
        for w in writers {
            let c = &w.spec.as_ref().unwrap().containers[0];
            assert!(
                c.image
                    .as_deref()
                    .unwrap()
                    .starts_with("127.0.0.1:35000/nfguard-e2e/")
            );
            let caps = c.security_context.as_ref().unwrap().capabilities.as_ref();
            assert!(
                caps.unwrap()
                    .add
                    .as_ref()
                    .unwrap()
                    .contains(&"NET_ADMIN".into())
            );
        }
        assert!(
            pods.iter()
                .all(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some("hollow-00001"))
        );
    }

    #[test]
    fn the_status_says_what_the_facts_say() {
        let f = Facts {
            backend: Backend::Nft,
            version: Version::new(1, 8, 9),
            min_reader: Some(Version::new(1, 8, 8)),
            critical: true,
        };
        let s = status(f, "2026-01-01T00:00:00Z", 60);
        assert_eq!(s.active_backend, Some(ActiveBackend::Nft));
        assert_eq!(s.min_reader_version, Some(Version::new(1, 8, 8)));
        assert_eq!(s.backends.as_ref().unwrap().legacy.rules, 0);
        let h = s.hazards.as_ref().unwrap();
        assert_eq!((h.len(), h[0].severity), (1, Severity::Critical));
        assert_eq!(s, s.reporter_fields(), "only reporter-owned fields");
        let labels = nfguard::controller::plan::labels::desired_labels(Some(&s));
        assert_eq!(labels.len(), 3);
    }
}
