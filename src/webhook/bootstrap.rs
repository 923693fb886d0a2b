//! `--self-signed`: a CA and a serving certificate generated with rcgen,
//! kept in a Secret shared by every replica, the CA put into the caBundle of
//! nfguard's ValidatingWebhookConfiguration, rotated before expiry.
//!
//! The install provides the Secret, empty (as it provides the controller's
//! Lease): the webhook may only read and update that one Secret, never
//! create one, so a compromised webhook cannot mint Secrets (a
//! ServiceAccount token Secret among them) in its namespace. A missing
//! Secret is an error that names the fix.
//!
//! Races: replicas that find the Secret empty or due all try to fill it,
//! each with the resourceVersion it read; the losers get 409 Conflict, read
//! the winner's and serve that, so every replica serves a certificate the
//! one caBundle trusts. The caBundle carries the new CA and the previous one
//! until the latter expires, so replicas still on the old certificate stay
//! trusted until they pick up the new Secret.
//!
//! Upgrades: an earlier nfguard's webhook made the Secret
//! `nfguard-webhook-tls` itself. An empty Secret takes over its certificate
//! (read with the cluster-wide `get secrets`), so old and new replicas serve
//! under one CA and the caBundle each writes trusts both. Where it cannot be
//! read, filling an empty Secret keeps the CA the caBundle trusts now.
//!
//! Only the Secret's data is written: its type, labels and annotations stay
//! the install's (Helm's ownership annotations among them).

use super::tls::{self, Loaded, TlsError};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("{what} {name}: {error}")]
    Api {
        what: &'static str,
        name: String,
        error: kube::Error,
    },
    #[error("Secret {name} holds an unusable certificate: {error}")]
    BadSecret { name: String, error: TlsError },
    #[error(
        "Secret {namespace}/{name} not found: the install provides it (empty) and the webhook fills it; \
         apply nfguard's manifests or chart again, or create it with \
         `kubectl -n {namespace} create secret generic {name}`"
    )]
    Missing { namespace: String, name: String },
    #[error("Secret {0} vanished while resolving an update race")]
    Vanished(String),
    #[error("building the caBundle patch: {0}")]
    Patch(serde_json::Error),
    #[error("ValidatingWebhookConfiguration {0} has no webhooks")]
    NoWebhooks(String),
}

#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    pub secret_name: String,
    pub service_name: String,
    pub webhook_config_name: String,
    pub ca_validity: Duration,
    pub cert_validity: Duration,
    /// Rotate when less than this is left.
    pub rotate_before: Duration,
    /// The Secret an earlier nfguard's webhook made itself: its certificate
    /// is taken over into an empty `secret_name`, so that during an upgrade
    /// old and new replicas serve under one CA and neither's caBundle write
    /// leaves the other untrusted. Read with the cluster-wide `get secrets`
    /// the webhook has for pull secrets; unreadable or absent, a new
    /// certificate is made.
    pub earlier_secret_name: Option<String>,
}

/// The Secret the webhook created itself before the install provided one.
pub const EARLIER_SECRET_NAME: &str = "nfguard-webhook-tls";

impl Config {
    /// `svc`, `svc.ns`, `svc.ns.svc`, `svc.ns.svc.cluster.local`.
    pub fn dns_names(&self) -> Vec<String> {
        let (s, n) = (&self.service_name, &self.namespace);
        vec![
            s.clone(),
            format!("{s}.{n}"),
            format!("{s}.{n}.svc"),
            format!("{s}.{n}.svc.cluster.local"),
        ]
    }
}

