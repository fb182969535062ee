//! Overload episodes: for each criticality, how long and how hard the task has been refusing
//! its work, to tell a momentary overload from a sustained one and a burst from a step in load.
//!
//! Why per level: "sustained" answers "would a retry elsewhere meet a fleet just as full?" for
//! the work refused. SHEDDABLE refused for seconds on end is, and its retries only add load; a
//! CRITICAL request refused once while CRITICAL is otherwise served (a limit cut, a burst) is
//! not, and another task, which serves CRITICAL ahead of the SHEDDABLE it is refusing, will
//! likely take it (`spillway demo`'s throttling clients, which obey "don't retry", lost CRITICAL
//! requests and `good`'s SHEDDABLE_PLUS refused once each inside the noisy customer's 10-second
//! surge).
//!
//! Why first attempts: a refused request whose caller retries at once comes back as the same
//! demand, and is refused again in the same cluster of arrivals. Judged on every attempt, a
//! level at its capacity whose callers retry looks overloaded for good; judged on first attempts
//! it looks like what its callers ask for. Retries are trusted only as far as refusals can
//! explain them (`Episode::is_burst`): a caller that marks every request a retry is counted in
//! full.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::criticality::Criticality;

use super::refusal::Counters;

/// An overload that has gone on this long is sustained: 1 s, ten CoDel intervals — longer than
/// a burst a queue absorbs, short enough that retries amplify only its first second (at 3×
/// overload for 15 s, at most about 1.1 attempts per call reach the task).
pub const SUSTAINED_AFTER: Duration = Duration::from_secs(1);
/// An overload episode ends after this long without an overload refusal: 1 s.
pub const EPISODE_GAP: Duration = Duration::from_secs(1);

/// The fewest refusals of a level in one episode that can tell a step in load from a burst
/// ([`Episode::is_burst`]): fewer are a handful of unlucky arrivals.
pub(crate) const BURST_REFUSALS: u64 = 8;

/// First attempts admitted per first attempt refused at which a level's overload, past its
/// first second, is still a burst ([`Episode::is_burst`]): a third of the level's demand
/// refused, or less. Tried judged since the episode began (`demo-seeds-issue28.md`), 1 (half
/// refused) met the demo's targets as often over 500 seeds but missed its 2 × level more (40
/// draws against 31), and 3 missed its 1 × level in 98 (83 at 2).
pub(crate) const BURST_ADMISSIONS_PER_REFUSAL: u64 = 2;

/// Admissions per overload refusal above which an episode is a trickle, not steady refusal
/// ([`Episode::refuses_steadily`]): one refusal in nine arrivals. Not a fine setting: 4 and 16
/// judge the sweep's cells alike (`bench/results/closed64-issue28.md`).
pub(crate) const STEADY_ADMISSIONS: u64 = 8;

/// A level's figures as `Counters` hold them, or their change over a stretch of time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LevelCounts {
    /// Refused for overload (reasons where retrying elsewhere can help).
    pub(crate) refused: u64,
    /// Admitted.
    pub(crate) admitted: u64,
    /// Of `refused`, retries (attempt 2 and on).
    pub(crate) retries_refused: u64,
    /// Of `admitted`, retries.
    pub(crate) retries_admitted: u64,
}

impl LevelCounts {
    /// What happened between `earlier` and these figures.
    fn since(self, earlier: LevelCounts) -> LevelCounts {
        LevelCounts {
            refused: self.refused.saturating_sub(earlier.refused),
            admitted: self.admitted.saturating_sub(earlier.admitted),
            retries_refused: self.retries_refused.saturating_sub(earlier.retries_refused),
            retries_admitted: self
                .retries_admitted
                .saturating_sub(earlier.retries_admitted),
        }
    }

    fn first_refused(&self) -> u64 {
        self.refused.saturating_sub(self.retries_refused)
    }

    fn first_admitted(&self) -> u64 {
        self.admitted.saturating_sub(self.retries_admitted)
    }

    fn retries(&self) -> u64 {
        self.retries_refused.saturating_add(self.retries_admitted)
    }
}

/// [`LevelCounts`] kept in relaxed atomics (read while others write; the figures of one
/// snapshot may be a few requests apart, which the judgements below do not feel).
#[derive(Debug, Default)]
struct Snapshot([AtomicU64; 4]);

impl Snapshot {
    fn store(&self, c: LevelCounts) {
        let v = [c.refused, c.admitted, c.retries_refused, c.retries_admitted];
        for (cell, v) in self.0.iter().zip(v) {
            cell.store(v, Ordering::Relaxed);
        }
    }

