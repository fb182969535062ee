//! `[request]`: how a request's target and header names are made unambiguous before routing
//! (the normaliser is `crate::path`; the header rule is applied in `crate::forward`).
//!
//! Why these are settings at all: every choice here trades compatibility with some upstream for
//! safety against another. The defaults are the safe side — a request spelt so that the proxy
//! and the upstream could read it differently is refused or rewritten, never passed on as it is
//! — and each key says what an operator gives up by choosing otherwise (CONFIG.md `[request]`).

use serde::{Deserialize, Serialize};

// The normaliser's option types live beside it (`crate::path` imports nothing of the proxy).
use crate::path::PathPolicy;
pub use crate::path::{EscapedSlashes, PathParameters};

/// `[request]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RequestConfig {
    /// What to do with `%2F`, `%5C` and a literal `\` in a path. Default `refuse`.
    pub escaped_slashes: EscapedSlashes,
    /// What to do with `;` parameters in a path's segments. Default `refuse`.
    pub path_parameters: PathParameters,
    /// Whether routes and health paths match the path with ASCII case significant. Default
    /// false (`/API/x` is on the route `/api/**`; the path is forwarded as the client spelt it).
    pub case_sensitive_paths: bool,
    /// What to do with request header fields whose names contain `_`. Default `drop`.
    pub headers_with_underscores: HeadersWithUnderscores,
}

impl Default for RequestConfig {
    fn default() -> Self {
        RequestConfig {
            escaped_slashes: EscapedSlashes::Refuse,
            path_parameters: PathParameters::Refuse,
            case_sensitive_paths: false,
            headers_with_underscores: HeadersWithUnderscores::Drop,
        }
    }
}

impl RequestConfig {
    /// The path normaliser's settings this sets (`crate::path`).
    pub fn path_policy(&self) -> PathPolicy {
        PathPolicy {
            escaped_slashes: self.escaped_slashes,
            parameters: self.path_parameters,
        }
    }
}

/// Request header fields whose names contain `_` (`x_spillway_criticality`): CGI, WSGI and PHP
/// read `x-a` and `x_a` as one variable `HTTP_X_A`, so such a field can pass for a real one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum HeadersWithUnderscores {
    /// Removed before classification and forwarding; counted. Default.
    #[default]
    Drop,
    /// 400 naming the field; counted.
    Refuse,
    /// Forwarded as they are.
    Allow,
}

/// Route paths and health paths must be what a normalised request path can be, else they would
/// never match (a route `/api/./x` or `/a;b` under the defaults); and header names the proxy
/// reads must survive `headers_with_underscores`. Returns the key and the message.
pub(crate) fn validate(cfg: &super::ProxyConfig) -> Result<(), (String, String)> {
    if cfg.request.headers_with_underscores != HeadersWithUnderscores::Allow {
        let read = std::iter::once((
            "classify.api_key_header".to_string(),
            &cfg.classify.api_key_header,
        ))
        .chain(cfg.routes.iter().enumerate().flat_map(|(i, r)| {
            r.headers
                .keys()
                .map(move |k| (format!("routes[{i}].headers"), k))
        }));
        for (key, name) in read {
            if name.contains('_') {
                return Err((
                    key,
                    format!(
                        "{name:?}: expected a header name without `_`: such fields are removed \
                         or refused before routing (request.headers_with_underscores); set it \
                         to \"allow\" to use this one"
                    ),
                ));
            }
        }
    }
    let policy = cfg.request.path_policy();
    let named = cfg
        .routes
        .iter()
        .enumerate()
        .map(|(i, r)| (format!("routes[{i}].path"), &r.path))
        .chain(
            cfg.classify
                .health_paths
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("classify.health_paths[{i}]"), p)),
        );
    for (key, p) in named {
        // Not starting with `/` is the routes' own check's to report.
        if !p.starts_with('/') {
            continue;
        }
        match policy.normalize(p) {
            Ok(std::borrow::Cow::Borrowed(_)) => {}
            Ok(std::borrow::Cow::Owned(n)) => {
                return Err((
                    key,
                    format!(
                        "{p:?}: expected a path in normal form, as requests are matched after \
                         normalisation (no `//`, `.` or `..` segments, no escaped unreserved \
                         characters): write {n:?}"
                    ),
                ))
            }
            Err(e) => {
                return Err((
                    key,
                    format!("{p:?}: no request path can match it under [request]: {e}"),
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn route_and_health_paths_must_be_normal() {
        let e = crate::config::parse(
            "[[routes]]\nname = \"a\"\npath = \"/api/./x/**\"\n",
            "c.toml",
        )
        .unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(3), "routes[0].path"), "{e}");
        assert!(e.to_string().contains("write \"/api/x/**\""), "{e}");
        let e = crate::config::parse("[[routes]]\nname = \"a\"\npath = \"/a;b\"\n", "c.toml")
            .unwrap_err();
        assert!(e.to_string().contains("path_parameters"), "{e}");
        // Kept parameters make the same route valid.
        let ok =
            "[request]\npath_parameters = \"keep\"\n[[routes]]\nname = \"a\"\npath = \"/a;b\"\n";
        assert!(crate::config::parse(ok, "c.toml").is_ok());
        let e = crate::config::parse("[classify]\nhealth_paths = [\"//healthz\"]\n", "c.toml")
            .unwrap_err();
        assert_eq!(e.key, "classify.health_paths[0]", "{e}");
        let e =
            crate::config::parse("[classify]\napi_key_header = \"x_key\"\n", "c.toml").unwrap_err();
        assert_eq!(e.key, "classify.api_key_header", "{e}");
        let e = crate::config::parse(
            "[[routes]]\nname = \"a\"\nheaders = { \"x_t\" = \"1\" }\n",
            "c.toml",
        )
        .unwrap_err();
        assert_eq!(e.key, "routes[0].headers", "{e}");
        let ok = "[request]\nheaders_with_underscores = \"allow\"\n\
                  [classify]\napi_key_header = \"x_key\"\n";
        assert!(crate::config::parse(ok, "c.toml").is_ok());
        let e =
            crate::config::parse("[request]\nescaped_slashes = \"allow\"\n", "c.toml").unwrap_err();
        assert!(e.to_string().contains("refuse"), "{e}");
    }
}
