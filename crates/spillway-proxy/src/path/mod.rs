//! A request's path made normal before routing, and forwarded as it was routed.
//!
//! Why: routes pick criticality and cost, so a path the proxy reads one way and the upstream
//! another lets a caller choose its own criticality — `//api/export/x`, `/api/./export/x`,
//! `/x/../api/export/x`, `/api/%65xport/x` all name `/api/export/x` to most servers but not to
//! a prefix or glob compared byte by byte. So the path is brought to one spelling first
//! (RFC 3986 §6.2.2: percent-encoded unreserved characters decoded, §2.1: hex digits in upper
//! case, §5.2.4: dot segments removed; and empty segments merged), the route is matched on that
//! spelling, and the upstream is sent that same path, so the route chosen and the path served
//! agree whatever the upstream's own rules. What cannot be made unambiguous is refused (400):
//! by default an encoded `/` or `\` (`%2F`, `%5C`, or a literal `\`, which some servers read as
//! a separator), a `;` parameter (servlet containers drop it and read `..;` as `..`), a `%` not
//! followed by two hex digits, and a target that is neither a path nor `*` for `OPTIONS`.
//! `[request]` in CONFIG.md says what each alternative gives up.
//!
//! A path that is already normal — nearly every request — is checked in one pass over its bytes
//! and left where it is: no allocation.

use std::borrow::Cow;

use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Method, Uri};

use serde::{Deserialize, Serialize};

#[cfg(test)]
mod tests;

/// Why a request's path cannot be routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// `%2F` or `%5C` under `request.escaped_slashes = "refuse"`.
    #[error(
        "the path has an encoded slash (%2F or %5C), which the upstream could read as a \
         separator; send the path with plain `/` (request.escaped_slashes = \"refuse\")"
    )]
    EncodedSlash,
    /// A literal `\` under `request.escaped_slashes = "refuse"`.
    #[error(
        "the path has a backslash, which some servers read as `/`; send `/` or `%5C` \
         (request.escaped_slashes = \"refuse\")"
    )]
    Backslash,
    /// A `;` under `request.path_parameters = "refuse"`.
    #[error(
        "the path has a `;` parameter, which some servers strip before resolving the path; \
         send it without (request.path_parameters = \"refuse\")"
    )]
    Parameters,
    /// A `%` not followed by two hex digits.
    #[error(
        "the path has a `%` not followed by two hex digits (RFC 3986 §2.1: `%` HEXDIG HEXDIG)"
    )]
    BadEscape,
    /// Neither `/…` nor `*` for `OPTIONS`.
    #[error(
        "the request target is not a path: accepted are `/…` (or an absolute URL with one) and \
         `*` for OPTIONS"
    )]
    NotAPath,
}

/// Encoded slashes (`%2F`, `%5C`) and the backslash in a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EscapedSlashes {
    /// 400: an upstream may decode them into separators the proxy did not route on. Default.
    #[default]
    Refuse,
    /// Each becomes `/` before routing, and the path is forwarded so.
    Decode,
    /// Kept as they are and matched as ordinary characters (for upstreams that keep `%2F` inside
    /// one segment, e.g. `/repos/a%2Fb`; unsafe with one that decodes them).
    Keep,
}

/// `;` parameters in path segments (`/api/export;a/x`, `/x/..;/y`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PathParameters {
    /// 400: servlet containers strip them (and read `..;` as `..`), others do not. Default.
    #[default]
    Refuse,
    /// Each segment's `;…` is removed before dot segments are resolved, and the path is
    /// forwarded without them.
    Strip,
    /// `;` is an ordinary character (unsafe with an upstream that strips parameters).
    Keep,
}

/// The normaliser's settings (the path part of `[request]`: `RequestConfig::path_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathPolicy {
    /// `request.escaped_slashes`.
    pub escaped_slashes: EscapedSlashes,
    /// `request.path_parameters`.
    pub parameters: PathParameters,
}

impl PathPolicy {
    /// Makes `parts.uri`'s path normal (the query kept byte for byte; an absolute target keeps
    /// its scheme and authority). `OPTIONS *` is left as it is. Errors say what was wrong.
    pub fn apply(&self, parts: &mut Parts) -> Result<(), PathError> {
        let path = parts.uri.path();
        if path == "*" && parts.method == Method::OPTIONS {
            return Ok(());
        }
        let normal = match self.normalize(path)? {
            Cow::Borrowed(_) => return Ok(()),
            Cow::Owned(p) => p,
        };
        let pq = match parts.uri.query() {
            Some(q) => format!("{normal}?{q}"),
            None => normal,
        };
        let pq = PathAndQuery::try_from(pq).map_err(|_| PathError::NotAPath)?;
        let mut uri = std::mem::take(&mut parts.uri).into_parts();
        uri.path_and_query = Some(pq);
        parts.uri = Uri::from_parts(uri).map_err(|_| PathError::NotAPath)?;
        Ok(())
    }

