//! The policy reports' content, from the controller's caches: every running
//! pod that can write netfilter rules, judged on the node it runs on through
//! `crate::judgement` (the webhook's path, `Severity::Info`: every reason),
//! grouped under its workload ([`crate::reports`]). No API read: the pods,
//! profiles, Nodes, policies and owners come from the caches; the only I/O
//! is the image look-ups (cached by `Bounded`).

use crate::api::NodeNetfilterProfile;
use crate::compat::evaluate::{Candidate, ImageKey};
use crate::controller::cache::stores::Caches;
use crate::controller::plan::inventory::node_platform;
use crate::controller::reports::owners::Parents;
use crate::facts::{Platform, Severity};
use crate::judgement::{Bounded, Scene, Subject};
use crate::projection::PodFacts;
use crate::reports::{DesiredReport, JudgedPod, ObjectId, PodRef, build_reports, resolve_owner};
use kube::runtime::reflector::ObjectRef;
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use tokio::time::Instant;

/// A workload as reports are keyed: its namespace and the object.
pub type Workload = (String, ObjectId);

/// Which workloads a pass rebuilds.
#[derive(Clone, Debug)]
pub enum Scope {
    /// Every workload (start, API switch, resync).
    All,
    /// These (resolved) workloads only.
    Only(HashSet<Workload>),
}

impl Scope {
    pub fn contains(&self, w: &Workload) -> bool {
        match self {
            Scope::All => true,
            Scope::Only(set) => set.contains(w),
        }
    }
}

/// A pod's raw workload key: its controller (a ReplicaSet or Job is
/// resolved later, when the pass runs) or itself.
pub fn raw_workload(pod: &PodFacts) -> Option<Workload> {
    let r = pod_ref(pod)?;
    let id = r.controller.clone().unwrap_or_else(|| r.id());
    Some((r.namespace, id))
}

/// None for a pod without a name (no API object is one).
fn pod_ref(pod: &PodFacts) -> Option<PodRef> {
    (!pod.name.is_empty()).then(|| PodRef {
        namespace: pod.namespace.to_string(),
        name: pod.name.to_string(),
        uid: pod.uid.to_string(),
        controller: pod.controller.clone(),
    })
}

/// `raw` resolved through the owner stores: the workload a report is for.
/// None while a ReplicaSet or Job is not known yet.
pub fn resolve(parents: &Parents, raw: &Workload) -> Option<Workload> {
    let (ns, id) = raw;
    let pod = PodRef {
        namespace: ns.clone(),
        name: id.name.clone(),
        uid: id.uid.clone(),
        controller: (id.kind != "Pod" || id.api_version != "v1").then(|| id.clone()),
    };
    resolve_owner(&pod, |o| parents.parent_of(ns, o))
        .ok()
        .map(|owner| (ns.clone(), owner))
}

/// One running pod to judge, with what its judgement borrows.
pub struct Entry {
    pod: Arc<PodFacts>,
    pod_ref: PodRef,
    owner: ObjectId,
    node: String,
    platform: Platform,
    profile: Option<Arc<NodeNetfilterProfile>>,
}

impl Entry {
    fn workload(&self) -> (&str, &ObjectId) {
        (&self.pod_ref.namespace, &self.owner)
    }
}

/// What a pass found besides the reports.
#[derive(Debug, Default, PartialEq)]
pub struct Judged {
    pub reports: Vec<DesiredReport>,
    /// Pods skipped because their ReplicaSet or Job is not in the store
    /// yet (its watch event brings them back).
    pub waiting: usize,
    /// Workloads left for later, neither written nor deleted: a pod of
    /// theirs runs on a node whose first round is not over
    /// ([`crate::controller::cache::first_rounds`]; its end marks them again).
    pub deferred: BTreeSet<Workload>,
}

/// A pass's running pods before any is judged: grouped by workload, so
/// that they can be judged (and their reports built, written and dropped)
/// a few workloads at a time ([`Gathered::chunks`]).
pub struct Gathered {
    /// Sorted by workload.
    entries: Vec<Entry>,
    /// As in [`Judged`].
    pub waiting: usize,
    pub deferred: BTreeSet<Workload>,
}

