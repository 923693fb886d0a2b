//! Hollow-node load generator and measuring client for
//! `scripts/bench-cluster.sh` (docs/benchmarks.md, "The controller and the
//! reporters on a real API server"). It talks to the cluster of
//! `KUBECONFIG` with the crate's own code: profiles are written through
//! the reporter's `ProfileWriter`, simulated reporters run the reporter's
//! own loop. An example, not a binary of the crate: it is a test tool,
//! built only when the benchmark runs (`cargo build --release --example
//! bench_cluster`), never shipped in the image.
//!
//! Its requests carry the user agent `nfguard-bench`, so the audit log
//! tells them from the controller's.

mod admission;
mod allow_all;
mod apimetrics;
mod audit;
mod converge;
mod floor;
mod heap;
mod load;
mod reporters;
mod retry;
mod shape;
mod store_memory;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

pub const USER_AGENT: &str = "nfguard-bench";

/// Counts the heap for `store-memory` (a relaxed add per allocation).
#[global_allocator]
static HEAP: heap::Counting = heap::Counting;

#[derive(Parser)]
#[command(about = "Hollow nodes, profiles and pods for nfguard's cluster benchmark")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create NODES hollow Nodes, their profiles and PODS_PER_NODE pods each.
    Load {
        #[arg(long)]
        nodes: usize,
        #[arg(long)]
        pods_per_node: usize,
        /// The test registry as the controller reaches it (writers' images).
        #[arg(long)]
        registry: String,
        /// `probeIntervalSeconds` the profiles state (long: none turns
        /// stale while the controller is measured).
        #[arg(long, default_value_t = 3600)]
        probe_interval: u32,
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// The heap the controller's caches hold per Node and per writer pod,
    /// fed the hollow cluster's objects through the controller's own
    /// feeds (no cluster needed).
    StoreMemory {
        #[arg(long, default_value_t = 5000)]
        nodes: usize,
        #[arg(long, default_value_t = 20)]
        pods_per_node: usize,
    },
    /// Delete every hollow object.
    Cleanup {
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// Wait until every hollow node carries its labels and conditions;
    /// prints `converged_at_ms=<unix ms>`.
    Converged {
        #[arg(long)]
        nodes: usize,
        /// The node whose facts `change` changed.
        #[arg(long)]
        changed: Option<usize>,
        /// Written once the watches have listed.
        #[arg(long)]
        ready_file: Option<PathBuf>,
        #[arg(long, default_value_t = 1800)]
        timeout: u64,
    },
    /// Save the API server's request counters to FILE (JSON).
    MetricsSnapshot {
        #[arg(long)]
        out: PathBuf,
    },
    /// The writes between two snapshots, per resource and per node.
    MetricsDiff {
        #[arg(long)]
        before: PathBuf,
        #[arg(long)]
        after: PathBuf,
        #[arg(long)]
        nodes: usize,
        /// Fail when the writes to nodes, profiles and events exceed this.
        #[arg(long)]
        max_writes: Option<f64>,
    },
    /// Change node I's facts (an iptables upgrade) through the reporter's
    /// write path.
    Change {
        #[arg(long)]
        node: usize,
    },
    /// The floor: re-issue the controller's label and status writes,
    /// `--concurrency` nodes at a time (the controller's default); prints
    /// `floor_seconds=`.
    Floor {
        #[arg(long, default_value_t = nfguard::controller::run::CONCURRENCY as usize)]
        concurrency: usize,
        /// Nodes taken back at once before the replay (not timed).
        #[arg(long, default_value_t = 32)]
        reset_concurrency: usize,
    },
    /// N simulated reporters at rest: write bytes/s against N kubelets'
    /// Lease renewals, and change-to-API latency.
    Reporters {
        #[arg(long)]
        nodes: usize,
        #[arg(long, default_value_t = 60)]
        heartbeat: u64,
        /// The measuring window (seconds), after every reporter wrote once.
        #[arg(long, default_value_t = 120)]
        window: u64,
        /// Changed rulesets to time.
        #[arg(long, default_value_t = 10)]
        samples: usize,
        /// A real node whose kubelet renews its Lease (the baseline).
        #[arg(long, default_value = "e2e-nft")]
        kubelet_node: String,
    },
    /// Create PODS writer pods (IMAGE, no node) CONCURRENCY at a time;
    /// append each creation's latency (µs, one per line) to OUT.
    Admission {
        #[arg(long)]
        image: String,
        #[arg(long)]
        pods: usize,
        #[arg(long)]
        concurrency: usize,
        /// Pod names are PREFIX-0, PREFIX-1, ...
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// The floor of any webhook: allow every review at once, on nfguard's
    /// HTTPS stack, at https://LISTEN/validate (a certificate for LISTEN's
    /// IP; its CA's PEM written to CA_OUT). Runs until killed.
    AllowAll {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        ca_out: PathBuf,
    },
    /// Writes to hollow nodes' objects named in the audit log between two
    /// instants (Unix ms), other than this tool's; with --only-node, fail
    /// on a write concerning another hollow node.
    Audit {
        #[arg(long)]
        log: PathBuf,
        #[arg(long)]
        since_ms: i64,
        #[arg(long)]
        until_ms: i64,
        #[arg(long)]
        only_node: Option<String>,
        /// Fail unless a cold start of this many hollow nodes wrote at most
        /// 2 per node (labels, status) and 2 more per degraded node (its
        /// events: a healthy node's first sight gets none).
        #[arg(long)]
        cold_start_nodes: Option<usize>,
        /// Resources to consider (others, e.g. Leases, are listed only).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "nodes,nodenetfilterprofiles/status,events"
        )]
        resources: Vec<String>,
    },
}

