//! Path normalisation and routing; the configuration loader.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use http::{Method, Request};
use spillway_core::controller::AdmissionController;
use spillway_core::SystemClock;

use super::Input;
use crate::config::{self, EscapedSlashes, PathParameters};
use crate::route::Router;
use crate::upstream::Pool;

/// The routes every router of [`path_route`] has (a prefix, globs, a method, a dotted name).
const ROUTES: &str = r#"
[upstream]
addresses = ["127.0.0.1:9000"]

[[routes]]
name = "export"
path = "/api/export"
criticality = "SHEDDABLE"

[[routes]]
name = "items"
path = "/api/*/items/**"
criticality = "SHEDDABLE_PLUS"

[[routes]]
name = "admin"
methods = ["POST"]
path = "/admin/"
criticality = "CRITICAL_PLUS"

[[routes]]
name = "scripts"
path = "/static/**/*.js"

[[routes]]
name = "dotted"
path = "/v1/a.b"
"#;

const SLASHES: [(EscapedSlashes, &str); 3] = [
    (EscapedSlashes::Refuse, "refuse"),
    (EscapedSlashes::Decode, "decode"),
    (EscapedSlashes::Keep, "keep"),
];
const PARAMETERS: [(PathParameters, &str); 3] = [
    (PathParameters::Refuse, "refuse"),
    (PathParameters::Strip, "strip"),
    (PathParameters::Keep, "keep"),
];

thread_local! {
    /// The 18 routers (escaped slashes × parameters × case), built once per thread.
    static ROUTERS: Vec<Router> = {
        let mut all = Vec::new();
        for (_, s) in SLASHES {
            for (_, p) in PARAMETERS {
                for case in [false, true] {
                    let text = format!(
                        "[request]\nescaped_slashes = \"{s}\"\npath_parameters = \"{p}\"\n\
                         case_sensitive_paths = {case}\n{ROUTES}"
                    );
                    let cfg = config::parse(&text, "fuzz routes").expect("the routes parse");
                    all.push(Router::new(&cfg).expect("the routes compile"));
                }
            }
        }
        all
    };
}

/// The route `router` chooses for a `method` request to `path` (already normal), if `path`
/// is a request target at all.
fn route_of(router: &Router, method: &Method, path: &str) -> Option<Arc<str>> {
    let req = Request::builder()
        .method(method.clone())
        .uri(path)
        .body(())
        .ok()?;
    let (parts, ()) = req.into_parts();
    let c = router
        .classify(&parts, None, Instant::now())
        .expect("no header to refuse");
    Some(c.operation)
}

