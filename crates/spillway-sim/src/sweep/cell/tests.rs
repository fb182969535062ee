//! The backend model's timer, wake delay and overhead (`ModelConfig`'s
//! `backend_timer_tick_ms`, `backend_wake_ms`, `overhead_ms`): what `bench/robustness.sh`
//! sets to simulate its real backend on a shared host, against the exact model; and when a
//! closed loop's service times are drawn.

use super::super::tests::sweep;
use super::*;
use crate::sweep::config::{ArrivalKind, BackendKind, CellSpec, Dist};

/// One worker, constant service, offered twice what it serves: it is busy throughout.
fn busy_cell(mean_ms: f64) -> CellSpec {
    CellSpec {
        workers: 1,
        mean_ms,
        dist: Dist::Const,
        timeout_x: 20.0,
        offered: 2.0,
        critical_share: 0.0,
        arrivals: ArrivalKind::Poisson,
        backend: BackendKind::Plain,
        max_requests: 1e9,
        min_duration_s: 4.0,
        max_duration_s: 4.0,
    }
}

fn started(model: &str, mean_ms: f64) -> f64 {
    let sw = sweep(&format!("[model]\n{model}"));
    run_cell(&busy_cell(mean_ms), &sw, false)
        .expect("cell runs")
        .backend_started as f64
}

/// A 1 ms tick rounds each sleep up, but the worker repays the overshoot on its next request
/// (as `spillway backend` does), so a busy worker serves as many requests as an exact one —
/// also when the service is shorter than a tick.
#[test]
fn the_timer_tick_keeps_the_capacity() {
    for mean in [2.5, 0.4, 7.3] {
        let exact = started("", mean);
        let ticked = started("backend_timer_tick_ms = 1.0", mean);
        assert!(
            (ticked / exact - 1.0).abs() < 0.02,
            "mean {mean} ms: {ticked} started on the timer, {exact} exact"
        );
    }
}

/// A late wake is owed too, but only up to 3 ms: a wake delay of 4 ms on average costs a
/// 10 ms service some capacity (the part past what can be repaid), never more than the whole
/// delay.
#[test]
fn a_late_wake_costs_what_cannot_be_repaid() {
    let exact = started("", 10.0);
    let late = started("backend_timer_tick_ms = 1.0\nbackend_wake_ms = 4.0", 10.0);
    let ratio = late / exact;
    assert!(
        ratio < 0.95 && ratio > 10.0 / 14.5,
        "{late} started with 4 ms late wakes, {exact} exact: ratio {ratio}"
    );
}

/// Time spent outside the backend and the proxy's queue comes off the client's deadline: a
/// cell with a little headroom loses successes it had with none.
#[test]
fn overhead_comes_off_the_deadline() {
    let sw0 = sweep("");
    let sw5 = sweep("[model]\noverhead_ms = 5.0");
    let mut spec = busy_cell(10.0);
    spec.workers = 4;
    spec.offered = 0.7;
    spec.timeout_x = 3.0;
    spec.dist = Dist::Exp;
    let none = run_cell(&spec, &sw0, false).expect("runs").success();
    let some = run_cell(&spec, &sw5, false).expect("runs").success();
    assert!(
        some < none - 0.02,
        "success {some} with 5 ms outside, {none} without"
    );
}

/// In a closed loop a client sends again as soon as its request ends, so runs that end
/// requests differently offer different requests, and service times drawn on arrival pair
/// nothing; drawn when a worker starts a request, runs whose workers are never idle serve the
/// same work. HAProxy-tuned (cap = workers) skips queued requests whose clients left — here
/// SHEDDABLE behind CRITICAL — and the unprotected backend serves them: the two offer
/// different requests, yet start the same (up to what the runs leave open at the window's
/// end). Drawn on arrival, the tuned run started 6 % fewer (1,602 against 1,702 over 4 s):
/// which requests of a bimodal service reached the backend, not the queue, decided it.
#[test]
fn closed_loop_runs_with_busy_workers_serve_the_same_work() {
    let sw = sweep("");
    let mut spec = busy_cell(10.0);
    spec.workers = 4;
    spec.dist = Dist::Bimodal;
    spec.timeout_x = 10.0;
    spec.critical_share = 0.6;
    spec.arrivals = ArrivalKind::Closed(64);
    let tuned = run_mode(&spec, &sw, Mode::Tuned).expect("runs");
    let plain = run_mode(&spec, &sw, Mode::Unprotected).expect("runs");
    assert_ne!(
        tuned.offered, plain.offered,
        "the runs must offer different requests for the test to say anything"
    );
    let (t, p) = (tuned.backend_started as f64, plain.backend_started as f64);
    assert!(
        (t / p - 1.0).abs() < 0.02,
        "started {t} behind the tuned queue, {p} without it"
    );
}

/// The proxy's client throttle is in the model (`throttle.rs`): at a 1000-worker, 500 ms
/// cold start, whose requests in flight outnumber its answers for the first second, it refuses
/// nothing (a throttle counting requests in flight as refusals refused 433 of this cell's 12 s
/// and the run served a third of what the unprotected one did).
#[test]
fn the_proxys_throttle_refuses_nothing_at_a_large_cold_start() {
    let spec = CellSpec {
        workers: 1000,
        mean_ms: 500.0,
        dist: Dist::Exp,
        timeout_x: 5.0,
        offered: 0.9,
        critical_share: 0.6,
        arrivals: ArrivalKind::Poisson,
        backend: BackendKind::Plain,
        max_requests: 1e9,
        min_duration_s: 3.0,
        max_duration_s: 3.0,
    };
    let f = run_cell(&spec, &sweep(""), true).expect("cell runs");
    assert!(f.ok > 3_000, "served {}", f.ok);
    assert_eq!(
        f.refused_by_reason.get("throttled"),
        None,
        "{:?}",
        f.refused_by_reason
    );
}
