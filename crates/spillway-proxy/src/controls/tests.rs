//! Incident controls with injected time: ramp values worked out by hand, every refusal reason,
//! validation messages, and a concurrent reader/writer check of the sequence lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use spillway_core::Criticality::{self, *};

use super::*;

fn at(origin: Instant, secs: f64) -> Instant {
    origin + Duration::from_secs_f64(secs)
}

#[test]
fn everything_passes_by_default() {
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    for level in Criticality::ALL {
        for draw in [0.0, 0.5, 0.999_999] {
            assert_eq!(c.check(t0, level, draw), None);
        }
    }
    assert!(c.retries_enabled());
    assert!(!c.exercise_degraded(0.0));
    let s = c.snapshot(t0);
    assert_eq!(s.shed_below, None);
    assert_eq!(s.admit_percent, None);
    assert_eq!(s.exercise_degraded_fraction, 0.0);
}

#[test]
fn shed_below_refuses_only_lower_levels() {
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    c.set_shed_below(Some(SheddablePlus));
    assert_eq!(
        c.check(t0, Sheddable, 0.0),
        Some(ControlRefusal::Shed {
            below: SheddablePlus
        })
    );
    assert_eq!(c.check(t0, SheddablePlus, 0.0), None);
    assert_eq!(c.check(t0, Critical, 0.0), None);
    assert_eq!(c.check(t0, CriticalPlus, 0.0), None);

    c.set_shed_below(Some(CriticalPlus));
    for level in [Sheddable, SheddablePlus, Critical] {
        let r = c.check(t0, level, 0.0).expect("shed");
        assert_eq!(r.reason(), REASON_SHED);
        assert!(!r.retryable_elsewhere());
    }
    assert_eq!(c.check(t0, CriticalPlus, 0.0), None);
    assert_eq!(c.shed_below(), Some(CriticalPlus));

    // Nothing is below SHEDDABLE: the same as off.
    c.set_shed_below(Some(Sheddable));
    assert_eq!(c.shed_below(), None);
    assert_eq!(c.check(t0, Sheddable, 0.0), None);
    c.set_shed_below(None);
    assert_eq!(c.check(t0, Sheddable, 0.0), None);
}

#[test]
fn admit_percent_holds_without_a_ramp() {
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    c.set_admit_percent(
        t0,
        AdmitPercent {
            percent: 10.0,
            ramp: None,
            exempt_from: None,
        },
    )
    .unwrap();
    // draw·100 < 10 passes: 0.0 and 0.0999 pass, 0.1 and above are refused.
    assert_eq!(c.check(t0, CriticalPlus, 0.0), None);
    assert_eq!(c.check(t0, Sheddable, 0.0999), None);
    let r = c.check(t0, CriticalPlus, 0.1).expect("refused");
    assert_eq!(r, ControlRefusal::AdmitPercent { percent: 10.0 });
    assert_eq!(r.reason(), REASON_ADMIT_PERCENT);
    // An hour later it still holds.
    let later = at(t0, 3600.0);
    assert!(c.check(later, Critical, 0.5).is_some());
    let s = c.snapshot(later).admit_percent.unwrap();
    assert_eq!(s.current_percent, 10.0);
    assert_eq!(s.ramp_seconds, None);
    assert_eq!(s.remaining_seconds, None);
    assert_eq!(s.elapsed_seconds, 3600.0);
    assert!(!s.complete);
}

