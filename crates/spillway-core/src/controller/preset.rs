//! The one default admission policy: what `spillway proxy` runs with no configuration, and
//! what `AdmissionConfig::default()` gives a `spillway-tower` service.

use std::time::Duration;

use crate::criticality::PerCriticality;
use crate::limit::{EnvoyGradientConfig, LimitConfig};
use crate::queue::QueueConfig;
use crate::shed::ShedConfig;

use super::{AdmissionConfig, DEFAULT_MAX_ATTEMPTS, DEFAULT_OVERLOAD_RETRY_AFTER};
use crate::limiter::DEFAULT_HEADROOM;
use crate::quota::QuotaConfig;

impl Default for AdmissionConfig {
    /// [`AdmissionConfig::zero_config`].
    fn default() -> Self {
        AdmissionConfig::zero_config()
    }
}

impl AdmissionConfig {
    /// The zero-config policy, the same for the proxy and for `spillway-tower`: an adaptive
    /// limit that needs no capacity figure, a criticality-ordered queue, SHEDDABLE shed only
    /// above full.
    ///
    /// **Limit: the Envoy gradient** (`limit::envoy`) with four of this project's additions.
    /// Not Gradient2 (the core's `LimitConfig::default()`): Gradient2 compares short-term with
    /// its own *long-term* latency, so when latency rises smoothly with load the baseline
    /// follows and the limit drifts to `max_limit` (`limit/closed_loop.rs`) — the tower default
    /// that "rode to its ceiling of 200" (issue 28). The Envoy gradient compares with the
    /// latency seen at low concurrency (minRTT) and settles near the knee.
    ///
    /// - `live_min_rtt` + `initial_limit = 20`: minRTT from requests that ran with at most 5 in
    ///   flight, never by pinning the limit to 5 (Envoy's way, which at start and every
    ///   30–34.5 s refused or queued what the service would have served), and a slow start
    ///   from 20 that doubles per round trip while latency stays at minRTT (`envoy/live.rs`).
    ///   Once the limit is cut to 5 or below, ten answers that ran alone and are past minRTT's
    ///   tolerance re-measure it at once: the upstream itself got slower (a 20-worker service
    ///   at half speed was otherwise held at limit 1 for two seconds).
    ///   Where latency rises with the in-flight level among those low samples (an upstream
    ///   with fewer than 5 workers, whose "low" levels are a queue in it), minRTT is the
    ///   latency at one in flight (`envoy/levels.rs`), whatever the callers' budget: from the
    ///   plain median, a 1-worker service's limit held 5–10 requests past its callers'
    ///   deadlines (CRITICAL 4 % served at 2×; 97 % now), and callers with room for that
    ///   queue still had their CRITICAL work wait in the upstream behind SHEDDABLE work.
    /// - `latency_slack = 0.1`: latency up to minRTT + 10 % of the callers' budget (their
    ///   deadlines capped at the queue's 100 ms max wait, which stands in when they send none:
    ///   at most 10 ms) is never cut. A fast
    ///   upstream behind a busy host answers in milliseconds instead of microseconds whatever
    ///   the concurrency; the gradient alone read that as a queue and cut the limit to 11
    ///   while the upstream had room for all (goodput 17–32 % of the limit turned off). A
    ///   slow service is judged by its buffer as before (at 50 ms, 1.5 × minRTT = 75 ms is
    ///   more than minRTT + 10 ms).
    /// - `buffer = 0.5`: latency up to 1.5 × minRTT is not queueing, so ordinary jitter on a
    ///   shared host does not shrink the limit.
    /// - `app_limited_growth = 2` (Netflix's app-limited rule, RFC 7661): the limit grows only
    ///   while at least half of it is in use, and to at most twice the peak in flight; at
    ///   light load Envoy's rule reached 1000 within a second and the next surge sent 296
    ///   requests at once to a 4-worker backend (`spillway demo`).
    /// - `one_change_per_rtt` (TCP's one reduction per window of data, RFC 5681/6582): a
    ///   window is judged only on requests admitted at the current limit (without it the limit
    ///   swung 22 → 6 → 22 within 0.7 s in `spillway demo`).
    /// - `max_concurrency_limit = 100_000`, not Envoy's 1000: the ceiling is no capacity
    ///   guess. At 1000 and SHEDDABLE's 0.8 share of the limit, a 1000-worker service at 0.9 ×
    ///   its capacity (900 in flight) could run only 800 at once whatever its speed, and about
    ///   a third of its SHEDDABLE work was refused for good (issue 28's sweep: −11 to −15 pp
    ///   at every service time). What Envoy's ceiling guarded against — a lightly loaded limit
    ///   riding up to it — is the app-limited rule's job here, which grows the limit only to
    ///   twice what is in flight.
    /// - `min_concurrency_limit = 1` + `exact_cuts`: the limit may go down to what the
    ///   service can take, one request at a time. With a floor of 5, and Envoy's `√limit`
    ///   added to every cut (from 5 the steepest cut gives 4, from 3 it gives 2), a 1-worker
    ///   service whose callers allow 5 service times held 4–5 requests — a queue as long as
    ///   their patience — and every request timed out (issue 28's sweep: goodput 0.2 % at 2×).
    ///   A window above tolerance now lowers the limit by at least one, and one in which
    ///   most requests timed out halves it: their latency is only where the callers gave up,
    ///   so the gradient read from it understates the queue. `min_concurrency = 5`
    ///   stays what "low concurrency" means for measuring minRTT (from completed requests
    ///   only: a timed-out one's latency is its caller's patience, not the service's).
    /// - `rtt_windows`: a sampling window also closes once it holds `request_count` requests
    ///   and has lasted minRTT — about one decision per round trip, where Envoy's 100 ms
    ///   windows are a hundred round trips of a 1 ms service (a cold start at 20 on one such
    ///   worker took 400 ms to come down, its queue growing meanwhile). Slow start neither
    ///   ends nor cuts on a provisional minRTT (the median of the first few requests: of an
    ///   exponential service, anywhere in 0.3–1.3 × the mean) unless a window is past twice
    ///   its tolerance or mostly timed out: it stalled a 100-worker service's cold start at
    ///   20–25 and refused 547 of 4,000 requests at 0.9 × capacity (253 now).
    /// - `proportional_growth`: a window of fewer than `request_count` answers grows the
    ///   limit by that share of the gradient's step. A slow or 1-worker service's windows
    ///   close on their 100 ms timer with a few answers, whose median swung the limit of a
    ///   1-worker 10 ms service 4 → 10 → 4 within a quarter second (CRITICAL queued in the
    ///   upstream behind SHEDDABLE), and just after a change the first answers back are the
    ///   fastest: a 20-worker service that slows with what it holds went 37 → 43 on a window
    ///   of two.
    ///   Cuts are not scaled: a queue is undone at once (issue 28's sweep, seeds 28–32:
    ///   `bench/results/proportional-growth-issue28.md`).
    /// - `slow_start_gain = 3`: in slow start each answer within minRTT's tolerance adds
    ///   three slots, not TCP's one, up to twice the level in flight when it was admitted (the
    ///   same ceiling as before, so the overshoot past the knee is no larger). With one per
    ///   answer, only the fast share of a round's answers grew the limit (two thirds of an
    ///   exponential service's), about × 1.65 per round trip: from 20, a 1000-worker service
    ///   took eight round trips to be used, and in the runs of a few service times that decide
    ///   issue 28's 1000-worker cells the 1024-entry queue filled with CRITICAL work, refused
    ///   `queue_full` (the sweep's 1000-worker cells, failing R1 23 → 16, R2 16 → 11, R3
    ///   17 → 13, none newly failing). With three, a third of the round's answers being fast
    ///   suffices to double.
    /// - `throughput_ceiling` (`limit/envoy/thrash.rs`, BBR's reasoning by Little's law):
    ///   when an in-flight level is seen to deliver clearly less than a lower one (level /
    ///   mean time a slot was held × the share answered), the limit is held where in flight
    ///   stays at the level that delivered most. An upstream that thrashes past its workers (a pool that context-switches, a
    ///   database that contends) otherwise sat at 30–150 in flight for 20 workers, the window
    ///   after each cut doubling the limit again, and served a third of its rate (issue 28's
    ///   sweep, `slowdown` cells). A plain FIFO upstream delivers the same past its knee, so
    ///   nothing is capped there.
    /// - `rebaseline_on_flat_levels` (`limit/envoy/flat.rs`): latency above tolerance that
    ///   does not rise with the in-flight level requests were admitted at is the upstream's
    ///   own (it got slower), not a queue of ours, and raises the baseline instead of cutting.
    ///   A 20-worker service at half speed for 12 s, at half its capacity's load, had its limit
    ///   cut one by one to 1 and refused what the unprotected service served (issue 28's
    ///   sweep, R1 −10.0 → −1.8 pp; failing cells R1 109 → 105, R2 635 unchanged, R3
    ///   662 → 664). So is latency past tolerance at levels that ran within it just before,
    ///   while at most half the limit was in use (a step, judged on the first window past
    ///   tolerance; the rank test needs a 2× span of levels, and the gradient cut a slower
    ///   upstream below its workers while it waited for one: sweep R1 90 → 84, none newly
    ///   failing). And so is a held level's latency stepping up: a closed loop held by the
    ///   floor above tolerance, then slower at the same level (the same queue of ours), with
    ///   no request given up on — raised by the ratio, the limit not growing past where it was
    ///   held meanwhile (a 20-worker bimodal service at half speed behind 64 clients: goodput
    ///   −21.6 → −0.1 % of the same proxy with no limit).
    /// - `knee_cap` (`limit/envoy/knee.rs`, BBR's bandwidth × `RTprop` by Little's law),
    ///   **only while some level's overload is sustained** (refused for a second on end) and
    ///   **as the lowest level's share** of the limit (the knee ÷ 0.8: the levels above keep
    ///   their headroom on top), with `unqueued_floor` (`limit/envoy/floor.rs`: a cut does
    ///   not take the limit below the level the upstream was seen to run unqueued) and a
    ///   headroom ladder that holds no slot back beyond the fractions (`limiter`). Under
    ///   sustained overload the gradient's tolerance is a queue in the upstream's own FIFO,
    ///   where CRITICAL waits behind SHEDDABLE the proxy would have held back: a 1-worker
    ///   upstream at 2 × held 3–24 in flight, CRITICAL 90.9 % where HAProxy with a cap of one
    ///   keeps 100 %. Below sustained overload the cap stays off: the proxy's queue, with its
    ///   deadlines and criticality order, refused there what the upstream's FIFO served
    ///   (capped always, seeds 28–29 of issue 28's sweep failed 6–14 more R1 cells). Over five seeds
    ///   of the sweep, with the budget's slower average (`queue::service`): see BENCHMARKS.md
    ///   (`bench/results/knee-ladder-issue28.md`). Always on, without the share and the
    ///   ladder, it did more harm than good (R1 120 → 206, R4b 18 → 162 at the time;
    ///   `bench/results/policy3-issue28.md`).
    ///
    /// **Queue:** bounded in time, not by a count: 1024 entries is only a backstop (half the
    /// limit refused bursts of a lightly loaded service; 64 refused a 100-worker 1 ms
    /// service's cold start while its limit was still growing, 71 of 4,000 at 0.9 ×
    /// capacity, within 0.1 pp of the unprotected with 1024), CoDel 5 ms / 100 ms, highest
    /// criticality first; a request waits at most until its deadline less a cautious expected
    /// service time — sheddable work no longer than 100 ms, CRITICAL work expected to start
    /// in time as long as its deadline allows (a flat 100 ms refused it `queue_timeout` under
    /// bursts its callers' 200 ms would have absorbed; `AdmissionQueue::give_up_at`), sheddable
    /// work with a deadline until it less two service times while its level's overload is a
    /// burst (not refused for a second on end nor more often than admitted;
    /// `AdmissionQueue::set_burst_levels`), 100 ms
    /// without a deadline —
    /// and is refused on arrival when it could not start in time. The cautious
    /// figure is an upper bound of the mean that counts timed-out requests too, its first
    /// answers averaged plainly (`queue::service`): the plain average of the requests that
    /// finished sat below a skewed service's mean, a cold start's first answer weighed on it
    /// for dozens more, and waiters left later than their deadline less the mean allows.
    ///
    /// **Shedding:** SHEDDABLE at utilisation 1.0 (ramp 0.03; in flight above a limit just
    /// cut reads as 1.0 until SHEDDABLE's overload is sustained), nothing else: the limit already
    /// keeps the upstream's queue short, and a busy-time utilisation reads near 1.0 both at
    /// best use and at overload, so lower thresholds shed a service merely working at capacity
    /// (from 0.8 `spillway demo`'s backend was held at 0.85–0.95 busy, goodput 60–90 %). The
    /// headroom ladder (0.8 / 0.9 / 0.95 / 1.0 of the limit) and the criticality-ordered queue
    /// protect the rest.
    pub fn zero_config() -> Self {
        AdmissionConfig {
            limit: LimitConfig::EnvoyGradient(EnvoyGradientConfig {
                interval: Duration::from_secs(30),
                request_count: 25,
                buffer: 0.5,
                min_concurrency: 5,
                min_concurrency_limit: Some(1),
                app_limited_growth: Some(2.0),
                one_change_per_rtt: true,
                live_min_rtt: true,
                initial_limit: Some(20),
                max_concurrency_limit: 100_000,
                latency_slack: 0.1,
                exact_cuts: true,
                rtt_windows: true,
                proportional_growth: true,
                slow_start_gain: 3.0,
                throughput_ceiling: true,
                rebaseline_on_flat_levels: true,
                knee_cap: true,
                unqueued_floor: true,
                ..EnvoyGradientConfig::default()
            }),
            headroom: DEFAULT_HEADROOM,
            queue: QueueConfig {
                max_len: Some(1024),
                ..QueueConfig::default()
            },
            shed: ShedConfig {
                thresholds: PerCriticality([Some(1.0), None, None, None]),
                ramp: 0.03,
            },
            quota: QuotaConfig::default(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            overload_retry_after: Some(DEFAULT_OVERLOAD_RETRY_AFTER),
        }
    }
}
