//! Property test: strict criticality order under random arrivals, completions and time.

use std::time::Instant;

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Op {
    /// A request of criticality `c` arrives, with a deadline `deadline_ms` away (if any).
    Arrive {
        c: u8,
        cont: bool,
        deadline_ms: Option<u16>,
    },
    /// A running request completes (`dropped`: as a congestion signal).
    Complete { pick: u8, dropped: bool },
    /// Time passes.
    Advance(u8),
    /// A queued request's caller goes away (the future is dropped).
    Cancel { pick: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..4, any::<bool>(), proptest::option::weighted(0.3, 1u16..400)).prop_map(
            |(c, cont, deadline_ms)| Op::Arrive { c, cont, deadline_ms }
        ),
        3 => (any::<u8>(), proptest::bool::weighted(0.1))
            .prop_map(|(pick, dropped)| Op::Complete { pick, dropped }),
        2 => (0u8..60).prop_map(Op::Advance),
        1 => any::<u8>().prop_map(|pick| Op::Cancel { pick }),
    ]
}

fn limit() -> impl Strategy<Value = LimitConfig> {
    prop_oneof![
        (1usize..12).prop_map(|limit| LimitConfig::Fixed(FixedConfig { limit })),
        (1usize..12).prop_map(|initial| LimitConfig::Aimd(AimdConfig {
            initial_limit: initial,
            min_limit: 1,
            max_limit: 16,
            ..AimdConfig::default()
        })),
        // The zero-config policy's limit (the Envoy gradient, slow start from 20): the one the
        // proxy runs, whose cuts leave more in flight than the new limit allows.
        Just(AdmissionConfig::zero_config().limit),
    ]
}

fn discipline() -> impl Strategy<Value = QueueDiscipline> {
    prop_oneof![
        Just(QueueDiscipline::Fifo),
        Just(QueueDiscipline::adaptive_lifo()),
        Just(QueueDiscipline::codel()),
    ]
}

/// What became of one request, by operation index.
#[derive(Debug, Clone, Copy)]
struct Fate {
    c: Criticality,
    arrived: usize,
    granted: Option<usize>,
    refused: Option<(usize, RefusalReason)>,
    /// Clock time of its arrival and of its refusal.
    arrived_at: Instant,
    refused_at: Option<Instant>,
    /// Whether the queue had room when it arrived (a refusal at the door was not for a full
    /// queue).
    room: bool,
}

