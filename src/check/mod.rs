//! `nfguard check`: the rollout gate. Loads manifests and facts (files or a
//! live cluster), resolves the images that matter, and runs the very same
//! pure `compat::evaluate` the webhook and controller use.

pub mod classes;
pub mod cli;
pub mod cluster;
pub mod github;
pub mod junit;
pub mod load;
pub mod outline;
pub mod positions;
pub mod report;
pub mod resolve;
pub mod sarif;
#[cfg(test)]
mod test_data;

use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::compat::evaluate::{
    Candidate, EffectivePolicy, EvalInput, ImageKey, PolicyError, Verdict, Workload, evaluate,
    images_to_resolve, select_candidates, validate_policy,
};
use k8s_openapi::api::core::v1::Node;
pub use report::{ObjectResult, Report};
pub use resolve::{ImageResolver, RegistryResolver, resolve_all};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{object}: {error}")]
    Policy { object: String, error: PolicyError },
}

/// Everything a check run judges, already loaded.
#[derive(Debug, Default)]
pub struct Inputs {
    pub workloads: Vec<Workload>,
    pub profiles: Vec<NodeNetfilterProfile>,
    /// Empty: no Node objects at hand (every profile is a candidate).
    pub nodes: Vec<Node>,
    pub policies: Vec<NetfilterPolicy>,
    /// Known namespace labels (from a cluster); None: unknown.
    pub namespace_labels: Option<HashMap<String, BTreeMap<String, String>>>,
    pub default_platform: String,
    /// Notes to show (skipped documents, ...).
    pub notes: Vec<String>,
    /// The file each note is about (same order as `notes`; may be empty).
    pub note_files: Vec<String>,
    /// Where each workload is (same order as `workloads`; may be empty).
    pub sources: Vec<positions::ObjectSource>,
    /// The manifest files, in the order given.
    pub files: Vec<String>,
}

/// How image look-ups are run.
pub struct ResolveOptions {
    pub resolver: Arc<dyn ImageResolver>,
    pub timeout: Duration,
    pub concurrency: usize,
}

/// Judge every workload. Image look-ups for all workloads are pooled, so an
/// image shared by several manifests is inspected once per platform.
pub async fn check(inputs: &Inputs, opts: &ResolveOptions) -> Result<Report, CheckError> {
    let profiles: Vec<&NodeNetfilterProfile> = inputs.profiles.iter().collect();
    let nodes: Vec<&Node> = inputs.nodes.iter().collect();
    struct Plan<'a> {
        policy: EffectivePolicy,
        candidates: Vec<Candidate<'a>>,
    }
    // The gate refuses a broken policy (exit 2); the webhook judges without it.
    for p in &inputs.policies {
        validate_policy(&p.spec).map_err(|error| CheckError::Policy {
            object: format!(
                "NetfilterPolicy {}",
                p.metadata.name.as_deref().unwrap_or("")
            ),
            error,
        })?;
    }
    let mut plans = Vec::with_capacity(inputs.workloads.len());
    let mut keys: BTreeSet<ImageKey> = BTreeSet::new();
    for w in &inputs.workloads {
        let ns = w.namespace.as_deref().unwrap_or("default");
        let labels = inputs.namespace_labels.as_ref().and_then(|m| m.get(ns));
        let policy = EffectivePolicy::from_policies(&inputs.policies, ns, labels);
        let candidates = select_candidates(w, &profiles, &nodes, &inputs.default_platform);
        keys.extend(images_to_resolve(w, &candidates, &policy));
        plans.push(Plan { policy, candidates });
    }
    let images = resolve_all(
        opts.resolver.clone(),
        keys.into_iter().collect(),
        opts.timeout,
        opts.concurrency,
    )
    .await;
    let results: Vec<ObjectResult> = inputs
        .workloads
        .iter()
        .zip(&plans)
        .enumerate()
        .map(|(i, (w, plan))| {
            let d = evaluate(&EvalInput {
                workload: w,
                candidates: &plan.candidates,
                images: &images,
                policy: &plan.policy,
            });
            ObjectResult {
                source: inputs.sources.get(i).cloned(),
                nodes: classes::candidate_nodes(&plan.candidates),
                ..ObjectResult::new(w.object_ref(), d)
            }
        })
        .collect();
    let verdict = results
        .iter()
        .map(|r| r.verdict)
        .max()
        .unwrap_or(Verdict::Allow);
    Ok(Report {
        verdict,
        results,
        notes: inputs.notes.clone(),
        note_files: inputs.note_files.clone(),
        files: inputs.files.clone(),
    })
}
