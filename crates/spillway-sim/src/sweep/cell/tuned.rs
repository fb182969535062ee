//! The tuned baseline's queue, and the oracle's: a concurrency cap at the backend's workers,
//! a strict priority queue by criticality, and a queued request dropped when its client's
//! timeout runs out.
//!
//! Why this model: it is what `bench/robustness.sh` runs for real as "HAProxy-tuned" —
//! `server … maxconn <workers>`, `http-request set-priority-class` from the criticality header
//! (HAProxy dequeues the lowest class first, then by arrival), `timeout queue` = the client's
//! timeout and `option abortonclose` — so a cell's Spillway run can be set beside what a
//! hand-tuned proxy that knows the capacity achieves on the same arrivals. The oracle is the
//! same queue told each request's service time: a request that cannot end by its deadline is
//! refused when its turn comes instead of occupying a worker.

use std::collections::VecDeque;

use super::*;

/// The cap, what holds a slot, and who waits.
pub(in crate::sweep) struct Tuned {
    cap: u32,
    in_flight: u32,
    /// CRITICAL first, then the rest, each in arrival order. A request whose client gave up
    /// stays in place until its turn, and is skipped then.
    queues: [VecDeque<(u32, u32)>; 2],
    /// Told each request's service time (the oracle).
    clairvoyant: bool,
}

impl Tuned {
    pub(in crate::sweep) fn new(cap: u32, clairvoyant: bool) -> Tuned {
        Tuned {
            cap: cap.max(1),
            in_flight: 0,
            queues: [VecDeque::new(), VecDeque::new()],
            clairvoyant,
        }
    }
}

impl Sim<'_> {
    /// A new request joins its class's queue; the run loop dispatches after each event.
    pub(super) fn tuned_arrive(&mut self, id: u32, gen: u32) {
        let critical = self.reqs[id as usize].critical;
        self.reqs[id as usize].held = Held::Waiting;
        if let Some(t) = &mut self.tuned {
            t.queues[usize::from(!critical)].push_back((id, gen));
        }
    }

    /// A slot's holder ended (answered, or its client left): the slot is free.
    pub(super) fn tuned_release(&mut self) {
        if let Some(t) = &mut self.tuned {
            t.in_flight = t.in_flight.saturating_sub(1);
        }
    }

    /// Fills free slots from the queues, highest class first.
    pub(super) fn tuned_dispatch(&mut self) {
        loop {
            let Some(t) = &mut self.tuned else { return };
            if t.in_flight >= t.cap {
                return;
            }
            let clairvoyant = t.clairvoyant;
            let Some((id, gen)) = t.queues[0].pop_front().or_else(|| t.queues[1].pop_front())
            else {
                return;
            };
            if !self.live(id, gen) || !matches!(self.reqs[id as usize].held, Held::Waiting) {
                continue;
            }
            if clairvoyant {
                // Oracles run only for open-loop cells (R2/R3), whose service times are drawn
                // on arrival; a closed loop's are drawn at the worker (`cell.rs`).
                debug_assert!(
                    !self.service_at_start,
                    "an oracle needs service times up front"
                );
                let r = &self.reqs[id as usize];
                let (service, deadline) = (r.service, r.deadline);
                // The backend's FIFO is empty here (the oracle's work always ends in time, so
                // its slots are its workers): the request would start now.
                let held = self.fifo.len() as u64 + u64::from(self.busy) + 1;
                let takes = (service as f64 * self.slowdown(held)) as u64;
                if self.now.saturating_add(takes.max(1)) > deadline {
                    self.left_queue(id);
                    self.reqs[id as usize].held = Held::None;
                    self.refuse_as(id, "oracle_late");
                    continue;
                }
            }
            if let Some(t) = &mut self.tuned {
                t.in_flight += 1;
            }
            self.send_to_backend(id, Held::Slot);
        }
    }
}
