//! The registry token dance's pure parts: the `WWW-Authenticate` challenge
//! of a 401, the token service's JSON answer, and the per-(registry,
//! repository, credentials) cache of what to send as `Authorization`.

use super::Credentials;
use moka::sync::Cache;
use reqwest_oci::header::HeaderValue;
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

/// A challenge header longer than this is refused unparsed.
pub const MAX_CHALLENGE_BYTES: usize = 4 << 10;
/// A token service's answer is read at most this far (JWTs are a few KB).
pub const MAX_TOKEN_RESPONSE_BYTES: u64 = 256 << 10;
/// Tokens without `expires_in` live 60 s (the distribution spec's default).
const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(60);
/// Never trust a token longer than this, whatever it says.
const MAX_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// Authorization values cached at most.
const CACHE_ENTRIES: u64 = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    /// `Basic realm="..."`: send the credentials themselves.
    Basic,
    /// `Bearer realm="...",service="..."`: fetch a token from `realm`.
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

/// Parse a `WWW-Authenticate` value. The error says what was malformed in
/// our words (the header is the remote's text).
pub fn parse_challenge(header: &[u8]) -> Result<Challenge, &'static str> {
    if header.len() > MAX_CHALLENGE_BYTES {
        return Err("authentication challenge is too long");
    }
    let text = std::str::from_utf8(header).map_err(|_| "authentication challenge is not UTF-8")?;
    let text = text.trim();
    let (scheme, rest) = text.split_once(' ').unwrap_or((text, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Ok(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err("authentication challenge has an unsupported scheme");
    }
    let params = parse_params(rest).ok_or("authentication challenge is malformed")?;
    let get = |k: &str| {
        params
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(k))
            .map(|(_, v)| v.clone())
    };
    let realm = get("realm").ok_or("bearer challenge has no realm")?;
    Ok(Challenge::Bearer {
        realm,
        service: get("service"),
    })
}

/// `k="v", k2=v2` (quoted strings may hold `\"` and commas).
fn parse_params(s: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            if !(c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return None;
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() || chars.next() != Some('=') {
            return None;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        out.push((key, value));
    }
}

#[derive(serde::Deserialize)]
struct TokenResponse {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// A token service's answer -> (`Bearer ...` header value, how long to use it).
pub fn parse_token_response(body: &[u8]) -> Result<(HeaderValue, Duration), &'static str> {
    let t: TokenResponse =
        serde_json::from_slice(body).map_err(|_| "token response is not the expected JSON")?;
    let token = t
        .token
        .or(t.access_token)
        .filter(|t| !t.is_empty())
        .ok_or("token response holds no token")?;
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| "token holds characters not allowed in a header")?;
    value.set_sensitive(true);
    let ttl = t
        .expires_in
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TOKEN_TTL)
        .min(MAX_TOKEN_TTL);
    // Renew a little early: the token must still be valid when it arrives.
    Ok((value, ttl.mul_f64(0.9)))
}

