//! `[[routes]]` and their `[routes.degrade]`.

use std::collections::HashSet;

use super::{at_most, bad, origin_form, Invalid};
use crate::config::{DegradeConfig, RouteConfig};

/// Most routes (matched in order, each request against all of them until one matches).
const MAX_ROUTES: usize = 4096;
/// Most header matchers on one route.
const MAX_HEADERS: usize = 64;
/// Largest static degraded response body: 1 MiB.
const MAX_DEGRADE_BODY: usize = 1 << 20;

pub(super) fn validate(routes: &[RouteConfig]) -> Result<(), Invalid> {
    if routes.len() > MAX_ROUTES {
        return Err(bad(
            "routes",
            format!("{} routes", routes.len()),
            &format!("at most {MAX_ROUTES} routes"),
        ));
    }
    let mut names = HashSet::new();
    for (i, r) in routes.iter().enumerate() {
        let at = |k: &str| format!("routes[{i}].{k}");
        if r.name.is_empty() || r.name.len() > 64 || !r.name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(bad(
                at("name"),
                format!("{:?}", r.name),
                "1 to 64 visible ASCII characters",
            ));
        }
        if !names.insert(r.name.as_str()) {
            return Err(bad(
                at("name"),
                format!("{:?}", r.name),
                "a name no other route has",
            ));
        }
        for m in &r.methods {
            if http::Method::from_bytes(m.as_bytes()).is_err() {
                return Err(bad(
                    at("methods"),
                    format!("{m:?}"),
                    "HTTP methods such as GET, POST",
                ));
            }
        }
        if !r.path.starts_with('/') {
            return Err(bad(
                at("path"),
                format!("{:?}", r.path),
                "a path prefix or glob starting with /",
            ));
        }
        // Matched against the request's path alone: a space, a query or a fragment here would
        // never match anything.
        origin_form(&at("path"), &r.path, false)?;
        if r.headers.len() > MAX_HEADERS {
            return Err(bad(
                at("headers"),
                format!("{} headers", r.headers.len()),
                &format!("at most {MAX_HEADERS} headers"),
            ));
        }
        for k in r.headers.keys() {
            if http::HeaderName::from_bytes(k.as_bytes()).is_err() {
                return Err(bad(at("headers"), format!("{k:?}"), "HTTP header names"));
            }
        }
        if let Some(cost) = r.cost {
            if !(cost.is_finite() && cost > 0.0) {
                return Err(bad(at("cost"), cost, "a finite number > 0"));
            }
        }
        if let Some(d) = &r.degrade {
            degrade(i, d)?;
        }
    }
    Ok(())
}

/// `routes[i].degrade`.
fn degrade(i: usize, d: &DegradeConfig) -> Result<(), Invalid> {
    let at = |k: &str| format!("routes[{i}].degrade.{k}");
    if !(d.threshold.is_finite() && (0.0..=10.0).contains(&d.threshold)) {
        return Err(bad(
            at("threshold"),
            d.threshold,
            "a utilisation in 0 ..= 10",
        ));
    }
    let is_static = d.body.is_some() || d.status.is_some();
    match (&d.upstream_path, is_static) {
        (Some(_), true) => {
            return Err(bad(
                at("upstream_path"),
                "set with body/status",
                "either upstream_path or a static body/status, not both",
            ))
        }
        (None, false) => {
            return Err(bad(
                at("body"),
                "missing",
                "upstream_path, or a static body and/or status",
            ))
        }
        (Some(p), false) if !p.starts_with('/') => {
            return Err(bad(
                at("upstream_path"),
                format!("{p:?}"),
                "a path starting with /",
            ))
        }
        // The request's query is appended to it: with a space or a line break in it the
        // rewrite failed and the request silently went to its original path.
        (Some(p), false) => origin_form(&at("upstream_path"), p, false)?,
        _ => {}
    }
    if let Some(b) = &d.body {
        at_most(&at("body"), b.len(), MAX_DEGRADE_BODY, "bytes")?;
    }
    if let Some(s) = d.status {
        if http::StatusCode::from_u16(s).is_err() || s < 200 {
            return Err(bad(at("status"), s, "an HTTP status in 200 ..= 999"));
        }
    }
    if let Some(ct) = &d.content_type {
        if http::HeaderValue::from_str(ct).is_err() {
            return Err(bad(at("content_type"), format!("{ct:?}"), "a header value"));
        }
    }
    Ok(())
}
