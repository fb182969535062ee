//! Copies of one fleet run side by side, one thread each, optionally in lockstep windows of
//! simulated time: a measurement of what a parallel engine's synchronisation would cost on
//! this machine, not a way to run a scenario.
//!
//! Why: a parallel engine would split a fleet into shards that each run one window of
//! simulated time (the smallest network delay) and then wait for each other. Two independent
//! half fleets bound what it could gain (bench/results/sim-speed.md); running them in lockstep
//! adds what it would pay — a barrier per window, and the wait for the slower shard of each
//! window — before a line of the engine itself is written. Results are not merged: each copy
//! is its own fleet, and only the wall time and the requests are reported.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{Scenario, SimError};

/// What [`lockstep`] measured.
#[derive(Debug, Clone, Copy)]
pub struct LockstepRun {
    /// Wall time from the start of the first window to the end of the last (fleets built).
    pub wall: Duration,
    /// Top-level requests simulated, over all copies.
    pub requests: u64,
    /// Windows run (0 when free-running).
    pub windows: u64,
}

/// Runs `copies` copies of `sc`, one thread each; with `window`, in lockstep windows of that
/// much simulated time (every copy finishes a window before any starts the next), otherwise
/// each as fast as it goes. Each thread builds its own fleet first; the clock starts when
/// all are built.
#[doc(hidden)]
pub fn lockstep(
    sc: &Scenario,
    copies: usize,
    window: Option<Duration>,
) -> Result<LockstepRun, SimError> {
    sc.validate()?;
    let copies = copies.max(1);
    let window_ns = window.map(|w| u64::try_from(w.as_nanos()).unwrap_or(u64::MAX).max(1));
    let built = SpinBarrier::new(copies);
    let windows = SpinBarrier::new(copies);
    let started = std::sync::OnceLock::new();
    let results: Vec<Result<(u64, u64), SimError>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..copies)
            .map(|_| {
                scope.spawn(|| {
                    let engine = super::build(sc, "lockstep", super::model::Part::WHOLE);
                    // Every thread reaches the barrier, built or not, so none waits forever.
                    let ok = engine.is_ok();
                    let all_ok = !built.wait(!ok);
                    let mut engine = match engine {
                        Ok(e) if all_ok => e,
                        Ok(_) => return Ok((0, 0)),
                        Err(e) => return Err(e),
                    };
                    started.get_or_init(Instant::now);
                    engine.built();
                    let mut n = 0u64;
                    match window_ns {
                        None => while engine.run_until(u64::MAX) {},
                        Some(w) => {
                            let mut until = 0u64;
                            loop {
                                until = until.saturating_add(w);
                                let more = engine.run_until(until);
                                n += 1;
                                if !windows.wait(more) {
                                    break;
                                }
                            }
                        }
                    }
                    Ok((engine.finish().offered, n))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let wall = started.get().map_or(Duration::ZERO, Instant::elapsed);
    let mut run = LockstepRun {
        wall,
        requests: 0,
        windows: 0,
    };
    for r in results {
        let (requests, windows) = r?;
        run.requests += requests;
        run.windows = run.windows.max(windows);
    }
    Ok(run)
}

/// A barrier for a few threads that each arrive every ~100 µs: spins (a futex sleep and wake
/// per window would cost a good part of that), then yields, as a shared machine deschedules a
/// thread now and then. Each [`wait`](Self::wait) also ORs a flag over the threads.
pub(super) struct SpinBarrier {
    n: usize,
    arrived: AtomicUsize,
    round: AtomicUsize,
    /// The flag's OR, per round parity: the last to arrive clears the next round's before it
    /// opens this one, and every thread reads this round's before it can arrive at the next.
    any: [AtomicBool; 2],
}

impl SpinBarrier {
    pub(super) fn new(n: usize) -> SpinBarrier {
        SpinBarrier {
            n,
            arrived: AtomicUsize::new(0),
            round: AtomicUsize::new(0),
            any: [AtomicBool::new(false), AtomicBool::new(false)],
        }
    }

    /// Waits until all `n` threads have arrived; returns whether any passed `flag` true.
    pub(super) fn wait(&self, flag: bool) -> bool {
        let round = self.round.load(Ordering::Acquire);
        let any = &self.any[round & 1];
        if flag {
            any.store(true, Ordering::Relaxed);
        }
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.arrived.store(0, Ordering::Relaxed);
            self.any[(round + 1) & 1].store(false, Ordering::Relaxed);
            self.round.store(round.wrapping_add(1), Ordering::Release);
        } else {
            let mut spins = 0u32;
            while self.round.load(Ordering::Acquire) == round {
                spins = spins.saturating_add(1);
                if spins < 20_000 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        any.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
