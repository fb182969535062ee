//! Active health checks at a frequency proportional to each task's traffic.
//!
//! Why proportional: a fixed-rate checker costs the same whether a task serves 10 or 10 000
//! requests a second, and with many proxies in front of one task the checks alone become load
//! ("connections are load too", AWS Builders' Library). Passive ejection already watches busy
//! tasks through their real traffic; active checks matter most to bring an ejected or idle task
//! back. So each task is checked every
//!
//! ```text
//! interval = clamp(per_requests / request_rate, min_interval, max_interval)
//! ```
//!
//! (`request_rate` over the last 10 s): at `per_requests = 1000`, one check per thousand
//! requests, never more often than `min_interval` and never less than `max_interval` — an idle
//! or ejected task gets one check per `max_interval`.

use std::sync::Weak;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;

use super::Pool;

/// The interval for a task receiving `rate` requests per second.
pub fn interval(per_requests: f64, rate: f64, min: Duration, max: Duration) -> Duration {
    if rate.is_nan() || rate <= 0.0 {
        return max;
    }
    let secs = per_requests / rate;
    if !secs.is_finite() {
        return max;
    }
    Duration::from_secs_f64(secs.clamp(min.as_secs_f64(), max.as_secs_f64()))
}

pub(super) async fn run(pool: Weak<Pool>) {
    let mut last: Vec<Option<Instant>> = Vec::new();
    loop {
        let Some(p) = pool.upgrade() else { return };
        let hc = p.cfg.health_check.clone();
        let min = Duration::from_millis(hc.min_interval_ms);
        let max = Duration::from_millis(hc.max_interval_ms);
        let now = Instant::now();
        last.resize(p.tasks().len(), None);
        for (i, task) in p.tasks().iter().enumerate() {
            let every = interval(hc.per_requests, task.request_rate(now), min, max);
            if last[i].is_some_and(|l| now.duration_since(l) < every) {
                continue;
            }
            last[i] = Some(now);
            let (p2, task) = (std::sync::Arc::clone(&p), std::sync::Arc::clone(task));
            let path = hc.path.clone();
            let timeout = Duration::from_millis(hc.timeout_ms);
            tokio::spawn(async move {
                let Ok(req) = http::Request::get(path.as_str())
                    .header(http::header::HOST, task.host.clone())
                    .body(super::RequestBody::empty())
                else {
                    return;
                };
                let index = usize::try_from(task.id).unwrap_or(usize::MAX);
                let ok = match tokio::time::timeout(
                    timeout,
                    p2.conns.send(
                        index,
                        req,
                        false,
                        false,
                        &crate::http1::AddedHeaders::none(),
                    ),
                )
                .await
                {
                    Ok(Ok(res)) => {
                        let ok = res.status().is_success();
                        let _ = res.into_body().collect().await;
                        ok
                    }
                    _ => false,
                };
                if ok {
                    if task.is_ejected(Instant::now()) {
                        tracing::info!(
                            upstream = %task.addr,
                            "upstream passed its health check: back in rotation"
                        );
                    }
                    task.readmit();
                } else {
                    p2.record_failure(&task, Instant::now());
                }
            });
        }
        drop(p);
        tokio::time::sleep(min.min(Duration::from_millis(500))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_is_proportional_and_clamped() {
        let (min, max) = (Duration::from_secs(1), Duration::from_secs(30));
        assert_eq!(interval(1000.0, 0.0, min, max), max);
        assert_eq!(interval(1000.0, 10.0, min, max), max); // 100 s → 30 s
        assert_eq!(interval(1000.0, 100.0, min, max), Duration::from_secs(10));
        assert_eq!(interval(1000.0, 1e6, min, max), min);
        assert_eq!(interval(1000.0, f64::NAN, min, max), max);
    }
}
