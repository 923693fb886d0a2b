//! A serving certificate for each reporter's /metrics that scrapers can
//! verify, through the Kubernetes CertificateSigningRequest API with a
//! signer of nfguard's own, as kubelets get their serving certificates:
//! the reporter makes a key (kept in memory) and asks for a certificate for
//! its Node's addresses ([`request`]); the controller approves only a
//! request made with a reporter's pod-bound token for the node that token
//! names, for addresses that Node has, and signs it with a CA it keeps in
//! an install-provided Secret and publishes in a ConfigMap for scrapers
//! ([`signer`]). The judgement is pure ([`judge`]); the CA in [`ca`].

pub mod ca;
pub mod judge;
pub mod request;
pub mod signer;

/// The CSR `signerName` nfguard's controller serves.
pub const SIGNER_NAME: &str = "nfguard.io/reporter-metrics";
/// The Secret (install-provided, filled by the controller) holding the CA.
pub const CA_SECRET: &str = "nfguard-reporter-metrics-ca";
/// The ConfigMap (install-provided, filled by the controller) publishing
/// the CA certificate for scrapers (`ca.crt`).
pub const CA_CONFIGMAP: &str = "nfguard-reporter-metrics-ca";
/// The key of the CA certificate in both.
pub const CA_CERT_KEY: &str = "ca.crt";
/// The key of the CA's private key in the Secret.
pub const CA_KEY_KEY: &str = "ca.key";
/// The user-info extra the API server sets from a pod-bound token: the
/// node the requesting pod runs on.
pub const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";
