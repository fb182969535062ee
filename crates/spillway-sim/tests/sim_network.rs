//! A layer's network delay: an attempt reaches its task one delay after it is sent, its answer
//! reaches the caller one delay after the task gives it, and the caller's timeout counts both;
//! a cancellation follows its attempt by the same delay. The same holds to the microsecond
//! when the fleet is simulated in shards and the attempts cross between them.

use spillway_sim::report::RunReport;
use spillway_sim::{run_one, Scenario};

/// One client group at a rate far below capacity, evenly spaced, constant service times: every
/// latency is exactly the sum of the parts, so the delays are visible to the microsecond.
fn scenario(timeout_ms: f64, layers: &str) -> Scenario {
    let text = format!(
        r#"
name = "network"
seed = 5
duration_s = 10

[[client]]
name = "users"
timeout_ms = {timeout_ms}
retry = "none"
arrivals = "uniform"
load = {{ shape = "constant", rps = 50 }}

{layers}
"#
    );
    Scenario::from_toml(&text, "network test").expect("valid")
}

fn layer(name: &str, service_ms: f64, network_ms: f64) -> String {
    format!(
        "[[layer]]\nname = \"{name}\"\ntasks = 2\nworkers = 8\nretry = \"none\"\n\
         service = {{ dist = \"const\", mean_ms = {service_ms} }}\nnetwork_ms = {network_ms}\n"
    )
}

fn report(sc: &Scenario) -> RunReport {
    run_one(sc, "network").expect("runs").report
}

/// `sc` simulated in `n` shards. With two tasks per layer and one client instance (on shard
/// 0), half the attempts go to a task on shard 1.
fn sharded(mut sc: Scenario, n: u32) -> Scenario {
    sc.shards = n;
    sc.validate().expect("valid in shards");
    sc
}

/// (median latency in ms, share of requests that succeeded).
fn p50_and_success(r: &RunReport) -> (f64, f64) {
    let p50 = r.latency.as_ref().map_or(f64::NAN, |l| l.total.p50_ms);
    (p50, r.summary.counts.success_ratio().expect("offered"))
}

#[test]
fn a_call_takes_its_service_time_plus_the_delay_both_ways() {
    let (none, _) = p50_and_success(&report(&scenario(1000.0, &layer("api", 20.0, 0.0))));
    let (five, ok) = p50_and_success(&report(&scenario(1000.0, &layer("api", 20.0, 5.0))));
    println!("p50 without a delay {none:.3} ms, with 5 ms each way {five:.3} ms");
    assert!((none - 20.0).abs() < 0.2, "{none}");
    assert!((five - 30.0).abs() < 0.2, "{five}");
    assert_eq!(ok, 1.0);
    for n in [2, 3] {
        let sc = sharded(scenario(1000.0, &layer("api", 20.0, 5.0)), n);
        let r = report(&sc);
        let (p50, ok) = p50_and_success(&r);
        let max = r.latency.as_ref().map_or(f64::NAN, |l| l.total.max_ms);
        println!("{n} shards: p50 {p50:.3} ms, max {max:.3} ms");
        assert!(
            (p50 - 30.0).abs() < 0.2 && (max - 30.0).abs() < 0.2,
            "{p50} {max}"
        );
        assert_eq!(ok, 1.0);
        assert_eq!(r.summary.counts.offered, 500);
    }
}

#[test]
fn every_layer_adds_its_own_round_trip() {
    let layers = format!("{}\n{}", layer("api", 10.0, 2.0), layer("db", 5.0, 3.0));
    let (p50, ok) = p50_and_success(&report(&scenario(1000.0, &layers)));
    // 2 + 10 + (3 + 5 + 3) + 2 ms.
    assert!((p50 - 25.0).abs() < 0.2, "{p50}");
    assert_eq!(ok, 1.0);
    // In two shards, with calls from tasks on one shard to tasks on the other.
    let (p50, ok) = p50_and_success(&report(&sharded(scenario(1000.0, &layers), 2)));
    assert!((p50 - 25.0).abs() < 0.2, "{p50}");
    assert_eq!(ok, 1.0);
}

#[test]
fn the_callers_timeout_counts_the_round_trip() {
    // 10 ms of work fits a 15 ms timeout, but not once 3 ms each way is added (16 ms).
    let (_, fits) = p50_and_success(&report(&scenario(15.0, &layer("api", 10.0, 0.0))));
    let r = report(&scenario(15.0, &layer("api", 10.0, 3.0)));
    let (_, late) = p50_and_success(&r);
    assert_eq!(fits, 1.0);
    assert_eq!(late, 0.0);
    assert!(r.summary.counts.timed_out > 0, "{:?}", r.summary.counts);
}

