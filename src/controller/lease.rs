//! Leader election on a `coordination.k8s.io/v1` Lease (kube-runtime has
//! none). The client-go scheme: the holder renews `renewTime` every retry
//! period; anyone may take the Lease over once `renewTime +
//! leaseDurationSeconds` has passed; writes are a PUT carrying the
//! resourceVersion read, so of two contenders exactly one wins (the other
//! gets 409 Conflict). A holder that could not renew within its renew
//! deadline (shorter than the lease duration) stops leading before anyone
//! else may start. Time comes from a [`Clock`], so every step is testable.

use crate::runtime::clock::Clock;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// How long a renewal is valid for others.
    pub lease_duration: Duration,
    /// A leader that has not renewed for this long stops leading (< lease_duration).
    pub renew_deadline: Duration,
    /// Time between attempts.
    pub retry_period: Duration,
}

impl LeaseConfig {
    pub fn new(name: &str, namespace: &str, identity: &str) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What to do with the Lease as found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Free, or its holder's renewal expired: take it.
    Acquire,
    /// Ours: renew it.
    Renew,
    /// Someone else holds it until `until`.
    Wait { holder: String, until: Timestamp },
}

fn sd(d: Duration) -> SignedDuration {
    SignedDuration::try_from(d).unwrap_or(SignedDuration::MAX)
}

/// Pure: the decision for `me` at `now`.
pub fn decide(spec: Option<&LeaseSpec>, me: &str, now: Timestamp) -> Decision {
    let Some(spec) = spec else {
        return Decision::Acquire;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder.is_empty() {
        return Decision::Acquire;
    }
    if holder == me {
        return Decision::Renew;
    }
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    let duration =
        SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(0).max(0)));
    match renewed.and_then(|r| r.checked_add(duration).ok()) {
        Some(until) if now < until => Decision::Wait {
            holder: holder.to_string(),
            until,
        },
        // Expired, or no renew time at all: a crashed holder never blocks forever.
        _ => Decision::Acquire,
    }
}

