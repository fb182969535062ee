use super::*;
use proptest::prelude::*;

const MS: f64 = 1e-3;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn erlang_b_matches_closed_form_for_small_c() {
    for a in [0.0, 0.1, 0.5, 1.0, 3.0, 50.0] {
        // c = 1: B = A/(1+A); c = 2: B = (A²/2)/(1 + A + A²/2).
        let b1 = erlang_b(1, a).unwrap();
        assert!(close(b1, a / (1.0 + a), 1e-14), "c=1 a={a}: {b1}");
        let b2 = erlang_b(2, a).unwrap();
        let want = (a * a / 2.0) / (1.0 + a + a * a / 2.0);
        assert!(close(b2, want, 1e-14), "c=2 a={a}: {b2} vs {want}");
    }
}

#[test]
fn erlang_c_single_worker_is_utilisation() {
    for rho in [0.0, 0.1, 0.5, 0.9, 0.999] {
        let cw = erlang_c(1, rho).unwrap();
        assert!(close(cw, rho, 1e-14), "rho={rho}: {cw}");
    }
}

#[test]
fn erlang_c_two_workers_matches_closed_form() {
    for rho in [0.0, 0.1, 0.5, 0.9, 0.999] {
        let cw = erlang_c(2, 2.0 * rho).unwrap();
        let want = 2.0 * rho * rho / (1.0 + rho);
        assert!(close(cw, want, 1e-13), "rho={rho}: {cw} vs {want}");
    }
}

#[test]
fn reference_single_worker_at_90_percent_waits_360ms() {
    let q = MmcQueue::at_utilisation(1, 40.0 * MS, 0.9).unwrap();
    assert!(
        close(q.mean_wait_secs() / MS, 360.0, 1e-9),
        "{}",
        q.mean_wait_secs()
    );
    assert!(close(q.mean_response_secs() / MS, 400.0, 1e-9));
}

#[test]
fn reference_forty_workers_at_90_percent_wait_about_4ms() {
    let q = MmcQueue::at_utilisation(40, 40.0 * MS, 0.9).unwrap();
    // Exact M/M/c value (independently computed by direct summation): 4.1156248 ms.
    assert!(
        close(q.mean_wait_secs() / MS, 4.115_624_8, 1e-6),
        "{}",
        q.mean_wait_secs()
    );
    assert!(close(q.mean_response_secs() / MS, 44.115_624_8, 1e-6));
    assert!(close(q.capacity(), 1000.0, 1e-9));
}

#[test]
fn forty_workers_by_direct_summation_agrees() {
    // C = (A^c/c!)(c/(c−A)) / (Σ_{k<c} A^k/k! + (A^c/c!)(c/(c−A))), terms built incrementally.
    let (c, a) = (40u32, 36.0f64);
    let mut term = 1.0f64;
    let mut sum = 0.0f64;
    for k in 0..c {
        sum += term;
        term *= a / f64::from(k + 1);
    }
    let tail = term * f64::from(c) / (f64::from(c) - a);
    let want = tail / (sum + tail);
    assert!(close(erlang_c(c, a).unwrap(), want, 1e-12));
}

#[test]
fn stable_at_ten_thousand_workers_near_saturation() {
    let q = MmcQueue::at_utilisation(10_000, 40.0 * MS, 0.9999).unwrap();
    let c = q.prob_wait();
    assert!(c.is_finite() && (0.0..=1.0).contains(&c), "{c}");
    let l = q.latency();
    for v in [l.mean_wait_secs, l.p99_wait_secs, l.mean_response_secs] {
        assert!(v.is_finite() && v >= 0.0, "{l:?}");
    }
    // And at the ceiling, a light load: B underflows to 0 rather than overflowing.
    let big = MmcQueue::at_utilisation(MAX_SERVERS, 1.0, 0.5).unwrap();
    assert_eq!(big.prob_wait(), 0.0);
    assert!(erlang_b(10_000, 1e300).unwrap().is_finite());
}

