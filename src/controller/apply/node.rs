//! Apply (I/O): a node's plan to the API server: label merge patch, taint
//! patch guarded by the Node's resourceVersion, server-side apply of the
//! controller's status fields, and events on the Node and the profile.

use crate::api::NodeNetfilterProfile;
use crate::controller::FIELD_MANAGER;
use crate::controller::metrics::{
    Change, Metrics, NodeObservation, Stage, StageLabel, TaintChangeLabel, TaintLabel,
};
use crate::controller::plan::taints::TaintChange;
use crate::controller::plan::{EventTarget, NodePlan, PlannedEvent};
use crate::projection::SlimNode;
use crate::runtime::status_apply::StatusApply;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};

#[derive(Debug, thiserror::Error)]
#[error("node {node}: {stage:?}: {source}")]
pub struct ApplyError {
    pub node: String,
    pub stage: Stage,
    #[source]
    pub source: kube::Error,
}

/// The merge patch replacing the Node's taint list, conditional on the
/// resourceVersion the plan was made from (409 Conflict if it moved).
pub fn taint_patch_body(
    node: &SlimNode,
    taints: &[k8s_openapi::api::core::v1::Taint],
) -> serde_json::Value {
    serde_json::json!({
        "metadata": { "resourceVersion": node.metadata.resource_version },
        "spec": { "taints": taints },
    })
}

/// The resourceVersions the API server answered the plan's writes with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Versions {
    /// The Node after its last patch (labels, then taints).
    pub node: Option<String>,
    /// The profile after its status apply.
    pub profile: Option<String>,
}

pub struct Applier<'a> {
    pub client: &'a kube::Client,
    pub recorder: &'a Recorder,
    pub metrics: &'a Metrics,
}

impl Applier<'_> {
    fn fail(&self, node: &str, stage: Stage, source: kube::Error) -> ApplyError {
        self.metrics
            .reconcile_errors
            .get_or_create(&StageLabel { stage })
            .inc();
        ApplyError {
            node: node.to_string(),
            stage,
            source,
        }
    }

    /// Write the plan; the versions written. Events are best effort
    /// (logged, never fail the reconcile).
    pub async fn apply(
        &self,
        node: &SlimNode,
        profile: Option<&NodeNetfilterProfile>,
        plan: &NodePlan,
    ) -> Result<Versions, ApplyError> {
        let name = node.name_any();
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut written = Versions::default();
        if let Some(patch) = &plan.label_patch {
            written.node = self.write_labels(node, patch).await?;
        }
        if let Some(taints) = &plan.taints.taints {
            let patched = nodes
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(taint_patch_body(node, taints)),
                )
                .await
                .map_err(|e| self.fail(&name, Stage::taints, e))?;
            written.node = patched.metadata.resource_version;
        }
        for change in &plan.taints.changes {
            match change {
                TaintChange::Added(t) | TaintChange::Removed(t) => {
                    let added = matches!(change, TaintChange::Added(_));
                    self.metrics
                        .taint_changes
                        .get_or_create(&TaintChangeLabel {
                            taint: t.key.clone(),
                            change: if added {
                                Change::added
                            } else {
                                Change::removed
                            },
                        })
                        .inc();
                    tracing::warn!(node = %name, taint = %t.key, value = ?t.value, added, "nfguard taint changed");
                }
                TaintChange::Withheld {
                    taint,
                    tainted,
                    limit,
                } => {
                    self.metrics
                        .taints_withheld
                        .get_or_create(&TaintLabel {
                            taint: taint.key.clone(),
                        })
                        .inc();
                    tracing::warn!(node = %name, taint = %taint.key, tainted, limit, "safety brake: taint withheld");
                }
            }
        }
        if let (Some(status), Some(profile)) = (&plan.status, profile) {
            let pname = profile.name_any();
            let profiles: Api<NodeNetfilterProfile> = Api::all(self.client.clone());
            let applied = profiles
                .patch_status(
                    &pname,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    // The plan's status holds the controller-owned fields only.
                    &Patch::Apply(StatusApply::new::<NodeNetfilterProfile>(&pname, status)),
                )
                .await
                .map_err(|e| self.fail(&name, Stage::status, e))?;
            written.profile = applied.metadata.resource_version;
        }
        self.publish_all(&plan.events, node, profile).await;
        self.metrics
            .observe_node(&name, &NodeObservation::of(profile, plan).on_node(node));
        Ok(written)
    }

    /// The label merge patch; the Node's resourceVersion after it.
    pub async fn write_labels(
        &self,
        node: &SlimNode,
        patch: &serde_json::Value,
    ) -> Result<Option<String>, ApplyError> {
        let name = node.name();
        let nodes: Api<Node> = Api::all(self.client.clone());
        let patched = nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(|e| self.fail(name, Stage::labels, e))?;
        tracing::info!(node = %name, labels = %patch, "node labels updated");
        Ok(patched.metadata.resource_version)
    }

    /// Publish `events` on the node, its profile or both (best effort).
    pub async fn publish_all(
        &self,
        events: &[PlannedEvent],
        node: &SlimNode,
        profile: Option<&NodeNetfilterProfile>,
    ) {
        let node_ref = node.object_ref(&());
        let profile_ref = profile.map(|p| p.object_ref(&()));
        for e in events {
            self.publish(e, &node_ref, profile_ref.as_ref()).await;
        }
    }

    async fn publish(
        &self,
        e: &PlannedEvent,
        node: &ObjectReference,
        profile: Option<&ObjectReference>,
    ) {
        let mut event = event(e.warning, e.reason, e.action, &e.note);
        event.secondary = e.related_pod.as_deref().and_then(pod_reference);
        let targets: Vec<&ObjectReference> = match e.target {
            EventTarget::Node => vec![node],
            EventTarget::Profile => profile.into_iter().collect(),
            EventTarget::Both => std::iter::once(node).chain(profile).collect(),
        };
        for t in targets {
            if let Err(err) = self.recorder.publish(&event, t).await {
                tracing::warn!(error = %err, reason = e.reason, "publishing an event failed");
            }
        }
    }
}

/// An event as the recorder publishes it; the note cut to the API's 1 kB.
pub fn event(warning: bool, reason: &str, action: &str, note: &str) -> Event {
    Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(truncate(note, 1000)),
        action: action.into(),
        secondary: None,
    }
}

/// A reference to the pod "namespace/name" (for an event's related object).
fn pod_reference(pod: &str) -> Option<ObjectReference> {
    let (namespace, name) = pod.split_once('/')?;
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        ..Default::default()
    })
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}
