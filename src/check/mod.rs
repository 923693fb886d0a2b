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
pub mod running;
pub mod sarif;
#[cfg(test)]
mod test_data;
pub mod whatif;

use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
use crate::compat::evaluate::{NodeIndex, PolicyError, Verdict, Workload, validate_policy};
use crate::facts::Platform;
use crate::judgement::{Bounded, ImageLookup, NamespaceLabels, PolicyBook, Scene, Subject};
use k8s_openapi::api::core::v1::Node;
pub use report::{ObjectResult, Report};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The gate refuses a broken policy; the webhook judges without it.
    #[error("NetfilterPolicy {policy}: {error}")]
    Policy { policy: String, error: PolicyError },
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
    pub default_platform: Platform,
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
    pub lookup: Arc<dyn ImageLookup>,
    /// Credentials per image: the docker config (`--docker-config`).
    pub credentials: Arc<dyn crate::registry::CredentialSource>,
    pub timeout: Duration,
    pub concurrency: usize,
}

/// Judge every workload through the one judgement path. Image look-ups for
/// all workloads are pooled, so an image shared by several manifests is
/// inspected once per platform.
pub async fn check(inputs: &Inputs, opts: &ResolveOptions) -> Result<Report, CheckError> {
    for p in &inputs.policies {
        validate_policy(&p.spec).map_err(|error| CheckError::Policy {
            policy: p.metadata.name.clone().unwrap_or_default(),
            error,
        })?;
    }
    let profiles: Vec<&NodeNetfilterProfile> = inputs.profiles.iter().collect();
    let nodes: Vec<&Node> = inputs.nodes.iter().collect();
    let mut policies = PolicyBook::new(inputs.policies.iter().cloned());
    if let Some(known) = &inputs.namespace_labels {
        let known = Arc::new(known.clone());
        let labels: NamespaceLabels = Arc::new(move |ns: &str| known.get(ns).cloned());
        policies = policies.with_namespace_labels(labels);
    }
    // Every workload is judged against the same nodes.
    let index = NodeIndex::new(&profiles, &nodes, &inputs.default_platform);
    let scene = Scene {
        profiles: &profiles,
        nodes: &nodes,
        policies: &policies,
        default_platform: &inputs.default_platform,
        index: Some(&index),
    };
    let resolver = Bounded::new(opts.lookup.clone(), opts.concurrency)
        .with_credentials(opts.credentials.clone());
    let deadline = tokio::time::Instant::now() + opts.timeout;
    let judged = scene
        .judge_all(
            inputs.workloads.iter().map(Subject::Workload),
            &resolver,
            deadline,
        )
        .await;
    let mut results = Vec::with_capacity(judged.len());
    for (i, (w, j)) in inputs.workloads.iter().zip(judged).enumerate() {
        results.push(ObjectResult {
            source: inputs.sources.get(i).cloned(),
            nodes: classes::candidate_nodes(&j.prepared.candidates),
            ..ObjectResult::new(w.object_ref(), j.decision)
        });
    }
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
        what_if: None,
    })
}
