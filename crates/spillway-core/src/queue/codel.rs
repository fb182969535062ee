//! CoDel ("controlled delay") for an RPC admission queue.
//!
//! Nichols & Jacobson, "Controlling Queue Delay", ACM Queue 10(5), 2012, and RFC 8289: a queue is
//! *bad* when its minimum sojourn time has stayed above `target` for a whole `interval` (a standing
//! queue rather than a burst that drains by itself). Then entries are dropped at dequeue, the
//! next drop scheduled `interval / sqrt(count)` after the previous one, so the drop rate rises
//! until the delay falls back below target. Defaults target 5 ms / interval 100 ms are the paper's
//! and also what folly's `Codel` uses for RPC server queues.
//!
//! Which entry is dropped is the queue's choice, not CoDel's: the paper drops the packet at the
//! head, but an RPC queue ordered by criticality has its most critical waiter there, so the
//! queue feeds CoDel the longest wait of anyone queued and drops the oldest entry of the lowest
//! criticality present (SRE book ch. 21, "Handling Overload": shed the least critical first).
//! The control law — when to drop — is unchanged.
//!
//! The state belongs to one criticality: the level whose waiters it has judged
//! ([`Codel::should_drop_from`]). A standing queue of SHEDDABLE says nothing about the
//! SHEDDABLE_PLUS waiters that remain once the SHEDDABLE ones are dropped or refused at the door:
//! those wait behind CRITICAL work, not behind a backlog of their own, and judged by the state
//! SHEDDABLE built they were refused at once (`spillway demo`: the `good` customer's
//! SHEDDABLE_PLUS, 10 requests/s within a capacity of 100/s, refused `queue_full` while `noisy`
//! was at 10×). So a higher level is judged afresh, over its own interval, and only once the
//! lower level's dropping state has ended.
//!
//! Time is always an argument; the state is plain fields behind the queue's `&mut`.

use std::time::{Duration, Instant};

use crate::criticality::Criticality;

/// CoDel state machine (RFC 8289 §5 pseudocode, re-expressed).
#[derive(Debug, Clone)]
pub(crate) struct Codel {
    target: Duration,
    interval: Duration,
    /// When the sojourn time will have been above target for a full interval (`None`: below).
    first_above: Option<Instant>,
    /// In the dropping state.
    dropping: bool,
    /// When the next drop is due while dropping.
    drop_next: Option<Instant>,
    /// Drops in the current dropping episode (drives the control law).
    count: u32,
    /// `count` at the start of the previous episode (RFC 8289 `lastcount`).
    last_count: u32,
    /// The criticality whose waiters the state describes (`None`: none judged yet).
    level: Option<Criticality>,
}

impl Codel {
    pub(crate) fn new(target: Duration, interval: Duration) -> Self {
        Codel {
            target,
            interval,
            first_above: None,
            dropping: false,
            drop_next: None,
            count: 0,
            last_count: 0,
            level: None,
        }
    }

    /// The criticality CoDel holds to be a standing queue (its dropping state), if any.
    pub(crate) fn standing(&self) -> Option<Criticality> {
        self.level.filter(|_| self.dropping)
    }

    /// The queue went empty (or holds nothing CoDel may drop): there is no standing queue any
    /// more.
    pub(crate) fn on_empty(&mut self) {
        self.first_above = None;
        self.dropping = false;
        self.level = None;
    }

    /// [`should_drop`](Self::should_drop) for the oldest waiter of `level`, the lowest
    /// criticality queued: the state is that level's. A lower level than the one judged starts
    /// the judgement afresh (it has its own delay); a higher one — the judged level has left
    /// the queue, dropped or refused at the door — is not judged while the lower level's
    /// dropping state lasts (it ends when nothing droppable is queued), and afresh after.
    pub(crate) fn should_drop_from(
        &mut self,
        level: Criticality,
        sojourn: Duration,
        now: Instant,
        len: usize,
    ) -> bool {
        match self.level {
            Some(judged) if judged == level => {}
            Some(judged) if judged < level && self.dropping => return false,
            _ => {
                self.first_above = None;
                self.dropping = false;
                self.level = Some(level);
            }
        }
        self.should_drop(sojourn, now, len)
    }

