//! The server-side apply body for a status subresource: the kind's identity
//! (taken from its `kube::Resource` impl, so it follows the CRD's version)
//! and the status fields the caller's field manager owns, nothing else.

use serde::Serialize;
use std::borrow::Cow;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusApply<S> {
    api_version: Cow<'static, str>,
    kind: Cow<'static, str>,
    metadata: Name,
    status: S,
}

#[derive(Debug, Clone, Serialize)]
struct Name {
    name: String,
}

impl<S: Serialize> StatusApply<S> {
    /// The body applying `status` to the `K` object called `name`.
    pub fn new<K>(name: &str, status: S) -> Self
    where
        K: kube::Resource<DynamicType = ()>,
    {
        Self {
            api_version: K::api_version(&()),
            kind: K::kind(&()),
            metadata: Name {
                name: name.to_string(),
            },
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{NetfilterPolicy, NodeNetfilterProfile, NodeNetfilterProfileStatus};
    use kube::Resource;
    use serde_json::json;

    #[test]
    fn identity_comes_from_the_type() {
        let status = NodeNetfilterProfileStatus {
            probe_error: Some("boom".into()),
            ..Default::default()
        };
        let body = serde_json::to_value(StatusApply::new::<NodeNetfilterProfile>("n1", &status))
            .expect("serialises");
        assert_eq!(
            body,
            json!({
                "apiVersion": NodeNetfilterProfile::api_version(&()),
                "kind": "NodeNetfilterProfile",
                "metadata": { "name": "n1" },
                "status": serde_json::to_value(&status).unwrap(),
            })
        );
        assert_eq!(body["apiVersion"], "nfguard.io/v1alpha1");
        assert_eq!(body["status"]["probeError"], "boom");

        let other = serde_json::to_value(StatusApply::new::<NetfilterPolicy>("p", json!({})))
            .expect("serialises");
        assert_eq!(other["kind"], "NetfilterPolicy");
        assert_eq!(
            other["apiVersion"],
            NetfilterPolicy::api_version(&()).as_ref()
        );
    }
}
