//! `nfguard webhook`: flags, wiring and the long-running tasks.

use super::admission::Judge;
use super::bootstrap;
use super::client_auth;
use super::decisions::DecisionCache;
use super::facts::{self, Facts};
use super::images::{CacheTtl, ImageCache, LookupLimits};
use super::intake::{self, BodyBudget, Intake};
use super::metrics::Metrics;
use super::server::{self, AppState};
use super::tls::{self, CertStore};
use crate::check::load;
use crate::compat::evaluate::DEFAULT_PLATFORM;
use crate::judgement::pull_secrets::{
    PodPullSecrets, SERVICE_ACCOUNT_NAMES_ENTRIES, SERVICE_ACCOUNT_NAMES_TTL,
};
use crate::registry::cli::RegistryArgs;
use crate::registry::{DockerConfigFile, ImageInspector, MemoryPlan};
use crate::runtime::admin;
use anyhow::Context;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const DAY: u64 = 86_400;

#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// HTTPS address for /validate (and /healthz, /readyz, /metrics).
    #[arg(long, env = "NFGUARD_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: String,
    /// Plain HTTP address for /metrics, /healthz, /readyz ("off" to disable).
    #[arg(long, env = "NFGUARD_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: String,
    /// Serving certificate (PEM, chain); reloaded when its directory changes.
    #[arg(
        long,
        env = "NFGUARD_TLS_CERT",
        requires = "tls_key",
        conflicts_with = "self_signed"
    )]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM) for --tls-cert.
    #[arg(long, env = "NFGUARD_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Generate a CA + certificate, keep them in the install's Secret
    /// (--tls-secret), patch the caBundle, rotate.
    #[arg(long, env = "NFGUARD_SELF_SIGNED")]
    pub self_signed: bool,
    /// CA bundle (PEM) that signs the API server's client certificate: when
    /// set, /validate answers only TLS clients presenting a certificate chained
    /// to it (others: 401 or a failed handshake). Re-read when it changes.
    #[arg(long, env = "NFGUARD_CLIENT_CA_FILE")]
    pub client_ca_file: Option<PathBuf>,
    /// With --client-ca-file: identities (subject CN or DNS SAN) a client
    /// certificate must name, comma-separated (default: any the CA signed).
    #[arg(
        long,
        env = "NFGUARD_CLIENT_CERT_NAMES",
        value_delimiter = ',',
        requires = "client_ca_file"
    )]
    pub client_cert_name: Vec<String>,
    /// Bytes of request bodies read and judged at once; more wait up to 2 s,
    /// then get 429 (default: an eighth of the memory limit, at least one
    /// largest review).
    #[arg(long, env = "NFGUARD_MAX_INFLIGHT_BODY_BYTES")]
    pub max_inflight_body_bytes: Option<u64>,
    /// Namespace of the Secret and Service (the pod's own).
    #[arg(long, env = "POD_NAMESPACE", default_value = "nfguard-system")]
    pub namespace: String,
    /// Secret the install provides (empty) and the webhook fills with the
    /// self-signed CA and certificate (never created by the webhook).
    #[arg(
        long,
        env = "NFGUARD_TLS_SECRET",
        default_value = "nfguard-webhook-cert"
    )]
    pub tls_secret: String,
    /// Service name the certificate is issued for.
    #[arg(long, env = "NFGUARD_SERVICE_NAME", default_value = "nfguard-webhook")]
    pub service_name: String,
    /// ValidatingWebhookConfiguration whose caBundle is patched.
    #[arg(long, env = "NFGUARD_WEBHOOK_CONFIG_NAME", default_value = "nfguard")]
    pub webhook_config_name: String,
    /// Validity of generated serving certificates, days (the CA lives twice as long).
    #[arg(long, env = "NFGUARD_CERT_VALIDITY_DAYS", default_value_t = 90)]
    pub cert_validity_days: u64,
    /// Rotate generated certificates this many days before expiry.
    #[arg(long, env = "NFGUARD_CERT_ROTATE_BEFORE_DAYS", default_value_t = 30)]
    pub cert_rotate_before_days: u64,
    /// How often the Secret and the caBundle are re-read, seconds: other
    /// replicas may have rotated, and during an upgrade a replica of an
    /// earlier nfguard may write its own CA alone into the caBundle (two
    /// small GETs per check).
    #[arg(long, env = "NFGUARD_CERT_CHECK_SECONDS", default_value_t = 30)]
    pub cert_check_seconds: u64,
    /// NodeNetfilterProfile objects (file or directory) instead of watching the cluster.
    #[arg(long, env = "NFGUARD_PROFILES")]
    pub profiles: Option<PathBuf>,
    /// Node objects (labels, taints) instead of watching Nodes.
    #[arg(long, env = "NFGUARD_NODES")]
    pub nodes: Option<PathBuf>,
    /// NetfilterPolicy objects instead of watching NetfilterPolicies.
    #[arg(long, env = "NFGUARD_POLICY")]
    pub policy: Option<PathBuf>,
    /// Kubeconfig (default: in-cluster / the default kubeconfig).
    #[arg(long, env = "NFGUARD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Platform for nodes whose labels do not say (os/arch[/variant]).
    #[arg(long, env = "NFGUARD_PLATFORM_DEFAULT", default_value = DEFAULT_PLATFORM)]
    pub platform_default: String,
    /// Budget per admission request in seconds (the API server waits 10 s at most).
    #[arg(long, env = "NFGUARD_TIMEOUT", default_value_t = 8.0)]
    pub timeout: f64,
    /// On SIGTERM, keep accepting this long with /readyz failing, so every
    /// proxy has dropped the pod from the Service before the listeners close.
    #[arg(long, env = "NFGUARD_SHUTDOWN_DELAY_SECONDS", default_value_t = 5.0)]
    pub shutdown_delay_seconds: f64,
    /// Then, listeners closed, the time in-flight reviews get to finish
    /// (default: --timeout + 1 s, the router's own cut for one request).
    #[arg(long, env = "NFGUARD_DRAIN_SECONDS")]
    pub drain_seconds: Option<f64>,
    /// Upper bound for one image inspection, seconds, also after the
    /// admission that started it was answered (see the background limits).
    #[arg(long, env = "NFGUARD_REGISTRY_TIMEOUT", default_value_t = 60)]
    pub registry_timeout: u64,
    /// Image look-ups one namespace's admissions may have in flight at once
    /// (the rest count as unresolved), so one tenant cannot take every slot.
    #[arg(
        long,
        env = "NFGUARD_MAX_IMAGE_LOOKUPS_PER_NAMESPACE",
        default_value_t = 64
    )]
    pub max_image_lookups_per_namespace: usize,
    /// Look-ups one namespace may leave running after its admissions were
    /// answered (they warm the cache for the next try); the rest are cancelled.
    #[arg(
        long,
        env = "NFGUARD_MAX_BACKGROUND_LOOKUPS_PER_NAMESPACE",
        default_value_t = 4
    )]
    pub max_background_lookups_per_namespace: usize,
    /// Image answers kept in memory.
    #[arg(long, env = "NFGUARD_IMAGE_CACHE_ENTRIES", default_value_t = 4096)]
    pub image_cache_entries: u64,
    /// Answers remembered for identical objects under unchanged facts
    /// (API server retries, no-op re-applies); 0 turns the cache off.
    #[arg(long, env = "NFGUARD_DECISION_CACHE_ENTRIES", default_value_t = 4096)]
    pub decision_cache_entries: u64,
    /// Node names listed per reason in messages.
    #[arg(long, env = "NFGUARD_MAX_NODES", default_value_t = 5)]
    pub max_nodes: usize,
}

