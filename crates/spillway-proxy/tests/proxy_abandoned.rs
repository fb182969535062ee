//! A request whose caller went away while its task still works on it keeps its admission slot
//! and its task's request slot until the task answers (`upstream.hold_abandoned`), bounded by
//! the upstream timeout; with the switch off both are freed when the caller leaves.

mod proxy_support;

use std::time::{Duration, Instant};

use proxy_support::*;
use spillway_proxy::run::Running;

/// What the proxy holds now: admitted requests, and requests in flight to its tasks.
fn held(p: &Running) -> (usize, usize) {
    let s = p.state.status();
    let tasks = s.upstreams.iter().map(|u| u.in_flight).sum::<usize>();
    (s.admission.in_flight, tasks)
}

/// Waits (bounded by `within`) until the proxy holds nothing; how long it took.
async fn until_nothing_held(p: &Running, within: Duration) -> Duration {
    let start = Instant::now();
    while held(p) != (0, 0) {
        assert!(start.elapsed() < within, "still held: {:?}", held(p));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// An HTTP/2 caller gives up on `path` after 100 ms: its stream is reset, the proxy's request
/// future dropped.
async fn give_up_on(p: &Running, path: &str) {
    let gone = tokio::time::timeout(
        Duration::from_millis(100),
        get(&h2_client(), p.addr, path, &[]),
    )
    .await;
    assert!(gone.is_err(), "{path} answered within 100 ms");
}

/// A caller whose 50 ms deadline runs out on `/slow` (0.8 s): answered 504 at once.
async fn deadline_runs_out_on_slow(p: &Running) {
    let deadline = [("x-spillway-deadline-ms", "50")];
    let (s, _, body) = get(&client(), p.addr, "/slow", &deadline).await;
    assert_eq!(s, 504, "{body}");
}

fn config(backend: std::net::SocketAddr, extra: &str) -> String {
    format!("[upstream]\naddresses = [\"{backend}\"]\nrequest_timeout_ms = 2000\n{extra}")
}

#[tokio::test]
async fn a_caller_that_goes_away_leaves_its_slots_held_until_the_task_answers() {
    let b = backend("b").await;
    let p = proxy_toml(&config(b.addr, "")).await;
    // `/slow` answers after 0.8 s; the caller leaves at 0.1 s.
    give_up_on(&p, "/slow").await;
    // Long after the reset reached the proxy (the switched-off proxy below frees the slots
    // within its first milliseconds), the task is still working: both slots are held.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(held(&p), (1, 1), "held while the task works");
    until_nothing_held(&p, Duration::from_secs(10)).await;
    let task = &p.state.status().upstreams[0];
    assert_eq!(task.failures_total, 0, "the task failed nothing: {task:?}");
    assert_eq!(task.throttle_accepts, task.throttle_requests, "{task:?}");
    // `/hang` answers after 30 s: the hold ends at the upstream timeout (2 s from the send).
    give_up_on(&p, "/hang").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(held(&p), (1, 1));
    until_nothing_held(&p, Duration::from_secs(10)).await;
    // The proxy still answers.
    assert_eq!(get(&client(), p.addr, "/", &[]).await.0, 200);
    p.shutdown().await;
}

#[tokio::test]
async fn a_callers_deadline_running_out_leaves_the_slots_held_until_the_task_answers() {
    let b = backend("b").await;
    let p = proxy_toml(&config(b.addr, "")).await;
    deadline_runs_out_on_slow(&p).await;
    // Answered at ~50 ms; the task works until ~0.8 s.
    assert_eq!(held(&p), (1, 1), "held after the caller's 504");
    until_nothing_held(&p, Duration::from_secs(10)).await;
    let task = &p.state.status().upstreams[0];
    assert_eq!(task.failures_total, 0, "{task:?}");
    p.shutdown().await;
}

#[tokio::test]
async fn switched_off_the_slots_are_freed_when_the_caller_goes() {
    let b = backend("b").await;
    let p = proxy_toml(&config(b.addr, "hold_abandoned = false\n")).await;
    give_up_on(&p, "/hang").await;
    // Freed when the reset arrives, long before the 2 s upstream timeout.
    let took = until_nothing_held(&p, Duration::from_millis(1500)).await;
    eprintln!("freed {took:?} after the caller left");
    deadline_runs_out_on_slow(&p).await;
    assert_eq!(held(&p), (0, 0), "freed with the 504");
    p.shutdown().await;
}
