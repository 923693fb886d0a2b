//! iptables release numbers. Distro package versions ("1.8.7-1", "1:1.8.9-2",
//! "1.8.10-r3", "v1.8.11") are reduced to the upstream release, because
//! compatibility is a property of the upstream encoding, not of the packaging.

use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Version {
    pub major: u16,
    pub minor: u16,
    pub patch: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an iptables version: {0:?}")]
pub struct VersionError(pub String);

impl Version {
    pub const fn new(major: u16, minor: u16, patch: u16) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }
}

impl FromStr for Version {
    type Err = VersionError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let err = || VersionError(raw.to_string());
        let s = raw.trim();
        // Debian epoch ("1:1.8.9-2") and a leading "v" ("v1.8.11").
        let s = s.rsplit_once(':').map_or(s, |(_, rest)| rest);
        let s = s.strip_prefix('v').unwrap_or(s);
        // Upstream part ends at the first character that is neither digit nor dot
        // ("-1", "-r3", "+deb12u1", "~bpo").
        let end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let mut parts = s[..end].split('.');
        let mut next = |required: bool| -> Result<u16, VersionError> {
            match parts.next() {
                Some(p) if !p.is_empty() => p.parse().map_err(|_| err()),
                None if !required => Ok(0),
                _ => Err(err()),
            }
        };
        let v = Version {
            major: next(true)?,
            minor: next(true)?,
            patch: next(false)?,
        };
        if parts.next().is_some() {
            return Err(err());
        }
        Ok(v)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl serde::Serialize for Version {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Version {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Version {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Version".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "pattern": "^[0-9]+\\.[0-9]+(\\.[0-9]+)?$" })
    }
    fn inline_schema() -> bool {
        true
    }
}

/// Releases with the broken `-C` that duplicates rules endlessly (kubernetes#82361).
pub fn is_known_bad(v: Version) -> bool {
    v >= Version::new(1, 8, 0) && v <= Version::new(1, 8, 3)
}

/// First release that writes native nftables expressions (mark, ports, tcp flags, NFLOG).
pub const FIRST_NATIVE_WRITER: Version = Version::new(1, 8, 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_upstream_and_distro_versions() {
        for (raw, want) in [
            ("1.8.7", Version::new(1, 8, 7)),
            ("1.8.7-1", Version::new(1, 8, 7)),
            ("1:1.8.9-2", Version::new(1, 8, 9)),
            ("1.8.10-r3", Version::new(1, 8, 10)),
            ("v1.8.11", Version::new(1, 8, 11)),
            ("1.8.9-2+deb12u1", Version::new(1, 8, 9)),
            ("1.8", Version::new(1, 8, 0)),
        ] {
            assert_eq!(raw.parse::<Version>().unwrap(), want, "{raw}");
        }
    }

    #[test]
    fn rejects_garbage() {
        for raw in ["", "abc", "1", "1.x.3", "1.8.7.1", "..", "99999999.1.1"] {
            assert!(raw.parse::<Version>().is_err(), "{raw}");
        }
    }

    #[test]
    fn orders_numerically_not_lexically() {
        let v = |s: &str| s.parse::<Version>().unwrap();
        assert!(v("1.8.10") > v("1.8.9"));
        assert!(v("1.8.7") < FIRST_NATIVE_WRITER);
        assert!(is_known_bad(v("1.8.2")) && !is_known_bad(v("1.8.4")));
    }

    #[test]
    fn serde_round_trip_is_a_string() {
        let v = Version::new(1, 8, 11);
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"1.8.11\"");
        assert_eq!(serde_json::from_str::<Version>("\"1.8.11-2\"").unwrap(), v);
    }
}
