//! The hot-path decisions allocate nothing: counted with a global allocator that tallies every
//! allocation made by the current thread.
//!
//! This file is its own test binary, so the counting allocator affects nothing else; the one
//! `unsafe` is the `GlobalAlloc` impl, which only forwards to the system allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use spillway_core::controller::{
    Admission, AdmissionConfig, AdmissionController, AdmissionRequest,
};
use spillway_core::quota::{CustomerQuota, QuotaBook, QuotaConfig, QuotaEnforcement};
use spillway_core::retry::{Failure, RetryConfig, RetryPolicy};
use spillway_core::throttle::{AdaptiveThrottle, ThrottleConfig};
use spillway_core::{Criticality, ManualClock};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to `System` unchanged; the counter is a thread-local `Cell` that
// does not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while running `f`.
fn allocations_in(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn admit_and_release_allocate_nothing() {
    let clock = ManualClock::new();
    // The core's shed ladder (SHEDDABLE from 0.8), so that the refusals below are sheds: the
    // default policy sheds SHEDDABLE only above full and would queue them.
    let cfg = AdmissionConfig {
        shed: spillway_core::shed::ShedConfig::default(),
        ..AdmissionConfig::default()
    };
    let c = AdmissionController::new(cfg, Arc::new(clock.clone())).expect("valid");
    let req = AdmissionRequest::new("alice", Criticality::Critical);
    // Warm up: first-use initialisation (thread-local RNG, lazily built state) is not per decision.
    for _ in 0..10 {
        drop(c.admit(&req));
    }
    let n = allocations_in(|| {
        for _ in 0..10_000 {
            clock.advance(Duration::from_micros(50));
            match c.admit(&req) {
                Admission::Admitted(p) => {
                    clock.advance(Duration::from_millis(2));
                    drop(p);
                }
                other => panic!("expected an admission with nothing in flight, got {other:?}"),
            }
        }
    });
    assert_eq!(
        n, 0,
        "admit + release allocated {n} times in 10,000 decisions"
    );
    // A refusal must be as cheap: fill the limit with CRITICAL work, then SHEDDABLE arrivals
    // find utilisation at 1.0 and are shed without entering the queue.
    let sheddable = AdmissionRequest::new("bob", Criticality::Sheddable);
    let held: Vec<_> = (0..1000)
        .map_while(|_| match c.admit(&req) {
            Admission::Admitted(p) => Some(p),
            _ => None,
        })
        .collect();
    assert!(!held.is_empty());
    let mut refused = 0;
    let n = allocations_in(|| {
        for _ in 0..1000 {
            if let Admission::Refused(_) = c.admit(&sheddable) {
                refused += 1;
            }
        }
    });
    assert_eq!(
        refused, 1000,
        "SHEDDABLE must be refused while CRITICAL fills the limit"
    );
    assert_eq!(n, 0, "1,000 refusals allocated {n} times");
    drop(held);
}

#[test]
fn throttle_decision_allocates_nothing() {
    let t0 = Instant::now();
    let t = AdaptiveThrottle::new(ThrottleConfig::default(), t0).expect("valid");
    let mut now = t0;
    let _ = t.try_acquire(now);
    let n = allocations_in(|| {
        for i in 0..10_000u32 {
            now += Duration::from_millis(20);
            if t.try_acquire(now).is_ok() {
                if i % 3 == 0 {
                    t.record_accept(now);
                }
                t.settle();
            }
        }
    });
    assert_eq!(n, 0);
}

#[test]
fn quota_charge_and_settle_allocate_nothing() {
    let t0 = Instant::now();
    let cfg = QuotaConfig {
        enforcement: QuotaEnforcement::Always,
        ..QuotaConfig::default()
    }
    .with_customer("alice", CustomerQuota::uniform(100.0));
    let q = QuotaBook::new(cfg, t0).expect("valid");
    let mut now = t0;
    let n = allocations_in(|| {
        for _ in 0..10_000 {
            now += Duration::from_millis(1);
            for who in ["alice", "someone-unknown"] {
                if let Ok(ch) = q.try_charge(now, who, Criticality::Critical, 0.05, true) {
                    q.settle(now, ch, 0.04);
                }
            }
        }
    });
    assert_eq!(n, 0);
}

#[test]
fn retry_decision_allocates_nothing() {
    let t0 = Instant::now();
    let p = RetryPolicy::new(RetryConfig::default(), t0).expect("valid");
    let mut now = t0;
    let n = allocations_in(|| {
        for i in 0..10_000u64 {
            now += Duration::from_millis(1);
            p.record_request(now);
            p.record_outcome(now, i % 7, i % 2 == 0);
            let _ = p.decide(now, &Failure::overloaded(1));
        }
    });
    assert_eq!(n, 0);
}

#[test]
fn the_counter_sees_allocations() {
    // Guards the guard: without this, a broken counter would make every test above pass.
    let n = allocations_in(|| drop(black_box(vec![1u8; 16])));
    assert!(n >= 1);
}

fn black_box<T>(x: T) -> T {
    std::hint::black_box(x)
}