/// PEMs as stored in the Secret (`ca.crt`, `tls.crt`, `tls.key`).
#[derive(Clone, Debug, PartialEq)]
pub struct Material {
    /// The current CA first, then any previous CA still valid.
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

fn to_offset(t: SystemTime) -> time::OffsetDateTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A fresh CA and a serving certificate for the Service's DNS names.
/// `previous_ca` (still valid) is appended to the bundle.
pub fn generate(
    cfg: &Config,
    now: SystemTime,
    previous_ca: Option<&str>,
) -> Result<Material, rcgen::Error> {
    let start = to_offset(now - Duration::from_secs(300));
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("nfguard-webhook-ca {}", cfg.namespace),
    );
    ca.distinguished_name = dn;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca.not_before = start;
    ca.not_after = to_offset(now + cfg.ca_validity);
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let leaf_key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(cfg.dns_names())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("{}.{}.svc", cfg.service_name, cfg.namespace),
    );
    leaf.distinguished_name = dn;
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    leaf.not_before = start;
    leaf.not_after = to_offset(now + cfg.cert_validity);
    let cert = leaf.signed_by(&leaf_key, &issuer)?;
    let mut ca_pem = ca_cert.pem();
    if let Some(prev) = previous_ca {
        ca_pem.push_str(prev);
    }
    Ok(Material {
        ca_pem,
        cert_pem: cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}

impl Material {
    pub fn load(&self) -> Result<Loaded, TlsError> {
        tls::load_pem(self.cert_pem.as_bytes(), self.key_pem.as_bytes())
    }

    fn from_secret(s: &Secret) -> Option<Material> {
        let d = s.data.as_ref()?;
        let get = |k: &str| d.get(k).and_then(|b| String::from_utf8(b.0.clone()).ok());
        Some(Material {
            ca_pem: get("ca.crt")?,
            cert_pem: get("tls.crt")?,
            key_pem: get("tls.key")?,
        })
    }

    /// `existing` with this material as its data; everything else (type,
    /// labels, annotations, resourceVersion) as the install and the API
    /// server left it.
    fn written_into(&self, existing: &Secret) -> Secret {
        let data: BTreeMap<String, ByteString> = [
            ("ca.crt", &self.ca_pem),
            ("tls.crt", &self.cert_pem),
            ("tls.key", &self.key_pem),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.clone().into_bytes())))
        .collect();
        Secret {
            data: Some(data),
            string_data: None,
            ..existing.clone()
        }
    }
}

/// The first CA of a bundle, if still valid at `now` (kept through a rotation).
fn current_ca_if_valid(ca_pem: &str, now: SystemTime) -> Option<String> {
    let der = rustls_pemfile::certs(&mut ca_pem.as_bytes()).next()?.ok()?;
    let not_after = tls::not_after(&der)?;
    (not_after > now).then(|| {
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der.as_ref());
        let mut s = String::from("-----BEGIN CERTIFICATE-----\n");
        for chunk in b64.as_bytes().chunks(64) {
            s.push_str(&String::from_utf8_lossy(chunk));
            s.push('\n');
        }
        s.push_str("-----END CERTIFICATE-----\n");
        s
    })
}

/// When `m` must be rotated: leaf expiry minus `rotate_before` (None: unreadable, now).
pub fn rotate_at(cfg: &Config, loaded: &Loaded) -> Option<SystemTime> {
    loaded.not_after.map(|t| t - cfg.rotate_before)
}