impl Gathered {
    /// The entries in runs of whole workloads, each run holding about
    /// `pods` pods (more when one workload alone has more: a report is
    /// built from all of its workload's pods).
    pub fn chunks(&self, pods: usize) -> impl Iterator<Item = &[Entry]> {
        let mut rest = self.entries.as_slice();
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let mut end = pods.clamp(1, rest.len());
            while end < rest.len() && rest[end].workload() == rest[end - 1].workload() {
                end += 1;
            }
            let (chunk, tail) = rest.split_at(end);
            rest = tail;
            Some(chunk)
        })
    }

    /// How many pods are to be judged.
    pub fn pods(&self) -> usize {
        self.entries.len()
    }
}

/// The running writer pods of the workloads in `scope`, from the caches,
/// but those of deferred workloads; how many wait for their owner; the
/// deferred workloads.
pub fn gather(caches: &Caches, parents: &Parents, scope: &Scope) -> Gathered {
    let mut waiting = 0;
    let mut deferred = BTreeSet::new();
    let mut out = Vec::new();
    for pod in caches.pods() {
        if !pod.running {
            continue;
        }
        let Some(node) = pod.node.as_deref().map(str::to_string) else {
            continue;
        };
        let Some(pod_ref) = pod_ref(&pod) else {
            continue;
        };
        let owner = match resolve_owner(&pod_ref, |o| parents.parent_of(&pod_ref.namespace, o)) {
            Ok(o) => o,
            Err(e) => {
                tracing::debug!(error = %e, "pod not reported yet");
                waiting += 1;
                continue;
            }
        };
        let workload = (pod_ref.namespace.clone(), owner.clone());
        if !scope.contains(&workload) {
            continue;
        }
        let known = caches.nodes.get(&ObjectRef::new(&node));
        // A pod on a node the caches do not know has no round to wait for.
        if known.is_some() && !caches.first_rounds.is_done(&node) {
            deferred.insert(workload);
            continue;
        }
        let labels = known.map(|n| n.labels());
        out.push(Entry {
            platform: node_platform(labels.as_ref()),
            profile: caches.profile(&node),
            pod,
            pod_ref,
            owner,
            node,
        });
    }
    // A workload is written whole or not at all (a DaemonSet's report
    // listing some of its nodes would be written again with the rest).
    out.retain(|e| !deferred.contains(&(e.pod_ref.namespace.clone(), e.owner.clone())));
    out.sort_by(|a, b| a.workload().cmp(&b.workload()));
    Gathered {
        entries: out,
        waiting,
        deferred,
    }
}

/// The reports of these pods' workloads (`entries` holds every pod of
/// each: a [`Gathered::chunks`] chunk): each running pod judged on its node
/// (image look-ups not answered by `deadline` count as unresolved).
pub async fn judge_entries(
    caches: &Caches,
    images: &Bounded,
    entries: &[Entry],
    deadline: Instant,
) -> Vec<DesiredReport> {
    let book = caches.policy_book();
    let scene = Scene {
        profiles: &[],
        nodes: &[],
        policies: &book,
        default_platform: &crate::controller::plan::inventory::DEFAULT_PLATFORM,
        index: None,
    };
    let prepared: Vec<_> = entries
        .iter()
        .map(|e| {
            let subject = Subject::RunningPod {
                pod: &e.pod,
                node: Candidate::new(&e.node, e.platform.clone(), e.profile.as_deref()),
            };
            scene.prepare(subject)
        })
        .collect();
    // A report is its tenant's: each pod is judged with answers read with
    // its own pull secrets, never another pod's for the same image string.
    let keys: Vec<Vec<ImageKey>> = prepared.iter().map(|p| p.images.to_vec()).collect();
    let pods: Vec<&PodFacts> = entries.iter().map(|e| e.pod.as_ref()).collect();
    let resolved = images.resolve_per_pod(&pods, &keys, deadline).await;
    let decisions: Vec<_> = prepared
        .iter()
        .enumerate()
        .map(|(i, p)| p.decide(resolved.of(i), Severity::Info))
        .collect();
    let sources: Vec<_> = prepared.iter().map(|p| p.policy.sources.clone()).collect();
    let judged: Vec<JudgedPod<'_>> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| JudgedPod {
            pod: &e.pod_ref,
            owner: &e.owner,
            node: &e.node,
            policies: &sources[i],
            decision: &decisions[i],
        })
        .collect();
    build_reports(&judged)
}

