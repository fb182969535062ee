//! What one run of a cell measured, and the shares the requirements are judged on.

use std::collections::BTreeMap;

/// What one run of a cell (protected or not) measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunFigures {
    /// Simulated offering window, s.
    pub duration_s: f64,
    /// Requests offered in it.
    pub offered: u64,
    /// Answered successfully within the client's timeout.
    pub ok: u64,
    /// Refused by the proxy.
    pub refused: u64,
    /// The client's timeout ran out first.
    pub timed_out: u64,
    /// CRITICAL requests offered, and served in time.
    pub critical_offered: u64,
    /// CRITICAL requests served in time.
    pub critical_ok: u64,
    /// Requests offered in the window's second half (past the proxy's first moments).
    pub late_offered: u64,
    /// Of those, served in time.
    pub late_ok: u64,
    /// Of `ok`, the answers to work the backend started within the offering window: R3's
    /// count. Work queued during the window and served after it is left out, since the window's
    /// reference cannot include it: counted, a policy that queues a whole client timeout
    /// scored up to 365 % of capacity when the window was shorter than the timeout.
    pub window_ok: u64,
    /// Successes per second of the window (all of them, also those answered after it: R1's
    /// closed-loop comparison).
    pub goodput_rps: f64,
    /// `window_ok` per second of the window: R3's goodput.
    pub window_goodput_rps: f64,
    /// The most any policy could serve in time without buffering across phases: the integral
    /// of min(offered rate, capacity) over the window, per second (closed loops: capacity).
    pub reference_rps: f64,
    /// Of the timed-out requests, those whose client gave up while the proxy still queued them.
    pub abandoned_in_queue: u64,
    /// Median time from arrival to refusal, ms, counting a request abandoned in the proxy's
    /// queue as refused at its deadline (none of either: `None`).
    pub refusal_median_ms: Option<f64>,
    /// Requests that left the proxy's queue (admitted, refused or abandoned) after waiting
    /// longer than their deadline minus the mean service time.
    pub late_queue_exits: u64,
    /// The longest such wait past that point, ms.
    pub late_queue_worst_ms: f64,
    /// Refusals by the core's reason.
    pub refused_by_reason: BTreeMap<String, u64>,
    /// CRITICAL refusals by the core's reason (where R2 loses its requests).
    pub critical_refused_by_reason: BTreeMap<String, u64>,
    /// CRITICAL requests whose client's timeout ran out first.
    pub critical_timed_out: u64,
    /// Requests the backend started (served or abandoned by their caller).
    pub backend_started: u64,
    /// Of those, how many found every worker busy and waited in its FIFO.
    pub backend_waited: u64,
    /// Mean wait in the backend's FIFO, ms.
    pub backend_wait_mean_ms: f64,
    /// Arrivals stopped early: the run reached ten times `max_requests` (a closed loop
    /// spinning on fast refusals).
    pub truncated: bool,
    /// Events processed.
    pub events: u64,
    /// Successes by the time they were answered, in 200 (`SLICES`) equal slices of the planned
    /// window (answers after it in the last): what R1's closed loops compare when a run
    /// stopped early.
    #[serde(skip)]
    pub ok_slices: Vec<u32>,
    /// One slice's length, s.
    #[serde(skip)]
    pub slice_s: f64,
}

/// How many slices [`RunFigures::ok_slices`] cuts the planned window into.
pub const SLICES: usize = 200;

impl RunFigures {
    /// Share of offered requests served in time.
    pub fn success(&self) -> f64 {
        ratio(self.ok, self.offered)
    }

    /// Share of the second half's requests served in time.
    pub fn late_success(&self) -> f64 {
        ratio(self.late_ok, self.late_offered)
    }

    /// Share of CRITICAL requests served in time (`None` if none was offered).
    pub fn critical_success(&self) -> Option<f64> {
        (self.critical_offered > 0).then(|| ratio(self.critical_ok, self.critical_offered))
    }

    /// R3's goodput ([`window_goodput_rps`](Self::window_goodput_rps)) as a share of
    /// [`reference_rps`](Self::reference_rps).
    pub fn goodput_fraction(&self) -> f64 {
        if self.reference_rps > 0.0 {
            self.window_goodput_rps / self.reference_rps
        } else {
            1.0
        }
    }
}

impl RunFigures {
    /// Successes per second of this run and of `other`, over the span both offered in.
    ///
    /// Why: a closed loop spinning on instant refusals stops at the request cap (`truncated`),
    /// seconds into a window the other run offered in to its end. Rates over the two whole
    /// runs compare this run's first seconds — a start, the early part of a capacity drop —
    /// with the other's whole window: a protected run stopped at 25 s had 37 % of its window
    /// in a 16–28 s capacity drop where the other had 30 %, and trailed it by 6 % on that
    /// alone. Untruncated runs keep their whole-window rates.
    pub fn goodput_over_common_span(&self, other: &RunFigures) -> (f64, f64) {
        match self.common_slices(other) {
            Some(k) => {
                let rate = |f: &RunFigures| {
                    let ok: f64 = f.ok_slices[..k].iter().map(|&n| f64::from(n)).sum();
                    ok / (k as f64 * f.slice_s)
                };
                (rate(self), rate(other))
            }
            None => (self.goodput_rps, other.goodput_rps),
        }
    }

    /// The span [`goodput_over_common_span`](Self::goodput_over_common_span) compares over,
    /// s (`None`: the whole runs).
    pub fn common_span_s(&self, other: &RunFigures) -> Option<f64> {
        self.common_slices(other).map(|k| k as f64 * self.slice_s)
    }

    /// Whole slices both runs offered in, when one stopped early.
    fn common_slices(&self, other: &RunFigures) -> Option<usize> {
        if !(self.truncated || other.truncated)
            || self.slice_s <= 0.0
            || self.slice_s != other.slice_s
        {
            return None;
        }
        let span = self.duration_s.min(other.duration_s);
        let k = ((span / self.slice_s) as usize)
            .min(self.ok_slices.len())
            .min(other.ok_slices.len());
        (k > 0).then_some(k)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        1.0
    } else {
        a as f64 / b as f64
    }
}

impl RunFigures {
    pub(super) fn empty() -> RunFigures {
        RunFigures {
            duration_s: 0.0,
            offered: 0,
            ok: 0,
            window_ok: 0,
            refused: 0,
            timed_out: 0,
            critical_offered: 0,
            critical_ok: 0,
            late_offered: 0,
            late_ok: 0,
            goodput_rps: 0.0,
            window_goodput_rps: 0.0,
            reference_rps: 0.0,
            refusal_median_ms: None,
            abandoned_in_queue: 0,
            late_queue_exits: 0,
            late_queue_worst_ms: 0.0,
            refused_by_reason: BTreeMap::new(),
            critical_refused_by_reason: BTreeMap::new(),
            critical_timed_out: 0,
            backend_started: 0,
            backend_waited: 0,
            backend_wait_mean_ms: 0.0,
            truncated: false,
            events: 0,
            ok_slices: Vec::new(),
            slice_s: 0.0,
        }
    }
}
