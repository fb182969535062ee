//! The idle timeout's scaling: pure functions of the open connections and the overload state.

use std::time::{Duration, Instant};

use super::IdlePressure;
use crate::state::{Overloaded, OVERLOAD_RECENT};

const IDLE: Duration = Duration::from_secs(75);
const MIN: Duration = Duration::from_secs(2);

fn scaled() -> IdlePressure {
    IdlePressure::new(MIN, 50, 10_000)
}

#[test]
fn below_the_threshold_the_idle_timeout_is_the_configured_one() {
    let p = scaled();
    assert_eq!(p.from, 5_000);
    for open in [0, 1, 150, 861, 5_000] {
        assert_eq!(p.idle_limit(IDLE, open, false), IDLE, "{open} open");
    }
}

#[test]
fn above_it_the_timeout_falls_linearly_to_the_minimum_at_the_cap() {
    let p = scaled();
    // Halfway between 5,000 and 10,000: halfway between 75 s and 2 s.
    assert_eq!(
        p.idle_limit(IDLE, 7_500, false),
        Duration::from_millis(38_500)
    );
    assert_eq!(p.idle_limit(IDLE, 10_000, false), MIN);
    // Above the cap (a reload lowered it) stays at the minimum.
    assert_eq!(p.idle_limit(IDLE, 20_000, false), MIN);
    let mut last = IDLE;
    for open in (5_000..=10_000).step_by(250) {
        let t = p.idle_limit(IDLE, open, false);
        assert!(t <= last && t >= MIN, "{open}: {t:?} after {last:?}");
        last = t;
    }
}

#[test]
fn overloaded_the_timeout_is_the_minimum_whatever_the_connections() {
    let p = scaled();
    for open in [0, 1, 861, 10_000] {
        assert_eq!(p.idle_limit(IDLE, open, true), MIN, "{open} open");
    }
}

#[test]
fn the_minimum_never_lengthens_a_shorter_idle_timeout() {
    let p = scaled();
    let short = Duration::from_secs(1);
    assert_eq!(p.idle_limit(short, 0, true), short);
    assert_eq!(p.idle_limit(short, 9_000, false), short);
}

#[test]
fn off_never_scales() {
    for (open, overloaded) in [(0, false), (usize::MAX - 1, false), (10, true)] {
        let t = IdlePressure::OFF.idle_limit(IDLE, open, overloaded);
        assert_eq!(t, IDLE);
    }
}

#[test]
fn from_the_cap_itself_scaling_never_starts_before_it() {
    let p = IdlePressure::new(MIN, 100, 1_000);
    assert_eq!(p.idle_limit(IDLE, 999, false), IDLE);
    assert_eq!(p.idle_limit(IDLE, 1_000, false), IDLE);
}

#[test]
fn an_overload_refusal_counts_for_connections_idle_since_a_second_before_it() {
    let o = Overloaded::default();
    let t0 = Instant::now() + Duration::from_secs(10);
    assert!(!o.during(t0), "never refused");
    o.note(t0);
    // Idle since before it (within the idle time), or since less than a second after it.
    assert!(o.during(t0 - Duration::from_secs(60)));
    assert!(o.during(t0));
    assert!(o.during(t0 + OVERLOAD_RECENT - Duration::from_millis(2)));
    // Idle since more than a second after it: that overload is over for this connection.
    assert!(!o.during(t0 + OVERLOAD_RECENT + Duration::from_millis(2)));
    // A later refusal counts; an earlier clock reading (another thread's) never moves it back.
    o.note(t0 + Duration::from_secs(5));
    o.note(t0 + Duration::from_secs(4));
    assert!(o.during(t0 + Duration::from_millis(5_900)));
    assert!(!o.during(t0 + Duration::from_millis(6_100)));
}
