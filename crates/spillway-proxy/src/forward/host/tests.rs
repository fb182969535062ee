use http::header::HOST;
use http::{Request, Version};

use super::{check, HostError};

/// The parts of a request to `uri` in `version` with these `host` fields; checked.
fn checked(version: Version, uri: &str, hosts: &[&str]) -> (Result<(), HostError>, Vec<String>) {
    let mut b = Request::builder().version(version).uri(uri);
    for h in hosts {
        b = b.header(HOST, *h);
    }
    let (mut parts, ()) = b.body(()).expect("a valid request").into_parts();
    let r = check(&mut parts);
    let after = parts
        .headers
        .get_all(HOST)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    (r, after)
}

#[test]
fn an_http11_request_has_exactly_one_host() {
    let (r, after) = checked(Version::HTTP_11, "/a", &["example.com:8080"]);
    assert_eq!(r, Ok(()));
    assert_eq!(after, ["example.com:8080"], "left as it was");
    assert_eq!(
        checked(Version::HTTP_11, "/a", &[]).0,
        Err(HostError::Missing)
    );
    assert_eq!(
        checked(Version::HTTP_11, "/a", &["a", "b"]).0,
        Err(HostError::Several)
    );
    assert_eq!(
        checked(Version::HTTP_11, "/a", &["a", "a"]).0,
        Err(HostError::Several),
        "even the same value twice"
    );
}

#[test]
fn http10_may_leave_host_out_but_not_send_two() {
    assert_eq!(checked(Version::HTTP_10, "/a", &[]).0, Ok(()));
    assert_eq!(
        checked(Version::HTTP_10, "/a", &["a", "b"]).0,
        Err(HostError::Several)
    );
}

#[test]
fn a_host_value_is_host_and_port_or_empty() {
    for ok in [
        "example.com",
        "example.com:80",
        "127.0.0.1:9000",
        "[::1]:8080",
        "xn--bcher-kva.example",
        "a_b~c%41",
        "",
    ] {
        assert_eq!(checked(Version::HTTP_11, "/", &[ok]).0, Ok(()), "{ok:?}");
    }
    for bad in [
        "a b",
        "evil.example/path",
        "user@host",
        "host?q",
        "host#f",
        "a\tb",
        "h\u{e9}",
    ] {
        assert_eq!(
            checked(Version::HTTP_11, "/", &[bad]).0,
            Err(HostError::Invalid),
            "{bad:?}"
        );
    }
}

#[test]
fn an_absolute_target_replaces_the_host() {
    let (r, after) = checked(
        Version::HTTP_11,
        "http://target.example:8080/a",
        &["other.example"],
    );
    assert_eq!(r, Ok(()));
    assert_eq!(after, ["target.example:8080"]);
    // No host at all is fine in absolute form: the target says it.
    let (r, after) = checked(Version::HTTP_11, "http://target.example/a", &[]);
    assert_eq!(r, Ok(()));
    assert_eq!(after, ["target.example"]);
    // The userinfo is not part of the host (RFC 9112 §3.2.3).
    let (_, after) = checked(Version::HTTP_10, "http://u:p@target.example/a", &[]);
    assert_eq!(after, ["target.example"]);
    // Two hosts stay an error even when the target would replace them.
    assert_eq!(
        checked(Version::HTTP_11, "http://t.example/", &["a", "b"]).0,
        Err(HostError::Several)
    );
}

#[test]
fn an_http2_host_names_the_same_authority() {
    let uri = "http://svc.example:8443/a";
    assert_eq!(checked(Version::HTTP_2, uri, &[]).0, Ok(()));
    assert_eq!(
        checked(Version::HTTP_2, uri, &["SVC.example:8443"]).0,
        Ok(()),
        "compared without case"
    );
    assert_eq!(
        checked(Version::HTTP_2, uri, &["other.example"]).0,
        Err(HostError::NotAuthority)
    );
    assert_eq!(
        checked(Version::HTTP_2, uri, &["svc.example:8444"]).0,
        Err(HostError::NotAuthority),
        "another port"
    );
    // A port left out is the scheme's default.
    assert_eq!(
        checked(
            Version::HTTP_2,
            "https://svc.example/a",
            &["svc.example:443"]
        )
        .0,
        Ok(())
    );
    assert_eq!(
        checked(Version::HTTP_2, "http://svc.example:80/a", &["svc.example"]).0,
        Ok(())
    );
    assert_eq!(
        checked(
            Version::HTTP_2,
            "http://svc.example/a",
            &["svc.example:443"]
        )
        .0,
        Err(HostError::NotAuthority)
    );
    let (r, after) = checked(Version::HTTP_2, uri, &[]);
    assert_eq!((r, after.len()), (Ok(()), 0), "no host added for HTTP/2");
}