#[test]
fn quantile_round_trips_through_tail_probability() {
    let q = MmcQueue::at_utilisation(8, 0.05, 0.95).unwrap();
    for p in [0.5, 0.9, 0.99, 0.999] {
        let t = q.wait_quantile_secs(p).unwrap();
        let tail = q.prob_wait_exceeds(t).unwrap();
        if t > 0.0 {
            assert!(close(tail, 1.0 - p, 1e-12), "p={p} t={t} tail={tail}");
        } else {
            assert!(q.prob_wait() <= 1.0 - p);
        }
    }
    // Below the share that waits at all, the quantile is 0: most requests never queue.
    let light = MmcQueue::at_utilisation(40, 0.04, 0.5).unwrap();
    assert_eq!(light.wait_quantile_secs(0.5).unwrap(), 0.0);
    assert_eq!(
        light.latency().p99_wait_secs,
        light.wait_quantile_secs(0.99).unwrap()
    );
}

#[test]
fn knee_single_worker_has_closed_form() {
    // c = 1: W_q/s = ρ/(1−ρ) = f  ⇒  ρ = f/(1+f).
    for f in [0.1, 0.5, 1.0, 4.0] {
        let k = knee_utilisation_for(1, f).unwrap();
        assert!(close(k, f / (1.0 + f), 1e-12), "f={f}: {k}");
    }
    assert_eq!(knee_utilisation_for(3, 0.0).unwrap(), 0.0);
}

#[test]
fn knee_at_forty_workers_is_about_90_percent() {
    let k = knee_utilisation(40).unwrap();
    assert!((0.895..0.905).contains(&k), "{k}");
    // At the knee the mean wait is exactly the fraction of the service time.
    let q = MmcQueue::at_utilisation(40, 1.0, k).unwrap();
    assert!(close(q.mean_wait_secs(), KNEE_WAIT_FRACTION, 1e-9));
}

#[test]
fn knee_rises_with_workers_and_sits_above_square_root_rule() {
    let mut last = 0.0;
    for c in [1, 2, 4, 8, 16, 40, 100, 1000, 10_000] {
        let k = knee_utilisation(c).unwrap();
        assert!(k > last, "c={c}: {k} <= {last}");
        assert!(k >= square_root_rule_knee(c).unwrap(), "c={c}");
        last = k;
    }
    assert!(close(square_root_rule_knee(4).unwrap(), 0.5, 1e-15));
}

#[test]
fn refuse_rate_meets_target_and_a_hair_more_breaks_it() {
    // c = 1, target mean wait = s: ρ = 0.5, so 12.5 req/s at 40 ms.
    let r = max_arrival_rate(1, 0.04, WaitTarget::Mean { wait_secs: 0.04 }).unwrap();
    assert!(close(r, 12.5, 1e-9), "{r}");
    let target = WaitTarget::Quantile {
        quantile: 0.99,
        wait_secs: 0.1,
    };
    let r = max_arrival_rate(40, 0.04, target).unwrap();
    let at = MmcQueue::new(40, 0.04, r).unwrap();
    assert!(at.wait_quantile_secs(0.99).unwrap() <= 0.1 + 1e-12);
    let past = MmcQueue::new(40, 0.04, r * (1.0 + 1e-6)).unwrap();
    assert!(past.wait_quantile_secs(0.99).unwrap() > 0.1);
}

fn reference_default(share: f64) -> ShedInput {
    ShedInput {
        servers: 40,
        service_time_secs: 0.04,
        arrival_rate: 1150.0,
        sheddable_share: share,
        target: WaitTarget::knee(0.04).unwrap(),
    }
}

#[test]
fn reference_default_is_unbounded_without_shedding() {
    let plan = plan_shedding(&reference_default(0.0)).unwrap();
    assert!(plan.without_shedding.is_none());
    assert!(plan.with_shedding.is_none());
    assert!(!plan.meets_target);
    assert_eq!(plan.shed_rate, 0.0);
    assert!(close(plan.offered_utilisation, 1.15, 1e-12));
    assert!(close(
        plan.shortfall_rate,
        1150.0 - plan.refuse_above_rate,
        1e-9
    ));
}

