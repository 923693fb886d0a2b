//! A bearer token's shape, checked before the API server is asked about it:
//! ServiceAccount tokens (legacy Secrets and projected ones alike) are
//! signed JWTs, so anything that is not three base64url parts with a JSON
//! header naming a signing algorithm and a JSON claims object, or that says
//! it has expired, is refused at once with the same 401 a review would give.
//! A made-up token then costs the node a few microseconds, not two reviews.
//! Where the reporter requires an audience (`--metrics-audience`), a token
//! whose `aud` claim does not name it (a legacy Secret token has none; a
//! Pod's default token names the API server) is refused the same way.
//! Only the shape is read: the signature and the claims' truth are the
//! TokenReview's to check.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Why a token was refused without a review.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("not three base64url parts")]
    Parts,
    #[error("header or claims not a JSON object")]
    Json,
    #[error("no signing algorithm")]
    Unsigned,
    #[error("expired")]
    Expired,
    #[error("not issued for this audience")]
    Audience,
}

/// Whether `token` can be a ServiceAccount JWT still valid at `now_unix`
/// (seconds) and, given `audience`, issued for it. `exp` is optional:
/// legacy Secret tokens have none.
pub fn check(token: &str, now_unix: u64, audience: Option<&str>) -> Result<(), Malformed> {
    let parts: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err(Malformed::Parts);
    };
    let base64url = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if ![header, claims, signature].into_iter().all(base64url) {
        return Err(Malformed::Parts);
    }
    let object = |p: &str| {
        let bytes = URL_SAFE_NO_PAD.decode(p).map_err(|_| Malformed::Parts)?;
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(serde_json::Value::Object(map)) => Ok(map),
            _ => Err(Malformed::Json),
        }
    };
    let header = object(header)?;
    match header.get("alg").and_then(|a| a.as_str()) {
        Some(alg) if !alg.is_empty() && !alg.eq_ignore_ascii_case("none") => {}
        _ => return Err(Malformed::Unsigned),
    }
    let claims = object(claims)?;
    match claims.get("exp") {
        None => {}
        Some(exp) => match exp.as_f64() {
            Some(exp) if exp > now_unix as f64 => {}
            Some(_) => return Err(Malformed::Expired),
            None => return Err(Malformed::Json),
        },
    }
    match audience {
        Some(want) if !names_audience(claims.get("aud"), want) => Err(Malformed::Audience),
        _ => Ok(()),
    }
}

/// RFC 7519: `aud` is one string or an array of strings.
fn names_audience(aud: Option<&serde_json::Value>, want: &str) -> bool {
    match aud {
        Some(serde_json::Value::String(a)) => a == want,
        Some(serde_json::Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(want)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        URL_SAFE_NO_PAD.encode(s)
    }

    fn jwt(header: &str, claims: &str) -> String {
        format!("{}.{}.{}", b64(header), b64(claims), b64("signature bytes"))
    }

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn service_account_tokens_pass_legacy_and_projected() {
        let legacy = jwt(
            r#"{"alg":"RS256","kid":"k"}"#,
            r#"{"iss":"kubernetes/serviceaccount","sub":"system:serviceaccount:monitoring:prometheus"}"#,
        );
        assert_eq!(check(&legacy, NOW, None), Ok(()));
        let projected = jwt(
            r#"{"alg":"ES256"}"#,
            r#"{"aud":["https://kubernetes.default.svc"],"exp":1800003600,"sub":"system:serviceaccount:m:p"}"#,
        );
        assert_eq!(check(&projected, NOW, None), Ok(()));
    }

    #[test]
    fn made_up_tokens_are_refused_without_a_review() {
        for (token, why) in [
            ("random-opaque-token", Malformed::Parts),
            ("a.b", Malformed::Parts),
            ("a.b.c.d", Malformed::Parts),
            ("..", Malformed::Parts),
            ("a+b.c/d.e=", Malformed::Parts),
            ("YQ.YQ.YQ", Malformed::Json),
        ] {
            assert_eq!(check(token, NOW, None), Err(why), "{token}");
        }
        assert_eq!(
            check(&jwt(r#"{"alg":"none"}"#, "{}"), NOW, None),
            Err(Malformed::Unsigned)
        );
        assert_eq!(check(&jwt("{}", "{}"), NOW, None), Err(Malformed::Unsigned));
        assert_eq!(
            check(&jwt(r#"{"alg":"RS256"}"#, "[1]"), NOW, None),
            Err(Malformed::Json)
        );
        assert_eq!(
            check(
                &jwt(r#"{"alg":"RS256"}"#, r#"{"exp":1799999999}"#),
                NOW,
                None
            ),
            Err(Malformed::Expired)
        );
        assert_eq!(
            check(&jwt(r#"{"alg":"RS256"}"#, r#"{"exp":"soon"}"#), NOW, None),
            Err(Malformed::Json)
        );
    }

    #[test]
    fn an_audience_is_required_when_asked_for() {
        const AUD: &str = "nfguard-reporter-metrics";
        let legacy = jwt(
            r#"{"alg":"RS256"}"#,
            r#"{"sub":"system:serviceaccount:m:p"}"#,
        );
        let api = jwt(
            r#"{"alg":"RS256"}"#,
            r#"{"aud":["https://kubernetes.default.svc"],"exp":1800003600}"#,
        );
        let ours = jwt(
            r#"{"alg":"RS256"}"#,
            r#"{"aud":["https://kubernetes.default.svc","nfguard-reporter-metrics"],"exp":1800003600}"#,
        );
        let ours_as_string = jwt(
            r#"{"alg":"RS256"}"#,
            r#"{"aud":"nfguard-reporter-metrics","exp":1800003600}"#,
        );
        let odd = jwt(
            r#"{"alg":"RS256"}"#,
            r#"{"aud":{"nfguard-reporter-metrics":1}}"#,
        );
        for (token, want) in [
            (&legacy, Err(Malformed::Audience)),
            (&api, Err(Malformed::Audience)),
            (&odd, Err(Malformed::Audience)),
            (&ours, Ok(())),
            (&ours_as_string, Ok(())),
        ] {
            assert_eq!(check(token, NOW, Some(AUD)), want, "{token}");
            assert_eq!(
                check(token, NOW, None),
                Ok(()),
                "no audience asked: {token}"
            );
        }
        let expired = jwt(
            r#"{"alg":"RS256"}"#,
            r#"{"aud":"nfguard-reporter-metrics","exp":1799999999}"#,
        );
        assert_eq!(check(&expired, NOW, Some(AUD)), Err(Malformed::Expired));
    }
}
