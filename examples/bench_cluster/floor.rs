//! The API's floor for the controller's cold start: the very writes the
//! controller made (each hollow node's nfguard labels, each profile's
//! controller-owned status), taken back and issued again by a minimal
//! client, as many nodes at once as the controller reconciles
//! (`--concurrency`, `controller::run::CONCURRENCY` by default), each
//! node's label patch before its status apply as in a reconcile.
//! Afterwards the cluster is as the controller left it.

use crate::retry::{for_each, retry};
use crate::shape::{self, HOLLOW_LABEL};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use nfguard::api::{NodeNetfilterProfile, NodeNetfilterProfileStatus};
use nfguard::controller::FIELD_MANAGER;
use nfguard::controller::plan::controller_fields;
use nfguard::runtime::status_apply::StatusApply;
use nfguard::wellknown::MANAGED_LABELS;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::time::Instant;

/// One node's share of the controller's writes.
pub struct Writes {
    pub node: String,
    /// The label merge patch (nfguard's keys only).
    pub labels: Value,
    /// The controller-owned status fields.
    pub status: NodeNetfilterProfileStatus,
}

/// The merge patch setting (`set`) or removing (`!set`) nfguard's labels.
pub fn label_patch(labels: &BTreeMap<String, String>, set: bool) -> Value {
    let mut m = Map::new();
    for k in MANAGED_LABELS {
        if let Some(v) = labels.get(k) {
            m.insert(
                k.into(),
                if set {
                    Value::String(v.clone())
                } else {
                    Value::Null
                },
            );
        }
    }
    json!({"metadata": {"labels": m}})
}

/// Read what the controller wrote on the hollow nodes.
pub async fn collect(client: &kube::Client) -> anyhow::Result<Vec<Writes>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let hollow = ListParams::default().labels(&format!("{HOLLOW_LABEL}=true"));
    let nodes = retry(|| nodes.list(&hollow)).await?.items;
    let profiles: Api<NodeNetfilterProfile> = Api::all(client.clone());
    let all = ListParams::default();
    let profiles: BTreeMap<String, NodeNetfilterProfile> = retry(|| profiles.list(&all))
        .await?
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name.clone()?, p)))
        .collect();
    let mut out = Vec::new();
    for n in nodes {
        let Some(name) = n.metadata.name.clone() else {
            continue;
        };
        let Some(status) = profiles.get(&name).and_then(|p| p.status.as_ref()) else {
            anyhow::bail!("hollow node {name} has no profile status");
        };
        let labels = n.metadata.labels.unwrap_or_default();
        out.push(Writes {
            labels: label_patch(&labels, true),
            status: controller_fields(status),
            node: name,
        });
    }
    out.sort_by_key(|w| shape::node_index(&w.node));
    Ok(out)
}

async fn write(
    client: &kube::Client,
    w: &Writes,
    labels: &Value,
    status: &NodeNetfilterProfileStatus,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let (pp, patch) = (PatchParams::default(), Patch::Merge(labels));
    retry(|| nodes.patch(&w.node, &pp, &patch)).await?;
    let profiles: Api<NodeNetfilterProfile> = Api::all(client.clone());
    let body = StatusApply::new::<NodeNetfilterProfile>(&w.node, status);
    let (pp, patch) = (
        PatchParams::apply(FIELD_MANAGER).force(),
        Patch::Apply(&body),
    );
    retry(|| profiles.patch_status(&w.node, &pp, &patch)).await?;
    Ok(())
}

/// Take the controller's writes back (labels removed, its status fields
/// dropped by applying none), concurrently; not timed.
pub async fn reset(
    client: &kube::Client,
    writes: &[Writes],
    concurrency: usize,
) -> anyhow::Result<()> {
    let empty = NodeNetfilterProfileStatus::default();
    for_each("floor reset", writes, concurrency, |w| {
        let unset = unset(&w.labels);
        let empty = &empty;
        async move { write(client, w, &unset, empty).await }
    })
    .await
}

fn unset(patch: &Value) -> Value {
    let mut p = patch.clone();
    if let Some(m) = p
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        for v in m.values_mut() {
            *v = Value::Null;
        }
    }
    p
}

/// Issue every node's writes again, `concurrency` nodes at a time; the
/// elapsed time. A floor one node at a time would flatter a controller that
/// reconciles several at once.
pub async fn replay(
    client: &kube::Client,
    writes: &[Writes],
    concurrency: usize,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    futures::stream::iter(writes)
        .map(|w| write(client, w, &w.labels, &w.status))
        .buffer_unordered(concurrency.max(1))
        .try_collect::<()>()
        .await?;
    Ok(started.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_patches_name_only_nfguard_keys() {
        let labels: BTreeMap<String, String> = [
            ("nfguard.io/iptables-backend", "nft"),
            ("nfguard.io/iptables-version", "1.8.9"),
            ("kubernetes.io/arch", "amd64"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let set = label_patch(&labels, true);
        assert_eq!(
            set,
            json!({"metadata": {"labels": {"nfguard.io/iptables-backend": "nft", "nfguard.io/iptables-version": "1.8.9"}}})
        );
        assert_eq!(unset(&set), label_patch(&labels, false));
        assert_eq!(
            unset(&set),
            json!({"metadata": {"labels": {"nfguard.io/iptables-backend": null, "nfguard.io/iptables-version": null}}})
        );
    }

    #[test]
    fn only_the_controllers_status_fields_are_replayed() {
        let s = shape::status(shape::facts(0), "2026-01-01T00:00:00Z", 60);
        assert_eq!(controller_fields(&s), NodeNetfilterProfileStatus::default());
    }
}
