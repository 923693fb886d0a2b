//! The AdmissionReview v1 envelope: what nfguard reads of a request, and the
//! response it writes.
//!
//! Parsing borrows from the body and leaves `request.object` as raw JSON, so
//! the object is parsed once, straight into the types the judgement needs
//! (no `serde_json::Value` tree per request). Anything the typed pass cannot
//! read goes through a `Value`-based pass that names the exact problem.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;

pub const API_VERSION: &str = "admission.k8s.io/v1";

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

/// `request.object` as JSON text: borrowed from the body, or re-encoded
/// when the slow pass had to build a tree.
#[derive(Debug)]
pub enum RawObject<'a> {
    Borrowed(&'a RawValue),
    Owned(Box<RawValue>),
}

impl RawObject<'_> {
    pub fn json(&self) -> &str {
        match self {
            RawObject::Borrowed(r) => r.get(),
            RawObject::Owned(r) => r.get(),
        }
    }
}

/// The parts of `request` nfguard reads.
#[derive(Debug)]
pub struct Request<'a> {
    pub uid: Cow<'a, str>,
    pub kind: Cow<'a, str>,
    pub sub_resource: Option<Cow<'a, str>>,
    pub operation: Cow<'a, str>,
    pub namespace: Option<Cow<'a, str>>,
    /// `request.name` (None on a CREATE by generateName): names an object
    /// that could not be read.
    pub name: Option<Cow<'a, str>>,
    pub dry_run: bool,
    /// None when absent or null.
    pub object: Option<RawObject<'a>>,
    /// The object before an UPDATE; None when absent or null.
    pub old_object: Option<RawObject<'a>>,
}

/// A JSON string borrowed from the body when it has no escapes (serde's own
/// `Option<Cow<str>>` always copies).
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(s.to_string())))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

fn text(t: Option<Text<'_>>) -> Option<Cow<'_, str>> {
    t.map(|t| t.0)
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, rename = "apiVersion")]
    api_version: Option<Text<'a>>,
    #[serde(borrow)]
    kind: Option<Text<'a>>,
    #[serde(borrow)]
    request: Option<FastRequest<'a>>,
}

#[derive(Deserialize)]
struct GroupVersionKind<'a> {
    #[serde(borrow)]
    kind: Option<Text<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FastRequest<'a> {
    #[serde(borrow)]
    uid: Option<Text<'a>>,
    #[serde(borrow)]
    kind: Option<GroupVersionKind<'a>>,
    #[serde(borrow)]
    sub_resource: Option<Text<'a>>,
    #[serde(borrow)]
    operation: Option<Text<'a>>,
    #[serde(borrow)]
    namespace: Option<Text<'a>>,
    #[serde(borrow)]
    name: Option<Text<'a>>,
    dry_run: Option<bool>,
    #[serde(borrow)]
    object: Option<&'a RawValue>,
    #[serde(borrow)]
    old_object: Option<&'a RawValue>,
}

/// Strict about the envelope, lenient about everything else.
pub fn parse_review(body: &[u8]) -> Result<Request<'_>, ReviewError> {
    match serde_json::from_slice::<Envelope<'_>>(body) {
        Ok(env) => from_envelope(env),
        // A type the typed pass does not expect (e.g. a numeric uid): the
        // tree pass says precisely what is wrong, or reads it anyway.
        Err(_) => parse_review_tree(body),
    }
}

fn nonempty(s: Option<Cow<'_, str>>) -> Option<Cow<'_, str>> {
    s.filter(|s| !s.is_empty())
}

fn from_envelope<'a>(env: Envelope<'a>) -> Result<Request<'a>, ReviewError> {
    let kind = text(env.kind).unwrap_or_default();
    if kind != "AdmissionReview" {
        return Err(ReviewError::NotAReview(kind.into_owned()));
    }
    let api = text(env.api_version).unwrap_or_default();
    if api != API_VERSION {
        return Err(ReviewError::WrongVersion(api.into_owned()));
    }
    let req = env.request.ok_or(ReviewError::NoUid)?;
    let uid = nonempty(text(req.uid)).ok_or(ReviewError::NoUid)?;
    let kind = req
        .kind
        .and_then(|k| text(k.kind))
        .ok_or(ReviewError::MissingField("kind.kind"))?;
    let operation = text(req.operation).ok_or(ReviewError::MissingField("operation"))?;
    let raw = |o: Option<&'a RawValue>| o.filter(|o| o.get() != "null").map(RawObject::Borrowed);
    Ok(Request {
        uid,
        kind,
        sub_resource: nonempty(text(req.sub_resource)),
        operation,
        namespace: nonempty(text(req.namespace)),
        name: nonempty(text(req.name)),
        dry_run: req.dry_run.unwrap_or(false),
        object: raw(req.object),
        old_object: raw(req.old_object),
    })
}

