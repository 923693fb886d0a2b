//! `store-memory`: what the controller's caches hold per object, measured
//! by feeding the hollow cluster's Nodes and pods (as the API server
//! returns them: uid, resourceVersion, managedFields, a running status)
//! through the controller's own feeds, as its watches do, and counting
//! the heap before and after (`heap`). No cluster needed.

use crate::heap;
use crate::shape;
use k8s_openapi::api::core::v1::Pod;
use nfguard::controller::cache::stores::{caches, listed};
use nfguard::projection::SlimNode;
use serde_json::json;

/// A hollow pod as a LIST returns it once the API server defaulted and
/// stored it and the load generator marked it running.
fn served(i: usize, j: usize, per_node: usize) -> Pod {
    let mut pod = shape::pod(i, j, per_node, "127.0.0.1:35000");
    let extra: Pod = serde_json::from_value(json!({
        "metadata": {
            "uid": format!("6f9c2d0e-1b7a-4c1e-9a53-{:012}", i * per_node + j),
            "resourceVersion": format!("{}", 100_000 + i * per_node + j),
            "creationTimestamp": "2026-11-27T10:00:00Z",
            "managedFields": [
                {"manager": "nfguard-bench", "operation": "Update", "apiVersion": "v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:containers": {}}}},
                {"manager": "nfguard-bench", "operation": "Update", "apiVersion": "v1",
                 "subresource": "status", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:phase": {}}}}
            ]
        },
        "status": {"phase": "Running", "startTime": "2026-11-27T10:00:01Z",
                   "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("a valid Pod");
    pod.metadata.uid = extra.metadata.uid;
    pod.metadata.resource_version = extra.metadata.resource_version;
    pod.metadata.creation_timestamp = extra.metadata.creation_timestamp;
    pod.metadata.managed_fields = extra.metadata.managed_fields;
    pod.status = extra.status;
    if let Some(spec) = pod.spec.as_mut() {
        spec.service_account_name = Some("default".into());
        spec.restart_policy = Some("Always".into());
        spec.scheduler_name = Some("default-scheduler".into());
    }
    pod
}

fn served_node(i: usize) -> SlimNode {
    let mut node = shape::node(i);
    node.metadata.uid = Some(format!("0b1e7c52-88d2-4f0a-b7a1-{i:012}"));
    node.metadata.resource_version = Some(format!("{}", 200_000 + i));
    // Decoded as the watch decodes it.
    serde_json::from_value(serde_json::to_value(node).expect("a Node encodes"))
        .expect("a served Node decodes")
}

/// Bytes held per object after `feed` stored `count` of them.
fn per_object(count: usize, feed: impl FnOnce()) -> (f64, f64) {
    let (asked, chunks) = heap::held();
    feed();
    let (asked_after, chunks_after) = heap::held();
    let per = |d: isize| d as f64 / count.max(1) as f64;
    (per(asked_after - asked), per(chunks_after - chunks))
}

/// Feed `nodes` Nodes and their `pods_per_node` pods each; print the heap
/// each kind's store (with its index and change tracker) holds per object.
pub fn measure(nodes: usize, pods_per_node: usize) {
    let (caches, mut feeds) = caches();
    let writers = nodes * shape::writers_per_node(pods_per_node);
    let (node_asked, node_chunks) = per_object(nodes, || {
        for e in listed((0..nodes).map(served_node)) {
            feeds.nodes.feed(e);
        }
    });
    let all = (0..nodes).flat_map(|i| (0..pods_per_node).map(move |j| served(i, j, pods_per_node)));
    let (pod_asked, pod_chunks) = per_object(writers, || {
        for e in listed(all) {
            feeds.pods.feed(e);
        }
    });
    println!(
        "nodes={nodes} pods={} writer_pods={writers}",
        nodes * pods_per_node
    );
    println!("bytes_per_node={node_asked:.0} bytes_per_node_malloc={node_chunks:.0}");
    println!("bytes_per_writer_pod={pod_asked:.0} bytes_per_writer_pod_malloc={pod_chunks:.0}");
    let mib = |per: f64, n: usize| per * n as f64 / (1 << 20) as f64;
    println!(
        "pod_store_mib={:.1} node_store_mib={:.1}",
        mib(pod_chunks, writers),
        mib(node_chunks, nodes)
    );
    drop(caches);
}