async fn client() -> anyhow::Result<kube::Client> {
    let mut config = kube::Config::infer().await?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    // The generator's own bursts must not be throttled client-side only.
    config.read_timeout = Some(Duration::from_secs(120));
    nfguard::runtime::client::install_crypto_provider();
    Ok(kube::Client::try_from(config)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Load {
            nodes,
            pods_per_node,
            registry,
            probe_interval,
            concurrency,
        } => {
            let l = load::Load {
                nodes,
                pods_per_node,
                registry,
                probe_interval,
                concurrency,
            };
            load::load(&client().await?, &l).await
        }
        Cmd::StoreMemory {
            nodes,
            pods_per_node,
        } => {
            store_memory::measure(nodes, pods_per_node);
            Ok(())
        }
        Cmd::Cleanup { concurrency } => load::cleanup(&client().await?, concurrency).await,
        Cmd::Converged {
            nodes,
            changed,
            ready_file,
            timeout,
        } => {
            let at = converge::wait(
                &client().await?,
                nodes,
                changed,
                ready_file.as_deref(),
                Duration::from_secs(timeout),
            )
            .await?;
            println!("converged_at_ms={at}");
            Ok(())
        }
        Cmd::MetricsSnapshot { out } => {
            let s = apimetrics::snapshot(&client().await?).await?;
            std::fs::write(&out, serde_json::to_vec(&s)?)?;
            Ok(())
        }
        Cmd::MetricsDiff {
            before,
            after,
            nodes,
            max_writes,
        } => metrics_diff(&before, &after, nodes, max_writes),
        Cmd::Change { node } => change(node).await,
        Cmd::Floor {
            concurrency,
            reset_concurrency,
        } => {
            let c = client().await?;
            let writes = floor::collect(&c).await?;
            floor::reset(&c, &writes, reset_concurrency).await?;
            let secs = floor::replay(&c, &writes, concurrency).await?;
            println!("floor_nodes={}", writes.len());
            println!("floor_concurrency={concurrency}");
            println!("floor_seconds={secs:.2}");
            Ok(())
        }
        Cmd::Reporters {
            nodes,
            heartbeat,
            window,
            samples,
            kubelet_node,
        } => {
            let r = ReportersRun {
                nodes,
                heartbeat: Duration::from_secs(heartbeat),
                window: Duration::from_secs(window),
                samples,
                kubelet_node,
            };
            reporters_at_rest(&client().await?, &r).await
        }
        Cmd::Admission {
            image,
            pods,
            concurrency,
            prefix,
            out,
        } => {
            let c = client().await?;
            admission::ensure_namespace(&c).await?;
            let samples =
                admission::create_latencies(&c, &image, &prefix, pods, concurrency).await?;
            let lines: String = samples
                .iter()
                .map(|d| format!("{}\n", d.as_micros()))
                .collect();
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&out)?;
            std::io::Write::write_all(&mut f, lines.as_bytes())?;
            Ok(())
        }
        Cmd::AllowAll { listen, ca_out } => allow_all::run(listen, &ca_out).await,
        Cmd::Audit {
            log,
            since_ms,
            until_ms,
            only_node,
            cold_start_nodes,
            resources,
        } => audit_check(
            &log,
            since_ms,
            until_ms,
            only_node.as_deref(),
            cold_start_nodes,
            &resources,
        ),
    }
}

