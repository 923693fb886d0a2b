//! AdmissionReview v1 -> which object to judge -> the `check` pipeline for
//! one workload -> AdmissionReview v1 response.
//!
//! Policy for requests nfguard does not judge (documented in docs/webhook.md):
//! - not JSON / truncated / not an AdmissionReview / no `request.uid` /
//!   another apiVersion than `admission.k8s.io/v1`: HTTP 400 with a JSON
//!   `{"error": ...}` body (no uid to answer to; the API server then applies
//!   the webhook's failurePolicy).
//! - a well-formed review for a kind or operation nfguard does not judge:
//!   allowed (with a warning for unknown kinds, silently for DELETE/CONNECT).
//! - a judged kind with no object, or one nfguard cannot read: never shown
//!   safe, so the policy's `action` decides as for an unsafe finding (see
//!   [`Judge::unreadable`]).
//! - a judgement that does not finish within the budget: the policy's
//!   `unresolvedImages` decides, as for an image not inspected in time
//!   (see [`Judge::timed_out`]). Neither is ever admitted silently.
//! - a broken policy: judged with the valid ones, with a warning.

use super::decisions::{self, Answer, DecisionCache};
use super::facts::{Facts, Snapshot};
use super::images::ImageCache;
use super::metrics::Metrics;
use super::pod_update::images_changed;
pub use super::review::{API_VERSION, Request, ReviewError, parse_review};
use super::review::{Prepared, error_body, judged_images, response};
use crate::api::PolicyAction;
use crate::compat::evaluate::{
    Bounds, Decision, EXEMPTION_HINT, EffectivePolicy, ImageKey, ImageResolutions, Listed,
    NodeIndex, Reason, ReasonClass, ReasonCode, Verdict, Workload, WorkloadKind, unfinished,
};
use crate::facts::{Platform, Severity};
use crate::judgement::pull_secrets::PodPullSecrets;
use crate::judgement::{ResolveImages, Scene, Subject};
use crate::projection::PullSecretRefs;
use crate::registry::{Chain, PullSecrets};
use k8s_openapi::api::core::v1::PodSpec;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

/// Longest lists in a response (the API server caps warnings in size).
const MAX_WARNINGS: usize = 10;

/// Denying reasons a message names at most; the rest are counted.
const MAX_DENY_LINES: usize = 10;

/// Reasons an admission lists at most (see [`Bounds::max_reasons`]): more
/// than a message and its warnings show, and each lists every node it holds
/// on, so an answer costs at most 32 x nodes names however many containers
/// the workload has (20,000 containers of unresolved images on 5,000 nodes
/// listed 100 million names before). The verdict counts every reason.
pub const MAX_REASONS: usize = 32;

/// The webhook's look-up strategy for one request: its image cache, with
/// the pod's imagePullSecrets read only when an image is not cached yet.
struct AdmissionImages<'r> {
    cache: &'r ImageCache,
    /// For imagePullSecrets (cluster mode); None in file mode.
    pull_secrets: Option<&'r PodPullSecrets>,
    namespace: &'r str,
    pod_spec: &'r PodSpec,
    /// The digests read, for the audit annotation (see `judged_images`).
    judged: std::sync::Mutex<String>,
}

#[async_trait::async_trait]
impl ResolveImages for AdmissionImages<'_> {
    async fn resolve(&self, keys: &[ImageKey], deadline: Instant) -> ImageResolutions {
        let now = Instant::now();
        let budget = deadline.saturating_duration_since(now);
        let secrets = match self.pull_secrets {
            // A public image's answer holds for everyone: no Secret to read.
            Some(c) if keys.iter().any(|k| !self.cache.is_public(k)) => {
                // At most a quarter of the budget on reading Secrets.
                let until = now + budget / 4;
                let refs = PullSecretRefs::of(self.pod_spec);
                tokio::time::timeout_at(until, c.read(self.namespace, &refs))
                    .await
                    .unwrap_or_default()
            }
            _ => PullSecrets::default(),
        };
        // The pod's own pull secrets first, then the docker config.
        let credentials = Chain(vec![&secrets, self.cache.credentials()]);
        let out = self
            .cache
            .resolve(keys, &credentials, self.namespace, deadline, budget)
            .await;
        let read = judged_images(out.digests().map(|(i, p, d)| (i, p.to_string(), d)));
        *self.judged.lock().unwrap_or_else(|p| p.into_inner()) = read;
        out
    }
}

