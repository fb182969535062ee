//! Heap allocations of the proxy's own refusals, counted exactly.
//!
//! Why: the reference guide's "Make rejection cheap" — under overload most requests are
//! refused, so whatever a refusal allocates is paid at many times the served rate. Allocation
//! counts are exact and unaffected by other work on the machine (timings on this shared host
//! are not), so they can be asserted. What a shed-below refusal (HTTP) still allocates: the
//! response's header map (its index table and its entries: 2); the body is the proxy's own
//! enum holding static text, and its headers and `Retry-After` are static values.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use spillway_core::Criticality;
use spillway_proxy::controls::ControlRefusal;
use spillway_proxy::respond;
use spillway_tower::wire::Protocol;

/// Counts allocations made on this thread while counting is on.
struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    // `try_with`: the thread-locals may already be gone while a thread exits.
    let _ = ON.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Allocations made by `f` on this thread (its result is dropped outside the count).
fn allocations<T>(f: impl FnOnce() -> T) -> usize {
    COUNT.with(|c| c.set(0));
    ON.with(|on| on.set(true));
    let out = f();
    ON.with(|on| on.set(false));
    drop(out);
    COUNT.with(|c| c.get())
}

#[test]
fn a_shed_below_refusal_allocates_only_its_header_map() {
    for below in Criticality::ALL {
        let c = ControlRefusal::Shed { below };
        // The first call per criticality formats its text once and keeps it.
        let _ = respond::control_refusal(&c, Protocol::Http);
        let n = allocations(|| respond::control_refusal(&c, Protocol::Http));
        assert!(
            n <= 2,
            "a shed-below refusal ({below}) made {n} heap allocations; expected at most 2 \
             (header map index + entries)"
        );
    }
}

/// A controller refusal (429 over quota, 503 otherwise) with the small delays refusals carry:
/// its `Retry-After` is a static value, so it allocates only its header map.
#[test]
fn a_controller_refusal_allocates_only_its_header_map() {
    use spillway_core::controller::{Refusal, RefusalReason};
    use std::time::Duration;
    for reason in [RefusalReason::OverQuota, RefusalReason::Shed] {
        for retry_after in [None, Some(Duration::from_millis(1500))] {
            let r = Refusal {
                reason,
                criticality: Criticality::Sheddable,
                retry_after,
                sustained: false,
            };
            let n = allocations(|| respond::refusal(&r, Protocol::Http));
            assert!(
                n <= 2,
                "a {reason:?} refusal (retry after {retry_after:?}) made {n} heap allocations; \
                 expected at most 2 (header map index + entries)"
            );
        }
    }
}
