//! The admin API's bearer token (RFC 6750 §2.1, `Authorization: Bearer <token>`).
//!
//! Why constant time: a comparison that stops at the first differing byte tells a patient
//! attacker, through response timing, how many leading bytes they have right. `subtle`'s
//! `ct_eq` looks at every byte whatever the contents. Its only shortcut is on *length*, which
//! leaks the token's length and nothing else; the token is required to be at least
//! [`MIN_TOKEN_LEN`] bytes, so knowing the length does not help.

use http::header::AUTHORIZATION;
use http::HeaderMap;
use subtle::ConstantTimeEq;

pub use crate::config::admin::MIN_TOKEN_LEN;

/// Whether `headers` carry `Authorization: Bearer <expected>`. The scheme is matched
/// case-insensitively (RFC 9110 §11.1); the token is compared in constant time.
pub fn bearer_matches(expected: &[u8], headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(AUTHORIZATION) else {
        return false;
    };
    let v = value.as_bytes();
    const SCHEME: &[u8] = b"bearer ";
    if v.len() < SCHEME.len() || !v[..SCHEME.len()].eq_ignore_ascii_case(SCHEME) {
        return false;
    }
    let presented = v[SCHEME.len()..].trim_ascii();
    bool::from(presented.ct_eq(expected))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::admin::validate_token;
    use http::HeaderValue;

    fn with(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        h
    }

    const T: &[u8] = b"0123456789abcdef0123";

    #[test]
    fn accepts_only_the_exact_token() {
        assert!(bearer_matches(T, &with("Bearer 0123456789abcdef0123")));
        assert!(bearer_matches(T, &with("bearer 0123456789abcdef0123")));
        assert!(bearer_matches(T, &with("BEARER  0123456789abcdef0123 ")));
        assert!(!bearer_matches(T, &HeaderMap::new()));
        assert!(!bearer_matches(T, &with("Bearer 0123456789abcdef012")));
        assert!(!bearer_matches(T, &with("Bearer 0123456789abcdef01234")));
        assert!(!bearer_matches(T, &with("Bearer 0123456789abcdef0124")));
        assert!(!bearer_matches(T, &with("Basic 0123456789abcdef0123")));
        assert!(!bearer_matches(T, &with("0123456789abcdef0123")));
        assert!(!bearer_matches(T, &with("Bearer")));
        assert!(!bearer_matches(T, &with("Bearer ")));
    }

    #[test]
    fn token_validation_never_echoes_the_token() {
        assert!(validate_token("admin.token", "0123456789abcdef").is_ok());
        let e = validate_token("admin.token", "short-secret").unwrap_err();
        assert_eq!(e.field, "admin.token");
        assert!(!e.to_string().contains("short-secret"), "{e}");
        assert!(validate_token("admin.token", "0123456789 abcdef").is_err());
    }
}