/// Everything needed to judge one request.
pub struct Judge {
    pub facts: Arc<Facts>,
    pub images: Arc<ImageCache>,
    /// For imagePullSecrets (cluster mode); None in file mode.
    pub pull_secrets: Option<PodPullSecrets>,
    pub metrics: Arc<Metrics>,
    /// The whole request's budget (`--timeout`).
    pub timeout: Duration,
    pub default_platform: Platform,
    pub max_nodes: usize,
    /// Answers for objects judged before under the same facts; None: off.
    pub decisions: Option<DecisionCache>,
}

/// The HTTP answer and bounded labels for metrics.
#[derive(Debug)]
pub struct ReviewOutcome {
    pub status: u16,
    /// JSON: an AdmissionReview, or `{"error": ...}` with status 400.
    pub body: Vec<u8>,
    /// A WorkloadKind name, "other" or "invalid".
    pub kind: &'static str,
    /// "allow", "warn", "deny", or "rejected".
    pub verdict: &'static str,
}

/// What to do with a well-formed request.
#[derive(Debug, PartialEq, Eq)]
pub enum Scope {
    Judge(WorkloadKind),
    /// Allowed without judging; Some(warning) when the kind is unknown.
    Skip(Option<String>),
}

/// Pods on CREATE, on an UPDATE that swaps a container image, and on UPDATE
/// of `ephemeralcontainers`; pod controllers on CREATE and UPDATE;
/// everything else passes.
pub fn scope(req: &Request<'_>) -> Scope {
    let Some(kind) = WorkloadKind::parse(&req.kind) else {
        return Scope::Skip(Some(format!(
            "nfguard does not judge kind {:?}; allowed without checks",
            req.kind
        )));
    };
    let op = &*req.operation;
    let judged = match (kind, req.sub_resource.as_deref()) {
        (WorkloadKind::Pod, None) => {
            op == "CREATE"
                || (op == "UPDATE"
                    && req.object.as_ref().is_some_and(|o| {
                        images_changed(req.old_object.as_ref().map(|o| o.json()), o.json())
                    }))
        }
        (WorkloadKind::Pod, Some("ephemeralcontainers")) => op == "UPDATE" || op == "CREATE",
        (_, None) => op == "CREATE" || op == "UPDATE",
        // status, scale, ...: do not change what runs.
        _ => false,
    };
    if judged {
        Scope::Judge(kind)
    } else {
        Scope::Skip(None)
    }
}

/// Message and warnings for a decision (what the user sees in kubectl);
/// `unlisted`: reasons the decision counted but does not list.
pub fn render_decision(
    object: &str,
    d: &Decision,
    unlisted: usize,
    max_nodes: usize,
) -> (bool, Option<String>, Vec<String>) {
    let warnings: Vec<String> = d
        .reasons
        .iter()
        .filter(|r| {
            // An override asked for is shown whatever became of it.
            r.effect == Verdict::Warn || r.code.meta().class == ReasonClass::Exemption
        })
        .take(MAX_WARNINGS)
        .map(|r| format!("nfguard: {}", r.line(max_nodes)))
        .collect();
    match d.verdict {
        Verdict::Deny => {
            let mut lines = d.lines(Verdict::Deny, max_nodes);
            // An annotation that did not count is part of why it is denied;
            // its remedy is the `Override:` below, said once.
            lines.extend(
                d.reasons
                    .iter()
                    .filter(|r| r.code == ReasonCode::ExemptionNotAllowed)
                    .map(|r| {
                        let bare = Reason {
                            remedy: None,
                            ..r.clone()
                        };
                        bare.line(max_nodes)
                    }),
            );
            let more = lines.len().saturating_sub(MAX_DENY_LINES) + unlisted;
            lines.truncate(MAX_DENY_LINES);
            if more > 0 {
                lines.push(format!(
                    "(+{more} more reasons; `nfguard check` lists them)"
                ));
            }
            let msg = format!(
                "nfguard denied {object}: {}. {} (Override: {}.)",
                denial_lead(d),
                lines.join(" | "),
                override_hint(d)
            );
            (false, Some(msg), warnings)
        }
        Verdict::Warn | Verdict::Allow => (true, None, warnings),
    }
}

/// Why it is denied: a finding, or only what nfguard could not judge.
fn denial_lead(d: &Decision) -> &'static str {
    let unjudged = d
        .reasons_at_least(Verdict::Deny)
        .all(|r| r.code.meta().class == ReasonClass::CannotEvaluate);
    if unjudged {
        "nfguard could not judge whether its netfilter tools (iptables, nft) are safe, and the NetfilterPolicy's unresolvedImages: Deny refuses what it cannot judge"
    } else {
        "its netfilter tools (iptables, nft) would break the networking of the nodes it lands on"
    }
}

