//! Workload objects -> the pod spec they run, and the per-container facts
//! that decide whether a container can touch netfilter at all.

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, PodSpec, SecurityContext};
use serde_json::Value;
use std::collections::BTreeMap;

use crate::wellknown::ANNOTATION_EXEMPT;
pub use crate::wellknown::WorkloadKind;

/// The exempt reason in `annotations`, if any.
pub fn exempt_annotation(annotations: &BTreeMap<String, String>) -> Option<&str> {
    annotations.get(ANNOTATION_EXEMPT).map(String::as_str)
}

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("object has no string field \"kind\"")]
    NoKind,
    #[error("{kind} {name}: missing {pointer}")]
    MissingPodSpec {
        kind: String,
        name: String,
        pointer: &'static str,
    },
    #[error("{kind} {name}: invalid pod spec: {error}")]
    InvalidPodSpec {
        kind: String,
        name: String,
        error: serde_json::Error,
    },
    #[error("{kind} {name}: invalid metadata: {error}")]
    InvalidMetadata {
        kind: String,
        name: String,
        error: serde_json::Error,
    },
}

/// One object that runs pods: its identity and its pod spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub kind: WorkloadKind,
    /// None for a manifest without one (the CLI then shows "default").
    pub namespace: Option<String>,
    /// metadata.name (or generateName when only that is set).
    pub name: String,
    /// The object's annotations.
    pub annotations: BTreeMap<String, String>,
    /// The pod template's annotations (the Pod's own for a Pod).
    pub template_annotations: BTreeMap<String, String>,
    pub pod_spec: PodSpec,
}

#[derive(serde::Deserialize, Default)]
struct Meta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default, rename = "generateName")]
    generate_name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

impl Workload {
    /// `Ok(None)` for kinds nfguard does not judge (ConfigMap, Service, ...).
    pub fn from_value(obj: &Value) -> Result<Option<Self>, WorkloadError> {
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .ok_or(WorkloadError::NoKind)?;
        match WorkloadKind::parse(kind) {
            Some(k) => Self::of_kind(k, obj).map(Some),
            None => Ok(None),
        }
    }

    /// For the webhook: `AdmissionRequest<DynamicObject>::object`.
    pub fn from_dynamic(obj: &kube::api::DynamicObject) -> Result<Option<Self>, WorkloadError> {
        let kind = obj
            .types
            .as_ref()
            .map(|t| t.kind.as_str())
            .ok_or(WorkloadError::NoKind)?;
        let Some(k) = WorkloadKind::parse(kind) else {
            return Ok(None);
        };
        let mut v = serde_json::Map::new();
        v.insert("kind".into(), Value::String(kind.into()));
        v.insert(
            "metadata".into(),
            serde_json::to_value(&obj.metadata).unwrap_or(Value::Null),
        );
        if let Value::Object(data) = &obj.data {
            for (key, val) in data {
                v.insert(key.clone(), val.clone());
            }
        }
        Self::of_kind(k, &Value::Object(v)).map(Some)
    }

