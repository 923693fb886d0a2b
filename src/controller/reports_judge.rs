//! The policy reports' content, from the controller's caches: every running
//! pod that can write netfilter rules, judged on the node it runs on through
//! `crate::judgement` (the webhook's path, `Severity::Info`: every reason),
//! grouped under its workload ([`crate::reports`]). No API read: the pods,
//! profiles, Nodes, policies and owners come from the caches; the only I/O
//! is the image look-ups (cached by `Bounded`).

use super::inventory::{is_running, node_platform};
use super::report_owners::Parents;
use super::stores::Caches;
use crate::api::NodeNetfilterProfile;
use crate::compat::evaluate::{Candidate, ImageKey};
use crate::facts::{Platform, Severity};
use crate::judgement::{Bounded, Scene, Subject};
use crate::reports::{DesiredReport, JudgedPod, ObjectId, PodRef, build_reports, resolve_owner};
use k8s_openapi::api::core::v1::Pod;
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
pub fn raw_workload(pod: &Pod) -> Option<Workload> {
    let r = pod_ref(pod)?;
    let id = r.controller.clone().unwrap_or_else(|| r.id());
    Some((r.namespace, id))
}

fn pod_ref(pod: &Pod) -> Option<PodRef> {
    let m = &pod.metadata;
    Some(PodRef {
        namespace: m.namespace.clone().unwrap_or_else(|| "default".into()),
        name: m.name.clone()?,
        uid: m.uid.clone().unwrap_or_default(),
        controller: ObjectId::controller_of(m.owner_references.as_deref()),
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
struct Entry {
    pod: Arc<Pod>,
    pod_ref: PodRef,
    owner: ObjectId,
    node: String,
    platform: Platform,
    profile: Option<Arc<NodeNetfilterProfile>>,
}

/// What a pass found besides the reports.
#[derive(Debug, Default, PartialEq)]
pub struct Judged {
    pub reports: Vec<DesiredReport>,
    /// Pods skipped because their ReplicaSet or Job is not in the store
    /// yet (its watch event brings them back).
    pub waiting: usize,
}

/// The running writer pods of the workloads in `scope`, from the caches.
fn entries(caches: &Caches, parents: &Parents, scope: &Scope) -> (Vec<Entry>, usize) {
    let mut waiting = 0;
    let mut out = Vec::new();
    for pod in caches.pods.state() {
        if !is_running(&pod) {
            continue;
        }
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
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
        if !scope.contains(&(pod_ref.namespace.clone(), owner.clone())) {
            continue;
        }
        let labels = caches
            .nodes
            .get(&ObjectRef::new(&node))
            .and_then(|n| n.metadata.labels.clone());
        out.push(Entry {
            platform: node_platform(labels.as_ref()),
            profile: caches.profile(&node),
            pod,
            pod_ref,
            owner,
            node,
        });
    }
    (out, waiting)
}

/// The reports of the workloads in `scope`: each running pod judged on its
/// node (image look-ups not answered by `deadline` count as unresolved).
/// The caches must have listed.
pub async fn judge_reports(
    caches: &Caches,
    parents: &Parents,
    images: &Bounded,
    scope: &Scope,
    deadline: Instant,
) -> Judged {
    let (entries, waiting) = entries(caches, parents, scope);
    let book = caches.policy_book();
    let scene = Scene {
        profiles: &[],
        nodes: &[],
        policies: &book,
        default_platform: &super::inventory::DEFAULT_PLATFORM,
        index: None,
    };
    let prepared: Vec<_> = entries
        .iter()
        .map(|e| {
            let subject = Subject::RunningPod {
                pod: &e.pod,
                node: Candidate::new(&e.node, e.platform.clone(), e.profile.as_deref()),
            };
            scene.prepare(subject).ok()
        })
        .collect();
    let keys: BTreeSet<ImageKey> = prepared
        .iter()
        .flatten()
        .flat_map(|p| p.images.iter().cloned())
        .collect();
    let keys: Vec<ImageKey> = keys.into_iter().collect();
    let pods: Vec<&Pod> = entries.iter().map(|e| e.pod.as_ref()).collect();
    let resolved = images.resolve_for_pods(&pods, &keys, deadline).await;
    let mut decisions = Vec::with_capacity(entries.len());
    let mut sources = Vec::with_capacity(entries.len());
    let mut judged_entries = Vec::with_capacity(entries.len());
    for (e, p) in entries.iter().zip(&prepared) {
        let Some(p) = p else { continue };
        decisions.push(p.decide(&resolved, Severity::Info));
        sources.push(p.policy.sources.clone());
        judged_entries.push(e);
    }
    let judged: Vec<JudgedPod<'_>> = judged_entries
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
    Judged {
        reports: build_reports(&judged),
        waiting,
    }
}
