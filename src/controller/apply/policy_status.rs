//! NetfilterPolicy status: is the spec usable, and does nfguard judge with it?
//!
//! - `Valid`: True when [`validate_policy`] accepts the spec; False with a
//!   reason naming the bad field (`InvalidExemptImages`, ...) and a message
//!   saying which value and why.
//! - `Accepted`: True while the webhook and the controller judge with the
//!   policy; False (same reason) while they ignore it.
//!
//! [`plan`] is pure (the clock is an argument); [`run_policy_status`] is a
//! kube-runtime Controller that applies the plan with server-side apply
//! under the controller's field manager, only when it changes.

use crate::api::{Condition, NetfilterPolicy, NetfilterPolicyStatus};
use crate::compat::evaluate::validate_policy;
use crate::controller::FIELD_MANAGER;
use crate::controller::apply::node::event;
use crate::controller::metrics::{Metrics, Stage, StageLabel};
use crate::controller::plan::conditions::{ConditionStatus, condition, with_transition_times};
use crate::named::named_enum;
use crate::runtime::clock::Clock;
use crate::runtime::status_apply::StatusApply;
use futures::{FutureExt, StreamExt};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use std::sync::Arc;
use std::time::Duration;

/// Retry a failed status write after this long.
const RETRY: Duration = Duration::from_secs(30);
/// How often the invalid-policy gauge is recounted from the store besides
/// after each reconcile (deletions trigger none).
const RECOUNT: Duration = Duration::from_secs(10);

named_enum! {
    /// The policy's condition types.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum PolicyConditionType {
        Valid,
        Accepted,
    }
}

// Each type once: within the policy CRD's bound.
const _: () = assert!(PolicyConditionType::ALL.len() <= crate::api::bounds::POLICY_CONDITIONS);

/// An event about the policy (kube-runtime folds events of one reason and
/// action on one object into a series, so each direction has its own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// What the controller should write for one policy.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyPlan {
    /// The status to apply; None when already in sync.
    pub status: Option<NetfilterPolicyStatus>,
    /// Set when the policy turned invalid (first sight included), changed
    /// what is wrong with it, or turned valid again.
    pub event: Option<PolicyEvent>,
    pub valid: bool,
}

fn find(conditions: &[Condition], t: PolicyConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == t.as_str())
}

/// The status `policy` should carry at `now`.
pub fn plan(policy: &NetfilterPolicy, now: Timestamp) -> PolicyPlan {
    use ConditionStatus::{False, True};
    use PolicyConditionType::{Accepted, Valid};
    let name = policy.name_any();
    let validation = validate_policy(&policy.spec);
    let conditions = match &validation {
        Ok(()) => vec![
            condition(
                Valid.as_str(),
                True,
                "SpecValid",
                "every field can be used".into(),
            ),
            condition(
                Accepted.as_str(),
                True,
                "Judging",
                "the webhook and the controller judge the namespaces it selects with it".into(),
            ),
        ],
        Err(e) => vec![
            condition(Valid.as_str(), False, e.reason(), e.to_string()),
            condition(
                Accepted.as_str(),
                False,
                e.reason(),
                format!(
                    "ignored until {} is fixed: the webhook and the controller judge as if this policy did not exist (admissions it would select carry an InvalidPolicyIgnored warning)",
                    e.field()
                ),
            ),
        ],
    };
    let current = policy.status.clone().unwrap_or_default();
    let previous = current.conditions.as_deref().unwrap_or(&[]);
    let generation = policy.metadata.generation;
    let mut conditions = with_transition_times(conditions, previous, now, generation);
    // Within the CRD's bounds: the Valid message quotes the policy's patterns.
    crate::api::fit::fit_conditions(&mut conditions, crate::api::bounds::POLICY_CONDITIONS);
    let desired = NetfilterPolicyStatus {
        conditions: Some(conditions),
        observed_generation: generation,
    };
    let before = find(previous, Valid);
    let after = desired.conditions.as_deref().and_then(|cs| find(cs, Valid));
    let changed = before.map(|c| (&c.status, &c.message)) != after.map(|c| (&c.status, &c.message));
    let event = match (&validation, after) {
        (Err(_), Some(c)) if changed => Some(PolicyEvent {
            warning: true,
            reason: "PolicyInvalid",
            action: "Ignore",
            note: format!(
                "NetfilterPolicy {name} is ignored: {} ({})",
                c.message, c.reason
            ),
        }),
        // A valid policy seen for the first time is no news.
        (Ok(()), _) if changed && before.is_some() => Some(PolicyEvent {
            warning: false,
            reason: "PolicyValid",
            action: "Accept",
            note: format!("NetfilterPolicy {name} is valid again: nfguard judges with it"),
        }),
        _ => None,
    };
    PolicyPlan {
        status: (current != desired).then_some(desired),
        event,
        valid: validation.is_ok(),
    }
}