    /// The pod spec of an object already known to be of `kind`.
    pub fn of_kind(kind: WorkloadKind, obj: &Value) -> Result<Self, WorkloadError> {
        let meta_of = |v: Option<&Value>| -> Result<Meta, serde_json::Error> {
            match v {
                Some(v) if !v.is_null() => Meta::deserialize_value(v),
                _ => Ok(Meta::default()),
            }
        };
        let name_hint = obj
            .pointer("/metadata/name")
            .or_else(|| obj.pointer("/metadata/generateName"))
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>")
            .to_string();
        let meta =
            meta_of(obj.get("metadata")).map_err(|error| WorkloadError::InvalidMetadata {
                kind: kind.as_str().into(),
                name: name_hint.clone(),
                error,
            })?;
        let template = kind.pod_template();
        let (spec_ptr, meta_ptr) = (template.spec_pointer, template.metadata_pointer);
        let spec = obj
            .pointer(spec_ptr)
            .ok_or_else(|| WorkloadError::MissingPodSpec {
                kind: kind.as_str().into(),
                name: name_hint.clone(),
                pointer: spec_ptr,
            })?;
        let pod_spec: PodSpec = serde_json::from_value(spec.clone()).map_err(|error| {
            WorkloadError::InvalidPodSpec {
                kind: kind.as_str().into(),
                name: name_hint.clone(),
                error,
            }
        })?;
        let template_meta = if kind == WorkloadKind::Pod {
            None
        } else {
            Some(meta_of(obj.pointer(meta_ptr)).map_err(|error| {
                WorkloadError::InvalidMetadata {
                    kind: kind.as_str().into(),
                    name: name_hint.clone(),
                    error,
                }
            })?)
        };
        let annotations = meta.annotations.unwrap_or_default();
        let template_annotations = match template_meta {
            Some(m) => m.annotations.unwrap_or_default(),
            None => annotations.clone(),
        };
        Ok(Workload {
            kind,
            namespace: meta.namespace,
            name: meta.name.or(meta.generate_name).unwrap_or(name_hint),
            annotations,
            template_annotations,
            pod_spec,
        })
    }

    /// The same as [`Workload::of_kind`] for an object given as JSON text:
    /// parsed once, straight into the pod spec (the webhook's hot path). An
    /// object the typed pass cannot read goes through `of_kind`, which names
    /// the problem precisely.
    pub fn of_kind_json(kind: WorkloadKind, json: &str) -> Result<Self, WorkloadError> {
        if let Some(w) = typed::read(kind, json) {
            return Ok(w);
        }
        let obj: Value =
            serde_json::from_str(json).map_err(|error| WorkloadError::InvalidPodSpec {
                kind: kind.as_str().into(),
                name: "<unnamed>".into(),
                error,
            })?;
        Self::of_kind(kind, &obj)
    }

    /// `Kind/namespace/name`, e.g. "DaemonSet/kube-system/kube-router".
    pub fn object_ref(&self) -> String {
        format!(
            "{}/{}/{}",
            self.kind.as_str(),
            self.namespace.as_deref().unwrap_or("default"),
            self.name
        )
    }

    /// The `nfguard.io/exempt` reason from the object or its pod template.
    pub fn exempt_reason(&self) -> Option<&str> {
        exempt_annotation(&self.annotations)
            .or_else(|| exempt_annotation(&self.template_annotations))
    }

    pub fn host_network(&self) -> bool {
        self.pod_spec.host_network.unwrap_or(false)
    }

    /// Every container (init, app, ephemeral) with its netfilter scope.
    pub fn containers(&self) -> Vec<ContainerFacts> {
        pod_containers(&self.pod_spec)
    }
}

/// Typed shapes of the workload kinds, down to the pod template.
mod typed {
    use super::{Meta, Workload, WorkloadKind};
    use k8s_openapi::api::core::v1::PodSpec;
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Object<S> {
        metadata: Option<Meta>,
        spec: Option<S>,
    }

    #[derive(Deserialize)]
    struct Template {
        metadata: Option<Meta>,
        spec: Option<PodSpec>,
    }

    #[derive(Deserialize)]
    struct WithTemplate {
        template: Option<Template>,
    }

    #[derive(Deserialize)]
    struct CronJobSpec {
        #[serde(rename = "jobTemplate")]
        job_template: Option<Object<WithTemplate>>,
    }

    fn build(
        kind: WorkloadKind,
        meta: Option<Meta>,
        template_meta: Option<Meta>,
        spec: PodSpec,
    ) -> Option<Workload> {
        let meta = meta.unwrap_or_default();
        let annotations = meta.annotations.unwrap_or_default();
        let template_annotations = match kind {
            WorkloadKind::Pod => annotations.clone(),
            _ => template_meta
                .and_then(|m| m.annotations)
                .unwrap_or_default(),
        };
        Some(Workload {
            kind,
            namespace: meta.namespace,
            name: meta
                .name
                .or(meta.generate_name)
                .unwrap_or_else(|| "<unnamed>".into()),
            annotations,
            template_annotations,
            pod_spec: spec,
        })
    }

