//! The proxy's queued admissions in a cell: polled when a release (or the queue) wakes them,
//! expired when the core's give-up time comes (re-armed when the core brings it forward).
//!
//! Why apart: these are the two places the simulation hands control to the core's
//! `QueuedAdmission` future, exactly as the proxy's request task does when it awaits it.

use super::*;

impl Sim<'_> {
    pub(super) fn queue_give_up(&mut self, id: u32, gen: u32) {
        if !self.live(id, gen) || self.reqs[id as usize].phase != Phase::Queued {
            return;
        }
        if let Held::Queued(q) = std::mem::replace(&mut self.reqs[id as usize].held, Held::None) {
            self.left_queue(id);
            let r = q.expire();
            self.refuse(id, r);
        }
    }

    /// Polls the queued admissions a release (or the queue) woke.
    pub(super) fn drain_woken(&mut self) {
        loop {
            let batch = std::mem::take(&mut *self.woken.lock().unwrap_or_else(|p| p.into_inner()));
            if batch.is_empty() {
                return;
            }
            for (id, gen) in batch {
                if !self.live(id, gen) || self.reqs[id as usize].phase != Phase::Queued {
                    continue;
                }
                let Held::Queued(mut q) =
                    std::mem::replace(&mut self.reqs[id as usize].held, Held::None)
                else {
                    continue;
                };
                let waker = Waker::from(Arc::new(Wakeup {
                    id,
                    gen,
                    woken: self.woken.clone(),
                }));
                match Pin::new(&mut q).poll(&mut Context::from_waker(&waker)) {
                    Poll::Ready(Ok(p)) => {
                        self.reqs[id as usize].held = Held::Queued(q);
                        self.send_to_backend(id, Held::Permit(p));
                    }
                    Poll::Ready(Err(r)) => {
                        self.reqs[id as usize].held = Held::Queued(q);
                        self.left_queue(id);
                        self.reqs[id as usize].held = Held::None;
                        self.refuse(id, r);
                    }
                    Poll::Pending => {
                        // Woken without an outcome: its give-up time was brought forward
                        // (`QueuedAdmission::give_up_at`); an expiry at the old time finds it
                        // gone.
                        let at = self.nanos(q.give_up_at());
                        self.reqs[id as usize].held = Held::Queued(q);
                        self.push(at, GIVE_UP, id, gen);
                    }
                }
            }
        }
    }
}
