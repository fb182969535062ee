//! Sustained CRITICAL overload (`queue/sustained.rs`): a burst of CRITICAL work waits for its
//! callers' deadlines, but once CRITICAL has been refused for overload for a second on end,
//! CRITICAL waits at most the max wait and is refused on arrival when it would not start
//! within it — no standing queue, refusals at once.

use std::collections::VecDeque;

use super::*;

const MAX_WAIT: Duration = Duration::from_millis(100);
/// A slot frees every `STEP` (limit 2, 50 ms of service).
const STEP: Duration = Duration::from_millis(25);

/// Limit 2 (no headroom), a queue of 200, 100 ms max wait, FIFO; service learnt as 50 ms and
/// both slots held.
fn saturated() -> (AdmissionController, ManualClock, VecDeque<Permit>) {
    let mut cfg = config(2, 200);
    cfg.queue.max_wait = MAX_WAIT;
    cfg.headroom = PerCriticality([1.0; Criticality::COUNT]);
    let (ctl, clock) = controller(cfg);
    let warm = admitted(ctl.admit(&req(Critical)));
    clock.advance(50 * MS);
    drop(warm);
    let held = VecDeque::from(vec![
        admitted(ctl.admit(&req(Critical))),
        admitted(ctl.admit(&req(Critical))),
    ]);
    (ctl, clock, held)
}

/// What happened to the CRITICAL requests offered over some steps.
#[derive(Debug, Default)]
struct Tally {
    /// How long each granted request waited.
    waits: Vec<Duration>,
    /// Refused on arrival.
    at_once: usize,
    /// Refused after waiting.
    after_wait: usize,
}

/// Offered `per_step` CRITICAL arrivals with a deadline `deadline` away every `STEP`, half a
/// step after a slot frees; each request holds its slot two steps (50 ms).
struct Drive {
    ctl: AdmissionController,
    clock: ManualClock,
    running: VecDeque<Permit>,
    waiting: Vec<(Instant, QueuedAdmission)>,
}

impl Drive {
    fn steps(&mut self, n: usize, per_step: usize, deadline: Duration) -> Tally {
        let mut t = Tally::default();
        for _ in 0..n {
            self.clock.advance(STEP / 2);
            for _ in 0..per_step {
                let now = self.ctl.now();
                match self.ctl.admit(&AdmissionRequest {
                    deadline: Some(now + deadline),
                    ..req(Critical)
                }) {
                    Admission::Admitted(p) => {
                        t.waits.push(Duration::ZERO);
                        self.running.push_back(p);
                    }
                    Admission::Queued(q) => self.waiting.push((now, q)),
                    Admission::Refused(_) => t.at_once += 1,
                }
            }
            self.clock.advance(STEP / 2);
            drop(self.running.pop_front());
            let now = self.ctl.now();
            let mut still = Vec::new();
            for (at, mut q) in self.waiting.drain(..) {
                match poll(&mut q, &noop()) {
                    Poll::Ready(Ok(p)) => {
                        t.waits.push(now - at);
                        self.running.push_back(p);
                    }
                    Poll::Ready(Err(_)) => t.after_wait += 1,
                    Poll::Pending => still.push((at, q)),
                }
            }
            self.waiting = still;
        }
        t
    }
}

#[test]
fn a_critical_burst_waits_for_its_deadline_and_sustained_overload_keeps_no_standing_queue() {
    let (ctl, clock, running) = saturated();
    let mut d = Drive {
        ctl,
        clock,
        running,
        waiting: Vec::new(),
    };
    let deadline = Duration::from_secs(1);
    // Twice the capacity for half a second: a burst. Nothing refused; the queue grows past the
    // max wait and its callers' deadlines absorb it.
    let burst = d.steps(20, 2, deadline);
    assert_eq!((burst.at_once, burst.after_wait), (0, 0), "{burst:?}");
    assert!(burst.waits.iter().any(|w| *w > MAX_WAIT), "{burst:?}");
    // It goes on: the queue reaches its callers' deadlines (about 40 steps), arrivals that
    // would not start by theirs wait out the max wait and are refused, and once CRITICAL has
    // been refused for overload for a second on end the overload is sustained: the waiters
    // past the max wait are let go.
    let window = SUSTAINED_AFTER;
    let steps = (window.as_millis() / STEP.as_millis()) as usize;
    let turn = d.steps(2 * steps + 20, 2, deadline);
    assert!(turn.after_wait > 0, "{turn:?}");
    // Sustained: every request is served within the max wait (plus the half step a request
    // arrives before a slot frees) or refused on arrival; none waits in vain.
    let steady = d.steps(80, 2, deadline);
    assert_eq!(steady.after_wait, 0, "{steady:?}");
    assert!(steady.at_once >= 70, "{steady:?}");
    assert!(steady.waits.len() >= 78, "the slots stay busy: {steady:?}");
    assert!(
        steady.waits.iter().all(|w| *w <= MAX_WAIT),
        "no standing queue: {steady:?}"
    );
    // The overload ends and the queue drains; a window later, a burst waits for its deadline
    // again (the deadline less the cautious service time: its requests held their slots
    // 37.5 or 50 ms), past the max wait.
    let _drain = d.steps(steps + 10, 0, deadline);
    assert_eq!(d.ctl.snapshot().queued, 0);
    let _ahead = d.steps(4, 3, deadline);
    let now = d.ctl.now();
    let q = queued(d.ctl.admit(&AdmissionRequest {
        deadline: Some(now + deadline),
        ..req(Critical)
    }));
    let budget = q.give_up_at() - now;
    assert!(budget > 900 * MS && budget <= 962 * MS, "{budget:?}");
}