#[test]
fn ramp_is_linear_from_p_to_100() {
    // 1% ramped over 100 s: p(t) = 1 + 99·t/100, so 50.5% at 50 s, 75.25% at 75 s, 100% at 100 s.
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    let start = at(t0, 10.0);
    c.set_admit_percent(
        start,
        AdmitPercent {
            percent: 1.0,
            ramp: Some(Duration::from_secs(100)),
            exempt_from: None,
        },
    )
    .unwrap();
    let pct = |secs: f64| {
        c.snapshot(at(start, secs))
            .admit_percent
            .unwrap()
            .current_percent
    };
    assert_eq!(pct(0.0), 1.0);
    assert!((pct(50.0) - 50.5).abs() < 1e-9, "{}", pct(50.0));
    assert!((pct(75.0) - 75.25).abs() < 1e-9, "{}", pct(75.0));
    assert_eq!(pct(100.0), 100.0);
    assert_eq!(pct(1000.0), 100.0);
    // A time before the ramp started (a stale `now`) reads as the start.
    assert_eq!(c.snapshot(t0).admit_percent.unwrap().current_percent, 1.0);

    // At 50 s (50.5%): a draw of 0.50 passes, 0.51 is refused.
    assert_eq!(c.check(at(start, 50.0), Critical, 0.50), None);
    assert!(c.check(at(start, 50.0), Critical, 0.51).is_some());
    // Once complete, even the highest draw passes.
    assert_eq!(c.check(at(start, 100.0), Sheddable, 0.999_999), None);

    let s = c.snapshot(at(start, 25.0)).admit_percent.unwrap();
    assert_eq!(s.ramp_seconds, Some(100.0));
    assert_eq!(s.remaining_seconds, Some(75.0));
    assert_eq!(s.elapsed_seconds, 25.0);
    assert!(!s.complete);
    assert!(c.snapshot(at(start, 100.0)).admit_percent.unwrap().complete);
}

#[test]
fn ramp_up_starts_from_the_current_share() {
    // Hold at 2%, then at t = 60 s ramp to 100% over 49 s: p = 2 + 98·t/49 = 2 + 2t.
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    c.set_admit_percent(
        t0,
        AdmitPercent {
            percent: 2.0,
            ramp: None,
            exempt_from: Some(CriticalPlus),
        },
    )
    .unwrap();
    let t1 = at(t0, 60.0);
    c.ramp_up(t1, Duration::from_secs(49)).unwrap();
    let s = c.snapshot(at(t1, 10.0)).admit_percent.unwrap();
    assert_eq!(s.from_percent, 2.0);
    assert!(
        (s.current_percent - 22.0).abs() < 1e-9,
        "{}",
        s.current_percent
    );
    assert_eq!(s.exempt_from, Some(CriticalPlus), "the exemption is kept");

    // Ramping again mid-ramp starts from where the first ramp is.
    let t2 = at(t1, 24.0); // 2 + 48 = 50%
    c.ramp_up(t2, Duration::from_secs(10)).unwrap();
    let s = c.snapshot(at(t2, 5.0)).admit_percent.unwrap();
    assert!((s.from_percent - 50.0).abs() < 1e-9);
    assert!((s.current_percent - 75.0).abs() < 1e-9);
}

#[test]
fn ramp_up_without_a_percent_is_an_error() {
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    let e = c.ramp_up(t0, Duration::from_secs(60)).unwrap_err();
    assert_eq!(e.field, "percent");
}

#[test]
fn exemption_lets_high_levels_through_the_percentage_only() {
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    c.set_admit_percent(
        t0,
        AdmitPercent {
            percent: 0.0,
            ramp: None,
            exempt_from: Some(Critical),
        },
    )
    .unwrap();
    assert_eq!(c.check(t0, Critical, 0.99), None);
    assert_eq!(c.check(t0, CriticalPlus, 0.99), None);
    assert!(
        c.check(t0, SheddablePlus, 0.0).is_some(),
        "0% admits nothing"
    );
    // Shed-below is checked first and is not affected by the exemption.
    c.set_shed_below(Some(CriticalPlus));
    assert_eq!(
        c.check(t0, Critical, 0.0),
        Some(ControlRefusal::Shed {
            below: CriticalPlus
        })
    );
}

#[test]
fn admit_percent_validation_names_the_field() {
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    let bad = |percent: f64, ramp: Option<Duration>| {
        c.set_admit_percent(
            t0,
            AdmitPercent {
                percent,
                ramp,
                exempt_from: None,
            },
        )
        .unwrap_err()
    };
    assert_eq!(bad(-1.0, None).field, "percent");
    assert_eq!(bad(100.5, None).field, "percent");
    assert_eq!(bad(f64::NAN, None).field, "percent");
    assert_eq!(bad(5.0, Some(Duration::ZERO)).field, "ramp_seconds");
    let e = bad(5.0, Some(MAX_RAMP + Duration::from_secs(1)));
    assert_eq!(e.field, "ramp_seconds");
    assert!(e.to_string().contains("604800"), "{e}");
    // A refused setting leaves the control as it was (off).
    assert_eq!(c.snapshot(t0).admit_percent, None);
    c.set_admit_percent(
        t0,
        AdmitPercent {
            percent: 100.0,
            ramp: Some(MAX_RAMP),
            exempt_from: None,
        },
    )
    .unwrap();
}

