//! The reporter loop: wait for a reason to probe (start, nf_tables
//! notification burst, polled x_tables/sysctl change, heartbeat, retry),
//! probe, and hand the result to `core::SendState`, which decides whether
//! to write. All I/O comes in through `Prober`, `StatusSink`, the event
//! channel and the `Clock`, so tests drive it with fakes and paused time.

use super::core::{Backoff, Debounce, SendState, failed_probe_status};
use super::metrics::Metrics;
use super::nft_watch::Event;
use super::prober::Prober;
use super::sink::{SinkError, StatusSink};
use crate::runtime::clock::{Clock, rfc3339, unix_seconds};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

#[derive(Clone, Debug)]
pub struct LoopConfig {
    pub heartbeat: Duration,
    pub poll: Duration,
    pub debounce_quiet: Duration,
    pub debounce_max: Duration,
    pub backoff: Backoff,
    /// Give up on a single API write after this long (then back off).
    pub write_timeout: Duration,
    /// Exit after the first accepted write.
    pub once: bool,
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(60),
            poll: Duration::from_secs(10),
            debounce_quiet: Duration::from_millis(100),
            debounce_max: Duration::from_millis(300),
            backoff: Backoff::default(),
            write_timeout: Duration::from_secs(10),
            once: false,
        }
    }
}

pub struct Io<'a> {
    pub prober: &'a dyn Prober,
    pub sink: &'a mut dyn StatusSink,
    /// nf_tables notifications; None when unavailable (then only polling).
    pub nft_events: Option<mpsc::Receiver<Event>>,
    /// Wall-clock time for `lastProbeTime` and the metrics (tests fix it).
    pub clock: &'a dyn Clock,
    /// Uniform randomness in [0, 1) for back-off jitter.
    pub jitter: &'a mut (dyn FnMut() -> f64 + Send),
    pub metrics: Arc<Metrics>,
    /// Stops the loop when it changes to true.
    pub shutdown: watch::Receiver<bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error("writing the status failed: {0}")]
    OnceWriteFailed(#[source] SinkError),
}

/// Runs until `shutdown` (or, with `once`, the first accepted write).
pub async fn run_loop(cfg: &LoopConfig, mut io: Io<'_>) -> Result<(), LoopError> {
    let heartbeat_secs = u32::try_from(cfg.heartbeat.as_secs()).unwrap_or(u32::MAX);
    let mut state = SendState::new(cfg.heartbeat, cfg.backoff, Instant::now());
    let mut debounce = Debounce::new(cfg.debounce_quiet, cfg.debounce_max);
    let mut polled = io.prober.polled_state().await;
    let mut next_poll = Instant::now() + cfg.poll;
    let mut last_good = None;
    let mut probe_now = true;
    let mut shutdown = io.shutdown.clone();
    loop {
        io.metrics.tick(unix_seconds(io.clock.now()));
        if probe_now {
            probe_now = false;
            io.metrics.probes.inc();
            let mut status = match io.prober.probe().await {
                Ok(s) => {
                    last_good = Some(s.clone());
                    s
                }
                Err(e) => {
                    io.metrics.probe_failures.inc();
                    tracing::warn!(error = %e, "node probe failed; reporting it");
                    failed_probe_status(last_good.as_ref(), &e.to_string())
                }
            };
            status.last_probe_time = Some(rfc3339(io.clock.now()));
            status.probe_interval_seconds = Some(heartbeat_secs);
            state.on_probe(status, Instant::now());
        }
        if let Some(status) = state.to_send(Instant::now()).cloned() {
            let res = match tokio::time::timeout(cfg.write_timeout, io.sink.write(&status)).await {
                Ok(r) => r,
                Err(_) => Err(SinkError::Timeout(cfg.write_timeout)),
            };
            match res {
                Ok(()) => {
                    state.on_sent(Instant::now());
                    io.metrics.writes.inc();
                    io.metrics
                        .last_write_timestamp
                        .set(unix_seconds(io.clock.now()));
                    io.metrics.set_ready();
                    tracing::info!(
                        hazards = status.hazards.as_ref().map_or(0, Vec::len),
                        probe_error = status.probe_error.is_some(),
                        "status written"
                    );
                    if cfg.once {
                        return Ok(());
                    }
                }
                Err(e) => {
                    io.metrics.write_failures.inc();
                    if cfg.once {
                        return Err(LoopError::OnceWriteFailed(e));
                    }
                    let delay = state.on_failed(Instant::now(), (io.jitter)());
                    tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64,
                        failures = state.failures(), "status write failed; backing off");
                }
            }
        }

        let mut wake = state.next_wake().min(next_poll);
        if let Some(d) = debounce.deadline() {
            wake = wake.min(d);
        }
        let events_open = io.nft_events.is_some();
        tokio::select! {
            ev = async {
                match io.nft_events.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            }, if events_open => match ev {
                Some(ev) => {
                    io.metrics.nft_notifications.inc();
                    if ev == Event::Overflow {
                        tracing::debug!("nf_tables notifications overflowed; probing anyway");
                    }
                    debounce.record(Instant::now());
                }
                None => {
                    tracing::warn!("nf_tables notifications stopped; relying on polling");
                    io.nft_events = None;
                }
            },
            _ = tokio::time::sleep_until(wake) => {}
            r = shutdown.changed() => {
                if r.is_err() || *shutdown.borrow() {
                    return Ok(());
                }
            }
        }

        let now = Instant::now();
        if debounce.take_due(now) {
            probe_now = true;
        }
        if now >= next_poll {
            next_poll = now + cfg.poll;
            let fresh = io.prober.polled_state().await;
            if fresh != polled {
                io.metrics.xt_changes.inc();
                polled = fresh;
                probe_now = true;
            } else if polled.is_none() && io.nft_events.is_none() {
                // Neither notifications nor a snapshot to compare: only a
                // full probe can notice a change.
                probe_now = true;
            }
        }
        if state.retry_due(now) || (!state.has_pending() && state.heartbeat_due(now)) {
            probe_now = true;
        }
    }
}
