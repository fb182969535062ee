//! `[classify]`: trust, customers, API keys, health paths.

use ipnet::IpNet;

use super::{bad, check_customer, origin_form, Invalid};
use crate::config::ClassifyConfig;

/// Most CIDRs in `classify.trusted`.
const MAX_TRUSTED: usize = 1024;
/// Most entries in `classify.api_keys`.
const MAX_API_KEYS: usize = 100_000;
/// Most paths in `classify.health_paths`.
const MAX_HEALTH_PATHS: usize = 256;

pub(super) fn validate(c: &ClassifyConfig) -> Result<(), Invalid> {
    if c.trusted.len() > MAX_TRUSTED {
        return Err(bad(
            "classify.trusted",
            format!("{} CIDRs", c.trusted.len()),
            &format!("at most {MAX_TRUSTED} CIDRs"),
        ));
    }
    for (i, cidr) in c.trusted.iter().enumerate() {
        trusted(&format!("classify.trusted[{i}]"), cidr)?;
    }
    if !(c.default_cost.is_finite() && c.default_cost > 0.0) {
        return Err(bad(
            "classify.default_cost",
            c.default_cost,
            "a finite number > 0",
        ));
    }
    check_customer("classify.default_customer", &c.default_customer)?;
    if http::HeaderName::from_bytes(c.api_key_header.as_bytes()).is_err() {
        return Err(bad(
            "classify.api_key_header",
            format!("{:?}", c.api_key_header),
            "an HTTP header name",
        ));
    }
    if c.api_keys.len() > MAX_API_KEYS {
        return Err(bad(
            "classify.api_keys",
            format!("{} keys", c.api_keys.len()),
            &format!("at most {MAX_API_KEYS} keys"),
        ));
    }
    for (k, v) in &c.api_keys {
        api_key(&format!("classify.api_keys.{k:?}"), k)?;
        check_customer(&format!("classify.api_keys.{k}"), v)?;
    }
    if c.health_paths.len() > MAX_HEALTH_PATHS {
        return Err(bad(
            "classify.health_paths",
            format!("{} paths", c.health_paths.len()),
            &format!("at most {MAX_HEALTH_PATHS} paths"),
        ));
    }
    for (i, p) in c.health_paths.iter().enumerate() {
        if !p.starts_with('/') {
            return Err(bad(
                format!("classify.health_paths[{i}]"),
                format!("{p:?}"),
                "a path starting with /",
            ));
        }
        // Compared with the request's path alone: a query here would never match.
        origin_form(&format!("classify.health_paths[{i}]"), p, false)?;
    }
    Ok(())
}

/// A trusted CIDR as written: a network address and its prefix length, nothing around them.
///
/// Why refuse instead of fixing: `" 10.0.0.0/8"` was trimmed where it was used and shown as
/// written everywhere else (`/config`, `--check`), and `10.0.0.1/8` trusted all of 10/8 while
/// reading like one host; an operator who wrote either may have meant something else.
fn trusted(key: &str, cidr: &str) -> Result<(), Invalid> {
    if cidr.trim() != cidr {
        return Err(bad(
            key,
            format!("{cidr:?}"),
            "a CIDR without spaces around it, such as \"10.0.0.0/8\"",
        ));
    }
    let Ok(net) = cidr.parse::<IpNet>() else {
        return Err(bad(
            key,
            format!("{cidr:?}"),
            "a CIDR such as 10.0.0.0/8 or ::1/128",
        ));
    };
    if net.addr() != net.network() {
        return Err((
            key.to_string(),
            format!(
                "{cidr:?}: the address has host bits set below the /{} prefix (the bits past \
                 the first {} are not zero): expected the network address, \"{}\" (or \"{}/{}\" \
                 for that one host)",
                net.prefix_len(),
                net.prefix_len(),
                net.trunc(),
                net.addr(),
                net.max_prefix_len(),
            ),
        ));
    }
    Ok(())
}

/// An API key: compared with a header value, which cannot be empty in a way that identifies
/// anyone, nor start or end with blanks (they are not part of a field value), nor hold control
/// characters.
fn api_key(key: &str, k: &str) -> Result<(), Invalid> {
    const ACCEPTED: &str =
        "a non-empty key of visible ASCII characters (spaces inside allowed, not around)";
    if k.is_empty() {
        return Err(bad(
            key,
            "\"\" (an empty key would match an empty header)",
            ACCEPTED,
        ));
    }
    let visible = k.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
    if k.trim() != k || !visible {
        return Err(bad(key, format!("{k:?}"), ACCEPTED));
    }
    Ok(())
}
