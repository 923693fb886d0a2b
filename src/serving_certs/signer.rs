//! The controller's signer for [`super::SIGNER_NAME`]: it keeps the CA in
//! the install-provided Secret (made on first use), publishes its
//! certificate in the install-provided ConfigMap for scrapers, and answers
//! each pending request: approved and signed if [`super::judge`] grants
//! it, denied with the reason otherwise. Only the leader runs it.

use super::ca::{self, Ca, CaPem};
use super::judge::{Denial, Request, judge};
use super::{CA_CERT_KEY, CA_CONFIGMAP, CA_KEY_KEY, CA_SECRET, NODE_NAME_EXTRA, SIGNER_NAME};
use crate::object_names::is_dns_subdomain;
use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

/// Who may ask, and where the CA lives.
#[derive(Clone, Debug)]
pub struct SignerConfig {
    pub namespace: String,
    /// `system:serviceaccount:<namespace>:nfguard-reporter`.
    pub reporter_user: String,
}

impl SignerConfig {
    pub fn new(namespace: &str, reporter_service_account: &str) -> Self {
        SignerConfig {
            namespace: namespace.to_string(),
            reporter_user: format!("system:serviceaccount:{namespace}:{reporter_service_account}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SignerError {
    #[error(
        "Secret {0}/{CA_SECRET}: {1} (the install provides it empty: manifests/controller.yaml)"
    )]
    Secret(String, String),
    #[error("ConfigMap {0}/{CA_CONFIGMAP}: {1} (the install provides it empty)")]
    ConfigMap(String, String),
    #[error("the CA in Secret {0}/{CA_SECRET} is unusable: {1}")]
    Ca(String, String),
    #[error("{0}")]
    Api(String),
}

fn text(
    data: &Option<std::collections::BTreeMap<String, ByteString>>,
    key: &str,
) -> Option<String> {
    let bytes = data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone())
        .ok()
        .filter(|s| !s.is_empty())
}

/// The CA from its Secret, made and stored there first if the Secret is
/// empty (a concurrent writer's CA wins: the update is conditional), and
/// its certificate in the ConfigMap.
pub async fn ensure_ca(client: &kube::Client, cfg: &SignerConfig) -> Result<Ca, SignerError> {
    let ns = &cfg.namespace;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let pem = loop {
        let secret = secrets
            .get(CA_SECRET)
            .await
            .map_err(|e| SignerError::Secret(ns.clone(), e.to_string()))?;
        if let (Some(cert), Some(key)) = (
            text(&secret.data, CA_CERT_KEY),
            text(&secret.data, CA_KEY_KEY),
        ) {
            break CaPem { cert, key };
        }
        let made = ca::generate(ns, SystemTime::now())
            .map_err(|e| SignerError::Ca(ns.clone(), e.to_string()))?;
        let mut data = secret.data.clone().unwrap_or_default();
        data.insert(
            CA_CERT_KEY.into(),
            ByteString(made.cert.clone().into_bytes()),
        );
        data.insert(CA_KEY_KEY.into(), ByteString(made.key.clone().into_bytes()));
        let filled = Secret {
            data: Some(data),
            string_data: None,
            ..secret
        };
        match secrets
            .replace(CA_SECRET, &PostParams::default(), &filled)
            .await
        {
            Ok(_) => {
                tracing::info!(namespace = %ns, secret = CA_SECRET, "made the reporter-metrics CA");
                break made;
            }
            // Another replica filled it first: read theirs.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(SignerError::Secret(ns.clone(), e.to_string())),
        }
    };
    let ca = Ca::load(&pem).map_err(|e| SignerError::Ca(ns.clone(), e.to_string()))?;
    publish(client, ns, &ca.cert_pem).await?;
    Ok(ca)
}

/// The CA certificate into the ConfigMap, if it is not there already.
async fn publish(client: &kube::Client, ns: &str, cert: &str) -> Result<(), SignerError> {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let err = |e: kube::Error| SignerError::ConfigMap(ns.to_string(), e.to_string());
    let map = maps.get(CA_CONFIGMAP).await.map_err(err)?;
    if map
        .data
        .as_ref()
        .and_then(|d| d.get(CA_CERT_KEY))
        .map(String::as_str)
        == Some(cert)
    {
        return Ok(());
    }
    let mut data = map.data.clone().unwrap_or_default();
    data.insert(CA_CERT_KEY.into(), cert.to_string());
    let updated = ConfigMap {
        data: Some(data),
        ..map
    };
    maps.replace(CA_CONFIGMAP, &PostParams::default(), &updated)
        .await
        .map_err(err)?;
    tracing::info!(namespace = %ns, configmap = CA_CONFIGMAP, "published the reporter-metrics CA");
    Ok(())
}

/// The addresses of node `name` (None: no such node).
async fn node_addresses(
    client: &kube::Client,
    name: &str,
) -> Result<Option<Vec<IpAddr>>, SignerError> {
    if !is_dns_subdomain(name) {
        return Ok(None);
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default().fields(&format!("metadata.name={name}")))
        .await
        .map_err(|e| SignerError::Api(format!("listing node {name}: {e}")))?;
    Ok(list.items.first().map(|n| {
        n.status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
            .filter_map(|a| a.address.parse().ok())
            .collect()
    }))
}

fn has_condition(csr: &CertificateSigningRequest, kinds: &[&str]) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| kinds.contains(&c.type_.as_str()))
}

fn condition(type_: &str, reason: &str, message: &str) -> serde_json::Value {
    let now = k8s_openapi::jiff::Timestamp::now();
    json!({"status": {"conditions": [{
        "type": type_, "status": "True", "reason": reason, "message": message,
        "lastUpdateTime": now, "lastTransitionTime": now,
    }]}})
}

