use super::*;
use proptest::prelude::*;

const SAFE: PathPolicy = PathPolicy {
    escaped_slashes: EscapedSlashes::Refuse,
    parameters: PathParameters::Refuse,
};

fn with(escaped_slashes: EscapedSlashes, parameters: PathParameters) -> PathPolicy {
    PathPolicy {
        escaped_slashes,
        parameters,
    }
}

fn norm(policy: PathPolicy, p: &str) -> Result<String, PathError> {
    policy.normalize(p).map(Cow::into_owned)
}

#[test]
fn the_tricks_come_out_as_one_path() {
    for p in [
        "//api/export/x",
        "/api//export/x",
        "/api/./export/x",
        "/x/../api/export/x",
        "/api/%65xport/x",
        "/%61pi/export/x",
        "/../api/export/x",
        "/../../../api/export/x",
        "/x/%2e%2e/api/export/x",
        "/x/%2E./api/export/x",
        "/api/export/./x",
        "/api/export/y/../x",
        "///api///export///x",
    ] {
        assert_eq!(norm(SAFE, p).as_deref(), Ok("/api/export/x"), "{p}");
    }
}

#[test]
fn rfc_3986_dot_segment_examples() {
    // RFC 3986 §5.2.4's own examples, plus the trailing-slash cases of its algorithm.
    for (p, want) in [
        ("/a/b/c/./../../g", "/a/g"),
        ("/a/b/c/.", "/a/b/c/"),
        ("/a/b/c/..", "/a/b/"),
        ("/a/b/", "/a/b/"),
        ("/..", "/"),
        ("/.", "/"),
        ("/", "/"),
        ("/a/..", "/"),
        ("/a//", "/a/"),
        ("/.well-known/x", "/.well-known/x"),
        ("/a/..b/.c/...", "/a/..b/.c/..."),
    ] {
        assert_eq!(norm(SAFE, p).as_deref(), Ok(want), "{p}");
    }
}

#[test]
fn escapes_decoded_or_kept_in_one_spelling() {
    assert_eq!(
        norm(SAFE, "/%7Euser/%41%2d%5F").as_deref(),
        Ok("/~user/A-_")
    );
    // Reserved and non-ASCII escapes stay escaped, their hex upper case (RFC 3986 §6.2.2.1).
    assert_eq!(
        norm(SAFE, "/a%20b/%3b/%c3%a9").as_deref(),
        Ok("/a%20b/%3B/%C3%A9")
    );
    assert_eq!(norm(SAFE, "/100%25").as_deref(), Ok("/100%25"));
    for bad in ["/a%", "/a%2", "/a%zz", "/%g0/x"] {
        assert_eq!(norm(SAFE, bad), Err(PathError::BadEscape), "{bad}");
    }
}

#[test]
fn encoded_slashes_and_backslashes_by_policy() {
    for p in ["/api%2fexport/x", "/api%2Fexport/x", "/api%5cexport/x"] {
        assert_eq!(norm(SAFE, p), Err(PathError::EncodedSlash), "{p}");
    }
    assert_eq!(norm(SAFE, "/api\\export/x"), Err(PathError::Backslash));
    let decode = with(EscapedSlashes::Decode, PathParameters::Refuse);
    for p in [
        "/api%2fexport/x",
        "/api%5Cexport/x",
        "/api\\export/x",
        "/x%2f..%2fapi/export/x",
    ] {
        assert_eq!(norm(decode, p).as_deref(), Ok("/api/export/x"), "{p}");
    }
    let keep = with(EscapedSlashes::Keep, PathParameters::Refuse);
    assert_eq!(
        norm(keep, "/repos/a%2fb/x\\y").as_deref(),
        Ok("/repos/a%2Fb/x\\y")
    );
}

#[test]
fn parameters_by_policy() {
    assert_eq!(norm(SAFE, "/api/export;a/x"), Err(PathError::Parameters));
    assert_eq!(norm(SAFE, "/x/..;/api"), Err(PathError::Parameters));
    let strip = with(EscapedSlashes::Refuse, PathParameters::Strip);
    assert_eq!(
        norm(strip, "/api/export;a/x").as_deref(),
        Ok("/api/export/x")
    );
    // `..;` is `..` once stripped, as a servlet container reads it.
    assert_eq!(
        norm(strip, "/public/..;jsessionid=1/api/export/x").as_deref(),
        Ok("/api/export/x")
    );
    assert_eq!(norm(strip, "/a;b;c/;x/d;").as_deref(), Ok("/a/d"));
    let keep = with(EscapedSlashes::Refuse, PathParameters::Keep);
    assert_eq!(
        norm(keep, "/api/export;a/x"),
        Ok("/api/export;a/x".to_string())
    );
    assert!(matches!(
        keep.normalize("/api/export;a/x"),
        Ok(Cow::Borrowed(_))
    ));
    // An encoded `;` is data, not a parameter, in every mode.
    assert_eq!(norm(SAFE, "/a%3Bb").as_deref(), Ok("/a%3Bb"));
}

#[test]
fn targets_that_are_not_paths() {
    for p in ["", "*", "api/export", "?q"] {
        assert_eq!(norm(SAFE, p), Err(PathError::NotAPath), "{p:?}");
    }
}

