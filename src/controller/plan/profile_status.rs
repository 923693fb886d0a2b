//! The profile's controller-owned status: the conditions, the writer
//! inventory, and the running pods a `action: Taint` policy finds unsafe
//! (judged against the profile as it will be, with its new writers).

use super::{EventTarget, NodeFacts, PlannedEvent, Violation, running_scene, taint_subjects};
use crate::api::{NodeNetfilterProfile, NodeNetfilterProfileStatus};
use crate::compat::evaluate::{Candidate, Reason};
use crate::controller::plan::conditions::{self, ConditionStatus, ConditionType, fresh_until};
use crate::controller::plan::inventory::{self, Inventory};
use crate::facts::{Platform, Severity};
use crate::judgement::Subject;
use crate::projection::PodFacts;
use std::time::Duration;

/// What the status step plans.
#[derive(Default)]
pub(super) struct StatusPlan {
    /// The controller-owned fields to apply; None when in sync.
    pub status: Option<NodeNetfilterProfileStatus>,
    /// The taint's cause: running pods found unsafe.
    pub violations: Vec<Violation>,
    pub events: Vec<PlannedEvent>,
    /// When the heartbeat turns stale.
    pub requeue_after: Option<Duration>,
}

/// Plan the status of the node's `profile`.
pub(super) fn plan_status(
    facts: &NodeFacts<'_>,
    profile: &NodeNetfilterProfile,
    platform: &Platform,
) -> StatusPlan {
    let mut plan = StatusPlan::default();
    let status = profile.status.as_ref();
    let empty = NodeNetfilterProfileStatus::default();
    let current = status.unwrap_or(&empty);
    let Inventory {
        writers,
        newest_writer_version,
        oldest_reader_version,
    } = inventory::inventory(facts.pods.iter().copied(), status, facts.images, platform);
    let previous = current.conditions.as_deref().unwrap_or(&[]);
    let conds = conditions::conditions(current, previous, facts.now, profile.metadata.generation);
    for c in &conds {
        let before = previous.iter().find(|p| p.type_ == c.type_);
        // A condition's first value is news only when it is not True.
        let changed = match before {
            Some(b) => b.status != c.status,
            None => c.status != ConditionStatus::True.as_str(),
        };
        if changed {
            plan.events.push(PlannedEvent {
                warning: c.status != "True",
                reason: "ConditionChanged",
                action: condition_action(&c.type_, &c.status),
                note: format!(
                    "{} {} -> {} ({}): {}",
                    c.type_,
                    before.map_or("none", |b| b.status.as_str()),
                    c.status,
                    c.reason,
                    c.message
                ),
                target: EventTarget::Profile,
                related_pod: None,
            });
        }
    }
    let mut desired = NodeNetfilterProfileStatus {
        conditions: Some(conds),
        writers: Some(writers),
        newest_writer_version,
        oldest_reader_version,
        ..Default::default()
    };
    // Within the CRD's bounds, as written: compared with what was written.
    desired.fit_bounds();
    if desired.writers != current.writers && current.writers.is_some() {
        let n = desired.writers.as_ref().map_or(0, Vec::len);
        plan.events.push(PlannedEvent {
            warning: false,
            reason: "WritersChanged",
            action: "UpdateStatus",
            note: format!("{n} container(s) on this node can write its iptables rules"),
            target: EventTarget::Profile,
            related_pod: None,
        });
    }
    // Judge running workloads against the profile as it will be (new
    // writers); the copy is only made when some pod is to be judged.
    let subjects = taint_subjects(facts.pods, facts.policies);
    if !subjects.is_empty() {
        let in_sync = desired.writers == current.writers
            && desired.newest_writer_version == current.newest_writer_version
            && desired.oldest_reader_version == current.oldest_reader_version;
        plan.violations = if in_sync {
            violations(facts, &subjects, profile, platform)
        } else {
            judge_with_writers(profile, &mut desired, |merged| {
                violations(facts, &subjects, merged, platform)
            })
        };
    }
    if super::controller_fields(current) != desired {
        plan.status = Some(desired);
    }
    if let Some(until) = fresh_until(current)
        && facts.now <= until
    {
        let secs = until.as_second() - facts.now.as_second() + 1;
        plan.requeue_after = Some(Duration::from_secs(secs.max(1) as u64));
    }
    plan
}

