//! Writer inventory (pure): the containers of a node's running pods that can
//! write the node's own rules (hostNetwork with NET_ADMIN/ALL, or
//! privileged), resolved to the iptables their image bundles.
//!
//! Summaries, both over iptables-nft only (legacy never misreads native
//! expressions) and over the host's own iptables *and* the writers:
//! - `newestWriterVersion`: the newest iptables-nft that writes the node's rules;
//! - `oldestReaderVersion`: the oldest iptables-nft that reads them (every
//!   writer also reads: `iptables-save`/`-restore`, `-C` checks).
//!
//! An `iptables-wrapper` counts as nft when the node's marker chains (or
//! their absence) make the wrapper pick nft.

use crate::api::{NodeNetfilterProfileStatus, Writer};
use crate::compat::evaluate::{ContainerKind, ImageKey, ImageResolution, ImageResolutions, Scope};
use crate::facts::{Backend, Platform, Version};
use crate::projection::PodFacts;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// For Nodes whose labels name no platform.
pub static DEFAULT_PLATFORM: LazyLock<Platform> = LazyLock::new(Platform::linux_amd64);

/// A Node's platform from its labels (the default when they name none).
pub fn node_platform(labels: Option<&BTreeMap<String, String>>) -> Platform {
    crate::compat::evaluate::node_platform(labels, &DEFAULT_PLATFORM)
}

/// One container that can write the node's rules, before image resolution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriterContainer<'a> {
    pub namespace: &'a str,
    pub pod: &'a str,
    pub container: &'a str,
    /// None: a container without an image (invalid spec, reported as such).
    pub image: Option<&'a str>,
    pub init: bool,
}

/// The writer containers of one running pod (init containers too: what they
/// wrote at start stays in the kernel; ephemeral ones while they exist).
/// An iterator: most pods have none, and none needs a vector.
pub fn writer_containers(pod: &PodFacts) -> impl Iterator<Item = WriterContainer<'_>> + '_ {
    // The host's rules: hostNetwork and able to write (the scope says both).
    let running = pod.running;
    pod.containers
        .iter()
        .filter(move |c| running && c.scope == Scope::HostShared)
        .map(move |c| WriterContainer {
            namespace: &pod.namespace,
            pod: &pod.name,
            container: &c.name,
            image: c.image.as_deref(),
            init: c.kind == ContainerKind::Init,
        })
}

/// (image, platform) pairs the inventory needs resolved, deduplicated.
pub fn images_needed<'a>(
    pods: impl IntoIterator<Item = &'a PodFacts>,
    platform: &Platform,
) -> Vec<ImageKey> {
    let mut keys: Vec<ImageKey> = pods
        .into_iter()
        .flat_map(writer_containers)
        .filter_map(|w| w.image)
        .map(|image| ImageKey::new(image, platform))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    pub writers: Vec<Writer>,
    pub newest_writer_version: Option<Version>,
    pub oldest_reader_version: Option<Version>,
}

/// Whether a wrapper on this node writes nft: nft markers -> nft, else legacy
/// markers -> legacy, else nft (the wrapper's default).
fn wrapper_is_nft(status: Option<&NodeNetfilterProfileStatus>) -> bool {
    match status.and_then(|s| s.backends.as_ref()) {
        Some(b) if b.nft.hint_chain || b.nft.canary_chain => true,
        Some(b) if b.legacy.hint_chain || b.legacy.canary_chain => false,
        _ => true,
    }
}

fn nft_version(
    version: Option<Version>,
    backend: Option<Backend>,
    wrapper_nft: bool,
) -> Option<Version> {
    match backend {
        Some(Backend::Nft) => version,
        Some(Backend::Wrapper) if wrapper_nft => version,
        _ => None,
    }
}

