//! `nfguard reporter`: the DaemonSet entry point. Wires the real node
//! prober, the nf_tables notification socket, the API (or a file sink) and
//! the metrics server into `run::run_loop`.

use super::authz_cache::Limits;
use super::metrics::{Metrics, checks, router};
use super::metrics_auth::{
    DEFAULT_AUDIENCE, Guard, KubeReviewer, MetricsAuth, check_listen, health_router,
    metrics_router, self_signed_store,
};
use super::nft_watch::NftWatcher;
use super::prober::NodeProber;
use super::profile_api::ProfileWriter;
use super::run::{Io, LoopConfig, run_loop};
use super::sink::{FileSink, KubeSink, StatusSink};
use crate::node::ProbeConfig;
use crate::runtime::admin;
use crate::runtime::clock::SystemClock;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The node's root filesystem (the DaemonSet mounts it read-only at /host).
    #[arg(long, env = "NFGUARD_HOST_ROOT", default_value = "/host")]
    pub host_root: PathBuf,
    /// The host's libnftables carries the fix for set userdata it cannot
    /// parse (nftables be737a1986bf), although its release says otherwise: a
    /// vendor backport nfguard does not know (docs/nft-skew.md).
    #[arg(long, env = "NFGUARD_HOST_NFT_FIXED", default_value_t = false)]
    pub host_nft_fixed: bool,
    /// This node's name (the DaemonSet sets NODE_NAME from the downward API).
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Write the status at least this often even when nothing changed (lastProbeTime).
    #[arg(long, env = "NFGUARD_HEARTBEAT_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub heartbeat_seconds: u64,
    /// How often to poll x_tables (legacy) rules and the bridge/forwarding
    /// sysctls, which send no change notifications.
    #[arg(long, env = "NFGUARD_POLL_SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub poll_seconds: u64,
    /// Quiet time that ends a burst of nf_tables notifications before probing.
    #[arg(long, env = "NFGUARD_DEBOUNCE_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(0..=5_000))]
    pub debounce_ms: u64,
    /// Serve /metrics here; "off" disables. With --metrics-auth kubernetes
    /// (the default): HTTPS, and only for a bearer token allowed `get` on
    /// the non-resource URL /metrics (TokenReview + SubjectAccessReview).
    #[arg(long, env = "NFGUARD_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: String,
    /// How /metrics is protected: kubernetes (HTTPS, bearer token reviewed by
    /// the API server) or none (plain HTTP, allowed on a loopback address only).
    #[arg(
        long,
        env = "NFGUARD_METRICS_AUTH",
        value_enum,
        default_value = "kubernetes"
    )]
    pub metrics_auth: MetricsAuth,
    /// The audience a scraper's token must be issued for: a projected
    /// ServiceAccount token with this audience (docs/observability.md). ""
    /// accepts tokens for the API server's own audiences instead (a
    /// Pod's default token, a legacy Secret): weaker, as a node that
    /// receives such a token could replay it against the API server.
    #[arg(long, env = "NFGUARD_METRICS_AUDIENCE", default_value = DEFAULT_AUDIENCE)]
    pub metrics_audience: String,
    /// Where /metrics's certificate comes from: signer (asked of nfguard's
    /// controller through a CertificateSigningRequest, for this node's
    /// addresses, so scrapers can verify it; self-signed until it is
    /// issued) or self-signed (scrapers cannot verify it).
    #[arg(
        long,
        env = "NFGUARD_METRICS_CERTIFICATE",
        value_enum,
        default_value = "signer"
    )]
    pub metrics_certificate: MetricsCertificate,
    /// Serve /healthz and /readyz (plain HTTP, a status code and "ok" or
    /// "not ok", nothing else) here for the kubelet's probes; "off" disables.
    #[arg(long, env = "NFGUARD_HEALTH_LISTEN", default_value = "0.0.0.0:9091")]
    pub health_listen: String,
    /// Kubeconfig file; default: in-cluster or $KUBECONFIG.
    #[arg(long, env = "NFGUARD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Write each status to this file (or "-" for JSON lines on stdout)
    /// instead of the API: for debugging without a cluster.
    #[arg(long, env = "NFGUARD_STATUS_FILE")]
    pub status_file: Option<PathBuf>,
    /// Probe, write one status, and exit.
    #[arg(long, env = "NFGUARD_ONCE")]
    pub once: bool,
    /// Do not subscribe to nf_tables notifications (rely on polling the
    /// generation id): for testing the fallback and for debugging.
    #[arg(long, env = "NFGUARD_NO_NFT_NOTIFICATIONS", hide = true)]
    pub no_nft_notifications: bool,
}

/// Where the reporter's /metrics certificate comes from.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricsCertificate {
    Signer,
    SelfSigned,
}

