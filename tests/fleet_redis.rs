//! Issue 31 end to end with real processes: three `spillway proxy` processes run from the one
//! shipped `examples/proxy/fleet.toml` (its store and upstream addresses rewritten and a second
//! customer's quota added; each with its own `--listen` and `--admin`) share customer acme's
//! global quota of 100 cost units/s through one private `redis-server`.
//!
//! Why beside the in-process test (crates/spillway-proxy/tests/fleet_quota.rs): here each proxy
//! has its own process id, runtime and lease timer, stops by SIGTERM rather than by a method,
//! and is observed only through its admin API, as an operator sees it; and the config is the
//! example users copy.
//!
//! acme sends 300 requests/s (cost 1, CRITICAL) split 80/15/5 over the three; a second customer
//! ("calm", with a global quota of 60/s added to the example) sends 10/s to each, 30/s in all.
//! The test asserts:
//! 1. leased: the fleet admits 100 ± 5 %/s; calm is never refused; Redis sees one lease call
//!    per proxy per interval, whatever the request rate;
//! 2. the 15 % proxy gets SIGTERM: from 2 s later the other two admit 100 ± 5 %/s;
//! 3. Redis is killed (SIGKILL): no request fails, and the proxies fall back to the static
//!    split (100 / 3 each, shown in `/status`);
//! 4. Redis restarts on the same port: within 2 s both are leased again with their final
//!    shares (as `/status` shows them every 50 ms), and from then the fleet admits 100 ± 5 %/s.
//!
//! The load generator paces by wall time and skips ticks it missed (a busy host must not turn
//! into a burst that reads as over-admission); rates are counted by send time over whole
//! seconds in which it ran, and every wait has a deadline. Without `redis-server` the test is
//! skipped, unless `CI` is set (`.ci/run` installs it), where that is a failure. About 22 s.
#![cfg(unix)]

mod common;
mod fleet_support;
#[path = "../crates/spillway-proxy/tests/redis_support/mod.rs"]
mod redis_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{free_port, local, wait_for, Proc};
use fleet_support::{lease, Load, Stream};
use redis_support::RedisServer;

/// The example's `lease_interval_ms`.
const INTERVAL: Duration = Duration::from_millis(500);
/// acme's global quota (the example's CRITICAL entry).
const QUOTA: f64 = 100.0;
/// acme's offered rate and its split over the three proxies.
const ACME: f64 = 300.0;
const SPLIT: [f64; 3] = [0.80, 0.15, 0.05];
/// calm's rate at each proxy.
const CALM: f64 = 10.0;

/// Starts `spillway proxy --config FILE --listen DATA --admin ADMIN`, its log in `log`, and
/// waits until the data port accepts.
fn proxy(config: &std::path::Path, data: u16, admin: u16, log: &std::path::Path) -> Proc {
    let err = std::fs::File::create(log).expect("log file");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .arg("proxy")
        .arg("--config")
        .arg(config)
        .args(["--listen", &format!("127.0.0.1:{data}")])
        .args(["--admin", &format!("127.0.0.1:{admin}")])
        .stdout(std::process::Stdio::null())
        .stderr(err)
        .spawn()
        .expect("the spillway binary starts");
    let p = Proc(child);
    wait_for("a proxy to accept", Duration::from_secs(20), || {
        common::connect(local(data))
    });
    p
}

/// acme's line in the example, and calm's added after it: a global quota of 60/s per
/// criticality, twice the 30/s calm offers over the fleet, so calm is a customer within its
/// quota whose buckets are leased through the same store.
const ACME_QUOTA: &str = "[\"acme\", { per_criticality = [100.0, 100.0, 100.0, 100.0] }],\n";
const CALM_QUOTA: &str = "  [\"calm\", { per_criticality = [60.0, 60.0, 60.0, 60.0] }],\n";