fn str_at<'v>(v: &'v Value, ptr: &str) -> Option<&'v str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn owned(s: &str) -> Cow<'static, str> {
    Cow::Owned(s.to_string())
}

/// The tree pass: any JSON, fields of unexpected types read as missing.
fn parse_review_tree(body: &[u8]) -> Result<Request<'static>, ReviewError> {
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
        .ok_or(ReviewError::NoUid)
        .map(owned)?;
    let kind = str_at(&v, "/request/kind/kind")
        .ok_or(ReviewError::MissingField("kind.kind"))
        .map(owned)?;
    let operation = str_at(&v, "/request/operation")
        .ok_or(ReviewError::MissingField("operation"))
        .map(owned)?;
    let sub_resource = str_at(&v, "/request/subResource")
        .filter(|s| !s.is_empty())
        .map(owned);
    let namespace = str_at(&v, "/request/namespace")
        .filter(|s| !s.is_empty())
        .map(owned);
    let name = str_at(&v, "/request/name")
        .filter(|s| !s.is_empty())
        .map(owned);
    let dry_run = v
        .pointer("/request/dryRun")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut raw = |ptr: &str| {
        v.pointer_mut(ptr)
            .map(Value::take)
            .filter(|o| !o.is_null())
            .and_then(|o| serde_json::value::to_raw_value(&o).ok())
            .map(RawObject::Owned)
    };
    let object = raw("/request/object");
    let old_object = raw("/request/oldObject");
    Ok(Request {
        uid,
        kind,
        sub_resource,
        operation,
        namespace,
        name,
        dry_run,
        object,
        old_object,
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ResponseOut<'a>,
}

/// `response` without its uid, which [`Prepared::with_uid`] appends last.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut<'a> {
    allowed: bool,
    audit_annotations: Audit<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut<'a>>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

/// The API server records these in the request's audit event as
/// `<webhook name>/<key>` (e.g. `validate.nfguard.io/verdict`): a key must
/// be a bare name, one with a `/` of its own is dropped by the API server.
#[derive(Serialize)]
struct Audit<'a> {
    verdict: &'a str,
    /// What was judged: `image platform digest` per look-up, `, `-separated.
    #[serde(skip_serializing_if = "str::is_empty")]
    images: &'a str,
}

#[derive(Serialize)]
struct StatusOut<'a> {
    code: u16,
    reason: &'static str,
    message: &'a str,
}

/// An AdmissionReview v1 response serialized once, up to the uid: the same
/// answer is sent again under another request's uid by copying bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// Everything before the uid's JSON string.
    head: Vec<u8>,
}

impl Prepared {
    /// `message` (a denial) comes with status 403 Forbidden.
    pub fn new(allowed: bool, message: Option<&str>, warnings: &[String], verdict: &str) -> Self {
        Self::judged(allowed, message, warnings, verdict, "")
    }

    /// Like `new`, recording the image digests judged (see [`judged_images`])
    /// in the audit annotation `images`.
    pub fn judged(
        allowed: bool,
        message: Option<&str>,
        warnings: &[String],
        verdict: &str,
        images: &str,
    ) -> Self {
        let out = ReviewOut {
            api_version: API_VERSION,
            kind: "AdmissionReview",
            response: ResponseOut {
                allowed,
                audit_annotations: Audit { verdict, images },
                status: message.map(|message| StatusOut {
                    code: 403,
                    reason: "Forbidden",
                    message,
                }),
                warnings,
            },
        };
        // Plain structs of strings and bools: serializing them cannot fail.
        let mut head = serde_json::to_vec(&out).unwrap_or_default();
        // `...}}` -> `...,"uid":`
        head.truncate(head.len().saturating_sub(2));
        head.extend_from_slice(br#","uid":"#);
        Prepared { head }
    }

    pub fn with_uid(&self, uid: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.head.len() + uid.len() + 8);
        out.extend_from_slice(&self.head);
        // A str always serializes.
        let _ = serde_json::to_writer(&mut out, uid);
        out.extend_from_slice(b"}}");
        out
    }
}

