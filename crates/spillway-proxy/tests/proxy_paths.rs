//! Every path trick of issue 29 through a real proxy, over HTTP/1.1 (raw bytes, so the target is
//! sent exactly as written) and HTTP/2: with a route `/api/export/**` → SHEDDABLE and CRITICAL by
//! default, the criticality the upstream is told and the path it receives — or the 400.

mod proxy_support;
mod request_support;

use std::net::SocketAddr;

use proxy_support::proxy_toml;
use request_support::Want::{self, Refused, Sent};
use request_support::{h1, h2, upstream};

fn config(upstream: SocketAddr, request: &str) -> String {
    format!(
        r#"
[upstream]
addresses = ["{upstream}"]
[request]
{request}
[[routes]]
name = "export"
path = "/api/export/**"
criticality = "SHEDDABLE"
[[routes]]
name = "batch"
path = "/batch"
criticality = "SHEDDABLE_PLUS"
"#
    )
}

const EXPORT: &str = "/api/export/x";

/// The tricks under the default `[request]`: each either lands on its route with the path the
/// route was chosen by, or is refused.
const DEFAULTS: &[(&str, Want)] = &[
    ("/api/export/x", Sent("SHEDDABLE", EXPORT)),
    ("//api/export/x", Sent("SHEDDABLE", EXPORT)),
    ("/api//export/x", Sent("SHEDDABLE", EXPORT)),
    ("/api/./export/x", Sent("SHEDDABLE", EXPORT)),
    ("/x/../api/export/x", Sent("SHEDDABLE", EXPORT)),
    ("/api/%65xport/x", Sent("SHEDDABLE", EXPORT)),
    ("/%61pi/export/x", Sent("SHEDDABLE", EXPORT)),
    (
        "/%61%70%69/%65%78%70%6f%72%74/%78",
        Sent("SHEDDABLE", EXPORT),
    ),
    // Case is ignored for routing; the path goes on as the client spelt it.
    ("/API/export/x", Sent("SHEDDABLE", "/API/export/x")),
    ("/Api/EXPORT/x", Sent("SHEDDABLE", "/Api/EXPORT/x")),
    // `..` beyond the root, and dots spelt as escapes.
    ("/../api/export/x", Sent("SHEDDABLE", EXPORT)),
    ("/../../api/export/x", Sent("SHEDDABLE", EXPORT)),
    ("/x/%2e%2e/api/export/x", Sent("SHEDDABLE", EXPORT)),
    ("/x/.%2E/api/export/x", Sent("SHEDDABLE", EXPORT)),
    ("/api/export/y/../x", Sent("SHEDDABLE", EXPORT)),
    // The query is kept byte for byte, whatever it holds.
    (
        "/api/./export/x?q=/../%2F;a&b=//",
        Sent("SHEDDABLE", "/api/export/x?q=/../%2F;a&b=//"),
    ),
    // Refused by default: parameters, encoded slashes, backslashes, broken escapes.
    ("/api/export;a/x", Refused("bad_path")),
    ("/x/..;/api/export/x", Refused("bad_path")),
    ("/api%2fexport/x", Refused("bad_path")),
    ("/api%2Fexport/x", Refused("bad_path")),
    ("/api\\export/x", Refused("bad_path")),
    ("/api%5cexport/x", Refused("bad_path")),
    ("/api/%zzport/x", Refused("bad_path")),
    // Off the route, on segment boundaries.
    ("/api/exports/x", Sent("CRITICAL", "/api/exports/x")),
    ("/batch", Sent("SHEDDABLE_PLUS", "/batch")),
    ("/batch/1", Sent("SHEDDABLE_PLUS", "/batch/1")),
    ("/batchjobs", Sent("CRITICAL", "/batchjobs")),
    ("/x/../batch", Sent("SHEDDABLE_PLUS", "/batch")),
    ("/", Sent("CRITICAL", "/")),
];