/// Why an unreadable object is admitted (see `Judge::unreadable`).
fn why_admitted(policy: &EffectivePolicy) -> String {
    if policy.applies() {
        format!("the NetfilterPolicy's action is {:?}", policy.action)
    } else {
        format!(
            "no NetfilterPolicy selects namespace {}",
            policy.namespace()
        )
    }
}

/// The override a denial suggests: the annotation only where it counts.
fn override_hint(d: &Decision) -> &'static str {
    if d.exemptions_allowed {
        "annotate the workload nfguard.io/exempt: \"<reason>\""
    } else {
        EXEMPTION_HINT
    }
}

/// What one judgement is given besides the workload.
struct Run<'r> {
    /// Image look-ups end here.
    deadline: Instant,
    /// Judging stops here (None: it runs to the end).
    cutoff: Option<Instant>,
    max_reasons: usize,
    /// The policy it judges under, once known: a judgement stopped at the
    /// cut-off is answered by it.
    policy: &'r OnceLock<Arc<EffectivePolicy>>,
}

/// A finished judgement and the image digests it read (see `judged_images`).
struct Judged {
    listed: Listed,
    images: String,
}

impl Judge {
    /// Judge one workload through the one judgement path (as `nfguard
    /// check` and the controller do), with image look-ups bounded by
    /// `deadline`, every reason listed.
    pub async fn judge(&self, w: &Workload, deadline: Instant) -> Decision {
        let policy = OnceLock::new();
        let run = Run {
            deadline,
            cutoff: None,
            max_reasons: usize::MAX,
            policy: &policy,
        };
        let (_, snap) = self.facts.snapshot();
        match self.judge_reporting(w, run, &snap).await {
            Some(j) => j.listed.decision,
            None => unreachable!("a judgement without a cut-off finishes"),
        }
    }

    /// The steps of `Scene::judge` (prepare, resolve, decide), with the
    /// policy recorded as soon as it is known and judging stopped at
    /// `run.cutoff`: None then.
    async fn judge_reporting(&self, w: &Workload, run: Run<'_>, snap: &Snapshot) -> Option<Judged> {
        let profiles: Vec<_> = snap.profiles.iter().map(|p| p.as_ref()).collect();
        let nodes: Vec<_> = snap.nodes.iter().map(|n| n.as_ref()).collect();
        // Built with the snapshot in cluster mode; by the first request
        // for files.
        let index = snap
            .index
            .get_or_init(|| NodeIndex::new(&profiles, &nodes, &self.default_platform));
        let scene = Scene {
            profiles: &profiles,
            nodes: &nodes,
            policies: &snap.policies,
            default_platform: &self.default_platform,
            index: Some(index),
        };
        let namespace = w.namespace.as_deref().unwrap_or("default");
        // Known before anything costly: a judgement stopped anywhere is
        // answered by it (memoized per facts generation, as `prepare` reads it).
        let _ = run.policy.set(snap.policies.for_namespace(namespace));
        // Nothing here awaits: the cut-off is checked inside each costly
        // step, so it ends there instead of running on.
        let stop = || run.cutoff.is_some_and(|c| Instant::now() >= c);
        let prepared = scene.prepare_within(Subject::Workload(w), &stop)?;
        let images = AdmissionImages {
            cache: &self.images,
            pull_secrets: self.pull_secrets.as_ref(),
            namespace,
            pod_spec: &w.pod_spec,
            judged: Default::default(),
        };
        let resolved = if prepared.images.is_empty() {
            ImageResolutions::new()
        } else {
            let deadline = prepared.registry_deadline(run.deadline);
            images.resolve(&prepared.images, deadline).await
        };
        let bounds = Bounds {
            max_reasons: run.max_reasons,
            stop: &stop,
        };
        let listed = prepared.decide_within(&resolved, Severity::Info, bounds)?;
        let images = images
            .judged
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
        Some(Judged { listed, images })
    }