#[test]
fn the_measured_drain_sets_the_estimate_when_slots_free_slower_than_littles_law_says() {
    let (ctl, clock, running) = saturated();
    let mut d = Drive {
        ctl,
        clock,
        running,
        waiting: Vec::new(),
    };
    let deadline = Duration::from_secs(1);
    // Sustained overload at twice the capacity.
    let window = SUSTAINED_AFTER;
    let steps = (window.as_millis() / STEP.as_millis()) as usize;
    let _ = d.steps(2 * steps + 40, 2, deadline);
    // The service now takes 100 ms but the EWMA still says about 50: a slot frees every
    // 50 ms where Little's law on the EWMA says 25. Held permits are released every other step.
    let mut tally = Tally::default();
    for i in 0..80 {
        d.clock.advance(STEP / 2);
        for _ in 0..2 {
            let now = d.ctl.now();
            match d.ctl.admit(&AdmissionRequest {
                deadline: Some(now + deadline),
                ..req(Critical)
            }) {
                Admission::Admitted(p) => d.running.push_back(p),
                Admission::Queued(q) => d.waiting.push((now, q)),
                Admission::Refused(_) => tally.at_once += 1,
            }
        }
        d.clock.advance(STEP / 2);
        if i % 2 == 1 {
            drop(d.running.pop_front());
        }
        let mut still = Vec::new();
        for (at, mut q) in d.waiting.drain(..) {
            match poll(&mut q, &noop()) {
                Poll::Ready(Ok(p)) => {
                    tally.waits.push(d.ctl.now() - at);
                    d.running.push_back(p);
                }
                Poll::Ready(Err(_)) => tally.after_wait += 1,
                Poll::Pending => still.push((at, q)),
            }
        }
        d.waiting = still;
    }
    // After the first few slow slots teach the drain, arrivals are refused at once rather than
    // queued to time out: few refused after a wait, against 40 served.
    assert!(tally.waits.len() >= 38, "{tally:?}");
    assert!(tally.after_wait <= 6, "{tally:?}");
}

/// Limit 2 with both slots held (`saturated`), `served` CRITICAL requests admitted and
/// released inside one CRITICAL overload episode that refuses `refusals` of them for overload
/// over 1.1 s, then four CRITICAL waiters with a far deadline.
/// Returns the controller, the held slots and the waiters (dropping a waiter leaves the queue).
fn episode_then_queue(
    served: usize,
    refusals: usize,
) -> (AdmissionController, Vec<Permit>, Vec<QueuedAdmission>) {
    let (ctl, clock, running) = saturated();
    drop(running);
    let refuse = |ctl: &AdmissionController| {
        let _ = ctl
            .inner
            .refuse(RefusalReason::QueueTimeout, Critical, false, ctl.now());
    };
    refuse(&ctl);
    for _ in 0..served {
        drop(admitted(ctl.admit(&req(Critical))));
    }
    for _ in 1..refusals {
        clock.advance(1100 * MS / u32::try_from(refusals - 1).unwrap());
        refuse(&ctl);
    }
    assert!(ctl.inner.episode.is_sustained(Critical, ctl.now()));
    let held = vec![
        admitted(ctl.admit(&req(Critical))),
        admitted(ctl.admit(&req(Critical))),
    ];
    let far = ctl.now() + Duration::from_secs(1);
    let waiting = (0..4)
        .map(|_| {
            queued(ctl.admit(&AdmissionRequest {
                deadline: Some(far),
                ..req(Critical)
            }))
        })
        .collect();
    (ctl, held, waiting)
}

/// How long a CRITICAL arrival with 1 s to its deadline may wait after
/// [`episode_then_queue`]`(200, refusals)`.
fn patience_after(refusals: usize) -> Duration {
    let (ctl, _held, _waiting) = episode_then_queue(200, refusals);
    let now = ctl.now();
    let q = queued(ctl.admit(&AdmissionRequest {
        deadline: Some(now + Duration::from_secs(1)),
        ..req(Critical)
    }));
    q.give_up_at() - now
}

#[test]
fn a_trickle_of_critical_refusals_does_not_latch_sustained_overload() {
    // 6 refusals among 200 admissions over a second: CRITICAL still waits for its deadline,
    // as in a burst.
    let waits = patience_after(6);
    assert!(waits > MAX_WAIT, "{waits:?}");
}

#[test]
fn steady_critical_refusals_latch_sustained_overload() {
    // 30 refusals among 200 admissions (one in eight at least): sustained, CRITICAL waits at
    // most the max wait.
    let waits = patience_after(30);
    assert!(waits <= MAX_WAIT, "{waits:?}");
}