    /// None when anything is missing or malformed (the caller's slow path
    /// then reports exactly what).
    pub(super) fn read(kind: WorkloadKind, json: &str) -> Option<Workload> {
        let template = |t: Option<WithTemplate>| t?.template;
        match kind {
            WorkloadKind::Pod => {
                let o: Object<PodSpec> = serde_json::from_str(json).ok()?;
                build(kind, o.metadata, None, o.spec?)
            }
            WorkloadKind::CronJob => {
                let o: Object<CronJobSpec> = serde_json::from_str(json).ok()?;
                let t = template(o.spec?.job_template?.spec)?;
                build(kind, o.metadata, t.metadata, t.spec?)
            }
            _ => {
                let o: Object<WithTemplate> = serde_json::from_str(json).ok()?;
                let t = template(o.spec)?;
                build(kind, o.metadata, t.metadata, t.spec?)
            }
        }
    }
}

/// One container of a pod spec, borrowed: the one walk over init, app and
/// ephemeral containers that the judgement, the writer inventory and the
/// controller's "can this pod write rules" all share.
#[derive(Clone, Copy, Debug)]
pub struct ContainerRef<'a> {
    pub kind: ContainerKind,
    pub name: &'a str,
    pub image: Option<&'a str>,
    pub security_context: Option<&'a SecurityContext>,
}

impl ContainerRef<'_> {
    /// Privileged, or NET_ADMIN/ALL: its iptables can change some rule set.
    pub fn can_write(&self) -> bool {
        security_context_can_write(self.security_context)
    }
}

/// Every container of `spec`: init (in order), app, then ephemeral ones.
/// An iterator: most pods are walked only to learn they write nothing.
pub fn container_refs(spec: &PodSpec) -> impl Iterator<Item = ContainerRef<'_>> {
    fn of(kind: ContainerKind) -> impl Fn(&Container) -> ContainerRef<'_> {
        move |c| ContainerRef {
            kind,
            name: &c.name,
            image: c.image.as_deref(),
            security_context: c.security_context.as_ref(),
        }
    }
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .map(of(ContainerKind::Init));
    let app = spec.containers.iter().map(of(ContainerKind::App));
    let ephemeral = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .map(|c: &EphemeralContainer| ContainerRef {
            kind: ContainerKind::Ephemeral,
            name: &c.name,
            image: c.image.as_deref(),
            security_context: c.security_context.as_ref(),
        });
    init.chain(app).chain(ephemeral)
}

/// Whether any container of `spec` can write netfilter rules.
pub fn pod_spec_can_write(spec: &PodSpec) -> bool {
    container_refs(spec).any(|c| c.can_write())
}

/// Whether the admission gate judges `spec` at all: hostNetwork, or a
/// container that can write rules. Every other pod spec is allowed without
/// a finding, so the webhook configuration's matchConditions (the same test
/// in CEL) keep such pods away from the webhook; tests/it/gate_match.rs holds
/// both to one table.
pub fn pod_spec_reaches_gate(spec: &PodSpec) -> bool {
    spec.host_network.unwrap_or(false) || pod_spec_can_write(spec)
}

/// Every container (init, app, ephemeral) of a pod spec with its netfilter
/// scope: what `evaluate` judges, without needing a whole [`Workload`].
pub fn pod_containers(spec: &PodSpec) -> Vec<ContainerFacts> {
    let host = spec.host_network.unwrap_or(false);
    container_refs(spec)
        .map(|c| ContainerFacts::new(c.kind, c.name, c.image, c.security_context, host))
        .collect()
}

