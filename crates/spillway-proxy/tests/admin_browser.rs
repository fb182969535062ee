//! The admin API without a token against a real browser (headless `chromium` over the DevTools
//! Protocol): a page from another origin tries what a malicious site would — cross-origin
//! `fetch` posts in `no-cors` mode with form and text bodies, a form posted into a hidden frame,
//! and posts with the script header or a JSON type (which need a CORS preflight) — and nothing
//! changes; the refusals are counted by the admin listener, so the requests did reach it. The
//! dashboard's own switch, same-origin, still works without a token.
//!
//! Runs where `chromium` is installed; skips with a message where it is not, except in CI
//! (`CI=true`). Loopback only, bounded in time.

#[path = "admin_support/mod.rs"]
mod admin_support;
#[path = "dashboard_cdp/mod.rs"]
mod dashboard_cdp;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use spillway_proxy::admin::AdminConfig;
use tokio::net::TcpListener;

use admin_support::{sample, stack, upstream};
use dashboard_cdp::{find_chromium, Browser};

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A loopback server standing for the attacker's site: one page with a hidden frame and a form
/// aimed at the admin listener's `/reload`.
async fn attacker_site(admin: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let page = format!(
        "<!doctype html><title>cat pictures</title>\
         <iframe name=sink></iframe>\
         <form id=f method=POST target=sink enctype=text/plain \
          action=\"http://{admin}/reload\">\
         <input name='[classify]&#10;trusted' value='[\"0.0.0.0/0\"]'></form>"
    );
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let page = page.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |_req: Request<hyper::body::Incoming>| {
                    let mut r = Response::new(Full::new(Bytes::from(page.clone())));
                    r.headers_mut()
                        .insert("content-type", "text/html".parse().expect("value"));
                    async move { Ok::<_, Infallible>(r) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

#[test]
fn a_web_page_cannot_change_the_proxy_and_the_dashboard_still_can() {
    let Some(chromium) = find_chromium() else {
        let msg = "chromium is not installed (apt-get install -y chromium)";
        assert!(!in_ci(), "{msg}: CI must install it (.ci/run)");
        eprintln!("SKIPPED a_web_page_cannot_change_the_proxy_and_the_dashboard_still_can: {msg}");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let up = rt.block_on(upstream());
    let toml = format!(
        "[upstream]\naddresses = [\"{}\"]\n\n[[routes]]\nname = \"api\"\npath = \"/\"\n\
         [routes.degrade]\nbody = \"cached\"\n",
        up.addr
    );
    let s = rt.block_on(stack(&toml, AdminConfig::default()));
    let admin = s.admin;
    let evil = rt.block_on(attacker_site(admin));
    let forbidden = |s: &admin_support::Stack| {
        let m = rt.block_on(s.admin_get("/metrics")).text;
        sample(&m, "spillway_admin_forbidden_total", &[]).unwrap_or(0.0)
    };
    let before = forbidden(&s);

    let mut b = Browser::launch(&chromium, 1024, 768).expect("chromium starts and attaches");
    // `localhost` is another site than `127.0.0.1`, as a real attacker's would be.
    b.goto(&format!("http://localhost:{}/", evil.port()))
        .expect("the attacker's page loads");
    let attempts = format!(
        r#"(async () => {{
            const A = "http://{admin}";
            const out = {{}};
            const tryFetch = async (name, url, init) => {{
                try {{ await fetch(A + url, Object.assign({{ method: "POST" }}, init)); out[name] = "sent"; }}
                catch (e) {{ out[name] = "blocked: " + e.message; }}
            }};
            await tryFetch("form", "/controls/admit-percent?percent=0",
                {{ mode: "no-cors", headers: {{ "Content-Type": "application/x-www-form-urlencoded" }}, body: "percent=0" }});
            await tryFetch("text", "/controls/shed-below",
                {{ mode: "no-cors", headers: {{ "Content-Type": "text/plain" }}, body: '{{"criticality": "CRITICAL_PLUS"}}' }});
            await tryFetch("script-header", "/controls/retries?enabled=false",
                {{ headers: {{ "X-Spillway-Admin": "1" }} }});
            await tryFetch("json", "/degradation",
                {{ headers: {{ "Content-Type": "application/json" }}, body: '{{"enabled": false}}' }});
            document.getElementById("f").submit();
            return out;
        }})()"#
    );
    let out = b.eval(&attempts).expect("the page's attempts run");
    eprintln!("the attacker page's attempts: {out}");
    // The preflighted ones never leave the browser: the admin API grants no CORS.
    for name in ["script-header", "json"] {
        let r = out[name].as_str().unwrap_or_default();
        assert!(r.starts_with("blocked"), "{name}: {out}");
    }
    // The simple ones (two fetches and the form) reach the listener and are refused there.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while forbidden(&s) < before + 3.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the 3 simple requests were not refused by the admin API (forbidden {} -> {}): {out}",
            before,
            forbidden(&s)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let c: Value = rt.block_on(s.admin_get("/controls")).json();
    assert_eq!(c["admit_percent"], Value::Null, "{c}");
    assert_eq!(c["shed_below"], Value::Null, "{c}");
    assert_eq!(c["retries_enabled"], true, "{c}");
    let st = s.state.status();
    assert_eq!(st.reloads, 0, "no reload from a form");
    assert!(!st.degradation_all_off);

    // The dashboard, same-origin and without a token, still flips its switch.
    b.goto(&format!("http://{admin}/"))
        .expect("dashboard loads");
    b.wait_for(
        "document.getElementById('degradation-switch') && !document.getElementById('degradation-switch').disabled",
        Duration::from_secs(15),
    )
    .expect("the switch is there");
    b.eval("document.getElementById('degradation-switch').click(); true")
        .expect("click");
    b.wait_for(
        "document.getElementById('degradation-message').dataset.result === 'off'",
        Duration::from_secs(10),
    )
    .expect("the dashboard's own post is accepted");
    assert!(s.state.status().degradation_all_off);
    drop(b);
    rt.block_on(s.shutdown());
}
