//! Parsing and validating the file, with errors that name the key and the line.
//!
//! Why both: "invalid value" alone sends the operator hunting through a long file, and a line
//! number alone does not say which of several keys on it is wrong. Syntax and type errors come
//! from `toml_edit`'s deserializer with a byte span; semantic errors (a CIDR that does not
//! parse, a quota below zero) name a key path, and its span is looked up in the parsed
//! document. Either way the message reads `FILE:LINE: KEY = VALUE: what is accepted`.

use std::fmt;
use std::ops::Range;

use toml_edit::{Document, Item};

use super::types::ProxyConfig;
use super::validate::validate;

/// A configuration the proxy refuses, with where and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub struct ConfigError {
    /// Where the text came from (a file path, `--upstream flags`, `admin API`).
    pub origin: String,
    /// 1-based line of the offending key, when known.
    pub line: Option<usize>,
    /// Dotted key path, e.g. `routes[1].criticality`; empty when the error is not about a key.
    pub key: String,
    /// What was wrong and what is accepted.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        escaped(f, &self.origin)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        f.write_str(": ")?;
        if !self.key.is_empty() {
            escaped(f, &self.key)?;
            f.write_str(": ")?;
        }
        escaped(f, &self.message)
    }
}

/// `s` with its control characters escaped (`\n`, `\u{1b}`): keys and messages quote the file's
/// own text (``unknown variant `\nfixed` `` for `algorithm = "\nfixed"`, found by the `config`
/// fuzz target), and an error is printed as one line of `--check` output or of the log, which a
/// value must not be able to break or forge lines in.
fn escaped(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    for c in s.chars() {
        if c.is_control() {
            write!(f, "{}", c.escape_default())?;
        } else {
            fmt::Write::write_char(f, c)?;
        }
    }
    Ok(())
}

/// Reads an `[admission]` table over the proxy's zero-config defaults rather than the core's.
///
/// Why: serde fills keys missing from a table with that type's `Default`, which for
/// `AdmissionConfig` is the core's (Gradient2, shed from 0.8); a file that sets only
/// `[admission.queue]` must keep every other zero-config default (`default_admission`).
/// Tables merge key by key, except `limit`, which names its algorithm and is taken whole.
/// The first parse already reported type errors with their key and line, so this one only
/// combines values that are known to be well-formed.
fn admission_over_proxy_defaults(mut cfg: ProxyConfig, text: &str) -> Result<ProxyConfig, String> {
    let doc: serde_json::Value = toml_edit::de::from_str(text).map_err(|e| e.to_string())?;
    let Some(user) = doc.get("admission") else {
        return Ok(cfg);
    };
    let mut merged =
        serde_json::to_value(super::types::default_admission()).map_err(|e| e.to_string())?;
    merge(&mut merged, user, true);
    cfg.admission = serde_json::from_value(merged).map_err(|e| e.to_string())?;
    Ok(cfg)
}

