use super::*;

#[test]
fn places_stop_at_the_limit_and_come_back_when_dropped() {
    let b = InProgress::new(2);
    let first = b.begin().expect("within");
    let second = b.begin().expect("to the limit");
    assert!(b.begin().is_none(), "past the limit");
    assert_eq!(b.held(), 2);
    drop(first);
    let third = b.begin().expect("a place came back");
    drop((second, third));
    assert_eq!(b.held(), 0);
    assert_eq!(b.limit(), 2);
}

#[test]
fn threads_never_hold_more_than_the_limit() {
    let b = std::sync::Arc::new(InProgress::new(8));
    let most = std::sync::Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (b, most) = (std::sync::Arc::clone(&b), std::sync::Arc::clone(&most));
            std::thread::spawn(move || {
                for _ in 0..10_000 {
                    if let Some(h) = b.begin() {
                        most.fetch_max(b.held(), Ordering::Relaxed);
                        drop(h);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no panic");
    }
    assert!(most.load(Ordering::Relaxed) <= 8);
    assert_eq!(b.held(), 0);
}