/// Pure: the spec to write for an Acquire or Renew decision.
pub fn next_spec(
    current: Option<&LeaseSpec>,
    me: &str,
    now: Timestamp,
    lease_duration: Duration,
) -> LeaseSpec {
    let previous_holder = current
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty());
    let transitions = current.and_then(|s| s.lease_transitions).unwrap_or(0);
    let ours = previous_holder == Some(me);
    LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(lease_duration.as_secs().clamp(1, i32::MAX as u64) as i32),
        acquire_time: if ours {
            current.and_then(|s| s.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        // As client-go counts: every change of holder, including taking over
        // a released Lease (empty holder); only a brand-new Lease starts at 0.
        lease_transitions: Some(if ours || current.is_none() {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        ..Default::default()
    }
}

/// Tracks whether this replica leads, from the outcome of each attempt.
#[derive(Clone, Debug, Default)]
pub struct Leadership {
    last_renewal: Option<Timestamp>,
}

impl Leadership {
    /// After a successful acquire/renew.
    pub fn renewed(&mut self, now: Timestamp) {
        self.last_renewal = Some(now);
    }

    /// Someone else holds the Lease (or won the race).
    pub fn lost(&mut self) {
        self.last_renewal = None;
    }

    /// Whether we still lead at `now`: a renewal within the renew deadline.
    /// An API error alone does not end leadership; running out of time does.
    pub fn leading(&self, now: Timestamp, renew_deadline: Duration) -> bool {
        self.last_renewal
            .and_then(|t| t.checked_add(sd(renew_deadline)).ok())
            .is_some_and(|until| now < until)
    }
}

pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    clock: Arc<dyn Clock>,
    leadership: Leadership,
}

impl LeaderElector {
    pub fn new(client: kube::Client, config: LeaseConfig, clock: Arc<dyn Clock>) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            clock,
            leadership: Leadership::default(),
        }
    }

    fn err(&self, source: kube::Error) -> LeaseError {
        LeaseError::Api {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    /// One attempt: read the Lease, create / take over / renew it, or wait.
    /// Ok(true) when we hold it afterwards; a 409 (lost race) is Ok(false).
    async fn attempt(&self) -> Result<bool, LeaseError> {
        let me = self.config.identity.as_str();
        let now = self.clock.now();
        let current = match self.api.get_opt(&self.config.name).await {
            Ok(c) => c,
            Err(e) => return Err(self.err(e)),
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(next_spec(None, me, now, self.config.lease_duration)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(self.err(e)),
            };
        };
        match decide(lease.spec.as_ref(), me, now) {
            Decision::Wait { holder, until } => {
                tracing::debug!(%holder, %until, "lease held by another replica");
                Ok(false)
            }
            d @ (Decision::Acquire | Decision::Renew) => {
                if d == Decision::Acquire {
                    let from = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
                    tracing::info!(?from, identity = me, "taking the lease");
                }
                lease.spec = Some(next_spec(
                    lease.spec.as_ref(),
                    me,
                    now,
                    self.config.lease_duration,
                ));
                // resourceVersion stays set: the PUT fails with 409 if anyone wrote meanwhile.
                match self
                    .api
                    .replace(&self.config.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(self.err(e)),
                }
            }
        }
    }

    /// One round: attempt, then say whether we lead now.
    pub async fn round(&mut self) -> bool {
        match self.attempt().await {
            Ok(true) => self.leadership.renewed(self.clock.now()),
            Ok(false) => self.leadership.lost(),
            Err(e) => tracing::warn!(error = %e, "lease renewal failed"),
        }
        self.leadership
            .leading(self.clock.now(), self.config.renew_deadline)
    }

    /// Give the Lease up (graceful shutdown) so a standby takes over at once.
    pub async fn release(&self) -> Result<(), LeaseError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.err(e))?
        else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Attempt every retry period and publish leadership on `tx` until
    /// `stop` fires; then release the Lease if held.
    pub async fn run(mut self, tx: watch::Sender<bool>, mut stop: watch::Receiver<bool>) {
        loop {
            let leading = self.round().await;
            tx.send_if_modified(|cur| {
                let changed = *cur != leading;
                *cur = leading;
                changed
            });
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_period) => {}
                _ = stop.changed() => break,
            }
        }
        if *tx.borrow() {
            let _ = tx.send(false);
            if let Err(e) = self.release().await {
                tracing::warn!(error = %e, "releasing the lease failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn held(by: &str, renewed: &str, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(by.into()),
            renew_time: Some(MicroTime(ts(renewed))),
            lease_duration_seconds: Some(secs),
            lease_transitions: Some(4),
            ..Default::default()
        }
    }

    #[test]
    fn free_or_missing_lease_is_acquired() {
        let now = ts("2026-01-01T00:00:00Z");
        assert_eq!(decide(None, "a", now), Decision::Acquire);
        assert_eq!(
            decide(Some(&LeaseSpec::default()), "a", now),
            Decision::Acquire
        );
    }

    #[test]
    fn own_lease_is_renewed_others_waited_for_until_expiry() {
        let spec = held("b", "2026-01-01T00:00:00Z", 15);
        assert_eq!(
            decide(Some(&spec), "b", ts("2026-01-01T00:00:05Z")),
            Decision::Renew
        );
        assert_eq!(
            decide(Some(&spec), "a", ts("2026-01-01T00:00:14Z")),
            Decision::Wait {
                holder: "b".into(),
                until: ts("2026-01-01T00:00:15Z")
            }
        );
        assert_eq!(
            decide(Some(&spec), "a", ts("2026-01-01T00:00:15Z")),
            Decision::Acquire
        );
    }

    #[test]
    fn takeover_counts_a_transition_renewal_keeps_acquire_time() {
        let spec = held("b", "2026-01-01T00:00:00Z", 15);
        let now = ts("2026-01-01T00:01:00Z");
        let taken = next_spec(Some(&spec), "a", now, Duration::from_secs(15));
        assert_eq!(taken.holder_identity.as_deref(), Some("a"));
        assert_eq!(taken.lease_transitions, Some(5));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        let later = ts("2026-01-01T00:01:02Z");
        let renewed = next_spec(Some(&taken), "a", later, Duration::from_secs(15));
        assert_eq!(renewed.lease_transitions, Some(5));
        assert_eq!(renewed.acquire_time, Some(MicroTime(now)));
        assert_eq!(renewed.renew_time, Some(MicroTime(later)));
    }

    #[test]
    fn taking_a_released_lease_counts_a_transition_a_new_one_does_not() {
        let now = ts("2026-01-01T00:01:00Z");
        let released = LeaseSpec {
            holder_identity: Some(String::new()),
            lease_transitions: Some(4),
            ..Default::default()
        };
        let taken = next_spec(Some(&released), "a", now, Duration::from_secs(15));
        assert_eq!(taken.lease_transitions, Some(5));
        let created = next_spec(None, "a", now, Duration::from_secs(15));
        assert_eq!(created.lease_transitions, Some(0));
    }

    #[test]
    fn leadership_ends_when_renewals_fail_past_the_deadline() {
        let mut l = Leadership::default();
        let t0 = ts("2026-01-01T00:00:00Z");
        assert!(!l.leading(t0, Duration::from_secs(10)));
        l.renewed(t0);
        assert!(l.leading(ts("2026-01-01T00:00:09Z"), Duration::from_secs(10)));
        assert!(!l.leading(ts("2026-01-01T00:00:10Z"), Duration::from_secs(10)));
        l.renewed(ts("2026-01-01T00:00:11Z"));
        l.lost();
        assert!(!l.leading(ts("2026-01-01T00:00:12Z"), Duration::from_secs(10)));
    }
}
