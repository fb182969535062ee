//! The idle lists that keep HTTP/1.1 upstream connections between requests, one per thread and
//! task, and the sweeper that closes them.
//!
//! A connection nobody polls cannot notice on its own that the upstream closed it or that it
//! has been idle too long, so the idle lists do it: a peer-closed connection is found at
//! checkout (its socket reported readable: end of stream, or bytes nobody asked for), and one
//! sweeper task per thread (running only while that thread has idle connections) closes the
//! connections idle for `idle_timeout_ms`, and those it finds ended, at each expiry and at
//! least once a second ([`TICK`]).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::http1::Http1;
use super::Multiplexed;

struct Idle {
    h: Http1,
    since: Instant,
}

/// One thread's connections, indexed by task, with the limits that apply to them.
pub(super) struct Local {
    http1: Vec<Vec<Idle>>,
    pub(super) http2: Vec<Option<Multiplexed>>,
    max_idle: usize,
    idle_timeout: Duration,
    sweeping: bool,
}

/// One thread's [`Local`], shared with its sweeper and with response bodies that put
/// connections back (a lock nobody else takes on the thread-per-core runtime).
pub(crate) type Home = Arc<Mutex<Local>>;

pub(super) fn home(tasks: usize, max_idle: usize, idle_timeout: Duration) -> Home {
    Arc::new(Mutex::new(Local {
        http1: (0..tasks).map(|_| Vec::new()).collect(),
        http2: (0..tasks).map(|_| None).collect(),
        max_idle,
        idle_timeout,
        sweeping: false,
    }))
}

pub(super) fn lock(home: &Home) -> MutexGuard<'_, Local> {
    // Nothing here panics while holding it; a poisoned list is still a list.
    home.lock().unwrap_or_else(|p| p.into_inner())
}

impl Local {
    /// Idle HTTP/1.1 connections to `task`.
    pub(super) fn idle(&self, task: usize) -> usize {
        self.http1.get(task).map_or(0, Vec::len)
    }

    /// The most recently used connection that can take a request (LIFO: the warmest, and the
    /// older ones age out under the idle timeout when traffic falls). Closed ones are dropped.
    pub(super) fn checkout(&mut self, task: usize) -> Option<Http1> {
        let list = self.http1.get_mut(task)?;
        while let Some(mut i) = list.pop() {
            if i.h.is_reusable() {
                return Some(i.h);
            }
        }
        None
    }
}

/// Puts a connection whose exchange is complete back on `home`'s idle list for `task` (drops
/// it, which closes it, when the list is full of live connections or when no runtime could run
/// the sweeper that would close it later).
pub(super) fn put_back(home: &Home, task: usize, h: Http1) {
    let mut l = lock(home);
    let spawn = if l.sweeping {
        None
    } else {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => Some(rt),
            Err(_) => return,
        }
    };
    let max = l.max_idle;
    let Some(list) = l.http1.get_mut(task) else {
        return;
    };
    if list.len() >= max {
        // Connections the upstream closed make room first.
        list.retain_mut(|i| i.h.is_reusable());
    }
    if list.len() >= max {
        return;
    }
    list.push(Idle {
        h,
        since: Instant::now(),
    });
    if let Some(rt) = spawn {
        l.sweeping = true;
        let idle = l.idle_timeout;
        drop(l);
        rt.spawn(sweep(Arc::clone(home), idle));
    }
}

/// The sweeper's longest sleep.
///
/// Why a tick and not only the next expiry: a peer-closed idle connection is closed within a
/// second instead of at its idle timeout; and while a thread has idle connections (it does
/// whenever it carries traffic) a timer at most this far ahead keeps tokio's time driver from
/// waking its own thread for each per-request timer — hyper's header-read timer (10 s) and the
/// request timeout (30 s) were the earliest deadline whenever the wheel had no other, and
/// registering a timer earlier than the driver's next wake unparks the driver, an eventfd
/// `write` and an early `epoll_wait` return (tokio 1.54 `runtime/time/mod.rs`, `reregister`:
/// `when < next_wake` → `unpark`): a system call and a wake-up no request needed.
const TICK: Duration = Duration::from_secs(1);

/// Closes `home`'s connections idle for `idle` or found ended, at each expiry and at least
/// every [`TICK`], until none is left (a later `put_back` starts it again) or the pool is gone.
async fn sweep(home: Home, idle: Duration) {
    loop {
        let next = {
            let mut l = lock(&home);
            // Only this task still holds the list: the pool was replaced or dropped.
            let orphan = Arc::strong_count(&home) == 1;
            let now = Instant::now();
            let mut oldest: Option<Instant> = None;
            for list in &mut l.http1 {
                if orphan {
                    list.clear();
                    continue;
                }
                // Oldest first: entries are pushed as they become idle.
                let expired = list
                    .iter()
                    .take_while(|i| now.saturating_duration_since(i.since) >= idle)
                    .count();
                list.drain(..expired);
                list.retain_mut(|i| i.h.is_reusable());
                if let Some(first) = list.first() {
                    oldest = Some(oldest.map_or(first.since, |o| o.min(first.since)));
                }
            }
            match oldest {
                Some(o) => (o + idle).min(now + TICK),
                None => {
                    l.sweeping = false;
                    return;
                }
            }
        };
        tokio::time::sleep_until(next.into()).await;
    }
}