#[test]
fn enough_sheddable_traffic_brings_latency_to_the_target() {
    let plan = plan_shedding(&reference_default(0.3)).unwrap();
    assert!(close(
        plan.refuse_above_utilisation,
        knee_utilisation(40).unwrap(),
        1e-12
    ));
    assert!(close(plan.shed_rate, 1150.0 - plan.refuse_above_rate, 1e-9));
    assert!(
        plan.shed_rate < plan.sheddable_rate,
        "sheds only what it must"
    );
    assert_eq!(plan.shortfall_rate, 0.0);
    assert!(plan.meets_target);
    let l = plan.with_shedding.unwrap();
    assert!(close(l.mean_wait_secs, 0.004, 1e-9), "{l:?}");
}

#[test]
fn too_little_sheddable_traffic_reports_a_shortfall() {
    // "If your sheddable share is 5% and you are 30% over, prioritisation cannot save you."
    let mut input = reference_default(0.05);
    input.arrival_rate = 1300.0;
    let plan = plan_shedding(&input).unwrap();
    assert!(close(plan.shed_rate, 65.0, 1e-9));
    assert!(plan.with_shedding.is_none());
    assert!(plan.shortfall_rate > 0.0 && !plan.meets_target);
}

#[test]
fn below_the_refuse_rate_nothing_is_shed() {
    let mut input = reference_default(0.5);
    input.arrival_rate = 500.0;
    let plan = plan_shedding(&input).unwrap();
    assert_eq!(plan.shed_rate, 0.0);
    assert_eq!(plan.with_shedding, plan.without_shedding);
    assert!(plan.meets_target);
}

fn argument_of(e: ErlangError) -> &'static str {
    match e {
        ErlangError::InvalidArgument { argument, .. } => argument,
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
}

#[test]
fn bad_input_names_the_argument() {
    assert_eq!(
        argument_of(MmcQueue::new(0, 0.04, 1.0).unwrap_err()),
        "servers"
    );
    assert_eq!(
        argument_of(MmcQueue::new(MAX_SERVERS + 1, 0.04, 1.0).unwrap_err()),
        "servers"
    );
    for s in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert_eq!(
            argument_of(MmcQueue::new(4, s, 1.0).unwrap_err()),
            "service_time"
        );
    }
    for r in [-1.0, f64::NAN, f64::INFINITY] {
        assert_eq!(
            argument_of(MmcQueue::new(4, 0.04, r).unwrap_err()),
            "arrival_rate"
        );
    }
    assert_eq!(
        argument_of(MmcQueue::at_utilisation(4, 0.04, 1.0).unwrap_err()),
        "utilisation"
    );
    assert_eq!(argument_of(erlang_c(4, 4.0).unwrap_err()), "offered_load");
    assert_eq!(
        argument_of(erlang_b(4, f64::NAN).unwrap_err()),
        "offered_load"
    );
    let q = MmcQueue::new(4, 0.04, 10.0).unwrap();
    assert_eq!(argument_of(q.wait_quantile_secs(1.0).unwrap_err()), "p");
    assert_eq!(argument_of(q.prob_wait_exceeds(-1.0).unwrap_err()), "t");
    assert_eq!(
        argument_of(workers_for_capacity(1.0, 0.04).unwrap_err()),
        "capacity"
    );
    assert_eq!(
        argument_of(knee_utilisation_for(4, f64::NAN).unwrap_err()),
        "wait_fraction"
    );
    let mut input = reference_default(1.5);
    assert_eq!(
        argument_of(plan_shedding(&input).unwrap_err()),
        "sheddable_share"
    );
    input.sheddable_share = 0.0;
    input.target = WaitTarget::Quantile {
        quantile: 1.0,
        wait_secs: 1.0,
    };
    assert_eq!(
        argument_of(plan_shedding(&input).unwrap_err()),
        "target_quantile"
    );
    input.target = WaitTarget::Mean { wait_secs: -1.0 };
    assert_eq!(
        argument_of(plan_shedding(&input).unwrap_err()),
        "target_wait"
    );
    let msg = MmcQueue::new(0, 0.04, 1.0).unwrap_err().to_string();
    assert!(
        msg.contains("servers") && msg.contains("1 to 1000000"),
        "{msg}"
    );
}

#[test]
fn saturation_is_its_own_error_when_a_finite_answer_is_required() {
    let e = MmcQueue::new(40, 0.04, 1000.0).unwrap_err();
    assert!(matches!(e, ErlangError::Saturated { .. }), "{e:?}");
    assert!(e.to_string().contains("never drains"));
    // An astronomically long service time a hair below saturation overflows rather than lying.
    let e = MmcQueue::at_utilisation(1, 1e307, 0.999).unwrap_err();
    assert!(matches!(e, ErlangError::Overflow { .. }), "{e:?}");
}