impl Meta {
    fn deserialize_value(v: &Value) -> Result<Self, serde_json::Error> {
        serde::Deserialize::deserialize(v)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerKind {
    Init,
    App,
    Ephemeral,
}

/// Which rule set a container can write.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Scope {
    /// hostNetwork + NET_ADMIN/ALL/privileged: the node's own rules.
    HostShared,
    /// Own network namespace + NET_ADMIN/ALL/privileged: the pod's rules only.
    PodNetns,
    /// hostNetwork without the capability: can read nothing, write nothing.
    HostReadOnly,
    /// Neither: not judged.
    None,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContainerFacts {
    pub kind: ContainerKind,
    pub name: String,
    /// None when the spec has no image (invalid, but never a panic).
    pub image: Option<String>,
    pub net_admin: bool,
    pub privileged: bool,
    pub scope: Scope,
}

impl ContainerFacts {
    fn new(
        kind: ContainerKind,
        name: &str,
        image: Option<&str>,
        sc: Option<&SecurityContext>,
        host_network: bool,
    ) -> Self {
        let privileged = sc.and_then(|s| s.privileged).unwrap_or(false);
        let net_admin = has_net_admin(sc);
        let can_write = security_context_can_write(sc);
        let scope = match (host_network, can_write) {
            (true, true) => Scope::HostShared,
            (false, true) => Scope::PodNetns,
            (true, false) => Scope::HostReadOnly,
            (false, false) => Scope::None,
        };
        ContainerFacts {
            kind,
            name: name.to_string(),
            image: image.map(str::to_string),
            net_admin,
            privileged,
            scope,
        }
    }

    /// Whether this container's iptables can change some rule set.
    pub fn can_write(&self) -> bool {
        matches!(self.scope, Scope::HostShared | Scope::PodNetns)
    }
}

/// Privileged, or NET_ADMIN/ALL added.
pub fn security_context_can_write(sc: Option<&SecurityContext>) -> bool {
    sc.and_then(|s| s.privileged).unwrap_or(false) || has_net_admin(sc)
}

/// `capabilities.add` holds NET_ADMIN or ALL (with or without the `CAP_`
/// prefix, any case, as container runtimes accept), and no later `drop` of it.
pub fn has_net_admin(sc: Option<&SecurityContext>) -> bool {
    let Some(caps) = sc.and_then(|s| s.capabilities.as_ref()) else {
        return false;
    };
    // Runtimes drop first, then add: only an explicit drop of NET_ADMIN while
    // not adding it matters, which looking at `add` alone already covers.
    caps.add.iter().flatten().any(|c| grants_net_admin(c))
}

/// NET_ADMIN or ALL, trimmed, any ASCII case, optional `CAP_` prefix.
/// Compares in place: this runs for every container of every pod.
fn grants_net_admin(cap: &str) -> bool {
    let c = cap.trim();
    let c = match c.get(..4) {
        Some(prefix) if prefix.eq_ignore_ascii_case("CAP_") => &c[4..],
        _ => c,
    };
    c.eq_ignore_ascii_case("NET_ADMIN") || c.eq_ignore_ascii_case("ALL")
}

#[cfg(test)]
mod net_admin_tests {
    use super::*;
    use k8s_openapi::api::core::v1::Capabilities;

    fn sc(add: &[&str]) -> SecurityContext {
        SecurityContext {
            capabilities: Some(Capabilities {
                add: Some(add.iter().map(|c| c.to_string()).collect()),
                drop: Some(vec!["NET_ADMIN".into()]),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn has_net_admin_accepts_every_spelling_runtimes_accept() {
        for cap in [
            "NET_ADMIN",
            "net_admin",
            " CAP_NET_ADMIN ",
            "cap_net_admin",
            "Cap_Net_Admin",
            "ALL",
            "all",
            "cap_all",
            "\tCAP_ALL\n",
        ] {
            assert!(has_net_admin(Some(&sc(&["CHOWN", cap]))), "{cap:?}");
        }
    }

    #[test]
    fn has_net_admin_rejects_look_alikes() {
        for cap in [
            "",
            "CAP_",
            "NET_RAW",
            "NET_ADMINS",
            "CAP_CAP_ALL",
            "NET ADMIN",
            "ALLL",
            "CAP_NET",
            "ÇAP_ALL",
        ] {
            assert!(!has_net_admin(Some(&sc(&[cap]))), "{cap:?}");
        }
        assert!(!has_net_admin(None));
        assert!(!has_net_admin(Some(&SecurityContext::default())));
    }
}
