//! The live dashboard and the knee calculator, served by the admin listener.
//!
//! Why: "graph offered load next to goodput, and queue time next to processing time, so a
//! dashboard shows overload directly" (reference guide "Overload and load shedding", § "Make
//! shedding visible"; SRE book ch. 21). Operators in an incident look at pictures, not JSON, and
//! the machine may be offline, so every asset is embedded ([`assets`]) and the pages fetch only
//! the JSON endpoints of this module:
//!
//! | path | what |
//! | --- | --- |
//! | `GET /` (browsers: `Accept: text/html`) | the dashboard |
//! | `GET /assets/calc.html` | the M/M/c calculator |
//! | `GET /assets/*` | the pages' scripts and style |
//! | `GET /api/series?since=<ms>` | samples newer than `since` (all 15 min for 0), see [`Sample`] |
//! | `GET /api/calc?...` | the calculator's answers from `spillway_core::erlang` ([`calc`]) |
//! | `GET /api/fleet` | `/status`'s `quota_lease` and `fleet_controls` (where rates and controls come from) |
//!
//! A sampler task ([`Dashboard::spawn_sampler`]) reads the proxy once a second into a ring of
//! 900 samples (15 minutes). Rates are differences of the proxy's own counters; latency comes
//! from the histograms of *admitted* requests only, so fast rejections never make the latency
//! chart look good (AWS, "Using load shedding to avoid overload"). Under overload the page stays
//! responsive because the admin listener is outside admission control, a poll asks only for
//! samples it has not seen, each sample is serialised once, and the page never has two polls
//! in flight.
//!
//! The degradation switch on the page posts to the admin API's own `POST /degradation` with the
//! bearer token the operator typed (kept in the tab's `sessionStorage`).

pub mod assets;
pub mod calc;
pub mod recorded;
pub mod ring;
pub mod sample;
pub mod source;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::{HeaderValue, ACCEPT, CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;

pub use sample::Sample;

use crate::metrics::recorder::MetricsHandle;
use crate::state::ProxyState;

/// The dashboard's response body (the same type as the admin API's).
pub type DashBody = Full<Bytes>;

/// The sampling interval: the charts' resolution.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// The pages may load scripts, styles and data from this origin only; no inline script.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The dashboard of one proxy: its samples and how to answer the pages.
#[derive(Debug)]
pub struct Dashboard {
    state: Arc<ProxyState>,
    ring: ring::Ring,
    metrics: Option<MetricsHandle>,
    differ: Mutex<(sample::Differ, Option<Instant>)>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Dashboard {
    /// A dashboard for `state`. Installs the process's Prometheus recorder if none is yet (the
    /// same one the admin API's `/metrics` uses); if another recorder is installed, the
    /// per-customer refusals and the latency charts stay empty and everything else works.
    pub fn new(state: Arc<ProxyState>) -> Arc<Self> {
        Arc::new(Dashboard {
            state,
            ring: ring::Ring::default(),
            metrics: crate::metrics::recorder::install_recorder().ok(),
            differ: Mutex::new((sample::Differ::default(), None)),
        })
    }

    /// Takes one sample now and appends it (the sampler calls this every [`INTERVAL`]).
    pub fn sample_now(&self) -> Sample {
        let reading = source::read(&self.state, self.metrics.as_ref());
        let now = Instant::now();
        let t = unix_ms();
        let mut g = self.differ.lock().unwrap_or_else(|p| p.into_inner());
        let dt =
            g.1.map_or(1.0, |prev| now.duration_since(prev).as_secs_f64());
        let s = g.0.next(reading, t, dt);
        g.1 = Some(now);
        // Serialising plain numbers and strings cannot fail; if it ever did, the sample is
        // skipped rather than the sampler stopped.
        if let Ok(json) = serde_json::to_string(&s) {
            self.ring.push(t, &json);
        }
        s
    }

    /// Samples held (at most 900).
    pub fn samples(&self) -> usize {
        self.ring.len()
    }

    /// Starts the sampler on the current Tokio runtime: one sample per second until the
    /// returned handle is aborted or the runtime shuts down. Each sample runs on the blocking
    /// pool, so rendering the metrics never delays the runtime's request handling; a late tick
    /// is skipped, not bunched.
    pub fn spawn_sampler(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                tick.tick().await;
                let m = Arc::clone(&me);
                // A panic inside one sample (a bug) must not end the sampler.
                let _ = tokio::task::spawn_blocking(move || {
                    m.sample_now();
                })
                .await;
            }
        })
    }

    /// Answers `req` if it is the dashboard's (`/` from a browser, `/assets/*`, `/api/*`);
    /// `None` leaves it to the admin API. Apply the admin API's read access check (the token
    /// under `protect_reads`) to `/api/*` before calling; the pages and scripts hold no data.
    pub fn handle<B>(&self, req: &Request<B>) -> Option<Response<DashBody>> {
        let path = req.uri().path();
        let ours = path.starts_with("/assets/")
            || path.starts_with("/api/")
            || (path == "/" && wants_html(req));
        if !ours {
            return None;
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = error(
                StatusCode::METHOD_NOT_ALLOWED,
                None,
                &format!("{path} accepts GET only"),
            );
            r.headers_mut()
                .insert(http::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return Some(r);
        }
        let query = || -> Vec<(String, String)> {
            form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
                .into_owned()
                .collect()
        };
        Some(match path {
            "/api/series" => {
                let q = query();
                let since = match q.iter().find(|(k, _)| k == "since") {
                    None => 0,
                    Some((_, v)) => match v.parse::<u64>() {
                        Ok(v) => v,
                        Err(_) => {
                            return Some(error(
                                StatusCode::BAD_REQUEST,
                                Some("since"),
                                "invalid since: expected milliseconds since the Unix epoch \
                                 (the t of the last sample you have), or 0 for all",
                            ))
                        }
                    },
                };
                json_response(self.ring.to_json_since(since, unix_ms()))
            }
            "/api/fleet" => {
                // What `/status` says of the fleet, without the rest of it: an operator in an
                // incident asks "are the quotas leased, and who set this control?".
                let body = serde_json::json!({
                    "quota_lease": self.state.leases().status(),
                    "fleet_controls": self.state.fleet_status(Instant::now()),
                });
                json_response(body.to_string())
            }
            "/api/calc" => match calc::answer(&query()) {
                Ok(v) => json_response(v.to_string()),
                Err(e) => error(StatusCode::BAD_REQUEST, Some(&e.field), &e.message),
            },
            p => match assets::find(p) {
                Some(a) => {
                    let mut r = Response::new(Full::new(Bytes::from_static(a.body.as_bytes())));
                    let h = r.headers_mut();
                    h.insert(CONTENT_TYPE, HeaderValue::from_static(a.content_type));
                    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                    h.insert("content-security-policy", HeaderValue::from_static(CSP));
                    h.insert(
                        "x-content-type-options",
                        HeaderValue::from_static("nosniff"),
                    );
                    r
                }
                None => error(
                    StatusCode::NOT_FOUND,
                    None,
                    &format!("no dashboard resource {p}; pages: / and /assets/calc.html"),
                ),
            },
        })
    }
}

fn wants_html<B>(req: &Request<B>) -> bool {
    req.headers()
        .get_all(ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.contains("text/html")))
}

fn json_response(body: String) -> Response<DashBody> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn error(status: StatusCode, field: Option<&str>, message: &str) -> Response<DashBody> {
    let mut v = serde_json::json!({ "error": message });
    if let Some(f) = field {
        v["field"] = serde_json::Value::String(f.to_string());
    }
    let mut r = json_response(v.to_string());
    *r.status_mut() = status;
    r
}
