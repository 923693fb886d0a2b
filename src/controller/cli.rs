//! `nfguard controller`: leader election, then the node controller, the
//! NetfilterPolicy status controller, the periodic orphan sweep and the
//! reporter-metrics certificate signer while leading; metrics and probes
//! always.

use crate::controller::EVENT_REPORTER;
use crate::controller::apply::policy_status::run_policy_status;
use crate::controller::http::{self, HttpState};
use crate::controller::lease::{LeaderElector, LeaseConfig};
use crate::controller::metrics::{CertificateLabel, CertificateOutcome, Metrics};
use crate::controller::run::{RunOptions, run_controller};
use crate::judgement::Bounded;
use crate::judgement::pull_secrets::PullSecretReader;
use crate::registry::DockerConfigFile;
use crate::registry::ImageInspector;
use crate::registry::cli::RegistryArgs;
use crate::reports::NamespaceCaps;
use crate::runtime::clock::{Clock, SystemClock};
use crate::runtime::{admin, flag_raised};
use crate::serving_certs::signer::{Outcome, SignerConfig, run_signer};
use kube::runtime::events::{Recorder, Reporter};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// kubeconfig to use instead of the in-cluster config / default kubeconfig.
    #[arg(long, env = "NFGUARD_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Where /metrics, /healthz and /readyz are served (plain HTTP); "off" disables.
    #[arg(long, env = "NFGUARD_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: String,
    /// This replica's identity in the Lease (the pod name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "nfguard-system")]
    pub lease_namespace: String,
    #[arg(long, env = "NFGUARD_LEASE_NAME", default_value = "nfguard-controller")]
    pub lease_name: String,
    /// Seconds a renewal holds the Lease against other replicas.
    #[arg(long, env = "NFGUARD_LEASE_DURATION", default_value_t = 15)]
    pub lease_duration: u64,
    /// Seconds without a successful renewal after which this replica stops leading (< lease duration).
    #[arg(long, env = "NFGUARD_RENEW_DEADLINE", default_value_t = 10)]
    pub renew_deadline: u64,
    /// Seconds between leader-election attempts.
    #[arg(long, env = "NFGUARD_LEASE_RETRY", default_value_t = 2)]
    pub lease_retry: u64,
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Seconds one image inspection may take.
    #[arg(long, env = "NFGUARD_REGISTRY_TIMEOUT", default_value_t = 20)]
    pub registry_timeout: u64,
    /// Seconds between sweeps for profiles whose Node is gone.
    #[arg(long, env = "NFGUARD_ORPHAN_INTERVAL", default_value_t = 600)]
    pub orphan_interval: u64,
    /// Nodes reconciled at once (one node is never reconciled twice at
    /// once; the taint brake holds across them).
    #[arg(long, env = "NFGUARD_CONCURRENCY", default_value_t = crate::controller::run::CONCURRENCY,
          value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
    /// How pods are listed and watched: `auto` (protobuf, a fifth to a
    /// third of the API server's CPU of paged JSON; JSON where the server or
    /// a proxy refuses it) or `json` (kube's paged JSON only).
    #[arg(long, env = "NFGUARD_PODS_ENCODING", value_enum, default_value_t = crate::kube_protobuf::pods::Choice::Auto)]
    pub pods_encoding: crate::kube_protobuf::pods::Choice,
    /// Policy reports nfguard keeps in one namespace; past it (or past
    /// --max-report-bytes-per-namespace) a workload's report is not written
    /// (nfguard_controller_reports_over_cap counts them).
    #[arg(long, env = "NFGUARD_MAX_REPORTS_PER_NAMESPACE", default_value_t = NamespaceCaps::default().reports,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_reports_per_namespace: u32,
    /// Bytes of policy reports (as JSON) nfguard keeps in one namespace.
    #[arg(long, env = "NFGUARD_MAX_REPORT_BYTES_PER_NAMESPACE", default_value_t = NamespaceCaps::default().bytes,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_report_bytes_per_namespace: u64,
    /// The reporter's ServiceAccount (in the controller's namespace): the
    /// only requester whose certificate requests for nfguard's
    /// reporter-metrics signer are approved.
    #[arg(
        long,
        env = "NFGUARD_REPORTER_SERVICE_ACCOUNT",
        default_value = "nfguard-reporter"
    )]
    pub reporter_service_account: String,
}

fn identity(args: &Args) -> String {
    args.identity
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| format!("nfguard-controller-{:08x}", rand::random::<u32>()))
}

