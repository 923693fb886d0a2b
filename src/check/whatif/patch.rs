//! `--assume PATCH`: a small, typed change of a node profile's facts, parsed
//! strictly (an unknown key or a bad value is an error naming it).
//!
//! | patch | meaning |
//! |---|---|
//! | `iptables=1.8.11` / `iptables=1.8.11/nft` | the host's iptables release (and default backend: `nft`, `legacy`) |
//! | `kubeProxyMode=nftables` | kube-proxy runs in this mode (`iptables`, `nftables`, `ipvs`) |
//! | `kernel.ipTables=absent` | the kernel's legacy xtables (ip_tables, ip6_tables): `absent`, `module`, `builtin`, `loaded` |
//! | `kernel.nfTables=module` | the kernel's nf_tables, same states |
//! | `nftables=1.1.3-1` | the host's libnftables: a package version or an upstream release (`1.0.6.1`) |
//! | `os=debian-13` | what that release ships (presets below) |

use crate::api::{KubeProxyMode, ModuleState};
use crate::facts::{Backend, Version};

/// A patch longer than this is no patch.
pub const MAX_PATCH_BYTES: usize = 256;
/// More patches than this are refused (each is one fact).
pub const MAX_PATCHES: usize = 32;

/// Keys `--assume` knows, for error messages.
pub const KEYS: &str = "iptables, nftables, kubeProxyMode, kernel.ipTables, kernel.nfTables, os";

/// OS presets: the iptables release and the nftables package each ships,
/// from the Debian packages the project measured (shared netfilter-compat
/// doc: bullseye 1.8.7 / 0.9.8, bookworm 1.8.9 / 1.0.6, trixie 1.8.11 /
/// 1.1.3; forky as its archive served it in December 2026: 1.8.13 / 1.1.7).
/// The backend is left as it is: an upgrade keeps the host's
/// `update-alternatives` choice.
const PRESETS: &[(&str, &str, Version, &str)] = &[
    (
        "debian-11",
        "bullseye",
        Version::new(1, 8, 7),
        "0.9.8-3.1+deb11u2",
    ),
    (
        "debian-12",
        "bookworm",
        Version::new(1, 8, 9),
        "1.0.6-2+deb12u2",
    ),
    ("debian-13", "trixie", Version::new(1, 8, 11), "1.1.3-1"),
    ("debian-14", "forky", Version::new(1, 8, 13), "1.1.7-3"),
];

/// The kernel module families a patch can change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelPart {
    /// Legacy xtables: ip_tables and ip6_tables.
    IpTables,
    NfTables,
}

/// One fact a patch sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fact {
    Iptables {
        version: Version,
        /// None: the host keeps its backend.
        backend: Option<Backend>,
    },
    KubeProxyMode(KubeProxyMode),
    Kernel(KernelPart, ModuleState),
    /// The host's libnftables, as a package version ("1.1.3-1") or an
    /// upstream release ("1.0.6.1").
    Nftables(String),
    /// An OS release: its iptables release and nftables package.
    Os {
        iptables: Version,
        nftables: &'static str,
    },
}

/// One `--assume` value: the text as given and the facts it sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Patch {
    pub text: String,
    pub fact: Fact,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("--assume {0:?}: expected KEY=VALUE (keys: {KEYS})")]
    NoValue(String),
    #[error("--assume: unknown key {key:?} (keys: {KEYS})")]
    UnknownKey { key: String },
    #[error("--assume {key}={value}: expected {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: String,
    },
    #[error("--assume: a patch is at most {MAX_PATCH_BYTES} bytes")]
    TooLong,
    #[error("--assume: at most {MAX_PATCHES} patches")]
    TooMany,
}

fn bad(key: &str, value: &str, expected: impl Into<String>) -> PatchError {
    PatchError::BadValue {
        key: key.into(),
        value: value.into(),
        expected: expected.into(),
    }
}

fn module_state(key: &str, v: &str) -> Result<ModuleState, PatchError> {
    Ok(match v {
        "absent" => ModuleState::Absent,
        "module" => ModuleState::Module,
        "builtin" => ModuleState::Builtin,
        "loaded" => ModuleState::Loaded,
        _ => return Err(bad(key, v, "absent, module, builtin or loaded")),
    })
}

fn iptables(key: &str, v: &str) -> Result<Fact, PatchError> {
    let expected = "VERSION[/BACKEND], e.g. 1.8.11 or 1.8.11/nft (backend nft or legacy)";
    let (version, backend) = match v.split_once('/') {
        Some((ver, b)) => (ver, Some(b)),
        None => (v, None),
    };
    let version: Version = version.parse().map_err(|_| bad(key, v, expected))?;
    let backend = match backend {
        None => None,
        Some("nft") => Some(Backend::Nft),
        Some("legacy") => Some(Backend::Legacy),
        Some(_) => return Err(bad(key, v, expected)),
    };
    Ok(Fact::Iptables { version, backend })
}

impl std::str::FromStr for Patch {
    type Err = PatchError;