/// The reports of the workloads in `scope`, all at once (tests; the writer
/// judges [`Gathered::chunks`] one at a time). The caches must have listed.
pub async fn judge_reports(
    caches: &Caches,
    parents: &Parents,
    images: &Bounded,
    scope: &Scope,
    deadline: Instant,
) -> Judged {
    let gathered = gather(caches, parents, scope);
    Judged {
        reports: judge_entries(caches, images, &gathered.entries, deadline).await,
        waiting: gathered.waiting,
        deferred: gathered.deferred,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::evaluate::ImageResolutions;
    use crate::controller::cache::stores::{FirstLists, caches};
    use crate::controller::reports::owners::parents;
    use crate::controller::reports::owners::tests::replica_set;
    use crate::facts::{Backend, ImageProfile, IptablesFacts};
    use crate::judgement::FixedImages;
    use crate::reports::ResultKind;
    use crate::reports::build::without_hash;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;
    use std::time::Duration;

    const OLD: &str = "reg.test/cni:1.8.7";
    const NEW: &str = "reg.test/cni:1.8.11";

    /// An nft node whose host iptables 1.8.9 wrote native expressions.
    fn profile(node: &str) -> crate::api::NodeNetfilterProfile {
        let backend = |markers: bool| {
            json!({"tables": 1, "chains": 1, "rules": 1, "hintChain": markers,
                   "canaryChain": markers, "markerTables": []})
        };
        serde_json::from_value(json!({
            "apiVersion": "nfguard.io/v1alpha1", "kind": "NodeNetfilterProfile",
            "metadata": {"name": node},
            "spec": {"nodeName": node},
            "status": {"iptables": {"version": "1.8.9", "backend": "nft"},
                       "activeBackend": "nft",
                       "backends": {"nft": backend(true), "legacy": backend(false)}}
        }))
        .unwrap()
    }

    fn node(name: &str) -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(json!({"metadata": {"name": name,
            "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}}}))
        .unwrap()
    }

    /// A running hostNetwork + NET_ADMIN pod controlled by `owner`.
    fn pod(name: &str, node: &str, image: &str, owner: Option<(&str, &str, &str)>) -> Pod {
        let refs = owner.map(|(api, kind, n)| {
            json!([{"apiVersion": api, "kind": kind, "name": n, "uid": format!("uid-{n}"),
                    "controller": true}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "ownerReferences": refs},
            "spec": {"nodeName": node, "hostNetwork": true,
                     "containers": [{"name": "c", "image": image,
                         "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    fn images() -> ImageResolutions {
        let platform = "linux/amd64".parse().unwrap();
        let mut images = ImageResolutions::new();
        for (image, version) in [(OLD, "1.8.7"), (NEW, "1.8.11")] {
            images.insert_profile(
                image,
                &platform,
                ImageProfile {
                    image: image.into(),
                    digest: format!("sha256:{}", "b".repeat(64)),
                    platform: platform.to_string(),
                    iptables: Some(IptablesFacts {
                        version: Some(version.parse().unwrap()),
                        backend: Some(Backend::Nft),
                        ..Default::default()
                    }),
                    nftables: None,
                },
            );
        }
        images
    }

    #[tokio::test]
    async fn running_pods_are_judged_on_their_nodes_under_their_workloads() {
        let (caches, mut feeds) = caches();
        let pods = vec![
            pod("ds-a", "n1", OLD, Some(("apps/v1", "DaemonSet", "cni"))),
            pod("ds-b", "n2", NEW, Some(("apps/v1", "DaemonSet", "cni"))),
            pod(
                "web-1",
                "n1",
                OLD,
                Some(("apps/v1", "ReplicaSet", "web-5d")),
            ),
            // Its ReplicaSet is not known yet: it waits, no guess.
            pod(
                "new-1",
                "n2",
                OLD,
                Some(("apps/v1", "ReplicaSet", "new-9f")),
            ),
            pod("bare", "n2", NEW, None),
        ];
        feeds.list(FirstLists {
            nodes: vec![node("n1"), node("n2")],
            profiles: vec![profile("n1"), profile("n2")],
            pods,
            policies: Vec::new(),
            namespaces: Vec::new(),
        });
        let (parents, mut parent_feeds) = parents();
        parent_feeds.list(
            vec![replica_set("ns", "web-5d", "uid-web-5d", Some("web"))],
            Vec::new(),
        );
        caches.wait_listed(Duration::from_secs(1)).await.unwrap();
        let bounded = Bounded::new(Arc::new(FixedImages(images())), 2);
        let deadline = Instant::now() + Duration::from_secs(5);
        // Before n2's first round is over, the workloads with a pod there
        // wait (the DaemonSet whole, though its pod on n1 could be judged).
        caches.first_rounds.done("n1");
        let judged = judge_reports(&caches, &parents, &bounded, &Scope::All, deadline).await;
        let names: Vec<&str> = judged
            .reports
            .iter()
            .map(|r| without_hash(&r.name))
            .collect();
        assert_eq!(names, ["nfguard-deployment-web"]);
        let deferred: Vec<&str> = judged.deferred.iter().map(|w| w.1.name.as_str()).collect();
        assert_eq!(deferred, ["cni", "bare"]);
        caches.first_rounds.done("n2");
        let judged = judge_reports(&caches, &parents, &bounded, &Scope::All, deadline).await;
        assert!(judged.deferred.is_empty());
        assert_eq!(judged.waiting, 1);
        type Listed<'a> = Vec<(String, &'a str, Option<ResultKind>)>;
        let got: Vec<(&str, Listed<'_>)> = judged
            .reports
            .iter()
            .map(|r| {
                let results = r
                    .results
                    .iter()
                    .map(|x| {
                        (
                            x.resources[0].name.clone().unwrap(),
                            x.rule.as_str(),
                            x.result,
                        )
                    })
                    .collect();
                (without_hash(&r.name), results)
            })
            .collect();
        let fail = Some(ResultKind::Fail);
        let pass = Some(ResultKind::Pass);
        assert_eq!(
            got,
            [
                (
                    "nfguard-daemonset-cni",
                    vec![
                        ("ds-a".to_string(), "OldReaderNewRules", fail),
                        ("ds-b".to_string(), "Compatible", pass),
                    ]
                ),
                (
                    "nfguard-deployment-web",
                    vec![("web-1".to_string(), "OldReaderNewRules", fail)]
                ),
                (
                    "nfguard-pod-bare",
                    vec![("bare".to_string(), "Compatible", pass)]
                ),
            ]
        );
        // Only the workloads asked for.
        let web = (
            "ns".to_string(),
            ObjectId {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "uid-web".into(),
            },
        );
        let only = Scope::Only([web.clone()].into());
        let judged = judge_reports(&caches, &parents, &bounded, &only, deadline).await;
        let names: Vec<&str> = judged
            .reports
            .iter()
            .map(|r| without_hash(&r.name))
            .collect();
        assert_eq!(names, ["nfguard-deployment-web"]);
        // A pod's raw key resolves to the same workload.
        let raw = raw_workload(&PodFacts::of(&pod(
            "web-2",
            "n1",
            OLD,
            Some(("apps/v1", "ReplicaSet", "web-5d")),
        )));
        assert_eq!(resolve(&parents, &raw.unwrap()), Some(web));
        let bare = raw_workload(&PodFacts::of(&pod("bare", "n2", NEW, None))).unwrap();
        assert_eq!(
            resolve(&parents, &bare).map(|w| w.1.kind),
            Some("Pod".into())
        );
    }

    fn entry(owner: &str, pod: &str) -> Entry {
        let facts = PodFacts::of(&self::pod(
            pod,
            "n1",
            OLD,
            Some(("apps/v1", "DaemonSet", owner)),
        ));
        Entry {
            pod_ref: pod_ref(&facts).unwrap(),
            pod: Arc::new(facts),
            owner: ObjectId {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: owner.into(),
                uid: format!("uid-{owner}"),
            },
            node: "n1".into(),
            platform: "linux/amd64".parse().unwrap(),
            profile: None,
        }
    }

    #[test]
    fn chunks_hold_whole_workloads() {
        let entries = [
            ("a", 1),
            ("a", 2),
            ("a", 3),
            ("b", 1),
            ("c", 1),
            ("c", 2),
            ("d", 1),
        ]
        .into_iter()
        .map(|(owner, i)| entry(owner, &format!("{owner}-{i}")))
        .collect();
        let gathered = Gathered {
            entries,
            waiting: 0,
            deferred: BTreeSet::new(),
        };
        let owners = |pods: usize| -> Vec<String> {
            gathered
                .chunks(pods)
                .map(|c| c.iter().map(|e| e.owner.name.as_str()).collect())
                .collect()
        };
        // A chunk grows past its size rather than split a workload.
        assert_eq!(owners(2), ["aaa", "bcc", "d"]);
        assert_eq!(owners(1), ["aaa", "b", "cc", "d"]);
        assert_eq!(owners(100), ["aaabccd"]);
        assert_eq!(owners(0), ["aaa", "b", "cc", "d"]);
    }
}