    /// RFC 8289 `dodequeue`'s `ok_to_drop`: has the sojourn time been above target for at least
    /// one interval? `len` is the queue length including this entry: a lone entry is never
    /// dropped (RFC 8289 spares the last MTU's worth of bytes for the same reason).
    fn ok_to_drop(&mut self, sojourn: Duration, now: Instant, len: usize) -> bool {
        if sojourn < self.target || len <= 1 {
            self.first_above = None;
            return false;
        }
        match self.first_above {
            None => {
                self.first_above = Some(now + self.interval);
                false
            }
            Some(t) => now >= t,
        }
    }

    /// `t + interval / sqrt(count)`: the control law.
    fn control_law(&self, t: Instant) -> Instant {
        let n = f64::from(self.count.max(1));
        t + self.interval.div_f64(n.sqrt())
    }

    /// Decides whether, at a dequeue where the standing delay is `sojourn` and `len` entries
    /// wait, one entry is dropped instead of served (the queue picks which).
    pub(crate) fn should_drop(&mut self, sojourn: Duration, now: Instant, len: usize) -> bool {
        let ok = self.ok_to_drop(sojourn, now, len);
        if self.dropping {
            if !ok {
                self.dropping = false;
                return false;
            }
            match self.drop_next {
                Some(next) if now >= next => {
                    self.count = self.count.saturating_add(1);
                    self.drop_next = Some(self.control_law(next));
                    true
                }
                _ => false,
            }
        } else if ok {
            self.dropping = true;
            // Re-enter near the previous drop rate if the last episode ended recently
            // (RFC 8289: "delta > 1 && now - drop_next < 16 * interval").
            let delta = self.count.saturating_sub(self.last_count);
            let recent = self
                .drop_next
                .is_some_and(|d| now.saturating_duration_since(d) < self.interval * 16);
            self.count = if delta > 1 && recent { delta } else { 1 };
            self.last_count = self.count;
            self.drop_next = Some(self.control_law(now));
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn drops_only_after_an_interval_above_target() {
        let t0 = Instant::now();
        let mut c = Codel::new(5 * MS, 100 * MS);
        assert!(
            !c.should_drop(10 * MS, t0, 5),
            "first sighting above target arms the timer"
        );
        assert!(!c.should_drop(10 * MS, t0 + 99 * MS, 5));
        assert!(
            c.should_drop(10 * MS, t0 + 100 * MS, 5),
            "a full interval above target"
        );
        // Dropping: the next drop waits interval/sqrt(1) = 100 ms.
        assert!(!c.should_drop(10 * MS, t0 + 150 * MS, 5));
        assert!(c.should_drop(10 * MS, t0 + 200 * MS, 5));
        // count = 2: next after 100/sqrt(2) ≈ 70.7 ms.
        assert!(!c.should_drop(10 * MS, t0 + 270 * MS, 5));
        assert!(c.should_drop(10 * MS, t0 + 271 * MS, 5));
        // Below target ends the episode.
        assert!(!c.should_drop(MS, t0 + 400 * MS, 5));
        assert!(!c.dropping);
    }

    #[test]
    fn never_drops_a_lone_entry_or_a_fresh_one() {
        let t0 = Instant::now();
        let mut c = Codel::new(5 * MS, 100 * MS);
        for i in 0..10 {
            assert!(!c.should_drop(Duration::from_secs(1), t0 + i * 100 * MS, 1));
        }
        for i in 0..10 {
            assert!(!c.should_drop(4 * MS, t0 + i * 100 * MS, 9));
        }
    }
}