#[derive(Debug, thiserror::Error)]
#[error("NetfilterPolicy {policy}: applying its status: {source}")]
pub struct StatusError {
    policy: String,
    #[source]
    source: kube::Error,
}

struct Ctx {
    client: kube::Client,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    recorder: Recorder,
}

async fn reconcile(policy: Arc<NetfilterPolicy>, ctx: Arc<Ctx>) -> Result<Action, StatusError> {
    let name = policy.name_any();
    let p = plan(&policy, ctx.clock.now());
    if let Some(status) = &p.status {
        let api: Api<NetfilterPolicy> = Api::all(ctx.client.clone());
        api.patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(StatusApply::new::<NetfilterPolicy>(&name, status)),
        )
        .await
        .map_err(|source| {
            ctx.metrics
                .reconcile_errors
                .get_or_create(&StageLabel {
                    stage: Stage::policy_status,
                })
                .inc();
            StatusError {
                policy: name.clone(),
                source,
            }
        })?;
    }
    if let Some(e) = &p.event {
        if e.warning {
            tracing::warn!(policy = %name, note = %e.note, "NetfilterPolicy invalid: ignored");
        } else {
            tracing::info!(policy = %name, "NetfilterPolicy valid again");
        }
        let event = event(e.warning, e.reason, e.action, &e.note);
        if let Err(err) = ctx.recorder.publish(&event, &policy.object_ref(&())).await {
            tracing::warn!(error = %err, policy = %name, "publishing an event failed");
        }
    }
    // Conditions depend on the spec alone: nothing to do until it changes.
    Ok(Action::await_change())
}

fn error_policy(_p: Arc<NetfilterPolicy>, err: &StatusError, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(error = %err, "policy status failed");
    Action::requeue(RETRY)
}

