//! Header fields named with `_` (`x_spillway_criticality`, which CGI/WSGI/PHP upstreams read as
//! `x-spillway-criticality`) through a real proxy over HTTP/1.1 and HTTP/2: dropped and counted
//! by default, refused with a 400 naming the field, or passed on when allowed.
//!
//! One test: the counts are read from the process-wide metrics recorder the admin listener
//! installs, so no other test in this binary may add to them.

mod admin_support;
mod proxy_support;
mod request_support;

use std::net::SocketAddr;

use admin_support::{sample, stack};
use request_support::{h1, h2, upstream};
use spillway_proxy::admin::AdminConfig;
use spillway_proxy::metrics::{Fault, UNDERSCORE_HEADERS};

fn config(upstream: SocketAddr, action: &str) -> String {
    format!(
        r#"
[upstream]
addresses = ["{upstream}"]
[classify]
trusted = ["127.0.0.0/8"]
[request]
headers_with_underscores = "{action}"
"#
    )
}

/// The real field and two look-alikes, one of them claiming more than the real one.
const H1_FIELDS: &str = "x-spillway-criticality: SHEDDABLE\r\n\
                         x_spillway_criticality: CRITICAL_PLUS\r\n\
                         x_forwarded_for: 10.9.9.9\r\n";
const H2_FIELDS: [(&str, &str); 3] = [
    ("x-spillway-criticality", "SHEDDABLE"),
    ("x_spillway_criticality", "CRITICAL_PLUS"),
    ("x_forwarded_for", "10.9.9.9"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookalike_fields_are_dropped_refused_or_allowed() {
    let up = upstream().await;

    // Default: dropped before classification, over both protocols, one count per field.
    let s = stack(&config(up, "drop"), AdminConfig::default()).await;
    let a = h1(s.proxy_addr(), "GET", "/x", H1_FIELDS).await;
    let b = h2(s.proxy_addr(), "/x", &H2_FIELDS).await;
    for (what, a) in [("h1", &a), ("h2", &b)] {
        assert_eq!(a.status, 200, "{what}: {}", a.body);
        assert!(a.body.starts_with("crit=SHEDDABLE "), "{what}: {}", a.body);
        assert!(
            !a.body.contains('_'),
            "{what}: a look-alike reached the upstream: {}",
            a.body
        );
    }
    let m = s.admin_get("/metrics").await.text;
    assert_eq!(
        sample(&m, UNDERSCORE_HEADERS, &[("action", "dropped")]),
        Some(4.0),
        "{m}"
    );
    s.shutdown().await;

    // Refused: a 400 naming the first such field, counted as a bad request.
    let s = stack(&config(up, "refuse"), AdminConfig::default()).await;
    let a = h1(s.proxy_addr(), "GET", "/x", H1_FIELDS).await;
    let b = h2(s.proxy_addr(), "/x", &H2_FIELDS).await;
    for (what, a) in [("h1", &a), ("h2", &b)] {
        assert_eq!(a.status, 400, "{what}: {}", a.body);
        assert_eq!(a.reason, "underscore_header", "{what}");
        assert!(a.body.contains("`x_"), "{what}: {}", a.body);
    }
    assert_eq!(s.state.faults.get(Fault::BadRequest), 2);
    // A request without one is served as before.
    let c = h1(
        s.proxy_addr(),
        "GET",
        "/x",
        "x-spillway-criticality: SHEDDABLE\r\n",
    )
    .await;
    assert!(c.body.starts_with("crit=SHEDDABLE "), "{}", c.body);
    let m = s.admin_get("/metrics").await.text;
    assert_eq!(
        sample(&m, UNDERSCORE_HEADERS, &[("action", "refused")]),
        Some(2.0),
        "{m}"
    );
    s.shutdown().await;

    // Allowed: passed on as they came (the proxy still decides the real field).
    let s = stack(&config(up, "allow"), AdminConfig::default()).await;
    let a = h1(s.proxy_addr(), "GET", "/x", H1_FIELDS).await;
    let b = h2(s.proxy_addr(), "/x", &H2_FIELDS).await;
    for (what, a) in [("h1", &a), ("h2", &b)] {
        assert_eq!(a.status, 200, "{what}: {}", a.body);
        assert!(a.body.starts_with("crit=SHEDDABLE "), "{what}: {}", a.body);
        assert!(
            a.body.contains("x_forwarded_for") && a.body.contains("x_spillway_criticality"),
            "{what}: {}",
            a.body
        );
    }
    let m = s.admin_get("/metrics").await.text;
    assert_eq!(
        sample(&m, UNDERSCORE_HEADERS, &[("action", "dropped")]),
        Some(4.0),
        "allowed fields are not counted: {m}"
    );
    s.shutdown().await;
}
