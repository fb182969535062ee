use super::*;
use std::sync::Arc;

const S: Duration = Duration::from_secs(1);

fn counter(window_secs: u64, buckets: usize) -> (WindowedCounter, Instant) {
    let t0 = Instant::now();
    (
        WindowedCounter::new(Duration::from_secs(window_secs), buckets, t0),
        t0,
    )
}

#[test]
fn counts_within_the_window() {
    let (c, t0) = counter(10, 10);
    c.add(t0, 3);
    assert_eq!(c.sum(t0), 3);
    c.add(t0 + S * 4, 2);
    assert_eq!(c.sum(t0 + S * 4), 5);
    assert_eq!(c.sum(t0 + S * 9), 5);
}

#[test]
fn bucket_expires_exactly_one_window_later() {
    let (c, t0) = counter(10, 10);
    c.add(t0 + Duration::from_millis(500), 7); // slice 0
    assert_eq!(c.sum(t0 + Duration::from_millis(9_999)), 7); // slice 9: still inside
    assert_eq!(c.sum(t0 + S * 10), 0); // slice 10 reuses bucket 0: forgotten
}

#[test]
fn roll_over_resets_the_reused_bucket_lazily() {
    let (c, t0) = counter(10, 10);
    c.add(t0 + S * 3, 4); // slice 3, round 0
    c.add(t0 + S * 5, 1); // slice 5
    c.add(t0 + S * 13, 2); // slice 13: same bucket as slice 3, round 1 — the 4 must go
    assert_eq!(c.sum(t0 + S * 13), 1 + 2);
    assert_eq!(c.sum(t0 + S * 15), 2); // slice 5 has left the window too
    assert_eq!(c.sum(t0 + S * 23), 0);
}

#[test]
fn forgets_everything_after_a_long_silence() {
    let (c, t0) = counter(120, 120);
    for s in 0..120 {
        c.add(t0 + S * s, 1);
    }
    assert_eq!(c.sum(t0 + S * 119), 120);
    // Exactly the same bucket indices, many rounds later: every tag is stale.
    assert_eq!(c.sum(t0 + S * (120 * 1000 + 119)), 0);
    c.add(t0 + S * (120 * 1000 + 5), 1);
    assert_eq!(c.sum(t0 + S * (120 * 1000 + 119)), 1);
}

#[test]
fn a_write_from_a_lagging_clock_is_not_lost() {
    let (c, t0) = counter(10, 10);
    c.add(t0 + S * 12, 1); // bucket 2, round 1
    c.add(t0 + S * 2, 1); // a thread whose `now` is a whole window behind: lands in round 1
    assert_eq!(c.sum(t0 + S * 12), 2);
    // And a reader a little behind the writers still sees the raced-ahead events.
    let (c, t0) = counter(10, 10);
    c.add(t0 + S * 5, 1);
    assert_eq!(c.sum(t0 + S * 4), 1);
}

#[test]
fn take_back_only_touches_the_round_it_added_to() {
    let (c, t0) = counter(10, 10);
    let landed = c.add_landed(t0, 3).expect("n > 0 lands");
    c.take_back(landed, 1);
    assert_eq!(c.sum(t0), 2);
    c.take_back(landed, 5); // saturates, never wraps
    assert_eq!(c.sum(t0), 0);
    assert_eq!(c.add_landed(t0, 0), None);
    let old = c.add_landed(t0, 1).expect("lands");
    c.add(t0 + S * 10, 4); // bucket 0, round 1: the round-0 event is gone
    c.take_back(old, 1); // must not eat a round-1 event
    assert_eq!(c.sum(t0 + S * 10), 4);
}

#[test]
fn degenerate_construction_is_clamped_not_panicking() {
    let t0 = Instant::now();
    let c = WindowedCounter::new(Duration::ZERO, 0, t0);
    assert_eq!(c.buckets(), 1);
    assert_eq!(c.slice(), Duration::from_nanos(1));
    c.add(t0, 1);
    assert_eq!(c.sum(t0), 1);
    assert_eq!(c.sum(t0 + Duration::from_nanos(1)), 0);
    let c = WindowedCounter::new(Duration::MAX, usize::MAX, t0);
    assert_eq!(c.buckets(), MAX_BUCKETS);
    c.add(t0, u64::MAX); // saturates the bucket at u32::MAX
    assert_eq!(c.sum(t0), u64::from(u32::MAX));
    // `now` before the origin counts as the origin's slice.
    let c = WindowedCounter::new(Duration::from_secs(10), 10, t0 + S);
    c.add(t0, 1);
    assert_eq!(c.sum(t0 + S), 1);
}