/// The inventory for one node from its running pods and resolved images.
pub fn inventory<'a>(
    pods: impl IntoIterator<Item = &'a PodFacts>,
    status: Option<&NodeNetfilterProfileStatus>,
    images: &ImageResolutions,
    platform: &Platform,
) -> Inventory {
    let mut writers: Vec<Writer> = Vec::new();
    for pod in pods {
        for w in writer_containers(pod) {
            let mut writer = Writer {
                pod: [w.namespace, "/", w.pod].concat(),
                container: w.container.to_string(),
                image: w.image.unwrap_or_default().to_string(),
                ..Default::default()
            };
            let mut notes: Vec<String> = Vec::new();
            if w.init {
                notes.push("init container: its rules were written at pod start".into());
            }
            match w.image.map(|i| images.get(i, platform)) {
                None => notes.push("container has no image".into()),
                Some(None) => notes.push(format!("image not resolved for {platform}")),
                Some(Some(ImageResolution::Unresolved { error })) => {
                    notes.push(format!("image not resolved for {platform}: {error}"))
                }
                Some(Some(ImageResolution::Resolved(p))) => {
                    writer.digest = Some(p.digest.clone());
                    if let Some(n) = &p.nftables {
                        writer.nft_version = n.release();
                        writer.nft_writes_type_userdata = n.writes_type_userdata;
                        writer.nft_userdata_reader = n.userdata_reader;
                    }
                    match &p.iptables {
                        None => notes.push("image has no iptables".into()),
                        Some(f) => {
                            writer.version = f.version;
                            writer.backend = f.backend;
                            if f.version.is_none() {
                                notes.push("iptables release unknown".into());
                            }
                            if f.backend.is_none() {
                                notes.push("image has no iptables command".into());
                            }
                        }
                    }
                }
            }
            if !notes.is_empty() {
                writer.note = Some(notes.join("; "));
            }
            writers.push(writer);
        }
    }
    writers.sort_by(|a, b| (&a.pod, &a.container).cmp(&(&b.pod, &b.container)));
    writers.dedup_by(|a, b| a.pod == b.pod && a.container == b.container);
    let (newest, oldest) = nft_writer_range(&writers, status);
    Inventory {
        writers,
        newest_writer_version: newest,
        oldest_reader_version: oldest,
    }
}

