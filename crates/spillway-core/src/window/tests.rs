use super::*;
use std::sync::Arc;

const S: Duration = Duration::from_secs(1);

/// One count over `window_secs` in `buckets` buckets.
fn counter(window_secs: u64, buckets: usize) -> (Windowed<1>, Instant) {
    let t0 = Instant::now();
    (
        Windowed::new(Duration::from_secs(window_secs), buckets, t0),
        t0,
    )
}

#[test]
fn counts_within_the_window() {
    let (c, t0) = counter(10, 10);
    c.add(t0, 0, 3);
    assert_eq!(c.sums(t0), [3]);
    c.add(t0 + S * 4, 0, 2);
    assert_eq!(c.sums(t0 + S * 4), [5]);
    assert_eq!(c.sums(t0 + S * 9), [5]);
}

#[test]
fn bucket_expires_exactly_one_window_later() {
    let (c, t0) = counter(10, 10);
    c.add(t0 + Duration::from_millis(500), 0, 7); // slice 0
    assert_eq!(c.sums(t0 + Duration::from_millis(9_999)), [7]); // slice 9: still inside
    assert_eq!(c.sums(t0 + S * 10), [0]); // slice 10 reuses bucket 0: forgotten
}

#[test]
fn roll_over_resets_the_reused_bucket() {
    let (c, t0) = counter(10, 10);
    c.add(t0 + S * 3, 0, 4); // slice 3, round 0
    c.add(t0 + S * 5, 0, 1); // slice 5
    c.add(t0 + S * 13, 0, 2); // slice 13: same bucket as slice 3, round 1 — the 4 must go
    assert_eq!(c.sums(t0 + S * 13), [1 + 2]);
    assert_eq!(c.sums(t0 + S * 15), [2]); // slice 5 has left the window too
    assert_eq!(c.sums(t0 + S * 23), [0]);
    assert_eq!(c.raw_totals(), [0]);
}

#[test]
fn forgets_everything_after_a_long_silence() {
    let (c, t0) = counter(120, 120);
    for s in 0..120 {
        c.add(t0 + S * s, 0, 1);
    }
    assert_eq!(c.sums(t0 + S * 119), [120]);
    // Exactly the same bucket indices, many rounds later: every event has left.
    assert_eq!(c.sums(t0 + S * (120 * 1000 + 119)), [0]);
    c.add(t0 + S * (120 * 1000 + 119), 0, 1);
    assert_eq!(c.sums(t0 + S * (120 * 1000 + 119)), [1]);
}

#[test]
fn a_lagging_writer_counts_at_the_newest_swept_slice() {
    let (c, t0) = counter(10, 10);
    assert_eq!(c.sums(t0 + S * 25), [0]); // a reader has seen slice 25
    c.add(t0 + S * 2, 0, 3); // a writer a whole window behind: counted at slice 25, not lost
    c.add(t0 + S * 3, 1, 5); // no such count: ignored
    assert_eq!(c.sums(t0 + S * 25), [3]);
    assert_eq!(c.sums(t0 + S * 20), [3]); // a lagging reader sees the newest window
    assert_eq!(c.sums(t0 + S * 34), [3]);
    assert_eq!(c.sums(t0 + S * 35), [0]);
    assert_eq!(c.raw_totals(), [0]);
}

#[test]
fn take_back_only_touches_the_round_it_added_to() {
    let (c, t0) = counter(10, 10);
    let landed = c.add_landed(t0, 0, 3).expect("n > 0 lands");
    c.take_back(landed, 0, 1);
    assert_eq!(c.sums(t0), [2]);
    c.take_back(landed, 0, 5); // at most what it added, never wraps
    assert_eq!(c.sums(t0), [0]);
    assert_eq!(c.add_landed(t0, 0, 0), None);
    assert_eq!(c.add_landed(t0, 1, 1), None);
    let old = c.add_landed(t0, 0, 1).expect("lands");
    c.add(t0 + S * 10, 0, 4); // bucket 0, round 1: the round-0 event is gone
    c.take_back(old, 0, 1); // must not eat a round-1 event
    assert_eq!(c.sums(t0 + S * 10), [4]);
}

#[test]
fn degenerate_construction_is_clamped_not_panicking() {
    let t0 = Instant::now();
    let c = Windowed::<1>::new(Duration::ZERO, 0, t0);
    assert_eq!(c.buckets(), 1);
    assert_eq!(c.slice(), Duration::from_nanos(1));
    c.add(t0, 0, 1);
    assert_eq!(c.sums(t0), [1]);
    assert_eq!(c.sums(t0 + Duration::from_nanos(1)), [0]);
    let c = Windowed::<1>::new(Duration::MAX, usize::MAX, t0);
    assert_eq!(c.buckets(), MAX_BUCKETS);
    c.add(t0, 0, u64::MAX); // saturates the slice at u32::MAX
    assert_eq!(c.sums(t0), [u64::from(u32::MAX)]);
    assert_eq!(Windowed::<1>::MAX_SLICE_COUNT, u64::from(u32::MAX));
    // `now` before the origin counts as the origin's slice.
    let c = Windowed::<1>::new(Duration::from_secs(10), 10, t0 + S);
    c.add(t0, 0, 1);
    assert_eq!(c.sums(t0 + S), [1]);
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
                    c.add(t0 + Duration::from_millis((i + t) % 9_000), 0, 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("adder thread panicked");
    }
    assert_eq!(c.sums(t0 + S * 9), [200_000]);
}

