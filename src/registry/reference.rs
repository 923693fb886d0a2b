//! Image references parsed by hand, to the grammar of the distribution
//! reference (`[domain[:port]/]path[:tag][@digest]`), into oci-client's
//! `Reference`.
//!
//! Why not `str::parse::<Reference>()`: it runs one big regex whose tag
//! part (`[\w][\w.-]{0,127}`, Unicode classes repeated 128 times) compiles
//! to an NFA of megabytes; every capture search takes a PikeVM cache of
//! about 2.6 MB from the regex's pool, and the pool keeps one per thread
//! that ever searched at once. heaptrack on the controller at 1,000 nodes
//! found 25 MiB of its 67 MiB peak heap in those caches, kept for the
//! process's life (the webhook paid the same). This parser allocates the
//! parts' strings and nothing else.
//!
//! It accepts what that regex accepts and splits it the same way (a
//! property test holds the two together), except that a tag must be ASCII
//! (`[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`, as the distribution spec says;
//! the regex's `\w` also took other scripts' letters, which no registry
//! serves).

use oci_client::Reference;

const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_LEGACY: &str = "index.docker.io";
const OFFICIAL_REPOSITORIES: &str = "library";
const DEFAULT_TAG: &str = "latest";
/// Longest repository name (after the registry is split off).
const MAX_REPOSITORY: usize = 255;
/// Longest tag.
const MAX_TAG: usize = 128;

/// Why a reference was refused (never echoes more than the reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("empty reference")]
    Empty,
    #[error("invalid reference format")]
    Format,
    #[error("repository name must not be more than 255 characters")]
    NameTooLong,
    #[error("invalid checksum digest format")]
    DigestFormat,
    #[error("invalid checksum digest length")]
    DigestLength,
    #[error("unsupported digest algorithm")]
    DigestAlgorithm,
}

/// Parse `s` as an image reference; a reference with neither tag nor
/// digest gets the tag `latest`, and a Docker Hub name its `docker.io`
/// registry and `library/` repository prefix.
pub fn parse(s: &str) -> Result<Reference, ReferenceError> {
    if s.is_empty() {
        return Err(ReferenceError::Empty);
    }
    let (rest, digest) = match s.split_once('@') {
        Some((rest, digest)) => {
            if !is_digest(digest) {
                return Err(ReferenceError::Format);
            }
            (rest, Some(digest))
        }
        None => (s, None),
    };
    // A tag follows the last ':' that no '/' follows (a port's ':' does).
    let (name, tag) = match rest.rfind(':') {
        Some(at) if !rest[at..].contains('/') => (&rest[..at], Some(&rest[at + 1..])),
        _ => (rest, None),
    };
    if !is_name(name) || tag.is_some_and(|t| !is_tag(t)) {
        return Err(ReferenceError::Format);
    }
    let (registry, repository) = split_domain(name);
    if repository.len() > MAX_REPOSITORY {
        return Err(ReferenceError::NameTooLong);
    }
    if let Some(d) = digest {
        check_digest_length(d)?;
    }
    let tag = tag.map(str::to_string);
    Ok(match (tag, digest.map(str::to_string)) {
        (Some(t), Some(d)) => Reference::with_tag_and_digest(registry, repository, t, d),
        (None, Some(d)) => Reference::with_digest(registry, repository, d),
        (t, None) => {
            Reference::with_tag(registry, repository, t.unwrap_or(DEFAULT_TAG.to_string()))
        }
    })
}

/// `[domain[:port]/]component(/component)*`.
fn is_name(name: &str) -> bool {
    let mut parts = name.split('/');
    let Some(first) = parts.next() else {
        return false;
    };
    let rest: Vec<&str> = parts.collect();
    let first_ok = is_path_component(first) || (!rest.is_empty() && is_domain(first));
    first_ok && rest.iter().all(|c| is_path_component(c))
}