#[test]
fn workers_from_capacity_round_to_nearest() {
    assert_eq!(workers_for_capacity(1000.0, 0.04).unwrap(), 40);
    assert_eq!(workers_for_capacity(1012.0, 0.04).unwrap(), 40);
    assert_eq!(workers_for_capacity(1013.0, 0.04).unwrap(), 41);
}

proptest! {
    #[test]
    fn erlang_c_is_a_probability(c in 1u32..2000, rho in 0.0f64..0.9999) {
        let cw = erlang_c(c, rho * f64::from(c)).unwrap();
        prop_assert!((0.0..=1.0).contains(&cw));
        let b = erlang_b(c, rho * f64::from(c)).unwrap();
        // Waiting is at least as likely as being blocked would be: C >= B.
        prop_assert!(cw + 1e-12 >= b);
    }

    #[test]
    fn wait_increases_with_utilisation(c in 1u32..500, r1 in 0.01f64..0.999, r2 in 0.01f64..0.999) {
        let (lo, hi) = if r1 < r2 { (r1, r2) } else { (r2, r1) };
        prop_assume!(hi - lo > 1e-9);
        let a = MmcQueue::at_utilisation(c, 0.04, lo).unwrap();
        let b = MmcQueue::at_utilisation(c, 0.04, hi).unwrap();
        // Strictly increasing, except where both have underflowed to 0 (many workers, light load).
        prop_assert!(a.mean_wait_secs() <= b.mean_wait_secs());
        if b.mean_wait_secs() > 1e-200 {
            prop_assert!(a.mean_wait_secs() < b.mean_wait_secs());
        }
        prop_assert!(a.latency().p99_wait_secs <= b.latency().p99_wait_secs);
        prop_assert!(a.prob_wait() <= b.prob_wait());
    }

    #[test]
    fn wait_decreases_with_workers_at_equal_utilisation(c in 1u32..500, extra in 1u32..100, rho in 0.05f64..0.999) {
        let few = MmcQueue::at_utilisation(c, 0.04, rho).unwrap();
        let many = MmcQueue::at_utilisation(c + extra, 0.04, rho).unwrap();
        prop_assert!(many.mean_wait_secs() <= few.mean_wait_secs());
        if few.mean_wait_secs() > 1e-200 {
            prop_assert!(many.mean_wait_secs() < few.mean_wait_secs());
        }
        prop_assert!(many.latency().p99_wait_secs <= few.latency().p99_wait_secs);
    }

    #[test]
    fn quantiles_increase_with_p(c in 1u32..200, rho in 0.0f64..0.9999, p1 in 0.0f64..0.9999, p2 in 0.0f64..0.9999) {
        let q = MmcQueue::at_utilisation(c, 0.04, rho).unwrap();
        let (lo, hi) = if p1 < p2 { (p1, p2) } else { (p2, p1) };
        let (tl, th) = (q.wait_quantile_secs(lo).unwrap(), q.wait_quantile_secs(hi).unwrap());
        prop_assert!(tl.is_finite() && th.is_finite() && tl >= 0.0 && tl <= th);
    }

    #[test]
    fn plans_are_finite_for_any_valid_input(
        c in 1u32..200, s in 1e-4f64..10.0, load in 0.0f64..3.0, share in 0.0f64..=1.0,
    ) {
        let input = ShedInput {
            servers: c,
            service_time_secs: s,
            arrival_rate: load * f64::from(c) / s,
            sheddable_share: share,
            target: WaitTarget::knee(s).unwrap(),
        };
        let plan = plan_shedding(&input).unwrap();
        for v in [plan.refuse_above_rate, plan.shed_rate, plan.served_rate, plan.shortfall_rate] {
            prop_assert!(v.is_finite() && v >= 0.0);
        }
        prop_assert!(plan.refuse_above_rate < plan.capacity);
        prop_assert!(plan.shed_rate <= plan.sheddable_rate + 1e-9);
        if plan.shortfall_rate == 0.0 {
            prop_assert!(plan.meets_target);
        }
    }
}
