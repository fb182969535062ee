//! CONFIG.md states every key's default; this checks those statements against the defaults the
//! proxy actually runs with (an empty file, serialised as `spillway proxy --check` prints it).
//! A default changed in code but not in the reference (it happened: `max_idle_per_task` went
//! from 32 to 256) fails here, naming the key, the documented and the effective value.

use serde_json::Value;
use spillway_proxy::config::parse;

const REFERENCE: &str = include_str!("../CONFIG.md");

/// The effective defaults, as JSON: an empty file, plus one route with a degraded mode so the
/// per-route tables' defaults can be read from `routes[0]` (the file's routes are empty).
fn defaults() -> Value {
    let cfg = parse("", "empty.toml").expect("an empty file is the zero-config proxy");
    let mut json = serde_json::to_value(&cfg).expect("the configuration serialises");
    let routed = parse(
        "[[routes]]\nname = \"r\"\n[routes.degrade]\nbody = \"x\"\n",
        "route.toml",
    )
    .expect("one route with a static degraded response");
    let routed = serde_json::to_value(&routed).expect("the configuration serialises");
    json["routes"] = routed["routes"][0].clone();
    json
}

/// Documented defaults that name another key rather than a value.
const REFERENCES: [(&str, &str); 2] = [
    ("routes.criticality", "classify.default_criticality"),
    ("routes.cost", "classify.default_cost"),
];

/// Documented defaults the configuration leaves unset and the code applies where it uses them
/// (a static degraded response's status and content type): checked by the proxy's degradation
/// tests, not here.
const APPLIED_WHERE_USED: [&str; 2] = ["routes.degrade.status", "routes.degrade.content_type"];

/// `[upstream.throttle]` in a heading → ["upstream", "throttle"]; `[[routes]]` → ["routes"]
/// (read from the one route [`defaults`] adds); a heading without a table name → None.
fn table_of(heading: &str) -> Option<Vec<String>> {
    let start = heading.find("`[")? + 2;
    let end = start + heading[start..].find("]`")?;
    let name = heading[start..end]
        .trim_start_matches('[')
        .trim_end_matches(']');
    Some(name.split('.').map(str::to_owned).collect())
}

/// A cell that is exactly one backticked literal, e.g. `` `256` `` → "256".
fn literal(cell: &str) -> Option<&str> {
    let s = cell.trim().strip_prefix('`')?.strip_suffix('`')?;
    (!s.contains('`')).then_some(s)
}

/// A TOML literal as JSON (`never` in a per-criticality array is JSON's null).
fn toml_value(lit: &str) -> Value {
    let text = format!("v = {}", lit.replace("never", "1e999"));
    let doc: Value = toml_edit::de::from_str(&text)
        .unwrap_or_else(|e| panic!("CONFIG.md default `{lit}` is not TOML: {e}"));
    let v = doc["v"].clone();
    match v {
        Value::Array(a) => Value::Array(
            a.into_iter()
                .map(|x| match x.as_f64() {
                    Some(f) if f.is_infinite() => Value::Null,
                    _ => x,
                })
                .collect(),
        ),
        other => other,
    }
}

/// Numbers compare by value (TOML `120.0` and JSON `120` are one default); the rest structurally.
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

fn lookup<'a>(root: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(root, |v, k| v.get(k))
}

/// Every (path, documented literal) the reference's tables give as a plain default.
fn documented() -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    for (table, cells) in table_rows() {
        if cells.len() < 3 {
            continue;
        }
        // `window` / `buckets` | `10.0` / `10`: pairs, in order.
        let keys: Vec<&str> = cells[0].split(" / ").collect();
        let values: Vec<&str> = cells[1].split(" / ").collect();
        if keys.len() != values.len() {
            continue;
        }
        for (k, v) in keys.iter().zip(values) {
            if let (Some(k), Some(v)) = (literal(k), literal(v)) {
                out.push((key_path(&table, k), v.to_owned()));
            }
        }
    }
    out
}

/// Each row of the reference's tables that names a key, with the table it is in: its cells
/// (the key cell first, without the row's leading `|`).
fn table_rows() -> Vec<(Vec<String>, Vec<&'static str>)> {
    let mut table: Option<Vec<String>> = None;
    let mut out = Vec::new();
    for line in REFERENCE.lines() {
        if line.starts_with('#') {
            table = table_of(line);
            continue;
        }
        let (Some(table), true) = (&table, line.starts_with("| `")) else {
            continue;
        };
        let mut cells: Vec<&str> = line.split(" | ").collect();
        if let Some(first) = cells.first_mut() {
            *first = first.trim_start_matches('|');
        }
        out.push((table.clone(), cells));
    }
    out
}

/// `table` + the dotted `key`.
fn key_path(table: &[String], key: &str) -> Vec<String> {
    let mut path = table.to_vec();
    path.extend(key.split('.').map(str::to_owned));
    path
}

