//! Preparing and deciding one judgement: which policy, which nodes, which
//! containers and images (pure), then the decision once images are resolved.

use super::policies::PolicyBook;
use super::resolve::ResolveImages;
use crate::api::NodeNetfilterProfile;
use crate::compat::evaluate::{
    Bounds, Candidate, ContainerFacts, Decision, EffectivePolicy, ImageKey, ImageResolutions,
    Listed, NodeIndex, SubjectInput, Workload, evaluate, evaluate_within, images_to_resolve,
    select_candidates_within,
};
use crate::facts::{Platform, Severity};
use crate::projection::PodFacts;
use k8s_openapi::api::core::v1::Node;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The facts every judgement reads, borrowed from the caller's stores or files.
#[derive(Clone, Copy, Debug)]
pub struct Scene<'a> {
    pub profiles: &'a [&'a NodeNetfilterProfile],
    /// Empty: no Node objects at hand (every profile is a candidate).
    pub nodes: &'a [&'a Node],
    pub policies: &'a PolicyBook,
    /// For nodes whose labels (and pods whose nodeSelector) name none.
    pub default_platform: &'a Platform,
    /// Built from these `profiles` and `nodes` (see [`NodeIndex`]): spares
    /// each judgement the per-node work that does not depend on it.
    pub index: Option<&'a NodeIndex>,
}

/// What is judged.
#[derive(Clone, Debug)]
pub enum Subject<'a> {
    /// A workload about to be created or rolled out: judged on every node
    /// its pods can land on.
    Workload(&'a Workload),
    /// A pod running on a known node: judged there only (the controller's
    /// `action: Taint` check). `node.profile` is the profile it is judged
    /// against (None while only the image look-ups are being listed).
    RunningPod {
        pod: &'a PodFacts,
        node: Candidate<'a>,
    },
}

/// Everything a decision needs but the images' answers.
#[derive(Debug)]
pub struct Prepared<'a> {
    pub policy: Arc<EffectivePolicy>,
    pub candidates: Vec<Candidate<'a>>,
    /// The (image, platform) pairs `decide` will look at: empty for
    /// workloads that cannot touch netfilter, so they cost no look-up.
    pub images: Vec<ImageKey>,
    /// A running pod's are borrowed from its projection.
    containers: Cow<'a, [ContainerFacts]>,
    exempt_reason: Option<&'a str>,
}

/// A prepared judgement and its decision.
#[derive(Debug)]
pub struct Judged<'a> {
    pub prepared: Prepared<'a>,
    pub decision: Decision,
}

impl<'a> Scene<'a> {
    /// Policy, candidates, containers and image pairs for `subject` (pure).
    pub fn prepare(&self, subject: Subject<'a>) -> Prepared<'a> {
        match self.prepare_within(subject, &|| false) {
            Some(prepared) => prepared,
            None => unreachable!("a preparation that never stops finishes"),
        }
    }

    /// [`Scene::prepare`], with candidates selected within `stop` (see
    /// [`select_candidates_within`]): None when it said stop.
    pub fn prepare_within(
        &self,
        subject: Subject<'a>,
        stop: &dyn Fn() -> bool,
    ) -> Option<Prepared<'a>> {
        let (namespace, containers, exempt_reason, candidates) = match subject {
            Subject::Workload(w) => (
                w.namespace.as_deref().unwrap_or("default"),
                Cow::Owned(w.containers()),
                w.exempt_reason(),
                select_candidates_within(
                    w,
                    self.profiles,
                    self.nodes,
                    self.default_platform,
                    self.index,
                    stop,
                )?,
            ),
            Subject::RunningPod { pod, node } => (
                &*pod.namespace,
                Cow::Borrowed(&*pod.containers),
                pod.exempt_reason.as_deref(),
                vec![node],
            ),
        };
        let policy = self.policies.for_namespace(namespace);
        let images = images_to_resolve(&containers, exempt_reason, &candidates, &policy);
        Some(Prepared {
            policy,
            candidates,
            images,
            containers,
            exempt_reason,
        })
    }

    /// Prepare, resolve within `deadline` (shortened by the policy's
    /// `registryTimeoutSeconds`), decide.
    pub async fn judge(
        &self,
        subject: Subject<'a>,
        images: &dyn ResolveImages,
        deadline: Instant,
    ) -> Judged<'a> {
        let prepared = self.prepare(subject);
        let deadline = prepared.registry_deadline(deadline);
        let resolved = if prepared.images.is_empty() {
            ImageResolutions::new()
        } else {
            images.resolve(&prepared.images, deadline).await
        };
        let decision = prepared.decide(&resolved, Severity::Info);
        Judged { prepared, decision }
    }

    /// [`Scene::judge`] for many subjects with their look-ups pooled: an
    /// image several subjects share is looked up once per platform. One
    /// subject's answers are its own.
    pub async fn judge_all(
        &self,
        subjects: impl IntoIterator<Item = Subject<'a>>,
        images: &dyn ResolveImages,
        deadline: Instant,
    ) -> Vec<Judged<'a>> {
        let prepared: Vec<_> = subjects.into_iter().map(|s| self.prepare(s)).collect();
        let keys: BTreeSet<ImageKey> = prepared
            .iter()
            .flat_map(|p| p.images.iter().cloned())
            .collect();
        let resolved = if keys.is_empty() {
            ImageResolutions::new()
        } else {
            let keys: Vec<ImageKey> = keys.into_iter().collect();
            images.resolve(&keys, deadline).await
        };
        prepared
            .into_iter()
            .map(|prepared| Judged {
                decision: prepared.decide(&resolved, Severity::Info),
                prepared,
            })
            .collect()
    }
}

impl Prepared<'_> {
    /// The decision on these facts with `images` answered (pure). Reasons
    /// below `min_severity` are left out of the decision's list (the
    /// verdict still counts them); `Info` keeps all.
    pub fn decide(&self, images: &ImageResolutions, min_severity: Severity) -> Decision {
        evaluate(&self.input(images, min_severity))
    }

    /// [`Prepared::decide`] within `bounds` (see [`evaluate_within`]): None
    /// when `bounds.stop` stopped it.
    pub fn decide_within(
        &self,
        images: &ImageResolutions,
        min_severity: Severity,
        bounds: Bounds<'_>,
    ) -> Option<Listed> {
        evaluate_within(&self.input(images, min_severity), bounds)
    }

    fn input<'s>(
        &'s self,
        images: &'s ImageResolutions,
        min_severity: Severity,
    ) -> SubjectInput<'s> {
        SubjectInput {
            containers: &self.containers,
            exempt_reason: self.exempt_reason,
            candidates: &self.candidates,
            images,
            policy: &self.policy,
            min_severity,
        }
    }

    /// `deadline`, shortened by the policy's `registryTimeoutSeconds`.
    pub fn registry_deadline(&self, deadline: Instant) -> Instant {
        match self.policy.registry_timeout_seconds {
            Some(s) => deadline.min(Instant::now() + Duration::from_secs(u64::from(s.max(1)))),
            None => deadline,
        }
    }
}