#[test]
fn a_cancellation_reaches_the_task_one_delay_after_the_caller_leaves() {
    // One worker, 30 ms of work, an attempt every 20 ms, 5 ms each way, callers that leave
    // after 12 ms (so every request times out) and a limit of 4, so that an attempt finding
    // the worker busy waits for it and only a cancellation takes it away. Attempt k is sent at
    // 20k ms, arrives at 20k + 5 and is cancelled at its task at 20k + 17:
    //   0 works 5–35; 1 waits from 25, starts at 35, its cancellation comes at 37 — too late,
    //   its work runs for nobody to 65; 2 waits from 45 and is dropped at 57; 3 arrives at 65
    //   as 1 ends and works to 95; 4 waits from 85 and starts at 95, before its cancellation
    //   at 97; 5 is dropped; and so on: two of every three attempts are served.
    // Were the cancellation to reach the task the moment the caller leaves (at 20k + 12), 1
    // would be dropped at 32, before the worker frees: one of every two.
    let layer = "[[layer]]\nname = \"api\"\nworkers = 1\nretry = \"none\"\n\
                 service = { dist = \"const\", mean_ms = 30 }\nnetwork_ms = 5\n\
                 admission = { limit = { algorithm = \"fixed\", limit = 4 } }\n";
    let run = run_one(&scenario(12.0, layer), "network").expect("runs");
    let api = &run.layers[0];
    println!("{api:?}");
    assert_eq!(run.report.summary.counts.goodput, 0);
    assert_eq!(api.wasted, api.served, "{api:?}");
    let share = api.served as f64 / api.arrivals as f64;
    assert!((share - 2.0 / 3.0).abs() < 0.01, "{share} of {api:?}");
}

#[test]
fn a_cancellation_crosses_between_shards_one_delay_after_the_caller_leaves() {
    // The test above with the attempts' task on the other shard: two tasks, task 0 (shard 0,
    // the client's) down for the whole run, so every attempt goes to task 1 on shard 1, and
    // every cancellation travels there as a message. Two of every three served, as above;
    // one of two would mean the cancellation arrived early, three of three that it was lost.
    let layer = "[[layer]]\nname = \"api\"\ntasks = 2\nworkers = 1\nretry = \"none\"\n\
                 service = { dist = \"const\", mean_ms = 30 }\nnetwork_ms = 5\n\
                 admission = { limit = { algorithm = \"fixed\", limit = 4 } }\n\
                 [[fault]]\nkind = \"task_down\"\nlayer = \"api\"\ntask = 0\nat_s = 0\nfor_s = 100\n";
    let run = run_one(&sharded(scenario(12.0, layer), 2), "network").expect("runs");
    let api = &run.layers[0];
    println!("{api:?}");
    assert_eq!(api.lost, 0, "no attempt went to the task that is down");
    assert_eq!(run.report.summary.counts.goodput, 0);
    assert_eq!(api.wasted, api.served, "{api:?}");
    let share = api.served as f64 / api.arrivals as f64;
    assert!((share - 2.0 / 3.0).abs() < 0.01, "{share} of {api:?}");
    // Every attempt not served was dropped by its cancellation: none waited on to its
    // deadline (as they do when the cancellation is lost: refused `deadline_exceeded`).
    assert!(api.refused.is_empty(), "{:?}", api.refused);
    // The same as on one shard, second by second over the offering window (after it, a
    // sharded run goes on to the end of a window, and may finish one more attempt that the
    // single loop, stopping at the last answer, leaves undone).
    let one = run_one(&scenario(12.0, layer), "network").expect("runs");
    assert_eq!(one.layers[0].served_per_s[..10], api.served_per_s[..10]);
    assert_eq!(one.layers[0].wasted_per_s[..10], api.wasted_per_s[..10]);
}

#[test]
fn a_delay_keeps_runs_repeatable() {
    let layers = format!("{}\n{}", layer("api", 10.0, 2.0), layer("db", 5.0, 3.0));
    let json = || {
        let mut sc = scenario(12.0, &layers);
        sc.duration_s = 5.0;
        serde_json::to_string(&report(&sc)).expect("serialises")
    };
    assert_eq!(json(), json());
}
