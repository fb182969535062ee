//! The incident controls as the data path applies them (the admin API that sets them is
//! tested in `admin_*.rs`).

mod proxy_support;

use proxy_support::*;
use spillway_core::Criticality;

#[tokio::test]
async fn shed_below_retries_off_and_exercised_degradation() {
    let live = backend("live").await;
    let dead = dead_addr().await;
    let p = proxy_toml(&format!(
        r#"
[upstream]
addresses = ["{dead}", "{}"]
[upstream.ejection]
consecutive_failures = 0
[classify]
trusted = ["127.0.0.0/8"]
[[routes]]
name = "feed"
path = "/feed"
[routes.degrade]
threshold = 10.0
body = "cached feed"
"#,
        live.addr
    ))
    .await;
    let c = client();
    let controls = p.state.controls();

    // Retries off: the first request of a fresh proxy goes to the first task (both score 0),
    // the dead one; its connection failure is not retried on the live task.
    controls.set_retries_enabled(false);
    assert_eq!(get(&c, p.addr, "/y", &[]).await.0, 502);
    controls.set_retries_enabled(true);
    // (With retries on the dead task is now avoided for its recent error anyway.)
    for _ in 0..5 {
        assert_eq!(get(&c, p.addr, "/y", &[]).await.0, 200);
    }

    // Shed everything below CRITICAL: SHEDDABLE refused with the reason and don't-retry;
    // CRITICAL served; health checks still pass.
    controls.set_shed_below(Some(Criticality::Critical));
    let (s, h, body) = get(&c, p.addr, "/x", &[("x-spillway-criticality", "SHEDDABLE")]).await;
    assert_eq!(s, 503);
    assert_eq!(h["x-spillway-reason"], "incident_shed");
    assert_eq!(h["x-spillway-dont-retry"], "1");
    assert!(body.contains("shed by an operator"), "{body}");
    let (s, _, _) = get(&c, p.addr, "/x", &[("x-spillway-criticality", "CRITICAL")]).await;
    assert_eq!(s, 200);
    let (s, _, _) = get(
        &c,
        p.addr,
        "/healthz",
        &[("x-spillway-criticality", "SHEDDABLE")],
    )
    .await;
    assert_eq!(s, 200);
    controls.set_shed_below(None);

    // Exercise the degraded path on every request although utilisation is far below 10.0.
    controls.set_exercise_degraded(1.0).unwrap();
    let (s, _, body) = get(&c, p.addr, "/feed", &[]).await;
    assert_eq!((s, body.as_str()), (200, "cached feed"));
    controls.set_exercise_degraded(0.0).unwrap();
    let (_, _, body) = get(&c, p.addr, "/feed", &[]).await;
    assert!(body.starts_with("live GET /feed"), "{body}");
    let st = p.state.status();
    assert_eq!(st.routes[0].counters.exercised, 1);
    assert_eq!(st.routes[0].counters.static_response, 1);
}
