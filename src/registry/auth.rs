//! Credentials from a docker config.json (`auths.<host>.auth` or
//! `username`/`password`). Credential helpers (`credsStore`, `credHelpers`)
//! are not supported: they run external programs.

use super::{Credentials, RegistryError};
use base64::Engine;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(serde::Deserialize, Default)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
}

#[derive(serde::Deserialize, Default)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// Registry credentials read from one docker config file.
#[derive(Debug, Default, Clone)]
pub struct DockerAuths {
    by_host: BTreeMap<String, Credentials>,
    helpers: Vec<String>,
}

/// `https://index.docker.io/v1/` -> `docker.io`, `host:5000/` -> `host:5000`.
fn normalize_host(key: &str) -> String {
    let k = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = k.split('/').next().unwrap_or(k).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".into(),
        _ => host,
    }
}

/// Where to look: the explicit path (a file, or a directory holding
/// config.json), else `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
/// `env` is passed in so tests do not depend on the process environment.
pub fn config_path(
    explicit: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
) -> Option<(PathBuf, bool)> {
    if let Some(p) = explicit {
        let p = if p.is_dir() {
            p.join("config.json")
        } else {
            p.to_path_buf()
        };
        return Some((p, true));
    }
    if let Some(dir) = env("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some((PathBuf::from(dir).join("config.json"), false));
    }
    env("HOME").map(|h| (PathBuf::from(h).join(".docker/config.json"), false))
}

impl DockerAuths {
    /// Load `path`; a missing file is an error only when it was named explicitly.
    pub fn load(path: &Path, required: bool) -> Result<Self, RegistryError> {
        let err = |detail: String| RegistryError::DockerConfig {
            path: path.display().to_string(),
            detail,
        };
        const MAX: u64 = 4 << 20;
        match crate::capped::read_file_capped(path, MAX) {
            Ok(Some(text)) => Self::parse(&text).map_err(err),
            Ok(None) => Err(err("larger than 4 MiB".into())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !required => Ok(Self::default()),
            Err(e) => Err(err(e.to_string())),
        }
    }

    pub fn parse(text: &[u8]) -> Result<Self, String> {
        // Never serde's own message: it would quote values (passwords).
        let cfg: DockerConfig =
            serde_json::from_slice(text).map_err(|e| super::error::json_problem(&e))?;
        let mut by_host = BTreeMap::new();
        for (key, entry) in cfg.auths {
            let creds = if let Some(auth) = entry.auth.filter(|a| !a.is_empty()) {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    // Not the decoder's message: it names a byte of the secret.
                    .map_err(|_| format!("auths.{key}.auth is not base64"))?;
                let raw =
                    String::from_utf8(raw).map_err(|_| format!("auths.{key}.auth is not UTF-8"))?;
                let (u, p) = raw
                    .split_once(':')
                    .ok_or_else(|| format!("auths.{key}.auth is not user:password"))?;
                Credentials::Basic {
                    username: u.into(),
                    password: p.into(),
                }
            } else if let (Some(u), Some(p)) = (entry.username, entry.password) {
                Credentials::Basic {
                    username: u,
                    password: p,
                }
            } else {
                continue;
            };
            by_host.insert(normalize_host(&key), creds);
        }
        let mut helpers: Vec<String> = cfg.cred_helpers.keys().map(|k| normalize_host(k)).collect();
        if cfg.creds_store.is_some() {
            helpers.push("*".into());
        }
        Ok(Self { by_host, helpers })
    }

    /// Credentials for `registry` (`host[:port]`), if the config has some.
    pub fn for_registry(&self, registry: &str) -> Option<Credentials> {
        let host = normalize_host(registry);
        let found = self.by_host.get(&host).cloned();
        if found.is_none() && self.helpers.iter().any(|h| h == "*" || *h == host) {
            tracing::warn!(
                registry,
                "docker config names a credential helper for this registry; credential helpers are not supported, pulling anonymously"
            );
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_auth_and_username_password() {
        let b64 = base64::engine::general_purpose::STANDARD.encode("alice:s3cret:x");
        let text = format!(
            r#"{{"auths":{{"127.0.0.1:5000":{{"auth":"{b64}"}},
               "https://index.docker.io/v1/":{{"username":"bob","password":"pw"}},
               "empty.example":{{}}}},"credHelpers":{{"gcr.example":"gcloud"}}}}"#
        );
        let a = DockerAuths::parse(text.as_bytes()).unwrap();
        assert_eq!(
            a.for_registry("127.0.0.1:5000"),
            Some(Credentials::Basic {
                username: "alice".into(),
                password: "s3cret:x".into()
            })
        );
        assert_eq!(
            a.for_registry("index.docker.io"),
            Some(Credentials::Basic {
                username: "bob".into(),
                password: "pw".into()
            })
        );
        assert_eq!(a.for_registry("gcr.example"), None);
        assert_eq!(a.for_registry("empty.example"), None);
    }

    #[test]
    fn a_malformed_config_is_described_without_its_values() {
        let e = DockerAuths::parse(br#"{"auths":{"h":{"auth":["s3cret"]}}}"#).unwrap_err();
        assert!(e.starts_with("unexpected structure at line 1"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn bad_base64_is_a_clear_error() {
        let e = DockerAuths::parse(br#"{"auths":{"h":{"auth":"!!!"}}}"#).unwrap_err();
        assert!(e.contains("auths.h.auth is not base64"), "{e}");
    }

    #[test]
    fn path_precedence() {
        let env = |k: &str| match k {
            "DOCKER_CONFIG" => Some("/cfg".to_string()),
            "HOME" => Some("/home/u".to_string()),
            _ => None,
        };
        assert_eq!(
            config_path(None, env),
            Some((PathBuf::from("/cfg/config.json"), false))
        );
        assert_eq!(
            config_path(None, |k| (k == "HOME").then(|| "/home/u".to_string())),
            Some((PathBuf::from("/home/u/.docker/config.json"), false))
        );
        assert_eq!(
            config_path(Some(Path::new("/x/c.json")), env),
            Some((PathBuf::from("/x/c.json"), true))
        );
    }
}