/// The AdmissionReview v1 response body.
pub fn response(
    uid: &str,
    allowed: bool,
    message: Option<&str>,
    warnings: &[String],
    verdict: &str,
) -> Vec<u8> {
    Prepared::new(allowed, message, warnings, verdict).with_uid(uid)
}

/// Longest `images` audit annotation: the audit event stays small however
/// many containers and platforms a workload has.
pub const MAX_AUDIT_IMAGES_BYTES: usize = 2048;

/// `image platform digest` for every look-up that read an image, sorted,
/// `, `-separated, cut at whole entries to `MAX_AUDIT_IMAGES_BYTES` with the
/// number left out: what the verdict is true of, however tags move later.
pub fn judged_images<'a>(read: impl IntoIterator<Item = (&'a str, String, &'a str)>) -> String {
    let mut entries: Vec<String> = read
        .into_iter()
        .map(|(image, platform, digest)| format!("{image} {platform} {digest}"))
        .collect();
    entries.sort();
    entries.dedup();
    let mut out = String::new();
    for (i, e) in entries.iter().enumerate() {
        let left = entries.len() - i;
        let more = format!(" (+{left} more)");
        let sep = if out.is_empty() { 0 } else { 2 };
        // Room for this entry and, if others follow, for the count.
        let tail = if left > 1 { more.len() } else { 0 };
        if out.len() + sep + e.len() + tail > MAX_AUDIT_IMAGES_BYTES {
            out.push_str(&more);
            break;
        }
        if sep > 0 {
            out.push_str(", ");
        }
        out.push_str(e);
    }
    out
}