    /// The whole review: body bytes in, HTTP status + JSON out. Never panics
    /// on input; bounded by `self.timeout` (minus a margin for the reply).
    pub async fn review(&self, body: &[u8]) -> ReviewOutcome {
        let start = Instant::now();
        let req = match parse_review(body) {
            Ok(r) => r,
            Err(e) => {
                self.metrics
                    .rejected
                    .get_or_create(&[("cause", e.cause())])
                    .inc();
                return ReviewOutcome {
                    status: 400,
                    body: error_body(&e.to_string()),
                    kind: "invalid",
                    verdict: "rejected",
                };
            }
        };
        let kind = match scope(&req) {
            Scope::Skip(warning) => {
                let label = WorkloadKind::parse(&req.kind).map_or("other", WorkloadKind::as_str);
                let warnings: Vec<String> = warning.into_iter().collect();
                return ReviewOutcome {
                    status: 200,
                    body: response(&req.uid, true, None, &warnings, "skipped"),
                    kind: label,
                    verdict: "allow",
                };
            }
            Scope::Judge(k) => k,
        };
        let Some(object) = req.object.as_ref() else {
            return self.unreadable(&req, kind, "incomplete", "the request has no object");
        };
        // The facts judged with, and the image generation, are read before
        // judging: the answer is cached under the generation it was judged
        // at (a newer one may be building, or a change come while judging).
        let (generation, snap) = self.facts.snapshot();
        let cached = self.decisions.as_ref().map(|cache| {
            let key = decisions::Key::new(
                (generation, self.images.epoch()),
                kind,
                req.namespace.as_deref(),
                object.json(),
            );
            (cache, key)
        });
        if let Some((cache, key)) = &cached {
            if let Some(answer) = cache.get(key) {
                self.metrics.decision_cache_hits.inc();
                return self.answer(&req, kind, &answer);
            }
            self.metrics.decision_cache_misses.inc();
        }
        let mut w = match Workload::of_kind_json(kind, object.json()) {
            Ok(w) => w,
            Err(e) => return self.unreadable(&req, kind, "unreadable_object", &e.to_string()),
        };
        // Judged in the request's namespace (its policy, its pull secrets).
        // The API server validates the object's against it, so one that
        // differs is a forged review, refused whatever the policy says.
        if let (Some(asked), Some(own)) = (req.namespace.as_deref(), w.namespace.as_deref())
            && asked != own
        {
            return self.forged(&req, kind, asked, own);
        }
        w.namespace = req.namespace.as_deref().map(str::to_string);
        // Leave a margin to serialize and send the answer.
        let margin = (self.timeout / 10).min(Duration::from_millis(500));
        let deadline = start + self.timeout.saturating_sub(margin);
        let cutoff = deadline + margin / 2;
        let policy = OnceLock::new();
        let run = Run {
            deadline,
            cutoff: Some(cutoff),
            max_reasons: MAX_REASONS,
            policy: &policy,
        };
        let judged = tokio::time::timeout_at(cutoff, self.judge_reporting(&w, run, &snap)).await;
        let Ok(Some(judged)) = judged else {
            return self.timed_out(&req, kind, &w, policy.get());
        };
        let object_ref = w.object_ref();
        let Listed { decision, unlisted } = judged.listed;
        let (allowed, message, warnings) =
            render_decision(&object_ref, &decision, unlisted, self.max_nodes);
        let verdict = decision.verdict.as_str();
        let answer = Arc::new(Answer {
            response: Prepared::judged(
                allowed,
                message.as_deref(),
                &warnings,
                verdict,
                &judged.images,
            ),
            verdict,
            codes: decision.reasons.iter().map(|r| r.code).collect(),
            object_ref,
        });
        // An image still resolving may change the answer, and one that does
        // not list every reason is not worth keeping: not kept.
        let settled = unlisted == 0 && !answer.codes.contains(&ReasonCode::ImageUnresolved);
        if let (Some((cache, mut key)), true) = (cached, settled) {
            // Image answers as of now: the look-ups this request just made
            // must not void its own answer. (A concurrent re-resolution of
            // one of its images may be counted too early here; `decisions::TTL`
            // bounds that.)
            key.generation.1 = self.images.epoch();
            cache.insert(key, answer.clone());
        }
        self.answer(&req, kind, &answer)
    }

