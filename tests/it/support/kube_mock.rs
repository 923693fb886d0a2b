//! The fake API servers behind kube's mock client (`tower_test`): each
//! request they receive, captured for the test's assertions.

use http::Request;
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::Value;

/// One request the fake API server received.
#[derive(Debug, Clone)]
pub struct Captured {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    /// The JSON body; Null when empty or not JSON.
    pub body: Value,
}

pub async fn capture(req: Request<Body>) -> Captured {
    let (parts, body) = req.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    Captured {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        content_type: parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string(),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}
