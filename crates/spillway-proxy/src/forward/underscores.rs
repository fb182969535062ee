//! Request header fields whose names contain `_`, dropped or refused before anything reads them.
//!
//! Why: CGI, WSGI, PHP and Rack turn a field's name into a variable by upper-casing it and
//! replacing `-` with `_`, so `x_spillway_criticality` and `x-spillway-criticality` both become
//! `HTTP_X_SPILLWAY_CRITICALITY` there — and the proxy, which replaces only the real field with
//! its own decision, would pass the look-alike through to be read as the real one. Real clients
//! hardly ever name fields with `_`, so by default they are removed (`request.headers_with_underscores`).

use http::header::{HeaderMap, HeaderName};
use smallvec::SmallVec;

use crate::config::HeadersWithUnderscores;
use crate::metrics::{L_ACTION, UNDERSCORE_HEADERS};

/// Applies `action` to `headers`: drops the fields named with `_` (counted), or returns the
/// first such name for a 400. One scan of the names when there are none.
pub(super) fn apply(
    headers: &mut HeaderMap,
    action: HeadersWithUnderscores,
) -> Result<(), HeaderName> {
    if action == HeadersWithUnderscores::Allow {
        return Ok(());
    }
    let named = |n: &&HeaderName| n.as_str().as_bytes().contains(&b'_');
    let Some(first) = headers.keys().find(named) else {
        return Ok(());
    };
    if action == HeadersWithUnderscores::Refuse {
        metrics::counter!(UNDERSCORE_HEADERS, L_ACTION => "refused").increment(1);
        return Err(first.clone());
    }
    let names: SmallVec<[HeaderName; 4]> = headers.keys().filter(named).cloned().collect();
    let mut fields = 0u64;
    for n in &names {
        fields += headers.get_all(n).iter().count() as u64;
        headers.remove(n);
    }
    metrics::counter!(UNDERSCORE_HEADERS, L_ACTION => "dropped").increment(fields);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(fields: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in fields {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn dropped_refused_or_allowed() {
        let fields = [
            ("x_spillway_criticality", "CRITICAL_PLUS"),
            ("x-spillway-criticality", "SHEDDABLE"),
            ("x_a", "1"),
            ("x_a", "2"),
            ("accept", "*/*"),
        ];
        let mut h = map(&fields);
        apply(&mut h, HeadersWithUnderscores::Drop).unwrap();
        let mut names: Vec<_> = h.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["accept", "x-spillway-criticality"]);

        let mut h = map(&fields);
        let e = apply(&mut h, HeadersWithUnderscores::Refuse).unwrap_err();
        assert_eq!(e.as_str(), "x_spillway_criticality");

        let mut h = map(&fields);
        apply(&mut h, HeadersWithUnderscores::Allow).unwrap();
        assert_eq!(h.len(), 5);

        let mut h = map(&[("accept", "*/*"), ("x-b", "1")]);
        for a in [HeadersWithUnderscores::Drop, HeadersWithUnderscores::Refuse] {
            apply(&mut h, a).unwrap();
            assert_eq!(h.len(), 2);
        }
    }
}
