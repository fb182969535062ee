//! One run of a fleet split into shards, one thread each, advancing together in windows of
//! simulated time.
//!
//! Why windows of a fraction of the smallest network delay: a shard can simulate its part of
//! the fleet alone for as long as nothing from another shard can reach it, and nothing can in
//! less than one network delay `L` (an attempt, an answer and a cancellation each cross one).
//! So time is cut into windows of `L / LAG`; a shard runs the events of its window, posts what
//! it sent, and before window `w` takes what the others sent in window `w - LAG` — all due in
//! window `w` or later — once they have all finished it (conservative synchronous simulation:
//! Chandy & Misra, "Distributed simulation: a case study in design and verification of
//! distributed programs", IEEE TSE 5(5), 1979; windows of a fixed lookahead as in
//! Lubachevsky's bounded-lag method, CACM 32(1), 1989). Shards thus run up to `LAG - 1`
//! windows apart rather than meeting at a barrier after each: a window that takes one of them
//! longer is made up over the next ones. Measured before the engine existed: windows of
//! 0.5–1 ms at a barrier cost nothing resolvable on this project's 2-core host
//! (bench/results/sim-speed.md, "Lockstep windows, measured").
//!
//! Every shard builds every task's slot but only its own tasks' controllers and client
//! instances ([`Part`]); attempts to other shards' tasks go through stubs (`engine::shard`).
//! The report's recorder is shard 0's: the others send it their finished top-level requests
//! each window, and it seals a second once every shard has completed it. The run ends when no
//! shard offered or waited on anything at the end of some window, every shard stopping at the
//! same window. Everything a shard does depends only on the scenario and the messages it
//! takes, which it takes in a fixed order: the result depends on the shard count (a scenario
//! key), never on the threads' timing.

use super::engine::{Finished, Mail};
use super::lockstep::SpinBarrier;
use super::model::Part;
use super::shape::ms_to_nanos;
use super::{Scenario, SimError};

/// Windows per network delay. Anything sent in window `k` is due in window `k + LAG` or
/// later, so a shard may start window `w` once every shard has finished window `w - LAG`:
/// shards run up to `LAG - 1` windows apart, and a window that takes one shard longer (a
/// bucket to sort, a moment descheduled) is made up over the next ones instead of holding the
/// others at a barrier. With `LAG` 1 — a barrier per delay — each shard waited ~10% of the
/// time on the 10⁴-task fleet (perf, 2 shards, 0.5 ms). Every window costs each shard a
/// hand-over whatever it holds (slots locked, progress published and read across cores), so
/// fewer, longer windows win as long as the lead stays: 3 (two thirds of a delay ahead) ran
/// the fleet in 2 shards 1.05–1.18× faster than 4, as did 2, and 8 was slower than 4
/// (bench/results/sim-speed.md, tenth and eleventh rounds). At most `Mail::SLOTS / 2`.
const LAG: u64 = 3;

/// The smallest one-way network delay of any layer, ns (validated > 0 when the scenario has
/// several shards), converted as the engine converts each layer's, so that no window is ever
/// longer than a delay.
fn window_ns(sc: &Scenario) -> u64 {
    sc.layers
        .iter()
        .map(|l| ms_to_nanos(l.network_ms))
        .min()
        .unwrap_or(1)
        .max(1)
}

/// A shard that panics stops the others waiting for it (its panic is re-raised at the join).
struct AbandonOnPanic<'a>(&'a Mail);

impl Drop for AbandonOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abandon();
        }
    }
}

/// Runs `sc` (validated, `shards > 1`) in its shards, titled `title`; the shards' results
/// merged.
pub(crate) fn run(sc: &Scenario, title: &str) -> Result<Finished, SimError> {
    let shards = sc.shards.max(1) as usize;
    let window = (window_ns(sc) / LAG).max(1);
    let mail = Mail::new(shards);
    let built = SpinBarrier::new(shards);
    let results: Vec<Result<Option<Finished>, SimError>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..shards)
            .map(|shard| {
                let (mail, built) = (&mail, &built);
                scope.spawn(move || {
                    let part = Part {
                        shard: shard as u32,
                        shards: shards as u32,
                    };
                    let engine = super::build(sc, title, part);
                    // Every shard reaches the barrier, built or not, so that none waits forever.
                    let failed = built.wait(engine.is_err());
                    let mut engine = match engine {
                        Ok(e) if !failed => e,
                        Ok(_) => return Ok(None),
                        Err(e) => return Err(e),
                    };
                    // Shard 0 moves the whole process's memory onto huge pages while no
                    // shard runs (a collapse beside another thread's page faults cost 8 s of
                    // kernel time, not 0.5, on `fleet-million-clients`).
                    engine.built();
                    built.wait(false);
                    let _abandon = AbandonOnPanic(mail);
                    let mut w = 0u64;
                    loop {
                        if w >= LAG {
                            // Everything due from window `w` on that the others can send was
                            // sent by the end of window `w - LAG`.
                            let j = w - LAG;
                            if !mail.wait_completed(j + 1) {
                                return Ok(None);
                            }
                            if mail.idle_everywhere(j) {
                                break;
                            }
                            engine.take_mail(mail, j);
                            if shard == 0 {
                                engine.take_records(mail, j);
                            }
                        }
                        let until = (w + 1).saturating_mul(window);
                        engine.run_until(until);
                        engine.post_mail(mail, w, until);
                        w += 1;
                    }
                    if shard == 0 {
                        // Every shard stops at the same window: the last ones' requests.
                        if !mail.wait_completed(w) {
                            return Ok(None);
                        }
                        for j in w - LAG..w {
                            engine.take_records(mail, j);
                        }
                    }
                    Ok(Some(engine.finish()))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut merged: Option<Finished> = None;
    for r in results {
        let Some(f) = r? else { continue };
        match &mut merged {
            None => merged = Some(f),
            Some(m) => {
                for (a, b) in m.stats.iter_mut().zip(&f.stats) {
                    a.add(b);
                }
                m.events += f.events;
                m.offered += f.offered;
                m.attempts += f.attempts;
                m.peak_in_flight += f.peak_in_flight;
            }
        }
    }
    // Every shard built (else an error above), and shard 0's comes first.
    Ok(merged.expect("at least one shard"))
}

#[cfg(test)]
mod tests;
