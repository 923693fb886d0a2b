//! CRD types only. `crds()` is the single source of the YAML in `crds/`.

pub mod bounds;
pub mod fit;
pub mod policy;
pub mod profile;

pub use policy::{
    NetfilterPolicy, NetfilterPolicySpec, NetfilterPolicyStatus, PolicyAction, UnresolvedAction,
};
pub use profile::{
    ActiveBackend, BackendFacts, BackendsFacts, BridgeFacts, Condition, KernelFacts, KernelModules,
    KubeProxyMode, KubeletMarkers, MarkerState, ModuleState, NativeFeature, NativeTable,
    NodeNetfilterProfile, NodeNetfilterProfileSpec, NodeNetfilterProfileStatus, NodeNftables,
    Writer, XtModule,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD nfguard defines, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![NodeNetfilterProfile::crd(), NetfilterPolicy::crd()]
}

/// The CRDs as one multi-document YAML stream (what `nfguard crd` prints and `crds/` holds).
pub fn crds_yaml() -> String {
    crds()
        .iter()
        .map(|c| serde_yaml::to_string(c).expect("CRD serializes"))
        .collect::<Vec<_>>()
        .join("---\n")
}