/// Lowercase letters and digits in runs joined by one '.', one '_', two
/// '_' or any number of '-'; a run at each end.
fn is_path_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    let (Some(&first), Some(&last)) = (b.first(), b.last()) else {
        return false;
    };
    if !alnum(first) || !alnum(last) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator between two runs.
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = matches!(sep, "." | "_" | "__") || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// Labels of letters, digits and inner '-' joined by '.', then an optional
/// `:port`.
fn is_domain(d: &str) -> bool {
    let (host, port) = match d.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (d, None),
    };
    let label = |l: &str| {
        let b = l.as_bytes();
        match (b.first(), b.last()) {
            (Some(f), Some(e)) => {
                f.is_ascii_alphanumeric()
                    && e.is_ascii_alphanumeric()
                    && b.iter().all(|x| x.is_ascii_alphanumeric() || *x == b'-')
            }
            _ => false,
        }
    };
    host.split('.').all(label)
        && port.is_none_or(|p| !p.is_empty() && p.bytes().all(|x| x.is_ascii_digit()))
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`.
fn is_tag(t: &str) -> bool {
    let word = |x: u8| x.is_ascii_alphanumeric() || x == b'_';
    let b = t.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_TAG
        && word(b[0])
        && b[1..].iter().all(|x| word(*x) || *x == b'.' || *x == b'-')
}

/// `algorithm:hex` with an algorithm of letter-led alphanumeric parts
/// joined by '-', '_', '+' or '.', and at least 32 hex digits.
fn is_digest(d: &str) -> bool {
    let Some((algorithm, hex)) = d.split_once(':') else {
        return false;
    };
    let part = |p: &str| {
        let b = p.as_bytes();
        !b.is_empty() && b[0].is_ascii_alphabetic() && b.iter().all(u8::is_ascii_alphanumeric)
    };
    algorithm.split(['-', '_', '+', '.']).all(part)
        && hex.len() >= 32
        && hex.bytes().all(|x| x.is_ascii_hexdigit())
}

/// The lengths the digest algorithms give (after the grammar held).
fn check_digest_length(d: &str) -> Result<(), ReferenceError> {
    let (algorithm, hex) = d.split_once(':').ok_or(ReferenceError::DigestFormat)?;
    let want = match algorithm {
        "sha256" => 64,
        "sha384" => 96,
        "sha512" => 128,
        _ => return Err(ReferenceError::DigestAlgorithm),
    };
    if hex.len() == want {
        Ok(())
    } else {
        Err(ReferenceError::DigestLength)
    }
}

/// The registry and the repository, as Docker names them: a first part
/// with a '.' or ':', or `localhost`, is a registry; otherwise the name is
/// Docker Hub's, and a single part is an official image under `library/`.
fn split_domain(name: &str) -> (String, String) {
    let (mut domain, mut remainder) = match name.split_once('/') {
        Some((left, right)) if left.contains(['.', ':']) || left == "localhost" => {
            (left.to_string(), right.to_string())
        }
        _ => (DOCKER_HUB.to_string(), name.to_string()),
    };
    if domain == DOCKER_HUB_LEGACY {
        domain = DOCKER_HUB.to_string();
    }
    if domain == DOCKER_HUB && !remainder.contains('/') {
        remainder = format!("{OFFICIAL_REPOSITORIES}/{remainder}");
    }
    (domain, remainder)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// (registry, repository, tag, digest) of a parsed reference.
    fn parts(r: &Reference) -> (String, String, Option<String>, Option<String>) {
        (
            r.registry().to_string(),
            r.repository().to_string(),
            r.tag().map(str::to_string),
            r.digest().map(str::to_string),
        )
    }

    /// What the regex of `oci_spec` makes of `s`.
    fn by_regex(s: &str) -> Option<(String, String, Option<String>, Option<String>)> {
        s.parse::<Reference>().ok().map(|r| parts(&r))
    }

    fn same(s: &str) {
        let mine = parse(s).ok().map(|r| parts(&r));
        assert_eq!(mine, by_regex(s), "{s:?}");
    }

    const SHA: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_references_the_regex_takes_or_refuses() {
        for s in [
            "busybox",
            "test.com:tag",
            "test.com:5000",
            "test.com/repo:tag",
            "test:5000/repo",
            "test:5000/repo:tag",
            "localhost/repo",
            "localhost:5000/a/b/c:v1.2-rc_3",
            "127.0.0.1:35000/nfguard-e2e/incident:1.8.7-nft",
            "[::1]:5000/repo",
            "index.docker.io/busybox",
            "docker.io/library/busybox:1",
            "Foo/bar",
            "foo/Bar",
            "a__b/c_d/e--f/g.h",
            "a___b",
            "a._b",
            "a-.b",
            "-a",
            "a-",
            "a..b",
            "a/",
            "/a",
            "a//b",
            "a:",
            "a@",
            ":tag",
            "a:-tag",
            "a:_tag",
            "a:.tag",
            "host-.com/a",
            "host.-com/a",
            "ho_st.com/a",
            "host.com:/a",
            "host.com:50a/a",
            "a:b:c",
            "a:1/b:c/d",
            "a@b@c",
            "a:b@c",
        ] {
            same(s);
        }
        same(&format!("busybox@{SHA}"));
        same(&format!("busybox:1.36@{SHA}"));
        same(&format!("reg.example:443/app@{SHA}"));
        same("busybox@sha256:0123456789abcdef0123456789abcdef");
        same("busybox@md5:0123456789abcdef0123456789abcdef");
        same("busybox@SHA256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
        same(&format!("a:{}", "t".repeat(128)));
        same(&format!("a:{}", "t".repeat(129)));
        same(&format!("h.com/{}", "a".repeat(255)));
        same(&format!("h.com/{}", "a".repeat(256)));
        same(&"a".repeat(250));
    }

    #[test]
    fn errors_say_what_is_wrong_without_more_than_the_reference() {
        assert_eq!(parse("").unwrap_err(), ReferenceError::Empty);
        assert_eq!(parse("A").unwrap_err(), ReferenceError::Format);
        assert_eq!(
            parse("a@md5:0123456789abcdef0123456789abcdef").unwrap_err(),
            ReferenceError::DigestAlgorithm
        );
        assert_eq!(
            parse("a@sha256:0123456789abcdef0123456789abcdef").unwrap_err(),
            ReferenceError::DigestLength
        );
        assert_eq!(
            parse(&format!("h.com/{}", "a".repeat(256))).unwrap_err(),
            ReferenceError::NameTooLong
        );
    }

    #[test]
    fn a_non_ascii_tag_is_refused() {
        // The regex's `\w` took it; the distribution spec does not.
        assert!("a:tägé".parse::<Reference>().is_ok());
        assert_eq!(parse("a:tägé").unwrap_err(), ReferenceError::Format);
    }

    /// References built from parts, each part valid or a near miss.
    fn structured() -> impl Strategy<Value = String> {
        let domain = prop_oneof![
            Just(String::new()),
            "[a-zA-Z0-9]{1,5}(\\.[a-zA-Z0-9]{1,4}){0,2}(:[0-9]{1,5})?/",
            "[a-zA-Z0-9][a-zA-Z0-9.-]{0,8}(:[0-9a]{0,4})?/",
            Just("localhost/".to_string()),
            Just("localhost:5000/".to_string()),
            Just("index.docker.io/".to_string()),
        ];
        // Mostly well-formed components (separators between runs), some noise.
        let path = prop_oneof![
            3 => "[a-z0-9]{1,4}(([._]|__|-{1,2})[a-z0-9]{1,3}){0,2}(/[a-z0-9]{1,4}([._-][a-z0-9]{1,3})?){0,2}",
            1 => "[a-z0-9._-]{1,8}(/[a-zA-Z0-9._-]{0,6}){0,3}",
        ];
        let tag = prop_oneof![
            Just(String::new()),
            ":[a-zA-Z0-9_.-]{0,10}",
            Just(format!(":{}", "v".repeat(128))),
            Just(format!(":{}", "v".repeat(129))),
        ];
        let digest = prop_oneof![
            Just(String::new()),
            Just(format!("@{SHA}")),
            "@[a-zA-Z0-9+._-]{1,8}:[0-9a-fA-Fg]{30,66}",
        ];
        (domain, path, tag, digest).prop_map(|(d, p, t, g)| format!("{d}{p}{t}{g}"))
    }

    #[test]
    fn agrees_with_the_regex_on_structured_references() {
        use proptest::test_runner::{Config, TestRunner};
        let mut runner = TestRunner::new(Config::with_cases(4000));
        let valid = std::sync::atomic::AtomicUsize::new(0);
        runner
            .run(&structured(), |s| {
                same(&s);
                if parse(&s).is_ok() {
                    valid.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(())
            })
            .unwrap();
        // Both sides of the grammar are exercised, not only refusals.
        let valid = valid.into_inner();
        assert!((400..=3600).contains(&valid), "{valid} of 4000 valid");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn agrees_with_the_regex_on_ascii_noise(s in "[a-zA-Z0-9._:/@+-]{0,24}") {
            same(&s);
        }
    }
}
