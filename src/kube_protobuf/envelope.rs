//! What wraps an object on the wire: the `k8s\0` envelope (a
//! `runtime.Unknown` naming the kind), a watch event, a `Status`, a list's
//! `ListMeta`. Field numbers are apimachinery's `generated.proto`.

use super::wire::{Fields, WireError};

/// The four bytes before every enveloped protobuf object.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// An enveloped object: its kind and its message.
#[derive(Debug, PartialEq, Eq)]
pub struct Unknown<'a> {
    pub kind: &'a str,
    pub raw: &'a [u8],
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EnvelopeError {
    #[error("not a Kubernetes protobuf object (no k8s\\0 prefix)")]
    NoMagic,
    #[error(transparent)]
    Wire(#[from] WireError),
}

pub fn unknown(bytes: &[u8]) -> Result<Unknown<'_>, EnvelopeError> {
    let body = bytes.strip_prefix(MAGIC).ok_or(EnvelopeError::NoMagic)?;
    let mut out = Unknown { kind: "", raw: &[] };
    for field in Fields::new(body) {
        match field? {
            (1, v) => out.kind = type_meta_kind(v.bytes(1)?)?,
            (2, v) => out.raw = v.bytes(2)?,
            _ => {}
        }
    }
    Ok(out)
}

/// `TypeMeta.kind`.
pub fn type_meta_kind(bytes: &[u8]) -> Result<&str, WireError> {
    let mut kind = "";
    for field in Fields::new(bytes) {
        if let (2, v) = field? {
            kind = v.str(2)?;
        }
    }
    Ok(kind)
}

/// A `WatchEvent`: its type and its enveloped object's bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct WatchEvent<'a> {
    pub kind: &'a str,
    pub object: &'a [u8],
}

pub fn watch_event(bytes: &[u8]) -> Result<WatchEvent<'_>, WireError> {
    let mut out = WatchEvent {
        kind: "",
        object: &[],
    };
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => out.kind = v.str(1)?,
            // RawExtension.raw
            (2, v) => {
                for f in Fields::new(v.bytes(2)?) {
                    if let (1, raw) = f? {
                        out.object = raw.bytes(1)?;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(out)
}

/// What of a `Status` is kept: its code and its reason (a CamelCase word
/// the API server chooses). The message is not kept: it is the server's
/// text, never shown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    pub code: u32,
    pub reason: String,
}

pub fn status(bytes: &[u8]) -> Result<Status, WireError> {
    let mut out = Status::default();
    for field in Fields::new(bytes) {
        match field? {
            (4, v) => {
                out.reason = v
                    .str(4)?
                    .chars()
                    .filter(char::is_ascii_alphanumeric)
                    .take(64)
                    .collect()
            }
            (6, v) => out.code = v.varint(6)? as u32,
            _ => {}
        }
    }
    Ok(out)
}

/// `ListMeta.resourceVersion`.
pub fn list_resource_version(bytes: &[u8]) -> Result<String, WireError> {
    let mut rv = String::new();
    for field in Fields::new(bytes) {
        if let (2, v) = field? {
            rv = v.string(2)?;
        }
    }
    Ok(rv)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube_protobuf::wire::encode;

    pub fn enveloped(kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut type_meta = Vec::new();
        encode::bytes(&mut type_meta, 1, b"v1");
        encode::bytes(&mut type_meta, 2, kind.as_bytes());
        let mut out = MAGIC.to_vec();
        encode::bytes(&mut out, 1, &type_meta);
        encode::bytes(&mut out, 2, raw);
        encode::bytes(&mut out, 4, b"application/vnd.kubernetes.protobuf");
        out
    }

    #[test]
    fn an_envelope_names_its_kind_and_carries_its_message() {
        let bytes = enveloped("Pod", b"\x0a\x00");
        assert_eq!(
            unknown(&bytes),
            Ok(Unknown {
                kind: "Pod",
                raw: b"\x0a\x00"
            })
        );
        assert_eq!(unknown(b"{\"kind\":\"Pod\"}"), Err(EnvelopeError::NoMagic));
    }

    #[test]
    fn a_status_keeps_its_code_and_a_cleaned_reason_only() {
        let mut s = Vec::new();
        encode::bytes(&mut s, 3, b"too old resource version: 1 (2)");
        encode::bytes(&mut s, 4, b"Expired\x1b[31m");
        encode::uint(&mut s, 6, 410);
        assert_eq!(
            status(&s),
            Ok(Status {
                code: 410,
                reason: "Expired31m".into()
            })
        );
    }
}
