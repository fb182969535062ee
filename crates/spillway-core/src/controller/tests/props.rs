//! Property tests: random operation sequences never leak a slot or overfill the queue, and
//! shedding is ordered by criticality.

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone)]
enum Op {
    Admit {
        c: u8,
        cont: bool,
        deadline_ms: Option<u8>,
        attempt: u8,
    },
    DropPermit(u8),
    Cancel(u8),
    Expire(u8),
    Poll(u8),
    Advance(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, any::<bool>(), proptest::option::of(0u8..200), 1u8..6).prop_map(
            |(c, cont, deadline_ms, attempt)| Op::Admit { c, cont, deadline_ms, attempt }
        ),
        3 => any::<u8>().prop_map(Op::DropPermit),
        1 => any::<u8>().prop_map(Op::Cancel),
        1 => any::<u8>().prop_map(Op::Expire),
        2 => any::<u8>().prop_map(Op::Poll),
        1 => (0u8..120).prop_map(Op::Advance),
    ]
}

fn discipline() -> impl Strategy<Value = QueueDiscipline> {
    prop_oneof![
        Just(QueueDiscipline::Fifo),
        Just(QueueDiscipline::adaptive_lifo()),
        Just(QueueDiscipline::codel()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// After any sequence of admit / drop / cancel / expire / poll / time steps: in-flight never
    /// exceeds the limit, the queue never exceeds its bound, and once every permit and waiter
    /// is dropped both return to 0.
    #[test]
    fn every_permit_is_released(
        limit in 1usize..6,
        cap in 0usize..5,
        disc in discipline(),
        shed in any::<bool>(),
        ops in proptest::collection::vec(op(), 0..120),
    ) {
        let mut cfg = config(limit, cap);
        cfg.queue.discipline = disc;
        cfg.queue.max_wait = 100 * MS;
        if shed {
            cfg.shed = ShedConfig::default();
        }
        let (ctl, clock) = controller(cfg);
        let waker = noop();
        let mut permits: Vec<Permit> = Vec::new();
        let mut waiters: Vec<QueuedAdmission> = Vec::new();
        let pick = |i: u8, n: usize| usize::from(i) % n;
        for op in ops {
            match op {
                Op::Admit { c, cont, deadline_ms, attempt } => {
                    let r = AdmissionRequest {
                        continuation: cont,
                        deadline: deadline_ms.map(|ms| ctl.now() + u32::from(ms) * MS),
                        attempt: u32::from(attempt),
                        ..req(Criticality::ALL[usize::from(c)])
                    };
                    match ctl.admit(&r) {
                        Admission::Admitted(p) => permits.push(p),
                        Admission::Queued(q) => waiters.push(q),
                        Admission::Refused(_) => {}
                    }
                }
                Op::DropPermit(i) if !permits.is_empty() => {
                    let n = permits.len();
                    drop(permits.swap_remove(pick(i, n)));
                }
                Op::Cancel(i) if !waiters.is_empty() => {
                    let n = waiters.len();
                    drop(waiters.swap_remove(pick(i, n)));
                }
                Op::Expire(i) if !waiters.is_empty() => {
                    let n = waiters.len();
                    let _ = waiters.swap_remove(pick(i, n)).expire();
                }
                Op::Poll(i) if !waiters.is_empty() => {
                    let n = waiters.len();
                    let k = pick(i, n);
                    if let Poll::Ready(r) = poll(&mut waiters[k], &waker) {
                        drop(waiters.swap_remove(k));
                        if let Ok(p) = r {
                            permits.push(p);
                        }
                    }
                }
                Op::Advance(ms) => clock.advance(u32::from(ms) * MS),
                _ => {}
            }
            let snap = ctl.snapshot();
            prop_assert!(snap.in_flight <= limit, "{snap:?}");
            prop_assert!(snap.queued <= cap, "{snap:?}");
            prop_assert!(snap.queued <= waiters.len());
        }
        drop(permits);
        drop(waiters);
        let snap = ctl.snapshot();
        prop_assert_eq!(snap.in_flight, 0);
        prop_assert_eq!(snap.queued, 0);
        prop_assert_eq!(snap.in_flight_by_criticality, PerCriticality([0; Criticality::COUNT]));
    }

    /// For any utilisation and draw, the levels shed form a prefix from SHEDDABLE up: a level is
    /// never shed while a lower one is admitted.
    #[test]
    fn shedding_respects_criticality(u in 0.0f64..1.5, draw in 0.0f64..1.0) {
        let mut cfg = config(1000, 0);
        cfg.shed = ShedConfig::default();
        let clock = ManualClock::new();
        let signal = Arc::new(ManualSignal::new("cpu"));
        let ctl = AdmissionController::new(cfg, Arc::new(clock))
            .expect("valid")
            .with_random(Arc::new(FixedRandom(draw)))
            .with_signal(signal.clone());
        signal.set(u);
        let shed: Vec<bool> = Criticality::ALL
            .iter()
            .map(|c| matches!(
                ctl.admit(&req(*c)),
                Admission::Refused(Refusal { reason: RefusalReason::Shed, .. })
            ))
            .collect();
        for w in shed.windows(2) {
            prop_assert!(w[0] || !w[1], "u={u} draw={draw} shed={shed:?}");
        }
        prop_assert!(!shed[CriticalPlus.index()], "CRITICAL_PLUS has no shed threshold");
    }
}
