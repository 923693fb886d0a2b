//! A Pod message (k8s.io/api/core/v1 `Pod`) decoded into a `Pod` holding
//! only what [`PodFacts::of`](crate::projection::pod::PodFacts) reads, so a
//! pod read as protobuf and the same pod read as JSON project alike through
//! the one projection. Field numbers are Kubernetes' `generated.proto`.

use super::wire::{Fields, WireError};
use crate::wellknown::ANNOTATION_EXEMPT;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EphemeralContainer, LocalObjectReference, Pod, PodSpec, PodStatus,
    SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

pub fn decode(bytes: &[u8]) -> Result<Pod, WireError> {
    let mut pod = Pod::default();
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => pod.metadata = object_meta(v.bytes(1)?)?,
            (2, v) => pod.spec = Some(spec(v.bytes(2)?)?),
            (3, v) => pod.status = Some(status(v.bytes(3)?)?),
            _ => {}
        }
    }
    Ok(pod)
}

/// Name, namespace, uid, resourceVersion (the watch resumes from it),
/// deletionTimestamp, the exempt annotation and the controlling owner.
pub fn object_meta(bytes: &[u8]) -> Result<ObjectMeta, WireError> {
    let mut m = ObjectMeta::default();
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => m.name = optional(v.str(1)?),
            (3, v) => m.namespace = optional(v.str(3)?),
            (5, v) => m.uid = optional(v.str(5)?),
            (6, v) => m.resource_version = optional(v.str(6)?),
            (9, v) => m.deletion_timestamp = Some(time(v.bytes(9)?)?),
            (12, v) => {
                let (key, value) = map_entry(v.bytes(12)?)?;
                if key == ANNOTATION_EXEMPT {
                    m.annotations
                        .get_or_insert_default()
                        .insert(key.into(), value.into());
                }
            }
            (13, v) => {
                let owner = owner_reference(v.bytes(13)?)?;
                // Only the first controller is read (`ObjectId::controller_of`).
                if owner.controller == Some(true) && m.owner_references.is_none() {
                    m.owner_references = Some(vec![owner]);
                }
            }
            _ => {}
        }
    }
    Ok(m)
}

/// Go writes a string field that is not a pointer even when empty, where
/// JSON (`omitempty`) leaves it out: empty is absent, as it is in JSON.
fn optional(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn time(bytes: &[u8]) -> Result<Time, WireError> {
    let mut seconds = 0i64;
    for field in Fields::new(bytes) {
        if let (1, v) = field? {
            seconds = v.varint(1)? as i64;
        }
    }
    let at = k8s_openapi::jiff::Timestamp::from_second(seconds).unwrap_or_default();
    Ok(Time(at))
}

fn map_entry(bytes: &[u8]) -> Result<(&str, &str), WireError> {
    let (mut key, mut value) = ("", "");
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => key = v.str(1)?,
            (2, v) => value = v.str(2)?,
            _ => {}
        }
    }
    Ok((key, value))
}

fn owner_reference(bytes: &[u8]) -> Result<OwnerReference, WireError> {
    let mut o = OwnerReference::default();
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => o.kind = v.string(1)?,
            (3, v) => o.name = v.string(3)?,
            (4, v) => o.uid = v.string(4)?,
            (5, v) => o.api_version = v.string(5)?,
            (6, v) => o.controller = Some(v.bool(6)?),
            _ => {}
        }
    }
    Ok(o)
}

fn spec(bytes: &[u8]) -> Result<PodSpec, WireError> {
    let mut s = PodSpec::default();
    for field in Fields::new(bytes) {
        match field? {
            (2, v) => s.containers.push(container(v.bytes(2)?)?),
            (8, v) => s.service_account_name = optional(v.str(8)?),
            (10, v) => s.node_name = optional(v.str(10)?),
            (11, v) => s.host_network = Some(v.bool(11)?),
            (15, v) => s
                .image_pull_secrets
                .get_or_insert_default()
                .push(local_object_reference(v.bytes(15)?)?),
            (20, v) => s
                .init_containers
                .get_or_insert_default()
                .push(container(v.bytes(20)?)?),
            (34, v) => s
                .ephemeral_containers
                .get_or_insert_default()
                .push(ephemeral_container(v.bytes(34)?)?),
            _ => {}
        }
    }
    Ok(s)
}

fn local_object_reference(bytes: &[u8]) -> Result<LocalObjectReference, WireError> {
    let mut r = LocalObjectReference::default();
    for field in Fields::new(bytes) {
        if let (1, v) = field? {
            r.name = v.string(1)?;
        }
    }
    Ok(r)
}

/// Name, image and security context: `Container`'s numbers, which
/// `EphemeralContainerCommon` shares.
fn container(bytes: &[u8]) -> Result<Container, WireError> {
    let mut c = Container::default();
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => c.name = v.string(1)?,
            (2, v) => c.image = optional(v.str(2)?),
            (15, v) => c.security_context = Some(security_context(v.bytes(15)?)?),
            _ => {}
        }
    }
    Ok(c)
}

fn ephemeral_container(bytes: &[u8]) -> Result<EphemeralContainer, WireError> {
    let mut e = EphemeralContainer::default();
    for field in Fields::new(bytes) {
        if let (1, v) = field? {
            let c = container(v.bytes(1)?)?;
            e.name = c.name;
            e.image = c.image;
            e.security_context = c.security_context;
        }
    }
    Ok(e)
}

fn security_context(bytes: &[u8]) -> Result<SecurityContext, WireError> {
    let mut sc = SecurityContext::default();
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => {
                let mut caps = Capabilities::default();
                for f in Fields::new(v.bytes(1)?) {
                    if let (1, v) = f? {
                        caps.add.get_or_insert_default().push(v.string(1)?);
                    }
                }
                sc.capabilities = Some(caps);
            }
            (2, v) => sc.privileged = Some(v.bool(2)?),
            _ => {}
        }
    }
    Ok(sc)
}

fn status(bytes: &[u8]) -> Result<PodStatus, WireError> {
    let mut s = PodStatus::default();
    for field in Fields::new(bytes) {
        if let (1, v) = field? {
            s.phase = optional(v.str(1)?);
        }
    }
    Ok(s)
}
