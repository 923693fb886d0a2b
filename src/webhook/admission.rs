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

use super::credentials::{PullSecrets, pull_secrets};
use super::facts::Facts;
use super::images::ImageCache;
use super::metrics::Metrics;
use crate::compat::evaluate::{
    Decision, EffectivePolicy, EvalInput, ReasonCode, Verdict, Workload, WorkloadKind, evaluate,
    images_to_resolve, select_candidates,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

pub const API_VERSION: &str = "admission.k8s.io/v1";
/// Longest lists in a response (the API server caps warnings in size).
const MAX_WARNINGS: usize = 10;

/// Everything needed to judge one request.
pub struct Judge {
    pub facts: Arc<Facts>,
    pub images: Arc<ImageCache>,
    /// For imagePullSecrets (cluster mode); None in file mode.
    pub client: Option<kube::Client>,
    pub metrics: Arc<Metrics>,
    /// The whole request's budget (`--timeout`).
    pub timeout: Duration,
    pub default_platform: String,
    pub max_nodes: usize,
}

/// The HTTP answer and bounded labels for metrics.
#[derive(Debug)]
pub struct ReviewOutcome {
    pub status: u16,
    pub body: Value,
    /// A WorkloadKind name, "other" or "invalid".
    pub kind: &'static str,
    /// "allow", "warn", "deny", or "rejected".
    pub verdict: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("body is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("not an AdmissionReview (kind {0:?})")]
    NotAReview(String),
    #[error("unsupported apiVersion {0:?}: nfguard speaks {API_VERSION} only")]
    WrongVersion(String),
    #[error("AdmissionReview has no request.uid")]
    NoUid,
    #[error("request.{0} is missing or not a string")]
    MissingField(&'static str),
}

impl ReviewError {
    pub fn cause(&self) -> &'static str {
        match self {
            ReviewError::NotJson(_) => "malformed",
            ReviewError::NotAReview(_) => "not_a_review",
            ReviewError::WrongVersion(_) => "wrong_version",
            ReviewError::NoUid | ReviewError::MissingField(_) => "incomplete",
        }
    }
}

/// The parts of `request` nfguard reads.
#[derive(Debug)]
pub struct Request {
    pub uid: String,
    pub kind: String,
    pub sub_resource: Option<String>,
    pub operation: String,
    pub namespace: Option<String>,
    pub dry_run: bool,
    pub object: Option<Value>,
}

fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

/// Strict about the envelope, lenient about everything else.
pub fn parse_review(body: &[u8]) -> Result<Request, ReviewError> {
    let mut v: Value = serde_json::from_slice(body).map_err(ReviewError::NotJson)?;
    let kind = str_at(&v, "/kind").unwrap_or("");
    if kind != "AdmissionReview" {
        return Err(ReviewError::NotAReview(kind.to_string()));
    }
    let api = str_at(&v, "/apiVersion").unwrap_or("");
    if api != API_VERSION {
        return Err(ReviewError::WrongVersion(api.to_string()));
    }
    let uid = str_at(&v, "/request/uid")
        .filter(|u| !u.is_empty())
        .ok_or(ReviewError::NoUid)?
        .to_string();
    let kind = str_at(&v, "/request/kind/kind")
        .ok_or(ReviewError::MissingField("kind.kind"))?
        .to_string();
    let operation = str_at(&v, "/request/operation")
        .ok_or(ReviewError::MissingField("operation"))?
        .to_string();
    let sub_resource = str_at(&v, "/request/subResource")
        .filter(|s| !s.is_empty())
        .map(String::from);
    let namespace = str_at(&v, "/request/namespace")
        .filter(|s| !s.is_empty())
        .map(String::from);
    let dry_run = v
        .pointer("/request/dryRun")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let object = v
        .pointer_mut("/request/object")
        .map(Value::take)
        .filter(|o| !o.is_null());
    Ok(Request {
        uid,
        kind,
        sub_resource,
        operation,
        namespace,
        dry_run,
        object,
    })
}

/// What to do with a well-formed request.
#[derive(Debug, PartialEq, Eq)]
pub enum Scope {
    Judge(WorkloadKind),
    /// Allowed without judging; Some(warning) when the kind is unknown.
    Skip(Option<String>),
}

/// Pods on CREATE and on UPDATE of `ephemeralcontainers`; pod controllers on
/// CREATE and UPDATE; everything else passes.
pub fn scope(req: &Request) -> Scope {
    let Some(kind) = WorkloadKind::parse(&req.kind) else {
        return Scope::Skip(Some(format!(
            "nfguard does not judge kind {:?}; allowed without checks",
            req.kind
        )));
    };
    let op = req.operation.as_str();
    let judged = match (kind, req.sub_resource.as_deref()) {
        (WorkloadKind::Pod, None) => op == "CREATE",
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

fn response(
    uid: &str,
    allowed: bool,
    message: Option<String>,
    warnings: Vec<String>,
    verdict: &str,
) -> Value {
    let mut resp = json!({
        "uid": uid,
        "allowed": allowed,
        "auditAnnotations": {"nfguard.io/verdict": verdict},
    });
    if let Some(m) = message {
        resp["status"] = json!({
            "code": 403,
            "reason": "Forbidden",
            "message": m,
        });
    }
    if !warnings.is_empty() {
        resp["warnings"] = json!(warnings);
    }
    json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": resp})
}

/// Message and warnings for a decision (what the user sees in kubectl).
pub fn render_decision(
    object: &str,
    d: &Decision,
    max_nodes: usize,
) -> (bool, Option<String>, Vec<String>) {
    let mut warnings: Vec<String> = d
        .reasons
        .iter()
        .filter(|r| {
            r.effect == Verdict::Warn
                || matches!(r.code, ReasonCode::Exempt | ReasonCode::ImageExempt)
        })
        .map(|r| {
            let one = Decision {
                verdict: d.verdict,
                reasons: vec![r.clone()],
                candidate_nodes: d.candidate_nodes,
                containers_in_scope: d.containers_in_scope,
            };
            let line = one.lines(Verdict::Allow, max_nodes).join("");
            format!("nfguard: {line}")
        })
        .collect();
    warnings.truncate(MAX_WARNINGS);
    match d.verdict {
        Verdict::Deny => {
            let lines = d.lines(Verdict::Deny, max_nodes);
            let msg = format!(
                "nfguard denied {object}: its iptables would break the networking of the nodes it lands on. {} (Override: annotate the workload nfguard.io/exempt: \"<reason>\".)",
                lines.join(" | ")
            );
            (false, Some(msg), warnings)
        }
        Verdict::Warn | Verdict::Allow => (true, None, warnings),
    }
}

impl Judge {
    /// Judge one workload exactly as `nfguard check` does (same pure steps),
    /// with image look-ups bounded by `deadline`.
    pub async fn judge(&self, w: &Workload, deadline: Instant) -> Result<Decision, String> {
        let snap = self.facts.snapshot();
        let ns = w.namespace.as_deref().unwrap_or("default");
        let labels = snap.namespace_labels.as_ref().and_then(|f| f(ns));
        let policy = EffectivePolicy::from_policies(
            snap.policies.iter().map(|p| p.as_ref()),
            ns,
            labels.as_ref(),
        )
        .map_err(|e| e.to_string())?;
        let profiles: Vec<_> = snap.profiles.iter().map(|p| p.as_ref()).collect();
        let nodes: Vec<_> = snap.nodes.iter().map(|n| n.as_ref()).collect();
        let candidates = select_candidates(w, &profiles, &nodes, &self.default_platform);
        let keys = images_to_resolve(w, &candidates, &policy);
        let now = Instant::now();
        let mut deadline = deadline;
        if let Some(s) = policy.registry_timeout_seconds {
            deadline = deadline.min(now + Duration::from_secs(u64::from(s.max(1))));
        }
        let budget = deadline.saturating_duration_since(now);
        let images = if keys.is_empty() {
            Default::default()
        } else {
            let need_creds = keys.iter().any(|k| self.images.cached(k).is_none());
            let secrets = match (&self.client, need_creds) {
                (Some(c), true) => {
                    // At most a quarter of the budget on reading Secrets.
                    let until = now + budget / 4;
                    tokio::time::timeout_at(until, pull_secrets(c, ns, &w.pod_spec))
                        .await
                        .unwrap_or_default()
                }
                _ => PullSecrets::default(),
            };
            self.images
                .resolve(&keys, &|img| secrets.for_image(img), deadline, budget)
                .await
        };
        Ok(evaluate(&EvalInput {
            workload: w,
            candidates: &candidates,
            images: &images,
            policy: &policy,
        }))
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
                    .get_or_create(&vec![("cause", e.cause())])
                    .inc();
                return ReviewOutcome {
                    status: 400,
                    body: json!({"error": e.to_string()}),
                    kind: "invalid",
                    verdict: "rejected",
                };
            }
        };
        let kind = match scope(&req) {
            Scope::Skip(warning) => {
                let label = WorkloadKind::parse(&req.kind).map_or("other", WorkloadKind::as_str);
                return ReviewOutcome {
                    status: 200,
                    body: response(
                        &req.uid,
                        true,
                        None,
                        warning.into_iter().collect(),
                        "skipped",
                    ),
                    kind: label,
                    verdict: "allow",
                };
            }
            Scope::Judge(k) => k,
        };
        let allow_with = |warning: String, verdict: &'static str| ReviewOutcome {
            status: 200,
            body: response(&req.uid, true, None, vec![warning], "error"),
            kind: kind.as_str(),
            verdict,
        };
        let Some(mut object) = req.object else {
            return allow_with(
                "nfguard: request has no object; allowed without checks".into(),
                "allow",
            );
        };
        if object.get("kind").and_then(Value::as_str).is_none() && object.is_object() {
            object["kind"] = json!(kind.as_str());
        }
        let mut w = match Workload::of_kind(kind, &object) {
            Ok(w) => w,
            Err(e) => {
                self.metrics
                    .rejected
                    .get_or_create(&vec![("cause", "unreadable_object")])
                    .inc();
                return allow_with(
                    format!("nfguard could not read the object ({e}); allowed without checks"),
                    "allow",
                );
            }
        };
        if w.namespace.is_none() {
            w.namespace = req.namespace.clone();
        }
        // Leave a margin to serialize and send the answer.
        let margin = (self.timeout / 10).min(Duration::from_millis(500));
        let deadline = start + self.timeout.saturating_sub(margin);
        let decision =
            match tokio::time::timeout_at(deadline + margin / 2, self.judge(&w, deadline)).await {
                Ok(Ok(d)) => d,
                Ok(Err(e)) => {
                    return allow_with(
                        format!(
                            "nfguard could not judge {}: {e}; allowed without checks",
                            w.object_ref()
                        ),
                        "allow",
                    );
                }
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
        for r in &decision.reasons {
            self.metrics
                .reasons
                .get_or_create(&vec![("code", reason_label(r.code))])
                .inc();
        }
        let (allowed, message, warnings) =
            render_decision(&w.object_ref(), &decision, self.max_nodes);
        let verdict = match decision.verdict {
            Verdict::Allow => "allow",
            Verdict::Warn => "warn",
            Verdict::Deny => "deny",
        };
        if req.dry_run {
            tracing::debug!(object = %w.object_ref(), verdict, "dry-run admission");
        } else {
            tracing::info!(object = %w.object_ref(), verdict, "admission");
        }
        ReviewOutcome {
            status: 200,
            body: response(&req.uid, allowed, message, warnings, verdict),
            kind: kind.as_str(),
            verdict,
        }
    }
}

/// Reason codes as static strings (metric labels must not allocate per request).
fn reason_label(c: ReasonCode) -> &'static str {
    use ReasonCode::*;
    match c {
        KnownBadIptables => "KnownBadIptables",
        BackendMismatch => "BackendMismatch",
        KernelLacksBackend => "KernelLacksBackend",
        OldReaderNewRules => "OldReaderNewRules",
        NewWriterOldReader => "NewWriterOldReader",
        ReaderOlderThanWriter => "ReaderOlderThanWriter",
        WrapperNoMarkerChains => "WrapperNoMarkerChains",
        PodBackendMismatch => "PodBackendMismatch",
        PodOldReaderNewWriter => "PodOldReaderNewWriter",
        PodReaderOlderThanWriter => "PodReaderOlderThanWriter",
        ImageUnresolved => "ImageUnresolved",
        ImageVersionUnknown => "ImageVersionUnknown",
        NoIptables => "NoIptables",
        NodeProfileIncomplete => "NodeProfileIncomplete",
        NodeProfileMissing => "NodeProfileMissing",
        NodeHazard => "NodeHazard",
        HostNetworkWithoutNetAdmin => "HostNetworkWithoutNetAdmin",
        Exempt => "Exempt",
        ImageExempt => "ImageExempt",
        NamespaceNotSelected => "NamespaceNotSelected",
        NoCandidateNodes => "NoCandidateNodes",
        #[allow(unreachable_patterns)]
        _ => "Other",
    }
}
