use super::*;

const S: Duration = Duration::from_secs(1);

#[test]
fn a_slice_is_one_word_for_one_count_or_two() {
    let t0 = Instant::now();
    let p = Windowed::<2>::new(Duration::from_secs(120), 120, t0);
    assert_eq!(std::mem::size_of_val(&*p.buckets), 120 * 8);
    // The packing round-trips at the extremes of every field.
    for w in [
        Word {
            tag: u16::MAX,
            counts: [Windowed::<2>::MAX_SLICE_COUNT as u32, 0],
        },
        Word {
            tag: 0,
            counts: [0, Windowed::<2>::MAX_SLICE_COUNT as u32],
        },
        Word {
            tag: 0x8001,
            counts: [1, 2],
        },
    ] {
        assert_eq!(Word::unpack(w.pack()), w);
    }
    let one = Word {
        tag: 0x8001,
        counts: [u32::MAX],
    };
    assert_eq!(Word::<1>::unpack(one.pack()), one);
    assert_eq!(
        one.pack() >> 32,
        0x8001 << 16,
        "the tag sits where a pair's does"
    );
}

#[test]
fn forgets_exactly_one_window_later_and_after_a_long_silence() {
    let t0 = Instant::now();
    let c = Windowed::<2>::new(Duration::from_secs(10), 10, t0);
    c.add(t0 + Duration::from_millis(500), 0, 7); // slice 0
    c.add(t0 + S * 3, 0, 2); // slice 3
    c.add(t0 + S * 3, 1, 4);
    c.add(t0 + S * 3, 2, 5); // no such count: ignored
    assert_eq!(c.sums(t0 + Duration::from_millis(9_999)), [9, 4]);
    assert_eq!(c.sums(t0 + S * 10), [2, 4]); // slice 0 has left
    c.add(t0 + S * 13, 0, 1); // reuses slice 3's bucket: its 2 and 4 leave as the 1 arrives
    assert_eq!(c.sums(t0 + S * 13), [1, 0]);
    assert_eq!(c.sums(t0 + S * 1_000_000), [0, 0]);
    assert_eq!(c.raw_totals(), [0, 0]);
}

#[test]
fn counts_saturate_per_slice_and_the_totals_follow_the_buckets() {
    let t0 = Instant::now();
    let c = Windowed::<2>::new(Duration::from_secs(10), 10, t0);
    c.add(t0, 0, Windowed::<2>::MAX_SLICE_COUNT - 1);
    c.add(t0, 0, 5); // saturates: only 1 more fits in slice 0
    c.add(t0, 1, u64::MAX); // one add past the limit is clamped too
    c.add(t0 + S, 0, 5); // the next slice counts afresh
    assert_eq!(
        c.sums(t0 + S),
        [
            Windowed::<2>::MAX_SLICE_COUNT + 5,
            Windowed::<2>::MAX_SLICE_COUNT
        ]
    );
    assert_eq!(c.sums_by_scan(t0 + S), c.sums(t0 + S));
    assert_eq!(c.sums(t0 + S * 10), [5, 0]);
    assert_eq!(c.sums(t0 + S * 11), [0, 0]);
    assert_eq!(c.raw_totals(), [0, 0]);
}

#[test]
fn a_silence_of_a_whole_tag_cycle_forgets_everything() {
    // 2^16 windows is where the 16-bit tag repeats: a stale bucket's tag then equals the new
    // window's round. The unconditional clear after 2^14 silent windows must still forget it.
    let t0 = Instant::now();
    let c = Windowed::<2>::new(Duration::from_secs(2), 2, t0);
    c.add(t0, 0, 3);
    c.add(t0 + S, 1, 4);
    for windows in [
        1u64 << 16,
        (1 << 16) + 1,
        3 << 14,
        1 << 14,
        (1 << 14) - 1,
        2,
    ] {
        let c2 = Windowed::<2>::new(Duration::from_secs(2), 2, t0);
        c2.add(t0, 0, 3);
        c2.add(t0 + S, 1, 4);
        let later = t0 + S * (2 * windows) as u32;
        assert_eq!(c2.sums(later), [0, 0], "silence of {windows} windows");
        assert_eq!(c2.raw_totals(), [0, 0]);
        // And a writer that arrives first after the silence (no read) starts afresh too.
        let c3 = Windowed::<2>::new(Duration::from_secs(2), 2, t0);
        c3.add(t0, 0, 3);
        c3.add(later, 1, 1);
        assert_eq!(
            c3.sums(later),
            [0, 1],
            "silence of {windows} windows, write first"
        );
        // The fresh bucket carries the new round, whatever tag the clear left behind.
        assert_eq!(
            c3.sums_by_scan(later),
            [0, 1],
            "{windows} windows, bucket scan"
        );
    }
    assert_eq!(c.sums(t0 + S), [3, 4]);
}

#[test]
fn lagging_writers_count_at_the_newest_swept_slice() {
    let t0 = Instant::now();
    let c = Windowed::<2>::new(Duration::from_secs(10), 10, t0);
    assert_eq!(c.sums(t0 + S * 25), [0, 0]);
    c.add(t0 + S * 2, 0, 3); // a whole window behind: counted at slice 25, not lost
    assert_eq!(c.sums(t0 + S * 25), [3, 0]);
    assert_eq!(c.sums(t0 + S * 20), [3, 0]); // a lagging reader sees the newest window
    assert_eq!(c.sums(t0 + S * 34), [3, 0]);
    assert_eq!(c.sums(t0 + S * 35), [0, 0]);
    assert_eq!(c.raw_totals(), [0, 0]);
}