/// Path normalisation then routing (`PathPolicy::normalize`, `PathPolicy::apply`,
/// `Router::classify`), under every `[request]` setting.
///
/// Input: a control byte (the router: escaped slashes × parameters × case; the method), the
/// path, then after a `0xFF` byte the edits to try (each a byte: which edit, then a byte: where).
/// Checks:
/// - a normal path starts with `/`, has no empty, `.` or `..` segment, no escape of an
///   unreserved character, hex digits in upper case, and no `\`, encoded slash or `;` where
///   the settings refuse or rewrite them;
/// - normalising is idempotent, and a normal path is returned as it is (borrowed);
/// - `apply` on a request gives the path `normalize` gives;
/// - the path spelt differently — a `.` segment, a `..` after a made-up segment, a doubled
///   `/`, an unreserved character percent-encoded, and, where the settings allow, a `;`
///   parameter, an encoded slash, a letter's case — normalises to the same path (the same
///   ignoring case) and is routed to the same route.
pub fn path_route(data: &[u8]) {
    let mut input = Input::new(data);
    let control = input.byte();
    let (path, edits) = match input.rest.iter().position(|b| *b == 0xFF) {
        Some(i) => (&input.rest[..i], &input.rest[i + 1..]),
        None => (input.rest, &[][..]),
    };
    let Ok(path) = std::str::from_utf8(path) else {
        return;
    };
    let which = usize::from(control % 18);
    let (slashes, parameters) = (SLASHES[which / 6].0, PARAMETERS[which / 2 % 3].0);
    let case_sensitive = which % 2 == 1;
    let method = if control & 0x80 == 0 {
        Method::GET
    } else {
        Method::POST
    };
    ROUTERS.with(|routers| {
        let router = &routers[which];
        let policy = router.path_policy();
        let Ok(normal) = policy.normalize(path) else {
            return;
        };
        let normal = normal.into_owned();
        check_normal(&normal, slashes, parameters);
        assert!(
            matches!(policy.normalize(&normal), Ok(Cow::Borrowed(p)) if p == normal),
            "{path:?} -> {normal:?} is not normal"
        );
        if let Ok(req) = Request::builder().method(method.clone()).uri(path).body(()) {
            let (mut parts, ()) = req.into_parts();
            let (before, query) = (
                parts.uri.path().to_string(),
                parts.uri.query().map(str::to_string),
            );
            let want = policy.normalize(&before).map(Cow::into_owned);
            match policy.apply(&mut parts) {
                Ok(()) if before == "*" => {}
                Ok(()) => {
                    assert_eq!(Ok(parts.uri.path()), want.as_deref(), "apply vs normalize");
                    assert_eq!(parts.uri.query(), query.as_deref(), "the query changed");
                }
                Err(e) => assert_eq!(Err(e), want, "apply refused what normalize did not"),
            }
        }
        let route = route_of(router, &method, &normal);
        let variant = respell(&normal, edits, slashes, parameters, case_sensitive);
        let again = policy
            .normalize(&variant)
            .unwrap_or_else(|e| panic!("{variant:?} (for {normal:?}) refused: {e}"));
        assert!(
            again.eq_ignore_ascii_case(&normal) && (!case_sensitive || again == normal),
            "{variant:?} -> {again:?}, not {normal:?}"
        );
        if route.is_some() {
            assert_eq!(
                route_of(router, &method, &again),
                route,
                "{variant:?}'s route"
            );
        }
    });
}

/// What a normal path is.
fn check_normal(p: &str, slashes: EscapedSlashes, parameters: PathParameters) {
    let b = p.as_bytes();
    assert_eq!(b.first(), Some(&b'/'), "{p:?} does not start with /");
    let segments: Vec<&[u8]> = b[1..].split(|c| *c == b'/').collect();
    let last = segments.len() - 1;
    for (i, s) in segments.iter().enumerate() {
        assert!(
            !matches!(*s, b"." | b"..") && (!s.is_empty() || i == last),
            "{p:?} has an empty or dot segment"
        );
    }
    for (i, _) in b.iter().enumerate().filter(|(_, c)| **c == b'%') {
        let esc = &b[i + 1..(i + 3).min(b.len())];
        assert!(
            esc.len() == 2 && esc.iter().all(|c| matches!(c, b'0'..=b'9' | b'A'..=b'F')),
            "{p:?}: an escape not in upper-case hex"
        );
        let v = u8::from_str_radix(std::str::from_utf8(esc).unwrap_or("00"), 16).unwrap_or(0);
        assert!(
            !(v.is_ascii_alphanumeric() || b"-._~".contains(&v)),
            "{p:?}: an unreserved character escaped"
        );
        if v == b'/' || v == b'\\' {
            assert_eq!(
                slashes,
                EscapedSlashes::Keep,
                "{p:?}: an encoded slash kept"
            );
        }
    }
    if b.contains(&b'\\') {
        assert_eq!(slashes, EscapedSlashes::Keep, "{p:?}: a backslash kept");
    }
    if b.contains(&b';') {
        assert_eq!(parameters, PathParameters::Keep, "{p:?}: a parameter kept");
    }
}