pub fn basic_header(username: &str, password: &str) -> Option<HeaderValue> {
    use base64::Engine;
    let pair = base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
    let mut value = HeaderValue::from_str(&format!("Basic {pair}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// Identity of credentials, without keeping them readable in a key.
pub fn credential_identity(credentials: &Credentials) -> String {
    let mut h = Sha256::new();
    match credentials {
        Credentials::Anonymous => h.update(b"anonymous"),
        Credentials::Basic { username, password } => {
            h.update(b"basic\0");
            h.update(username.as_bytes());
            h.update(b"\0");
            h.update(password.as_bytes());
        }
    }
    hex::encode(h.finalize())
}

/// (registry, repository, credential identity).
pub type AuthKey = (String, String, String);

#[derive(Clone)]
struct Cached {
    value: HeaderValue,
    ttl: Duration,
}

struct TtlExpiry;

impl moka::Expiry<AuthKey, Cached> for TtlExpiry {
    fn expire_after_create(&self, _k: &AuthKey, v: &Cached, _now: Instant) -> Option<Duration> {
        Some(v.ttl)
    }
}

/// What to send as `Authorization` for a (registry, repository, credentials).
#[derive(Clone)]
pub struct AuthCache(Cache<AuthKey, Cached>);

impl Default for AuthCache {
    fn default() -> Self {
        Self(
            Cache::builder()
                .max_capacity(CACHE_ENTRIES)
                .expire_after(TtlExpiry)
                .build(),
        )
    }
}

impl AuthCache {
    pub fn get(&self, key: &AuthKey) -> Option<HeaderValue> {
        self.0.get(key).map(|c| c.value)
    }

    pub fn insert(&self, key: AuthKey, value: HeaderValue, ttl: Duration) {
        self.0.insert(key, Cached { value, ttl });
    }

    pub fn remove(&self, key: &AuthKey) {
        self.0.invalidate(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenges_parse_with_quotes_commas_and_case() {
        let c = parse_challenge(
            br#"Bearer realm="https://auth.example/token?a=1,b",service="registry.example",scope="repository:a/b:pull""#,
        )
        .unwrap();
        assert_eq!(
            c,
            Challenge::Bearer {
                realm: "https://auth.example/token?a=1,b".into(),
                service: Some("registry.example".into())
            }
        );
        let c = parse_challenge(br#"bearer Realm=http://127.0.0.1:1/t, error="x\"y""#).unwrap();
        assert_eq!(
            c,
            Challenge::Bearer {
                realm: "http://127.0.0.1:1/t".into(),
                service: None
            }
        );
        assert_eq!(
            parse_challenge(br#"Basic realm="r""#).unwrap(),
            Challenge::Basic
        );
    }

    #[test]
    fn malformed_challenges_are_refused_in_our_words() {
        assert_eq!(
            parse_challenge(br#"Bearer service="s""#),
            Err("bearer challenge has no realm")
        );
        assert_eq!(
            parse_challenge(br#"Bearer realm="unterminated"#),
            Err("authentication challenge is malformed")
        );
        assert_eq!(
            parse_challenge(b"Negotiate abc"),
            Err("authentication challenge has an unsupported scheme")
        );
        let long = format!("Bearer realm=\"{}\"", "a".repeat(MAX_CHALLENGE_BYTES));
        assert_eq!(
            parse_challenge(long.as_bytes()),
            Err("authentication challenge is too long")
        );
        assert_eq!(
            parse_challenge(b"Bearer \xff"),
            Err("authentication challenge is not UTF-8")
        );
    }

    #[test]
    fn token_responses_give_a_header_and_a_bounded_lifetime() {
        let (v, ttl) = parse_token_response(br#"{"token":"abc","expires_in":300}"#).unwrap();
        assert_eq!(v.to_str().unwrap(), "Bearer abc");
        assert!(v.is_sensitive());
        assert_eq!(ttl, Duration::from_secs(270));
        let (v, ttl) = parse_token_response(br#"{"access_token":"t"}"#).unwrap();
        assert_eq!(v.to_str().unwrap(), "Bearer t");
        assert_eq!(ttl, Duration::from_secs(54));
        let (_, ttl) = parse_token_response(br#"{"token":"t","expires_in":999999999}"#).unwrap();
        assert_eq!(ttl, Duration::from_secs(3240));
        assert_eq!(
            parse_token_response(b"<html>secret</html>").unwrap_err(),
            "token response is not the expected JSON"
        );
        assert_eq!(
            parse_token_response(br#"{"token":""}"#).unwrap_err(),
            "token response holds no token"
        );
        assert_eq!(
            parse_token_response(b"{\"token\":\"a\\nb\"}").unwrap_err(),
            "token holds characters not allowed in a header"
        );
    }

    #[test]
    fn cache_is_keyed_by_credential_identity_and_expires() {
        let cache = AuthCache::default();
        let alice = credential_identity(&Credentials::Basic {
            username: "alice".into(),
            password: "pw".into(),
        });
        let anon = credential_identity(&Credentials::Anonymous);
        assert_ne!(alice, anon);
        let key = |id: &str| ("r".to_string(), "app".to_string(), id.to_string());
        cache.insert(
            key(&alice),
            HeaderValue::from_static("Bearer a"),
            Duration::from_secs(60),
        );
        assert!(cache.get(&key(&alice)).is_some());
        assert!(cache.get(&key(&anon)).is_none());
        cache.insert(
            key(&anon),
            HeaderValue::from_static("Bearer b"),
            Duration::from_millis(1),
        );
        std::thread::sleep(Duration::from_millis(20));
        assert!(cache.get(&key(&anon)).is_none());
        cache.remove(&key(&alice));
        assert!(cache.get(&key(&alice)).is_none());
    }
}
