//! `--running`: what runs today, read from the cluster. Every DaemonSet
//! whose pod template can touch netfilter (judged on every node it would
//! schedule to), and every running pod the admission gate would judge
//! (hostNetwork, or a container with NET_ADMIN/ALL or privileged: the
//! webhook's own test), judged on its node. Pods a DaemonSet controls are
//! left to their DaemonSet, so a finding is not repeated once per node.

use crate::compat::evaluate::{Workload, WorkloadKind, pod_spec_reaches_gate};
use crate::projection::is_running;
use crate::runtime::list::list_kept;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;

/// More workloads than this are refused rather than judged slowly.
pub const MAX_RUNNING: usize = 100_000;

#[derive(Debug, thiserror::Error)]
pub enum RunningError {
    #[error("listing {what}: {error}")]
    List {
        what: &'static str,
        error: kube::Error,
    },
    #[error(
        "--running: more than {MAX_RUNNING} running workloads touch netfilter; narrow the check with -f"
    )]
    TooMany,
}

fn listing(what: &'static str) -> impl FnOnce(kube::Error) -> RunningError {
    move |error| RunningError::List { what, error }
}

fn controlled_by_daemonset(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.kind == "DaemonSet")
}

fn workload<K: serde::Serialize>(kind: WorkloadKind, obj: &K) -> Option<Workload> {
    let value = serde_json::to_value(obj).ok()?;
    Workload::of_kind(kind, &value).ok()
}

/// The DaemonSets and running pods that can touch netfilter, DaemonSets first.
pub async fn load(client: &kube::Client) -> Result<Vec<Workload>, RunningError> {
    let mut count = 0usize;
    let mut bounded = |w: Option<Workload>| {
        count += usize::from(w.is_some());
        w.filter(|_| count <= MAX_RUNNING)
    };
    let mut out = list_kept(client, None, |ds: DaemonSet| {
        let spec = ds.spec.as_ref()?.template.spec.as_ref()?;
        if !pod_spec_reaches_gate(spec) {
            return None;
        }
        bounded(workload(WorkloadKind::DaemonSet, &ds))
    })
    .await
    .map_err(listing("daemonsets"))?;
    let pods = list_kept(client, Some("status.phase=Running"), |mut pod: Pod| {
        let judged = is_running(&pod)
            && !controlled_by_daemonset(&pod)
            && pod.spec.as_ref().is_some_and(pod_spec_reaches_gate);
        if !judged {
            return None;
        }
        // Only the spec is judged: do not carry managedFields and status along.
        pod.metadata.managed_fields = None;
        pod.status = None;
        bounded(workload(WorkloadKind::Pod, &pod))
    })
    .await
    .map_err(listing("pods"))?;
    out.extend(pods);
    if count > MAX_RUNNING {
        return Err(RunningError::TooMany);
    }
    Ok(out)
}
