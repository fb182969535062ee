use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Pending until `ready` polls have happened; counts its polls.
struct Waits {
    polls: Arc<AtomicUsize>,
    ready: usize,
}

impl Future for Waits {
    type Output = usize;
    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<usize> {
        let n = self.polls.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= self.ready {
            Poll::Ready(n)
        } else {
            Poll::Pending
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiting_request_is_polled_again_every_period() {
    let polls = Arc::new(AtomicUsize::new(0));
    let inner = Waits {
        polls: Arc::clone(&polls),
        ready: 4,
    };
    // Nothing but the timer wakes `inner`: it completes only because it is polled again.
    let start = Instant::now();
    let out = Nudged::new(inner, Some(Duration::from_millis(500))).await;
    assert_eq!(out, 4);
    // Paused time: three periods exactly, one per wake-up.
    assert_eq!(start.elapsed(), Duration::from_millis(1500));
    assert_eq!(polls.load(Ordering::Relaxed), 4);
}

/// Counts the wake-ups it is given.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl std::task::Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Wake-ups `every` gives a request that waits, polled once, in 10 s.
async fn wakes_in_10s(every: Option<Duration>) -> usize {
    let inner = Waits {
        polls: Arc::new(AtomicUsize::new(0)),
        ready: usize::MAX,
    };
    let mut nudged = std::pin::pin!(Nudged::new(inner, every));
    let wakes = Arc::new(Wakes::default());
    let waker = std::task::Waker::from(Arc::clone(&wakes));
    assert!(nudged
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    tokio::time::sleep(Duration::from_secs(10)).await;
    wakes.0.load(Ordering::Relaxed)
}

#[tokio::test(start_paused = true)]
async fn without_a_period_nothing_wakes_it() {
    assert_eq!(wakes_in_10s(None).await, 0);
    // With one, the armed timer does (once: it is re-armed only when polled again).
    assert_eq!(wakes_in_10s(Some(Duration::from_millis(500))).await, 1);
}

#[tokio::test(start_paused = true)]
async fn an_answer_within_the_period_needs_no_second_poll() {
    let polls = Arc::new(AtomicUsize::new(0));
    let inner = Waits {
        polls: Arc::clone(&polls),
        ready: 1,
    };
    assert_eq!(
        Nudged::new(inner, Some(Duration::from_millis(500))).await,
        1
    );
    assert_eq!(polls.load(Ordering::Relaxed), 1);
}