/// The newest and oldest iptables-nft among `writers` and the host's own
/// tools (`newestWriterVersion`, `oldestReaderVersion`). `nfguard check
/// --assume` recomputes them for a profile whose host facts it changed.
pub fn nft_writer_range(
    writers: &[Writer],
    status: Option<&NodeNetfilterProfileStatus>,
) -> (Option<Version>, Option<Version>) {
    let wrapper_nft = wrapper_is_nft(status);
    let host = status.and_then(|s| s.iptables.as_ref());
    let host_nft = host.and_then(|h| nft_version(h.version, h.backend, wrapper_nft));
    let nft_versions = writers
        .iter()
        .filter_map(|w| nft_version(w.version, w.backend, wrapper_nft))
        .chain(host_nft);
    let (mut newest, mut oldest) = (None::<Version>, None::<Version>);
    for v in nft_versions {
        newest = Some(newest.map_or(v, |n| n.max(v)));
        oldest = Some(oldest.map_or(v, |o| o.min(v)));
    }
    (newest, oldest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pf(s: &str) -> Platform {
        s.parse().unwrap()
    }
    use crate::api::{BackendFacts, BackendsFacts};
    use crate::facts::{ImageProfile, IptablesFacts};
    use serde_json::json;

    fn pod(name: &str, host: bool, phase: &str, containers: serde_json::Value) -> PodFacts {
        PodFacts::of(&raw_pod(name, host, phase, containers))
    }

    fn raw_pod(
        name: &str,
        host: bool,
        phase: &str,
        containers: serde_json::Value,
    ) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"hostNetwork": host, "nodeName": "n1", "containers": containers},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn c(name: &str, image: &str, sc: serde_json::Value) -> serde_json::Value {
        json!({"name": name, "image": image, "securityContext": sc})
    }

    fn resolved(images: &mut ImageResolutions, image: &str, v: Option<&str>, b: Option<Backend>) {
        images.insert_profile(
            image,
            &pf("linux/arm64"),
            ImageProfile {
                image: image.into(),
                digest: format!("sha256:{image}"),
                platform: "linux/arm64".into(),
                iptables: Some(IptablesFacts {
                    version: v.map(|v| v.parse().unwrap()),
                    backend: b,
                    ..Default::default()
                }),
                nftables: None,
            },
        );
    }

    #[test]
    fn only_host_network_writers_of_running_pods() {
        let pods = [
            pod(
                "proxy",
                true,
                "Running",
                json!([c(
                    "p",
                    "proxy:1",
                    json!({"capabilities": {"add": ["NET_ADMIN"]}})
                )]),
            ),
            pod(
                "priv",
                true,
                "Running",
                json!([c("x", "priv:1", json!({"privileged": true}))]),
            ),
            pod(
                "all",
                true,
                "Running",
                json!([c(
                    "x",
                    "all:1",
                    json!({"capabilities": {"add": ["CAP_ALL"]}})
                )]),
            ),
            pod("ro", true, "Running", json!([c("x", "ro:1", json!({}))])),
            pod(
                "ownns",
                false,
                "Running",
                json!([c("x", "ownns:1", json!({"privileged": true}))]),
            ),
            pod(
                "done",
                true,
                "Succeeded",
                json!([c("x", "done:1", json!({"privileged": true}))]),
            ),
        ];
        let names: Vec<&str> = pods
            .iter()
            .flat_map(writer_containers)
            .map(|w| w.pod)
            .collect();
        assert_eq!(names, ["proxy", "priv", "all"]);
        let keys = images_needed(pods.iter(), &pf("linux/arm64"));
        assert_eq!(
            keys.iter().map(|k| k.image.as_str()).collect::<Vec<_>>(),
            ["all:1", "priv:1", "proxy:1"]
        );
    }

    #[test]
    fn inventory_resolves_versions_and_summarises_nft_readers() {
        let mut p = raw_pod(
            "cni",
            true,
            "Running",
            json!([
                c("agent", "cni:new", json!({"privileged": true})),
                c("legacy", "legacy:1", json!({"privileged": true})),
                c("wrap", "wrap:1", json!({"privileged": true})),
                c("gone", "unreachable:1", json!({"privileged": true})),
                c("plain", "busybox", json!({"privileged": true}))
            ]),
        );
        p.spec.as_mut().unwrap().init_containers = Some(vec![
            serde_json::from_value(c(
                "init",
                "old:1",
                json!({"capabilities": {"add": ["NET_ADMIN"]}}),
            ))
            .unwrap(),
        ]);
        let p = PodFacts::of(&p);
        let mut images = ImageResolutions::new();
        resolved(&mut images, "cni:new", Some("1.8.11"), Some(Backend::Nft));
        resolved(
            &mut images,
            "legacy:1",
            Some("1.8.4"),
            Some(Backend::Legacy),
        );
        resolved(&mut images, "wrap:1", Some("1.8.9"), Some(Backend::Wrapper));
        resolved(&mut images, "old:1", Some("1.8.7"), Some(Backend::Nft));
        images.insert_error("unreachable:1", &pf("linux/arm64"), "connection refused");
        images.insert_profile(
            "busybox",
            &pf("linux/arm64"),
            ImageProfile {
                image: "busybox".into(),
                digest: "sha256:b".into(),
                platform: "linux/arm64".into(),
                iptables: None,
                nftables: None,
            },
        );
        let status = NodeNetfilterProfileStatus {
            iptables: Some(IptablesFacts {
                version: Some("1.8.9".parse().unwrap()),
                backend: Some(Backend::Nft),
                ..Default::default()
            }),
            ..Default::default()
        };
        let inv = inventory([&p], Some(&status), &images, &pf("linux/arm64"));
        let by: BTreeMap<&str, &Writer> = inv
            .writers
            .iter()
            .map(|w| (w.container.as_str(), w))
            .collect();
        assert_eq!(inv.writers.len(), 6);
        assert_eq!(
            by["agent"].version.map(|v| v.to_string()).as_deref(),
            Some("1.8.11")
        );
        assert_eq!(by["agent"].digest.as_deref(), Some("sha256:cni:new"));
        assert!(
            by["init"]
                .note
                .as_deref()
                .unwrap()
                .contains("init container")
        );
        assert!(
            by["gone"]
                .note
                .as_deref()
                .unwrap()
                .contains("connection refused")
        );
        assert_eq!(by["plain"].note.as_deref(), Some("image has no iptables"));
        // nft readers: host 1.8.9, agent 1.8.11, wrapper 1.8.9 (no markers: nft), init 1.8.7; legacy ignored.
        assert_eq!(inv.newest_writer_version, Some("1.8.11".parse().unwrap()));
        assert_eq!(inv.oldest_reader_version, Some("1.8.7".parse().unwrap()));
    }

    #[test]
    fn wrapper_on_a_legacy_marked_node_is_not_an_nft_reader() {
        let p = pod(
            "w",
            true,
            "Running",
            json!([c("wrap", "wrap:1", json!({"privileged": true}))]),
        );
        let mut images = ImageResolutions::new();
        resolved(&mut images, "wrap:1", Some("1.8.7"), Some(Backend::Wrapper));
        let status = NodeNetfilterProfileStatus {
            backends: Some(BackendsFacts {
                nft: BackendFacts::default(),
                legacy: BackendFacts {
                    hint_chain: true,
                    ..Default::default()
                },
            }),
            ..Default::default()
        };
        let inv = inventory([&p], Some(&status), &images, &pf("linux/arm64"));
        assert_eq!(inv.writers.len(), 1);
        assert_eq!(inv.oldest_reader_version, None);
        assert_eq!(inv.newest_writer_version, None);
    }

    #[test]
    fn platform_from_node_labels() {
        let l: BTreeMap<String, String> =
            [("kubernetes.io/arch".to_string(), "arm64".to_string())].into();
        assert_eq!(node_platform(Some(&l)), pf("linux/arm64"));
        assert_eq!(node_platform(None), *DEFAULT_PLATFORM);
    }
}