#[test]
fn retries_and_exercise_fraction() {
    let c = IncidentControls::default();
    c.set_retries_enabled(false);
    assert!(!c.retries_enabled());
    c.set_exercise_degraded(0.01).unwrap();
    assert!(c.exercise_degraded(0.0));
    assert!(c.exercise_degraded(0.009_9));
    assert!(!c.exercise_degraded(0.01));
    assert!(!c.exercise_degraded(0.5));
    assert_eq!(c.set_exercise_degraded(1.5).unwrap_err().field, "fraction");
    assert_eq!(c.set_exercise_degraded(-0.1).unwrap_err().field, "fraction");
    assert_eq!(c.snapshot(Instant::now()).exercise_degraded_fraction, 0.01);
}

#[test]
fn reset_turns_everything_off() {
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    c.set_shed_below(Some(Critical));
    c.set_admit_percent(
        t0,
        AdmitPercent {
            percent: 1.0,
            ramp: None,
            exempt_from: None,
        },
    )
    .unwrap();
    c.set_retries_enabled(false);
    c.set_exercise_degraded(0.05).unwrap();
    c.reset();
    assert_eq!(c.snapshot(t0), IncidentControls::new(t0).snapshot(t0));
    assert_eq!(c.check(t0, Sheddable, 0.99), None);
}

#[test]
fn admitted_share_matches_the_percentage() {
    // 10% with evenly spaced draws: exactly 10 of 100 pass.
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    c.set_admit_percent(
        t0,
        AdmitPercent {
            percent: 10.0,
            ramp: None,
            exempt_from: None,
        },
    )
    .unwrap();
    let passed = (0..100)
        .filter(|i| c.check(t0, Critical, f64::from(*i) / 100.0).is_none())
        .count();
    assert_eq!(passed, 10);
}

#[test]
fn snapshot_serialises_criticality_by_name() {
    let t0 = Instant::now();
    let c = IncidentControls::new(t0);
    c.set_shed_below(Some(SheddablePlus));
    c.set_admit_percent(
        t0,
        AdmitPercent {
            percent: 5.0,
            ramp: Some(Duration::from_secs(60)),
            exempt_from: Some(CriticalPlus),
        },
    )
    .unwrap();
    let v = serde_json::to_value(c.snapshot(t0)).unwrap();
    assert_eq!(v["shed_below"], "SHEDDABLE_PLUS");
    assert_eq!(v["admit_percent"]["exempt_from"], "CRITICAL_PLUS");
    assert_eq!(v["admit_percent"]["ramp_seconds"], 60.0);
    assert_eq!(v["retries_enabled"], true);
}

#[test]
fn readers_never_see_a_torn_admit_update() {
    // Two consistent settings alternate: (hold at 10%) and (ramp from 90% over 1 ns, i.e. 100%
    // at any later time). A torn read would mix them: 90% held, or 10% "ramping" to 100%.
    let t0 = Instant::now();
    let c = Arc::new(IncidentControls::new(t0));
    let a = AdmitPercent {
        percent: 10.0,
        ramp: None,
        exempt_from: None,
    };
    let b = AdmitPercent {
        percent: 90.0,
        ramp: Some(Duration::from_nanos(1)),
        exempt_from: Some(Critical),
    };
    c.set_admit_percent(t0, a).unwrap();
    let writer = {
        let c = Arc::clone(&c);
        std::thread::spawn(move || {
            for i in 0..20_000 {
                c.set_admit_percent(t0, if i % 2 == 0 { b } else { a })
                    .unwrap();
            }
        })
    };
    let later = at(t0, 1.0);
    for _ in 0..20_000 {
        let w = c.admit.load();
        let ok_a = w.from_percent == 10.0 && w.ramp_ns == 0 && w.exempt_from().is_none();
        let ok_b = w.from_percent == 90.0 && w.ramp_ns == 1 && w.exempt_from() == Some(Critical);
        assert!(ok_a || ok_b, "torn read: {w:?}");
        let p = w.percent_at(nanos_since(t0, later));
        assert!(p == 10.0 || p == 100.0, "{p}");
    }
    writer.join().unwrap();
}
