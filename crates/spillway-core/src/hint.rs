//! Prefetch hints: where the fast path of a policy object keeps its state.
//!
//! Why: a process that holds thousands of policy objects and visits each one rarely (the
//! simulator's fleets: 10⁴ admission controllers, 10⁴–10⁶ client throttles and retry budgets,
//! each visited again ~100 ms later) finds none of them in cache, and a decision then waits on
//! one memory load after another — the controller, what it points to, the counter buckets —
//! most of its time. A caller that knows which objects come next can start those loads early.
//! This crate does not prefetch (it has no unsafe code); it only says *where*: `hot_lines` /
//! `hot_pointees` methods on [`AdmissionController`](crate::controller::AdmissionController),
//! [`AdaptiveThrottle`](crate::throttle::AdaptiveThrottle) and
//! [`RetryPolicy`](crate::retry::RetryPolicy) pass raw addresses to a callback, which may
//! hand them to a prefetch instruction. The addresses are never dereferenced here, and a
//! prefetch of a wrong one would only waste a load: behaviour cannot depend on them.
//!
//! Behind the cargo feature `hints` (off by default; `spillway-sim` turns it on): the addresses
//! describe the objects' private layout, which is no part of the policy API, and a service or
//! the proxy, which visit a few objects often, has no use for them.

/// Calls `f` with one address in each 64-byte cache line of `[start, start + len)`.
pub(crate) fn lines(start: *const u8, len: usize, mut f: impl FnMut(*const u8)) {
    const LINE: usize = 64;
    if len == 0 {
        return;
    }
    let first = start as usize / LINE;
    let last = (start as usize).saturating_add(len - 1) / LINE;
    for line in first..=last {
        f(start.wrapping_add((line - first) * LINE));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::lines;
    use crate::clock::ManualClock;
    use crate::controller::{AdmissionConfig, AdmissionController};
    use crate::throttle::{AdaptiveThrottle, ThrottleConfig};

    #[test]
    fn a_controller_names_its_first_lines_and_its_limit_state() {
        let clock = Arc::new(ManualClock::new());
        let c = AdmissionController::new(AdmissionConfig::default(), clock).expect("valid");
        let mut hot = Vec::new();
        c.hot_lines(|p| hot.push(p as usize));
        // 512 bytes from the allocation's start: 8 lines, 9 if it is not line-aligned.
        assert!((8..=9).contains(&hot.len()), "{}", hot.len());
        assert!(hot.windows(2).all(|w| w[1] - w[0] == 64));
        let mut behind = Vec::new();
        c.hot_pointees(|p| behind.push(p as usize));
        assert_eq!(
            behind.len(),
            1,
            "no random source set: the limit state only"
        );
        assert!(behind.iter().all(|&p| p != 0));
    }

    #[test]
    fn a_throttle_names_the_bucket_of_the_current_slice() {
        let t0 = Instant::now();
        let t = AdaptiveThrottle::new(ThrottleConfig::default(), t0).expect("valid");
        let at = |secs: u64| {
            let mut v = Vec::new();
            t.hot_pointees(t0 + Duration::from_secs(secs), |p| v.push(p as usize));
            v[0]
        };
        assert_eq!(at(0), at(0));
        assert_ne!(
            at(0),
            at(1),
            "1 s slices: the next second is the next bucket"
        );
        assert_eq!(
            at(0),
            at(120),
            "120 buckets: a window later, the same bucket again"
        );
    }

    #[test]
    fn one_address_per_line_touched() {
        let at = |a: usize, len: usize| {
            let mut v = Vec::new();
            lines(a as *const u8, len, |p| v.push(p as usize));
            v
        };
        assert_eq!(at(64, 64), vec![64]);
        assert_eq!(at(64, 65), vec![64, 128]);
        assert_eq!(at(100, 64), vec![100, 164]); // 100..164 spans lines 64 and 128
        assert_eq!(at(100, 0), Vec::<usize>::new());
        assert_eq!(at(0, 512).len(), 8);
        assert_eq!(at(16, 512).len(), 9);
    }
}
