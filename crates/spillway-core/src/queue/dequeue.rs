//! Who is served next: the highest class's oldest (FIFO) or newest (LIFO) entry, once the
//! entries that ran out of time and CoDel's victims have been dropped.

use std::time::{Duration, Instant};

use super::{
    cannot_finish, class_of, classes_in, highest, AdmissionQueue, DropReason, QueueEntry,
    SlotSource, SHEDDABLE_CLASSES,
};
use crate::criticality::Criticality;

impl<T> AdmissionQueue<T> {
    /// The class and position of the entry to serve next: the highest class, its oldest
    /// (FIFO) or newest (LIFO) entry.
    fn head(&self, now: Instant) -> Option<(usize, usize)> {
        let lifo = self.is_lifo(now);
        let class = highest(self.nonempty)?;
        let pos = if lifo {
            self.classes[class].len() - 1
        } else {
            0
        };
        Some((class, pos))
    }

    /// Criticality of the entry that would be served next.
    pub fn peek_criticality(&self, now: Instant) -> Option<Criticality> {
        let (class, pos) = self.head(now)?;
        self.classes[class].get(pos).map(|e| e.criticality)
    }

    fn take(&mut self, now: Instant, class: usize, pos: usize) -> Option<QueueEntry<T>> {
        let e = self.classes[class].remove(pos)?;
        self.note_class(class);
        self.len -= 1;
        self.note_len(now);
        Some(e)
    }

    /// Dequeues the next entry to serve, if `slots` has a slot for it — and takes that slot.
    ///
    /// On the way, entries that should not be served are removed and handed to `on_drop`:
    /// any that waited `max_wait` or whose deadline passed ([`purge`](Self::purge)), a head
    /// that cannot finish by its deadline given `expected_service`, and CoDel's victims. CoDel
    /// is only consulted when a slot is free (a drop is a dequeue decision).
    pub fn dequeue<S: SlotSource + ?Sized>(
        &mut self,
        now: Instant,
        expected_service: Duration,
        slots: &S,
        mut on_drop: impl FnMut(QueueEntry<T>, DropReason),
    ) -> Option<QueueEntry<T>> {
        // Judged before the purge: once CRITICAL overload is sustained, its waiters past the
        // max wait go (`sustained.rs`).
        self.sustained();
        self.purge(now, expected_service, &mut on_drop);
        loop {
            let (class, pos) = self.head(now)?;
            let e = self.classes[class].get(pos)?;
            let (c, enqueued_at, deadline) = (e.criticality, e.enqueued_at, e.deadline);
            if cannot_finish(now, expected_service, deadline) {
                let e = self.take(now, class, pos)?;
                on_drop(e, DropReason::DeadlineExceeded);
                continue;
            }
            if !slots.has_slot(c) {
                return None;
            }
            let len = self.len;
            // CoDel drops only *sheddable* work (SHEDDABLE, SHEDDABLE_PLUS), the oldest entry of
            // the lowest class present, and judges that class's standing delay — how long its
            // oldest entry has waited. The SRE book (ch. 21, "Handling Overload") sheds the
            // least critical work first; dropping the head (the most critical waiter) made
            // CRITICAL requests fail while SHEDDABLE ones still waited behind them. And
            // CRITICAL work is not CoDel's to drop at all: when a cut of the limit leaves more
            // in flight than CRITICAL may use, CRITICAL waiters stand for a round trip though
            // CRITICAL demand is well within capacity; judged on a 5 ms target they were
            // dropped (issue 28: CRITICAL refused `queue_timeout`). CRITICAL work waits until
            // its own budget runs out (its deadline, else `max_wait`) and is refused on
            // arrival when it could not start in time.
            //
            // Nor is work above a level being shed (`set_shed_level`): while SHEDDABLE is
            // refused, a SHEDDABLE_PLUS queue stands behind CRITICAL, and dropping it let the
            // shed SHEDDABLE be admitted in its place once the queue was empty (`spillway
            // demo`, simulated: the `good` customer's SHEDDABLE_PLUS dropped after 24–52 ms,
            // SHEDDABLE admitted 38–48 ms later). It waits out its own budget instead.
            //
            // Nor work with a deadline of a level whose overload is a burst
            // (`set_burst_levels`): it waits as its deadline allows, and a 5 ms target judged
            // a queue standing at 0.9 × a slow service's capacity.
            let droppable = match self.shed_level {
                Some(s) => (1u32 << (class_of(s, true) + 1)) - 1,
                None => u32::MAX,
            };
            let sheddable = self.nonempty & SHEDDABLE_CLASSES & droppable;
            let victim = classes_in(sheddable).next();
            let in_burst = victim.is_some_and(|k| self.waits_for_deadline(k));
            if let Some(codel) = self.codel.as_mut().filter(|_| !in_burst) {
                match victim {
                    None => codel.on_empty(),
                    Some(victim) => {
                        let (oldest, level) = self.classes[victim]
                            .front()
                            .map_or((enqueued_at, c), |e| (e.enqueued_at, e.criticality));
                        let sojourn = now.saturating_duration_since(oldest);
                        if codel.should_drop_from(level, sojourn, now, len) {
                            let e = self.take(now, victim, 0)?;
                            on_drop(e, DropReason::Codel);
                            continue;
                        }
                    }
                }
            }
            if !slots.take_slot(c) {
                return None;
            }
            self.note_served(now, c);
            let e = self.take(now, class, pos);
            self.sustained.on_dispatch(now, self.len);
            return e;
        }
    }
}