    /// `path` in normal form: borrowed when it already is.
    pub fn normalize<'a>(&self, path: &'a str) -> Result<Cow<'a, str>, PathError> {
        if self.is_normal(path.as_bytes()) {
            return Ok(Cow::Borrowed(path));
        }
        let out = self.rewrite(path.as_bytes())?;
        if out == path.as_bytes() {
            return Ok(Cow::Borrowed(path));
        }
        // Only ASCII was changed, so the bytes are as valid UTF-8 as `path` was.
        String::from_utf8(out)
            .map(Cow::Owned)
            .map_err(|_| PathError::NotAPath)
    }

    /// The one-pass check: a path with no `%`, no `\`, no `;` (unless kept), no `//` and no
    /// `.`/`..` segment is normal as it stands. (A `%` sends a path to [`rewrite`](Self::rewrite)
    /// even when its escapes are already normal; such paths are rare.)
    fn is_normal(&self, p: &[u8]) -> bool {
        if p.first() != Some(&b'/') {
            return false;
        }
        let keep_semicolon = self.parameters == PathParameters::Keep;
        let mut prev = b'/';
        for (i, &b) in p.iter().enumerate().skip(1) {
            match b {
                b'%' | b'\\' => return false,
                b';' if !keep_semicolon => return false,
                b'/' if prev == b'/' => return false,
                b'.' if prev == b'/' => {
                    let rest = &p[i + 1..];
                    let dots = rest.first() == Some(&b'.');
                    let after = if dots { &rest[1..] } else { rest };
                    if matches!(after.first(), None | Some(b'/')) {
                        return false;
                    }
                }
                _ => {}
            }
            prev = b;
        }
        true
    }

    /// The slow path: escapes decoded or refused, parameters stripped or refused, then empty
    /// and dot segments resolved.
    fn rewrite(&self, p: &[u8]) -> Result<Vec<u8>, PathError> {
        if p.first() != Some(&b'/') {
            return Err(PathError::NotAPath);
        }
        let decoded = self.decode(p)?;
        let mut out = Vec::with_capacity(decoded.len());
        // Start offsets of the segments written to `out`, to pop on `..`.
        let mut starts: Vec<usize> = Vec::new();
        let mut trailing = false;
        for seg in decoded[1..].split(|&b| b == b'/') {
            let seg = match self.parameters {
                PathParameters::Refuse if seg.contains(&b';') => return Err(PathError::Parameters),
                PathParameters::Strip => seg.split(|&b| b == b';').next().unwrap_or_default(),
                _ => seg,
            };
            // An empty, `.` or `..` segment leaves the path ending in `/` if it is the last.
            trailing = true;
            match seg {
                b"" | b"." => {}
                b".." => {
                    if let Some(s) = starts.pop() {
                        out.truncate(s);
                    }
                }
                _ => {
                    starts.push(out.len());
                    out.push(b'/');
                    out.extend_from_slice(seg);
                    trailing = false;
                }
            }
        }
        if trailing || out.is_empty() {
            out.push(b'/');
        }
        Ok(out)
    }

    /// Percent-encoded unreserved characters decoded, other escapes' hex in upper case, encoded
    /// slashes and backslashes refused, decoded to `/` or kept.
    fn decode(&self, p: &[u8]) -> Result<Vec<u8>, PathError> {
        let mut out = Vec::with_capacity(p.len());
        let mut i = 0;
        while i < p.len() {
            let b = p[i];
            i += 1;
            match b {
                b'%' => {
                    let (Some(h), Some(l)) = (
                        p.get(i).copied().and_then(hex),
                        p.get(i + 1).copied().and_then(hex),
                    ) else {
                        return Err(PathError::BadEscape);
                    };
                    i += 2;
                    let v = h << 4 | l;
                    if is_unreserved(v) {
                        out.push(v);
                    } else if v == b'/' || v == b'\\' {
                        match self.escaped_slashes {
                            EscapedSlashes::Refuse => return Err(PathError::EncodedSlash),
                            EscapedSlashes::Decode => out.push(b'/'),
                            EscapedSlashes::Keep => push_escape(&mut out, v),
                        }
                    } else {
                        push_escape(&mut out, v);
                    }
                }
                b'\\' => match self.escaped_slashes {
                    EscapedSlashes::Refuse => return Err(PathError::Backslash),
                    EscapedSlashes::Decode => out.push(b'/'),
                    EscapedSlashes::Keep => out.push(b),
                },
                _ => out.push(b),
            }
        }
        Ok(out)
    }
}

/// RFC 3986 §2.3: ALPHA / DIGIT / `-` / `.` / `_` / `~`.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn push_escape(out: &mut Vec<u8>, v: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.extend_from_slice(&[b'%', HEX[usize::from(v >> 4)], HEX[usize::from(v & 15)]]);
}

/// Whether `path` is on the prefix route `prefix`: it starts with it, on a segment boundary
/// (`/api/export` takes `/api/export` and `/api/export/…`, not `/api/exports`; a prefix ending
/// in `/` takes what is below it). ASCII case is ignored unless `case_sensitive`.
pub fn prefix_matches(path: &str, prefix: &str, case_sensitive: bool) -> bool {
    let (p, q) = (path.as_bytes(), prefix.as_bytes());
    let Some(head) = p.get(..q.len()) else {
        return false;
    };
    same(head, q, case_sensitive) && (q.ends_with(b"/") || p.len() == q.len() || p[q.len()] == b'/')
}

/// Byte equality, ignoring ASCII case unless `case_sensitive`.
pub(crate) fn same(a: &[u8], b: &[u8], case_sensitive: bool) -> bool {
    if case_sensitive {
        a == b
    } else {
        a.eq_ignore_ascii_case(b)
    }
}
