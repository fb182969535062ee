//! Per-request CPU time, measured around each poll.
//!
//! Why per poll: a tokio task may run on a different worker thread after every `.await`, so
//! "thread CPU time at the start vs at the end" would mix other tasks' work into this one. Reading
//! the calling thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`, via `cpu_time::ThreadTime`) just
//! before and just after each `poll` and summing the deltas charges the request exactly for the
//! CPU it used while it was running, wherever it ran. That is the "cost" Google's per-customer
//! quotas are expressed in (SRE book ch. 21, "Per-customer limits": CPU seconds rather than
//! queries). Two clock reads per poll are a syscall each on Linux — the point of the feature,
//! and why it is off unless configured.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use cpu_time::ThreadTime;

/// Accumulated CPU time of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuMeter {
    enabled: bool,
    spent: Duration,
}

impl CpuMeter {
    /// A meter that measures when `enabled`, and otherwise costs nothing.
    pub fn new(enabled: bool) -> Self {
        CpuMeter {
            enabled,
            spent: Duration::ZERO,
        }
    }

    /// Whether this meter reads the CPU clock.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// CPU time charged so far.
    pub fn spent(&self) -> Duration {
        self.spent
    }

    /// Runs `f` (one poll), adding the calling thread's CPU time during it. A failing clock
    /// (unsupported platform) charges nothing rather than failing the request.
    pub fn measure<R>(&mut self, f: impl FnOnce() -> R) -> R {
        if !self.enabled {
            return f();
        }
        let start = ThreadTime::try_now().ok();
        let r = f();
        if let (Some(start), Ok(end)) = (start, ThreadTime::try_now()) {
            self.spent += end.as_duration().saturating_sub(start.as_duration());
        }
        r
    }
}

pin_project_lite::pin_project! {
    /// A future whose polls are charged to a [`CpuMeter`].
    #[derive(Debug)]
    pub struct Measured<F> {
        #[pin]
        inner: F,
        meter: CpuMeter,
    }
}

impl<F> Measured<F> {
    /// Wraps `inner`; measures only if `enabled`.
    pub fn new(inner: F, enabled: bool) -> Self {
        Measured {
            inner,
            meter: CpuMeter::new(enabled),
        }
    }

    /// The meter (CPU time so far).
    pub fn meter(&self) -> CpuMeter {
        self.meter
    }
}

impl<F: Future> Future for Measured<F> {
    type Output = (F::Output, CpuMeter);

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let inner = this.inner;
        match this.meter.measure(|| inner.poll(cx)) {
            Poll::Ready(out) => Poll::Ready((out, *this.meter)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burn() -> u64 {
        // Enough work for the thread CPU clock to advance on any machine.
        let mut x = 0u64;
        for i in 0..3_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            std::hint::black_box(x);
        }
        x
    }

    #[tokio::test]
    async fn charges_work_done_inside_polls_only() {
        let (_, meter) = Measured::new(async { burn() }, true).await;
        assert!(meter.spent() > Duration::ZERO);
        let (_, off) = Measured::new(async { burn() }, false).await;
        assert_eq!(off.spent(), Duration::ZERO);
        assert!(!off.enabled());
    }

    #[test]
    fn work_outside_the_meter_is_not_charged() {
        let mut m = CpuMeter::new(true);
        m.measure(|| ());
        let small = m.spent();
        burn();
        m.measure(|| ());
        // Two empty polls cost far less than the burn between them.
        let mut big = CpuMeter::new(true);
        big.measure(burn);
        assert!(
            m.spent() < big.spent(),
            "{:?} vs {:?} (small {small:?})",
            m.spent(),
            big.spent()
        );
    }
}