#[test]
fn concurrent_adds_are_exact() {
    let (c, t0) = counter(10, 10);
    let c = Arc::new(c);
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let c = Arc::clone(&c);
            std::thread::spawn(move || {
                for i in 0..50_000u64 {
                    // Spread over several buckets, all inside one window.
                    c.add(t0 + Duration::from_millis((i + t) % 9_000), 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("adder thread panicked");
    }
    assert_eq!(c.sum(t0 + S * 9), 200_000);
}

/// The per-bucket formula `sum` used before it was hoisted out of the loop: the most recent
/// slice ≡ i (mod len) not after `now`, its round, and a match on 0 or 1 round ahead.
fn reference_sum(c: &WindowedCounter, now: Instant) -> u64 {
    let slice = c.slice_at(now);
    let len = c.len();
    let mut total = 0u64;
    for (i, bucket) in c.buckets.iter().enumerate() {
        let i = i as u64;
        let expected: i64 = if slice >= i {
            ((slice - (slice - i) % len) / len) as i64
        } else {
            -1
        };
        let (tag, count) = unpack(bucket.load(Ordering::SeqCst));
        let ahead = tag.wrapping_sub(expected as u32) as i32;
        if ahead == 0 || ahead == 1 {
            total += u64::from(count);
        }
    }
    total
}

proptest::proptest! {
    /// `sum` agrees with the reference formula at any `now`, after adds at
    /// any times (lagging and raced-ahead writers included) and take-backs.
    #[test]
    fn sums_match_the_per_bucket_formula(
        buckets in 1usize..14,
        adds in proptest::collection::vec((0u64..40_000, 0u64..4, proptest::bool::ANY), 0..60),
        reads in proptest::collection::vec(0u64..45_000, 1..12),
    ) {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let a = WindowedCounter::new(Duration::from_secs(10), buckets, t0);
        let b = WindowedCounter::new(Duration::from_secs(10), buckets, t0);
        for (at, n, other) in adds {
            let c = if other { &b } else { &a };
            if let Some(landed) = c.add_landed(t0 + ms(at), n) {
                if at % 3 == 0 {
                    c.take_back(landed, 1);
                }
            }
        }
        for at in reads {
            let now = t0 + ms(at);
            proptest::prop_assert_eq!(a.sum(now), reference_sum(&a, now));
            proptest::prop_assert_eq!(b.sum(now), reference_sum(&b, now));
        }
    }
}

#[test]
fn is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<WindowedCounter>();
}

/// Brute force for [`WindowedTotals`]: the events (at `ns` since the origin) whose slice is one
/// of the `buckets` slices ending at `now_ns`'s.
fn brute_force_sum(events: &[(u64, u64)], slice_ns: u64, buckets: u64, now_ns: u64) -> u64 {
    let now_slice = now_ns / slice_ns;
    events
        .iter()
        .filter(|(at, _)| at / slice_ns <= now_slice && at / slice_ns + buckets > now_slice)
        .map(|(_, n)| n)
        .sum()
}

proptest::proptest! {
    /// The O(1) running totals equal a brute-force sum over every event recorded — and the
    /// bucket-by-bucket scan — for both counts, after any sequence of advances (short steps,
    /// long silences spanning many windows) and adds, read at any point.
    #[test]
    fn running_totals_equal_a_brute_force_sum(
        buckets in 1usize..14,
        window_ms in 1u64..20_000,
        steps in proptest::collection::vec(
            (
                proptest::prop_oneof![0u64..20, 0u64..2_000, 0u64..100_000],
                0u64..5,
                0usize..3, // 0, 1: add to that count; 2: read
            ),
            0..200,
        ),
    ) {
        let t0 = Instant::now();
        let c = WindowedTotals::<2>::new(Duration::from_millis(window_ms), buckets, t0);
        let slice_ns = saturating_nanos(c.slice());
        let mut now_ns = 0u64;
        let mut events = [Vec::new(), Vec::new()];
        for (advance_ms, n, action) in steps {
            now_ns += advance_ms * 1_000_000 + n * 333_333; // off the millisecond grid too
            let now = t0 + Duration::from_nanos(now_ns);
            if action < 2 {
                c.add(now, action, n);
                events[action].push((now_ns, n));
                continue;
            }
            let expected = events
                .each_ref()
                .map(|e| brute_force_sum(e, slice_ns, buckets as u64, now_ns));
            proptest::prop_assert_eq!(c.sums(now), expected);
            proptest::prop_assert_eq!([c.sum_by_scan(now, 0), c.sum_by_scan(now, 1)], expected);
            proptest::prop_assert_eq!(c.raw_totals(), expected.map(|e| e as i64));
        }
        let now = t0 + Duration::from_nanos(now_ns);
        let expected = events
            .each_ref()
            .map(|e| brute_force_sum(e, slice_ns, buckets as u64, now_ns));
        proptest::prop_assert_eq!(c.sums(now), expected);
    }
}

#[test]
fn running_total_forgets_exactly_one_window_later() {
    let t0 = Instant::now();
    let c = WindowedTotals::<1>::new(Duration::from_secs(10), 10, t0);
    c.add(t0 + Duration::from_millis(500), 0, 7); // slice 0
    c.add(t0 + S * 3, 0, 2); // slice 3
    c.add(t0 + S * 3, 1, 5); // no such count: ignored
    assert_eq!(c.sums(t0 + Duration::from_millis(9_999)), [9]); // slice 9: both inside
    assert_eq!(c.sums(t0 + S * 10), [2]); // slice 10: slice 0 has left
    c.add(t0 + S * 13, 0, 1); // reuses slice 3's bucket: the 2 leave as the 1 arrives
    assert_eq!(c.sums(t0 + S * 13), [1]);
    assert_eq!(c.sums(t0 + S * 1_000_000), [0]); // a long silence: everything is forgotten
    assert_eq!(c.raw_totals(), [0]);
}

#[test]
fn running_total_clamps_lagging_clocks_forward() {
    let t0 = Instant::now();
    let c = WindowedTotals::<1>::new(Duration::from_secs(10), 10, t0);
    assert_eq!(c.sums(t0 + S * 25), [0]); // a reader has seen slice 25
    c.add(t0 + S * 2, 0, 3); // a writer a whole window behind: counted at slice 25, not lost
    assert_eq!(c.sums(t0 + S * 25), [3]);
    assert_eq!(c.sums(t0 + S * 20), [3]); // a lagging reader sees the newest window
    assert_eq!(c.sums(t0 + S * 34), [3]);
    assert_eq!(c.sums(t0 + S * 35), [0]);
    assert_eq!(c.raw_totals(), [0]);
}

#[test]
fn running_totals_are_exact_under_concurrent_writers_and_sweeping_readers() {
    exact_under_concurrent_writers_and_sweeping_readers(|w, b, t0| {
        WindowedTotals::<2>::new(w, b, t0)
    });
}

/// Two windowed counts with running totals: [`WindowedTotals<2>`] here, `WindowedPair` in
/// `pair/tests.rs` — one concurrency test for both.
pub(super) trait TwoCounts: Send + Sync + 'static {
    fn add(&self, now: Instant, which: usize, n: u64);
    fn sums(&self, now: Instant) -> [u64; 2];
    fn raw_totals(&self) -> [i64; 2];
}

impl TwoCounts for WindowedTotals<2> {
    fn add(&self, now: Instant, which: usize, n: u64) {
        WindowedTotals::add(self, now, which, n)
    }
    fn sums(&self, now: Instant) -> [u64; 2] {
        WindowedTotals::sums(self, now)
    }
    fn raw_totals(&self) -> [i64; 2] {
        WindowedTotals::raw_totals(self)
    }
}

/// Writers walk forward through 40 s (four 10 s windows), readers sweep behind and ahead of
/// them: buckets are reset by writers and retired by readers concurrently. Quiescent, the
/// last window holds some of the 80,000 events, and once everything has expired both totals
/// are exactly 0 — no event was subtracted twice or left behind.
pub(super) fn exact_under_concurrent_writers_and_sweeping_readers<C: TwoCounts>(
    make: impl FnOnce(Duration, usize, Instant) -> C,
) {
    let t0 = Instant::now();
    let c = Arc::new(make(Duration::from_secs(10), 10, t0));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let c = Arc::clone(&c);
            std::thread::spawn(move || {
                for i in 0..40_000u64 {
                    let now = t0 + Duration::from_millis(i + t * 7);
                    if t % 2 == 0 {
                        c.add(now, (i % 2) as usize, 1);
                    } else {
                        let _ = c.sums(now);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread panicked");
    }
    let [a, b] = c.sums(t0 + S * 40);
    assert!(a > 0 && b > 0 && a + b <= 80_000, "{a} {b}");
    assert_eq!(c.sums(t0 + S * 1_000), [0, 0]);
    assert_eq!(c.raw_totals(), [0, 0]);
}

#[test]
fn running_totals_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<WindowedTotals<2>>();
}