#[test]
fn a_normal_path_is_not_copied() {
    for p in [
        "/",
        "/api/export/x",
        "/a/b/",
        "/.well-known/acme",
        "/a.b/c..d",
        "/é/ü",
    ] {
        assert!(
            matches!(SAFE.normalize(p), Ok(Cow::Borrowed(_))),
            "{p} was copied"
        );
    }
    // Normal escapes pass the slow path and still come back borrowed.
    assert!(matches!(SAFE.normalize("/a%20b"), Ok(Cow::Borrowed(_))));
}

fn parts(method: &str, uri: &str) -> Parts {
    http::Request::builder()
        .method(method)
        .uri(uri)
        .body(())
        .unwrap()
        .into_parts()
        .0
}

#[test]
fn apply_keeps_the_query_and_an_absolute_targets_authority() {
    let mut p = parts("GET", "/x/../api/%65xport/x?a=%2F..&b=//");
    SAFE.apply(&mut p).unwrap();
    assert_eq!(p.uri, "/api/export/x?a=%2F..&b=//");
    let mut p = parts("GET", "http://a.example:8080//api/./export/x?q");
    SAFE.apply(&mut p).unwrap();
    assert_eq!(p.uri.to_string(), "http://a.example:8080/api/export/x?q");
    // An absolute target without a path is the root (RFC 9112 §3.2.2).
    let mut p = parts("GET", "http://a.example");
    SAFE.apply(&mut p).unwrap();
    assert_eq!(p.uri.path(), "/");
    // A path that is already normal keeps its very bytes.
    let mut p = parts("GET", "/api/export/x?q");
    let before = p.uri.path().as_ptr();
    SAFE.apply(&mut p).unwrap();
    assert_eq!(p.uri.path().as_ptr(), before);
}

#[test]
fn asterisk_only_for_options() {
    let mut p = parts("OPTIONS", "*");
    SAFE.apply(&mut p).unwrap();
    assert_eq!(p.uri, "*");
    let mut p = parts("GET", "*");
    assert_eq!(SAFE.apply(&mut p), Err(PathError::NotAPath));
}

#[test]
fn prefixes_on_segment_boundaries() {
    assert!(prefix_matches("/api/export", "/api/export", true));
    assert!(prefix_matches("/api/export/x", "/api/export", true));
    assert!(!prefix_matches("/api/exports", "/api/export", true));
    assert!(!prefix_matches("/batchjobs", "/batch", true));
    assert!(prefix_matches("/batch/", "/batch/", true));
    assert!(prefix_matches("/batch/x", "/batch/", true));
    assert!(!prefix_matches("/batch", "/batch/", true));
    assert!(prefix_matches("/anything", "/", true));
    assert!(!prefix_matches("/API/export/x", "/api/export", true));
    assert!(prefix_matches("/API/Export/x", "/api/export", false));
    assert!(!prefix_matches("/ap", "/api", false));
}

/// Paths built from the pieces the tricks are made of.
fn tricky_path() -> impl Strategy<Value = String> {
    let piece = prop::sample::select(vec![
        "/", "//", ".", "..", "a", "B", "~", "%2e", "%2E", "%41", "%7e", "%2f", "%5C", "\\", ";",
        ";x", "%20", "%3b", "%", "%4", "é", "-", "_", "api", "export",
    ]);
    prop::collection::vec(piece, 0..16).prop_map(|v| format!("/{}", v.concat()))
}

fn policies() -> impl Strategy<Value = PathPolicy> {
    (
        prop::sample::select(vec![
            EscapedSlashes::Refuse,
            EscapedSlashes::Decode,
            EscapedSlashes::Keep,
        ]),
        prop::sample::select(vec![
            PathParameters::Refuse,
            PathParameters::Strip,
            PathParameters::Keep,
        ]),
    )
        .prop_map(|(e, p)| with(e, p))
}

proptest! {
    #[test]
    fn normal_form_is_a_fixed_point(p in tricky_path(), policy in policies()) {
        let Ok(once) = norm(policy, &p) else { return Ok(()); };
        let twice = policy.normalize(&once);
        prop_assert!(matches!(twice, Ok(Cow::Borrowed(_))), "{p:?} → {once:?} → {twice:?}");
        prop_assert!(once.starts_with('/'));
        for bad in ["//", "/./", "/../"] {
            prop_assert!(!once.contains(bad), "{p:?} → {once:?} has {bad}");
        }
        prop_assert!(!once.ends_with("/.") && !once.ends_with("/.."), "{p:?} → {once:?}");
        // No escape of an unreserved character is left, and every escape is upper case.
        let b = once.as_bytes();
        for (i, _) in once.match_indices('%') {
            let (h, l) = (b[i + 1], b[i + 2]);
            prop_assert!(h.is_ascii_hexdigit() && l.is_ascii_hexdigit());
            prop_assert!(!h.is_ascii_lowercase() && !l.is_ascii_lowercase(), "{once:?}");
            let v = hex(h).unwrap() << 4 | hex(l).unwrap();
            prop_assert!(!is_unreserved(v), "{p:?} → {once:?}");
        }
        if policy.escaped_slashes != EscapedSlashes::Keep {
            prop_assert!(!once.contains('\\') && !once.contains("%2F") && !once.contains("%5C"));
        }
        if policy.parameters != PathParameters::Keep {
            prop_assert!(!once.contains(';'), "{p:?} → {once:?}");
        }
    }

    #[test]
    fn the_fast_check_never_passes_what_the_slow_path_would_change(
        p in tricky_path(),
        policy in policies(),
    ) {
        if policy.is_normal(p.as_bytes()) {
            prop_assert_eq!(policy.rewrite(p.as_bytes()).ok(), Some(p.clone().into_bytes()));
        }
    }
}
