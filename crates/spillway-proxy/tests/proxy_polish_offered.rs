//! Offered demand counts what clients ask of the service, not the proxy's health checks.
//! (Own test binary: the offered-demand counters are process-wide.)

mod proxy_support;

use proxy_support::*;
use spillway_core::Criticality;
use spillway_proxy::admin::metrics::offered;

fn offered_requests() -> u64 {
    Criticality::ALL
        .iter()
        .map(|c| offered().requests(*c))
        .sum()
}

#[tokio::test]
async fn health_checks_are_not_offered_demand() {
    let b = backend("b").await;
    let p = proxy_toml(&format!("[upstream]\naddresses = [\"{}\"]\n", b.addr)).await;
    let c = client();
    let before = offered_requests();
    for _ in 0..3 {
        let (status, _, _) = get(&c, p.addr, "/healthz", &[]).await;
        assert_eq!(status, 200);
    }
    assert_eq!(offered_requests(), before, "health checks are not demand");
    let (status, _, _) = get(&c, p.addr, "/work", &[]).await;
    assert_eq!(status, 200);
    assert_eq!(offered_requests(), before + 1, "a request is demand");
}
