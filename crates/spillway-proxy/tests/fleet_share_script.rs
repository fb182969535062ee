//! The share script (`spillway-tower/src/lease/share.lua`) against a real Redis, without
//! proxies: max-min fairness, the spare split when demand is below the quota, membership by TTL
//! — an instance that stops renewing drops out within two lease intervals and its share returns
//! to the others — and the reuse of a bucket's level.

mod redis_support;

use std::time::Duration;

use redis_support::RedisServer;

const SCRIPT: &str = include_str!("../../spillway-tower/src/lease/share.lua");
const MEMBERS: &str = "{spillway}:quota:members";
const KEY: &str = "{spillway}:quota:demand:CRITICAL:c:acme";

/// One lease for `id` reporting `demand` of a 100/s quota with membership TTL `ttl_ms`: (live
/// members, share).
fn lease(c: &mut redis::Connection, id: &str, demand: f64, ttl_ms: u64) -> (u64, f64) {
    let reply: Vec<String> = redis::Script::new(SCRIPT)
        .key(MEMBERS)
        .key(KEY)
        .arg(id)
        .arg(ttl_ms)
        .arg(0) // the level computed at every call: each answer is checked on its own
        .arg(100.0)
        .arg(demand)
        .invoke(c)
        .expect("script runs");
    (reply[0].parse().unwrap(), reply[1].parse().unwrap())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn shares_are_max_min_fair_and_follow_membership() {
    if redis_support::available().is_none() {
        return;
    }
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_connection().unwrap();
    let ttl = 400; // two intervals of 200 ms

    // 80/15/5 of 300/s: the two small demands under the water level are met in full.
    lease(&mut c, "a", 240.0, ttl);
    lease(&mut c, "b", 45.0, ttl);
    lease(&mut c, "c", 15.0, ttl);
    let (n, a) = lease(&mut c, "a", 240.0, ttl);
    let (_, b) = lease(&mut c, "b", 45.0, ttl);
    let (_, s) = lease(&mut c, "c", 15.0, ttl);
    assert_eq!(n, 3);
    assert!(
        close(a, 42.5) && close(b, 42.5) && close(s, 15.0),
        "{a} {b} {s}"
    );
    assert!(close(a + b + s, 100.0));

    // Demand below the quota: every demand met and the spare split equally (each lease sees
    // the others' last reports, so the new demands go in first).
    lease(&mut c, "a", 20.0, ttl);
    lease(&mut c, "b", 10.0, ttl);
    lease(&mut c, "c", 10.0, ttl);
    let (_, a) = lease(&mut c, "a", 20.0, ttl);
    let (_, b) = lease(&mut c, "b", 10.0, ttl);
    let (_, s) = lease(&mut c, "c", 10.0, ttl);
    assert!(
        close(a, 40.0) && close(b, 30.0) && close(s, 30.0),
        "{a} {b} {s}"
    );

    // "b" stops renewing: after its TTL the others share the whole quota.
    let (_, a) = lease(&mut c, "a", 240.0, ttl);
    lease(&mut c, "c", 15.0, ttl);
    let (_, a2) = lease(&mut c, "a", 240.0, ttl);
    assert!(a2 < 85.0 - 1e-6, "b still counts before its TTL: {a} {a2}");
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(ttl / 2));
        lease(&mut c, "a", 240.0, ttl);
        lease(&mut c, "c", 15.0, ttl);
    }
    let (n, a) = lease(&mut c, "a", 240.0, ttl);
    let (_, s) = lease(&mut c, "c", 15.0, ttl);
    assert_eq!(n, 2, "b dropped out");
    assert!(close(a, 85.0) && close(s, 15.0), "{a} {s}");
    let left: Vec<String> = redis::cmd("HKEYS").arg(KEY).query(&mut c).unwrap();
    assert!(
        !left.contains(&"b".to_string()),
        "its demand is gone: {left:?}"
    );

    // An idle instance keeps a small share (1 % of an equal split), so its first requests are
    // not refused for a whole lease.
    let (_, idle) = lease(&mut c, "c", 0.0, ttl);
    assert!(idle > 0.0 && idle < 1.0, "{idle}");
}

/// The simulator's Rust copy of the share arithmetic (`spillway_core::quota::fair`) gives the
/// script's answers on random fleets: demands over and under the quota, idle instances, ties,
/// asks above the demand.
#[test]
fn the_rust_share_agrees_with_the_script() {
    use spillway_core::quota::fair::FairLevel;
    if redis_support::available().is_none() {
        return;
    }
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_connection().unwrap();
    let mut rng = fastrand::Rng::with_seed(31);
    for trial in 0..200 {
        let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
        let n = rng.usize(1..=12);
        let global = [1.0, 100.0, 1234.5][rng.usize(..3)] * (0.5 + rng.f64());
        let demands: Vec<f64> = (0..n)
            .map(|_| match rng.u8(..10) {
                0 => 0.0,
                1 => 7.0, // ties
                _ => rng.f64() * global * 3.0 / n as f64,
            })
            .collect();
        // Some instances ask for more than their demand (`DEMAND:ASK`).
        let asks: Vec<f64> = demands
            .iter()
            .map(|&d| {
                if rng.bool() {
                    d + rng.f64() * global / n as f64
                } else {
                    d
                }
            })
            .collect();
        let call = |c: &mut redis::Connection, i: usize| -> (u64, f64) {
            let reply: Vec<String> = redis::Script::new(SCRIPT)
                .key(MEMBERS)
                .key(KEY)
                .arg(format!("i{i}"))
                .arg(60_000)
                .arg(0)
                .arg(global)
                .arg(format!("{}:{}", demands[i], asks[i]))
                .invoke(c)
                .expect("script runs");
            (reply[0].parse().unwrap(), reply[1].parse().unwrap())
        };
        for i in 0..n {
            call(&mut c, i);
        }
        let level = FairLevel::new(global, n, &mut demands.clone());
        for i in 0..n {
            let (members, lua) = call(&mut c, i);
            assert_eq!(members as usize, n);
            let rust = level.share_asking(demands[i], asks[i]);
            assert!(
                (lua - rust).abs() <= 1e-9 * global.max(1.0),
                "trial {trial}: global {global}, demands {demands:?}, instance {i}: \
                 script {lua}, Rust {rust}"
            );
        }
    }
}

