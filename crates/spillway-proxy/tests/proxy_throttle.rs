//! The proxy's client throttle is kept per upstream task *and criticality* (SRE ch. 21:
//! adaptive throttling keeps separate statistics per criticality): a task that refuses
//! SHEDDABLE work gets SHEDDABLE requests refused locally, while its CRITICAL requests, which
//! it accepts, are not throttled. And requests still in flight are neither refused nor
//! accepted: a fresh proxy's burst of slow requests is not refused before any answer.

mod proxy_support;

use proxy_support::{backend, client, get, proxy_toml};

#[tokio::test]
async fn a_task_refusing_sheddable_does_not_throttle_critical() {
    let b = backend("b").await; // `/busy` answers 503 (an overload refusal), `/` 200
    let p = proxy_toml(&format!(
        r#"
[upstream]
addresses = ["{}"]
[upstream.throttle]
min_requests_per_sec = 0.0
[upstream.ejection]
consecutive_failures = 0
[classify]
trusted = ["127.0.0.0/8"]
"#,
        b.addr
    ))
    .await;
    let c = client();
    let shed = [("x-spillway-criticality", "SHEDDABLE")];
    let crit = [("x-spillway-criticality", "CRITICAL")];
    // A few accepted SHEDDABLE requests first, so its throttle has history of both kinds.
    for _ in 0..3 {
        assert_eq!(get(&c, p.addr, "/", &shed).await.0, 200);
    }
    let mut throttled = 0;
    for _ in 0..60 {
        let (status, headers, body) = get(&c, p.addr, "/busy", &shed).await;
        assert_eq!(status, 503, "{body}");
        if body.contains("throttled") {
            throttled += 1;
            assert!(headers.contains_key("retry-after"), "{headers:?}");
        }
    }
    assert!(
        throttled > 0,
        "the SHEDDABLE throttle refuses locally once the task keeps refusing"
    );
    let status = &p.state.status().upstreams[0];
    let [s, _, c_p, _] = status.throttle_probability_by_criticality;
    assert!(s > 0.5, "SHEDDABLE throttle probability {s}");
    assert_eq!(c_p, 0.0, "CRITICAL untouched by SHEDDABLE refusals");
    assert_eq!(
        status.throttle_probability, s,
        "the status reports the highest"
    );
    // With one throttle per task (requests 63 + n, accepts 3 + n) about half of these would be
    // refused locally; per criticality, none is.
    for i in 0..30 {
        let (status, _, body) = get(&c, p.addr, "/", &crit).await;
        assert_eq!(status, 200, "CRITICAL request {i} was refused: {body}");
    }
}

#[tokio::test]
async fn a_burst_of_slow_requests_on_a_fresh_proxy_is_not_throttled() {
    // `/slow` answers 200 after 0.8 s. Without the proxy's floor of 1 request/s, so that the
    // rule itself is what is tested.
    let b = backend("b").await;
    let p = proxy_toml(&format!(
        r#"
[upstream]
addresses = ["{}"]
[upstream.throttle]
min_requests_per_sec = 0.0
"#,
        b.addr
    ))
    .await;
    let c = client();
    // Eight at once: each is sent while the others are in flight, none answered yet. Counted
    // as refusals until answered, six of eight were refused locally.
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (c, addr) = (c.clone(), p.addr);
        burst.spawn(async move { get(&c, addr, "/slow", &[]).await });
    }
    while let Some(done) = burst.join_next().await {
        let (status, _, body) = done.expect("request task");
        assert_eq!(status, 200, "{body}");
    }
    let status = &p.state.status().upstreams[0];
    assert_eq!((status.throttle_requests, status.throttle_accepts), (8, 8));
    assert_eq!(status.throttle_probability, 0.0);
}
