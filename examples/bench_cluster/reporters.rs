//! N simulated reporters at rest: the real reporter loop
//! (`reporter::run::run_loop`: heartbeat cadence, change detection,
//! back-off) and its real API sink (`ProfileWriter`), with only the node
//! probe replaced by the hollow node's facts. Measures what they write
//! while nothing changes, against what N kubelets' Lease renewals write,
//! and how long one changed ruleset takes to reach the API.

use crate::apimetrics;
use crate::shape;
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use nfguard::api::{BridgeFacts, NodeNetfilterProfile, NodeNetfilterProfileStatus};
use nfguard::reporter::metrics::Metrics;
use nfguard::reporter::nft_watch::Event as NftEvent;
use nfguard::reporter::prober::{PolledState, ProbeError, Prober};
use nfguard::reporter::profile_api::ProfileWriter;
use nfguard::reporter::run::{Io, LoopConfig, run_loop};
use nfguard::reporter::sink::KubeSink;
use nfguard::runtime::clock::SystemClock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// A hollow node's probe: its facts, changeable from outside.
struct HollowProber {
    status: Arc<Mutex<NodeNetfilterProfileStatus>>,
}

#[async_trait::async_trait]
impl Prober for HollowProber {
    async fn probe(&self) -> Result<NodeNetfilterProfileStatus, ProbeError> {
        Ok(self
            .status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone())
    }

    /// Constant: nothing changes behind the notifications' back.
    async fn polled_state(&self) -> Option<PolledState> {
        Some(PolledState {
            nft_generation: Some(1),
            legacy: Err("hollow node".into()),
            bridge: BridgeFacts::default(),
            ip_forward: Some(true),
        })
    }
}

/// One running simulated reporter: its facts and its notification channel.
struct Handle {
    status: Arc<Mutex<NodeNetfilterProfileStatus>>,
    events: mpsc::Sender<NftEvent>,
    metrics: Arc<Metrics>,
}

pub struct Fleet {
    reporters: Vec<Handle>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Start `n` reporters, their starts spread over `ramp` (a fleet does not
/// start in lockstep, and its heartbeats then stay spread).
pub fn start(client: &kube::Client, n: usize, heartbeat: Duration, ramp: Duration) -> Fleet {
    let (stop, stop_rx) = watch::channel(false);
    let mut reporters = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..n {
        let status = Arc::new(Mutex::new(shape::status(shape::facts(i), "", 0)));
        let (events, rx) = mpsc::channel(16);
        let metrics = Metrics::new(3 * heartbeat.as_secs() as i64);
        reporters.push(Handle {
            status: status.clone(),
            events,
            metrics: metrics.clone(),
        });
        let client = client.clone();
        let shutdown = stop_rx.clone();
        let delay = ramp.mul_f64(i as f64 / n.max(1) as f64);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let cfg = LoopConfig {
                heartbeat,
                ..Default::default()
            };
            let prober = HollowProber { status };
            let mut sink = KubeSink(ProfileWriter::new(client, shape::node_name(i)));
            let mut jitter = rand::random::<f64>;
            let io = Io {
                prober: &prober,
                sink: &mut sink,
                nft_events: Some(rx),
                clock: &SystemClock,
                jitter: &mut jitter,
                metrics,
                shutdown,
            };
            if let Err(e) = run_loop(&cfg, io).await {
                eprintln!("bench: reporter {i}: {e}");
            }
        }));
    }
    Fleet {
        reporters,
        stop,
        tasks,
    }
}

impl Fleet {
    /// Wait until every reporter's first write was accepted.
    pub async fn wait_written(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let written = self
                .reporters
                .iter()
                .filter(|r| r.metrics.writes.get() > 0)
                .count();
            if written == self.reporters.len() {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "only {written}/{} simulated reporters wrote within {timeout:?}",
                self.reporters.len()
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Change node `i`'s facts (an iptables upgrade) and notify its
    /// reporter as nf_tables would; returns the new version.
    pub async fn change(&self, i: usize) -> anyhow::Result<String> {
        let f = shape::changed(shape::facts(i));
        let r = &self.reporters[i];
        *r.status.lock().unwrap_or_else(|e| e.into_inner()) = shape::status(f, "", 0);
        r.events.send(NftEvent::Changed).await?;
        Ok(f.version.to_string())
    }

    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Time from a changed ruleset on node `i` to its profile showing it.
pub async fn change_latency(
    client: &kube::Client,
    fleet: &Fleet,
    i: usize,
) -> anyhow::Result<Duration> {
    let name = shape::node_name(i);
    let api: Api<NodeNetfilterProfile> = Api::all(client.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher::watcher(api, cfg).boxed();
    // Listed first, so the change cannot slip in before the watch.
    while let Some(ev) = events.next().await {
        if matches!(ev?, Event::InitDone) {
            break;
        }
    }
    let started = Instant::now();
    let want = fleet.change(i).await?;
    let shows = |p: &NodeNetfilterProfile| {
        p.status
            .as_ref()
            .and_then(|s| s.iptables.as_ref())
            .and_then(|f| f.version)
            .is_some_and(|v| v.to_string() == want)
    };
    let wait = async {
        while let Some(ev) = events.next().await {
            if let Event::Apply(p) = ev?
                && shows(&p)
            {
                return Ok(started.elapsed());
            }
        }
        anyhow::bail!("the watch of {name} ended")
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .map_err(|_| anyhow::anyhow!("{name}'s change did not reach the API within 30 s"))?
}

/// The bytes of a kubelet's Lease as it sends them (protobuf, kubelet's
/// wire format for core and coordination types), read back from the API.
pub async fn lease_protobuf_bytes(client: &kube::Client, node: &str) -> anyhow::Result<usize> {
    let req = http::Request::get(format!(
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
    ))
    .header(http::header::ACCEPT, "application/vnd.kubernetes.protobuf")
    .body(kube::client::Body::empty())?;
    let resp = client.send(req).await?;
    anyhow::ensure!(
        resp.status().is_success(),
        "GET lease {node}: {}",
        resp.status()
    );
    Ok(resp.into_body().collect_bytes().await?.len())
}

/// The bytes of `node`'s profile as stored (custom resources are kept as
/// JSON): what etcd writes on each heartbeat, whatever the request's size.
pub async fn profile_stored_bytes(client: &kube::Client, node: &str) -> anyhow::Result<usize> {
    let req = http::Request::get(format!(
        "/apis/nfguard.io/v1alpha1/nodenetfilterprofiles/{node}"
    ))
    .body(Vec::new())?;
    Ok(client.request_text(req).await?.len())
}

pub struct AtRest {
    pub window: Duration,
    pub reporters: usize,
    pub delta: apimetrics::Delta,
}

/// Measure the API writes over `window` with the fleet at rest.
pub async fn at_rest(
    client: &kube::Client,
    reporters: usize,
    window: Duration,
) -> anyhow::Result<AtRest> {
    let before = apimetrics::snapshot(client).await?;
    tokio::time::sleep(window).await;
    let after = apimetrics::snapshot(client).await?;
    Ok(AtRest {
        window,
        reporters,
        delta: apimetrics::delta(&before, &after),
    })
}

/// Percentile `q` (0..=1) of sorted samples.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_sorted_samples() {
        let s: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&s, 0.5), Duration::from_millis(51));
        assert_eq!(percentile(&s, 0.99), Duration::from_millis(99));
        assert_eq!(percentile(&s, 1.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }
}