    /// A judgement stopped at its cut-off (or, never expected, before its
    /// policy was known: then the built-in default's, `unresolvedImages:
    /// Warn`, as with no NetfilterPolicy). Counted as `JudgementTimedOut`.
    fn timed_out(
        &self,
        req: &Request<'_>,
        kind: WorkloadKind,
        w: &Workload,
        policy: Option<&Arc<EffectivePolicy>>,
    ) -> ReviewOutcome {
        let default = EffectivePolicy::default();
        let policy = policy.map_or(&default, |p| p.as_ref());
        let object_ref = w.object_ref();
        let detail = format!(
            "{object_ref} within the webhook's answer budget of {:.1}s",
            self.timeout.as_secs_f64()
        );
        let decision = unfinished(policy, &detail);
        let (allowed, message, warnings) =
            render_decision(&object_ref, &decision, 0, self.max_nodes);
        let verdict = decision.verdict.as_str();
        tracing::warn!(object = %object_ref, verdict, budget = ?self.timeout, "judgement did not finish within the budget");
        let answer = Answer {
            // "error" in the audit log: not judged.
            response: Prepared::new(allowed, message.as_deref(), &warnings, "error"),
            verdict,
            codes: vec![ReasonCode::JudgementTimedOut],
            object_ref,
        };
        self.answer(req, kind, &answer)
    }

    /// A judged kind with no object or one nfguard's reader refuses. The API
    /// server validates an object before it asks, so this is a bug in that
    /// reader or a forged request; a gate admitting what it cannot read would
    /// open to any object shaped so that its reader refuses it. It is never
    /// shown safe, so the policy's `action` decides as for an unsafe finding:
    /// Deny denies, Warn and Taint admit with a warning (as does a namespace
    /// no policy selects). The namespace's policy is memoized per facts
    /// generation: this costs no judgement.
    fn unreadable(
        &self,
        req: &Request<'_>,
        kind: WorkloadKind,
        cause: &'static str,
        why: &str,
    ) -> ReviewOutcome {
        self.metrics
            .rejected
            .get_or_create(&[("cause", cause)])
            .inc();
        let namespace = req.namespace.as_deref().unwrap_or("default");
        let policy = self.facts.snapshot().1.policies.for_namespace(namespace);
        let name = req.name.as_deref().unwrap_or("(unnamed)");
        let object = format!("{}/{namespace}/{name}", kind.as_str());
        let deny = policy.applies() && policy.action == PolicyAction::Deny;
        let verdict = if deny { Verdict::Deny } else { Verdict::Warn };
        tracing::warn!(object = %object, verdict = verdict.as_str(), why, "object not readable: not judged");
        let said = format!(
            "nfguard cannot read {object} ({why}), so it cannot judge its netfilter tools (the API server sends only objects it validated: a bug in nfguard or a forged request)"
        );
        let (message, warnings) = if deny {
            let msg = format!(
                "nfguard denied {object}: {said}, and the NetfilterPolicy's action: Deny refuses what nfguard cannot show safe. (Override: keep it from the webhook with its namespaceSelector or objectSelector.)"
            );
            (Some(msg), Vec::new())
        } else {
            (
                None,
                vec![format!(
                    "nfguard: not judged: {said}; admitted ({})",
                    why_admitted(&policy)
                )],
            )
        };
        ReviewOutcome {
            status: 200,
            body: response(&req.uid, !deny, message.as_deref(), &warnings, "error"),
            kind: kind.as_str(),
            verdict: verdict.as_str(),
        }
    }

    /// A review whose object lives in another namespace than the request's:
    /// never from the API server. Denied, with both names escaped and cut.
    fn forged(
        &self,
        req: &Request<'_>,
        kind: WorkloadKind,
        asked: &str,
        own: &str,
    ) -> ReviewOutcome {
        self.metrics
            .rejected
            .get_or_create(&[("cause", "namespace_mismatch")])
            .inc();
        let cut = |s: &str| s.chars().take(63).collect::<String>();
        let message = format!(
            "nfguard refused this {}: its object's namespace {:?} is not the request's {:?} (the API server never sends that: a forged review)",
            kind.as_str(),
            cut(own),
            cut(asked)
        );
        tracing::warn!(
            kind = kind.as_str(),
            "review refused: object and request namespaces differ"
        );
        ReviewOutcome {
            status: 200,
            body: response(&req.uid, false, Some(&message), &[], "error"),
            kind: kind.as_str(),
            verdict: Verdict::Deny.as_str(),
        }
    }

    /// Metrics, log line and response body for a judged answer.
    fn answer(&self, req: &Request<'_>, kind: WorkloadKind, a: &Answer) -> ReviewOutcome {
        for code in &a.codes {
            self.metrics.count_reason(*code);
        }
        if req.dry_run {
            tracing::debug!(object = %a.object_ref, verdict = a.verdict, "dry-run admission");
        } else {
            tracing::info!(object = %a.object_ref, verdict = a.verdict, "admission");
        }
        ReviewOutcome {
            status: 200,
            body: a.response.with_uid(&req.uid),
            kind: kind.as_str(),
            verdict: a.verdict,
        }
    }
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