/// The resources whose writes are the controller's per-node work (not
/// `nodes/status`: kubelets write that).
const PER_NODE: [&str; 4] = [
    "nodes",
    "nodenetfilterprofiles",
    "nodenetfilterprofiles/status",
    "events",
];

fn metrics_diff(
    before: &std::path::Path,
    after: &std::path::Path,
    nodes: usize,
    max_writes: Option<f64>,
) -> anyhow::Result<()> {
    let read = |p: &std::path::Path| -> anyhow::Result<apimetrics::Snapshot> {
        Ok(serde_json::from_slice(&std::fs::read(p)?)?)
    };
    let d = apimetrics::delta(&read(before)?, &read(after)?);
    print!("{}", d.writes_table(nodes));
    let per_node: f64 = PER_NODE.iter().map(|r| d.writes_to(r)).sum();
    for r in PER_NODE {
        println!("writes_{}={}", r.replace('/', "_"), d.writes_to(r) as i64);
    }
    println!("writes_per_node_total={}", per_node as i64);
    println!("reads={}", d.reads() as i64);
    if let Some(max) = max_writes {
        anyhow::ensure!(
            per_node <= max,
            "{per_node} writes to nodes, profiles and events; at most {max} expected"
        );
    }
    Ok(())
}

async fn change(node: usize) -> anyhow::Result<()> {
    use nfguard::runtime::clock::{Clock, SystemClock, rfc3339};
    let f = shape::changed(shape::facts(node));
    let status = shape::status(f, &rfc3339(SystemClock.now()), 3600);
    let mut w =
        nfguard::reporter::profile_api::ProfileWriter::new(client().await?, shape::node_name(node));
    w.write(&status).await?;
    println!(
        "changed {} to iptables {}",
        shape::node_name(node),
        f.version
    );
    Ok(())
}

struct ReportersRun {
    nodes: usize,
    heartbeat: Duration,
    window: Duration,
    samples: usize,
    kubelet_node: String,
}

