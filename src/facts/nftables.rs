//! The nftables userspace (libnftables and its `nft` program) of an image or
//! a host, and what its release means for set userdata: the netfilter
//! incident of 2026 (shared doc §8).
//!
//! libnftables >= 1.1.2 attaches a "key typeof" record to the userdata of
//! every named set or map declared with `type`; a reader without nftables
//! commit be737a1986bf ("src: netlink: fix crash when ops doesn't support
//! udata") that predates 1.1.2 segfaults on any command that builds its
//! cache (`list ruleset`, kube-proxy's `-f` batches). Only the library
//! decides (bookworm's `nft` with trixie's libnftables writes the record),
//! so these facts are the library's, and a package version wins over an
//! upstream string: distributions backport the fix without a new release.

use super::iptables::Evidence;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An nftables release. Four numbers: stable releases such as 1.0.6.1
/// (the fixed 1.0.6) have a fourth. Ordered numerically.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct NftVersion(pub [u16; 4]);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an nftables version: {0:?}")]
pub struct NftVersionError(pub String);

impl NftVersion {
    pub const fn new(major: u16, minor: u16, patch: u16, stable: u16) -> Self {
        Self([major, minor, patch, stable])
    }
}

impl FromStr for NftVersion {
    type Err = NftVersionError;

    /// Upstream ("1.0.6.1", "v1.1.3") or a package's version ("1.0.6-2+deb12u2",
    /// "1:1.0.9-7.el9", "1.1.3-r0"): the upstream part, two to four numbers.
    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let err = || NftVersionError(raw.chars().take(64).collect());
        let s = upstream_part(raw);
        let mut out = [0u16; 4];
        let mut n = 0;
        for part in s.split('.') {
            if n == 4 || part.is_empty() || part.len() > 5 {
                return Err(err());
            }
            out[n] = part.parse().map_err(|_| err())?;
            n += 1;
        }
        if n < 2 {
            return Err(err());
        }
        Ok(NftVersion(out))
    }
}

/// "1:1.0.6-2+deb12u2" -> "1.0.6": no epoch, no leading `v`, up to the
/// first character that is neither a digit nor a dot.
fn upstream_part(raw: &str) -> &str {
    let s = raw.trim();
    let s = s.split_once(':').map_or(s, |(epoch, rest)| {
        if epoch.bytes().all(|b| b.is_ascii_digit()) {
            rest
        } else {
            s
        }
    });
    let s = s.strip_prefix('v').unwrap_or(s);
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    s[..end].trim_end_matches('.')
}

impl fmt::Display for NftVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.0;
        if d == 0 {
            write!(f, "{a}.{b}.{c}")
        } else {
            write!(f, "{a}.{b}.{c}.{d}")
        }
    }
}

impl Serialize for NftVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NftVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for NftVersion {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NftVersion".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[0-9]+\\.[0-9]+(\\.[0-9]+(\\.[0-9]+)?)?$"
        })
    }
    fn inline_schema() -> bool {
        true
    }
}

/// The first libnftables that writes the "key typeof" record for `type` sets.
pub const FIRST_TYPE_USERDATA_WRITER: NftVersion = NftVersion::new(1, 1, 2, 0);
/// The first upstream release with the fix (be737a1986bf).
pub const FIRST_FIXED_RELEASE: NftVersion = NftVersion::new(1, 1, 4, 0);

/// How a reader meets set userdata it does not know.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, Debug, Serialize, Deserialize, JsonSchema, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub enum UserdataReader {
    /// Older than 1.1.2 without the fix: segfaults on the "key typeof"
    /// record that libnftables >= 1.1.2 writes.
    Crashes,
    /// 1.1.2 to 1.1.3 without the fix: parses today's records, would crash
    /// on a record a later release adds.
    Current,
    /// Carries the fix: skips userdata it cannot parse.
    Fixed,
}

impl UserdataReader {
    pub const fn as_str(self) -> &'static str {
        match self {
            UserdataReader::Crashes => "crashes",
            UserdataReader::Current => "current",
            UserdataReader::Fixed => "fixed",
        }
    }
}

impl fmt::Display for UserdataReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One build known to carry the fix although its upstream release predates
/// 1.1.4: a package version (or a shape of one) and where that is said.
pub struct FixedBuild {
    pub matches: fn(&str) -> bool,
    /// What it matches, for the docs.
    pub describes: &'static str,
    pub source: &'static str,
}