    fn from_str(s: &str) -> Result<Self, PatchError> {
        if s.len() > MAX_PATCH_BYTES {
            return Err(PatchError::TooLong);
        }
        let s = s.trim();
        let (key, v) = s
            .split_once('=')
            .ok_or_else(|| PatchError::NoValue(s.into()))?;
        let (key, v) = (key.trim(), v.trim());
        let fact = match key {
            "iptables" => iptables(key, v)?,
            "kubeProxyMode" => Fact::KubeProxyMode(match v {
                "iptables" => KubeProxyMode::Iptables,
                "nftables" => KubeProxyMode::Nftables,
                "ipvs" => KubeProxyMode::Ipvs,
                _ => return Err(bad(key, v, "iptables, nftables or ipvs")),
            }),
            "kernel.ipTables" => Fact::Kernel(KernelPart::IpTables, module_state(key, v)?),
            "kernel.nfTables" => Fact::Kernel(KernelPart::NfTables, module_state(key, v)?),
            "nftables" => {
                let ok = v.parse::<crate::facts::NftVersion>().is_ok()
                    && v.len() <= 64
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b".:+~-_".contains(&b));
                if !ok {
                    return Err(bad(
                        key,
                        v,
                        "a package version or release, e.g. 1.1.3-1 or 1.0.6.1",
                    ));
                }
                Fact::Nftables(v.to_string())
            }
            "os" => {
                let (_, _, iptables, nftables) = PRESETS
                    .iter()
                    .find(|(id, name, _, _)| *id == v || *name == v)
                    .ok_or_else(|| {
                        let known: Vec<String> = PRESETS
                            .iter()
                            .map(|(id, name, _, _)| format!("{id} ({name})"))
                            .collect();
                        bad(key, v, known.join(", "))
                    })?;
                Fact::Os {
                    iptables: *iptables,
                    nftables,
                }
            }
            _ => return Err(PatchError::UnknownKey { key: key.into() }),
        };
        Ok(Patch {
            text: format!("{key}={v}"),
            fact,
        })
    }
}

/// Parse every `--assume` value (bounded in number).
pub fn parse_all(values: &[String]) -> Result<Vec<Patch>, PatchError> {
    if values.len() > MAX_PATCHES {
        return Err(PatchError::TooMany);
    }
    values.iter().map(|v| v.parse()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> Fact {
        s.parse::<Patch>().unwrap().fact
    }

    #[test]
    fn each_key_parses_to_its_fact() {
        assert_eq!(
            one("iptables=1.8.11/nft"),
            Fact::Iptables {
                version: Version::new(1, 8, 11),
                backend: Some(Backend::Nft)
            }
        );
        assert_eq!(
            one("iptables=1.8.9"),
            Fact::Iptables {
                version: Version::new(1, 8, 9),
                backend: None
            }
        );
        assert_eq!(
            one("iptables=1.8.7/legacy"),
            Fact::Iptables {
                version: Version::new(1, 8, 7),
                backend: Some(Backend::Legacy)
            }
        );
        assert_eq!(
            one("kubeProxyMode=nftables"),
            Fact::KubeProxyMode(KubeProxyMode::Nftables)
        );
        assert_eq!(
            one("kernel.ipTables=absent"),
            Fact::Kernel(KernelPart::IpTables, ModuleState::Absent)
        );
        assert_eq!(
            one("kernel.nfTables=builtin"),
            Fact::Kernel(KernelPart::NfTables, ModuleState::Builtin)
        );
        // The preset and its code name: trixie ships 1.8.11 and nftables
        // 1.1.3-1, backend untouched.
        for s in ["os=debian-13", "os=trixie"] {
            assert_eq!(
                one(s),
                Fact::Os {
                    iptables: Version::new(1, 8, 11),
                    nftables: "1.1.3-1"
                }
            );
        }
        assert_eq!(
            one("os=forky"),
            Fact::Os {
                iptables: Version::new(1, 8, 13),
                nftables: "1.1.7-3"
            }
        );
        assert_eq!(one("nftables=1.0.6.1"), Fact::Nftables("1.0.6.1".into()));
        assert_eq!(
            one("nftables=1.0.6-2.1+k8s1"),
            Fact::Nftables("1.0.6-2.1+k8s1".into())
        );
        assert_eq!(
            "os=trixie".parse::<Patch>().unwrap().text,
            "os=trixie",
            "the text names the patch as given"
        );
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let err = |s: &str| s.parse::<Patch>().unwrap_err().to_string();
        let e = err("iptable=1.8.11");
        assert!(
            e.contains("unknown key \"iptable\"") && e.contains("kubeProxyMode"),
            "{e}"
        );
        let e = err("iptables=1.8.11/wrapper");
        assert!(
            e.contains("iptables=1.8.11/wrapper") && e.contains("nft or legacy"),
            "{e}"
        );
        let e = err("iptables=latest");
        assert!(e.contains("iptables=latest"), "{e}");
        let e = err("kubeProxyMode=userspace");
        assert!(e.contains("iptables, nftables or ipvs"), "{e}");
        let e = err("kernel.ipTables=gone");
        assert!(e.contains("absent, module, builtin or loaded"), "{e}");
        let e = err("os=debian-15");
        assert!(e.contains("debian-14 (forky)"), "{e}");
        let e = err("nftables=newest");
        assert!(e.contains("1.0.6.1"), "{e}");
        let e = err("nftables=1.0.6 2");
        assert!(e.contains("nftables=1.0.6 2"), "{e}");
        let e = err("iptables");
        assert!(e.contains("expected KEY=VALUE"), "{e}");
        assert_eq!(
            "x=".repeat(MAX_PATCH_BYTES).parse::<Patch>().unwrap_err(),
            PatchError::TooLong
        );
        let many = vec!["iptables=1.8.9".to_string(); MAX_PATCHES + 1];
        assert_eq!(parse_all(&many).unwrap_err(), PatchError::TooMany);
    }
}