/// What happened to one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Signed,
    Denied(String),
    /// Approved by someone else; nfguard does not sign it.
    Failed(String),
    /// Already answered (a certificate, or denied or failed).
    Settled,
}

/// Answers one request for nfguard's signer. The watch's copy may be older
/// than the request (the event of our own approval arrives after we signed),
/// so the request is read afresh first (a list by name: no `get` needed).
pub async fn answer(
    client: &kube::Client,
    ca: &Ca,
    cfg: &SignerConfig,
    seen: &CertificateSigningRequest,
) -> Result<Outcome, SignerError> {
    let name = seen.metadata.name.clone().unwrap_or_default();
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let fresh = csrs
        .list(&ListParams::default().fields(&format!("metadata.name={name}")))
        .await
        .map_err(|e| SignerError::Api(format!("reading {name}: {e}")))?;
    let Some(csr) = fresh.items.into_iter().next() else {
        return Ok(Outcome::Settled);
    };
    let csr = &csr;
    let spec = &csr.spec;
    let issued = csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty());
    if spec.signer_name != SIGNER_NAME || issued || has_condition(csr, &["Denied", "Failed"]) {
        return Ok(Outcome::Settled);
    }
    let node_extra = spec.extra.as_ref().and_then(|e| e.get(NODE_NAME_EXTRA));
    let node = node_extra
        .and_then(|n| n.first())
        .cloned()
        .unwrap_or_default();
    let addresses = node_addresses(client, &node).await?;
    let usages = spec.usages.clone().unwrap_or_default();
    let req = Request {
        pem: &spec.request.0,
        username: spec.username.as_deref().unwrap_or_default(),
        node_extra: node_extra.map(Vec::as_slice),
        usages: &usages,
        expiration_seconds: spec.expiration_seconds,
    };
    let pp = PatchParams::default();
    let name = name.as_str();
    let api =
        |what: &'static str| move |e: kube::Error| SignerError::Api(format!("{what} {name}: {e}"));
    match judge(&req, &cfg.reporter_user, |n| {
        (n == node).then(|| addresses.clone()).flatten()
    }) {
        Ok(grant) => {
            if !has_condition(csr, &["Approved"]) {
                let why = format!(
                    "the reporter on node {} asks for its own addresses",
                    grant.node
                );
                csrs.patch_approval(
                    name,
                    &pp,
                    &Patch::Merge(condition("Approved", "NfguardReporterNode", &why)),
                )
                .await
                .map_err(api("approving"))?;
            }
            let cert = ca
                .issue(&grant, SystemTime::now())
                .map_err(|e| SignerError::Ca(cfg.namespace.clone(), e.to_string()))?;
            let body = json!({"status": {"certificate": ByteString(cert.into_bytes())}});
            csrs.patch_status(name, &pp, &Patch::Merge(body))
                .await
                .map_err(api("signing"))?;
            tracing::info!(csr = name, node = %grant.node, ips = ?grant.ips, "signed a reporter-metrics certificate");
            Ok(Outcome::Signed)
        }
        Err(denial) => {
            let why = denial.to_string();
            let (kind, patch) = if has_condition(csr, &["Approved"]) {
                // Approved by someone else: nfguard still does not sign it.
                ("Failed", condition("Failed", reason(&denial), &why))
            } else {
                ("Denied", condition("Denied", reason(&denial), &why))
            };
            let done = match kind {
                "Failed" => csrs.patch_status(name, &pp, &Patch::Merge(patch)).await,
                _ => csrs.patch_approval(name, &pp, &Patch::Merge(patch)).await,
            };
            done.map_err(api("denying"))?;
            tracing::warn!(csr = name, requester = ?spec.username, %why, "denied a reporter-metrics certificate request");
            Ok(match kind {
                "Failed" => Outcome::Failed(why),
                _ => Outcome::Denied(why),
            })
        }
    }
}

fn reason(d: &Denial) -> &'static str {
    match d {
        Denial::NotTheReporter(_) | Denial::NoNode => "NotTheReporter",
        Denial::UnknownNode(_) | Denial::NotTheNodesAddress(..) | Denial::NotTheNodesName(..) => {
            "NotTheNodes"
        }
        _ => "Malformed",
    }
}

/// Runs until `stop`: the CA first (retried), then every request for
/// nfguard's signer as the watch sees it; `answered` hears each answer
/// (the controller counts them).
pub async fn run_signer(
    client: kube::Client,
    cfg: SignerConfig,
    answered: impl Fn(&Outcome),
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut wait = Duration::from_secs(2);
    let ca = loop {
        match ensure_ca(&client, &cfg).await {
            Ok(ca) => break ca,
            Err(e) => {
                tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "reporter-metrics CA not ready")
            }
        }
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(Duration::from_secs(60));
    };
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("spec.signerName={SIGNER_NAME}"));
    let stream = watcher(csrs, config).applied_objects().default_backoff();
    futures::pin_mut!(stream);
    loop {
        let next = tokio::select! {
            _ = &mut stop => return,
            n = stream.next() => n,
        };
        match next {
            None => return,
            Some(Ok(csr)) => match answer(&client, &ca, &cfg, &csr).await {
                Ok(outcome) => answered(&outcome),
                Err(e) => {
                    tracing::warn!(error = %e, "answering a reporter-metrics certificate request failed")
                }
            },
            Some(Err(e)) => tracing::warn!(error = %e, "watching certificate requests (retrying)"),
        }
    }
}
