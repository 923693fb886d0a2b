//! The serving certificate: parsed from PEM, kept behind a swappable Arc
//! that rustls asks on every handshake, reloaded from files when their
//! directory changes (Secret volumes swap a `..data` symlink, so the files
//! themselves are never written in place: watch the directory).

use super::metrics::Metrics;
use notify::{RecursiveMode, Watcher};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("certificate PEM holds no certificate")]
    NoCertificate,
    #[error("key PEM holds no private key")]
    NoKey,
    #[error("malformed PEM: {0}")]
    Pem(std::io::Error),
    #[error("unsupported private key: {0}")]
    Key(rustls::Error),
    #[error("certificate and key do not belong together: {0}")]
    Mismatch(rustls::Error),
    #[error("watching {path}: {error}")]
    Watch { path: String, error: notify::Error },
}

/// A parsed certificate chain + key, with its expiry (if readable).
#[derive(Clone, Debug)]
pub struct Loaded {
    pub key: Arc<CertifiedKey>,
    pub not_after: Option<SystemTime>,
}

/// Parse PEM; refuses a key that does not match the leaf certificate (a
/// half-rotated pair on disk is rejected and the old pair kept).
pub fn load_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Loaded, TlsError> {
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<_, _>>()
        .map_err(TlsError::Pem)?;
    let leaf = certs.first().ok_or(TlsError::NoCertificate)?;
    let not_after = not_after(leaf);
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(TlsError::Pem)?
        .ok_or(TlsError::NoKey)?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(TlsError::Key)?;
    let ck = CertifiedKey::new(certs, signer);
    ck.keys_match().map_err(TlsError::Mismatch)?;
    Ok(Loaded {
        key: Arc::new(ck),
        not_after,
    })
}

/// The leaf's notAfter.
pub fn not_after(der: &CertificateDer<'_>) -> Option<SystemTime> {
    let (_, cert) = x509_parser::parse_x509_certificate(der.as_ref()).ok()?;
    let secs = cert.validity().not_after.timestamp();
    u64::try_from(secs)
        .ok()
        .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s))
}

pub fn load_files(cert: &Path, key: &Path) -> Result<Loaded, TlsError> {
    let read = |p: &Path| {
        std::fs::read(p).map_err(|error| TlsError::Read {
            path: p.display().to_string(),
            error,
        })
    };
    load_pem(&read(cert)?, &read(key)?)
}

/// What rustls asks for a certificate; swapping it affects new handshakes only.
#[derive(Default)]
pub struct CertStore {
    current: RwLock<Option<Arc<CertifiedKey>>>,
    metrics: Option<Arc<Metrics>>,
}

impl std::fmt::Debug for CertStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertStore")
            .field("loaded", &self.is_loaded())
            .finish()
    }
}

impl CertStore {
    pub fn new(metrics: Option<Arc<Metrics>>) -> Arc<Self> {
        Arc::new(CertStore {
            current: RwLock::new(None),
            metrics,
        })
    }

    pub fn set(&self, loaded: Loaded) {
        if let Some(m) = &self.metrics {
            m.cert_reloads.inc();
            if let Some(t) = loaded.not_after {
                let left = match t.duration_since(SystemTime::now()) {
                    Ok(d) => d.as_secs_f64(),
                    Err(e) => -e.duration().as_secs_f64(),
                };
                m.cert_expiry.set(left);
            }
        }
        match self.current.write() {
            Ok(mut g) => *g = Some(loaded.key),
            Err(p) => *p.into_inner() = Some(loaded.key),
        }
    }

    pub fn get(&self) -> Option<Arc<CertifiedKey>> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    pub fn is_loaded(&self) -> bool {
        self.get().is_some()
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.get()
    }
}

/// TLS 1.2 and 1.3 with ring; HTTP/2 and HTTP/1.1 via ALPN.
pub fn server_config(store: Arc<CertStore>) -> Arc<rustls::ServerConfig> {
    server_config_with_clients(store, None)
}

/// [`server_config`], and with `clients` a client certificate is asked for
/// and, when one is presented, verified by it (a bad one ends the
/// handshake). Sessions are then never resumed, so every connection's
/// certificate is checked against the CA of the moment.
pub fn server_config_with_clients(
    store: Arc<CertStore>,
    clients: Option<Arc<dyn ClientCertVerifier>>,
) -> Arc<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .expect("ring supports TLS 1.2 and 1.3");
    let verifies = clients.is_some();
    let mut cfg = match clients {
        Some(v) => builder.with_client_cert_verifier(v),
        None => builder.with_no_client_auth(),
    }
    .with_cert_resolver(store);
    if verifies {
        cfg.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        cfg.send_tls13_tickets = 0;
    }
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(cfg)
}

/// Keeps the watcher alive; dropping it stops reloading.
pub struct FileWatch {
    _watcher: notify::RecommendedWatcher,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reload `cert`/`key` whenever anything in their directories changes (and
/// every `poll` as a safety net). Failed reloads keep the previous pair.
pub fn watch_files(
    cert: PathBuf,
    key: PathBuf,
    store: Arc<CertStore>,
    poll: Duration,
) -> Result<FileWatch, TlsError> {
    let mut last: Option<(Vec<u8>, Vec<u8>)> = None;
    let paths = [cert.clone(), key.clone()];
    watch_paths(&paths, poll, move || {
        let (Ok(c), Ok(k)) = (std::fs::read(&cert), std::fs::read(&key)) else {
            return;
        };
        if last.as_ref().is_some_and(|(lc, lk)| *lc == c && *lk == k) {
            return;
        }
        match load_pem(&c, &k) {
            Ok(l) => {
                tracing::info!(cert = %cert.display(), "serving certificate reloaded");
                store.set(l);
                last = Some((c, k));
            }
            Err(e) => {
                tracing::warn!(error = %e, "certificate reload failed; keeping the current one")
            }
        }
    })
}

/// Run `reload` whenever anything in the directories of `paths` changes
/// (and every `poll` as a safety net), once a burst of events has settled.
/// `reload` reads the files itself and keeps what it had on failure.
pub fn watch_paths(
    paths: &[PathBuf],
    poll: Duration,
    mut reload: impl FnMut() + Send + 'static,
) -> Result<FileWatch, TlsError> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(16);
    let first = paths
        .first()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let mut watcher = notify::recommended_watcher(move |_res: notify::Result<notify::Event>| {
        let _ = tx.try_send(());
    })
    .map_err(|error| TlsError::Watch { path: first, error })?;
    let mut dirs: Vec<PathBuf> = paths
        .iter()
        .map(|p| match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        })
        .collect();
    dirs.dedup();
    for d in &dirs {
        watcher
            .watch(d, RecursiveMode::NonRecursive)
            .map_err(|error| TlsError::Watch {
                path: d.display().to_string(),
                error,
            })?;
    }
    let task = tokio::spawn(async move {
        loop {
            let woke = tokio::time::timeout(poll, rx.recv()).await;
            if matches!(woke, Ok(None)) {
                return;
            }
            // Let a burst of events (symlink swap, two files) settle.
            tokio::time::sleep(Duration::from_millis(50)).await;
            while rx.try_recv().is_ok() {}
            reload();
        }
    });
    Ok(FileWatch {
        _watcher: watcher,
        task,
    })
}