pub async fn run(args: Args) -> anyhow::Result<u8> {
    let node_name = match (&args.node_name, &args.status_file) {
        (Some(n), _) if !n.is_empty() => n.clone(),
        (_, Some(_)) => local_hostname(),
        _ => anyhow::bail!(
            "the node name is required: --node-name or NODE_NAME (downward API spec.nodeName)"
        ),
    };
    let cfg = LoopConfig {
        heartbeat: Duration::from_secs(args.heartbeat_seconds),
        poll: Duration::from_secs(args.poll_seconds),
        debounce_quiet: Duration::from_millis(args.debounce_ms),
        debounce_max: Duration::from_millis(args.debounce_ms.saturating_mul(3).max(1)),
        once: args.once,
        ..LoopConfig::default()
    };
    let metrics = Metrics::new((args.poll_seconds as i64) * 3 + 60);

    check_listen(args.metrics_auth, &args.metrics_listen)?;
    let listen = args.metrics_listen.trim();
    let metrics_on = !args.once && !listen.is_empty() && listen != admin::OFF;
    let needs_api =
        args.status_file.is_none() || (metrics_on && args.metrics_auth == MetricsAuth::Kubernetes);
    let client = match needs_api {
        true => Some(crate::runtime::client::client(args.kubeconfig.as_deref()).await?),
        false => None,
    };

    let mut sink: Box<dyn StatusSink> = match (&args.status_file, &client) {
        (Some(path), _) => Box::new(FileSink {
            path: path.clone(),
            node_name: node_name.clone(),
        }),
        (None, Some(client)) => Box::new(KubeSink(ProfileWriter::new(
            client.clone(),
            node_name.clone(),
        ))),
        (None, None) => unreachable!("a client is made whenever there is no status file"),
    };

    if !args.once {
        // Served until the process exits: probes keep answering while the loop stops.
        let (live, ready) = checks(metrics.clone(), Arc::new(SystemClock));
        admin::spawn(
            &args.health_listen,
            health_router(live, ready),
            std::future::pending(),
        )
        .await?;
        serve_metrics(&args, &node_name, metrics.clone(), client.clone()).await?;
    }

    let nft_events = if args.once || args.no_nft_notifications {
        None
    } else {
        match NftWatcher::subscribe() {
            Ok(mut w) => {
                let (tx, rx) = mpsc::channel(64);
                tokio::spawn(async move {
                    loop {
                        match w.next().await {
                            Ok(ev) => {
                                // A full channel already holds a pending change: dropping is fine.
                                if tx.try_send(ev).is_err() && tx.is_closed() {
                                    return;
                                }
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "nf_tables notifications failed");
                                return;
                            }
                        }
                    }
                });
                Some(rx)
            }
            Err(e) => {
                tracing::warn!(error = %e, "no nf_tables notifications; polling only");
                None
            }
        }
    };

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        crate::runtime::shutdown_signal().await;
        let _ = stop_tx.send(true);
    });

    // The host's package set is re-read at heartbeat pace, not per rule change.
    let mut probe_cfg = ProbeConfig::new(args.host_root.clone());
    probe_cfg.host_nft_fixed = args.host_nft_fixed;
    let prober = NodeProber::new(probe_cfg, Duration::from_secs(args.heartbeat_seconds));
    let mut jitter = || rand::random::<f64>();
    tracing::info!(node = %node_name, host_root = %args.host_root.display(), "reporter starting");
    run_loop(
        &cfg,
        Io {
            prober: &prober,
            sink: sink.as_mut(),
            nft_events,
            clock: &SystemClock,
            jitter: &mut jitter,
            metrics,
            shutdown: stop_rx,
        },
    )
    .await?;
    Ok(0)
}

/// /metrics on `--metrics-listen`: HTTPS behind the API server's reviews,
/// or (`--metrics-auth none`, loopback only) the plain admin routes.
async fn serve_metrics(
    args: &Args,
    node_name: &str,
    metrics: Arc<Metrics>,
    client: Option<kube::Client>,
) -> anyhow::Result<()> {
    match (args.metrics_auth, client) {
        (MetricsAuth::None, _) => {
            admin::spawn(
                &args.metrics_listen,
                router(metrics),
                std::future::pending(),
            )
            .await?;
        }
        (MetricsAuth::Kubernetes, Some(client)) => {
            let Some(listener) = admin::bind(&args.metrics_listen).await? else {
                return Ok(());
            };
            let names = vec![node_name.to_string(), "localhost".to_string()];
            let (acceptor, store) = self_signed_store(names)?;
            if args.metrics_certificate == MetricsCertificate::Signer {
                tokio::spawn(crate::serving_certs::request::keep_certified(
                    client.clone(),
                    node_name.to_string(),
                    store,
                ));
            }
            let audience = Some(args.metrics_audience.trim().to_string()).filter(|a| !a.is_empty());
            let reviewer = KubeReviewer {
                client,
                audience: audience.clone(),
            };
            let guard = Guard::new(
                Arc::new(reviewer),
                Limits::default(),
                REVIEWS_IN_FLIGHT,
                REVIEW_TIMEOUT,
            )
            .with_audience(audience);
            let app = metrics_router(Arc::new(guard), metrics);
            tokio::spawn(crate::webhook::server::serve_tls(listener, acceptor, app));
        }
        // No client: the metrics listener is off (checked by the caller).
        (MetricsAuth::Kubernetes, None) => {}
    }
    Ok(())
}

/// Access reviews asked of the API server at once; more wait for none and
/// are answered 429 (a flood of made-up tokens costs the API server this many).
const REVIEWS_IN_FLIGHT: usize = 4;
/// One TokenReview + SubjectAccessReview pair.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

fn local_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "local".into())
}
