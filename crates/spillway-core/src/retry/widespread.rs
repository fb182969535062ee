//! Is the overload local (a few tasks) or widespread (most of the tasks we reach)?
//!
//! Why it matters: if only some tasks are overloaded, retrying on another task is right; if the
//! whole service is, a retry only moves the problem around and the failure should go up to the
//! caller (SRE book ch. 21, "Handling Overload Errors"). A client cannot see the fleet, but it can
//! see its own recent attempts: a small ring of the last N outcomes with the task each went to.
//! The overload is judged widespread when, among the distinct tasks in the ring, at least a
//! fraction answered their latest attempt with an overload refusal — and at least a minimum number
//! of distinct tasks were seen, so a single refusing task always reads as local.
//!
//! Each slot is one `AtomicU64`: the task id, mixed and truncated to 62 bits, with a "used" bit
//! and the "refused" bit, so a slot is never read half-written. Writers take a slot with one
//! `fetch_add` on the head; readers scan at most [`MAX_RING`] slots into a stack array. No lock,
//! no allocation after construction. Under concurrent writes the reader's view is a recent mix of
//! outcomes rather than an exact snapshot, which is all a heuristic needs.

use std::sync::atomic::{AtomicU64, Ordering};

/// The largest ring accepted: the scan is a fixed-size stack array of this length.
pub const MAX_RING: usize = 64;

const USED: u64 = 0b10;
const REFUSED: u64 = 0b01;

/// SplitMix64's finaliser (Steele, Lea & Flood 2014): a bijection that spreads task ids so the
/// two bits we drop cannot make two likely ids (small integers, addresses) collide.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The ring of recent attempt outcomes.
#[derive(Debug)]
pub(crate) struct OutcomeRing {
    slots: Box<[AtomicU64]>,
    head: AtomicU64,
    min_tasks: usize,
    fraction: f64,
}

/// What the ring shows right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecentTasks {
    /// Distinct tasks among the recent attempts.
    pub distinct: usize,
    /// Of those, how many refused their latest attempt for overload.
    pub refusing: usize,
}

impl OutcomeRing {
    /// A ring of `size` slots (clamped to `1..=MAX_RING`).
    pub(crate) fn new(size: usize, min_tasks: usize, fraction: f64) -> Self {
        OutcomeRing {
            slots: (0..size.clamp(1, MAX_RING))
                .map(|_| AtomicU64::new(0))
                .collect(),
            head: AtomicU64::new(0),
            min_tasks,
            fraction,
        }
    }

    /// The address of the ring's slots (for prefetch hints).
    #[cfg(feature = "hints")]
    #[inline]
    pub(crate) fn slots_addr(&self) -> *const u8 {
        self.slots.as_ptr() as *const u8
    }

    /// Records one attempt's outcome.
    pub(crate) fn record(&self, task: u64, refused: bool) {
        let word = (mix(task) << 2) | USED | if refused { REFUSED } else { 0 };
        let at = self.head.fetch_add(1, Ordering::Relaxed) % self.slots.len() as u64;
        if let Some(slot) = self.slots.get(at as usize) {
            slot.store(word, Ordering::Relaxed);
        }
    }

    /// Distinct tasks in the ring and how many of them refused their latest attempt.
    pub(crate) fn recent(&self) -> RecentTasks {
        let len = self.slots.len() as u64;
        let head = self.head.load(Ordering::Relaxed);
        let mut seen = [0u64; MAX_RING];
        let mut refused = [false; MAX_RING];
        let mut distinct = 0usize;
        // Newest first, so the first sighting of a task is its latest outcome.
        for back in 1..=len {
            let at = head.wrapping_sub(back) % len;
            let word = self
                .slots
                .get(at as usize)
                .map_or(0, |s| s.load(Ordering::Relaxed));
            if word & USED == 0 {
                continue;
            }
            let id = word >> 2;
            if seen[..distinct].contains(&id) {
                continue;
            }
            if let (Some(s), Some(r)) = (seen.get_mut(distinct), refused.get_mut(distinct)) {
                *s = id;
                *r = word & REFUSED != 0;
                distinct += 1;
            }
        }
        RecentTasks {
            distinct,
            refusing: refused[..distinct].iter().filter(|&&r| r).count(),
        }
    }

    /// Whether the recent outcomes look like a widespread overload.
    pub(crate) fn is_widespread(&self) -> bool {
        let r = self.recent();
        r.distinct >= self.min_tasks.max(1)
            && r.refusing > 0
            && r.refusing as f64 >= self.fraction * r.distinct as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_a_bijection_on_small_ids() {
        let mut ids: Vec<u64> = (0..10_000).map(|i| (mix(i) << 2) >> 2).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 10_000);
    }

    #[test]
    fn latest_outcome_of_each_task_wins_and_old_ones_fall_out() {
        let ring = OutcomeRing::new(4, 2, 0.5);
        assert_eq!(
            ring.recent(),
            RecentTasks {
                distinct: 0,
                refusing: 0
            }
        );
        ring.record(1, true);
        ring.record(1, false); // task 1 recovered
        ring.record(2, true);
        assert_eq!(
            ring.recent(),
            RecentTasks {
                distinct: 2,
                refusing: 1
            }
        );
        ring.record(3, true);
        ring.record(4, true); // overwrites the oldest slot (task 1 refused)
                              // Slots now: 1 ok, 2 refused, 3 refused, 4 refused.
        assert_eq!(
            ring.recent(),
            RecentTasks {
                distinct: 4,
                refusing: 3
            }
        );
        ring.record(5, false);
        ring.record(6, false);
        ring.record(7, false);
        ring.record(8, false);
        assert_eq!(
            ring.recent(),
            RecentTasks {
                distinct: 4,
                refusing: 0
            }
        );
    }
}