#[tokio::test]
async fn every_trick_over_http1_and_h2() {
    let up = upstream().await;
    let p = proxy_toml(&config(up, "")).await;
    for &(target, want) in DEFAULTS {
        h1(p.addr, "GET", target, "")
            .await
            .check(want, &format!("h1 {target}"));
        let a = h2(p.addr, target, &[]).await;
        a.check(want, &format!("h2 {target}"));
        if matches!(want, Sent(..)) {
            assert!(
                a.body.contains("v=HTTP/2.0"),
                "h2c to the upstream: {}",
                a.body
            );
        }
    }
    p.shutdown().await;
}

#[tokio::test]
async fn targets_other_than_origin_form_over_http1() {
    let up = upstream().await;
    let p = proxy_toml(&config(up, "")).await;
    let cases: &[(&str, &str, Want)] = &[
        // Absolute form (a forward-proxy client): the path normalised, sent in origin form.
        (
            "GET",
            "http://example.com//api/./export/x?q",
            Sent("SHEDDABLE", "/api/export/x?q"),
        ),
        (
            "GET",
            "http://example.com/API/%65xport/x",
            Sent("SHEDDABLE", "/API/export/x"),
        ),
        (
            "GET",
            "http://example.com/api%2Fexport/x",
            Refused("bad_path"),
        ),
        // Absolute form with an empty path is the root (RFC 9112 §3.2.2).
        ("GET", "http://example.com", Sent("CRITICAL", "/")),
        // Asterisk form: for OPTIONS only, forwarded as it is, on no route.
        ("OPTIONS", "*", Sent("CRITICAL", "*")),
        ("GET", "*", Refused("bad_path")),
    ];
    for &(method, target, want) in cases {
        h1(p.addr, method, target, "")
            .await
            .check(want, &format!("{method} {target}"));
    }
    p.shutdown().await;
}

#[tokio::test]
async fn decoded_slashes_and_stripped_parameters_when_configured() {
    let up = upstream().await;
    let request = "escaped_slashes = \"decode\"\npath_parameters = \"strip\"\n";
    let p = proxy_toml(&config(up, request)).await;
    let cases: &[(&str, Want)] = &[
        ("/api/export;a/x", Sent("SHEDDABLE", EXPORT)),
        ("/api/export;a=1;b/x;c", Sent("SHEDDABLE", EXPORT)),
        ("/public/..;/api/export/x", Sent("SHEDDABLE", EXPORT)),
        ("/api%2fexport/x", Sent("SHEDDABLE", EXPORT)),
        ("/api%5Cexport/x", Sent("SHEDDABLE", EXPORT)),
        ("/api\\export/x", Sent("SHEDDABLE", EXPORT)),
        ("/x%2F..%2Fapi/export/x", Sent("SHEDDABLE", EXPORT)),
        ("/batch;jsessionid=1", Sent("SHEDDABLE_PLUS", "/batch")),
    ];
    for &(target, want) in cases {
        h1(p.addr, "GET", target, "")
            .await
            .check(want, &format!("h1 {target}"));
        h2(p.addr, target, &[])
            .await
            .check(want, &format!("h2 {target}"));
    }
    p.shutdown().await;
}

#[tokio::test]
async fn kept_escapes_and_parameters_are_ordinary_characters() {
    let up = upstream().await;
    let request = "escaped_slashes = \"keep\"\npath_parameters = \"keep\"\n";
    let p = proxy_toml(&config(up, request)).await;
    let cases: &[(&str, Want)] = &[
        // Kept as written (escapes in upper case), and matched as characters of one segment.
        ("/api%2fexport/x", Sent("CRITICAL", "/api%2Fexport/x")),
        ("/api/export/a%2Fb", Sent("SHEDDABLE", "/api/export/a%2Fb")),
        ("/api/export;a/x", Sent("CRITICAL", "/api/export;a/x")),
        // Still normalised otherwise.
        ("/api/./export/x", Sent("SHEDDABLE", EXPORT)),
    ];
    for &(target, want) in cases {
        h1(p.addr, "GET", target, "")
            .await
            .check(want, &format!("h1 {target}"));
        h2(p.addr, target, &[])
            .await
            .check(want, &format!("h2 {target}"));
    }
    p.shutdown().await;
}

