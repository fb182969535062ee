//! Requests whose callers gave up after minRTT but within the gradient's tolerance.
//!
//! Why: a give-up is a right-censored latency — the answer took at least that long. Past
//! tolerance it proves queueing and counts like a timed-out request (`on_abandoned`). Within
//! it, one give-up says nothing: callers with 20 ms deadlines in front of a 100 ms service
//! must not cut the limit for callers who wait (issue 28 requirement 6). But past minRTT,
//! the median of unqueued answers, at most about half of the requests go unanswered at an
//! upstream with no queue; when three in four do, the answers are not coming in the time an
//! unqueued request takes. Without this verdict, callers whose deadline lay within the
//! tolerance of a high first minRTT (one 37 ms answer of a 1-worker, 10 ms service whose
//! callers allow 50 ms) never cut the limit: it stayed at 20 while the upstream's queue grew
//! to 10 s, and 2 of 8,059 requests were served in time (issue 28's sweep).
//!
//! The share is judged over at least [`MIN_JUDGED`] requests, carried across windows until
//! there are that many: a window of one give-up, at a service answering a few requests a
//! second, is a coin toss at an unqueued upstream. Three in four of five or more is one
//! chance in 5 (five of five: one in 32) at such an upstream, and no more likely per window
//! than that; at a queued one, every request goes unanswered.

/// Requests (answered, timed out or given up on) a verdict needs.
const MIN_JUDGED: u32 = 5;

/// The give-ups of the open window and the tally carried until a verdict.
#[derive(Debug, Default)]
pub(super) struct Unanswered {
    /// Give-ups in the open window, and the longest (ns).
    window: u32,
    window_ns: u64,
    /// Since the last verdict: requests answered, and those not (given up on or dropped).
    answered: u32,
    unanswered: u32,
}

impl Unanswered {
    /// A request the open window counts, given up on by its caller after `rtt_ns`.
    pub(super) fn record(&mut self, rtt_ns: u64) {
        self.window += 1;
        self.window_ns = self.window_ns.max(rtt_ns);
    }

    /// Forgets the open window's give-ups (a minRTT window opened or closed).
    pub(super) fn clear_window(&mut self) {
        self.window = 0;
        self.window_ns = 0;
    }

    /// Closes a window that counted `answered` answers and `dropped` timed-out requests.
    /// Returns whether most requests since the last verdict went unanswered (three in four,
    /// over at least [`MIN_JUDGED`]), and the window's longest give-up if it had any.
    pub(super) fn close(&mut self, answered: u32, dropped: u32) -> (bool, Option<f64>) {
        let bound = (self.window > 0).then_some(self.window_ns as f64);
        self.answered = self.answered.saturating_add(answered);
        self.unanswered = self
            .unanswered
            .saturating_add(self.window)
            .saturating_add(dropped);
        self.clear_window();
        let judged = u64::from(self.answered) + u64::from(self.unanswered);
        if judged < u64::from(MIN_JUDGED) {
            return (false, bound);
        }
        let mostly = u64::from(self.unanswered) * 4 >= judged * 3;
        self.answered = 0;
        self.unanswered = 0;
        (mostly, bound)
    }
}
