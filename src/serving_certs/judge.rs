//! Whether a CertificateSigningRequest for [`super::SIGNER_NAME`] is one
//! nfguard signs, and what goes into the certificate. Pure: the caller
//! passes the request's fields and the node's addresses. What is signed is
//! built from the checked names only (never the request's other
//! extensions), as a serving certificate for the node's reporter.

use rcgen::{CertificateSigningRequestParams, PublicKey, SanType};
use std::net::IpAddr;
use std::time::Duration;

/// Largest `spec.request` looked at (a P-256 CSR with a few names is < 1 KiB).
pub const MAX_REQUEST_BYTES: usize = 16 << 10;
/// The longest lifetime signed; a request asking for less gets less.
pub const MAX_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);
/// The shortest lifetime signed (a shorter request is lengthened to it).
pub const MIN_LIFETIME: Duration = Duration::from_secs(3600);
/// Names one certificate may carry.
pub const MAX_NAMES: usize = 8;

/// The request's fields the judgement reads.
pub struct Request<'a> {
    /// `spec.request`: the PEM of a PKCS#10 request.
    pub pem: &'a [u8],
    /// `spec.username`: who created it (set by the API server).
    pub username: &'a str,
    /// `spec.extra[authentication.kubernetes.io/node-name]`.
    pub node_extra: Option<&'a [String]>,
    /// `spec.usages`.
    pub usages: &'a [String],
    /// `spec.expirationSeconds`.
    pub expiration_seconds: Option<i32>,
}

/// What the controller signs.
#[derive(Debug)]
pub struct Grant {
    pub node: String,
    pub ips: Vec<IpAddr>,
    pub dns: Vec<String>,
    pub lifetime: Duration,
    pub public_key: PublicKey,
}

/// Why a request is denied: the CSR's `Denied` condition says it.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denial {
    #[error("the request is larger than {MAX_REQUEST_BYTES} bytes")]
    TooLarge,
    #[error("not a PKCS#10 request with a valid signature")]
    NotARequest,
    #[error("requested by {0}, not by the reporter's ServiceAccount")]
    NotTheReporter(String),
    #[error("the requester's token is bound to no single node")]
    NoNode,
    #[error("node {0} does not exist")]
    UnknownNode(String),
    #[error("{0} is not an address of node {1}")]
    NotTheNodesAddress(IpAddr, String),
    #[error("DNS name {0} is not node {1}'s name")]
    NotTheNodesName(String, String),
    #[error("names other than the node's addresses and name are requested")]
    OtherName,
    #[error("no name, or more than {MAX_NAMES}")]
    Names,
    #[error(
        "usages must include server auth and name only digital signature, key encipherment and server auth"
    )]
    Usages,
}

const ALLOWED_USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];

/// Judges `req`: made by `reporter_user` with a token bound to a node whose
/// addresses `node_ips` knows (None: no such node), for that node's
/// addresses and name only.
pub fn judge(
    req: &Request<'_>,
    reporter_user: &str,
    node_ips: impl Fn(&str) -> Option<Vec<IpAddr>>,
) -> Result<Grant, Denial> {
    if req.username != reporter_user {
        return Err(Denial::NotTheReporter(printable(req.username)));
    }
    let node = match req.node_extra {
        Some([node]) if !node.is_empty() => node.clone(),
        _ => return Err(Denial::NoNode),
    };
    if !req.usages.iter().any(|u| u == "server auth")
        || !req
            .usages
            .iter()
            .all(|u| ALLOWED_USAGES.contains(&u.as_str()))
    {
        return Err(Denial::Usages);
    }
    if req.pem.len() > MAX_REQUEST_BYTES {
        return Err(Denial::TooLarge);
    }
    let pem = std::str::from_utf8(req.pem).map_err(|_| Denial::NotARequest)?;
    // Parses and checks the request's signature (proof of the key).
    let csr = CertificateSigningRequestParams::from_pem(pem).map_err(|_| Denial::NotARequest)?;
    let sans = &csr.params.subject_alt_names;
    if sans.is_empty() || sans.len() > MAX_NAMES {
        return Err(Denial::Names);
    }
    let addresses = node_ips(&node).ok_or_else(|| Denial::UnknownNode(printable(&node)))?;
    let (mut ips, mut dns) = (Vec::new(), Vec::new());
    for san in sans {
        match san {
            SanType::IpAddress(ip) if addresses.contains(ip) => ips.push(*ip),
            SanType::IpAddress(ip) => return Err(Denial::NotTheNodesAddress(*ip, node)),
            SanType::DnsName(name) if name.as_str() == node => dns.push(node.clone()),
            SanType::DnsName(name) => {
                return Err(Denial::NotTheNodesName(printable(name.as_str()), node));
            }
            _ => return Err(Denial::OtherName),
        }
    }
    let asked = req
        .expiration_seconds
        .map(|s| Duration::from_secs(u64::from(s.max(0) as u32)))
        .unwrap_or(MAX_LIFETIME);
    Ok(Grant {
        node,
        ips,
        dns,
        lifetime: asked.clamp(MIN_LIFETIME, MAX_LIFETIME),
        public_key: csr.public_key,
    })
}

