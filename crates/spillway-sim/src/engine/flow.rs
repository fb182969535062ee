//! A request's path through the fleet: send, admit, work, call down, answer up, retry.
//!
//! Every decision here is the core's: `AdaptiveThrottle::try_acquire` before an attempt (and
//! `settle` once its outcome is in), `AdmissionController::admit` at the task,
//! `RetryPolicy::decide` on a failure (with the outcome recorded first, as the policy's docs
//! ask), and the `Permit`'s drop on completion.
//! What this file adds is only the plumbing a real deployment has around them: timers, load
//! balancing, workers, and the don't-retry marker on failures passed up by gated callers
//! (as `spillway-tower`'s retry layer does).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::shard::TopDone;
use super::*;
use crate::model::{Attempt, Held, Node};
use spillway_core::controller::NoAnswer;

impl Engine {
    #[inline]
    pub(super) fn node(&self, id: u32) -> &Node {
        &self.slab.nodes[id as usize]
    }

    #[inline]
    fn node_mut(&mut self, id: u32) -> &mut Node {
        &mut self.slab.nodes[id as usize]
    }

    /// The retry settings and client-side policies of the caller that is node `id`.
    fn caller_of(&self, id: u32) -> (&RetrySet, &Caller) {
        let n = self.node(id);
        if n.layer == CLIENT {
            let g = &self.groups[n.group as usize];
            (&g.retry, &g.instances[n.instance as usize])
        } else {
            let l = &self.layers[n.layer as usize];
            (&l.retry, &l.callers[n.task as usize])
        }
    }

    /// Sends the next attempt of node `pid`'s current downstream call.
    pub(super) fn send(&mut self, pid: u32) {
        let now = self.now;
        let n = self.node(pid);
        if n.layer == CLIENT && now >= n.deadline {
            // The request's own deadline has passed: no further attempt (as `spillway load`).
            return self.complete(pid, Res::Timeout);
        }
        let now_i = self.at(now);
        let (timeout, throttled) = {
            let (set, caller) = self.caller_of(pid);
            let throttled = caller
                .throttle
                .as_ref()
                .is_some_and(|t| t.try_acquire(now_i).is_err());
            (set.timeout, throttled)
        };
        let p = self.node_mut(pid);
        p.local += 1;
        if throttled {
            return self.on_result(pid, Res::Throttled);
        }
        let target = if p.layer == CLIENT {
            0
        } else {
            p.layer as usize + 1
        };
        let (first, group, avoid) = (
            p.layer == CLIENT && p.local == 1,
            p.group as usize,
            if p.local > 1 { p.last_task } else { NONE },
        );
        let picked = if first {
            // A first attempt: from the group's stream, whose next picks are prefetched.
            self.first_pick(group)
        } else {
            let task = self.layers[target].pick(&mut self.rng, avoid);
            // Start loading the task's admission state while the attempt is set up.
            if let Some(t) = task {
                self.prefetch_task(target, t);
            }
            task
        };
        let Some(task) = picked else {
            return self.on_result(pid, Res::Conn);
        };
        let p = self.node_mut(pid);
        p.last_task = task;
        p.sent += 1;
        let give_up = now.saturating_add(timeout).min(p.deadline);
        let caller = if p.layer == CLIENT {
            p.instance
        } else {
            p.task
        };
        let (crit, group, local, pgen) = (p.crit, p.group, p.local, p.gen);
        let cid = self.alloc_node();
        let protected = self.layers[target].protected;
        let c = self.node_mut(cid);
        c.phase = Phase::Queued;
        c.parent = pid;
        c.parent_gen = pgen;
        Attempt {
            layer: target as u16,
            crit,
            group,
            task,
            instance: caller,
            attempt_in: local,
            deadline: if protected { give_up } else { NEVER },
            give_up,
        }
        .write_to(c);
        c.since = now;
        let cgen = c.gen;
        let p = self.node_mut(pid);
        p.child = cid;
        p.child_gen = cgen;
        p.phase = Phase::Calling;
        self.attempts += 1;
        self.push(give_up, Kind::AttemptTimeout, cid, cgen);
        let net = self.layers[target].net_ns;
        if net == 0 {
            return self.arrive(cid);
        }
        let at = now.saturating_add(net);
        if self.part.shards > 1 && !self.part.owns(task) {
            return self.send_remote(cid, at);
        }
        self.node_mut(cid).phase = Phase::Transit;
        self.push(at, Kind::Deliver, cid, cgen);
    }