async fn reporters_at_rest(c: &kube::Client, r: &ReportersRun) -> anyhow::Result<()> {
    let fleet = reporters::start(c, r.nodes, r.heartbeat, r.heartbeat);
    fleet
        .wait_written(r.heartbeat + Duration::from_secs(600))
        .await?;
    eprintln!(
        "bench: {} simulated reporters wrote; measuring {:?}",
        r.nodes, r.window
    );
    let rest = reporters::at_rest(c, r.nodes, r.window).await?;
    let mut latencies = Vec::new();
    for k in 0..r.samples {
        let i = (k * 7919 + 11) % r.nodes;
        latencies.push(reporters::change_latency(c, &fleet, i).await?);
    }
    fleet.stop().await;
    latencies.sort();

    let secs = rest.window.as_secs_f64();
    let d = &rest.delta;
    let writes = d.writes_to("nodenetfilterprofiles/status");
    // The histogram has resource and verb only (no subresource).
    let (body, counted) = d
        .mean_body("nodenetfilterprofiles", "patch")
        .unwrap_or((0.0, 0.0));
    let ours = writes * body / secs;
    let lease_pb = reporters::lease_protobuf_bytes(c, &r.kubelet_node).await?;
    let lease_put = d.mean_body("leases", "update");
    let lease_body = lease_put.map_or(lease_pb as f64, |(b, _)| b);
    let kubelets = rest.reporters as f64 * lease_body / 10.0;
    println!(
        "reporters={} heartbeat_s={} window_s={secs}",
        rest.reporters,
        r.heartbeat.as_secs()
    );
    println!("profile_status_writes={writes} ({:.2}/s)", writes / secs);
    println!("profile_status_mean_body_bytes={body:.0} (apiserver histogram, {counted} requests)");
    println!("reporters_write_bytes_per_s={ours:.0}");
    println!(
        "lease_update_mean_body_bytes={} (apiserver histogram, kubelets' PUTs; protobuf GET of {}: {lease_pb} bytes)",
        lease_put.map_or("n/a".to_string(), |(b, n)| format!("{b:.0} over {n}")),
        r.kubelet_node
    );
    println!(
        "kubelet_leases_bytes_per_s={kubelets:.0} ({} x {lease_body:.0} bytes / 10 s)",
        rest.reporters
    );
    println!("ratio={:.3} (goal <= 0.1)", ours / kubelets.max(1.0));
    let stored = reporters::profile_stored_bytes(c, &shape::node_name(0)).await? as f64;
    let stored_rate = writes * stored / secs;
    println!(
        "stored_bytes_per_s={stored_rate:.0} (every write stores the whole profile, {stored:.0} bytes as JSON; \
         kubelets: {:.0} bytes/s of {lease_pb}-byte Leases; ratio {:.2})",
        rest.reporters as f64 * lease_pb as f64 / 10.0,
        stored_rate / (rest.reporters as f64 * lease_pb as f64 / 10.0).max(1.0)
    );
    println!(
        "change_to_api_ms p50={} max={} (samples {})",
        reporters::percentile(&latencies, 0.5).as_millis(),
        reporters::percentile(&latencies, 1.0).as_millis(),
        latencies.len()
    );
    print!("{}", d.writes_table(rest.reporters));
    Ok(())
}

fn audit_check(
    log: &std::path::Path,
    since_ms: i64,
    until_ms: i64,
    only_node: Option<&str>,
    cold_start_nodes: Option<usize>,
    resources: &[String],
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(log)?;
    let ws = audit::writes(&text, since_ms, until_ms, USER_AGENT);
    for (what, n) in audit::by_resource(&ws) {
        println!("audit: {what}: {n}");
    }
    // The hollow nodes' objects only: kubelets and controllers of the two
    // real nodes write events of their own meanwhile.
    let considered: Vec<&audit::Write> = ws
        .iter()
        .filter(|w| resources.contains(&w.resource) && w.name.starts_with("hollow-"))
        .collect();
    for w in considered.iter().take(40) {
        println!("audit: write {} {} {}", w.verb, w.resource, w.name);
    }
    println!("audit_writes={}", considered.len());
    if let Some(node) = only_node {
        let others: Vec<String> = considered
            .iter()
            .filter(|w| !audit::concerns(w, node))
            .map(|w| format!("{} {} {}", w.verb, w.resource, w.name))
            .collect();
        anyhow::ensure!(
            others.is_empty(),
            "writes concerning other objects than {node}: {}",
            others.join(", ")
        );
        println!("audit: every write concerns {node}");
    }
    if let Some(nodes) = cold_start_nodes {
        let degraded = (0..nodes).filter(|&i| shape::facts(i).critical).count();
        let most = 2 * nodes + 2 * degraded;
        anyhow::ensure!(
            considered.len() <= most,
            "{} writes for a cold start of {nodes} nodes ({degraded} degraded); at most {most} expected",
            considered.len()
        );
        println!("audit: at most {most} writes for {nodes} nodes ({degraded} degraded)");
    }
    Ok(())
}
