//! Kubernetes object names as the API server accepts them. A name that
//! reaches nfguard from a review or an object (a namespace, a ServiceAccount,
//! an `imagePullSecrets` entry) becomes part of a URL path when nfguard
//! reads the object: kube-rs checks only that it is not empty, so
//! `../configmaps/x` would walk the path. Anything these refuse is never
//! looked up.

/// A DNS-1123 label: the names of namespaces (at most 63 bytes, lowercase
/// letters, digits and `-`, beginning and ending alphanumeric).
pub fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && label_shaped(name)
}

/// A DNS-1123 subdomain: the names of Secrets and ServiceAccounts (at most
/// 253 bytes, dot-separated labels).
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(label_shaped)
}

fn label_shaped(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && alnum(&b[0])
        && alnum(&b[b.len() - 1])
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_api_server_accepts() {
        for ok in ["a", "default", "kube-system", "0abc", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for ok in [
            "regcred.v2",
            "a.b-c.d",
            &format!("{}.{}", "a".repeat(63), "b".repeat(63)),
        ] {
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        let longest = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(61));
        assert_eq!(longest.len(), 253);
        assert!(is_dns_subdomain(&longest));
        assert!(!is_dns_subdomain(&format!("{longest}b")));
    }

    #[test]
    fn path_walks_and_other_shapes_are_refused() {
        for bad in [
            "",
            "../configmaps/x",
            "..",
            "a/b",
            "a%2Fb",
            "A",
            "-a",
            "a-",
            ".a",
            "a..b",
            "a b",
            "a?watch=1",
            "é",
            &"a".repeat(64),
        ] {
            assert!(!is_dns_label(bad), "label {bad:?}");
            if bad != "a".repeat(64) {
                assert!(!is_dns_subdomain(bad), "subdomain {bad:?}");
            }
        }
        assert!(!is_dns_subdomain(&"a".repeat(254)));
    }
}
