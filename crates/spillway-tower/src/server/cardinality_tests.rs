//! The server layer's metric labels stay bounded whatever customers and operations callers
//! send (`metrics::labels`): 10,000 distinct values make at most the cap's series plus `other`,
//! and every request is still counted.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use http::{Request, Response};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use spillway_core::controller::{AdmissionConfig, AdmissionController};
use spillway_core::limit::{FixedConfig, LimitConfig};
use spillway_core::ManualClock;
use tower::{service_fn, Layer, ServiceExt};

use super::{OperationSource, SpillwayLayer};
use crate::metrics::labels::OTHER;
use crate::wire::metric as m;

/// Keeps every counter series by its key; histograms and gauges are not needed here.
#[derive(Default)]
struct Series(Mutex<HashMap<Key, Arc<AtomicU64>>>);

impl Series {
    /// The distinct values of `label` among the series of `name`, and the count per value.
    fn by(&self, name: &str, label: &str) -> HashMap<String, u64> {
        let mut out = HashMap::new();
        for (k, v) in self.0.lock().unwrap().iter() {
            if k.name() != name {
                continue;
            }
            if let Some(l) = k.labels().find(|l| l.key() == label) {
                *out.entry(l.value().to_string()).or_default() += v.load(Ordering::Relaxed);
            }
        }
        out
    }
}

impl Recorder for Series {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut map = self.0.lock().unwrap();
        Counter::from_arc(Arc::clone(map.entry(key.clone()).or_default()))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

fn controller() -> AdmissionController {
    let cfg = AdmissionConfig {
        limit: LimitConfig::Fixed(FixedConfig { limit: 100 }),
        ..AdmissionConfig::default()
    };
    AdmissionController::new(cfg, Arc::new(ManualClock::new())).unwrap()
}

/// Sends `n` requests through `layer`, request `i` from customer `c{i}` to path `/p{i}`, all
/// recorded into a fresh [`Series`].
fn send(layer: SpillwayLayer, n: usize) -> Series {
    let rec = Series::default();
    let svc = layer.layer(service_fn(|_req: Request<Body>| async {
        Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
    }));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&rec, || {
        rt.block_on(async {
            for i in 0..n {
                let req = Request::builder()
                    .uri(format!("/p{i}"))
                    .header("x-spillway-customer", format!("c{i}"))
                    .body(Body::empty())
                    .unwrap();
                let res = svc.clone().oneshot(req).await.unwrap();
                assert_eq!(res.status(), 200);
                // The latency is recorded when the body ends.
                let _ = http_body_util::BodyExt::collect(res.into_body()).await;
            }
        })
    });
    rec
}

#[test]
fn ten_thousand_customers_and_operations_make_at_most_the_caps_series() {
    let layer = SpillwayLayer::new(controller())
        .trust_all(true)
        .operation(OperationSource::Path);
    let rec = send(layer, 10_000);
    let customers = rec.by(m::ADMITTED, m::L_CUSTOMER);
    // The default cap (100, as the proxy's): the first 100 customers, then `other`.
    assert_eq!(customers.len(), 101, "{:?}", customers.keys().take(5));
    assert_eq!(customers[OTHER], 9_900);
    assert_eq!(customers["c0"], 1);
    assert_eq!(customers["c99"], 1);
    assert!(!customers.contains_key("c100"));
    assert_eq!(
        customers.values().sum::<u64>(),
        10_000,
        "every request counted"
    );
    let operations = rec.by(m::ADMITTED, m::L_OPERATION);
    assert_eq!(operations.len(), 101);
    assert_eq!(operations[OTHER], 9_900);
    assert!(operations.contains_key("/p0") && !operations.contains_key("/p100"));
    let series: HashSet<Key> = rec.0.lock().unwrap().keys().cloned().collect();
    let admitted = series.iter().filter(|k| k.name() == m::ADMITTED).count();
    assert!(admitted <= 101, "{admitted} admitted series");
    // 101 operations' histograms are 1,717 series, past the default cap of 1,500 per family
    // (`metrics::series`): the last ones are recorded as `other`, and counted so.
    let overflow: Vec<&Key> = series
        .iter()
        .filter(|k| k.name() == m::LABEL_OVERFLOW)
        .collect();
    assert_eq!(overflow.len(), 2, "{overflow:?}");
}

#[test]
fn the_caps_are_set_per_layer() {
    let layer = SpillwayLayer::new(controller())
        .trust_all(true)
        .operation(OperationSource::Path)
        .max_customer_labels(10)
        .max_operation_labels(3);
    let rec = send(layer, 1_000);
    let customers = rec.by(m::ADMITTED, m::L_CUSTOMER);
    assert_eq!(customers.len(), 11);
    assert_eq!(customers[OTHER], 990);
    let operations = rec.by(m::ADMITTED, m::L_OPERATION);
    assert_eq!(operations.len(), 4);
    assert_eq!(operations[OTHER], 997);
}