/// Invalid policies among those the store holds.
fn count_invalid(store: &Store<NetfilterPolicy>) -> i64 {
    let n = store
        .state()
        .iter()
        .filter(|p| validate_policy(&p.spec).is_err())
        .count();
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Keep every NetfilterPolicy's status in step with its spec until `stop`
/// completes, and the `invalid_policies` gauge with the store. Like the node
/// gauges, the gauge keeps its last value after the term ends (queries
/// select the leader).
pub async fn run_policy_status(
    client: kube::Client,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    recorder: Recorder,
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::new(
        Api::<NetfilterPolicy>::all(client.clone()),
        watcher::Config::default(),
    );
    let store = controller.store();
    let ctx = Arc::new(Ctx {
        client,
        clock,
        metrics: metrics.clone(),
        recorder,
    });
    let run = controller
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| {
            if let Err(e) = res {
                tracing::debug!(error = %e, "policy status controller");
            }
            // After every reconcile: from the store.
            metrics.invalid_policies.set(count_invalid(&store));
            std::future::ready(())
        });
    // kube's Controller reconciles applied objects only: deleting a policy
    // triggers nothing, and the gauge (with NfguardPolicyInvalid) kept counting
    // a deleted invalid policy until some other policy changed (found by the
    // e2e's live Prometheus). Recount from the store on a tick as well.
    let recount = async {
        let mut tick = tokio::time::interval(RECOUNT);
        loop {
            tick.tick().await;
            if matches!(store.wait_until_ready().now_or_never(), Some(Ok(()))) {
                metrics.invalid_policies.set(count_invalid(&store));
            }
        }
    };
    tokio::select! {
        () = run => {}
        () = recount => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::NetfilterPolicySpec;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn policy(exempt: &[&str], generation: i64) -> NetfilterPolicy {
        let mut p = NetfilterPolicy::new(
            "team-net",
            NetfilterPolicySpec {
                exempt_images: exempt.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            },
        );
        p.metadata.generation = Some(generation);
        p
    }

    fn get(status: &NetfilterPolicyStatus, t: PolicyConditionType) -> &Condition {
        status
            .conditions
            .as_deref()
            .and_then(|cs| find(cs, t))
            .unwrap()
    }

    /// The policy as it reads after `plan`'s status was applied.
    fn applied(mut p: NetfilterPolicy, plan: &PolicyPlan) -> NetfilterPolicy {
        if let Some(s) = &plan.status {
            p.status = Some(s.clone());
        }
        p
    }

    #[test]
    fn an_invalid_policy_says_which_field_and_why_and_is_not_accepted() {
        let p = plan(&policy(&["ok:*", "a["], 4), ts("2026-01-01T00:00:00Z"));
        assert!(!p.valid);
        let status = p.status.as_ref().unwrap();
        assert_eq!(status.observed_generation, Some(4));
        let valid = get(status, PolicyConditionType::Valid);
        assert_eq!(
            (valid.status.as_str(), valid.reason.as_str()),
            ("False", "InvalidExemptImages")
        );
        assert!(
            valid.message.contains("exemptImages[1] \"a[\""),
            "{valid:?}"
        );
        assert_eq!(valid.observed_generation, Some(4));
        assert_eq!(valid.last_transition_time, "2026-01-01T00:00:00Z");
        let accepted = get(status, PolicyConditionType::Accepted);
        assert_eq!(
            (accepted.status.as_str(), accepted.reason.as_str()),
            ("False", "InvalidExemptImages")
        );
        let e = p.event.unwrap();
        assert!(e.warning && e.reason == "PolicyInvalid", "{e:?}");
        assert!(
            e.note.contains("team-net") && e.note.contains("a["),
            "{e:?}"
        );
    }

    #[test]
    fn writes_only_on_change_and_tells_each_transition_once() {
        let t0 = ts("2026-01-01T00:00:00Z");
        // First sight of a valid policy: status written, no event.
        let fresh = plan(&policy(&["ok:*"], 1), t0);
        assert!(fresh.valid && fresh.event.is_none());
        let status = fresh.status.as_ref().unwrap();
        assert_eq!(get(status, PolicyConditionType::Valid).status, "True");
        assert_eq!(get(status, PolicyConditionType::Accepted).status, "True");
        let p = applied(policy(&["ok:*"], 1), &fresh);
        // Nothing changed: nothing to write, nothing to tell.
        let again = plan(&p, ts("2026-01-01T00:05:00Z"));
        assert_eq!((again.status, again.event), (None, None));
        // The spec breaks (generation 2).
        let mut broken = p.clone();
        broken.spec.exempt_images.push("a[".into());
        broken.metadata.generation = Some(2);
        let t1 = ts("2026-01-01T00:10:00Z");
        let b = plan(&broken, t1);
        assert_eq!(b.event.as_ref().map(|e| e.reason), Some("PolicyInvalid"));
        let broken = applied(broken, &b);
        let status = broken.status.as_ref().unwrap();
        assert_eq!(
            get(status, PolicyConditionType::Valid).last_transition_time,
            "2026-01-01T00:10:00Z"
        );
        assert_eq!(plan(&broken, t1).event, None, "told once");
        // Fixed (generation 3): valid again, told, transition time moves.
        let mut fixed = broken.clone();
        fixed.spec.exempt_images.pop();
        fixed.metadata.generation = Some(3);
        let f = plan(&fixed, ts("2026-01-01T00:20:00Z"));
        let e = f.event.as_ref().unwrap();
        assert!(!e.warning && e.reason == "PolicyValid", "{e:?}");
        let status = f.status.as_ref().unwrap();
        assert_eq!(status.observed_generation, Some(3));
        assert_eq!(
            get(status, PolicyConditionType::Valid).last_transition_time,
            "2026-01-01T00:20:00Z"
        );
    }

    #[test]
    fn another_fault_in_an_invalid_policy_is_told_again() {
        let t = ts("2026-01-01T00:00:00Z");
        let first = policy(&["a["], 1);
        let p = applied(first.clone(), &plan(&first, t));
        let mut other = p.clone();
        other.spec.exempt_images = vec!["b{".into()];
        let o = plan(&other, t);
        assert!(o.event.unwrap().note.contains("b{"));
        // Same status (False): the transition time stays.
        assert_eq!(
            get(o.status.as_ref().unwrap(), PolicyConditionType::Valid).last_transition_time,
            "2026-01-01T00:00:00Z"
        );
    }
}