    fn load(&self) -> LevelCounts {
        let [refused, admitted, retries_refused, retries_admitted] =
            std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed));
        LevelCounts {
            refused,
            admitted,
            retries_refused,
            retries_admitted,
        }
    }
}

/// How long the task has been refusing work of each criticality for overload, and how much of
/// it. Relaxed atomics; each level's last refusal is written at most once per millisecond and
/// its window moved at most once a second, so refusals, the bulk of the work under overload,
/// rarely write a shared line.
#[derive(Debug)]
pub(crate) struct Episode {
    origin: Instant,
    /// Retries one refused first attempt may bring back: the attempts a request may make
    /// (`AdmissionConfig::max_attempts`) less the first.
    echoes: u64,
    /// Nanoseconds since `origin` + 1 of each level's episode's first refusal (0: none yet).
    start: [AtomicU64; Criticality::COUNT],
    /// The same for its latest refusal (to within a millisecond).
    last: [AtomicU64; Criticality::COUNT],
    /// Each level's counts when its episode began.
    at_start: [Snapshot; Criticality::COUNT],
    /// Each level's counts at the start of the window a sustained episode is judged on
    /// ([`is_burst`](Self::is_burst)), and at the start of the next one, `next_at` (ns as
    /// `start`): 1–2 s of history.
    window: [Snapshot; Criticality::COUNT],
    next_window: [Snapshot; Criticality::COUNT],
    next_at: [AtomicU64; Criticality::COUNT],
    /// Each level's requests in the queue, as last published
    /// ([`note_waiting`](Self::note_waiting)).
    waiting: [AtomicU64; Criticality::COUNT],
}

impl Episode {
    /// Episodes measured from `origin`, for requests that make at most `max_attempts` attempts.
    pub(crate) fn new(origin: Instant, max_attempts: u32) -> Self {
        Episode {
            origin,
            echoes: u64::from(max_attempts.saturating_sub(1)),
            start: Default::default(),
            last: Default::default(),
            at_start: Default::default(),
            window: Default::default(),
            next_window: Default::default(),
            next_at: Default::default(),
            waiting: Default::default(),
        }
    }

    /// Notes how many requests of each level wait in the queue (after each change to it).
    pub(crate) fn note_waiting(&self, by_level: [usize; Criticality::COUNT]) {
        for (cell, n) in self.waiting.iter().zip(by_level) {
            cell.store(n as u64, Ordering::Relaxed);
        }
    }

    fn nanos(&self, now: Instant) -> u64 {
        crate::clock::nanos_since(self.origin, now).saturating_add(1)
    }

    /// Notes an overload refusal of level `c` at `now`; whether that level's overload is
    /// sustained. A new episode notes `counters`' figures for [`is_burst`](Self::is_burst).
    pub(crate) fn refused(&self, c: Criticality, now: Instant, counters: &Counters) -> bool {
        let i = c.index();
        let t = self.nanos(now);
        let Some(age) = self.age(c, now) else {
            self.start[i].store(t, Ordering::Relaxed);
            self.last[i].store(t, Ordering::Relaxed);
            let counts = counters.level(c);
            self.at_start[i].store(counts);
            self.window[i].store(counts);
            self.next_window[i].store(counts);
            self.next_at[i].store(t, Ordering::Relaxed);
            return SUSTAINED_AFTER.is_zero();
        };
        if t > self.last[i]
            .load(Ordering::Relaxed)
            .saturating_add(1_000_000)
        {
            self.last[i].store(t, Ordering::Relaxed);
        }
        age >= crate::clock::saturating_nanos(SUSTAINED_AFTER)
    }

    /// Whether level `c`'s overload is sustained at `now` — as [`refused`](Self::refused)
    /// would answer for a refusal now, without noting one.
    pub(crate) fn is_sustained(&self, c: Criticality, now: Instant) -> bool {
        self.age(c, now)
            .is_some_and(|age| age >= crate::clock::saturating_nanos(SUSTAINED_AFTER))
    }

    /// How long (ns) level `c`'s episode has lasted at `now`; `None` outside one.
    fn age(&self, c: Criticality, now: Instant) -> Option<u64> {
        let t = self.nanos(now);
        let last = self.last[c.index()].load(Ordering::Relaxed);
        if last == 0 || t.saturating_sub(last) > crate::clock::saturating_nanos(EPISODE_GAP) {
            return None;
        }
        Some(t.saturating_sub(self.start[c.index()].load(Ordering::Relaxed)))
    }

