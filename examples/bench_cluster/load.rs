//! Create the hollow cluster (Nodes, their profiles through the reporter's
//! own write path, pods bound to them, writers marked Running) and remove
//! it again. Every step tolerates objects that already exist or are gone,
//! so a run interrupted half-way is simply run again.

use crate::retry::{for_each, ok_if, retry};
use crate::shape::{self, HOLLOW_LABEL, NAMESPACE};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nfguard::api::NodeNetfilterProfile;
use nfguard::reporter::profile_api::ProfileWriter;
use nfguard::runtime::clock::{Clock, SystemClock, rfc3339};
use serde_json::json;

pub struct Load {
    pub nodes: usize,
    pub pods_per_node: usize,
    /// Where the writers' images are, as the controller reaches it.
    pub registry: String,
    /// The heartbeat the profiles state (`probeIntervalSeconds`).
    pub probe_interval: u32,
    pub concurrency: usize,
}

pub async fn load(client: &kube::Client, l: &Load) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    let pp = PostParams::default();
    ok_if(409, retry(|| namespaces.create(&pp, &ns)).await.map(drop))?;

    let nodes: Api<Node> = Api::all(client.clone());
    for_each("nodes", 0..l.nodes, l.concurrency, |i| {
        let nodes = nodes.clone();
        async move {
            let (node, pp) = (shape::node(i), PostParams::default());
            ok_if(409, retry(|| nodes.create(&pp, &node)).await.map(drop))?;
            Ok(())
        }
    })
    .await?;

    // The reporter's own write path: GET the Node, create the profile
    // owned by it (409 is fine), server-side apply of the status.
    let now = rfc3339(SystemClock.now());
    for_each("profiles", 0..l.nodes, l.concurrency, |i| {
        let client = client.clone();
        let status = shape::status(shape::facts(i), &now, l.probe_interval);
        async move {
            let mut writer = ProfileWriter::new(client, shape::node_name(i));
            let mut attempts = 0;
            loop {
                attempts += 1;
                match writer.write(&status).await {
                    Ok(()) => return Ok(()),
                    Err(e)
                        if attempts < 8 && e.http_status().is_none_or(|c| c >= 500 || c == 429) =>
                    {
                        tokio::time::sleep(std::time::Duration::from_millis(200 * attempts)).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    })
    .await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let per_node = l.pods_per_node;
    let all = (0..l.nodes).flat_map(|i| (0..per_node).map(move |j| (i, j)));
    let all: Vec<_> = all.collect();
    for_each("pods", all, l.concurrency, |(i, j)| {
        let pods = pods.clone();
        let pod = shape::pod(i, j, per_node, &l.registry);
        async move {
            let pp = PostParams::default();
            ok_if(409, retry(|| pods.create(&pp, &pod)).await.map(drop))?;
            if shape::is_writer(&pod) {
                mark_running(&pods, &shape::pod_name(i, j)).await?;
            }
            Ok(())
        }
    })
    .await?;
    Ok(())
}

/// What a kubelet would report for a started writer: the controller only
/// counts running pods as writers.
async fn mark_running(pods: &Api<Pod>, name: &str) -> anyhow::Result<()> {
    let now = rfc3339(SystemClock.now());
    let status = json!({"status": {
        "phase": "Running", "startTime": now,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
        "containerStatuses": [{"name": "agent", "ready": true, "restartCount": 0, "image": "",
                               "imageID": "", "state": {"running": {"startedAt": now}}}],
    }});
    let (pp, patch) = (PatchParams::default(), Patch::Merge(&status));
    retry(|| pods.patch_status(name, &pp, &patch)).await?;
    Ok(())
}

/// Remove every hollow object: the pods (force: no kubelet confirms a
/// graceful delete), the Nodes, their profiles (the garbage collector
/// would too, later), the namespace.
pub async fn cleanup(client: &kube::Client, concurrency: usize) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let names = list_names(&pods, &ListParams::default()).await?;
    delete_all("pods deleted", &pods, names, &now, concurrency).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let hollow = ListParams::default().labels(&format!("{HOLLOW_LABEL}=true"));
    let names = list_names(&nodes, &hollow).await?;
    let dp = DeleteParams::default();
    delete_all("nodes deleted", &nodes, names, &dp, concurrency).await?;
    let profiles: Api<NodeNetfilterProfile> = Api::all(client.clone());
    let names: Vec<String> = list_names(&profiles, &ListParams::default())
        .await?
        .into_iter()
        .filter(|n| shape::node_index(n).is_some())
        .collect();
    delete_all("profiles deleted", &profiles, names, &dp, concurrency).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    ok_if(
        404,
        retry(|| namespaces.delete(NAMESPACE, &dp)).await.map(drop),
    )?;
    Ok(())
}

/// Delete every named object (already gone is fine).
async fn delete_all<K>(
    what: &str,
    api: &Api<K>,
    names: Vec<String>,
    dp: &DeleteParams,
    concurrency: usize,
) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for_each(what, names, concurrency, |name| async move {
        Ok(ok_if(404, retry(|| api.delete(&name, dp)).await.map(drop))?)
    })
    .await
}

async fn list_names<K>(api: &Api<K>, lp: &ListParams) -> anyhow::Result<Vec<String>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let list = retry(|| api.list_metadata(lp)).await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect())
}
