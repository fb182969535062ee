//! The guard on where and how fast a run may send ([`LoadConfig::validate`]): a non-loopback
//! target needs `allow_remote`, which needs a cap the run's peak rate × attempts respects.
//! Nothing is sent.

use super::*;

fn remote() -> LoadConfig {
    LoadConfig::new("192.0.2.7:80".parse().unwrap())
}

fn flag(cfg: &LoadConfig) -> Option<&'static str> {
    match cfg.validate() {
        Ok(()) => None,
        Err(LoadError::Config { flag, .. }) => Some(flag),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_remote_target_needs_the_flag_and_a_cap() {
    let mut cfg = remote();
    assert_eq!(flag(&cfg), Some("--target"));
    let why = cfg.validate().unwrap_err().to_string();
    assert!(why.contains("--allow-remote"), "{why}");
    cfg.allow_remote = true;
    assert_eq!(flag(&cfg), Some("--max-rate"));
    // 100/s × 3 attempts: a cap of 300 holds, 299 does not.
    cfg.max_rate = Some(300.0);
    assert_eq!(flag(&cfg), None);
    assert_eq!(cfg.wire_rate_bound(), Some(300.0));
    cfg.max_rate = Some(299.0);
    assert_eq!(flag(&cfg), Some("--max-rate"));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        cfg.max_rate = Some(bad);
        assert_eq!(flag(&cfg), Some("--max-rate"), "{bad}");
    }
}

#[test]
fn the_cap_counts_the_peak_of_the_shape_and_every_attempt() {
    let mut cfg = remote();
    cfg.allow_remote = true;
    cfg.shape = RateShape::parse("ramp:10..50").unwrap();
    cfg.retry.max_attempts = 2;
    assert_eq!(cfg.wire_rate_bound(), Some(100.0));
    cfg.max_rate = Some(99.0);
    assert_eq!(flag(&cfg), Some("--max-rate"));
    cfg.max_rate = Some(100.0);
    assert_eq!(flag(&cfg), None);
    // A closed loop sends as fast as the target answers: it cannot be capped.
    cfg.connections = Some(4);
    assert_eq!(cfg.wire_rate_bound(), None);
    assert_eq!(flag(&cfg), Some("--connections"));
}

#[test]
fn loopback_needs_no_flag_and_a_cap_still_binds_there() {
    let mut cfg = LoadConfig::new("127.0.0.1:8080".parse().unwrap());
    assert_eq!(flag(&cfg), None);
    cfg.max_rate = Some(10.0);
    assert_eq!(flag(&cfg), Some("--max-rate"));
    cfg.allow_remote = true;
    cfg.max_rate = Some(1000.0);
    assert_eq!(flag(&cfg), None);
}