    /// Attempt `cid` crossed the network to its task (unless its caller's cancellation, which
    /// travels behind it, has already been acted on).
    pub(super) fn delivered(&mut self, cid: u32, gen: u32) {
        if !self.slab.is(cid, gen) || self.node(cid).phase != Phase::Transit {
            return;
        }
        let now = self.now;
        let n = self.node_mut(cid);
        n.phase = Phase::Queued;
        n.since = now;
        self.arrive(cid);
    }

    /// Node `cid` reaches its task: admission (protected) or straight to the workers.
    fn arrive(&mut self, cid: u32) {
        let (layer, at) = (self.node(cid).layer as usize, sec(self.now));
        bump(&mut self.stats[layer].arrivals, at);
        let n = self.node(cid);
        let (l, t, gen) = (n.layer as usize, n.task as usize, n.gen);
        let task = &self.layers[l].tasks[t];
        if task.down > 0 {
            self.stats[l].lost += 1;
            return self.reply(cid, Res::Conn);
        }
        let Some(ctrl) = &task.controller else {
            return self.start_work(cid);
        };
        let req = AdmissionRequest {
            customer: &self.customers[self.groups[n.group as usize].customer as usize],
            criticality: n.crit,
            operation: "",
            deadline: (n.deadline != NEVER).then(|| self.clock.at(n.deadline)),
            attempt: n.attempt_in,
            estimated_cost: self.layers[l].est_cost,
            health_check: false,
            continuation: false,
        };
        match ctrl.admit(&req) {
            Admission::Admitted(p) => {
                *self.slab.held_mut(cid) = Held::Permit(p);
                self.start_work(cid);
            }
            Admission::Refused(r) => self.refused(cid, r),
            Admission::Queued(mut q) => {
                let waker = self.woken.waker(cid, gen);
                match Pin::new(&mut q).poll(&mut Context::from_waker(&waker)) {
                    Poll::Ready(Ok(p)) => {
                        *self.slab.held_mut(cid) = Held::Permit(p);
                        self.start_work(cid);
                    }
                    Poll::Ready(Err(r)) => self.refused(cid, r),
                    Poll::Pending => {
                        let at = self.nanos_of(q.give_up_at());
                        *self.slab.held_mut(cid) = Held::Queued(q);
                        self.push(at, Kind::QueueGiveUp, cid, gen);
                    }
                }
            }
        }
    }

    pub(super) fn refused(&mut self, cid: u32, r: Refusal) {
        let (l, t) = (self.node(cid).layer as usize, self.node(cid).task as usize);
        let s = &mut self.stats[l];
        s.refused_by_reason[r.reason.index()] += 1;
        bump(&mut s.refused, sec(self.now));
        let cost = self.layers[l].reject_ns;
        if cost > 0 {
            let workers = self.layers[l].workers;
            let task = &mut self.layers[l].tasks[t];
            if task.busy < workers {
                task.busy += 1;
                let at = self.now.saturating_add(cost);
                self.push(at, Kind::RejectDone, t as u32, l as u32);
            } else {
                task.fifo.push_back((NONE, 0));
            }
        }
        self.reply(cid, Res::Refused(r.reason));
    }

    /// A worker of task `t` of layer `l` is free: give it to the next waiting job.
    pub(super) fn release_worker(&mut self, l: usize, t: usize) {
        let task = &mut self.layers[l].tasks[t];
        task.busy = task.busy.saturating_sub(1);
        while let Some((i, g)) = self.layers[l].tasks[t].fifo.pop_front() {
            if i == NONE {
                self.layers[l].tasks[t].busy += 1;
                let at = self.now.saturating_add(self.layers[l].reject_ns);
                self.push(at, Kind::RejectDone, t as u32, l as u32);
                break;
            }
            if self.slab.is(i, g) && self.node(i).phase == Phase::WaitWorker {
                self.layers[l].tasks[t].busy += 1;
                self.begin(i);
                break;
            }
        }
    }

    /// Admitted: take a worker, or wait for one.
    pub(super) fn start_work(&mut self, cid: u32) {
        let n = self.node_mut(cid);
        n.phase = Phase::WaitWorker;
        let (l, t, gen) = (n.layer as usize, n.task as usize, n.gen);
        let layer = &mut self.layers[l];
        let task = &mut layer.tasks[t];
        if task.down > 0 {
            self.stats[l].lost += 1;
            return self.reply(cid, Res::Conn);
        }
        if task.busy < layer.workers {
            task.busy += 1;
            self.begin(cid);
        } else {
            task.fifo.push_back((cid, gen));
        }
    }