/// The shipped fleet example with the store and upstream addresses replaced and calm's quota
/// added.
fn example_config(store: &str, upstream: SocketAddr) -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/proxy/fleet.toml");
    let text = std::fs::read_to_string(path).expect("examples/proxy/fleet.toml");
    for (from, what) in [
        ("redis://127.0.0.1:6379/0", "store"),
        ("127.0.0.1:9100", "upstream"),
        (ACME_QUOTA, "acme quota line"),
    ] {
        assert!(text.contains(from), "the example's {what} is {from}");
    }
    text.replace("redis://127.0.0.1:6379/0", store)
        .replace("127.0.0.1:9100", &upstream.to_string())
        .replace(ACME_QUOTA, &format!("{ACME_QUOTA}{CALM_QUOTA}"))
}

fn within(rate: f64, target: f64) -> bool {
    (rate - target).abs() <= target * 0.05
}

/// What the phases saw live; the admitted rates are counted from the load's records at the end,
/// when every request sent in a window has been answered.
#[derive(Debug, Default)]
struct Phases {
    /// Measuring windows (from, to) on the load's clock.
    leased: (Duration, Duration),
    stopped: (Duration, Duration),
    down: (Duration, Duration),
    back: (Duration, Duration),
    /// Each proxy's acme rate in `/status` through the leased window: (min, mean, max).
    leased_rates: Vec<(f64, f64, f64)>,
    static_rates: Vec<f64>,
    back_after: Duration,
    /// (time since Redis restarted, proxy, its (mode, members, acme rate) from then on).
    back_trace: Vec<(Duration, usize, Seen)>,
    lease_calls_per_sec: f64,
}

/// A proxy's (mode, members, acme rate rounded) in `/status`, `None` when it did not answer.
type Seen = Option<(String, u64, Option<u64>)>;

fn window(from: Duration, secs: u64) -> (Duration, Duration) {
    (from, from + Duration::from_secs(secs))
}

