//! Pod creation latency through the API server, as a client sees it: the
//! same hostNetwork + NET_ADMIN pods created one at a time or 32 at once,
//! with nfguard's webhook registered or not (the caller registers it).
//! The pods name no node and a scheduler that does not exist, so they are
//! judged against every node and never scheduled.

use crate::retry::{ok_if, retry};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

pub const NAMESPACE: &str = "nfguard-bench-admission";

/// A writer pod running `image`, bound to no node.
pub fn pod(name: &str, image: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"bench": "admission"}},
        "spec": {
            "schedulerName": "nfguard-bench-unscheduled",
            "hostNetwork": true,
            "containers": [{
                "name": "agent", "image": image, "command": ["sleep", "infinity"],
                "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}},
            }],
        },
    }))
    .expect("a valid Pod")
}

pub async fn ensure_namespace(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    let pp = PostParams::default();
    ok_if(409, retry(|| api.create(&pp, &ns)).await.map(drop))?;
    Ok(())
}

/// Create `count` pods named `{prefix}-{k}` with at most `concurrency` in
/// flight; each creation's latency (sorted). A refused pod is an error:
/// the benchmark measures admitted pods.
pub async fn create_latencies(
    client: &kube::Client,
    image: &str,
    prefix: &str,
    count: usize,
    concurrency: usize,
) -> anyhow::Result<Vec<Duration>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pp = PostParams::default();
    let mut out: Vec<Duration> = futures::stream::iter(0..count)
        .map(|k| {
            let (api, pp) = (&api, &pp);
            let p = pod(&format!("{prefix}-{k}"), image);
            async move {
                let started = Instant::now();
                api.create(pp, &p).await?;
                anyhow::Ok(started.elapsed())
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_, _>>()?;
    out.sort();
    // Not timed: make room for the next round.
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    futures::stream::iter(0..count)
        .map(|k| {
            let (api, dp) = (&api, &dp);
            let name = format!("{prefix}-{k}");
            async move { ok_if(404, retry(|| api.delete(&name, dp)).await.map(drop)) }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<()>, _>>()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_is_a_writer_for_no_node_and_no_scheduler() {
        let p = pod("a-1", "reg/x:1");
        let spec = p.spec.unwrap();
        assert_eq!(spec.host_network, Some(true));
        assert_eq!(spec.node_name, None);
        assert_eq!(
            spec.scheduler_name.as_deref(),
            Some("nfguard-bench-unscheduled")
        );
        assert_eq!(spec.containers[0].image.as_deref(), Some("reg/x:1"));
    }
}
