use super::origin_form;

#[test]
fn origin_form_paths_are_visible_ascii_without_fragments() {
    for ok in [
        "/",
        "/healthz",
        "/a/b:c@d!$&'()*+,;=-._~",
        "/x%20y",
        "/*/**",
    ] {
        assert_eq!(origin_form("k", ok, false), Ok(()), "{ok}");
    }
    assert_eq!(origin_form("k", "/h?full=1", true), Ok(()));
    for (bad, what) in [
        ("/a b", "a space at byte 2"),
        ("/a\r\nb", "a carriage return (CR) at byte 2"),
        ("/a\nb", "a line feed (LF) at byte 2"),
        ("/a\u{7f}", "a control character at byte 2"),
        ("/é", "a non-ASCII character at byte 1"),
        ("/a#b", "a \"#\""),
        ("/a?b", "a \"?\""),
        ("/a%2", "a \"%\" not followed by two hex digits at byte 2"),
        ("/a%g0", "a \"%\" not followed by two hex digits"),
        ("a", "does not start with \"/\""),
    ] {
        let (key, message) = origin_form("k.path", bad, false).unwrap_err();
        assert_eq!(key, "k.path");
        assert!(
            message.starts_with(&format!("{bad:?}: {what}")),
            "{message}"
        );
        assert!(
            message.contains("expected an origin-form path"),
            "{message}"
        );
        assert!(message.ends_with("and no \"?\" query"), "{message}");
    }
}

/// The per-task cap is a backstop behind the admission limit, not a second, lower limit: by
/// default one task may run as many requests as the proxy holds at all (at 256, a task with
/// 1,000 workers was held to a quarter of its capacity).
#[test]
fn the_default_per_task_cap_does_not_bind_before_the_requests_in_progress() {
    let cfg = crate::config::ProxyConfig::default();
    assert!(cfg.upstream.max_requests_per_task >= cfg.listen.max_requests_in_progress);
    assert!(super::validate(&cfg).is_ok());
}