fn boot_config(args: &Args) -> bootstrap::Config {
    bootstrap::Config {
        namespace: args.namespace.clone(),
        secret_name: args.tls_secret.clone(),
        service_name: args.service_name.clone(),
        webhook_config_name: args.webhook_config_name.clone(),
        cert_validity: Duration::from_secs(args.cert_validity_days.max(1) * DAY),
        ca_validity: Duration::from_secs(args.cert_validity_days.max(1) * 2 * DAY),
        rotate_before: Duration::from_secs(args.cert_rotate_before_days * DAY),
        earlier_secret_name: (args.tls_secret != bootstrap::EARLIER_SECRET_NAME)
            .then(|| bootstrap::EARLIER_SECRET_NAME.to_string()),
    }
}

/// Keep the Secret's certificate served and the caBundle current; rotate when due.
async fn certificate_loop(
    client: kube::Client,
    cfg: bootstrap::Config,
    store: Arc<CertStore>,
    every: Duration,
) {
    loop {
        let now = SystemTime::now();
        let wait = match bootstrap::bootstrap_once(&client, &cfg, now).await {
            Ok((_, loaded)) => {
                let due = bootstrap::rotate_at(&cfg, &loaded)
                    .and_then(|t| t.duration_since(now).ok())
                    .unwrap_or(Duration::ZERO);
                store.set(loaded);
                due.min(every).max(Duration::from_secs(1))
            }
            Err(e) => {
                tracing::error!(error = %e, "certificate bootstrap failed; retrying");
                Duration::from_secs(5)
            }
        };
        tokio::time::sleep(wait).await;
    }
}