#[test]
fn three_proxy_processes_share_a_global_quota_through_redis() {
    if redis_support::available().is_none() {
        return;
    }
    let began = Instant::now();
    let dir = common::temp_dir("fleet-redis");
    let mut redis = RedisServer::start();
    let backend_port = free_port();
    let _backend = common::backend(backend_port, 32, 1, 90, &[]);
    let config = dir.join("fleet.toml");
    std::fs::write(&config, example_config(&redis.url(), local(backend_port))).expect("config");
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let mut proxies: Vec<Option<Proc>> = ports
        .iter()
        .enumerate()
        .map(|(i, &(d, a))| Some(proxy(&config, d, a, &dir.join(format!("proxy{i}.log")))))
        .collect();
    let admins: Vec<SocketAddr> = ports.iter().map(|&(_, a)| local(a)).collect();
    let mut streams = Vec::new();
    for (i, &(d, _)) in ports.iter().enumerate() {
        streams.push(Stream::new(i, local(d), "acme", ACME * SPLIT[i]));
        streams.push(Stream::new(i, local(d), "calm", CALM));
    }
    let load = Load::start(streams);
    let mut ph = Phases::default();
    let calls_at_start = redis.calls("evalsha");
    let calls_from = Instant::now();

    // 1. Leased: max-min fair over demands 240/45/15 gives 42.5 + 42.5 + 15 = 100 (the static
    //    split would admit 33.3 + 33.3 + 15 = 81.7).
    wait_for("all three leased", Duration::from_secs(10), || {
        admins
            .iter()
            .all(|a| lease(*a).is_some_and(|l| l.mode == "leased" && l.members == 3))
            .then_some(())
    });
    std::thread::sleep(2 * INTERVAL);
    ph.leased = window(load.now(), 5);
    // Each proxy's acme rate every 50 ms through the window: (min, mean, max).
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); 3];
    while load.now() < ph.leased.1 {
        for (i, a) in admins.iter().enumerate() {
            rates[i].extend(lease(*a).and_then(|l| l.acme_rate));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    ph.leased_rates = rates
        .iter()
        .map(|r| {
            let (lo, hi) = r
                .iter()
                .fold((f64::MAX, 0.0f64), |(l, h), x| (l.min(*x), h.max(*x)));
            (lo, r.iter().sum::<f64>() / r.len().max(1) as f64, hi)
        })
        .collect();
    ph.lease_calls_per_sec =
        (redis.calls("evalsha") - calls_at_start) as f64 / calls_from.elapsed().as_secs_f64();

    // 2. The 15 % proxy stops (SIGTERM, after its load stopped so that no request meets a
    //    closed port); the other two take its share within 2 s.
    load.stop_proxy(1);
    std::thread::sleep(Duration::from_millis(300));
    let mut stopped = proxies[1].take().expect("proxy 1 runs");
    stopped.signal("-TERM");
    let t = load.now();
    let exit = stopped.wait_exit(Duration::from_secs(15));
    assert!(exit.is_some_and(|s| s.success()), "SIGTERM: {exit:?}");
    let wait = Duration::from_secs(2).saturating_sub(load.now() - t);
    std::thread::sleep(wait + Duration::from_secs(3));
    ph.stopped = window(t + Duration::from_secs(2), 3);

    // 3. Redis killed: the proxies hold their lease for two intervals, decay, then enforce the
    //    static split; nothing fails meanwhile (checked at the end over the whole run).
    redis.kill();
    let live = [admins[0], admins[2]];
    wait_for("the static split", 8 * INTERVAL, || {
        live.iter()
            .all(|a| lease(*a).is_some_and(|l| l.mode == "static"))
            .then_some(())
    });
    ph.static_rates = live.iter().filter_map(|a| lease(*a)?.acme_rate).collect();
    // The bucket may still hold what the lease left; count from a second on.
    std::thread::sleep(Duration::from_secs(1));
    ph.down = window(load.now(), 2);
    std::thread::sleep(Duration::from_secs(2));
    let down = live.iter().map(|a| lease(*a)).collect::<Vec<_>>();

    // 4. Redis back on the same port (empty): both rejoin and shares converge within 2 s.
    redis.restart();
    let t = load.now();
    // Each proxy's lease sampled every 50 ms through the phase. Converged from the first
    // sample after which both are always leased, know each other, and enforce acme rates within
    // 5 % of the quota of where they end (the first lease after an outage may only lower a
    // rate, the second applies; the 5 % proxy's share is its demand plus an ask for noise).
    let mut samples = Vec::new();
    while load.now() < t + Duration::from_secs(5) {
        samples.push((load.now() - t, live.map(lease)));
        std::thread::sleep(Duration::from_millis(50));
    }
    let key = |l: &Option<fleet_support::Lease>| {
        l.as_ref().map(|l| {
            (
                l.mode.clone(),
                l.members,
                l.acme_rate.map(|r| r.round() as u64),
            )
        })
    };
    let last = samples.last().map(|(_, l)| l.clone()).expect("samples");
    let settled = |ls: &[Option<fleet_support::Lease>; 2]| {
        ls.iter().zip(&last).all(|(l, end)| match (l, end) {
            (Some(l), Some(end)) => {
                let (r, e) = (
                    l.acme_rate.unwrap_or(f64::NAN),
                    end.acme_rate.unwrap_or(0.0),
                );
                l.mode == "leased" && l.members == 2 && (r - e).abs() <= QUOTA * 0.05
            }
            _ => false,
        })
    };
    ph.back_after = samples
        .iter()
        .rposition(|(_, ls)| !settled(ls))
        .map_or(Duration::ZERO, |i| {
            samples.get(i + 1).map_or(Duration::MAX, |(at, _)| *at)
        });
    for i in 0..2 {
        let mut was = None;
        for (at, ls) in &samples {
            let k = key(&ls[i]);
            if k != was {
                ph.back_trace.push((*at, i, k.clone()));
                was = k;
            }
        }
    }
    ph.back = window(t + Duration::from_secs(2), 3);

    let out = load.finish();
    for p in proxies.iter_mut().flatten() {
        p.signal("-TERM");
    }
    let fleet = |(a, b): (Duration, Duration)| out.admitted_in("acme", None, a, b);
    let (leased, stopped, back) = (fleet(ph.leased), fleet(ph.stopped), fleet(ph.back));
    let leased_each: Vec<f64> = (0..3)
        .map(|i| out.admitted_in("acme", Some(i), ph.leased.0, ph.leased.1).0)
        .collect();
    let down_80 = out.admitted_in("acme", Some(0), ph.down.0, ph.down.1);
    let down_5 = out.admitted_in("acme", Some(2), ph.down.0, ph.down.1);
    eprintln!(
        "fleet_redis: acme admitted/s (per whole second): leased {:.1} {:?} (each {:.1?}, \
         rates min/mean/max {:.1?}); one stopped {:.1} \
         {:?}; Redis down 80 %-proxy {:.1} {:?}, 5 %-proxy {:.1}; Redis back {:.1} {:?} \
         (converged after {:?}: {:?})\n  static rates {:?}; lease calls {:.2}/s\n  offered \
         {:?}\n  skipped {:?}\n  200s {} + {} calm, 429s {} + {} calm, failures {}\n  \
         logs in {}; took {:.1} s",
        leased.0,
        leased.1,
        leased_each,
        ph.leased_rates,
        stopped.0,
        stopped.1,
        down_80.0,
        down_80.1,
        down_5.0,
        back.0,
        back.1,
        ph.back_after,
        ph.back_trace,
        ph.static_rates,
        ph.lease_calls_per_sec,
        out.offered(),
        out.skipped,
        out.count("acme", 200),
        out.count("calm", 200),
        out.count("acme", 429),
        out.count("calm", 429),
        out.failures().len(),
        dir.display(),
        began.elapsed().as_secs_f64()
    );

    assert!(
        within(leased.0, QUOTA),
        "leased: the fleet admitted {:.1}/s {:?}, want 100 ± 5%",
        leased.0,
        leased.1
    );
    assert!(
        ph.lease_calls_per_sec <= 3.0 / INTERVAL.as_secs_f64() * 1.2,
        "{:.1} lease calls/s for three proxies",
        ph.lease_calls_per_sec
    );
    assert!(
        within(stopped.0, QUOTA),
        "2 s after a proxy stopped the other two admitted {:.1}/s {:?}, want 100 ± 5%",
        stopped.0,
        stopped.1
    );
    assert!(
        ph.static_rates.len() == 2 && ph.static_rates.iter().all(|r| within(*r, QUOTA / 3.0)),
        "Redis down: rates {:?}, want the static split 33.3 each",
        ph.static_rates
    );
    assert!(
        within(down_80.0, QUOTA / 3.0),
        "Redis down: the 80 % proxy admitted {:.1}/s, want its static 33.3",
        down_80.0
    );
    for l in down.iter().flatten() {
        assert!(l.errors > 0, "the outage is counted in /status: {l:?}");
    }
    assert!(
        ph.back_after <= Duration::from_secs(2),
        "shares converged {:?} after Redis returned, want within 2 s",
        ph.back_after
    );
    assert!(
        within(back.0, QUOTA),
        "Redis back: the fleet admitted {:.1}/s {:?}, want 100 ± 5%",
        back.0,
        back.1
    );
    let failures = out.failures();
    assert!(
        failures.is_empty(),
        "no request failed (Redis outage, proxy stop): {} e.g. {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert_eq!(
        out.count("calm", 429),
        0,
        "the customer within its quota was refused"
    );
    assert!(out.count("calm", 200) > 200, "calm was served");
    let _ = std::fs::remove_dir_all(&dir);
}
