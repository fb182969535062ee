//! Slow start (`live.rs`): how a cold limit grows on answers, and how far.
//!
//! Why apart from the window: slow start moves the limit on every answer, the gradient once per
//! window, and the two share only the limit and minRTT.

use super::EnvoyGradientLimit;

/// How far past minRTT an answer may come back and still show its level ran without a queue,
/// for slow start's ceiling (`live.rs`): an eighth, HyStart's delay threshold (Ha & Rhee,
/// "Taming the elephants: New TCP slow start", Computer Networks 55(9), 2011, §3.2: leave slow
/// start once the round's delay passes the minimum by `RTT/8`).
const SLOW_START_KNEE: f64 = 0.125;

/// How many answers back before any minRTT slow start keeps to judge once there is one: a
/// start's first round is the initial limit's worth (20 in the zero-config preset); a load that
/// never runs at low levels may never give a minRTT, and must not grow this without end.
const ANSWERS_BEFORE_MIN_RTT: usize = 64;

/// Room for the answers back before any minRTT, allocated with the limit rather than on the
/// hot path of the first answers (`tests/no_alloc.rs`).
pub(super) fn answers_before_min_rtt() -> Vec<(u64, usize)> {
    Vec::with_capacity(ANSWERS_BEFORE_MIN_RTT)
}

impl EnvoyGradientLimit {
    /// Slow start (live.rs), for a completed answer that took `rtt_ns` and was admitted at
    /// `in_flight`: the ceiling is twice the highest level an answer came back from at minRTT
    /// itself, give or take HyStart's eighth; below it, `slow_start_gain` more slots per answer
    /// within minRTT's tolerance while at least half the limit was in use — at gain 1 doubling
    /// per round trip, as TCP's slow start grows its window by one per acknowledgement; above 1
    /// the limit reaches twice the level in use after fewer fast answers, never further.
    fn grow_in_slow_start(&mut self, rtt_ns: f64, in_flight: usize) {
        if rtt_ns <= self.min_rtt_ns * (1.0 + SLOW_START_KNEE) {
            self.slow_start_level = self.slow_start_level.max(in_flight);
        }
        if rtt_ns <= self.min_rtt_ns * (1.0 + self.buffer)
            && in_flight.saturating_mul(2) >= self.limit
            && self.limit < self.slow_start_level.saturating_mul(2)
            && self.limit < self.max
        {
            self.slow_start_credit += self.slow_start_gain;
            let add = self.slow_start_credit.floor();
            self.slow_start_credit -= add;
            self.limit = self.limit.saturating_add(add as usize).min(self.max);
        }
    }

    /// Where slow start stops growing: twice the highest level answered at minRTT, passed by
    /// at most the one step of the gain that reached it (`grow_in_slow_start`).
    pub(super) fn slow_start_ceiling(&self) -> usize {
        self.slow_start_level
            .saturating_mul(2)
            .saturating_add(self.slow_start_gain.ceil() as usize)
    }

    /// Slow start's part of a completed answer: judged now if there is a minRTT, else kept
    /// until there is one. At a start the first answers back are the fastest, and the first
    /// low level's answer, which sets minRTT, often comes after answers from higher levels;
    /// left unjudged, the highest level answered at minRTT was that low level's, the ceiling
    /// (twice it) fell below the initial limit, and the limit counted as found: a 1000-worker,
    /// 500 ms exponential service's queue, held at 20 in flight, was refused at the door as a
    /// standing one (issue 28's sweep at 0.9 × its capacity: 77 of 95 refusals within its first
    /// 0.14 s).
    pub(super) fn slow_start_answer(&mut self, rtt_ns: u64, in_flight: usize, measured: bool) {
        if measured {
            // Taken out and put back emptied: its room stays allocated (no free on this path).
            let mut kept = std::mem::take(&mut self.answers_before_min_rtt);
            for &(rtt, level) in &kept {
                self.grow_in_slow_start(rtt as f64, level);
            }
            kept.clear();
            self.answers_before_min_rtt = kept;
            self.grow_in_slow_start(rtt_ns as f64, in_flight);
        } else if self.answers_before_min_rtt.len() < ANSWERS_BEFORE_MIN_RTT {
            self.answers_before_min_rtt.push((rtt_ns, in_flight));
        }
    }
}
