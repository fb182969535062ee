//! Memory of requests held in a stall, against a real `spillway proxy` process (issue 29): an
//! upstream that accepts and never answers, a fixed admission limit far above the load so every
//! request goes upstream and waits there, and `listen.max_requests_in_progress` below the
//! load. What must hold: the proxy's RSS grows by a bounded amount per held request (the
//! buffers a waiting request's connections keep are let go of), and past the budget requests
//! are answered 503 at once (`requests_in_progress`) instead of being held.
//!
//! The bounds are generous (a debug build measured ~8 kB per held request, and ~3.4 kB per
//! refused one whose connection stays open; bench/stall-memory.py has the figures for a
//! release build): they catch a buffer of 8 KiB or more held per request again, not noise.
//! Loopback only; every wait has a deadline; the proxy is killed on drop.
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Accepts connections and never answers; returns its port and how many it accepted. The
/// thread (and the connections it holds) ends with the test process.
fn stalled_upstream() -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind the stalled upstream");
    let port = l.local_addr().expect("address").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    let held = Arc::new(Mutex::new(Vec::new()));
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            held.lock().expect("held").push(s);
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
    (port, accepted)
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// `n` connections, each with one request sent and left waiting.
fn send(data: u16, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = common::connect(common::local(data)).expect("connect to the proxy");
            s.write_all(b"GET /x HTTP/1.1\r\nHost: stall\r\n\r\n")
                .expect("send");
            s
        })
        .collect()
}

/// Waits until `n` requests reached the upstream, then for the connections' timers to let
/// their idle buffers go (every quarter of the shortest client timeout: 0.5 s by default).
fn reach(accepted: &AtomicUsize, n: usize) {
    common::wait_for(
        &format!("{n} requests at the upstream"),
        Duration::from_secs(60),
        || (accepted.load(Ordering::Relaxed) >= n).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(2));
}

#[test]
fn held_requests_cost_bounded_memory_and_past_the_budget_are_refused_at_once() {
    // Open files: this process holds a client and an accepted upstream socket per held request
    // and a client socket per refused one; the proxy a client and an upstream socket per held
    // request and a client socket per refused one. 1,000 held and 1,000 refused need ~3,300
    // descriptors in each process; where the hard limit is lower, the test runs smaller.
    let limit = common::raise_open_files();
    let room = usize::try_from(limit.saturating_sub(300) / 3).unwrap_or(usize::MAX);
    assert!(
        room >= 200,
        "the open-file limit ({limit}) leaves room for {room} held requests; this test needs \
         at least 200 (raise `ulimit -Hn`)"
    );
    let (warm, held_n, over_n) = (
        room.min(1_000) / 5,
        room.min(1_000) * 4 / 5,
        room.min(1_000),
    );
    let dir = common::temp_dir("stall-memory");
    let (data, admin) = (common::free_port(), common::free_port());
    let (up, accepted) = stalled_upstream();
    let cfg = dir.join("proxy.toml");
    std::fs::write(
        &cfg,
        format!(
            "[listen]\naddress = \"127.0.0.1:{data}\"\nmax_requests_in_progress = {}\n\
             [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [upstream]\naddresses = [\"127.0.0.1:{up}\"]\nrequest_timeout_ms = 300000\n\
             max_requests_per_task = 100000\n\
             [upstream.throttle]\nmin_requests_per_sec = 1000000.0\n\
             [admission.limit]\nalgorithm = \"fixed\"\nlimit = 100000\n",
            warm + held_n
        ),
    )
    .expect("write the config");
    let proxy = common::proxy(&cfg, data);
    std::thread::sleep(Duration::from_millis(500));
    let pid = proxy.pid();

    let mut open = send(data, warm);
    reach(&accepted, warm);
    let warm_kb = rss_kb(pid);
    open.extend(send(data, held_n));
    reach(&accepted, warm + held_n);
    let held = rss_kb(pid);
    let per_held = held.saturating_sub(warm_kb) as f64 / held_n as f64;

    // Past the budget: 503 at once, never sent upstream.
    let started = Instant::now();
    let mut over = send(data, over_n);
    for s in &mut over {
        let (status, head, _) = common::read_response(s).expect("an answer, not a hang");
        assert_eq!(status, 503, "{head}");
        assert!(
            head.contains("x-spillway-reason: requests_in_progress"),
            "{head}"
        );
    }
    let took = started.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let refused = rss_kb(pid);
    let per_refused = refused.saturating_sub(held) as f64 / over_n as f64;
    assert_eq!(
        accepted.load(Ordering::Relaxed),
        warm + held_n,
        "no refused request reached the upstream"
    );
    eprintln!(
        "RSS {warm_kb} kB with {warm} held, {held} kB with {} held ({per_held:.2} kB each); \
         {over_n} refused in {:.2} s, {refused} kB with their connections open \
         ({per_refused:.2} kB each)",
        warm + held_n,
        took.as_secs_f64()
    );
    assert!(
        per_held < 16.0,
        "{per_held:.2} kB of RSS per held request (a buffer held per request again?)"
    );
    assert!(
        per_refused < 8.0,
        "{per_refused:.2} kB of RSS per refused request"
    );

    // The refusals are counted.
    let mut s = common::connect(common::local(admin)).expect("admin");
    s.write_all(b"GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .expect("ask");
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    let compact: String = body.split_whitespace().collect();
    assert!(
        compact.contains(&format!("\"requests_in_progress\":{over_n}")),
        "{body}"
    );
    drop((open, over));
}