/// Overlays `user` onto `base`: objects key by key (but `limit` whole, at the top), anything
/// else replaced.
fn merge(base: &mut serde_json::Value, user: &serde_json::Value, top: bool) {
    match (base, user) {
        (serde_json::Value::Object(b), serde_json::Value::Object(u)) => {
            for (k, v) in u {
                match b.get_mut(k) {
                    Some(slot) if !(top && k == "limit") => merge(slot, v, false),
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, u) => *b = u.clone(),
    }
}

/// Parses and validates `text` (from `origin`, used in messages).
pub fn parse(text: &str, origin: &str) -> Result<ProxyConfig, ConfigError> {
    let doc = Document::parse(text).map_err(|e| {
        let (line, _) = e.span().map_or((None, None), |s| line_of(text, s.start));
        ConfigError {
            origin: origin.into(),
            line,
            key: String::new(),
            message: first_line_message(e.message()),
        }
    })?;
    let cfg: ProxyConfig = toml_edit::de::from_str(text).map_err(|e| {
        let span = e.span();
        let (line, key) = match &span {
            Some(s) => (line_of(text, s.start).0, path_at(doc.as_item(), s, "")),
            None => (None, String::new()),
        };
        ConfigError {
            origin: origin.into(),
            line,
            key,
            message: first_line_message(e.message()),
        }
    })?;
    let cfg = admission_over_proxy_defaults(cfg, text).map_err(|message| ConfigError {
        origin: origin.into(),
        line: span_of(doc.as_item(), "admission").and_then(|s| line_of(text, s.start).0),
        key: "admission".into(),
        message,
    })?;
    validate(&cfg).map_err(|(key, message)| ConfigError {
        origin: origin.into(),
        line: span_of(doc.as_item(), &key).and_then(|s| line_of(text, s.start).0),
        key,
        message,
    })?;
    Ok(cfg)
}

/// Validates a configuration built in code (e.g. from command-line flags).
pub fn check(cfg: &ProxyConfig, origin: &str) -> Result<(), ConfigError> {
    validate(cfg).map_err(|(key, message)| ConfigError {
        origin: origin.into(),
        line: None,
        key,
        message,
    })
}

fn first_line_message(m: &str) -> String {
    let m = m.trim();
    // The standard library's address parser says what is wrong, not what is accepted.
    if m == "invalid socket address syntax" {
        return format!("{m}: expected ip:port, e.g. 127.0.0.1:8080 or [::1]:8080");
    }
    // The TOML parser's nesting limit, which it reports with no position (found by the
    // `config` fuzz target: a table header of ~100 dotted parts).
    if m == "recursion limit" {
        return format!(
            "{m}: tables, arrays or dotted keys are nested too deeply for the TOML parser (the \
             proxy's own keys nest a few levels at most)"
        );
    }
    m.to_string()
}

/// 1-based line number of byte `offset`.
fn line_of(text: &str, offset: usize) -> (Option<usize>, Option<usize>) {
    let offset = offset.min(text.len());
    let line = text.as_bytes()[..offset]
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    (Some(line + 1), None)
}

/// The deepest key path at byte `span.start`: in each table, the entry starting last at or
/// before the offset (table headers of `[[array]]` entries have no span of their own, so
/// starts come from the entry's span or the first of its keys).
fn path_at(item: &Item, span: &Range<usize>, prefix: &str) -> String {
    let at = span.start;
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match item {
        Item::Table(t) => {
            let best = t
                .iter()
                .filter_map(|(k, v)| {
                    let key_start = t.key(k).and_then(|key| key.span()).map(|s| s.start);
                    let start = item_start(v).into_iter().chain(key_start).min()?;
                    (start <= at).then_some((start, k, v))
                })
                .max_by_key(|(start, _, _)| *start);
            match best {
                Some((_, k, v)) => path_at(v, span, &join(k)),
                None => prefix.to_string(),
            }
        }
        Item::ArrayOfTables(a) => {
            let best = a
                .iter()
                .enumerate()
                .filter_map(|(i, t)| table_start(t).filter(|&s| s <= at).map(|s| (s, i, t)))
                .max_by_key(|(s, _, _)| *s);
            match best {
                Some((_, i, t)) => {
                    path_at(&Item::Table(t.clone()), span, &format!("{prefix}[{i}]"))
                }
                None => prefix.to_string(),
            }
        }
        Item::Value(toml_edit::Value::InlineTable(t)) => {
            for (k, v) in t.iter() {
                if v.span()
                    .is_some_and(|s| s.start <= at && at < s.end.max(s.start + 1))
                {
                    return path_at(&Item::Value(v.clone()), span, &join(k));
                }
            }
            prefix.to_string()
        }
        Item::Value(toml_edit::Value::Array(a)) => {
            for (i, v) in a.iter().enumerate() {
                if v.span()
                    .is_some_and(|s| s.start <= at && at < s.end.max(s.start + 1))
                {
                    return path_at(&Item::Value(v.clone()), span, &format!("{prefix}[{i}]"));
                }
            }
            prefix.to_string()
        }
        _ => prefix.to_string(),
    }
}

/// Where a table starts: the earliest of its own span and its entries'. A table that exists
/// only through a dotted header (`admission` of `[admission.limit]`) spans from its key, one
/// byte after the header's `[` where the child table and a tagged table's errors begin.
fn table_start(t: &toml_edit::Table) -> Option<usize> {
    let own = t.span().map(|s| s.start);
    let entries = t
        .iter()
        .filter_map(|(k, v)| {
            let ks = t.key(k).and_then(|key| key.span()).map(|s| s.start);
            item_start(v).into_iter().chain(ks).min()
        })
        .min();
    own.into_iter().chain(entries).min()
}

fn item_start(i: &Item) -> Option<usize> {
    match i {
        Item::Table(t) => table_start(t),
        Item::ArrayOfTables(a) => a.iter().filter_map(table_start).min(),
        other => other.span().map(|s| s.start),
    }
}

/// The span of the deepest existing item along `path` (`a.b[2].c`).
fn span_of(root: &Item, path: &str) -> Option<Range<usize>> {
    let mut item = root;
    let mut best = None;
    for part in path.split('.') {
        let (name, index) = match part.split_once('[') {
            Some((n, rest)) => (n, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        match item.get(name) {
            Some(next) => item = next,
            None => break,
        }
        best = item.span().or(best);
        if let Some(i) = index {
            match item.get(i) {
                Some(next) => item = next,
                None => break,
            }
            best = item.span().or(best);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value with a newline in an error's message does not make it two lines (the input the
    /// `config` fuzz target found, fuzz/regressions/config/newline-in-message).
    #[test]
    fn an_error_prints_on_one_line() {
        let text = "[admission.limit]\nalgorithm = \"\\nfixed\"\n";
        let e = parse(text, "c.toml").unwrap_err();
        assert!(
            e.message.contains('\n'),
            "the message keeps the value: {e:?}"
        );
        assert_eq!(
            e.to_string(),
            "c.toml:2: admission.limit.algorithm: unknown variant `\\nfixed`, expected one of \
             `fixed`, `aimd`, `gradient2`, `envoy_gradient`"
        );
    }

    /// The parser's nesting limit comes without a position; the message says what it is.
    #[test]
    fn too_deep_a_nesting_says_so() {
        let text = format!("[admission{}]\n", ".a".repeat(200));
        let e = parse(&text, "c.toml").unwrap_err();
        assert!(e.message.contains("nested too deeply"), "{e:?}");
    }

    /// A wrong value in the tagged `[admission.limit]` table is named there, not in the table
    /// before it: the error's span is the whole tagged table's, and `admission` exists only
    /// through its dotted header.
    #[test]
    fn a_bad_limit_value_names_the_limit_table() {
        let text = "[upstream]\naddresses = [\"127.0.0.1:1\"]\n\n[admission.limit]\n\
                    algorithm = \"envoy_gradient\"\nexact_cuts = \"yes\"\n";
        let e = parse(text, "c.toml").unwrap_err();
        assert!(e.key.starts_with("admission.limit"), "{e}");
        assert!(e.message.contains("expected a boolean"), "{e}");
    }

    #[test]
    fn errors_name_key_and_line() {
        let e = parse("[listen]\naddress = \"nope\"\n", "c.toml").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(2), "listen.address"), "{e}");
        assert!(
            e.message
                .ends_with("expected ip:port, e.g. 127.0.0.1:8080 or [::1]:8080"),
            "{e}"
        );
        let e = parse(
            "[upstream]\naddresses = [\"127.0.0.1:1\", \"bad\"]\n",
            "c.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.toml:2: upstream.addresses[1]: \"bad\": expected host:port, e.g. 127.0.0.1:9000"
        );
        let e = parse(
            "[upstream]\naddresses = [\"127.0.0.1:1\", \"LOCALHOST:2\",\n  \"localhost:2\"]\n",
            "c.toml",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "c.toml:3: upstream.addresses[2]: \"localhost:2\": expected an address not listed \
             already (it is upstream.addresses[1])"
        );
        let e = parse("[listen]\nmax_conections = 3\n", "c.toml").unwrap_err();
        assert_eq!(e.line, Some(2), "{e}");
        assert!(e.message.contains("max_conections"), "{e}");
        let e = parse(
            "[admission.limit]\nalgorithm = \"fixed\"\nlimit = 0\n",
            "c.toml",
        )
        .unwrap_err();
        assert!(e.key.starts_with("admission.limit"), "{e}");
        let e = parse(
            "[[routes]]\nname = \"a\"\n[[routes]]\nname = \"a\"\n",
            "c.toml",
        )
        .unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(4), "routes[1].name"), "{e}");
        let e = parse("[classify]\ntrusted = [\"10.0.0.0/33\"]\n", "c.toml").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(2), "classify.trusted[0]"),
            "{e}"
        );
        let e = parse("x = [", "c.toml").unwrap_err();
        assert_eq!(e.line, Some(1), "{e}");
    }

    #[test]
    fn type_error_inside_array_of_tables_names_the_key() {
        let text = "[[routes]]\nname = \"a\"\npath = \"/a\"\n\n[[routes]]\nname = \"b\"\npath = \"/b\"\ncriticality = \"MEDIUM\"\n";
        let e = parse(text, "c.toml").unwrap_err();
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(8), "routes[1].criticality"),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("c.toml:8: routes[1].criticality: "),
            "{e}"
        );
        // The first entry, and a key before the bad one, are named the same way.
        let e = parse("[[routes]]\nname = 3\n", "c.toml").unwrap_err();
        assert_eq!((e.line, e.key.as_str()), (Some(2), "routes[0].name"), "{e}");
    }

    #[test]
    fn errors_inside_routes_name_the_entry_and_key() {
        let cases: [(&str, usize, &str); 7] = [
            ("[[routes]]\nname = \"a\"\n[[routes]]\ncriticality = \"MEDIUM\"\nname = \"b\"\n", 4, "routes[1].criticality"),
            ("[[routes]]\nname = \"a\"\n[routes.degrade]\nthreshold = 0.5\n[[routes]]\nname = \"b\"\ncriticality = \"MEDIUM\"\n", 7, "routes[1].criticality"),
            ("routes = [{ name = \"a\" }, { name = \"b\", criticality = \"MEDIUM\" }]\n", 1, "routes[1].criticality"),
            ("[[routes]]\nname = \"a\"\n[[routes]]\nname = \"b\"\ncriticality = 5\n", 5, "routes[1].criticality"),
            ("[[routes]]\nname = \"a\"\n[[routes]]\nname = \"b\"\ncost = \"x\"\n", 5, "routes[1].cost"),
            ("[[routes]]\nname = \"a\"\n[[routes]]\nname = \"b\"\ncriticality = \"MEDIUM\"\n[[routes]]\nname = \"c\"\n", 5, "routes[1].criticality"),
            ("[[routes]]\nname = \"a\"\n[[routes]]\nname = \"b\"\n[routes.headers]\nx = \"y\"\n[routes.degrade]\nthreshold = \"no\"\n", 8, "routes[1].degrade.threshold"),
        ];
        for (text, line, key) in cases {
            let e = parse(text, "c.toml").unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (Some(line), key), "{text}\n{e}");
        }
    }

    #[test]
    fn defaults_parse_and_roundtrip() {
        let cfg = parse("", "empty").unwrap();
        assert_eq!(cfg, ProxyConfig::default());
        assert!(matches!(
            cfg.admission.limit,
            spillway_core::limit::LimitConfig::EnvoyGradient(_)
        ));
    }
    /// The simulator models the zero-config proxy through core's preset, not through this
    /// crate: the two must not drift apart.
    #[test]
    fn the_defaults_are_cores_proxy_preset() {
        let (cfg, preset) = (
            ProxyConfig::default(),
            spillway_core::preset::proxy_default(),
        );
        assert_eq!(cfg.admission, preset.admission);
        assert_eq!(
            u128::from(cfg.upstream.request_timeout_ms),
            preset.request_timeout.as_millis()
        );
        assert_eq!(cfg.upstream.throttle, preset.throttle);
    }
    #[test]
    fn a_partial_admission_table_keeps_the_proxy_defaults() {
        let cfg = parse("[admission.queue]\nmax_wait_ms = 250.0\n", "t.toml").expect("valid");
        let d = super::super::types::default_admission();
        assert_eq!(
            cfg.admission.queue.max_wait,
            std::time::Duration::from_millis(250)
        );
        assert_eq!(cfg.admission.queue.max_len, d.queue.max_len);
        assert_eq!(
            cfg.admission.limit, d.limit,
            "the zero-config limit is kept"
        );
        assert_eq!(
            cfg.admission.shed, d.shed,
            "the proxy's shed thresholds are kept"
        );
        let cfg = parse(
            "[admission.limit]\nalgorithm = \"fixed\"\nlimit = 10\n[admission.shed]\nramp = 0.05\n",
            "t.toml",
        )
        .expect("valid");
        assert_eq!(cfg.admission.limit.name(), "fixed");
        assert_eq!(cfg.admission.shed.ramp, 0.05);
        assert_eq!(cfg.admission.shed.thresholds, d.shed.thresholds);
    }
}