/// `normal` spelt differently by `edits`, in ways the settings say mean the same path.
fn respell(
    normal: &str,
    edits: &[u8],
    slashes: EscapedSlashes,
    parameters: PathParameters,
    case_sensitive: bool,
) -> String {
    let mut v = normal.as_bytes().to_vec();
    for pair in edits.chunks(2).take(8) {
        let (op, at) = (pair[0], usize::from(pair.get(1).copied().unwrap_or(0)));
        let slash_at: Vec<usize> = (0..v.len()).filter(|&i| v[i] == b'/').collect();
        let slash = slash_at[at % slash_at.len()];
        match op % 8 {
            0 => splice(&mut v, slash, b"/."),
            1 => splice(&mut v, slash, b"/"),
            2 => splice(&mut v, slash, b"/zz/.."),
            3 => {
                // An unreserved character that is not part of an escape, percent-encoded.
                let free: Vec<usize> = (0..v.len())
                    .filter(|&i| {
                        let c = v[i];
                        (c.is_ascii_alphanumeric() || b"-._~".contains(&c))
                            && !v[i.saturating_sub(2)..i].contains(&b'%')
                    })
                    .collect();
                if let Some(&i) = free.get(at % free.len().max(1)) {
                    let esc = if op & 0x80 == 0 {
                        format!("%{:02X}", v[i])
                    } else {
                        format!("%{:02x}", v[i])
                    };
                    v.splice(i..=i, esc.into_bytes());
                }
            }
            4 if parameters == PathParameters::Strip && slash > 0 => splice(&mut v, slash, b";p"),
            5 if slashes == EscapedSlashes::Decode && slash > 0 => {
                let with: &[u8] = [&b"%2F"[..], b"%2f", b"%5C", b"\\"][usize::from(op >> 6)];
                v.splice(slash..=slash, with.iter().copied());
            }
            6 if !case_sensitive => {
                let i = at % v.len();
                if let Some(c) = v.get_mut(i) {
                    if c.is_ascii_alphabetic() {
                        *c ^= 0x20;
                    }
                }
            }
            _ => {}
        }
    }
    // Only ASCII was put in or changed.
    String::from_utf8(v).unwrap_or_default()
}

fn splice(v: &mut Vec<u8>, at: usize, what: &[u8]) {
    v.splice(at..at, what.iter().copied());
}

/// The configuration loader (`config::parse`), then what a reload builds from what it accepted
/// (`Router::new`, `Pool::new`, `AdmissionController::new`).
///
/// Input: TOML text. Checks: never a panic; a configuration accepted is one the proxy can run
/// (the router, the upstream pool and the admission controller build from it, and
/// `config::check` accepts it again); a refusal says where — a key or a line within the text
/// (but for the TOML parser's nesting limit, which has no position, and says so) — and what,
/// on one line.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match config::parse(text, "fuzz.toml") {
        Ok(cfg) => {
            config::check(&cfg, "fuzz.toml").expect("parse accepted it");
            if let Err((key, message)) = Router::new(&cfg) {
                panic!("accepted, but the router refuses it: {key}: {message}");
            }
            if let Err(message) = Pool::new(&cfg.upstream, &cfg.signals) {
                panic!("accepted, but the upstream pool refuses it: {message}");
            }
            if let Err(e) = AdmissionController::new(cfg.admission.clone(), Arc::new(SystemClock)) {
                panic!("accepted, but the admission controller refuses it: {e}");
            }
        }
        Err(e) => {
            assert_eq!(e.origin, "fuzz.toml");
            assert!(!e.message.trim().is_empty(), "an empty message: {e:?}");
            // The TOML parser's nesting limit is the one error it gives no position for.
            assert!(
                e.line.is_some() || !e.key.is_empty() || e.message.contains("nested too deeply"),
                "a refusal that names neither a key nor a line: {e:?}"
            );
            if let Some(line) = e.line {
                let lines = text.split('\n').count();
                assert!((1..=lines).contains(&line), "line {line} of {lines}: {e:?}");
            }
            let shown = e.to_string();
            assert!(
                !shown.contains('\n'),
                "a message on several lines: {shown:?}"
            );
        }
    }
}