/// `{"error": ...}` for requests without a uid to answer to.
pub fn error_body(message: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "error": message })).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn review(request: Value) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request}),
        )
        .unwrap()
    }

    #[test]
    fn typed_pass_borrows_and_keeps_the_object_raw() {
        let body = review(
            json!({"uid": "u1", "kind": {"group": "apps", "version": "v1", "kind": "DaemonSet"},
            "operation": "CREATE", "namespace": "kube-system", "dryRun": true, "subResource": "",
            "object": {"kind": "DaemonSet", "metadata": {"name": "x"}}}),
        );
        let r = parse_review(&body).unwrap();
        assert!(matches!(r.uid, Cow::Borrowed("u1")));
        assert_eq!(
            (&*r.kind, &*r.operation, r.namespace.as_deref()),
            ("DaemonSet", "CREATE", Some("kube-system"))
        );
        assert!(r.dry_run && r.sub_resource.is_none());
        let obj: Value = serde_json::from_str(r.object.unwrap().json()).unwrap();
        assert_eq!(obj["metadata"]["name"], "x");
        assert!(r.old_object.is_none());
    }

    #[test]
    fn update_reviews_carry_the_old_object_in_both_passes() {
        let request = json!({"uid": "u1", "kind": {"kind": "Pod"}, "operation": "UPDATE",
            "object": {"metadata": {"name": "new"}}, "oldObject": {"metadata": {"name": "old"}}});
        let name = |o: Option<&RawObject<'_>>| -> Value {
            serde_json::from_str::<Value>(o.unwrap().json()).unwrap()["metadata"]["name"].clone()
        };
        let fast = review(request.clone());
        let r = parse_review(&fast).unwrap();
        assert_eq!(
            (name(r.object.as_ref()), name(r.old_object.as_ref())),
            (json!("new"), json!("old"))
        );
        // A numeric dryRun sends it through the tree pass.
        let mut tree = request;
        tree["dryRun"] = json!(1);
        let tree = review(tree);
        let r = parse_review(&tree).unwrap();
        assert!(matches!(r.old_object, Some(RawObject::Owned(_))));
        assert_eq!(
            (name(r.object.as_ref()), name(r.old_object.as_ref())),
            (json!("new"), json!("old"))
        );
        let create = review(
            json!({"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE",
            "object": {"a": 1}, "oldObject": null}),
        );
        assert!(parse_review(&create).unwrap().old_object.is_none());
    }

    #[test]
    fn escaped_strings_and_null_object() {
        let body = review(
            json!({"uid": "u\"2", "kind": {"kind": "Pod"}, "operation": "DELETE", "object": null}),
        );
        let r = parse_review(&body).unwrap();
        assert_eq!(r.uid, "u\"2");
        assert!(r.object.is_none());
    }

    #[test]
    fn odd_types_fall_back_to_the_tree_pass_with_the_same_errors() {
        let numeric_uid = review(json!({"uid": 5, "kind": {"kind": "Pod"}, "operation": "CREATE"}));
        let e = parse_review(&numeric_uid);
        assert!(matches!(e, Err(ReviewError::NoUid)), "{e:?}");
        let string_kind = review(json!({"uid": "u", "kind": "Pod", "operation": "CREATE"}));
        let e = parse_review(&string_kind);
        assert!(
            matches!(e, Err(ReviewError::MissingField("kind.kind"))),
            "{e:?}"
        );
        // Read anyway: a non-boolean dryRun is just not a dry run.
        let body = review(
            json!({"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "dryRun": "yes", "object": {"a": 1}}),
        );
        let r = parse_review(&body).unwrap();
        assert!(!r.dry_run && r.object.is_some());
        let e = parse_review(
            br#"{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}"#,
        );
        assert!(matches!(e, Err(ReviewError::WrongVersion(_))), "{e:?}");
        let e = parse_review(b"{\"kind\": \"Pod\"");
        assert!(matches!(e, Err(ReviewError::NotJson(_))), "{e:?}");
        let e = parse_review(br#"{"kind": "ConfigMap"}"#);
        assert!(matches!(e, Err(ReviewError::NotAReview(_))), "{e:?}");
    }

    #[test]
    fn response_shape() {
        let warnings = vec!["w1".to_string()];
        let v: Value =
            serde_json::from_slice(&response("u", false, Some("no"), &warnings, "deny")).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": {
                "uid": "u", "allowed": false, "auditAnnotations": {"verdict": "deny"},
                "status": {"code": 403, "reason": "Forbidden", "message": "no"}, "warnings": ["w1"]}})
        );
        let v: Value = serde_json::from_slice(&response("u", true, None, &[], "allow")).unwrap();
        assert!(v["response"].get("status").is_none() && v["response"].get("warnings").is_none());
        // One prepared answer, many uids (escaped as JSON requires).
        let p = Prepared::new(true, None, &warnings, "warn");
        for uid in ["a", "b\"c\\", ""] {
            let v: Value = serde_json::from_slice(&p.with_uid(uid)).unwrap();
            assert_eq!(v["response"]["uid"], uid);
            assert_eq!(v["response"]["warnings"], json!(["w1"]));
        }
    }

    #[test]
    fn judged_images_are_sorted_deduplicated_and_bounded() {
        let d = format!("sha256:{}", "a".repeat(64));
        let s = judged_images([
            ("r/b:v1", "linux/amd64".to_string(), d.as_str()),
            ("r/a:v1", "linux/arm64".to_string(), d.as_str()),
            ("r/b:v1", "linux/amd64".to_string(), d.as_str()),
        ]);
        assert_eq!(s, format!("r/a:v1 linux/arm64 {d}, r/b:v1 linux/amd64 {d}"));
        let names: Vec<String> = (0..100).map(|i| format!("r/image-{i:03}:v1")).collect();
        let s = judged_images(
            names
                .iter()
                .map(|n| (n.as_str(), "linux/amd64".into(), d.as_str())),
        );
        assert!(s.len() <= MAX_AUDIT_IMAGES_BYTES, "{}", s.len());
        let kept = s.matches("sha256:").count();
        assert!(s.ends_with(&format!(" (+{} more)", 100 - kept)), "{s}");
        assert!(kept > 10, "{kept}");
        assert_eq!(judged_images(std::iter::empty()), "");
        // The annotation is left out when nothing was read.
        let v: Value =
            serde_json::from_slice(&Prepared::new(true, None, &[], "allow").with_uid("u")).unwrap();
        assert_eq!(
            v["response"]["auditAnnotations"],
            json!({"verdict": "allow"})
        );
        let p = Prepared::judged(true, None, &[], "allow", "r/a:v1 linux/amd64 sha256:00");
        let v: Value = serde_json::from_slice(&p.with_uid("u")).unwrap();
        assert_eq!(
            v["response"]["auditAnnotations"]["images"],
            "r/a:v1 linux/amd64 sha256:00"
        );
    }
}
