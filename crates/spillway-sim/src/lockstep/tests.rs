use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::{lockstep, SpinBarrier};
use crate::{run_one, Scenario};

fn small() -> Scenario {
    Scenario::from_toml(
        r#"
name = "small"
seed = 4
duration_s = 3

[[client]]
name = "users"
load = { shape = "constant", rps = 400 }

[[layer]]
name = "api"
tasks = 4
workers = 8
service = { dist = "exp", mean_ms = 50 }
"#,
        "lockstep test",
    )
    .expect("valid")
}

#[test]
fn no_thread_passes_a_round_before_all_arrive_and_the_flag_is_everyones() {
    let (n, rounds) = (3, 200);
    let barrier = SpinBarrier::new(n);
    let arrived = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..n {
            let (barrier, arrived) = (&barrier, &arrived);
            s.spawn(move || {
                for r in 0..rounds {
                    arrived.fetch_add(1, Ordering::SeqCst);
                    // One thread, a different one each round, raises the flag on odd rounds.
                    let any = barrier.wait(r % 2 == 1 && r % n == t);
                    assert!(
                        arrived.load(Ordering::SeqCst) >= (r + 1) * n,
                        "round {r}: passed before everyone arrived"
                    );
                    assert_eq!(any, r % 2 == 1, "round {r}");
                }
            });
        }
    });
    assert_eq!(arrived.load(Ordering::SeqCst), n * rounds);
}

#[test]
fn copies_simulate_what_one_run_does_free_or_in_windows() {
    let sc = small();
    let one = run_one(&sc, "one").expect("runs").offered;
    let free = lockstep(&sc, 2, None).expect("runs");
    assert_eq!(free.requests, 2 * one);
    assert_eq!(free.windows, 0);
    let stepped = lockstep(&sc, 2, Some(Duration::from_millis(10))).expect("runs");
    assert_eq!(
        stepped.requests,
        2 * one,
        "windows change nothing simulated"
    );
    // 3 simulated seconds and the last requests' answers: a little over 300 windows of 10 ms.
    assert!((300..400).contains(&stepped.windows), "{stepped:?}");
}