fn api_err<'a>(what: &'static str, name: &'a str) -> impl Fn(kube::Error) -> BootstrapError + 'a {
    move |error| BootstrapError::Api {
        what,
        name: name.to_string(),
        error,
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// The Secret's material, filled or rotated as needed. `trusted_ca` is the
/// first CA of the caBundle as read (kept in the bundle when an empty
/// Secret is filled). `generate_fn` is passed in so tests control what is
/// generated.
pub async fn ensure_secret(
    api: &Api<Secret>,
    cfg: &Config,
    trusted_ca: Option<&str>,
    now: SystemTime,
    generate_fn: &(dyn Fn(Option<&str>) -> Result<Material, rcgen::Error> + Sync),
) -> Result<(Material, Loaded), BootstrapError> {
    let name = cfg.secret_name.as_str();
    let existing = api
        .get_opt(name)
        .await
        .map_err(api_err("reading Secret", name))?
        .ok_or_else(|| BootstrapError::Missing {
            namespace: cfg.namespace.clone(),
            name: name.into(),
        })?;
    let mut current = Material::from_secret(&existing).and_then(|m| m.load().ok().map(|l| (m, l)));
    let mut taken_over = false;
    if current.is_none()
        && let Some(earlier) = &cfg.earlier_secret_name
    {
        current = read_earlier(api, earlier).await;
        taken_over = current.is_some();
    }
    if let Some((m, l)) = &current
        && rotate_at(cfg, l).is_some_and(|t| t > now)
    {
        if !taken_over {
            return Ok((m.clone(), l.clone()));
        }
        return match api
            .replace(name, &PostParams::default(), &m.written_into(&existing))
            .await
        {
            Ok(_) => {
                tracing::info!(
                    secret = name,
                    earlier = cfg.earlier_secret_name.as_deref(),
                    "took over the certificate of the earlier nfguard's Secret"
                );
                Ok((m.clone(), l.clone()))
            }
            Err(e) if is_status(&e, 409) => read_back(api, name).await,
            Err(e) => Err(api_err("updating Secret", name)(e)),
        };
    }
    // Empty, unusable or due: fill it, guarded by the resourceVersion read.
    let prev_ca = match &current {
        Some((m, _)) => current_ca_if_valid(&m.ca_pem, now),
        None => trusted_ca.and_then(|ca| current_ca_if_valid(ca, now)),
    };
    let m = generate_fn(prev_ca.as_deref())?;
    match api
        .replace(name, &PostParams::default(), &m.written_into(&existing))
        .await
    {
        Ok(_) => {
            let what = if current.is_some() {
                "rotated"
            } else {
                "filled"
            };
            tracing::info!(secret = name, "{what} the webhook certificate Secret");
            let l = m.load().map_err(|error| BootstrapError::BadSecret {
                name: name.into(),
                error,
            })?;
            Ok((m, l))
        }
        Err(e) if is_status(&e, 409) => {
            tracing::info!(
                secret = name,
                "another replica wrote the Secret first; using its certificate"
            );
            read_back(api, name).await
        }
        Err(e) => Err(api_err("updating Secret", name)(e)),
    }
}

/// The usable material of the earlier nfguard's Secret, if it can be read.
async fn read_earlier(api: &Api<Secret>, name: &str) -> Option<(Material, Loaded)> {
    match api.get_opt(name).await {
        Ok(found) => {
            let m = Material::from_secret(&found?)?;
            m.load().ok().map(|l| (m, l))
        }
        Err(error) => {
            tracing::debug!(secret = name, %error, "the earlier Secret is unreadable; making a new certificate");
            None
        }
    }
}

async fn read_back(api: &Api<Secret>, name: &str) -> Result<(Material, Loaded), BootstrapError> {
    let s = api
        .get_opt(name)
        .await
        .map_err(api_err("reading Secret", name))?
        .ok_or_else(|| BootstrapError::Vanished(name.into()))?;
    let m = Material::from_secret(&s).ok_or_else(|| BootstrapError::BadSecret {
        name: name.into(),
        error: TlsError::NoCertificate,
    })?;
    let l = m.load().map_err(|error| BootstrapError::BadSecret {
        name: name.into(),
        error,
    })?;
    Ok((m, l))
}

/// Put `ca_pem` into every webhook's clientConfig.caBundle of `vwc`, the
/// ValidatingWebhookConfiguration as just read (a JSON patch; nothing sent
/// when current).
pub async fn patch_ca_bundle(
    api: &Api<ValidatingWebhookConfiguration>,
    vwc: &ValidatingWebhookConfiguration,
    name: &str,
    ca_pem: &str,
) -> Result<bool, BootstrapError> {
    let hooks = vwc.webhooks.as_deref().unwrap_or_default();
    if hooks.is_empty() {
        return Err(BootstrapError::NoWebhooks(name.into()));
    }
    let want = ByteString(ca_pem.as_bytes().to_vec());
    let ops: Vec<serde_json::Value> = hooks
        .iter()
        .enumerate()
        .filter(|(_, h)| h.client_config.ca_bundle.as_ref() != Some(&want))
        .map(|(i, _)| {
            serde_json::json!({
                "op": "add",
                "path": format!("/webhooks/{i}/clientConfig/caBundle"),
                "value": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, ca_pem),
            })
        })
        .collect();
    if ops.is_empty() {
        return Ok(false);
    }
    let patch: json_patch::Patch =
        serde_json::from_value(serde_json::Value::Array(ops)).map_err(BootstrapError::Patch)?;
    api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .map_err(api_err("patching ValidatingWebhookConfiguration", name))?;
    tracing::info!(webhook_configuration = name, "caBundle updated");
    Ok(true)
}

/// Bootstrap once: read the webhook configuration (its caBundle), the
/// Secret (fill/race/rotate), then patch the caBundle.
pub async fn bootstrap_once(
    client: &kube::Client,
    cfg: &Config,
    now: SystemTime,
) -> Result<(Material, Loaded), BootstrapError> {
    let name = cfg.webhook_config_name.as_str();
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let vwc = vwcs
        .get(name)
        .await
        .map_err(api_err("reading ValidatingWebhookConfiguration", name))?;
    let trusted = trusted_ca(&vwc);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let gen_cfg = cfg.clone();
    let (m, l) = ensure_secret(&secrets, cfg, trusted.as_deref(), now, &move |prev| {
        generate(&gen_cfg, now, prev)
    })
    .await?;
    patch_ca_bundle(&vwcs, &vwc, name, &m.ca_pem).await?;
    Ok((m, l))
}

/// The caBundle of the configuration's first webhook, as PEM text.
fn trusted_ca(vwc: &ValidatingWebhookConfiguration) -> Option<String> {
    let hook = vwc.webhooks.as_deref()?.first()?;
    let bundle = hook.client_config.ca_bundle.as_ref()?;
    String::from_utf8(bundle.0.clone()).ok()
}