    /// On a worker: draw the service time at the layer's current speed.
    fn begin(&mut self, cid: u32) {
        let now = self.now;
        let n = &self.slab.nodes[cid as usize];
        let layer = &self.layers[n.layer as usize];
        let s = service_nanos(&mut self.rng, &layer.service, layer.speed);
        let st = &mut self.stats[n.layer as usize];
        let wait = now.saturating_sub(n.since);
        st.wait_sum_ns += u128::from(wait);
        st.wait_n += 1;
        let n = self.node_mut(cid);
        n.wait_ns = wait;
        n.work_ns = s;
        n.phase = Phase::Working;
        let gen = n.gen;
        self.push(now.saturating_add(s), Kind::WorkerDone, cid, gen);
    }

    pub(super) fn worker_done(&mut self, cid: u32, gen: u32) {
        // Working nodes are freed only here, so the event is never stale.
        if !self.slab.is(cid, gen) {
            return;
        }
        let now = self.now;
        let n = self.node(cid);
        let (l, t, give_up, cancelled) =
            (n.layer as usize, n.task as usize, n.give_up, n.cancelled);
        self.release_worker(l, t);
        let s = &mut self.stats[l];
        bump(&mut s.served, sec(now));
        if cancelled || now > give_up {
            bump(&mut s.wasted, sec(now));
        }
        if cancelled {
            // Its caller went away: released as the proxy releases it (`NoAnswer`).
            return self.finish_node(cid, NoAnswer::CallerGone.outcome());
        }
        if self.layers[l].tasks[t].down > 0 {
            self.stats[l].lost += 1;
            return self.reply(cid, Res::Conn);
        }
        let slow = self.layers[l].slow_ns;
        if slow > 0 {
            self.node_mut(cid).phase = Phase::Slow;
            self.push(now.saturating_add(slow), Kind::SlowDone, cid, gen);
            return;
        }
        self.after_local(cid);
    }

    /// Local work done: call the next layer, or answer.
    pub(super) fn after_local(&mut self, cid: u32) {
        let l = self.node(cid).layer as usize;
        let calls = self.layers[l].calls;
        if l + 1 < self.layers.len() && calls > 0 {
            let now_i = self.at(self.now);
            if let Some(p) = &self.caller_of(cid).1.policy {
                p.record_request(now_i);
            }
            let n = self.node_mut(cid);
            n.calls_left = calls;
            n.local = 0;
            self.send(cid);
        } else {
            self.reply(cid, Res::Ok);
        }
    }

    /// Releases node `id` (its permit with `outcome`) without answering anyone.
    fn finish_node(&mut self, id: u32, outcome: Outcome) {
        if self.node(id).layer != CLIENT {
            if let Some(mut p) = self.slab.take_permit(id) {
                p.set_outcome(outcome);
                drop(p);
            }
        }
        self.slab.free(id);
    }

    /// Server node `cid` answers its caller with `res` and goes away.
    pub(super) fn reply(&mut self, cid: u32, res: Res) {
        let now = self.now;
        let layer = &self.layers[self.node(cid).layer as usize];
        let (has_quota, net) = (layer.has_quota, layer.net_ns);
        let n = &self.slab.nodes[cid as usize];
        let (parent, pgen, from) = (n.parent, n.parent_gen, n.from);
        let (wait, served, work) = (
            n.wait_ns,
            now.saturating_sub(n.since + n.wait_ns),
            n.work_ns,
        );
        if let Some(mut p) = self.slab.take_permit(cid) {
            p.set_outcome(match res {
                Res::Ok => Outcome::Success,
                Res::Conn => Outcome::Ignore,
                _ => Outcome::Dropped,
            });
            if has_quota {
                p.set_actual_cost(work as f64 / 1e9);
            }
            drop(p);
        }
        if net > 0 && parent != NONE {
            if from != LOCAL {
                let at = now.saturating_add(net);
                return self.answer_remote(cid, res, at, wait, served);
            }
            // The answer crosses the network; the node carries what the caller will record.
            let n = self.node_mut(cid);
            n.phase = Phase::Answering;
            n.work_ns = served;
            self.push(now.saturating_add(net), Kind::Answer, cid, res.to_word());
            return;
        }
        self.slab.free(cid);
        self.answered(cid, parent, pgen, res, wait, served);
    }

