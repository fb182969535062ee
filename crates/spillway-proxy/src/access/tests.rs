use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::Value;
use spillway_core::Criticality;

use super::{
    civil, format_entry, AccessFormat, AccessLog, AccessLogConfig, Decision, Entry, LogConfig,
    CAPACITY,
};

fn entry<'a>() -> Entry<'a> {
    Entry {
        time: UNIX_EPOCH + Duration::from_millis(1_767_225_600_123),
        route: Some("api"),
        criticality: Some(Criticality::Critical),
        customer: Some("acme"),
        decision: Decision::Admitted,
        reason: None,
        queue: Some(Duration::from_micros(1500)),
        upstream: Some(Duration::from_micros(12_345)),
        status: 200,
        attempt: Some(1),
    }
}

#[test]
fn civil_dates() {
    assert_eq!(civil(0), (1970, 1, 1));
    assert_eq!(civil(19_723), (2024, 1, 1));
    assert_eq!(civil(20_513), (2026, 3, 1));
}

#[test]
fn a_json_line_carries_every_field() {
    let line = format_entry(&entry(), AccessFormat::Json);
    assert!(line.ends_with('\n') && !line.trim_end().contains('\n'));
    let v: Value = serde_json::from_str(&line).expect("one JSON object");
    assert_eq!(v["time"], "2026-01-01T00:00:00.123Z");
    assert_eq!(v["route"], "api");
    assert_eq!(v["criticality"], "CRITICAL");
    assert_eq!(v["customer"], "acme");
    assert_eq!(v["decision"], "admitted");
    assert_eq!(v["reason"], Value::Null);
    assert_eq!(v["queue_ms"], 1.5);
    assert_eq!(v["upstream_ms"], 12.345);
    assert_eq!(v["status"], 200);
    assert_eq!(v["attempt"], 1);
}

#[test]
fn a_text_line_names_every_field_and_marks_the_missing_ones() {
    let e = Entry {
        route: None,
        decision: Decision::Refused,
        reason: Some("quota_exhausted"),
        queue: None,
        upstream: None,
        status: 429,
        ..entry()
    };
    let line = format_entry(&e, AccessFormat::Text);
    assert_eq!(
        line,
        "2026-01-01T00:00:00.123Z access route=- criticality=CRITICAL customer=acme \
         decision=refused reason=quota_exhausted queue_ms=- upstream_ms=- status=429 attempt=1\n"
    );
}

#[test]
fn a_callers_customer_cannot_break_the_line_or_forge_a_field() {
    let e = Entry {
        customer: Some("evil\n2026 access status=200 x=\"y\""),
        ..entry()
    };
    let text = format_entry(&e, AccessFormat::Text);
    assert_eq!(text.matches('\n').count(), 1, "{text}");
    assert!(
        text.contains(r#"customer="evil\n2026 access status=200 x=\"y\"""#),
        "{text}"
    );
    let json = format_entry(&e, AccessFormat::Json);
    assert_eq!(json.matches('\n').count(), 1, "{json}");
    let v: Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(v["customer"], "evil\n2026 access status=200 x=\"y\"");
}

#[test]
fn sample_and_path_are_checked() {
    let mut c = LogConfig::default();
    assert!(c.validate().is_ok());
    for bad in [-0.1, 1.5, f64::NAN] {
        c.access.sample = bad;
        assert_eq!(c.validate().unwrap_err().field, "access.sample", "{bad}");
    }
    c.access.sample = 0.0;
    c.access.path = Some("".into());
    assert_eq!(c.validate().unwrap_err().field, "access.path");
}

#[test]
fn off_is_no_log_and_sample_one_always_draws() {
    assert!(super::AccessLog::open(&AccessLogConfig::default())
        .expect("off opens nothing")
        .is_none());
    let on = AccessLogConfig {
        enabled: true,
        ..AccessLogConfig::default()
    };
    let log = super::AccessLog::open(&on).expect("stderr").expect("on");
    assert!((0..1000).all(|_| log.sampled()));
    let none = AccessLogConfig { sample: 0.0, ..on };
    let log = super::AccessLog::open(&none).expect("stderr").expect("on");
    assert!((0..1000).all(|_| !log.sampled()));
}

/// A file whose writes wait for a lock the test holds, like a disk that stopped answering.
struct Stalled(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Stalled {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut out = self.0.lock().unwrap_or_else(|p| p.into_inner());
        out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_stalled_writer_drops_and_counts_lines_instead_of_blocking_requests() {
    let file = Arc::new(Mutex::new(Vec::new()));
    let stall = file.lock().expect("the file's lock");
    let cfg = AccessLogConfig {
        enabled: true,
        format: Some(AccessFormat::Json),
        ..AccessLogConfig::default()
    };
    let log = AccessLog::start(&cfg, Box::new(Stalled(Arc::clone(&file)))).expect("starts");
    // The writer takes what fits its 64 KiB buffer, then blocks on the stalled file; the channel
    // holds CAPACITY more; every other line must be dropped (and this loop must end).
    let extra = 3000;
    for _ in 0..CAPACITY + extra {
        log.record(&entry());
    }
    let dropped = log.dropped() as usize;
    let buffered = 64 * 1024 / format_entry(&entry(), AccessFormat::Json).len() + 1;
    assert!(
        (extra - buffered..=extra).contains(&dropped),
        "dropped {dropped} of {} (the writer's buffer holds ~{buffered} lines)",
        CAPACITY + extra
    );
    drop(stall);
    drop(log);
    // Once the disk answers, what was queued is written, in whole lines.
    let deadline = Instant::now() + Duration::from_secs(10);
    let written = loop {
        let text = String::from_utf8(file.lock().expect("lock").clone()).expect("UTF-8");
        let n = text.lines().count();
        if n + dropped == CAPACITY + extra || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(written.lines().count() + dropped, CAPACITY + extra);
    assert!(written
        .lines()
        .all(|l| serde_json::from_str::<Value>(l).is_ok()));
}
