//! Memory of requests held in a stall, against a real `spillway proxy` process (issue 29): an
//! upstream that accepts and never answers, a fixed admission limit far above the load so every
//! request goes upstream and waits there, and `listen.max_requests_in_progress` below the
//! load. What must hold: the proxy's RSS grows by a bounded amount per held request (the
//! buffers a waiting request's connections keep are let go of), and past the budget requests
//! are answered 503 at once (`requests_in_progress`) instead of being held. The same for
//! HTTP/2: streams held 100 to a connection cost a bounded amount each.
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

/// An upstream that accepts connections and never answers. Dropping it closes what it
/// accepted (the accepting thread and its listener end with the test process), so a test's
/// descriptors are not left to the next.
struct StalledUpstream {
    port: u16,
    accepted: Arc<AtomicUsize>,
    held: Arc<Mutex<Vec<TcpStream>>>,
}

impl Drop for StalledUpstream {
    fn drop(&mut self) {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

fn stalled_upstream() -> StalledUpstream {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind the stalled upstream");
    let port = l.local_addr().expect("address").port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let held = Arc::new(Mutex::new(Vec::new()));
    let (count, keep) = (Arc::clone(&accepted), Arc::clone(&held));
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            keep.lock().unwrap_or_else(|e| e.into_inner()).push(s);
            count.fetch_add(1, Ordering::Relaxed);
        }
    });
    StalledUpstream {
        port,
        accepted,
        held,
    }
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
    arrived(accepted, n);
    std::thread::sleep(Duration::from_secs(2));
}

/// Waits until `n` requests reached the upstream.
fn arrived(accepted: &AtomicUsize, n: usize) {
    common::wait_for(
        &format!("{n} requests at the upstream"),
        Duration::from_secs(60),
        || (accepted.load(Ordering::Relaxed) >= n).then_some(()),
    );
}

/// `n` more requests held, sent 100 at a time, each batch waited for at the upstream before
/// the next: the upstream's accept backlog (128) then never overflows on a busy host, where a
/// dropped SYN would be retried after a second and more, and the proxy's connect could give up.
fn hold(data: u16, accepted: &AtomicUsize, n: usize) -> Vec<TcpStream> {
    let base = accepted.load(Ordering::Relaxed);
    let mut held = Vec::with_capacity(n);
    while held.len() < n {
        held.extend(send(data, (n - held.len()).min(100)));
        arrived(accepted, base + held.len());
    }
    held
}

/// A `spillway proxy` in front of upstream port `up` with a fixed admission limit far above the
/// load (every request goes upstream and waits there) and `budget` requests in progress at
/// most; returns it with its data and admin ports (and the directory holding its config).
fn stall_proxy(up: u16, budget: usize, name: &str) -> (common::Proc, u16, u16, std::path::PathBuf) {
    let dir = common::temp_dir(name);
    let (data, admin) = (common::free_port(), common::free_port());
    let cfg = dir.join("proxy.toml");
    std::fs::write(
        &cfg,
        format!(
            "[listen]\naddress = \"127.0.0.1:{data}\"\nmax_requests_in_progress = {budget}\n\
             [admin]\nlisten = \"127.0.0.1:{admin}\"\n\
             [upstream]\naddresses = [\"127.0.0.1:{up}\"]\nrequest_timeout_ms = 300000\n\
             connect_timeout_ms = 10000\n\
             max_requests_per_task = 100000\n\
             [upstream.throttle]\nmin_requests_per_sec = 1000000.0\n\
             [admission.limit]\nalgorithm = \"fixed\"\nlimit = 100000\n"
        ),
    )
    .expect("write the config");
    let proxy = common::proxy(&cfg, data);
    std::thread::sleep(Duration::from_millis(500));
    (proxy, data, admin, dir)
}

/// The tests take turns: each sizes itself to the open-file limit as if it were alone.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn held_requests_cost_bounded_memory_and_past_the_budget_are_refused_at_once() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
    let upstream = stalled_upstream();
    let (up, accepted) = (upstream.port, &*upstream.accepted);
    let (proxy, data, admin, _dir) = stall_proxy(up, warm + held_n, "stall-memory");
    let pid = proxy.pid();

    let mut open = hold(data, accepted, warm);
    reach(accepted, warm);
    let warm_kb = rss_kb(pid);
    open.extend(hold(data, accepted, held_n));
    reach(accepted, warm + held_n);
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