/// Builds patched by their vendors. Package versions win over the upstream
/// string: `1.0.6-2.1+k8s1` still prints "1.0.6". Adding one is adding a row.
pub const FIXED_BUILDS: &[FixedBuild] = &[
    FixedBuild {
        matches: |v| upstream_of(v).is_some_and(|u| u.0[..3] == [1, 0, 6] && u.0[3] >= 1),
        describes: "1.0.6.1 and later 1.0.6 stable releases",
        source: "nftables 1.0.6.1 (2025-09-02) carries be737a1986bf",
    },
    FixedBuild {
        matches: |v| v.starts_with("1.0.6-") && v.contains("+k8s"),
        describes: "Kubernetes' distroless-iptables `1.0.6-*+k8sN` (e.g. 1.0.6-2.1+k8s1)",
        source: "kubernetes/release distroless-iptables patch; kube-proxy moved to 1.0.6.1 in kubernetes#140405",
    },
    FixedBuild {
        matches: el9_fixed,
        describes: "RHEL 9 `1.0.9-N.el9*` with N >= 7",
        source: "RHEL 9 nftables-1.0.9-7.el9",
    },
    FixedBuild {
        matches: |v| v.starts_with("1.1.1-") && v.contains(".tigera"),
        describes: "Calico's `1.1.1-*.tigera` builds",
        source: "Calico's nftables 1.1.1-1.tigera (calico#11750)",
    },
];

fn upstream_of(v: &str) -> Option<NftVersion> {
    v.parse().ok()
}

/// `1.0.9-7.el9`, `1:1.0.9-8.el9_6`: release 7 or later of 1.0.9 on el9.
fn el9_fixed(v: &str) -> bool {
    let s = v.split_once(':').map_or(v, |(_, r)| r);
    let Some(release) = s.strip_prefix("1.0.9-") else {
        return false;
    };
    let digits: String = release.chars().take_while(char::is_ascii_digit).collect();
    let rest = &release[digits.len()..];
    rest.starts_with(".el9") && digits.parse::<u32>().is_ok_and(|n| n >= 7)
}

/// What a libnftables release (and, better, its package version) means for
/// set userdata: whether it writes the "key typeof" record, and how it reads
/// records it does not know. `override_fixed`: an operator's word that this
/// build carries the fix (a vendor backport this table does not know).
pub fn classify(
    version: Option<NftVersion>,
    package_version: Option<&str>,
    override_fixed: bool,
) -> Option<(bool, UserdataReader)> {
    let v = version.or_else(|| package_version.and_then(upstream_of))?;
    let writes = v >= FIRST_TYPE_USERDATA_WRITER;
    let fixed = override_fixed
        || v >= FIRST_FIXED_RELEASE
        || FIXED_BUILDS.iter().any(|b| {
            (b.matches)(&v.to_string()) || package_version.is_some_and(|p| (b.matches)(p))
        });
    let reader = if fixed {
        UserdataReader::Fixed
    } else if writes {
        UserdataReader::Current
    } else {
        UserdataReader::Crashes
    };
    Some((writes, reader))
}

/// The nftables userspace in an image or on a host.
#[derive(Clone, PartialEq, Eq, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NftablesFacts {
    /// libnftables' upstream release ("1.1.3"); None when nothing says.
    pub version: Option<NftVersion>,
    /// The package database's version string ("1.1.3-1", "1.0.6-2.1+k8s1").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub package_version: Option<String>,
    /// Writes the "key typeof" userdata on `type` sets (libnftables >= 1.1.2)
    /// that unfixed older readers crash on; None when the release is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_type_userdata: Option<bool>,
    /// How it reads set userdata it does not know; None when the release is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub userdata_reader: Option<UserdataReader>,
    /// An `nft` program is there (a library alone is used by programs that link it).
    #[serde(default)]
    pub program: bool,
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// Disagreements between sources (the package wins: it carries patches).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
}

impl NftablesFacts {
    /// The upstream release: the version, else the package version's upstream part.
    pub fn release(&self) -> Option<NftVersion> {
        self.version
            .or_else(|| self.package_version.as_deref().and_then(upstream_of))
    }