#[tokio::test]
async fn case_sensitive_routes_when_configured() {
    let up = upstream().await;
    let p = proxy_toml(&config(up, "case_sensitive_paths = true\n")).await;
    for (target, want) in [
        ("/API/export/x", Sent("CRITICAL", "/API/export/x")),
        ("/api/export/x", Sent("SHEDDABLE", EXPORT)),
        ("/api/%65xport/x", Sent("SHEDDABLE", EXPORT)),
    ] {
        h1(p.addr, "GET", target, "")
            .await
            .check(want, &format!("h1 {target}"));
        h2(p.addr, target, &[])
            .await
            .check(want, &format!("h2 {target}"));
    }
    p.shutdown().await;
}

#[tokio::test]
async fn health_paths_are_matched_on_the_normal_path() {
    let up = upstream().await;
    let p = proxy_toml(&config(up, "")).await;
    // Everything below CRITICAL_PLUS is shed, except health checks.
    p.state
        .controls()
        .set_shed_below(Some(spillway_core::Criticality::CriticalPlus));
    for target in ["/healthz", "//healthz", "/x/../HEALTHZ", "/%68ealthz"] {
        let a = h1(p.addr, "GET", target, "").await;
        assert_eq!(a.status, 200, "{target}: {}", a.body);
        assert!(a.body.contains("target=/"), "{target}: {}", a.body);
    }
    for target in ["/healthzz", "/healthz/x", "/api/export/x"] {
        let a = h1(p.addr, "GET", target, "").await;
        assert_eq!(a.status, 503, "{target}: {}", a.body);
    }
    p.shutdown().await;
}

/// An empty target never reaches routing: over HTTP/1.1 the request line does not parse (400),
/// over HTTP/2 an empty `:path` is malformed (RFC 9113 §8.3.1) and the stream is refused. Sent
/// as raw bytes, since no client library sends either. The upstream is a dead address, so a
/// request that got through would come back 502, not as checked here.
#[tokio::test]
async fn an_empty_target_is_refused_over_http1_and_h2() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dead = proxy_support::dead_addr().await;
    let p = proxy_toml(&config(dead, "")).await;
    let a = proxy_support::exchange(p.addr, b"GET  HTTP/1.1\r\nhost: x\r\n\r\n").await;
    assert!(a.starts_with("HTTP/1.1 400"), "{a}");

    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // SETTINGS, empty
                                                         // HPACK: :method GET (static 2), :scheme http (6), :authority "x" (literal, name 1),
                                                         // :path "" (literal, name 4).
    let block = [0x82, 0x86, 0x41, 1, b'x', 0x44, 0];
    out.extend_from_slice(&[0, 0, block.len() as u8, 1, 0x5, 0, 0, 0, 1]); // HEADERS, END_STREAM|END_HEADERS, stream 1
    out.extend_from_slice(&block);
    s.write_all(&out).await.unwrap();
    // Frames until stream 1 is answered: RST_STREAM or GOAWAY, or HEADERS whose first field is
    // `:status 400` (static index 12).
    let mut buf = Vec::new();
    let verdict = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            while buf.len() >= 9 {
                let len =
                    usize::from(buf[0]) << 16 | usize::from(buf[1]) << 8 | usize::from(buf[2]);
                if buf.len() < 9 + len {
                    break;
                }
                let (kind, stream) = (buf[3], u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]));
                let payload = buf[9..9 + len].to_vec();
                buf.drain(..9 + len);
                match (kind, stream) {
                    (3, 1) | (7, _) => return format!("reset (frame type {kind})"),
                    (1, 1) => {
                        return format!("headers {:#x}", payload.first().copied().unwrap_or(0))
                    }
                    _ => {}
                }
            }
            let mut b = [0u8; 4096];
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return "closed".to_string(),
                Ok(n) => buf.extend_from_slice(&b[..n]),
            }
        }
    })
    .await
    .expect("an answer in time");
    assert!(
        verdict.starts_with("reset") || verdict == "headers 0x8c",
        "{verdict}"
    );
    eprintln!("empty :path: {verdict}");
    drop(s);
    p.shutdown().await;
}