/// One HTTP/2 frame: 24-bit length, type, flags, stream id (RFC 9113 §4.1).
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("a small frame");
    let mut f = len.to_be_bytes()[1..].to_vec();
    f.extend([kind, flags]);
    f.extend(stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A prior-knowledge h2c connection with `streams` GETs sent and left waiting, the proxy's
/// SETTINGS acknowledged (a healthy connection, not one the proxy may drop for protocol
/// errors). Panics if the proxy answers a stream: in a stall it must not.
fn h2_open(data: u16, streams: u32) -> TcpStream {
    // GET http://stall/x: :method GET and :scheme http from HPACK's static table (RFC 7541
    // appendix A), :path and :authority as literals without indexing, names indexed, no Huffman.
    const HEADERS: &[u8] = b"\x82\x86\x04\x02/x\x01\x05stall";
    let mut s = common::connect(common::local(data)).expect("connect to the proxy");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(h2_frame(4, 0, 0, &[]));
    for i in 0..streams {
        // END_STREAM | END_HEADERS
        out.extend(h2_frame(1, 0x5, 2 * i + 1, HEADERS));
    }
    s.write_all(&out).expect("send the streams");
    loop {
        let mut head = [0u8; 9];
        s.read_exact(&mut head).expect("a frame from the proxy");
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).expect("the frame's payload");
        let (kind, flags) = (head[3], head[4]);
        assert!(
            !matches!(kind, 1 | 3 | 7),
            "the proxy answered in a stall (frame type {kind}: HEADERS, RST_STREAM or GOAWAY)"
        );
        if kind == 4 && flags & 1 == 0 {
            s.write_all(&h2_frame(4, 1, 0, &[])).expect("ack SETTINGS");
            return s;
        }
    }
}

/// Waits until the upstream has accepted at least `n` connections and no more arrive for
/// 1.2 s (the first HTTP/2 requests also open h2c probes to the upstream, which falls back to
/// HTTP/1.1 after 1 s of silence), then for the waiting streams' buffers to be let go of.
fn reach_settled(accepted: &AtomicUsize, n: usize) {
    reach(accepted, n);
    let mut seen = usize::MAX;
    common::wait_for(
        "the upstream's accepts to settle",
        Duration::from_secs(30),
        || {
            let now = accepted.load(Ordering::Relaxed);
            let settled = now == seen;
            seen = now;
            std::thread::sleep(Duration::from_millis(1_150));
            settled.then_some(())
        },
    );
}

/// HTTP/2 streams held in a stall (issue 29): each waiting stream is woken every quarter of the
/// shortest client timeout so that it lets its buffers go as an HTTP/1.1 request does. 100
/// streams per connection; the bound is per held stream and as generous as HTTP/1.1's (a
/// debug build measured 8.7–9.6 kB per stream): it catches an 8 KiB buffer held per stream.
#[test]
fn held_h2_streams_cost_bounded_memory() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const PER_CONN: u32 = 100;
    let limit = common::raise_open_files();
    // Each held stream has an upstream connection in both processes.
    let conns = usize::try_from(limit.saturating_sub(300) / 2).unwrap_or(usize::MAX) / 100;
    assert!(
        conns >= 3,
        "the open-file limit ({limit}) leaves room for {conns} connections of 100 held streams; \
         this test needs 3 (raise `ulimit -Hn`)"
    );
    let (warm, held) = (1, conns.min(10) - 1);
    let upstream = stalled_upstream();
    let (up, accepted) = (upstream.port, &*upstream.accepted);
    let (proxy, data, _admin, _dir) = stall_proxy(up, 4_096, "stall-memory-h2");
    let pid = proxy.pid();

    let mut open: Vec<TcpStream> = (0..warm).map(|_| h2_open(data, PER_CONN)).collect();
    reach_settled(accepted, warm * 100);
    let (warm_kb, warm_up) = (rss_kb(pid), accepted.load(Ordering::Relaxed));
    open.extend((0..held).map(|_| h2_open(data, PER_CONN)));
    reach_settled(accepted, warm_up + held * 100);
    let held_kb = rss_kb(pid);
    let streams = held * 100;
    let per_stream = held_kb.saturating_sub(warm_kb) as f64 / streams as f64;
    eprintln!(
        "RSS {warm_kb} kB with {} streams held, {held_kb} kB with {} ({per_stream:.2} kB a \
         stream); the upstream accepted {}",
        warm * 100,
        (warm + held) * 100,
        accepted.load(Ordering::Relaxed)
    );
    assert!(
        per_stream < 16.0,
        "{per_stream:.2} kB of RSS per held h2 stream (a buffer held per stream again?)"
    );
    drop(open);
}