pub async fn run(args: Args) -> anyhow::Result<u8> {
    anyhow::ensure!(
        args.renew_deadline < args.lease_duration,
        "--renew-deadline ({}) must be shorter than --lease-duration ({})",
        args.renew_deadline,
        args.lease_duration
    );
    let client = crate::runtime::client::client(args.kubeconfig.as_deref()).await?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let me = identity(&args);

    let (stop_tx, stop_rx) = watch::channel(false);
    let state = HttpState {
        metrics: metrics.clone(),
        ready: ready.clone(),
    };
    let http_stop = flag_raised(stop_rx.clone());
    let http = admin::spawn(&args.metrics_listen, http::router(state), http_stop).await?;

    let mut lease = LeaseConfig::new(&args.lease_name, &args.lease_namespace, &me);
    lease.lease_duration = Duration::from_secs(args.lease_duration);
    lease.renew_deadline = Duration::from_secs(args.renew_deadline);
    lease.retry_period = Duration::from_secs(args.lease_retry.max(1));
    let (leader_tx, mut leader_rx) = watch::channel(false);
    let elector = LeaderElector::new(client.clone(), lease, clock.clone());
    let election = tokio::spawn(elector.run(leader_tx, stop_rx.clone()));

    let registry = args
        .registry
        .in_cluster_config(Duration::from_secs(args.registry_timeout.max(1)));
    crate::registry::parse::check_at_start(&registry.parser).await?;
    // The docker config, then each running pod's own pull secrets (read
    // again at most every TAG_TTL, like a tag's digest).
    let images = Arc::new(
        Bounded::new(Arc::new(ImageInspector::new(registry.clone())), 4)
            .with_credentials(Arc::new(DockerConfigFile::for_config(&registry)))
            .with_pull_secrets(PullSecretReader::new(
                client.clone(),
                crate::registry::TAG_TTL,
                4096,
            )),
    );
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: EVENT_REPORTER.into(),
            instance: Some(me.clone()),
        },
    );
    tracing::info!(identity = %me, namespace = %args.lease_namespace, lease = %args.lease_name, "nfguard controller starting");

    let shutdown = crate::runtime::shutdown_signal();
    tokio::pin!(shutdown);
    // The first election round marks the replica ready (leading or standby).
    let mut first = true;
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            r = leader_rx.wait_for(|l| *l) => {
                if r.is_err() { break; }
            }
            _ = tokio::time::sleep(Duration::from_secs(args.lease_retry.max(1) * 2)), if first => {
                first = false;
                ready.store(true, Ordering::Relaxed);
                continue;
            }
        }
        ready.store(true, Ordering::Relaxed);
        first = false;
        metrics.leader.set(1);
        tracing::info!(identity = %me, "leading: reconciling nodes");
        let (term_tx, term_rx) = watch::channel(false);
        let controller = run_controller(
            client.clone(),
            images.clone(),
            clock.clone(),
            metrics.clone(),
            recorder.clone(),
            RunOptions {
                concurrency: args.concurrency,
                orphan_interval: Duration::from_secs(args.orphan_interval.max(10)),
                report_caps: NamespaceCaps {
                    reports: args.max_reports_per_namespace,
                    bytes: args.max_report_bytes_per_namespace,
                },
                pods_encoding: args.pods_encoding,
            },
            flag_raised(term_rx.clone()),
        );
        let policy_status = run_policy_status(
            client.clone(),
            clock.clone(),
            metrics.clone(),
            recorder.clone(),
            flag_raised(term_rx.clone()),
        );
        let counted = metrics.clone();
        let signer = run_signer(
            client.clone(),
            SignerConfig::new(&args.lease_namespace, &args.reporter_service_account),
            move |outcome| {
                let outcome = match outcome {
                    Outcome::Signed => CertificateOutcome::signed,
                    Outcome::Denied(_) => CertificateOutcome::denied,
                    Outcome::Failed(_) => CertificateOutcome::failed,
                    Outcome::Settled => return,
                };
                counted
                    .certificate_requests
                    .get_or_create(&CertificateLabel { outcome })
                    .inc();
            },
            flag_raised(term_rx.clone()),
        );
        let work = futures::future::join3(controller, policy_status, signer);
        tokio::pin!(work);
        let mut shutting_down = false;
        tokio::select! {
            _ = &mut work => {}
            _ = leader_rx.wait_for(|l| !*l) => tracing::warn!("lost the lease: stopping reconciles"),
            _ = &mut shutdown => shutting_down = true,
        }
        let _ = term_tx.send(true);
        // Let the controller finish its in-flight reconcile, bounded.
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut work).await;
        metrics.leader.set(0);
        if shutting_down {
            break;
        }
    }
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(5), election).await;
    if let Some(http) = http {
        let _ = http.task.await;
    }
    Ok(0)
}
