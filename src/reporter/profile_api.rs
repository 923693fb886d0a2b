//! The reporter's Kubernetes writes: make sure the node's
//! NodeNetfilterProfile exists (owned by the Node, so it outlives reporter
//! restarts and is garbage-collected with the Node), then server-side apply
//! its status under the field manager `nfguard-reporter` with only the
//! reporter's own fields. A heartbeat (facts unchanged since the last
//! accepted write) sends only `lastProbeTime`, as a JSON merge patch: a
//! fleet at rest then writes ~60 bytes per node and heartbeat instead of
//! the whole status (docs/benchmarks.md, figure 5).

use super::core::same_facts;
use crate::api::{NodeNetfilterProfile, NodeNetfilterProfileSpec, NodeNetfilterProfileStatus};
use crate::runtime::status_apply::StatusApply;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams, PostParams};

pub const FIELD_MANAGER: &str = "nfguard-reporter";

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("reading Node {node}: {source}")]
    GetNode { node: String, source: kube::Error },
    #[error("Node {0} has no uid")]
    NodeWithoutUid(String),
    #[error("creating NodeNetfilterProfile {node}: {source}")]
    Create { node: String, source: kube::Error },
    #[error("applying the status of NodeNetfilterProfile {node}: {source}")]
    Apply { node: String, source: kube::Error },
}

impl ApiError {
    /// The HTTP status of the API's answer, when there was one.
    pub fn http_status(&self) -> Option<u16> {
        let e = match self {
            ApiError::GetNode { source, .. }
            | ApiError::Create { source, .. }
            | ApiError::Apply { source, .. } => source,
            ApiError::NodeWithoutUid(_) => return None,
        };
        match e {
            kube::Error::Api(s) => Some(s.code),
            _ => None,
        }
    }
}

/// The profile object the reporter creates: spec.nodeName and an
/// ownerReference to the Node (not to the reporter pod, which restarts).
pub fn new_profile(node_name: &str, node_uid: &str) -> NodeNetfilterProfile {
    let mut p = NodeNetfilterProfile::new(
        node_name,
        NodeNetfilterProfileSpec {
            node_name: Some(node_name.to_string()),
        },
    );
    p.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node_name.to_string(),
        uid: node_uid.to_string(),
        controller: None,
        block_owner_deletion: None,
    }]);
    p
}

/// The server-side apply body for the status subresource: identity plus the
/// reporter-owned status fields, nothing else (no spec, no conditions).
pub fn status_apply_body(
    node_name: &str,
    status: &NodeNetfilterProfileStatus,
) -> StatusApply<NodeNetfilterProfileStatus> {
    StatusApply::new::<NodeNetfilterProfile>(node_name, status.reporter_fields())
}

/// The merge patch of a heartbeat: the probe time alone.
pub fn heartbeat_patch(status: &NodeNetfilterProfileStatus) -> serde_json::Value {
    serde_json::json!({ "status": { "lastProbeTime": status.last_probe_time } })
}

pub struct ProfileWriter {
    client: kube::Client,
    node_name: String,
    ensured: bool,
    /// What the API last accepted; None after a failed write (the next
    /// write is then a full apply).
    written: Option<NodeNetfilterProfileStatus>,
}

impl ProfileWriter {
    pub fn new(client: kube::Client, node_name: impl Into<String>) -> Self {
        Self {
            client,
            node_name: node_name.into(),
            ensured: false,
            written: None,
        }
    }

    /// GET the Node for its uid, then create the profile; an existing
    /// profile (409 AlreadyExists) is fine.
    pub async fn ensure_profile(&mut self) -> Result<(), ApiError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = nodes
            .get(&self.node_name)
            .await
            .map_err(|source| ApiError::GetNode {
                node: self.node_name.clone(),
                source,
            })?;
        let uid = node
            .metadata
            .uid
            .clone()
            .ok_or_else(|| ApiError::NodeWithoutUid(self.node_name.clone()))?;
        let profiles: Api<NodeNetfilterProfile> = Api::all(self.client.clone());
        let pp = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        match profiles
            .create(&pp, &new_profile(&self.node_name, &uid))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(source) => {
                return Err(ApiError::Create {
                    node: self.node_name.clone(),
                    source,
                });
            }
        }
        self.ensured = true;
        Ok(())
    }

    /// Ensure the profile (once, or again after it vanished), then apply the
    /// status, or only its probe time when the facts are those last written.
    pub async fn write(&mut self, status: &NodeNetfilterProfileStatus) -> Result<(), ApiError> {
        // Within the CRD's bounds: a field past one would refuse the whole write.
        let mut fitted = status.clone();
        fitted.fit_bounds();
        let status = &fitted;
        if !self.ensured {
            self.ensure_profile().await?;
        }
        let profiles: Api<NodeNetfilterProfile> = Api::all(self.client.clone());
        let heartbeat = self.written.as_ref().is_some_and(|w| same_facts(w, status));
        let sent = if heartbeat {
            let pp = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            };
            let patch = Patch::Merge(heartbeat_patch(status));
            profiles.patch_status(&self.node_name, &pp, &patch).await
        } else {
            // force: these fields are the reporter's alone; a stray manual
            // edit must not block the node's facts.
            let pp = PatchParams::apply(FIELD_MANAGER).force();
            let body = status_apply_body(&self.node_name, status);
            profiles
                .patch_status(&self.node_name, &pp, &Patch::Apply(&body))
                .await
        };
        match sent {
            Ok(_) => {
                self.written = Some(status.reporter_fields());
                Ok(())
            }
            Err(source) => {
                self.written = None;
                if matches!(&source, kube::Error::Api(s) if s.code == 404) {
                    // Deleted under us: re-create it on the next attempt.
                    self.ensured = false;
                }
                Err(ApiError::Apply {
                    node: self.node_name.clone(),
                    source,
                })
            }
        }
    }
}
