//! Leaving without failing requests: readiness (`GET /ready` on the admin listener), the drain
//! delay after SIGTERM, and the drain timeout.
//!
//! Why a delay: an orchestrator sends SIGTERM and, at the same time, starts taking the task out
//! of its load balancers; until every balancer has heard, new connections keep arriving. A
//! proxy that stopped accepting at once would refuse them. So on SIGTERM the proxy first says
//! it is not ready (`/ready` answers 503) and keeps serving for `drain_delay_ms`; then it
//! stops accepting, answers the requests in progress (HTTP/1.1 with `connection: close`, HTTP/2
//! after a GOAWAY), closes idle connections, and exits once they are done or `drain_timeout_ms`
//! has passed. SIGINT (Ctrl-C at a terminal) and a second SIGTERM skip the delay.
//!
//! Why readiness is not liveness: `/live` says the process answers (restart it if not);
//! `/ready` says it should be sent traffic: not while draining, not while every upstream task
//! is ejected, and not before some upstream task is known to answer (a request to it
//! succeeded, or it accepts a TCP connection now) — a proxy in front of nothing only turns
//! requests into 502s.

use std::time::Duration;

use serde::Serialize;

use crate::state::ProxyState;

/// How long `/ready` waits for an upstream task to accept a connection.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// `GET /ready`'s answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// Whether traffic should be sent to this proxy.
    pub ready: bool,
    /// Why (or why not), for the operator reading the probe's log.
    pub reason: String,
}

/// Whether `state` should be sent traffic now; may probe the upstream tasks (at most
/// [`PROBE_TIMEOUT`], all at once) when no request to them has succeeded yet.
pub async fn readiness(state: &ProxyState) -> Readiness {
    let not = |reason: String| Readiness {
        ready: false,
        reason,
    };
    if state.is_draining() {
        return not("draining: shutting down after SIGTERM".into());
    }
    let tasks = state.runtime().pool.status();
    let live: Vec<_> = tasks.iter().filter(|t| !t.ejected).collect();
    if live.is_empty() {
        return not(format!(
            "every upstream task is ejected ({})",
            tasks
                .iter()
                .map(|t| t.address.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // Known to answer: served a request and has not failed since.
    if let Some(t) = live
        .iter()
        .find(|t| t.requests_total > t.failures_total && t.consecutive_failures == 0)
    {
        return Readiness {
            ready: true,
            reason: format!("upstream {} answers requests", t.address),
        };
    }
    let mut probes = tokio::task::JoinSet::new();
    for t in &live {
        let address = t.address.clone();
        probes.spawn(async move {
            let r =
                tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(&address)).await;
            match r {
                Ok(Ok(_)) => Ok(address),
                Ok(Err(e)) => Err(format!("{address}: {e}")),
                Err(_) => Err(format!(
                    "{address}: no connection within {} ms",
                    PROBE_TIMEOUT.as_millis()
                )),
            }
        });
    }
    let mut errors = Vec::new();
    while let Some(r) = probes.join_next().await {
        match r {
            Ok(Ok(address)) => {
                return Readiness {
                    ready: true,
                    reason: format!("upstream {address} accepts connections"),
                }
            }
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("probe failed: {e}")),
        }
    }
    not(format!(
        "no upstream task accepts connections: {}",
        errors.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ShutdownConfig;

    fn state(upstream: &str) -> std::sync::Arc<ProxyState> {
        let cfg = crate::config::parse(
            &format!("[upstream]\naddresses = [\"{upstream}\"]\n"),
            "test.toml",
        )
        .expect("parses");
        ProxyState::new(cfg, "test.toml", None).expect("builds")
    }

    #[tokio::test]
    async fn ready_when_an_upstream_accepts_and_not_while_draining() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s = state(&l.local_addr().unwrap().to_string());
        let r = readiness(&s).await;
        assert!(r.ready, "{r:?}");
        assert!(r.reason.contains("accepts connections"), "{r:?}");
        s.begin_draining();
        let r = readiness(&s).await;
        assert!(!r.ready && r.reason.contains("draining"), "{r:?}");
    }

    #[tokio::test]
    async fn not_ready_when_no_upstream_answers() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead = l.local_addr().unwrap().to_string();
        drop(l);
        let r = readiness(&state(&dead)).await;
        assert!(!r.ready, "{r:?}");
        assert!(r.reason.contains(&dead), "names the task: {r:?}");
    }

    #[test]
    fn bounds_are_checked() {
        let c = ShutdownConfig {
            drain_delay_ms: 600_001,
            ..ShutdownConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "drain_delay_ms");
        let c = ShutdownConfig {
            drain_timeout_ms: u64::MAX,
            ..ShutdownConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().field, "drain_timeout_ms");
        assert!(ShutdownConfig::default().validate().is_ok());
    }
}
