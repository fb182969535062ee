//! Paths in the configuration that go on the wire or are compared with a request's path: they
//! must be what a request target can hold (origin form, RFC 9112 §3.2.1), or they silently do
//! nothing — a health check never sent, a degraded request sent to its original path, a route
//! or health path that never matches.

use super::Invalid;

/// What an origin-form path may hold, for messages.
const ACCEPTED: &str = "an origin-form path: \"/\" then visible ASCII characters only \
                        (no spaces, control characters, line breaks or \"#\"; percent-encode \
                        others, e.g. %20 for a space)";

/// Checks that `value` (the value of `key`, already known to start with `/`) is an origin-form
/// path, with a query (`?…`) only if `query` allows one.
pub(crate) fn origin_form(key: &str, value: &str, query: bool) -> Result<(), Invalid> {
    let fail = |what: String| -> Result<(), Invalid> {
        let also = if query { "" } else { ", and no \"?\" query" };
        Err((
            key.to_string(),
            format!("{value:?}: {what}: expected {ACCEPTED}{also}"),
        ))
    };
    if !value.starts_with('/') {
        return fail("does not start with \"/\"".into());
    }
    let bytes = value.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let what = match b {
            b' ' => "a space",
            b'\r' => "a carriage return (CR)",
            b'\n' => "a line feed (LF)",
            b'\t' => "a tab",
            0..=0x1f | 0x7f => "a control character",
            0x80.. => "a non-ASCII character",
            b'#' => "a \"#\" (a fragment is never sent)",
            b'?' if !query => "a \"?\" (the request's own query is kept)",
            b'%' if !(bytes.get(i + 1..i + 3))
                .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) =>
            {
                "a \"%\" not followed by two hex digits"
            }
            _ => continue,
        };
        return fail(format!("{what} at byte {i}"));
    }
    // What is left the `http` crate must take as a request target, as the proxy will.
    if value.parse::<http::uri::PathAndQuery>().is_err() {
        return fail("not a valid request target".into());
    }
    Ok(())
}
