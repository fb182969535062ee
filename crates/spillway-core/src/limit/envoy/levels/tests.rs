use super::*;

const MS: u64 = 1_000_000;

/// A small deterministic spread of latencies (0.5–1.5 ×), independent of the level.
fn jitter(i: u64) -> u64 {
    (i * 7919 % 101) * MS / 100 + MS / 2
}

#[test]
fn one_worker_latency_per_level_gives_the_latency_alone() {
    // One worker, 1 ms each: admitted with k in flight, an answer takes about k ms. The
    // median of all 25 is 3 ms; alone it is 1 ms.
    let mut f = LevelFit::default();
    for i in 0..25u64 {
        let k = 1 + i % 5;
        f.record(k as usize, k * MS + (i % 3) * MS / 20);
    }
    let one = f.at_one().expect("latency follows the level");
    assert!((one - 1e6).abs() < 0.1e6, "{one}");
}

#[test]
fn latency_flat_across_levels_keeps_the_median() {
    // Workers to spare at every level: the level says nothing about latency.
    let mut f = LevelFit::default();
    for i in 0..25u64 {
        f.record(1 + (i % 5) as usize, jitter(i));
    }
    assert_eq!(f.at_one(), None);
}

#[test]
fn a_few_samples_or_one_level_make_no_test() {
    let mut f = LevelFit::default();
    for k in 1..=5u64 {
        f.record(k as usize, k * MS);
    }
    assert_eq!(f.at_one(), None, "5 samples");
    let mut g = LevelFit::default();
    for i in 0..25u64 {
        g.record(3, jitter(i));
    }
    assert_eq!(g.at_one(), None, "one level: no slope to see");
    g.clear();
    assert_eq!(g.points.len(), 0);
}

#[test]
fn one_slow_answer_at_the_top_level_is_no_slope() {
    // A bimodal service's rare slow answer (20 ×) at the highest level: ranks, not sizes.
    let mut f = LevelFit::default();
    for i in 0..24u64 {
        f.record(1 + (i % 5) as usize, jitter(i));
    }
    f.record(5, 20 * MS);
    assert_eq!(f.at_one(), None);
}

#[test]
fn never_below_the_fastest_answer() {
    // Steep at the low levels and flat above: the line may point below every sample.
    let mut f = LevelFit::default();
    for i in 0..30u64 {
        let k = 1 + i % 5;
        f.record(k as usize, [2, 8, 9, 9, 9][(k - 1) as usize] * MS);
    }
    let one = f.at_one().expect("latency follows the level");
    assert!(one >= 2e6, "{one}");
}

#[test]
fn two_workers_latency_alone_is_the_flat_part_not_the_line() {
    // Two workers, 40 ms ± 50 %: one or two in flight run at once, three to five queue. A
    // straight line through the rise lies below the flat part at one in flight.
    let mut f = LevelFit::default();
    for i in 0..60u64 {
        let k = 1 + i % 5;
        let service = 20 * MS + (i * 7919 % 41) * MS;
        let wait = k.saturating_sub(2) * 20 * MS;
        f.record(k as usize, service + wait);
    }
    let one = f.at_one().expect("latency follows the level");
    assert!((35e6..=45e6).contains(&one), "{one}");
}

#[test]
fn one_worker_with_answers_alone_keeps_the_line() {
    // One worker: level two already queues; no flat part above one in flight.
    let mut f = LevelFit::default();
    for i in 0..40u64 {
        let k = 1 + i % 4;
        f.record(k as usize, k * 10 * MS + jitter(i) / 10);
    }
    let one = f.at_one().expect("latency follows the level");
    assert!((10e6..=10.2e6).contains(&one), "{one}");
}

#[test]
fn the_cut_floor_is_one_level_below_the_lowest_seen_for_the_share_the_window_used() {
    // Nothing extrapolated: no floor.
    assert_eq!(cut_floor(1, 5, 5), 0);
    // The window filled the limit: one level below 4.
    assert_eq!(cut_floor(4, 5, 5), 3);
    // It used 4 of 5 (the ladder's share for the lowest criticality): 3 in flight needs 4.
    assert_eq!(cut_floor(4, 5, 4), 4);
    // A share below one half counts as one half; never above the limit being cut.
    assert_eq!(cut_floor(4, 10, 1), 6);
    assert_eq!(cut_floor(8, 5, 5), 5);
    assert_eq!(cut_floor(4, 0, 0), 0);
}
