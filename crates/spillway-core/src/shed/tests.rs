use super::*;
use proptest::prelude::*;
use Criticality::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn default_config_is_valid_and_documented_values() {
    let cfg = ShedConfig::default();
    cfg.validate().unwrap();
    assert_eq!(cfg.thresholds.0, [Some(0.8), Some(0.9), Some(1.0), None]);
    assert!(close(cfg.ramp, 0.1));
    let p = ShedPolicy::new(cfg).unwrap();
    assert_eq!(p, ShedPolicy::default());
    assert!(close(p.lowest_threshold(), 0.8));
    assert_eq!(p.threshold(CriticalPlus), None);
}

#[test]
fn hand_values_on_the_ramp() {
    let p = ShedPolicy::default();
    // (0.85 - 0.8) / 0.1 = 0.5
    assert!(close(p.probability(Sheddable, 0.85), 0.5));
    assert!(close(p.probability(Sheddable, 0.8), 0.0));
    assert!(close(p.probability(Sheddable, 0.79), 0.0));
    assert!(close(p.probability(Sheddable, 0.9), 1.0));
    assert!(close(p.probability(Sheddable, 5.0), 1.0));
    assert!(close(p.probability(SheddablePlus, 0.85), 0.0));
    assert!(close(p.probability(SheddablePlus, 0.97), 0.7));
    assert!(close(p.probability(Critical, 0.99), 0.0));
    assert!(close(p.probability(Critical, 1.0), 0.0));
    assert!(close(p.probability(Critical, 1.02), 0.2));
    assert!(close(p.probability(CriticalPlus, 100.0), 0.0));
    assert!(close(p.probability(CriticalPlus, f64::INFINITY), 0.0));
    assert!(close(p.probability(Critical, f64::INFINITY), 1.0));
    // A broken (NaN) signal fails open.
    assert!(close(p.probability(Sheddable, f64::NAN), 0.0));
}

#[test]
fn sheddable_is_fully_shed_before_critical_starts() {
    let p = ShedPolicy::default();
    let critical_start = p.threshold(Critical).unwrap();
    assert!(close(p.probability(Sheddable, critical_start), 1.0));
    assert!(close(p.probability(SheddablePlus, critical_start), 1.0));
}

#[test]
fn should_shed_compares_the_draw() {
    let p = ShedPolicy::default();
    assert!(p.should_shed(Sheddable, 0.85, 0.49));
    assert!(!p.should_shed(Sheddable, 0.85, 0.5));
    assert!(!p.should_shed(Sheddable, 0.5, 0.0));
    // Out-of-contract draws cannot shed at p = 0 or admit at p = 1.
    assert!(!p.should_shed(Sheddable, 0.5, -1.0));
    assert!(!p.should_shed(Sheddable, 0.5, f64::NAN));
    assert!(p.should_shed(Sheddable, 0.95, 1.0));
    assert!(p.should_shed(Sheddable, 0.95, f64::NAN));
}

#[test]
fn the_draw_is_taken_only_when_it_decides() {
    let p = ShedPolicy::default();
    let drawn = std::cell::Cell::new(0);
    let draw = |d: f64| {
        drawn.set(drawn.get() + 1);
        d
    };
    assert!(!p.should_shed_with(Sheddable, 0.5, || draw(0.0))); // p = 0
    assert!(p.should_shed_with(Sheddable, 0.95, || draw(0.99))); // p = 1
    assert!(!p.should_shed_with(Sheddable, f64::NAN, || draw(0.0)));
    assert_eq!(drawn.get(), 0);
    assert!(p.should_shed_with(Sheddable, 0.85, || draw(0.49))); // p = 0.5
    assert!(!p.should_shed_with(Sheddable, 0.85, || draw(0.5)));
    assert_eq!(drawn.get(), 2);
}

#[test]
fn zero_ramp_is_a_step_above_the_threshold() {
    let p = ShedPolicy::new(ShedConfig {
        ramp: 0.0,
        ..ShedConfig::default()
    })
    .unwrap();
    assert!(close(p.probability(Sheddable, 0.8), 0.0));
    assert!(close(p.probability(Sheddable, 0.800001), 1.0));
}

#[test]
fn no_thresholds_means_never_overloaded() {
    let p = ShedPolicy::new(ShedConfig {
        thresholds: PerCriticality([None; 4]),
        ramp: 0.1,
    })
    .unwrap();
    assert_eq!(p.lowest_threshold(), f64::INFINITY);
    for c in Criticality::ALL {
        assert_eq!(p.probability(c, 1e9), 0.0);
    }
}

fn err(cfg: ShedConfig) -> ConfigError {
    cfg.validate().unwrap_err()
}

