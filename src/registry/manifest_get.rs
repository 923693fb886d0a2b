//! Registry URLs and bodies read with a size cap: a lying registry (no or a
//! false Content-Length, chunked without end) must not make us allocate
//! without bound.

use oci_client::Reference;
use reqwest_oci::Url;

/// The OCI distribution spec has registries accept manifests up to 4 MiB.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// `{scheme}://{registry}/v2/{repository}/{kind}/{target}` (`kind` is
/// `manifests` or `blobs`), with the reference's `ns=` when it has one.
pub fn url(insecure: bool, r: &Reference, kind: &str, target: &str) -> Option<Url> {
    let scheme = if insecure { "http" } else { "https" };
    let mut url = Url::parse(&format!(
        "{scheme}://{}/v2/{}/{kind}/{target}",
        r.resolve_registry(),
        r.repository()
    ))
    .ok()?;
    if let Some(ns) = r.namespace() {
        url.query_pairs_mut().append_pair("ns", ns);
    }
    Some(url)
}

/// The body, or None as soon as it announces or reaches more than `cap` bytes.
pub async fn read_capped(
    res: &mut reqwest_oci::Response,
    cap: u64,
) -> Result<Option<Vec<u8>>, reqwest_oci::Error> {
    if res.content_length().is_some_and(|n| n > cap) {
        return Ok(None);
    }
    let hint = res.content_length().unwrap_or(0).min(cap) as usize;
    let mut body = Vec::with_capacity(hint);
    while let Some(chunk) = res.chunk().await? {
        if (body.len() + chunk.len()) as u64 > cap {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_uses_tag_or_digest_and_the_configured_scheme() {
        let r: Reference = "127.0.0.1:5000/team/app:v1".parse().unwrap();
        assert_eq!(
            url(true, &r, "manifests", "v1").unwrap().as_str(),
            "http://127.0.0.1:5000/v2/team/app/manifests/v1"
        );
        let d = format!("sha256:{}", "a".repeat(64));
        let r: Reference = format!("registry.example:443/app@{d}").parse().unwrap();
        assert_eq!(
            url(false, &r, "blobs", &d).unwrap().as_str(),
            format!("https://registry.example/v2/app/blobs/{d}")
        );
    }
}
