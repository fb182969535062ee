use super::*;

/// Completions of `arrivals` (ns) served in arrival order by `workers` FIFO workers with the
/// given service times: `(end, latency, in-flight level at admission)`, in order of ending.
fn fifo(workers: usize, arrivals: &[u64], service: &[u64]) -> Vec<(u64, u64, usize)> {
    let mut free = vec![0u64; workers];
    let mut ends: Vec<u64> = Vec::new();
    let mut out = Vec::new();
    for (&a, &s) in arrivals.iter().zip(service) {
        let level = ends.iter().filter(|&&e| e > a).count() + 1;
        let w = (0..workers).min_by_key(|&w| free[w]).unwrap();
        let end = free[w].max(a) + s;
        free[w] = end;
        ends.push(end);
        out.push((end, end - a, level));
    }
    out.sort_unstable();
    out
}

/// Service times spread as an exponential's quantiles, in no ramp (`limit::tests`).
fn exponential(n: usize, mean_ns: f64) -> Vec<u64> {
    crate::limit::tests::exponential_quantiles(n, mean_ns)
        .into_iter()
        .map(|ns| ns as u64)
        .collect()
}

fn run(c: &mut StartCohort, done: &[(u64, u64, usize)]) -> Option<f64> {
    done.iter()
        .find_map(|&(end, rtt, level)| c.on_end(end, rtt, level, true, 5, 0.5))
        .map(|e| e.percentile_ns)
}

#[test]
fn an_upstream_with_workers_to_spare_gives_the_cohorts_median() {
    // 100 workers, 50 ms mean, an arrival every 2.5 ms (400/s, a fifth of the capacity): every
    // admission runs far below the workers.
    let arrivals: Vec<u64> = (0..128).map(|i| i * 2_500_000).collect();
    let service = exponential(128, 50e6);
    let done = fifo(100, &arrivals, &service);
    let mut first: Vec<u64> = service[..COHORT].to_vec();
    first.sort_unstable();
    let m = run(&mut StartCohort::default(), &done).expect("no rise: an estimate");
    assert_eq!(m, first[COHORT / 2 - 1] as f64);
}

#[test]
fn a_one_worker_upstream_rises_at_every_level_and_gives_nothing() {
    // One worker, 10 ms, an arrival every 5 ms: level k waits for k − 1 others.
    let arrivals: Vec<u64> = (0..128).map(|i| i * 5_000_000).collect();
    let service = exponential(128, 10e6);
    let done = fifo(1, &arrivals, &service);
    assert_eq!(run(&mut StartCohort::default(), &done), None);
}

#[test]
fn levels_past_the_workers_are_left_out() {
    // 32 workers, 20 ms constant, all 64 admitted at once: levels 1–32 answer in 20 ms, the
    // rest queue behind them (40 ms). The set up to 32 shows no rise.
    let arrivals = vec![0u64; COHORT];
    let service = vec![20_000_000u64; COHORT];
    let done = fifo(32, &arrivals, &service);
    assert_eq!(run(&mut StartCohort::default(), &done), Some(20e6));
}

#[test]
fn a_timed_out_member_or_ranks_that_collide_give_nothing() {
    let arrivals: Vec<u64> = (0..128).map(|i| i * 2_500_000).collect();
    let service = exponential(128, 50e6);
    let done = fifo(100, &arrivals, &service);
    // The 10th completion to end timed out.
    let mut c = StartCohort::default();
    let got = done
        .iter()
        .enumerate()
        .find_map(|(i, &(end, rtt, level))| c.on_end(end, rtt, level, i != 9, 5, 0.5));
    assert_eq!(got, None);
    assert!(c.done);
    // A release the limit is not told of: every later admission's level is one lower than
    // the completions it saw account for, and two ranks collide.
    let mut c = StartCohort::default();
    let got = done
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != 3)
        .find_map(|(_, &(end, rtt, level))| c.on_end(end, rtt, level, true, 5, 0.5));
    assert_eq!(got, None);
    assert!(c.done);
    assert!(c.seen.count_ones() < COHORT as u32);
}

#[test]
fn a_cohort_that_never_completes_is_given_up() {
    let mut c = StartCohort::default();
    // Rank 1 never answers: every completion is a later admission's (ranks past the cohort).
    for i in 0..MAX_COMPLETIONS as u64 {
        assert_eq!(c.on_end(1_000 + i, 10, COHORT + 1, true, 5, 0.5), None);
        assert!(!c.done);
    }
    assert_eq!(c.on_end(5_000, 10, COHORT + 1, true, 5, 0.5), None);
    assert!(c.done);
}