pub async fn run(args: Args) -> anyhow::Result<u8> {
    let metrics = Arc::new(Metrics::new());
    let default_platform: crate::facts::Platform = args
        .platform_default
        .parse()
        .map_err(|e| anyhow::anyhow!("--platform-default: {e}"))?;
    if !(args.timeout > 0.0 && args.timeout <= 30.0) {
        anyhow::bail!(
            "--timeout must be between 0 and 30 seconds, got {}",
            args.timeout
        );
    }
    let drain = drain_of(&args)?;
    let needs_client = args.profiles.is_none() || args.self_signed;
    let client = if needs_client {
        Some(crate::runtime::client::client(args.kubeconfig.as_deref()).await?)
    } else {
        None
    };

    let facts = match (&args.profiles, &client) {
        (Some(p), _) => Facts::from_files(p, args.nodes.as_deref(), args.policy.as_deref())?,
        (None, Some(c)) => {
            let nodes = args.nodes.as_deref().map(load::load_nodes).transpose()?;
            let policies = args
                .policy
                .as_deref()
                .map(load::load_policies)
                .transpose()?;
            facts::start_cluster(c.clone(), nodes, policies, default_platform.clone())
        }
        (None, None) => anyhow::bail!("no facts: pass --profiles PATH or run with cluster access"),
    };
    let facts = Arc::new(facts);

    let registry = args
        .registry
        .in_cluster_config(Duration::from_secs(args.registry_timeout.max(1)));
    crate::registry::parse::check_at_start(&registry.parser).await?;
    // An answer by tag lives no longer than the registry trusts the tag.
    let ttl = CacheTtl {
        ok_by_tag: registry.tag_ttl,
        ..CacheTtl::default()
    };
    // Asked after the admitted pod's own pull secrets.
    let docker_config = Arc::new(DockerConfigFile::for_config(&registry));
    let inspector = ImageInspector::new(registry);
    let images = Arc::new(
        ImageCache::new(
            Arc::new(inspector),
            args.image_cache_entries,
            ttl,
            metrics.clone(),
        )
        .with_credentials(docker_config)
        .with_limits(LookupLimits {
            per_namespace: args.max_image_lookups_per_namespace.max(1),
            background_per_namespace: args.max_background_lookups_per_namespace,
            background_for: Duration::from_secs(args.registry_timeout.max(1)),
            ..LookupLimits::default()
        }),
    );

    let store = CertStore::new(Some(metrics.clone()));
    let _watch = match (&args.tls_cert, &args.tls_key, args.self_signed) {
        (Some(c), Some(k), false) => {
            store.set(tls::load_files(c, k)?);
            Some(tls::watch_files(
                c.clone(),
                k.clone(),
                store.clone(),
                Duration::from_secs(30),
            )?)
        }
        (None, None, true) => {
            let Some(c) = client.clone() else {
                anyhow::bail!("--self-signed needs cluster access");
            };
            tokio::spawn(certificate_loop(
                c,
                boot_config(&args),
                store.clone(),
                Duration::from_secs(args.cert_check_seconds.max(5)),
            ));
            None
        }
        _ => anyhow::bail!("pass --tls-cert and --tls-key, or --self-signed"),
    };

    let clients = match &args.client_ca_file {
        Some(path) => {
            let names: Vec<String> = args
                .client_cert_name
                .iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect();
            let auth = client_auth::load_file(path, names, Some(metrics.clone()))?;
            let watch =
                client_auth::watch_file(path.clone(), auth.clone(), Duration::from_secs(30))?;
            Some((auth, watch))
        }
        None => None,
    };
    let plan = MemoryPlan::detect(args.registry.memory_limit);
    let bodies = match args.max_inflight_body_bytes {
        Some(b) => BodyBudget::new(b, intake::BODY_WAIT, metrics.body_bytes_in_flight.clone()),
        None => BodyBudget::for_memory(&plan, metrics.body_bytes_in_flight.clone()),
    };
    tracing::info!(
        bytes = bodies.limit(),
        client_certificates = clients.is_some(),
        "request intake"
    );
    let intake = Arc::new(Intake {
        require_client_certificate: clients.is_some(),
        bodies,
        metrics: metrics.clone(),
    });

    let judge = Arc::new(Judge {
        facts: facts.clone(),
        images,
        // Pull secrets only make sense with the cluster's own facts.
        pull_secrets: match (&args.profiles, &client) {
            (None, Some(c)) => Some(PodPullSecrets::new(
                c.clone(),
                SERVICE_ACCOUNT_NAMES_TTL,
                SERVICE_ACCOUNT_NAMES_ENTRIES,
            )),
            _ => None,
        },
        metrics: metrics.clone(),
        timeout: Duration::from_secs_f64(args.timeout),
        default_platform,
        max_nodes: args.max_nodes,
        decisions: DecisionCache::new(args.decision_cache_entries),
    });
    let ready_facts = facts.clone();
    let ready_store = store.clone();
    let state = AppState {
        judge,
        metrics,
        ready: Arc::new(move || ready_facts.is_ready() && ready_store.is_loaded()),
        intake,
    };

    let https = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let local = https.local_addr()?;
    let verifier = clients
        .as_ref()
        .map(|(auth, _)| auth.clone() as Arc<dyn rustls::server::danger::ClientCertVerifier>);
    let acceptor =
        tokio_rustls::TlsAcceptor::from(tls::server_config_with_clients(store.clone(), verifier));
    let plain = admin::bind(&args.metrics_listen).await?;
    let plain_addr = match &plain {
        Some(l) => format!(" metrics=http://{}", l.local_addr()?),
        None => String::new(),
    };
    // One line on stdout so wrappers (and tests using port 0) learn the ports.
    println!("nfguard webhook listening on https://{local}{plain_addr}");
    tracing::info!(%local, "webhook serving");
    let listeners = server::Listeners {
        https,
        acceptor,
        plain,
    };
    match server::serve(state, listeners, crate::runtime::shutdown_signal(), drain).await {
        server::Drained::Complete => tracing::info!("drained; exiting"),
        server::Drained::Cut { connections } => {
            tracing::warn!(connections, budget = ?drain.budget, "drain budget spent; connections cut")
        }
    }
    Ok(0)
}