/// The event action for a condition's new status. kube-runtime's recorder
/// folds events with the same type, reason and action on one object into a
/// series for six minutes and keeps only the first note, so one action for
/// every condition change hid e.g. `Healthy True -> False` behind the
/// `Fresh` change before it (seen on a real cluster).
fn condition_action(type_: &str, status: &str) -> &'static str {
    use ConditionStatus as S;
    use ConditionType as T;
    let (Some(t), Some(s)) = (T::parse(type_), S::parse(status)) else {
        return "UpdateStatus";
    };
    match (t, s) {
        (T::Fresh, S::True) => "SetFreshTrue",
        (T::Fresh, S::False) => "SetFreshFalse",
        (T::Fresh, S::Unknown) => "SetFreshUnknown",
        (T::Healthy, S::True) => "SetHealthyTrue",
        (T::Healthy, S::False) => "SetHealthyFalse",
        (T::Healthy, S::Unknown) => "SetHealthyUnknown",
        (T::Consistent, S::True) => "SetConsistentTrue",
        (T::Consistent, S::False) => "SetConsistentFalse",
        (T::Consistent, S::Unknown) => "SetConsistentUnknown",
    }
}

/// Runs `judge` on the profile as it will be once the desired writer
/// inventory is applied. Copies only what `evaluate` can read: not the
/// metadata (managedFields grow large) nor the conditions, and lends the
/// desired writers instead of cloning them.
fn judge_with_writers<R>(
    profile: &NodeNetfilterProfile,
    desired: &mut NodeNetfilterProfileStatus,
    judge: impl FnOnce(&NodeNetfilterProfile) -> R,
) -> R {
    let empty = NodeNetfilterProfileStatus::default();
    let s = profile.status.as_ref().unwrap_or(&empty);
    // The reporter's facts (the conditions are never read by `evaluate`)
    // with the desired writers lent.
    let status = NodeNetfilterProfileStatus {
        writers: desired.writers.take(),
        newest_writer_version: desired.newest_writer_version,
        oldest_reader_version: desired.oldest_reader_version,
        ..s.reporter_fields()
    };
    let mut merged = NodeNetfilterProfile {
        metadata: Default::default(),
        spec: profile.spec.clone(),
        status: Some(status),
    };
    let out = judge(&merged);
    desired.writers = merged.status.take().and_then(|s| s.writers);
    out
}

/// The subjects the judgement finds unsafe on this node.
fn violations(
    facts: &NodeFacts<'_>,
    subjects: &[&PodFacts],
    profile: &NodeNetfilterProfile,
    platform: &Platform,
) -> Vec<Violation> {
    let name = facts.node.metadata.name.as_deref().unwrap_or("");
    let scene = running_scene(facts.policies);
    let mut out = Vec::new();
    for pod in subjects {
        let subject = Subject::RunningPod {
            pod,
            node: Candidate::new(name, platform.clone(), Some(profile)),
        };
        let prepared = scene.prepare(subject);
        // Only critical reasons make a violation: skip rendering the rest.
        let decision = prepared.decide(facts.images, Severity::Critical);
        if let Some(first) = decision.unsafe_reasons().next() {
            out.push(Violation {
                pod: pod.key(),
                codes: decision.unsafe_codes(),
                message: violation_message(first),
            });
        }
    }
    out
}

/// The reason's line, led by the container and image it is about: the
/// taint's event must say which image to replace (the message itself says
/// only "in the image").
fn violation_message(reason: &Reason) -> String {
    match (&reason.container, &reason.image) {
        (Some(c), Some(i)) => format!("container {c} ({i}): {}", reason.message),
        (None, Some(i)) => format!("{i}: {}", reason.message),
        _ => reason.message.clone(),
    }
}