#[test]
fn validation_names_the_field() {
    let e = err(ShedConfig {
        ramp: -0.1,
        ..ShedConfig::default()
    });
    assert_eq!(e.field, "shed.ramp");
    let e = err(ShedConfig {
        ramp: f64::NAN,
        ..ShedConfig::default()
    });
    assert_eq!(e.field, "shed.ramp");

    // Decreasing with criticality.
    let e = err(ShedConfig {
        thresholds: PerCriticality([Some(0.9), Some(0.8), Some(1.0), None]),
        ramp: 0.05,
    });
    assert_eq!(e.field, "shed.thresholds.SHEDDABLE_PLUS");
    assert!(
        e.to_string().contains("lower criticalities are shed first"),
        "{e}"
    );

    // A hole: lower level never shed, higher one is.
    let e = err(ShedConfig {
        thresholds: PerCriticality([None, Some(0.9), Some(1.0), None]),
        ramp: 0.1,
    });
    assert_eq!(e.field, "shed.thresholds.SHEDDABLE_PLUS");

    // Out of range / not finite (percent instead of a fraction).
    let e = err(ShedConfig {
        thresholds: PerCriticality([Some(80.0), Some(90.0), Some(100.0), None]),
        ramp: 0.1,
    });
    assert_eq!(e.field, "shed.thresholds.SHEDDABLE");
    let e = err(ShedConfig {
        thresholds: PerCriticality([Some(0.8), Some(0.9), Some(f64::INFINITY), None]),
        ramp: 0.1,
    });
    assert_eq!(e.field, "shed.thresholds.CRITICAL");

    // Ramp so wide SHEDDABLE_PLUS would still be partly admitted while CRITICAL is shed.
    let e = err(ShedConfig {
        ramp: 0.2,
        ..ShedConfig::default()
    });
    assert_eq!(e.field, "shed.ramp");
    assert!(e.to_string().contains("fully shed"), "{e}");
}

#[test]
fn ramp_check_uses_critical_plus_when_critical_has_no_threshold_above_it() {
    // CRITICAL has no threshold, so CRITICAL_PLUS may not have one either (order), and no
    // critical level starts: any ramp up to the maximum is fine.
    let cfg = ShedConfig {
        thresholds: PerCriticality([Some(0.8), Some(0.9), None, None]),
        ramp: 0.5,
    };
    cfg.validate().unwrap();
    let p = ShedPolicy::new(cfg).unwrap();
    assert!(close(p.probability(Sheddable, 1.05), 0.5));
}

fn arb_config() -> impl Strategy<Value = ShedConfig> {
    // Non-decreasing thresholds with an optional "never" suffix, and a ramp that fits.
    (
        0.0f64..2.0,
        prop::array::uniform3(0.0f64..0.5),
        0usize..=4,
        0.0f64..1.0,
    )
        .prop_filter_map("ramp must fit", |(base, steps, n_some, ramp_frac)| {
            let mut t = [None; 4];
            let mut v = base;
            for (i, slot) in t.iter_mut().enumerate().take(n_some) {
                if i > 0 {
                    v += steps[i - 1];
                }
                *slot = Some(v);
            }
            let first_critical = t[2].or(t[3]);
            let room = match first_critical {
                Some(fc) => t[0..2].iter().flatten().map(|s| fc - s).fold(1.0, f64::min),
                None => 1.0,
            };
            let cfg = ShedConfig {
                thresholds: PerCriticality(t),
                ramp: (room * ramp_frac).max(0.0),
            };
            cfg.validate().ok().map(|_| cfg)
        })
}

proptest! {
    #[test]
    fn order_holds_and_probability_is_a_probability(cfg in arb_config(), u in -1.0f64..4.0) {
        let p = ShedPolicy::new(cfg).unwrap();
        let mut prev = f64::INFINITY;
        for c in Criticality::ALL {
            let pc = p.probability(c, u);
            prop_assert!((0.0..=1.0).contains(&pc), "{c} {u} {pc}");
            prop_assert!(pc <= prev, "{c} at u={u}: {pc} > lower level's {prev}");
            prev = pc;
        }
    }

    /// The early answer at or below a level's own threshold is the same as the maximum over
    /// that level's and every higher level's ramp.
    #[test]
    fn probability_is_the_max_over_this_and_higher_levels(cfg in arb_config(), u in -1.0f64..4.0) {
        let p = ShedPolicy::new(cfg).unwrap();
        for c in Criticality::ALL {
            let max = (c.index()..Criticality::COUNT).map(|i| p.own(i, u)).fold(0.0, f64::max);
            prop_assert_eq!(p.probability(c, u), max, "{} at u={}", c, u);
        }
    }

    #[test]
    fn monotone_in_utilisation(cfg in arb_config(), a in -1.0f64..4.0, b in -1.0f64..4.0) {
        let p = ShedPolicy::new(cfg).unwrap();
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        for c in Criticality::ALL {
            prop_assert!(p.probability(c, lo) <= p.probability(c, hi));
        }
    }

    #[test]
    fn default_ramp_is_continuous(u in 0.0f64..2.0) {
        // A small step in utilisation moves the probability by at most step / ramp.
        let p = ShedPolicy::default();
        let h = 1e-6;
        for c in Criticality::ALL {
            let d = (p.probability(c, u + h) - p.probability(c, u)).abs();
            prop_assert!(d <= h / 0.1 + 1e-12);
        }
    }

    #[test]
    fn should_shed_matches_probability(u in 0.0f64..2.0, draw in 0.0f64..1.0) {
        let p = ShedPolicy::default();
        for c in Criticality::ALL {
            prop_assert_eq!(p.should_shed(c, u, draw), draw < p.probability(c, u));
        }
    }
}
