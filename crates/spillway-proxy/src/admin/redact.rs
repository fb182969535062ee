//! `/config` shows the effective configuration with its secrets removed, and `/reload` says
//! which keys a reload changed.
//!
//! Why by key name: the configuration grows with every feature, and a secret added later must
//! not appear on `/config` because someone forgot to mark it. Any key whose name says it holds a
//! secret (`token`, `secret`, `password`, `api_key(s)`, `credential`, `authorization`,
//! `private_key`) has its whole value replaced, whatever its shape: for `classify.api_keys` the
//! *map keys* are the secrets, so a map is replaced by its entry count. Names ending in `_file`,
//! `_path` or `_header` hold where a secret is or which header carries it, not the secret, and
//! are shown.

use serde_json::Value;

/// The placeholder for a redacted string.
pub const REDACTED: &str = "<redacted>";

const SECRET_WORDS: &[&str] = &[
    "token",
    "secret",
    "password",
    "api_key",
    "apikey",
    "credential",
    "authorization",
    "private_key",
];
const NOT_SECRET_SUFFIXES: &[&str] = &["_file", "_path", "_header"];

/// Whether a key of this name holds a secret.
pub fn is_secret_key(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    SECRET_WORDS.iter().any(|w| n.contains(w))
        && !NOT_SECRET_SUFFIXES.iter().any(|s| n.ends_with(s))
}

/// Replaces every secret value in `v`, recursively.
pub fn redact(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                if is_secret_key(k) {
                    *val = redacted(val);
                } else {
                    redact(val);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

fn redacted(v: &Value) -> Value {
    match v {
        // "not set" is not a secret, and an operator needs to know whether a token is on.
        Value::Null => Value::Null,
        Value::Bool(b) => Value::Bool(*b),
        Value::Object(m) => Value::String(format!("{REDACTED} ({} entries)", m.len())),
        Value::Array(a) => Value::String(format!("{REDACTED} ({} entries)", a.len())),
        Value::String(s) if s.is_empty() => Value::String(String::new()),
        _ => Value::String(REDACTED.to_string()),
    }
}

/// Dotted paths (`routes[1].cost`, `admission.limit`) whose values differ between `old` and
/// `new`, at most `max` of them (a whole replaced table counts once, at its own path).
pub fn changed_paths(old: &Value, new: &Value, max: usize) -> Vec<String> {
    let mut out = Vec::new();
    diff("", old, new, max, &mut out);
    out
}

fn diff(path: &str, old: &Value, new: &Value, max: usize, out: &mut Vec<String>) {
    if out.len() >= max || old == new {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => diff(&p, x, y, max, out),
                    _ => push(out, p, max),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, max, out);
            }
        }
        _ => push(out, path.to_string(), max),
    }
}

fn push(out: &mut Vec<String>, p: String, max: usize) {
    if out.len() < max {
        out.push(if p.is_empty() { "(root)".into() } else { p });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_redacted_by_key_name() {
        let mut v = json!({
            "admin": {"token": "s3cr3t-s3cr3t-s3cr3t", "token_file": "/etc/spillway/token",
                      "listen": "127.0.0.1:9901"},
            "classify": {"api_keys": {"k-123": "acme", "k-456": "globex"},
                         "api_key_header": "x-api-key"},
            "upstream": {"addresses": ["127.0.0.1:9000"], "Password": 98765},
            "routes": [{"name": "a", "headers": {"x-secret-flag": "on"}}],
            "unset": {"token": null}
        });
        redact(&mut v);
        let s = v.to_string();
        for secret in ["s3cr3t", "k-123", "k-456", "acme", "\"on\"", "98765"] {
            assert!(!s.contains(secret), "{secret} leaked: {s}");
        }
        assert_eq!(v["admin"]["token"], REDACTED);
        assert_eq!(v["admin"]["token_file"], "/etc/spillway/token");
        assert_eq!(v["classify"]["api_keys"], "<redacted> (2 entries)");
        assert_eq!(v["classify"]["api_key_header"], "x-api-key");
        assert_eq!(v["upstream"]["addresses"][0], "127.0.0.1:9000");
        assert_eq!(v["unset"]["token"], Value::Null);
    }

    #[test]
    fn changed_paths_lists_leaves_and_stops_at_max() {
        let a = json!({"x": 1, "y": {"z": [1, 2], "w": "a"}, "gone": true, "r": [1]});
        let b = json!({"x": 1, "y": {"z": [1, 3], "w": "b"}, "new": 0, "r": [1, 2]});
        assert_eq!(
            changed_paths(&a, &b, 10),
            vec!["gone", "new", "r", "y.w", "y.z[1]"]
        );
        assert_eq!(changed_paths(&a, &b, 2).len(), 2);
        assert!(changed_paths(&a, &a, 10).is_empty());
    }
}