    /// Whether level `c`'s overload is a burst at `now`. In its first second, an episode is
    /// one unless it refuses the level more often than it admits it: a burst the queue absorbs
    /// turns away a few of the level's requests while it serves most; when more than half
    /// bounce ([`BURST_REFUSALS`] of them at least), its arrivals run at over twice the rate
    /// it is served — a step in load, not a burst — and waiting for a second to call it
    /// sustained only holds work that will be refused anyway.
    ///
    /// Past that second it stays one while, over the last 1–2 s, the level's first attempts
    /// are admitted at least [`BURST_ADMISSIONS_PER_REFUSAL`] times as often as refused:
    /// demand then runs within about 1.5 × what the level is served, and the queue's lulls are
    /// worth filling. Judged on every attempt, the retries' echo made a level at capacity look
    /// overloaded for good (`spillway demo`'s 1 × level, simulated over 500 seeds: 137 draws
    /// under 95 % goodput; 87 judged on first attempts, `bench/results/demo-seeds-issue28.md`).
    ///
    /// The level's requests still waiting count as refused: a burst's waiters wait as their
    /// deadlines allow and are refused late, so refusals counted as they happen lag the
    /// demand that causes them. Behind a slow service (4 workers × 500 ms, 10 s deadlines,
    /// sheddable work at 1.4 × capacity) a level judged on refusals alone stayed a burst and
    /// its median refusal came after 1.1 s instead of at once (issue 28's sweep, R4a, one
    /// seed in four).
    ///
    /// Retries are set aside only while refusals explain them — at most `max_attempts − 1`
    /// per first attempt refused, and [`BURST_REFUSALS`] for those a window's edge cuts off;
    /// beyond that (a caller marking every request a retry, or another task's refusals
    /// retried here) every attempt is judged. Callers that send no attempt count make first
    /// attempts only.
    pub(crate) fn is_burst(&self, c: Criticality, now: Instant, counters: &Counters) -> bool {
        let Some(age) = self.age(c, now) else {
            return true;
        };
        if age < crate::clock::saturating_nanos(SUSTAINED_AFTER) {
            let d = self.since_start(c, counters);
            return d.refused < BURST_REFUSALS || d.refused <= d.admitted;
        }
        let d = self.in_window(c, now, counters);
        let explained = self
            .echoes
            .saturating_mul(d.first_refused())
            .saturating_add(BURST_REFUSALS);
        let (refused, admitted) = if d.retries() <= explained {
            (d.first_refused(), d.first_admitted())
        } else {
            (d.refused, d.admitted)
        };
        let waiting = self.waiting[c.index()].load(Ordering::Relaxed);
        refused
            .saturating_add(waiting)
            .saturating_mul(BURST_ADMISSIONS_PER_REFUSAL)
            <= admitted
    }

    /// Level `c`'s counts since its episode began.
    fn since_start(&self, c: Criticality, counters: &Counters) -> LevelCounts {
        counters.level(c).since(self.at_start[c.index()].load())
    }

    /// Level `c`'s counts over the last 1–2 s of its episode: the window moves on once its
    /// successor is a second old.
    fn in_window(&self, c: Criticality, now: Instant, counters: &Counters) -> LevelCounts {
        let i = c.index();
        let t = self.nanos(now);
        let counts = counters.level(c);
        let next_at = self.next_at[i].load(Ordering::Relaxed);
        if t.saturating_sub(next_at) >= crate::clock::saturating_nanos(SUSTAINED_AFTER)
            && self.next_at[i]
                .compare_exchange(next_at, t, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // One caller moves it; one that reads the window meanwhile judges on the old one.
            self.window[i].store(self.next_window[i].load());
            self.next_window[i].store(counts);
        }
        counts.since(self.window[i].load())
    }

    /// Whether level `c`'s episode refuses it steadily: at least one overload refusal for
    /// every [`STEADY_ADMISSIONS`] admissions since the episode began. Overload that outruns
    /// the service refuses a steady share of what arrives; a trickle of refusals among a level
    /// served in full (a cold start's wait estimates, a cluster of long requests) is not it.
    pub(crate) fn refuses_steadily(&self, c: Criticality, counters: &Counters) -> bool {
        let d = self.since_start(c, counters);
        d.refused.saturating_mul(STEADY_ADMISSIONS) >= d.admitted
    }
}
