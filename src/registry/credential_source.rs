//! Where the credentials for one image come from: the docker config file
//! (loaded once, read again only when the file changes), a pod's pull
//! secrets, or a chain of them (the pod's first, then the file). Every
//! caller (webhook, controller, `check`, `inspect image`) asks one of these,
//! then passes the answer to the inspector, whose caches key what they hold
//! by it: the credential that read an answer is part of its key.

use super::auth::{self, DockerAuths};
use super::{Credentials, RegistryConfig, RegistryError};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Credentials to read one image with.
pub trait CredentialSource: Send + Sync {
    /// The credentials for `image`'s registry; None: read anonymously.
    fn for_image(&self, image: &str) -> Result<Option<Credentials>, RegistryError>;
}

/// No credentials for anything.
pub struct Anonymous;

impl CredentialSource for Anonymous {
    fn for_image(&self, _image: &str) -> Result<Option<Credentials>, RegistryError> {
        Ok(None)
    }
}

/// A function of the image (tests, fixed tables).
impl<F> CredentialSource for F
where
    F: Fn(&str) -> Option<Credentials> + Send + Sync,
{
    fn for_image(&self, image: &str) -> Result<Option<Credentials>, RegistryError> {
        Ok(self(image))
    }
}

/// The first source that has credentials for the image wins; an error
/// (a broken docker config) stops the chain, as the file alone would.
pub struct Chain<'a>(pub Vec<&'a dyn CredentialSource>);

impl CredentialSource for Chain<'_> {
    fn for_image(&self, image: &str) -> Result<Option<Credentials>, RegistryError> {
        for source in &self.0 {
            if let Some(c) = source.for_image(image)? {
                return Ok(Some(c));
            }
        }
        Ok(None)
    }
}

/// `127.0.0.1:5000/app:v1` -> `127.0.0.1:5000`; `nginx` -> `docker.io`.
pub fn registry_host(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_ascii_lowercase()
        }
        _ => "docker.io".to_string(),
    }
}