    /// The answer of node `cid` reached its caller across the network.
    pub(super) fn answer_arrived(&mut self, cid: u32, res: Res) {
        let n = self.node(cid);
        if n.phase != Phase::Answering {
            return;
        }
        let (parent, pgen, wait, served) = (n.parent, n.parent_gen, n.wait_ns, n.work_ns);
        self.slab.free(cid);
        self.answered(cid, parent, pgen, res, wait, served);
    }

    /// Attempt `cid` (freed) answered `res` to `parent`: taken if the caller still waits for
    /// this attempt.
    fn answered(&mut self, cid: u32, parent: u32, pgen: u32, res: Res, wait: u64, served: u64) {
        if parent == NONE || !self.slab.is(parent, pgen) || self.node(parent).child != cid {
            return;
        }
        let p = self.node_mut(parent);
        p.child = NONE;
        if p.layer == CLIENT && res == Res::Ok {
            p.wait_ns = wait;
            p.work_ns = served;
        }
        self.on_result(parent, res);
    }

    /// Node `pid`'s current attempt ended with `res`: next call, retry, or finish.
    fn on_result(&mut self, pid: u32, res: Res) {
        let now = self.now;
        let now_i = self.at(now);
        let n = self.node(pid);
        let (last_task, local, carried, deadline, gen) =
            (n.last_task, n.local, n.attempt_in, n.deadline, n.gen);
        let set = *self.caller_of(pid).0;
        if res != Res::Throttled {
            // The throttle let this attempt through: its outcome is in (after the accept).
            if let Some(t) = &self.caller_of(pid).1.throttle {
                if res == Res::Ok {
                    t.record_accept(now_i);
                }
                t.settle();
            }
        }
        if res == Res::Ok {
            let caller = self.caller_of(pid).1;
            if let Some(p) = &caller.policy {
                p.record_outcome(now_i, u64::from(last_task), false);
            }
            let n = self.node_mut(pid);
            n.calls_left -= 1;
            if n.calls_left > 0 {
                n.local = 0;
                if let Some(p) = &self.caller_of(pid).1.policy {
                    p.record_request(now_i);
                }
                return self.send(pid);
            }
            return self.complete(pid, Res::Ok);
        }
        let dont_retry = match res {
            Res::Refused(r) => !r.retry_elsewhere_can_help(),
            Res::Failed { dont_retry } => dont_retry,
            _ => false,
        };
        let wait = backoff(&mut self.rng, &set, local);
        let caller = self.caller_of(pid).1;
        let retry = match set.kind {
            RetryKind::None => false,
            RetryKind::Naive => res != Res::Throttled && local < set.max_attempts,
            RetryKind::Budgeted | RetryKind::Throttled => match &caller.policy {
                Some(p) if res != Res::Throttled => {
                    // A timeout under load is the task failing to serve: an overload signal
                    // for the widespread check, like a refusal.
                    let overload = !matches!(res, Res::Conn);
                    p.record_outcome(now_i, u64::from(last_task), overload);
                    let failure = Failure {
                        attempts_made: carried.saturating_sub(1).saturating_add(local),
                        dont_retry,
                        retryable: true,
                    };
                    // Never retry past the deadline (as spillway-tower's retry layer).
                    now.saturating_add(wait) < deadline && p.decide(now_i, &failure).is_retry()
                }
                _ => false,
            },
        };
        if !retry {
            return self.complete(pid, res);
        }
        if wait == 0 {
            return self.send(pid);
        }
        self.node_mut(pid).phase = Phase::Backoff;
        self.push(now.saturating_add(wait), Kind::Retry, pid, gen);
    }

    /// Node `pid` is done with its downstream calls: record (top-level) or answer up.
    fn complete(&mut self, pid: u32, res: Res) {
        let now = self.now;
        let n = self.node(pid);
        if n.layer != CLIENT {
            let (l, t) = (n.layer as usize, n.task as usize);
            let up = if self.layers[l].tasks[t].down > 0 {
                self.stats[l].lost += 1;
                Res::Conn
            } else {
                match res {
                    Res::Ok => Res::Ok,
                    // Gated callers pass an overload up marked "don't retry" (SRE book ch. 21:
                    // only the layer right above the overloaded one retries).
                    Res::Conn => Res::Failed { dont_retry: false },
                    _ => Res::Failed {
                        dont_retry: self.layers[l].retry.gated(),
                    },
                }
            };
            return self.reply(pid, up);
        }
        let outcome = match res {
            Res::Ok => ReqOutcome::Success,
            Res::Refused(_) | Res::Failed { .. } => ReqOutcome::Rejected,
            Res::Timeout => ReqOutcome::TimedOut,
            Res::Throttled => ReqOutcome::Throttled,
            Res::Conn => ReqOutcome::Error,
        };
        let since = n.since;
        let done = TopDone {
            offered_ns: n.since,
            crit: n.crit,
            customer: self.groups[n.group as usize].customer,
            attempts: n.sent,
            outcome,
            latency_ns: now.saturating_sub(n.since),
            wait_ns: n.wait_ns,
            work_ns: n.work_ns,
        };
        self.record_top(done);
        self.top_finished(since, now);
        self.slab.free(pid);
    }