/// A requester-chosen string for a message: printable and cut.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(128).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    const REPORTER: &str = "system:serviceaccount:nfguard-system:nfguard-reporter";

    fn csr(names: &[&str]) -> String {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn nodes(name: &str) -> Option<Vec<IpAddr>> {
        match name {
            "node-a" => Some(vec![
                "10.0.0.1".parse().unwrap(),
                "fd00::1".parse().unwrap(),
            ]),
            "node-b" => Some(vec!["10.0.0.2".parse().unwrap()]),
            _ => None,
        }
    }

    fn usages(list: &[&str]) -> Vec<String> {
        list.iter().map(|u| u.to_string()).collect()
    }

    fn ask(pem: &str, user: &str, node: &[&str], use_: &[&str]) -> Result<Grant, Denial> {
        let node: Vec<String> = node.iter().map(|n| n.to_string()).collect();
        let use_ = usages(use_);
        judge(
            &Request {
                pem: pem.as_bytes(),
                username: user,
                node_extra: Some(&node),
                usages: &use_,
                expiration_seconds: Some(86_400),
            },
            REPORTER,
            nodes,
        )
    }

    const SERVING: &[&str] = &["digital signature", "server auth"];

    #[test]
    fn a_reporter_gets_its_own_nodes_addresses_and_name() {
        let g = ask(
            &csr(&["10.0.0.1", "fd00::1", "node-a"]),
            REPORTER,
            &["node-a"],
            SERVING,
        )
        .unwrap();
        assert_eq!(g.node, "node-a");
        assert_eq!(
            g.ips,
            [
                "10.0.0.1".parse::<IpAddr>().unwrap(),
                "fd00::1".parse().unwrap()
            ]
        );
        assert_eq!(g.dns, ["node-a"]);
        assert_eq!(g.lifetime, Duration::from_secs(86_400));
    }

    #[test]
    fn another_nodes_address_or_name_is_denied() {
        assert_eq!(
            ask(&csr(&["10.0.0.2"]), REPORTER, &["node-a"], SERVING).unwrap_err(),
            Denial::NotTheNodesAddress("10.0.0.2".parse().unwrap(), "node-a".into())
        );
        assert_eq!(
            ask(
                &csr(&["10.0.0.1", "node-b"]),
                REPORTER,
                &["node-a"],
                SERVING
            )
            .unwrap_err(),
            Denial::NotTheNodesName("node-b".into(), "node-a".into())
        );
        assert_eq!(
            ask(&csr(&["10.0.0.1"]), REPORTER, &["node-z"], SERVING).unwrap_err(),
            Denial::UnknownNode("node-z".into())
        );
        assert_eq!(
            ask(&csr(&["*.example.com"]), REPORTER, &["node-a"], SERVING).unwrap_err(),
            Denial::NotTheNodesName("*.example.com".into(), "node-a".into())
        );
        assert_eq!(
            ask(&csr(&[]), REPORTER, &["node-a"], SERVING).unwrap_err(),
            Denial::Names
        );
    }

    #[test]
    fn only_the_reporter_with_a_node_bound_token_and_serving_usages() {
        let pem = csr(&["10.0.0.1"]);
        assert_eq!(
            ask(
                &pem,
                "system:serviceaccount:apps:builder",
                &["node-a"],
                SERVING
            )
            .unwrap_err(),
            Denial::NotTheReporter("system:serviceaccount:apps:builder".into())
        );
        assert_eq!(
            ask(&pem, REPORTER, &[], SERVING).unwrap_err(),
            Denial::NoNode
        );
        assert_eq!(
            ask(&pem, REPORTER, &["node-a", "node-b"], SERVING).unwrap_err(),
            Denial::NoNode
        );
        for bad in [
            &["digital signature", "client auth"][..],
            &["digital signature"],
            &["server auth", "cert sign"],
        ] {
            assert_eq!(
                ask(&pem, REPORTER, &["node-a"], bad).unwrap_err(),
                Denial::Usages,
                "{bad:?}"
            );
        }
        assert!(ask(&pem, REPORTER, &["node-a"], &["server auth"]).is_ok());
    }

    #[test]
    fn a_forged_or_oversized_request_is_denied() {
        let pem = csr(&["10.0.0.1"]);
        // Another request's signature under this one's body.
        let other = csr(&["10.0.0.2"]);
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let der = |p: &str| {
            let body: String = p.lines().filter(|l| !l.starts_with("-----")).collect();
            b64.decode(body).unwrap()
        };
        let (mut a, b) = (der(&pem), der(&other));
        let n = a.len();
        a[n - 8..].copy_from_slice(&b[b.len() - 8..]);
        let forged = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            b64.encode(a)
        );
        assert_eq!(
            ask(&forged, REPORTER, &["node-a"], SERVING).unwrap_err(),
            Denial::NotARequest
        );
        assert_eq!(
            ask("not a request", REPORTER, &["node-a"], SERVING).unwrap_err(),
            Denial::NotARequest
        );
        let big = "A".repeat(MAX_REQUEST_BYTES + 1);
        assert_eq!(
            ask(&big, REPORTER, &["node-a"], SERVING).unwrap_err(),
            Denial::TooLarge
        );
    }

    #[test]
    fn lifetimes_are_bounded() {
        let pem = csr(&["10.0.0.1"]);
        let node = vec!["node-a".to_string()];
        let use_ = usages(SERVING);
        for (asked, want) in [
            (Some(60), MIN_LIFETIME),
            (Some(i32::MAX), MAX_LIFETIME),
            (None, MAX_LIFETIME),
            (Some(-5), MIN_LIFETIME),
        ] {
            let g = judge(
                &Request {
                    pem: pem.as_bytes(),
                    username: REPORTER,
                    node_extra: Some(&node),
                    usages: &use_,
                    expiration_seconds: asked,
                },
                REPORTER,
                nodes,
            )
            .unwrap();
            assert_eq!(g.lifetime, want, "{asked:?}");
        }
    }
}