/// `--shutdown-delay-seconds` and `--drain-seconds`, checked.
fn drain_of(args: &Args) -> anyhow::Result<server::Drain> {
    let seconds = |flag: &str, v: f64| -> anyhow::Result<Duration> {
        anyhow::ensure!(
            (0.0..=300.0).contains(&v),
            "{flag} must be between 0 and 300 seconds, got {v}"
        );
        Ok(Duration::from_secs_f64(v))
    };
    let budget = match args.drain_seconds {
        Some(v) => seconds("--drain-seconds", v)?,
        None => server::request_deadline(Duration::from_secs_f64(args.timeout)),
    };
    Ok(server::Drain {
        delay: seconds("--shutdown-delay-seconds", args.shutdown_delay_seconds)?,
        budget,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn drain(flags: &[&str]) -> anyhow::Result<server::Drain> {
        let cli = Cli::try_parse_from(std::iter::once("webhook").chain(flags.iter().copied()))?;
        drain_of(&cli.args)
    }

    #[test]
    fn drain_defaults_follow_the_answer_budget() {
        let d = drain(&["--timeout", "3"]).unwrap();
        assert_eq!(d.delay, Duration::from_secs(5));
        assert_eq!(d.budget, Duration::from_secs(4));
        let d = drain(&["--drain-seconds", "1.5", "--shutdown-delay-seconds", "0"]).unwrap();
        assert_eq!(d.delay, Duration::ZERO);
        assert_eq!(d.budget, Duration::from_millis(1500));
    }

    #[test]
    fn drain_flags_out_of_range_are_refused() {
        for (flag, value) in [
            ("--drain-seconds", "-1"),
            ("--drain-seconds", "NaN"),
            ("--shutdown-delay-seconds", "301"),
        ] {
            let err = drain(&[&format!("{flag}={value}")])
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("{flag} must be between")),
                "{flag}={value}: {err}"
            );
        }
    }
}