    /// The caller's timer for attempt `cid` fired: it gives up on it.
    pub(super) fn attempt_timeout(&mut self, cid: u32, gen: u32) {
        if !self.slab.is(cid, gen) {
            return;
        }
        let (parent, pgen) = (self.node(cid).parent, self.node(cid).parent_gen);
        if parent == NONE || !self.slab.is(parent, pgen) || self.node(parent).child != cid {
            return;
        }
        self.node_mut(parent).child = NONE;
        self.leave(cid);
        self.on_result(parent, Res::Timeout);
    }

    /// The caller of attempt `c` stops waiting for it: a protected task is told (across the
    /// network, if any: the cancellation follows the attempt), an unprotected one is not and
    /// finishes the work for nobody.
    fn leave(&mut self, c: u32) {
        if self.node(c).phase == Phase::Remote {
            return self.leave_remote(c);
        }
        let layer = &self.layers[self.node(c).layer as usize];
        if !layer.protected {
            self.node_mut(c).parent = NONE;
        } else if layer.net_ns == 0 {
            self.cancel(c);
        } else {
            let (at, gen) = (self.now.saturating_add(layer.net_ns), self.node(c).gen);
            self.push(at, Kind::Cancel, c, gen);
        }
    }

    /// The caller of `id` left (protected): drop it and everything it started below.
    pub(super) fn cancel(&mut self, id: u32) {
        let n = self.node_mut(id);
        n.parent = NONE;
        match n.phase {
            // Answered already: the answer, on its way, goes to nobody.
            Phase::Free | Phase::Answering => {}
            // Cannot happen (the cancellation travels behind the attempt); the attempt is
            // dropped before it reaches its task.
            Phase::Transit => self.slab.free(id),
            // A stub: the cancellation goes on to the shard serving the attempt.
            Phase::Remote => self.leave_remote(id),
            // Dropping the queued admission takes it out of the core's queue.
            Phase::Queued => self.slab.free(id),
            // CPU already committed is not reclaimed: stop when the work ends.
            Phase::Working => n.cancelled = true,
            Phase::Calling => {
                let (c, cg) = (n.child, n.child_gen);
                if c != NONE {
                    // Its attempt ends unanswered: settled in the throttle that let it through.
                    if let Some(t) = &self.caller_of(id).1.throttle {
                        t.settle();
                    }
                }
                if c != NONE && self.slab.is(c, cg) {
                    self.leave(c);
                }
                self.finish_node(id, NoAnswer::CallerGone.outcome());
            }
            // The caller went away: not the upstream's failure (`NoAnswer`, as the proxy).
            Phase::WaitWorker | Phase::Slow | Phase::Backoff => {
                self.finish_node(id, NoAnswer::CallerGone.outcome())
            }
        }
    }

    /// A queued admission reached its give-up time.
    pub(super) fn queue_give_up(&mut self, cid: u32, gen: u32) {
        if !self.slab.is(cid, gen) || self.node(cid).phase != Phase::Queued {
            return;
        }
        if let Some(q) = self.slab.take_queued(cid) {
            let r = q.expire();
            self.refused(cid, r);
        }
    }
}

/// Second index of `nanos`.
#[inline]
pub(super) fn sec(nanos: u64) -> usize {
    (nanos / 1_000_000_000) as usize
}

/// Full-jitter exponential backoff before retry number `retry` (AWS Architecture Blog,
/// "Exponential Backoff and Jitter", 2015): uniform in `[0, min(max, base · 2^(retry−1)))`.
fn backoff(rng: &mut fastrand::Rng, set: &RetrySet, retry: u32) -> u64 {
    if set.backoff_base == 0 {
        return 0;
    }
    let shift = retry.saturating_sub(1).min(40);
    let cap = set
        .backoff_base
        .saturating_mul(1u64 << shift)
        .min(set.backoff_max);
    (rng.f64() * cap as f64) as u64
}
