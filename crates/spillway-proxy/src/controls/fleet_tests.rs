//! The fleet layer's application of stored controls: precedence, expiry, the store down.

use std::time::{Duration, Instant};

use spillway_core::Criticality;

use super::{Entry, FleetControls, Kind, Value};
use crate::controls::IncidentControls;

fn entry(value: Value, set_at_ms: u64, expires_at_ms: u64) -> Entry {
    Entry {
        value,
        set_by: "a".into(),
        peer: "127.0.0.1:1".into(),
        set_at_ms,
        expires_at_ms,
    }
}

#[test]
fn a_read_applies_and_an_absent_key_lifts() {
    let f = FleetControls::default();
    let now = Instant::now();
    let shed = entry(Value::ShedBelow(Criticality::Critical), 1_000, 10_000);
    f.apply_read(
        [
            Some(shed.clone()),
            None,
            Some(entry(Value::RetriesOff, 1_000, 10_000)),
        ],
        now,
        2_000,
    );
    assert_eq!(f.layer().shed_below(), Some(Criticality::Critical));
    assert!(!f.layer().retries_enabled());
    assert_eq!(f.entry(Kind::ShedBelow), Some(shed));
    f.apply_read([None, None, None], now, 3_000);
    assert_eq!(f.layer().shed_below(), None);
    assert!(f.layer().retries_enabled());
}

#[test]
fn the_store_down_keeps_controls_until_their_expiry() {
    let f = FleetControls::default();
    let now = Instant::now();
    f.apply_read(
        [
            Some(entry(
                Value::ShedBelow(Criticality::SheddablePlus),
                0,
                5_000,
            )),
            None,
            None,
        ],
        now,
        1_000,
    );
    f.read_failed("down".into(), now, 4_999);
    assert_eq!(f.layer().shed_below(), Some(Criticality::SheddablePlus));
    f.read_failed("down".into(), now, 5_000);
    assert_eq!(f.layer().shed_below(), None);
    // An expired entry read from the store is not applied either.
    f.apply_read(
        [
            Some(entry(Value::ShedBelow(Criticality::Critical), 0, 5_000)),
            None,
            None,
        ],
        now,
        6_000,
    );
    assert_eq!(f.layer().shed_below(), None);
}

#[test]
fn a_ramp_is_aligned_on_when_it_was_set_not_when_it_was_read() {
    let f = FleetControls::default();
    let now = Instant::now() + Duration::from_secs(100);
    let v = Value::AdmitPercent {
        percent: 0.0,
        ramp_seconds: Some(100.0),
        exempt_from: None,
    };
    // Set 50 s before this proxy read it: half way up the ramp already.
    f.apply_read([None, Some(entry(v, 10_000, 1_000_000)), None], now, 60_000);
    let pct = f
        .layer()
        .snapshot(now)
        .admit_percent
        .map(|a| a.current_percent);
    assert!(pct.is_some_and(|p| (p - 50.0).abs() < 1e-6), "{pct:?}");
}

#[test]
fn the_stricter_layer_wins_in_status() {
    let f = FleetControls::default();
    let local = IncidentControls::default();
    let now = Instant::now();
    local.set_shed_below(Some(Criticality::SheddablePlus));
    f.apply_read(
        [
            Some(entry(Value::ShedBelow(Criticality::Critical), 0, 9_000)),
            None,
            None,
        ],
        now,
        1_000,
    );
    let s = f.status(&local, true, now, 1_000);
    assert_eq!(s.effective.shed_below, Some(Criticality::Critical));
    assert_eq!(s.effective.shed_below_from, Some("fleet"));
    assert!((s.shed_below.as_ref().map_or(0.0, |e| e.expires_in_seconds) - 8.0).abs() < 1e-9);
    local.set_retries_enabled(false);
    assert!(!f.status(&local, true, now, 1_000).effective.retries_enabled);
}

#[test]
fn malformed_or_mismatched_entries_are_ignored() {
    assert_eq!(Entry::parse("not json"), None);
    assert_eq!(
        Entry::parse(
            r#"{"value":{"admit_percent":{"percent":300,"ramp_seconds":null,"exempt_from":null}},"set_by":"a","peer":"p","set_at_ms":0,"expires_at_ms":9}"#
        ),
        None
    );
    let f = FleetControls::default();
    // A retries-off entry under the shed-below key is not a shed-below.
    f.apply_read(
        [Some(entry(Value::RetriesOff, 0, 9_000)), None, None],
        Instant::now(),
        1_000,
    );
    assert_eq!(f.layer().shed_below(), None);
    assert!(f.layer().retries_enabled());
    let text = serde_json::to_string(&entry(Value::ShedBelow(Criticality::Critical), 1, 2))
        .unwrap_or_default();
    assert!(Entry::parse(&text).is_some(), "{text}");
}