#[test]
fn every_plain_default_in_the_reference_is_the_effective_one() {
    let json = defaults();
    let rows = documented();
    let mut wrong = Vec::new();
    for (path, lit) in &rows {
        let key = path.join(".");
        if REFERENCES.contains(&(key.as_str(), lit.as_str())) {
            continue;
        }
        let doc = toml_value(lit);
        match lookup(&json, path) {
            Some(Value::Null) if APPLIED_WHERE_USED.contains(&key.as_str()) => {}
            Some(actual) if same(&doc, actual) => {}
            Some(actual) => wrong.push(format!("{key}: CONFIG.md `{lit}`, effective {actual}")),
            None => wrong.push(format!("{key}: in CONFIG.md, not in the configuration")),
        }
    }
    assert!(
        wrong.is_empty(),
        "CONFIG.md disagrees with the code:\n{}",
        wrong.join("\n")
    );
    // The parser must keep finding the tables: every section's rows, not a handful.
    assert!(
        rows.len() >= 40,
        "only {} defaults found in CONFIG.md",
        rows.len()
    );
}

#[test]
fn the_zero_config_limit_parameters_are_the_documented_ones() {
    let json = defaults();
    let limit = &json["admission"]["limit"];
    assert_eq!(limit["algorithm"], "envoy_gradient");
    let bullet: String = REFERENCE
        .split("\n- ")
        .find(|b| b.starts_with("`envoy_gradient`"))
        .expect("CONFIG.md describes envoy_gradient's parameters")
        .to_owned();
    let mut checked = 0;
    for piece in bullet.split('`').skip(1).step_by(2) {
        let Some((k, v)) = piece.split_once(" = ") else {
            continue;
        };
        let actual = limit
            .get(k)
            .unwrap_or_else(|| panic!("CONFIG.md names `{k}`, the limit has no such key"));
        assert!(
            same(&toml_value(v), actual),
            "{k}: CONFIG.md `{v}`, effective {actual}"
        );
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} parameters found");
}

/// The README's summary repeats the plain defaults of some tables (`key` = value): each number
/// and boolean stated there must be the effective one too.
#[test]
fn the_readme_summary_states_the_effective_defaults() {
    let readme = include_str!("../../../README.md");
    let json = defaults();
    let mut checked = 0;
    // Each section's bullet, from "- **`[name]`**" to the next bullet, joined into one line.
    for bullet in readme.split("\n- **`[").skip(1) {
        let Some((name, text)) = bullet.split_once("]`**") else {
            continue;
        };
        let Some(table) = json.get(name) else {
            continue;
        };
        let text = text.split("\n- ").next().unwrap_or("").replace("\n  ", " ");
        for piece in text
            .split('`')
            .skip(1)
            .step_by(2)
            .zip(text.split('`').skip(2).step_by(2))
        {
            let (key, after) = piece;
            let Some(value) = after.strip_prefix(" = ") else {
                continue;
            };
            let value: &str = value
                .split([';', ' ', '('])
                .next()
                .unwrap_or("")
                .trim_end_matches('.');
            let stated = match value {
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                v => match v.parse::<f64>() {
                    Ok(n) => serde_json::json!(n),
                    Err(_) => continue, // words (auto, CRITICAL, one per CPU): CONFIG.md has them
                },
            };
            let actual = table.get(key).unwrap_or_else(|| {
                panic!("README names [{name}] `{key}`, the config has no such key")
            });
            assert!(
                same(&stated, actual),
                "README [{name}] `{key}` = {value}, effective {actual}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 12, "only {checked} README defaults found");
}

/// Every key path named in the reference's tables (first column, `a` / `b` pairs split), with
/// or without a plain default.
fn documented_keys() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (table, cells) in table_rows() {
        let keys = cells.first().copied().unwrap_or_default();
        for k in keys.split(" / ").filter_map(literal) {
            out.push(key_path(&table, k));
        }
    }
    out
}

/// The paths of `v`'s leaves (an array is one leaf), under `prefix`.
fn leaves(v: &Value, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                prefix.push(k.clone());
                leaves(child, prefix, out);
                prefix.pop();
            }
        }
        _ => out.push(prefix.clone()),
    }
}

/// The other direction: a key added to the configuration must be added to the reference too
/// (it happened: `listen.idle_timeout_ms`'s first form was documented by hand, unchecked).
/// A key is covered by its own row or by a row for a table or value that contains it.
#[test]
fn every_effective_key_is_in_the_reference() {
    let documented = documented_keys();
    let mut all = Vec::new();
    leaves(&defaults(), &mut Vec::new(), &mut all);
    let missing: Vec<String> = all
        .iter()
        .filter(|path| !documented.iter().any(|d| path.starts_with(d)))
        .map(|path| path.join("."))
        .collect();
    assert!(
        missing.is_empty(),
        "keys of the effective configuration not in CONFIG.md's tables:\n{}",
        missing.join("\n")
    );
    assert!(
        all.len() >= 40,
        "only {} keys in the configuration",
        all.len()
    );
}
