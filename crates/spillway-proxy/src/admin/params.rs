//! Request parameters for the admin API's `POST` endpoints: a JSON object body, or the same
//! names as query parameters (`curl -X POST 'localhost:9901/controls/retries?enabled=false'`).
//!
//! Why this and not `#[derive(Deserialize)]`: during an incident the operator types these by
//! hand, and a 400 must say which field was wrong and what it accepts, in words — serde's
//! messages ("invalid type: string, expected f64 at line 1 column 14") do not. Unknown fields
//! are refused (a typo such as `precent` must not be silently ignored while traffic is cut).

use serde_json::{Map, Value};
use spillway_core::Criticality;

use super::reply::ApiError;

/// Accepted spellings of a criticality, for error messages.
pub const CRITICALITY_ACCEPTS: &str = "one of CRITICAL_PLUS, CRITICAL, SHEDDABLE_PLUS, SHEDDABLE \
                                       (lower-case and kebab-case accepted)";

/// The parameters of one request.
#[derive(Debug, Default)]
pub struct Params(Map<String, Value>);

impl Params {
    /// Merges the query string and the body (the body wins on a name given twice). An empty
    /// body is fine; a non-empty one must be a JSON object.
    pub fn parse(query: Option<&str>, body: &[u8]) -> Result<Params, ApiError> {
        let mut map = Map::new();
        if let Some(q) = query {
            for (k, v) in form_urlencoded::parse(q.as_bytes()) {
                map.insert(k.into_owned(), Value::String(v.into_owned()));
            }
        }
        if !body.iter().all(u8::is_ascii_whitespace) {
            match serde_json::from_slice::<Value>(body) {
                Ok(Value::Object(o)) => map.extend(o),
                Ok(_) => {
                    return Err(ApiError::bad_request(
                        "body",
                        "the request body is JSON but not an object",
                        "a JSON object such as {\"enabled\": false}, or query parameters",
                    ))
                }
                Err(e) => {
                    return Err(ApiError::bad_request(
                        "body",
                        &format!("the request body is not valid JSON ({e})"),
                        "a JSON object such as {\"enabled\": false}, or query parameters",
                    ))
                }
            }
        }
        Ok(Params(map))
    }

    /// Refuses any field not in `known`, naming it and the accepted ones.
    pub fn only(&self, known: &[&str]) -> Result<(), ApiError> {
        if let Some(k) = self.0.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(ApiError::bad_request(
                k,
                &format!("unknown field {k:?}"),
                &format!("only the fields {}", known.join(", ")),
            ));
        }
        Ok(())
    }

    /// Removes `field` and returns its value, if given.
    pub fn remove(&mut self, field: &str) -> Option<Value> {
        self.0.remove(field)
    }

    /// Whether `field` was given (even as null).
    pub fn has(&self, field: &str) -> bool {
        self.0.contains_key(field)
    }

    /// Whether `field` is absent, `null`, or one of the strings `off`/`none`/`null`.
    pub fn is_off(&self, field: &str) -> bool {
        match self.0.get(field) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => {
                let s = s.trim();
                ["off", "none", "null"]
                    .iter()
                    .any(|w| s.eq_ignore_ascii_case(w))
            }
            _ => false,
        }
    }

    /// A required boolean (`true`/`false`, also as strings, `on`/`off`, `1`/`0`).
    pub fn bool(&self, field: &str) -> Result<bool, ApiError> {
        const ACCEPTS: &str = "true or false";
        match self.0.get(field) {
            None | Some(Value::Null) => Err(ApiError::missing(field, ACCEPTS)),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "on" | "1" | "yes" => Ok(true),
                "false" | "off" | "0" | "no" => Ok(false),
                _ => Err(ApiError::invalid(field, s, ACCEPTS)),
            },
            Some(Value::Number(n)) if n.as_u64() == Some(1) => Ok(true),
            Some(Value::Number(n)) if n.as_u64() == Some(0) => Ok(false),
            Some(v) => Err(ApiError::invalid(field, &v.to_string(), ACCEPTS)),
        }
    }

    /// An optional number (JSON number or numeric string); `accepts` describes the range.
    pub fn f64(&self, field: &str, accepts: &str) -> Result<Option<f64>, ApiError> {
        match self.0.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_f64()
                .map(Some)
                .ok_or_else(|| ApiError::invalid(field, &n.to_string(), accepts)),
            Some(Value::String(s)) => match s.trim().parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(Some(x)),
                _ => Err(ApiError::invalid(field, s, accepts)),
            },
            Some(v) => Err(ApiError::invalid(field, &v.to_string(), accepts)),
        }
    }

    /// An optional string.
    pub fn str(&self, field: &str, accepts: &str) -> Result<Option<&str>, ApiError> {
        match self.0.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(ApiError::invalid(field, &v.to_string(), accepts)),
        }
    }

    /// An optional criticality (`null`, `off` or `none` mean none).
    pub fn criticality(&self, field: &str) -> Result<Option<Criticality>, ApiError> {
        if self.is_off(field) {
            return Ok(None);
        }
        let s = self.str(field, CRITICALITY_ACCEPTS)?.unwrap_or_default();
        s.parse()
            .map(Some)
            .map_err(|_| ApiError::invalid(field, s, CRITICALITY_ACCEPTS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_and_body_merge_body_wins() {
        let p = Params::parse(Some("enabled=false&route=a%20b"), br#"{"enabled": true}"#).unwrap();
        assert!(p.bool("enabled").unwrap());
        assert_eq!(p.str("route", "x").unwrap(), Some("a b"));
    }

    #[test]
    fn bad_bodies_name_the_body() {
        for body in [&b"[1]"[..], b"{not json", b"\"x\""] {
            let e = Params::parse(None, body).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("body"), "{e:?}");
            assert_eq!(e.status, http::StatusCode::BAD_REQUEST);
        }
        assert!(Params::parse(None, b"  \n").is_ok());
    }

    #[test]
    fn values_are_checked_with_accepted_forms() {
        let p = Params::parse(
            Some("a=yes&b=maybe&n=12.5&m=lots&c=critical-plus&d=urgent&o=off"),
            b"",
        )
        .unwrap();
        assert!(p.bool("a").unwrap());
        let e = p.bool("b").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("b"));
        assert!(e.message.contains("maybe") && e.accepts.contains("true or false"));
        assert_eq!(
            p.bool("absent").unwrap_err().field.as_deref(),
            Some("absent")
        );
        assert_eq!(p.f64("n", "a number").unwrap(), Some(12.5));
        assert_eq!(p.f64("absent", "a number").unwrap(), None);
        assert!(p.f64("m", "a number").is_err());
        assert_eq!(p.criticality("c").unwrap(), Some(Criticality::CriticalPlus));
        let e = p.criticality("d").unwrap_err();
        assert!(e.accepts.contains("SHEDDABLE_PLUS"), "{e:?}");
        assert_eq!(p.criticality("o").unwrap(), None);
        let e = p.only(&["a", "b"]).unwrap_err();
        assert!(e.accepts.contains("a, b"), "{e:?}");
    }
}
