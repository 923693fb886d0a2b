//! Gather and plan with no read from the API server: one node's facts come
//! from the controller's caches ([`crate::controller::cache::stores`]), the writers' images
//! through the image look-ups with each pod's own pull secrets (the only
//! I/O), then the pure
//! [`plan_node`]. Every reconcile runs this before it applies the plan,
//! and the controller benchmark runs it for a whole cluster.

use crate::controller::cache::stores::Caches;
use crate::controller::plan::taints::TaintSettings;
use crate::controller::plan::{NodeFacts, NodePlan, images_to_inspect, plan_node};
use crate::judgement::Bounded;
use crate::projection::PodFacts;
use crate::projection::SlimNode;
use k8s_openapi::jiff::Timestamp;
use std::sync::Arc;
use tokio::time::Instant;

/// Plan `node` from the caches. Image look-ups not answered by `deadline`
/// count as unresolved. The caches must have listed (see
/// [`Caches::wait_listed`]).
pub async fn plan_from_caches(
    node: &SlimNode,
    caches: &Caches,
    images: &Bounded,
    deadline: Instant,
    now: Timestamp,
) -> NodePlan {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let profile = caches.profile(name);
    let pods = caches.pods_on(name);
    let pods: Vec<&PodFacts> = pods.iter().map(Arc::as_ref).collect();
    let policies = caches.policy_book();
    let settings = TaintSettings::from_policies(policies.policies());
    let keys = images_to_inspect(node, &pods, &policies);
    let images = images.resolve_for_pods(&pods, &keys, deadline).await;
    // After the look-ups, in one step under the brake's lock: count the
    // taints written or reserved meanwhile, plan, and reserve this node's
    // taint if the plan adds one. Reconciles run side by side; this is
    // what keeps them from passing the brake together.
    let mut tainted = caches.tainted();
    let plan = plan_node(&NodeFacts {
        node,
        profile: profile.as_deref(),
        pods: &pods,
        policies: &policies,
        settings,
        images: &images,
        tainted_elsewhere: tainted.elsewhere(name),
        total_nodes: tainted.total().max(1),
        now,
    });
    if plan.taints.tainted_after {
        tainted.reserve(name);
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NetfilterPolicy, NodeNetfilterProfile};
    use crate::compat::evaluate::ImageResolutions;
    use crate::controller::cache::stores::{FirstLists, caches};
    use crate::controller::plan::tests::{degraded_profile, node};
    use crate::judgement::{Bounded, FixedImages, PolicyBook};
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::runtime::reflector::ObjectRef;
    use serde_json::json;
    use std::time::Duration;

    const NOW: &str = "2026-01-01T00:01:00Z";

    fn policy(spec: serde_json::Value) -> NetfilterPolicy {
        serde_json::from_value(json!({
            "apiVersion": "nfguard.io/v1alpha1", "kind": "NetfilterPolicy",
            "metadata": {"name": "p"}, "spec": spec
        }))
        .unwrap()
    }

    /// Caches holding one first list of each kind.
    fn filled(
        nodes: &[Node],
        profiles: &[NodeNetfilterProfile],
        pods: &[Pod],
        policies: &[NetfilterPolicy],
    ) -> Caches {
        let (caches, mut feeds) = caches();
        feeds.list(FirstLists {
            nodes: nodes.to_vec(),
            profiles: profiles.to_vec(),
            pods: pods.to_vec(),
            policies: policies.to_vec(),
            namespaces: Vec::new(),
        });
        caches
    }

    /// Plan every node in order from the caches, recording each plan's
    /// taint as a reconcile does after applying it.
    async fn plan_every_node(
        caches: &Caches,
        nodes: &[Node],
        images: ImageResolutions,
    ) -> Vec<NodePlan> {
        caches.wait_listed(Duration::from_secs(1)).await.unwrap();
        let images = Bounded::new(Arc::new(FixedImages(images)), 4);
        let mut plans = Vec::new();
        for n in nodes {
            let deadline = Instant::now() + Duration::from_secs(5);
            let name = n.metadata.name.as_deref().unwrap();
            // As a reconcile gets it: the Controller's store's projection.
            let kept = caches.nodes.get(&ObjectRef::new(name)).unwrap();
            let plan =
                plan_from_caches(&kept, caches, &images, deadline, NOW.parse().unwrap()).await;
            caches.tainted().wrote(name, plan.taints.tainted_after);
            plans.push(plan);
        }
        plans
    }

    /// 20 degraded nodes under a policy that taints them (the brake: 2).
    fn twenty_degraded_nodes() -> (Vec<Node>, Caches) {
        let nodes: Vec<Node> = (0..20).map(node).collect();
        let profiles: Vec<_> = (0..20).map(degraded_profile).collect();
        let policies = [policy(json!({"taintDegradedNodes": true}))];
        let caches = filled(&nodes, &profiles, &[], &policies);
        (nodes, caches)
    }

    #[tokio::test]
    async fn the_brake_holds_across_the_cluster() {
        let (nodes, caches) = twenty_degraded_nodes();
        let plans = plan_every_node(&caches, &nodes, ImageResolutions::new()).await;
        let tainted = plans.iter().filter(|p| p.taints.tainted_after).count();
        let withheld = plans
            .iter()
            .filter(|p| p.events.iter().any(|e| e.reason == "TaintWithheld"))
            .count();
        assert_eq!((tainted, withheld), (2, 18));
        assert_eq!(caches.tainted().tainted(), 2);
    }

    /// Reconciles side by side: each plans, writes (an await) and records
    /// what it wrote. Here every plan comes before any write, the worst
    /// case for the brake: the reservations made while planning hold it.
    #[tokio::test]
    async fn the_brake_holds_for_reconciles_side_by_side() {
        let (nodes, caches) = twenty_degraded_nodes();
        caches.wait_listed(Duration::from_secs(1)).await.unwrap();
        let images = Bounded::new(Arc::new(FixedImages(ImageResolutions::new())), 4);
        let all_planned = tokio::sync::Barrier::new(nodes.len());
        let reconciles = nodes.iter().map(|n| async {
            let deadline = Instant::now() + Duration::from_secs(5);
            let name = n.metadata.name.as_deref().unwrap();
            let kept = caches.nodes.get(&ObjectRef::new(name)).unwrap();
            let plan =
                plan_from_caches(&kept, &caches, &images, deadline, NOW.parse().unwrap()).await;
            all_planned.wait().await;
            caches.tainted().wrote(name, plan.taints.tainted_after);
            plan
        });
        let plans = futures::future::join_all(reconciles).await;
        let tainted = plans.iter().filter(|p| p.taints.tainted_after).count();
        assert_eq!(tainted, 2, "10 % of 20 nodes");
        assert_eq!(caches.tainted().tainted(), 2);
    }

    /// Every kind of pod on three nodes, with what the plan never reads
    /// (labels, env, status conditions, managedFields): writers on the
    /// host, a privileged pod in its own netns, a finished writer,
    /// ordinary pods.
    fn mixed_cluster_pods() -> Vec<Pod> {
        let pod = |name: &str,
                   node: usize,
                   host: bool,
                   phase: &str,
                   sc: serde_json::Value|
         -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "kube-system", "labels": {"app": name},
                             "managedFields": [{"manager": "kubelet"}]},
                "spec": {"nodeName": format!("n{node}"), "hostNetwork": host,
                         "containers": [{"name": "c", "image": format!("{name}:1"), "securityContext": sc,
                                         "env": [{"name": "A", "value": "1"}]}]},
                "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .unwrap()
        };
        let mut pods = Vec::new();
        for n in 0..3 {
            let caps = json!({"capabilities": {"add": ["cap_net_admin"]}});
            pods.push(pod(&format!("proxy-{n}"), n, true, "Running", caps));
            pods.push(pod(&format!("app-{n}"), n, false, "Running", json!({})));
            let privileged = json!({"privileged": true});
            pods.push(pod(
                &format!("vpn-{n}"),
                n,
                false,
                "Running",
                privileged.clone(),
            ));
            pods.push(pod(&format!("done-{n}"), n, true, "Succeeded", privileged));
            pods.push(pod(&format!("ro-{n}"), n, true, "Running", json!({})));
        }
        pods
    }

    #[tokio::test]
    async fn the_kept_projected_pods_plan_as_every_full_pod() {
        let nodes: Vec<Node> = (0..3).map(node).collect();
        let profiles: Vec<_> = (0..3).map(degraded_profile).collect();
        let pods = mixed_cluster_pods();
        let platform = "linux/amd64".parse().unwrap();
        let mut images = ImageResolutions::new();
        for image in ["proxy-0:1", "proxy-1:1", "proxy-2:1", "vpn-0:1", "vpn-2:1"] {
            let profile = crate::facts::ImageProfile {
                image: image.into(),
                digest: format!("sha256:{image}"),
                platform: "linux/amd64".into(),
                iptables: Some(crate::facts::IptablesFacts {
                    version: Some("1.8.7".parse().unwrap()),
                    backend: Some(crate::facts::Backend::Nft),
                    ..Default::default()
                }),
                nftables: None,
            };
            images.insert_profile(image, &platform, profile);
        }
        images.insert_error("vpn-1:1", &platform, "registry down");
        let policies = [policy(
            json!({"action": "Taint", "taintDegradedNodes": true,
                                      "maxTaintedNodesPercent": 100}),
        )];
        let caches = filled(&nodes, &profiles, &pods, &policies);
        assert_eq!(caches.pods().len(), 9, "proxy, vpn and done pods");
        let plans = plan_every_node(&caches, &nodes, images.clone()).await;

        // The same plans from every pod, unfiltered, each projected.
        let book = PolicyBook::new(policies.iter().cloned());
        for (i, n) in nodes.iter().enumerate() {
            let name = format!("n{i}");
            let on_node: Vec<PodFacts> = pods
                .iter()
                .filter(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some(&name))
                .map(PodFacts::of)
                .collect();
            let on_node: Vec<&PodFacts> = on_node.iter().collect();
            let full = plan_node(&NodeFacts {
                node: &SlimNode::from(n.clone()),
                profile: Some(&profiles[i]),
                pods: &on_node,
                policies: &book,
                settings: TaintSettings::from_policies(&policies),
                images: &images,
                tainted_elsewhere: i,
                total_nodes: 3,
                now: NOW.parse().unwrap(),
            });
            assert_eq!(plans[i], full, "{name}");
        }
        let writers = |p: &NodePlan| p.status.as_ref().and_then(|s| s.writers.clone());
        assert_eq!(writers(&plans[0]).map(|w| w.len()), Some(1));
        assert!(plans.iter().all(|p| p.taints.tainted_after));
    }
}
