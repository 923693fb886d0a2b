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
//! - an object nfguard cannot read (invalid pod spec) or a broken policy:
//!   allowed with a warning saying so (consistent with failurePolicy Ignore).

use super::decisions::{self, Answer, DecisionCache};
use super::facts::Facts;
use super::images::ImageCache;
use super::metrics::Metrics;
use super::pod_update::images_changed;
pub use super::review::{API_VERSION, Request, ReviewError, parse_review};
use super::review::{Prepared, error_body, judged_images, response};
use crate::compat::evaluate::{
    Decision, EXEMPTION_HINT, ImageKey, ImageResolutions, NodeIndex, Reason, ReasonClass,
    ReasonCode, Verdict, Workload, WorkloadKind,
};
use crate::facts::Platform;
use crate::judgement::pull_secrets::pull_secrets;
use crate::judgement::{ResolveImages, Scene, Subject};
use crate::projection::PullSecretRefs;
use crate::registry::{Chain, PullSecrets};
use k8s_openapi::api::core::v1::PodSpec;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Longest lists in a response (the API server caps warnings in size).
const MAX_WARNINGS: usize = 10;

/// The webhook's look-up strategy for one request: its image cache, with
/// the pod's imagePullSecrets read only when an image is not cached yet.
struct AdmissionImages<'r> {
    cache: &'r ImageCache,
    /// For imagePullSecrets (cluster mode); None in file mode.
    client: Option<&'r kube::Client>,
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
        let secrets = match self.client {
            // A public image's answer holds for everyone: no Secret to read.
            Some(c) if keys.iter().any(|k| !self.cache.is_public(k)) => {
                // At most a quarter of the budget on reading Secrets.
                let until = now + budget / 4;
                let refs = PullSecretRefs::of(self.pod_spec);
                tokio::time::timeout_at(until, pull_secrets(c, self.namespace, &refs))
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
    pub client: Option<kube::Client>,
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

/// Message and warnings for a decision (what the user sees in kubectl).
pub fn render_decision(
    object: &str,
    d: &Decision,
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
            let msg = format!(
                "nfguard denied {object}: its netfilter tools (iptables, nft) would break the networking of the nodes it lands on. {} (Override: {}.)",
                lines.join(" | "),
                override_hint(d)
            );
            (false, Some(msg), warnings)
        }
        Verdict::Warn | Verdict::Allow => (true, None, warnings),
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

impl Judge {
    /// Judge one workload through the one judgement path (as `nfguard
    /// check` and the controller do), with image look-ups bounded by `deadline`.
    pub async fn judge(&self, w: &Workload, deadline: Instant) -> Decision {
        self.judge_reporting(w, deadline).await.0
    }

    /// [`Judge::judge`], with the image digests it read (see `judged_images`).
    async fn judge_reporting(&self, w: &Workload, deadline: Instant) -> (Decision, String) {
        let snap = self.facts.snapshot();
        let profiles: Vec<_> = snap.profiles.iter().map(|p| p.as_ref()).collect();
        let nodes: Vec<_> = snap.nodes.iter().map(|n| n.as_ref()).collect();
        // Built by the first request of a facts generation, shared by the rest.
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
        let images = AdmissionImages {
            cache: &self.images,
            client: self.client.as_ref(),
            namespace: w.namespace.as_deref().unwrap_or("default"),
            pod_spec: &w.pod_spec,
            judged: Default::default(),
        };
        let decision = scene
            .judge(Subject::Workload(w), &images, deadline)
            .await
            .decision;
        let read = images
            .judged
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
        (decision, read)
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
        let allow_with = |warning: String, verdict: &'static str| ReviewOutcome {
            status: 200,
            body: response(&req.uid, true, None, &[warning], "error"),
            kind: kind.as_str(),
            verdict,
        };
        let Some(object) = req.object.as_ref() else {
            return allow_with(
                "nfguard: request has no object; allowed without checks".into(),
                "allow",
            );
        };
        // Facts and image generations are read before judging: a change
        // while judging leaves this answer under the older generation.
        let cached = self.decisions.as_ref().map(|cache| {
            let key = decisions::Key::new(
                (self.facts.generation(), self.images.epoch()),
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
            Err(e) => {
                self.metrics
                    .rejected
                    .get_or_create(&[("cause", "unreadable_object")])
                    .inc();
                return allow_with(
                    format!("nfguard could not read the object ({e}); allowed without checks"),
                    "allow",
                );
            }
        };
        if w.namespace.is_none() {
            w.namespace = req.namespace.as_deref().map(str::to_string);
        }
        // Leave a margin to serialize and send the answer.
        let margin = (self.timeout / 10).min(Duration::from_millis(500));
        let deadline = start + self.timeout.saturating_sub(margin);
        let judged = self.judge_reporting(&w, deadline);
        let (decision, images) = match tokio::time::timeout_at(deadline + margin / 2, judged).await
        {
            Ok(d) => d,
            Err(_) => {
                return allow_with(
                    format!(
                        "nfguard could not judge {} within {:.1}s; allowed without checks",
                        w.object_ref(),
                        self.timeout.as_secs_f64()
                    ),
                    "allow",
                );
            }
        };
        let object_ref = w.object_ref();
        let (allowed, message, warnings) = render_decision(&object_ref, &decision, self.max_nodes);
        let verdict = decision.verdict.as_str();
        let answer = Arc::new(Answer {
            response: Prepared::judged(allowed, message.as_deref(), &warnings, verdict, &images),
            verdict,
            codes: decision.reasons.iter().map(|r| r.code).collect(),
            object_ref,
        });
        // An image still resolving may change the answer: not kept.
        let settled = !answer.codes.contains(&ReasonCode::ImageUnresolved);
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