/// Identifies one version of a file: a rewrite in place changes its size,
/// mtime or ctime; an atomic replace (a rename, kubelet's symlink swap of a
/// mounted Secret) changes its inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        dev: m.dev(),
        ino: m.ino(),
        len: m.len(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

struct Loaded {
    /// None: the file was absent (and not required).
    stamp: Option<Stamp>,
    auths: Arc<DockerAuths>,
}

/// The docker config file: read at the first look-up, then only again when
/// its stamp changes (a stat per look-up, no read or parse). A missing file
/// is an error only when it was named explicitly.
pub struct DockerConfigFile {
    /// None: no file to look for (no `--docker-config`, `DOCKER_CONFIG` or `HOME`).
    path: Option<(PathBuf, bool)>,
    last: Mutex<Option<Loaded>>,
    reads: AtomicU64,
}

impl DockerConfigFile {
    /// `explicit` (a file, or a directory holding config.json), else
    /// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
    pub fn new(explicit: Option<&Path>) -> Self {
        Self::from_path(auth::config_path(explicit, |k| std::env::var(k).ok()))
    }

    /// The file `config.docker_config` names (or the default places).
    pub fn for_config(config: &RegistryConfig) -> Self {
        Self::new(config.docker_config.as_deref())
    }

    /// Exactly `path`; `required`: a missing file is an error.
    pub fn at(path: impl Into<PathBuf>, required: bool) -> Self {
        Self::from_path(Some((path.into(), required)))
    }

    fn from_path(path: Option<(PathBuf, bool)>) -> Self {
        DockerConfigFile {
            path,
            last: Mutex::new(None),
            reads: AtomicU64::new(0),
        }
    }

    /// How many times the file was read and parsed (not served from memory).
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// The file's credentials as they are now.
    pub fn current(&self) -> Result<Arc<DockerAuths>, RegistryError> {
        let Some((path, required)) = &self.path else {
            return Ok(Arc::default());
        };
        let now = stamp(path);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(loaded) = last.as_ref()
            && loaded.stamp == now
            && (now.is_some() || !required)
        {
            return Ok(loaded.auths.clone());
        }
        self.reads.fetch_add(1, Ordering::Relaxed);
        let auths = Arc::new(DockerAuths::load(path, *required)?);
        *last = Some(Loaded {
            stamp: now,
            auths: auths.clone(),
        });
        Ok(auths)
    }
}

impl CredentialSource for DockerConfigFile {
    fn for_image(&self, image: &str) -> Result<Option<Credentials>, RegistryError> {
        Ok(self.current()?.for_registry(&registry_host(image)))
    }
}

/// One pod's pull secrets, parsed: the first that has credentials for an
/// image's registry answers.
#[derive(Default, Debug, Clone)]
pub struct PullSecrets {
    auths: Vec<DockerAuths>,
}

/// A Secret's docker config larger than this is refused (the API server
/// caps a whole Secret at 1 MiB).
pub const MAX_PULL_SECRET_BYTES: usize = 1 << 20;

impl PullSecrets {
    pub fn new(auths: Vec<DockerAuths>) -> Self {
        PullSecrets { auths }
    }

    pub fn push(&mut self, auths: DockerAuths) {
        self.auths.push(auths);
    }

    /// Credentials for the registry `image` lives in.
    pub fn credentials_for(&self, image: &str) -> Option<Credentials> {
        let host = registry_host(image);
        self.auths.iter().find_map(|a| a.for_registry(&host))
    }

    pub fn is_empty(&self) -> bool {
        self.auths.is_empty()
    }

    /// Parse one Secret's data: `.dockerconfigjson` (kubernetes.io/dockerconfigjson),
    /// else the legacy `.dockercfg` (the `auths` map itself). None: neither key.
    /// Errors name the key and the JSON problem, never a value.
    pub fn parse_secret_data(
        data: &std::collections::BTreeMap<String, k8s_openapi::ByteString>,
    ) -> Result<Option<DockerAuths>, String> {
        let too_big = |key: &str| format!("{key} is larger than {MAX_PULL_SECRET_BYTES} bytes");
        if let Some(b) = data.get(".dockerconfigjson") {
            if b.0.len() > MAX_PULL_SECRET_BYTES {
                return Err(too_big(".dockerconfigjson"));
            }
            return DockerAuths::parse(&b.0).map(Some);
        }
        if let Some(b) = data.get(".dockercfg") {
            if b.0.len() > MAX_PULL_SECRET_BYTES {
                return Err(too_big(".dockercfg"));
            }
            let inner: serde_json::Value = serde_json::from_slice(&b.0)
                .map_err(|e| format!(".dockercfg: {}", super::error::json_problem(&e)))?;
            let wrapped = serde_json::json!({ "auths": inner });
            return DockerAuths::parse(wrapped.to_string().as_bytes()).map(Some);
        }
        Ok(None)
    }
}

impl CredentialSource for PullSecrets {
    fn for_image(&self, image: &str) -> Result<Option<Credentials>, RegistryError> {
        Ok(self.credentials_for(image))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn config(user: &str) -> String {
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:pw"));
        format!(r#"{{"auths":{{"reg.example":{{"auth":"{auth}"}}}}}}"#)
    }

    fn user(source: &dyn CredentialSource) -> Option<String> {
        match source.for_image("reg.example/app:1").unwrap() {
            Some(Credentials::Basic { username, .. }) => Some(username),
            _ => None,
        }
    }

    /// A required docker config in a new directory granting `user`.
    fn config_file(user: &str) -> (tempfile::TempDir, PathBuf, DockerConfigFile) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, config(user)).unwrap();
        let file = DockerConfigFile::at(&path, true);
        (dir, path, file)
    }

    #[test]
    fn the_docker_config_is_read_once_and_again_only_when_it_changes() {
        let (dir, path, file) = config_file("ann");
        for _ in 0..5 {
            assert_eq!(user(&file).as_deref(), Some("ann"));
        }
        assert_eq!(file.reads(), 1, "unchanged file: read once");
        // Rotated in place, same size (ctime/mtime change).
        std::fs::write(&path, config("bob")).unwrap();
        assert_eq!(user(&file).as_deref(), Some("bob"));
        // Replaced atomically by a rename (a new inode), as kubelet does.
        let next = dir.path().join("next.json");
        std::fs::write(&next, config("carol")).unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert_eq!(user(&file).as_deref(), Some("carol"));
        assert_eq!(user(&file).as_deref(), Some("carol"));
        assert_eq!(file.reads(), 3);
        // Gone: named explicitly, so an error...
        std::fs::remove_file(&path).unwrap();
        assert!(file.for_image("reg.example/app:1").is_err());
        // ...and only the default place may be absent, read once as empty.
        let default = DockerConfigFile::at(&path, false);
        assert_eq!(user(&default), None);
        assert_eq!(user(&default), None);
        assert_eq!(default.reads(), 1);
    }

    #[test]
    fn a_broken_docker_config_is_described_without_its_secrets() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, r#"{"auths":{"h":{"auth":"!s3cret!"}}}"#).unwrap();
        let e = DockerConfigFile::at(&path, true)
            .for_image("h/app")
            .unwrap_err()
            .to_string();
        assert!(e.contains("auths.h.auth is not base64"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }

    fn secret(key: &str, value: &str) -> BTreeMap<String, ByteString> {
        BTreeMap::from([(key.to_string(), ByteString(value.as_bytes().to_vec()))])
    }

    #[test]
    fn pull_secrets_in_both_formats_bounded() {
        let b64 = base64::engine::general_purpose::STANDARD.encode("u:p");
        let json = format!(r#"{{"auths":{{"127.0.0.1:5000":{{"auth":"{b64}"}}}}}}"#);
        let legacy = format!(r#"{{"reg.example":{{"auth":"{b64}"}}}}"#);
        let a = PullSecrets::parse_secret_data(&secret(".dockerconfigjson", &json)).unwrap();
        let b = PullSecrets::parse_secret_data(&secret(".dockercfg", &legacy)).unwrap();
        let secrets = PullSecrets::new(vec![a.unwrap(), b.unwrap()]);
        let basic = Some(Credentials::Basic {
            username: "u".into(),
            password: "p".into(),
        });
        assert_eq!(secrets.credentials_for("127.0.0.1:5000/app:v1"), basic);
        assert_eq!(secrets.credentials_for("reg.example/x@sha256:00"), basic);
        assert_eq!(secrets.credentials_for("other.example/app"), None);
        assert!(
            PullSecrets::parse_secret_data(&secret("token", "x"))
                .unwrap()
                .is_none()
        );
        let huge = "x".repeat(MAX_PULL_SECRET_BYTES + 1);
        let e = PullSecrets::parse_secret_data(&secret(".dockercfg", &huge)).unwrap_err();
        assert!(e.contains("larger than"), "{e}");
        let e =
            PullSecrets::parse_secret_data(&secret(".dockercfg", r#"{"h": s3cret}"#)).unwrap_err();
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn the_chain_asks_the_pods_secrets_first_then_the_file() {
        let (_dir, _, file) = config_file("file");
        let b64 = base64::engine::general_purpose::STANDARD.encode("pod:pw");
        let json = format!(r#"{{"auths":{{"reg.example":{{"auth":"{b64}"}}}}}}"#);
        let pod = PullSecrets::new(vec![
            PullSecrets::parse_secret_data(&secret(".dockerconfigjson", &json))
                .unwrap()
                .unwrap(),
        ]);
        assert_eq!(user(&Chain(vec![&pod, &file])).as_deref(), Some("pod"));
        let none = PullSecrets::default();
        assert_eq!(user(&Chain(vec![&none, &file])).as_deref(), Some("file"));
        assert_eq!(user(&Chain(vec![&none, &Anonymous])), None);
    }

    #[test]
    fn registry_hosts() {
        assert_eq!(registry_host("127.0.0.1:5000/app:v1"), "127.0.0.1:5000");
        assert_eq!(registry_host("nginx"), "docker.io");
        assert_eq!(registry_host("library/nginx:1"), "docker.io");
        assert_eq!(registry_host("localhost/x"), "localhost");
        assert_eq!(registry_host("Reg.Example/x/y@sha256:ab"), "reg.example");
    }
}