/// Brute force: the events (at `ns` since the origin) whose slice is one of the `buckets`
/// slices ending at `now_ns`'s.
fn brute_force_sum(events: &[(u64, u64)], slice_ns: u64, buckets: u64, now_ns: u64) -> u64 {
    let now_slice = now_ns / slice_ns;
    events
        .iter()
        .filter(|(at, _)| at / slice_ns <= now_slice && at / slice_ns + buckets > now_slice)
        .map(|(_, n)| n)
        .sum()
}

/// Feeds `steps` (advance, n, action: add to count `action`, or read when `action >= N`) to a
/// `Windowed<N>` and checks every read — the running totals, the bucket scan and the raw
/// totals — against a brute-force sum over every event recorded.
fn check_against_brute_force<const N: usize>(
    buckets: usize,
    window: Duration,
    steps: &[(u64, u64, usize)],
) -> Result<(), proptest::test_runner::TestCaseError> {
    let t0 = Instant::now();
    let c = Windowed::<N>::new(window, buckets, t0);
    let slice_ns = saturating_nanos(c.slice());
    let mut now_ns = 0u64;
    let mut events: [Vec<(u64, u64)>; N] = std::array::from_fn(|_| Vec::new());
    let expected = |events: &[Vec<(u64, u64)>; N], now_ns| {
        events
            .each_ref()
            .map(|e| brute_force_sum(e, slice_ns, buckets as u64, now_ns))
    };
    for &(advance_ns, n, action) in steps {
        now_ns += advance_ns;
        let now = t0 + Duration::from_nanos(now_ns);
        if let Some(e) = events.get_mut(action) {
            c.add(now, action, n);
            e.push((now_ns, n));
            continue;
        }
        let want = expected(&events, now_ns);
        proptest::prop_assert_eq!(c.sums(now), want);
        proptest::prop_assert_eq!(c.sums_by_scan(now), want);
        proptest::prop_assert_eq!(c.raw_totals(), want.map(|e| e as i64));
    }
    let now = t0 + Duration::from_nanos(now_ns);
    proptest::prop_assert_eq!(c.sums(now), expected(&events, now_ns));
    Ok(())
}

proptest::proptest! {
    /// The O(1) running totals equal a brute-force sum over every event recorded — and the
    /// bucket-by-bucket scan — for one count and for two, after any sequence of forward
    /// advances (short steps, silences of many windows, up to ~50,000 windows in all so that
    /// the 16-bit tags wrap for short windows) and adds, read at any point.
    #[test]
    fn running_totals_equal_a_brute_force_sum(
        buckets in 1usize..14,
        window_us in 1u64..20_000_000,
        steps in proptest::collection::vec(
            (
                proptest::prop_oneof![0u64..20, 0u64..2_000, 0u64..100_000],
                0u64..1_000,
                proptest::prop_oneof![0u64..5, 0u64..50_000],
                0usize..3, // below N: add to that count; otherwise read
            ),
            0..200,
        ),
    ) {
        // Off the millisecond grid too; below the per-slice limit (the saturation has its own
        // test), 200 adds of at most 50,000 cannot reach 2^24 in one slice.
        let steps: Vec<(u64, u64, usize)> = steps
            .into_iter()
            .map(|(ms, us, n, action)| (ms * 1_000_000 + us * 1_000, n, action))
            .collect();
        let window = Duration::from_micros(window_us);
        check_against_brute_force::<2>(buckets, window, &steps)?;
        let one: Vec<_> = steps.iter().map(|&(a, n, w)| (a, n, w.min(1) * 2)).collect();
        check_against_brute_force::<1>(buckets, window, &one)?;
    }
}

/// Writers walk forward through 40 s (four 10 s windows), readers sweep behind and ahead of
/// them: buckets are reset by writers and retired by readers concurrently. Quiescent, the
/// last window holds some of the 80,000 events, and once everything has expired both totals
/// are exactly 0 — no event was subtracted twice or left behind.
#[test]
fn exact_under_concurrent_writers_and_sweeping_readers() {
    let t0 = Instant::now();
    let c = Arc::new(Windowed::<2>::new(Duration::from_secs(10), 10, t0));
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
fn is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Windowed<1>>();
    check::<Windowed<2>>();
}