/// A bucket's water level computed by one call is applied by the next ones for `reuse` ms
/// (the store's work per interval then does not grow with instances²), and computed afresh
/// after that.
#[test]
fn a_level_is_reused_for_its_time_then_computed_again() {
    if redis_support::available().is_none() {
        return;
    }
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_connection().unwrap();
    let call = |c: &mut redis::Connection, id: &str, demand: f64, reuse: u64| -> f64 {
        let reply: Vec<String> = redis::Script::new(SCRIPT)
            .key(MEMBERS)
            .key(KEY)
            .arg(id)
            .arg(60_000)
            .arg(reuse)
            .arg(100.0)
            .arg(demand)
            .invoke(c)
            .expect("script runs");
        reply[1].parse().unwrap()
    };
    call(&mut c, "a", 60.0, 0);
    call(&mut c, "b", 60.0, 0);
    // "a" computes the level over 60 + 60 (50 each) and keeps it for 300 ms.
    assert!(close(call(&mut c, "a", 60.0, 300), 50.0));
    // "b" now wants 10: within those 300 ms it gets min(10, level 50) ...
    assert!(close(call(&mut c, "b", 10.0, 300), 10.0));
    // ... and afterwards the fresh split of 60 + 10 under 100: 10 + 15 spare.
    std::thread::sleep(Duration::from_millis(350));
    assert!(close(call(&mut c, "b", 10.0, 300), 25.0));
    // The kept level is not a member: no one counts it, nothing deletes it but its own key.
    let keys: Vec<String> = redis::cmd("HKEYS").arg(KEY).query(&mut c).unwrap();
    assert!(keys.contains(&"~level".to_string()), "{keys:?}");
    assert_eq!(
        redis::cmd("ZCARD")
            .arg(MEMBERS)
            .query::<u64>(&mut c)
            .unwrap(),
        2
    );
}

/// One call with a raw demand argument (`DEMAND`, `DEMAND:ASK`, or negative to leave).
fn call_raw(c: &mut redis::Connection, id: &str, demand: &str) -> (u64, f64) {
    let reply: Vec<String> = redis::Script::new(SCRIPT)
        .key(MEMBERS)
        .key(KEY)
        .arg(id)
        .arg(60_000)
        .arg(0)
        .arg(100.0)
        .arg(demand)
        .invoke(c)
        .expect("script runs");
    (reply[0].parse().unwrap(), reply[1].parse().unwrap())
}

/// An instance asks for its demand's upper bound (`DEMAND:ASK`): the level is computed over
/// the demands, its own share is the ask up to the level. An idle instance leaves a bucket
/// (a negative demand): it no longer counts there, though it stays a member; a bucket every
/// instance left still answers a finite share.
#[test]
fn asks_and_leaving_a_bucket() {
    if redis_support::available().is_none() {
        return;
    }
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut c = client.get_connection().unwrap();
    call_raw(&mut c, "a", "240");
    call_raw(&mut c, "b", "45");
    call_raw(&mut c, "c", "15:21");
    // Level over 240, 45, 15: 42.5. "c" asks 21 (its demand's noise): it gets 21, "b" 42.5.
    let (_, s) = call_raw(&mut c, "c", "15:21");
    assert!(close(s, 21.0), "{s}");
    let (_, b) = call_raw(&mut c, "b", "45");
    assert!(close(b, 42.5), "{b}");
    // An ask above the level is cut to it.
    let (_, s) = call_raw(&mut c, "c", "15:60");
    assert!(close(s, 42.5), "{s}");
    // "c" leaves: the level is over 240 and 45 alone (45 met, 55 for "a"), and "c" holds a
    // floor share (1% of an equal split).
    let (n, s) = call_raw(&mut c, "c", "-1");
    assert_eq!(n, 3, "still a member");
    assert!(s > 0.0 && s < 1.0, "{s}");
    let keys: Vec<String> = redis::cmd("HKEYS").arg(KEY).query(&mut c).unwrap();
    assert!(!keys.contains(&"c".to_string()), "{keys:?}");
    let (_, a) = call_raw(&mut c, "a", "240");
    assert!(close(a, 55.0), "{a}");
    // Everyone leaves: still a finite share (as if alone and idle: the whole quota).
    call_raw(&mut c, "a", "-1");
    let (_, b) = call_raw(&mut c, "b", "-1");
    assert!(b.is_finite() && close(b, 100.0), "{b}");
}