    /// Set `writes_type_userdata` and `userdata_reader` from the version and
    /// package version (see [`classify`]).
    pub fn classified(mut self, override_fixed: bool) -> Self {
        let c = classify(
            self.version,
            self.package_version.as_deref(),
            override_fixed,
        );
        self.writes_type_userdata = c.map(|(w, _)| w);
        self.userdata_reader = c.map(|(_, r)| r);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> NftVersion {
        s.parse().unwrap()
    }

    #[test]
    fn parses_upstream_stable_and_package_versions() {
        for (raw, want) in [
            ("1.0.6", [1, 0, 6, 0]),
            ("1.0.6.1", [1, 0, 6, 1]),
            ("v1.1.3", [1, 1, 3, 0]),
            ("1.0.6-2+deb12u2", [1, 0, 6, 0]),
            ("0.9.8-3.1+deb11u2", [0, 9, 8, 0]),
            ("1:1.0.9-7.el9", [1, 0, 9, 0]),
            ("1.1.1-1.tigera", [1, 1, 1, 0]),
            ("1.1.3-r0", [1, 1, 3, 0]),
            ("1.0", [1, 0, 0, 0]),
        ] {
            assert_eq!(v(raw).0, want, "{raw}");
        }
        for bad in ["", "1", "abc", "1.x", "1.2.3.4.5", "99999999.1", ".1.2"] {
            assert!(bad.parse::<NftVersion>().is_err(), "{bad}");
        }
        assert_eq!(v("1.0.6.1").to_string(), "1.0.6.1");
        assert_eq!(v("1.1.3-1").to_string(), "1.1.3");
        assert!(v("1.0.6.1") > v("1.0.6") && v("1.0.6.1") < v("1.0.9"));
        assert!(v("1.1.10") > v("1.1.9"));
    }

    #[test]
    fn debian_releases_of_the_matrix() {
        // §8's matrix: 0.9.8 and 1.0.6 crash on what 1.1.3 and 1.1.7 write.
        let c = |p: &str| classify(None, Some(p), false).unwrap();
        assert_eq!(c("0.9.8-3.1+deb11u2"), (false, UserdataReader::Crashes));
        assert_eq!(c("1.0.6-2+deb12u2"), (false, UserdataReader::Crashes));
        assert_eq!(c("1.1.3-1"), (true, UserdataReader::Current));
        assert_eq!(c("1.1.7-1"), (true, UserdataReader::Fixed));
    }

    #[test]
    fn patched_builds_win_over_their_upstream_string() {
        let c = |ver: Option<&str>, p: Option<&str>| classify(ver.map(v), p, false).map(|(_, r)| r);
        // Kubernetes' distroless build prints "1.0.6".
        assert_eq!(
            c(Some("1.0.6"), Some("1.0.6-2.1+k8s1")),
            Some(UserdataReader::Fixed)
        );
        assert_eq!(c(Some("1.0.6.1"), None), Some(UserdataReader::Fixed));
        assert_eq!(c(None, Some("1.0.9-7.el9")), Some(UserdataReader::Fixed));
        assert_eq!(
            c(None, Some("1:1.0.9-10.el9_6")),
            Some(UserdataReader::Fixed)
        );
        assert_eq!(c(None, Some("1.0.9-6.el9")), Some(UserdataReader::Crashes));
        assert_eq!(c(None, Some("1.0.9-7.el8")), Some(UserdataReader::Crashes));
        assert_eq!(c(None, Some("1.1.1-1.tigera")), Some(UserdataReader::Fixed));
        assert_eq!(c(None, Some("1.1.1-1")), Some(UserdataReader::Crashes));
        assert_eq!(c(None, None), None);
        // An operator's override for a backport the table does not know.
        assert_eq!(
            classify(None, Some("1.0.6-2+deb12u9"), true),
            Some((false, UserdataReader::Fixed))
        );
    }

    #[test]
    fn facts_serialize_in_camel_case() {
        let f = NftablesFacts {
            version: Some(v("1.1.3")),
            package_version: Some("1.1.3-1".into()),
            program: true,
            ..Default::default()
        }
        .classified(false);
        let j = serde_json::to_value(&f).unwrap();
        assert_eq!(j["version"], "1.1.3");
        assert_eq!(j["writesTypeUserdata"], true);
        assert_eq!(j["userdataReader"], "current");
        let back: NftablesFacts = serde_json::from_value(j).unwrap();
        assert_eq!(back, f);
    }
}
