//! `os/arch[/variant]`: which manifest of a multi-arch image a node runs.
//! Parsed once where it enters (node labels, flags, a pod's nodeSelector),
//! then passed around typed.

use std::collections::BTreeMap;

/// `os/arch[/variant]`, e.g. "linux/amd64", "linux/arm64/v8".
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

/// A platform that is not `os/arch[/variant]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("platform must be os/arch[/variant], got {0:?}")]
pub struct PlatformError(pub String);

pub const OS_LABEL: &str = "kubernetes.io/os";
pub const ARCH_LABEL: &str = "kubernetes.io/arch";

impl Platform {
    /// Used when neither a Node's labels nor a pod's nodeSelector name one.
    pub fn linux_amd64() -> Self {
        Self::linux("amd64")
    }

    fn linux(architecture: &str) -> Self {
        Platform {
            os: "linux".into(),
            architecture: architecture.into(),
            variant: None,
        }
    }

    /// The platform of the machine nfguard runs on (Go/OCI architecture names).
    pub fn host() -> Self {
        Self::linux(match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            "x86" => "386",
            "powerpc64" => "ppc64le",
            other => other,
        })
    }

    /// From Kubernetes' well-known `kubernetes.io/os` and `kubernetes.io/arch`
    /// labels (a Node's, or a pod's nodeSelector); `fallback` when the
    /// architecture is not named.
    pub fn from_labels(labels: &BTreeMap<String, String>, fallback: &Platform) -> Platform {
        match (labels.get(OS_LABEL), labels.get(ARCH_LABEL)) {
            (Some(os), Some(arch)) => Platform {
                os: os.clone(),
                architecture: arch.clone(),
                variant: None,
            },
            (None, Some(arch)) => Self::linux(arch),
            _ => fallback.clone(),
        }
    }

    /// Whether `labels` name an architecture.
    pub fn named_in(labels: &BTreeMap<String, String>) -> bool {
        labels.contains_key(ARCH_LABEL)
    }
}

impl Default for Platform {
    fn default() -> Self {
        Self::linux_amd64()
    }
}

impl std::str::FromStr for Platform {
    type Err = PlatformError;
    fn from_str(s: &str) -> Result<Self, PlatformError> {
        let mut it = s.split('/');
        match (it.next(), it.next(), it.next(), it.next()) {
            (Some(os), Some(arch), variant, None) if !os.is_empty() && !arch.is_empty() => {
                Ok(Platform {
                    os: os.into(),
                    architecture: arch.into(),
                    variant: variant.filter(|v| !v.is_empty()).map(Into::into),
                })
            }
            _ => Err(PlatformError(s.to_string())),
        }
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_and_prints_round_trip() {
        for s in ["linux/amd64", "linux/arm64/v8", "windows/amd64"] {
            assert_eq!(s.parse::<Platform>().unwrap().to_string(), s);
        }
        for bad in ["", "linux", "/amd64", "linux/", "a/b/c/d"] {
            let e = bad.parse::<Platform>().unwrap_err();
            assert!(e.to_string().contains("os/arch"), "{bad}: {e}");
        }
        assert_eq!("linux/arm/".parse::<Platform>().unwrap().variant, None);
    }

    #[test]
    fn from_labels_prefers_the_labels_then_the_fallback() {
        let fallback: Platform = "linux/s390x".parse().unwrap();
        let p = |l: &[(&str, &str)]| Platform::from_labels(&labels(l), &fallback).to_string();
        assert_eq!(
            p(&[
                ("kubernetes.io/os", "linux"),
                ("kubernetes.io/arch", "arm64")
            ]),
            "linux/arm64"
        );
        assert_eq!(p(&[("kubernetes.io/arch", "ppc64le")]), "linux/ppc64le");
        assert_eq!(p(&[("kubernetes.io/os", "linux")]), "linux/s390x");
        assert_eq!(p(&[]), "linux/s390x");
    }
}