/// Refusals that are about concurrency or queueing (not the request's own deadline, a
/// customer's quota, shedding by utilisation or its attempts).
fn queueing(reason: RefusalReason) -> bool {
    matches!(
        reason,
        RefusalReason::ConcurrencyLimit | RefusalReason::QueueFull | RefusalReason::QueueTimeout
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// **Strict criticality order.** For every request `r` refused for concurrency or queueing
    /// (`ConcurrencyLimit`, `QueueFull`, `QueueTimeout`) at step `t_r`, having arrived at step
    /// `a_r`: no request `s` of strictly lower criticality that arrived at or before `t_r` is
    /// granted a slot at any step `≥ a_r` — neither while `r` waited nor afterwards from a
    /// queue that `r` left. (Slots held before `r` arrived are not "in its place": running
    /// work is never preempted.) Refusals because a request's own deadline cannot be met
    /// (`DeadlineExceeded`) are its caller's budget, not the order, and are not counted.
    ///
    /// Driven through `AdmissionController` with fixed, AIMD and the zero-config (Envoy
    /// gradient) limits, bounded and half-the-limit queues (so eviction by a more critical
    /// arrival happens), every discipline, deadlines or none, cancelled waiters, and real
    /// service-time
    /// estimates (so early refusals and pushed-back drops happen); a queued request's timer
    /// fires as a caller's would (a poll at or after `give_up_at`), and every waiter is polled
    /// after each step so that a grant or refusal is observed in the step it happened.
    #[test]
    fn never_refused_while_less_critical_work_takes_its_place(
        limit in limit(),
        cap in proptest::option::of(0usize..8),
        disc in discipline(),
        max_wait_ms in 1u64..150,
        ops in proptest::collection::vec(op(), 1..200),
    ) {
        let cfg = AdmissionConfig {
            limit,
            queue: QueueConfig {
                max_len: cap,
                max_wait: Duration::from_millis(max_wait_ms),
                discipline: disc,
            },
            ..config(1, 0)
        };
        // A seeded limit random source: the gradient's jittered windows repeat per case.
        let clock = ManualClock::new();
        let ctl = AdmissionController::with_limit_random(
            cfg,
            Arc::new(clock.clone()),
            Box::new(crate::random::SeededRandom::new(28)),
        )
        .expect("valid config")
        .with_random(Arc::new(FixedRandom(0.5)));
        let waker = noop();
        let mut fates: Vec<Fate> = Vec::new();
        let mut running: Vec<(usize, Permit)> = Vec::new();
        let mut waiting: Vec<(usize, QueuedAdmission)> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Arrive { c, cont, deadline_ms } => {
                    let c = Criticality::ALL[usize::from(c)];
                    let id = fates.len();
                    let snap = ctl.snapshot();
                    fates.push(Fate {
                        c,
                        arrived: step,
                        granted: None,
                        refused: None,
                        arrived_at: ctl.now(),
                        refused_at: None,
                        room: snap.queued < snap.queue_capacity,
                    });
                    let r = AdmissionRequest {
                        continuation: cont,
                        deadline: deadline_ms.map(|ms| ctl.now() + u32::from(ms) * MS),
                        ..req(c)
                    };
                    match ctl.admit(&r) {
                        Admission::Admitted(p) => {
                            fates[id].granted = Some(step);
                            running.push((id, p));
                        }
                        Admission::Queued(q) => waiting.push((id, q)),
                        Admission::Refused(x) => {
                            fates[id].refused = Some((step, x.reason));
                            fates[id].refused_at = Some(ctl.now());
                        }
                    }
                }
                Op::Complete { pick, dropped } if !running.is_empty() => {
                    let n = running.len();
                    let (_, mut p) = running.swap_remove(usize::from(pick) % n);
                    if dropped {
                        p.set_outcome(Outcome::Dropped);
                    }
                    drop(p);
                }
                Op::Advance(ms) => clock.advance(u32::from(ms) * MS),
                Op::Cancel { pick } if !waiting.is_empty() => {
                    let n = waiting.len();
                    drop(waiting.swap_remove(usize::from(pick) % n));
                }
                Op::Complete { .. } | Op::Cancel { .. } => {}
            }
            // Observe every waiter's fate in this step (a poll at or after give_up_at is the
            // caller's timer firing).
            // One waiter's expiry can refuse others already polled: repeat until a whole pass
            // changes nothing.
            loop {
                let before = waiting.len();
                let mut i = 0;
                while i < waiting.len() {
                    match poll(&mut waiting[i].1, &waker) {
                        Poll::Pending => i += 1,
                        Poll::Ready(res) => {
                            let (id, _) = waiting.swap_remove(i);
                            match res {
                                Ok(p) => {
                                    fates[id].granted = Some(step);
                                    running.push((id, p));
                                }
                                Err(x) => {
                                    fates[id].refused = Some((step, x.reason));
                                    fates[id].refused_at = Some(ctl.now());
                                }
                            }
                        }
                    }
                }
                if waiting.len() == before {
                    break;
                }
            }
        }
        for r in &fates {
            let Some((refused_at, reason)) = r.refused else { continue };
            if !queueing(reason) {
                continue;
            }
            for s in fates.iter().filter(|s| s.c < r.c && s.arrived <= refused_at) {
                if let Some(g) = s.granted {
                    prop_assert!(
                        g < r.arrived,
                        "{:?} refused {reason} at step {refused_at} (arrived {}), yet {:?} \
                         (arrived {}) was granted at step {g}",
                        r.c, r.arrived, s.c, s.arrived
                    );
                }
            }
        }
        // **Above a level being shed, no guess refuses.** A sheddable request more critical
        // than one refused for overload within the max wait before (in an earlier step) is
        // first in line for the slots that level gives up: neither CoDel (a `QueueTimeout`
        // before its max wait) nor the standing-queue rule (`QueueFull` at the door with room
        // in the queue) refuses it — they did, and the shed level took its place once the
        // queue had emptied (`spillway demo`: the `good` customer's SHEDDABLE_PLUS while
        // `noisy`'s SHEDDABLE was being shed).
        let max_wait = Duration::from_millis(max_wait_ms);
        let overload = |x: RefusalReason| x.retry_elsewhere_can_help();
        for r in fates.iter().filter(|r| r.c < Critical) {
            let (Some((step, reason)), Some(at)) = (r.refused, r.refused_at) else { continue };
            let guessed = match reason {
                RefusalReason::QueueTimeout => at < r.arrived_at + max_wait,
                RefusalReason::QueueFull => step == r.arrived && r.room,
                _ => false,
            };
            if !guessed {
                continue;
            }
            let shed_below = fates.iter().any(|s| {
                s.c < r.c
                    && s.refused.is_some_and(|(k, x)| k < r.arrived && overload(x))
                    && s.refused_at.is_some_and(|t| t + max_wait >= at)
            });
            prop_assert!(
                !shed_below,
                "{:?} refused {reason} at step {step} ({:?} after arriving at step {}) while a \
                 less critical level was being shed",
                r.c, at - r.arrived_at, r.arrived
            );
        }
        drop(running);
        drop(waiting);
        let snap = ctl.snapshot();
        prop_assert_eq!(snap.in_flight, 0);
        prop_assert_eq!(snap.queued, 0);
    }
}
