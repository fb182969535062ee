//! End to end in a real browser (Debian's `chromium`, headless, over the DevTools Protocol):
//! the dashboard loads from the admin listener, its charts keep updating while the proxy is
//! under about 10× overload, the degradation switch works (refused without the token, applied
//! with it, visible in `/status`), and the calculator page shows the reference figures — the
//! same text `spillway calc` prints. Screenshots of both pages are written as PNG.
//!
//! Runs where `chromium` is installed; skips with a message where it is not, except in CI
//! (`CI=true`), where a missing browser fails the test. `.ci/run` installs it.
//! Screenshots go to `$SPILLWAY_SCREENSHOTS` (e.g. `docs/img`) or the target's tmp dir.
//! All traffic is on loopback, bounded in time (the load stops after at most 60 s).

#[path = "admin_support/mod.rs"]
mod admin_support;
#[path = "dashboard_cdp/mod.rs"]
mod dashboard_cdp;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use spillway_proxy::admin::AdminConfig;
use tokio::net::TcpListener;

use admin_support::{stack, TOKEN};
use dashboard_cdp::{find_chromium, Browser};

/// Work per request at the upstream, and the proxy's fixed concurrency limit: capacity is
/// about LIMIT / WORK = 50 req/s.
const WORK: Duration = Duration::from_millis(40);
const LIMIT: usize = 2;
/// Offered load: first one request every 40 ms (25 req/s, half the capacity) for
/// `CALM_FOR`, then the surge: one every 2 ms = 500 req/s, about 10× capacity.
const CALM_EVERY: Duration = Duration::from_millis(40);
const CALM_FOR: Duration = Duration::from_secs(8);
const SEND_EVERY: Duration = Duration::from_millis(2);
/// The load stops by itself after this long even if the test forgets to stop it.
const LOAD_AT_MOST: Duration = Duration::from_secs(60);
/// Requests outstanding at most; beyond it the generator skips a send (bounded memory).
const MAX_OUTSTANDING: u64 = 400;

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A loopback upstream that spends `WORK` on every request.
async fn slow_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind upstream");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = service_fn(|_req: Request<hyper::body::Incoming>| async {
                    tokio::time::sleep(WORK).await;
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// Open-loop load on the proxy until `stop` (or `LOAD_AT_MOST`): calm, then a surge; a mix of
/// criticalities and customers, each request with a 3 s timeout.
fn spawn_load(
    rt: &tokio::runtime::Runtime,
    proxy: SocketAddr,
    stop: Arc<AtomicBool>,
) -> Arc<AtomicU64> {
    let sent = Arc::new(AtomicU64::new(0));
    let s = Arc::clone(&sent);
    rt.spawn(async move {
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(64)
            .build_http();
        let outstanding = Arc::new(AtomicU64::new(0));
        let mut tick = tokio::time::interval(CALM_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let start = Instant::now();
        let until = start + LOAD_AT_MOST;
        let mut surging = false;
        let mut i: u64 = 0;
        while !stop.load(Ordering::Relaxed) && Instant::now() < until {
            tick.tick().await;
            if !surging && start.elapsed() >= CALM_FOR {
                surging = true;
                tick = tokio::time::interval(SEND_EVERY);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            }
            i += 1;
            if outstanding.load(Ordering::Relaxed) >= MAX_OUTSTANDING {
                continue;
            }
            let criticality = match i % 20 {
                0 => "CRITICAL_PLUS",
                1..=4 => "CRITICAL",
                5..=9 => "SHEDDABLE_PLUS",
                _ => "SHEDDABLE",
            };
            let customer = ["acme", "globex", "initech"][(i % 7 % 3) as usize];
            let req = Request::get(format!("http://{proxy}/api/item/{i}"))
                .header("x-spillway-criticality", criticality)
                .header("x-spillway-customer", customer)
                .body(Full::new(Bytes::new()))
                .expect("request");
            let c = client.clone();
            let o = Arc::clone(&outstanding);
            o.fetch_add(1, Ordering::Relaxed);
            s.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                if let Ok(Ok(r)) =
                    tokio::time::timeout(Duration::from_secs(3), c.request(req)).await
                {
                    let _ = r.into_body().collect().await;
                }
                o.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
    sent
}

fn config(up: SocketAddr) -> String {
    format!(
        r#"
[upstream]
addresses = ["{up}"]

[admission.limit]
algorithm = "fixed"
limit = {LIMIT}

[classify]
trusted = ["127.0.0.0/8"]

[[routes]]
name = "api"
path = "/api/"
[routes.degrade]
threshold = 0.95
upstream_path = "/lite/"

[[routes]]
name = "other"
path = "/"
"#
    )
}

/// `spillway calc`'s mean wait without shedding for 40 ms at 90% with `workers`, as printed:
/// the "without shedding" row's fourth column. `None` when the binary was not built.
fn calc_mean_wait(workers: u32) -> Option<String> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("spillway");
    if !bin.exists() {
        return None;
    }
    let out = std::process::Command::new(&bin)
        .args([
            "calc",
            "--service-time",
            "40ms",
            "--workers",
            &workers.to_string(),
            "--utilisation",
            "90%",
        ])
        .output()
        .expect("spillway calc runs");
    assert!(
        out.status.success(),
        "spillway calc failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.starts_with("without shedding"))
        .unwrap_or_else(|| panic!("no 'without shedding' row in:\n{text}"));
    // Columns: label(18) served(14) utilisation(13) mean wait(12) ...
    let chars: Vec<char> = line.chars().collect();
    Some(
        chars
            .get(45..57)?
            .iter()
            .collect::<String>()
            .trim()
            .to_string(),
    )
}

fn screenshot_dir() -> PathBuf {
    std::env::var_os("SPILLWAY_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots"))
}

#[test]
fn dashboard_and_calculator_in_a_real_browser() {
    let Some(chromium) = find_chromium() else {
        let msg = "chromium is not installed (apt-get install -y chromium); the dashboard's \
                   browser test needs it";
        assert!(!in_ci(), "{msg}: CI must install it (.ci/run)");
        eprintln!("SKIPPED dashboard_and_calculator_in_a_real_browser: {msg}");
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let up = rt.block_on(slow_upstream());
    let admin_cfg = AdminConfig {
        token: Some(TOKEN.into()),
        ..AdminConfig::default()
    };
    let s = rt.block_on(stack(&config(up), admin_cfg));
    let admin = s.admin;
    let shots = screenshot_dir();

    let mut b = Browser::launch(&chromium, 1440, 1000).expect("chromium starts and attaches");

    // 1. The dashboard loads and receives samples.
    b.goto(&format!("http://{admin}/"))
        .expect("dashboard loads");
    b.wait_for(
        "document.title.includes('Spillway')",
        Duration::from_secs(5),
    )
    .expect("the dashboard's HTML");
    b.wait_for(
        "window.spillwayDashboard && spillwayDashboard.samples.length >= 2",
        Duration::from_secs(15),
    )
    .expect("samples arrive from /api/series");

    // 2. Under ~10x overload the charts keep updating and the page stays live.
    let stop = Arc::new(AtomicBool::new(false));
    let sent = spawn_load(&rt, s.proxy_addr(), Arc::clone(&stop));
    b.wait_for(
        "(() => { const s = spillwayDashboard.samples.at(-1); return s.offered > 100 && s.refused > 0 && s.goodput > 0; })()",
        Duration::from_secs(30),
    )
    .expect("the surge shows: offered > 100 req/s, refusals and goodput");
    let draws = |b: &mut Browser| -> u64 {
        b.eval("Number(document.getElementById('chart-load').dataset.draws || 0)")
            .expect("draw count")
            .as_u64()
            .unwrap_or(0)
    };
    let before = draws(&mut b);
    let last_t = b.eval("spillwayDashboard.samples.at(-1).t").expect("t");
    b.wait_for(
        &format!("spillwayDashboard.samples.at(-1).t > {last_t} + 2500 && Number(document.getElementById('chart-load').dataset.draws) >= {}", before + 3),
        Duration::from_secs(15),
    )
    .expect("the load chart redraws with new samples while load runs");
    // A little more of the surge makes a readable picture.
    std::thread::sleep(Duration::from_secs(12));
    let live = b
        .eval("document.getElementById('freshness').dataset.state")
        .expect("freshness");
    assert_eq!(
        live, "live",
        "the page kept up with 1 s polls under overload"
    );
    let polls = b
        .eval("[spillwayDashboard.polls, spillwayDashboard.failures]")
        .expect("poll counts");
    eprintln!("page polls so far [made, failed]: {polls}");
    let points = b
        .eval("Number(document.getElementById('chart-load').dataset.points)")
        .expect("points");
    assert!(
        points.as_u64().unwrap_or(0) > 10,
        "the load chart has drawn lines: {points}"
    );
    let latest = b
        .eval("spillwayDashboard.samples.at(-1)")
        .expect("latest sample");
    let offered = latest["offered"].as_f64().unwrap_or(0.0);
    let goodput = latest["goodput"].as_f64().unwrap_or(0.0);
    eprintln!(
        "under load: offered {offered:.0} req/s, goodput {goodput:.0} req/s, refused {:.0} req/s, limit {}, sent {}",
        latest["refused"].as_f64().unwrap_or(0.0),
        latest["limit"],
        sent.load(Ordering::Relaxed)
    );
    assert!(
        offered > 5.0 * goodput,
        "about 10x overload: offered {offered} vs goodput {goodput}"
    );
    b.screenshot(&shots.join("dashboard-overload.png"))
        .expect("dashboard screenshot");

    // 3. The degradation switch: refused without the token, applied with it.
    let checked = b
        .eval("document.getElementById('degradation-switch').checked")
        .expect("switch");
    assert_eq!(checked, true, "degradation starts allowed");
    b.eval("delete document.getElementById('degradation-message').dataset.result; document.getElementById('degradation-switch').click(); true")
        .expect("click");
    b.wait_for(
        "document.getElementById('degradation-message').dataset.result === 'error'",
        Duration::from_secs(10),
    )
    .expect("without the token the admin API refuses");
    let msg = b
        .eval("document.getElementById('degradation-message').textContent")
        .expect("msg");
    assert!(
        msg.as_str().unwrap_or("").contains("token"),
        "the page says a token is needed: {msg}"
    );
    assert_eq!(
        b.eval("document.getElementById('degradation-switch').checked")
            .expect("switch"),
        true
    );
    let status = rt.block_on(s.admin_get("/status")).json();
    assert_eq!(
        status["degradation_all_off"], false,
        "nothing changed without the token"
    );

    b.eval(&format!(
        "(() => {{ const t = document.getElementById('token'); t.value = {}; t.dispatchEvent(new Event('change')); return true; }})()",
        json!(TOKEN)
    ))
    .expect("type the token");
    b.eval("document.getElementById('degradation-switch').click(); true")
        .expect("click");
    b.wait_for(
        "document.getElementById('degradation-message').dataset.result === 'off'",
        Duration::from_secs(10),
    )
    .expect("with the token the switch is applied");
    let status = rt.block_on(s.admin_get("/status")).json();
    assert_eq!(
        status["degradation_all_off"], true,
        "/status shows degradation off: {status}"
    );
    b.wait_for(
        "spillwayDashboard.samples.at(-1).degradation_all_off === true",
        Duration::from_secs(10),
    )
    .expect("the next samples show it too");
    stop.store(true, Ordering::Relaxed);

    // 4. The calculator shows the reference figures, as `spillway calc` prints them.
    let from_cli = [calc_mean_wait(1), calc_mean_wait(40)];
    let expected: Vec<String> = match from_cli {
        [Some(a), Some(b)] => vec![a, b],
        _ => {
            assert!(
                !in_ci(),
                "the spillway binary was not built next to this test"
            );
            eprintln!("note: target/debug/spillway not built; comparing with the reference text's figures");
            vec!["360 ms".into(), "4.12 ms".into()]
        }
    };
    assert_eq!(expected, ["360 ms", "4.12 ms"], "spillway calc's figures");
    b.goto(&format!("http://{admin}/assets/calc.html"))
        .expect("calculator loads");
    let cell = |id: &str| format!("((document.getElementById('{id}') || {{}}).textContent || '')");
    let one = b
        .wait_for(
            &format!("{} === {}", cell("wait-without"), json!(expected[0])),
            Duration::from_secs(10),
        )
        .and_then(|_| b.eval(&cell("wait-without")));
    assert_eq!(one.expect("1 worker"), json!(expected[0]));
    let refs = b
        .wait_for(
            &format!(
                "{}.length > 0 && {}.length > 0",
                cell("ref-1"),
                cell("ref-40")
            ),
            Duration::from_secs(10),
        )
        .and_then(|_| b.eval(&format!("[{}, {}]", cell("ref-1"), cell("ref-40"))))
        .expect("the reference table");
    assert_eq!(
        refs,
        json!([
            format!("{} of queueing", expected[0]),
            format!("{} of queueing", expected[1])
        ])
    );
    b.eval("(() => { const s = document.getElementById('size'); s.value = '40'; s.dispatchEvent(new Event('input', {bubbles: true})); return true; })()")
        .expect("40 workers");
    if let Err(e) = b.wait_for(
        &format!("{} === {}", cell("wait-without"), json!(expected[1])),
        Duration::from_secs(10),
    ) {
        let why = b.eval("[document.getElementById('calc-error').textContent, spillwayCalc.answers, document.getElementById('size').value]");
        panic!("40 workers: about 4 ms: {e}; page: {why:?}");
    }
    assert_eq!(
        b.eval(&cell("wait-without")).expect("40 workers"),
        json!(expected[1])
    );
    let curves = b.eval("spillwayCalc.last.curves.length").expect("curves");
    assert!(
        curves.as_u64().unwrap_or(0) >= 6,
        "curves for several concurrencies: {curves}"
    );
    b.screenshot(&shots.join("calculator.png"))
        .expect("calculator screenshot");
    eprintln!("screenshots: {}", shots.display());

    drop(b);
    rt.block_on(s.shutdown());
}
