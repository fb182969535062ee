//! The admin API's request handling, independent of the socket: routing, the token check, and
//! one function per endpoint. Generic over the request body so it is tested without a network.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, WWW_AUTHENTICATE};
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use serde_json::{json, Value};
use spillway_core::Criticality;

use super::origin::{self, OwnAddress};
use super::reply::{self, AdminBody, ApiError};
use super::{auth, metrics as m, redact, AdminConfig};
use crate::controls::ControlsState;
use crate::metrics::recorder::MetricsHandle;
use crate::state::ProxyState;

mod changes;
pub(super) use changes::admit_percent;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Prometheus text exposition format 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// At most this many changed keys are listed in a reload summary.
const MAX_CHANGED: usize = 50;

const INDEX: &str = "Spillway admin API\n\
GET  /metrics                     Prometheus text format\n\
GET  /status                      JSON: admission, upstreams, routes, controls, offered demand\n\
GET  /controls                    JSON: incident controls\n\
GET  /config                      JSON: effective configuration, secrets redacted\n\
GET  /ready                       200 when traffic should be sent here, 503 (and why) when not\n\
GET  /live                        200 while the process answers\n\
POST /reload                      re-read the configuration file (or reload the TOML body)\n\
POST /degradation                 {\"route\": \"name\", \"enabled\": false}  (no route = all)\n\
POST /controls/shed-below         {\"criticality\": \"SHEDDABLE_PLUS\"} or \"off\"\n\
POST /controls/admit-percent      {\"percent\": 1, \"ramp_seconds\": 600, \"exempt_from\": \"CRITICAL_PLUS\"}\n\
POST /controls/retries            {\"enabled\": false}\n\
POST /controls/exercise-degraded  {\"fraction\": 0.01}\n\
POST /controls/reset              every control off\n\
     add ?scope=fleet (and expires_seconds, default 900) to shed-below, admit-percent,\n\
     retries or reset: every proxy sharing [admission.quota] store, within a second\n\
Fields may also be given as query parameters. See docs/runbook.md.\n";

/// Who may call an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Read-only state: open unless `protect_reads`.
    Read,
    /// Changes behaviour or reveals the deployment: the token, when one is set.
    Protected,
}

/// The admin API bound to one proxy: cheap to share (`Arc`) across connections.
#[derive(Debug)]
pub struct AdminApi {
    state: Arc<ProxyState>,
    token: Option<Box<[u8]>>,
    protect_reads: bool,
    max_body_bytes: usize,
    /// The addresses a change must be sent to (see `super::origin`).
    own: OwnAddress,
    metrics: Result<MetricsHandle, m::MetricsError>,
    dashboard: Arc<crate::dashboard::Dashboard>,
}

impl AdminApi {
    /// Builds the API for `state` with `cfg` (validated here) and installs the process's
    /// Prometheus recorder if it is not installed yet.
    pub fn new(
        state: Arc<ProxyState>,
        cfg: &AdminConfig,
    ) -> Result<Self, spillway_core::ConfigError> {
        cfg.validate()?;
        let token = cfg
            .resolve_token()?
            .map(|t| t.into_bytes().into_boxed_slice());
        Ok(AdminApi {
            dashboard: crate::dashboard::Dashboard::new(Arc::clone(&state)),
            state,
            token,
            protect_reads: cfg.protect_reads,
            max_body_bytes: cfg.max_body_bytes,
            own: OwnAddress::new(cfg.listen, &cfg.allowed_hosts),
            metrics: m::install_recorder(),
        })
    }

    /// Sets the address the listener is bound to (its real port when `admin.listen` asked
    /// for port 0): requests that change state must name it (or an `allowed_hosts` entry).
    pub fn set_bound_addr(&mut self, addr: SocketAddr, allowed_hosts: &[String]) {
        self.own = OwnAddress::new(addr, allowed_hosts);
    }

    /// The proxy this API acts on.
    pub fn state(&self) -> &Arc<ProxyState> {
        &self.state
    }

    /// The metrics handle, if the recorder could be installed (the server runs its upkeep).
    pub fn metrics(&self) -> Option<&MetricsHandle> {
        self.metrics.as_ref().ok()
    }

    /// The dashboard served on `/` (browsers), `/assets/*` and `/api/*`.
    pub fn dashboard(&self) -> &Arc<crate::dashboard::Dashboard> {
        &self.dashboard
    }

    /// Answers one request. `peer` is logged with every change an operator makes.
    pub async fn handle<B>(&self, req: Request<B>, peer: Option<SocketAddr>) -> Response<AdminBody>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        match self.route(req, peer).await {
            Ok(r) => r,
            Err(e) => {
                let unauthorised = e.status == StatusCode::UNAUTHORIZED;
                let mut r = e.into_response();
                if unauthorised {
                    // RFC 6750 §3: a 401 names the scheme it wants.
                    r.headers_mut().insert(
                        WWW_AUTHENTICATE,
                        HeaderValue::from_static("Bearer realm=\"spillway-admin\""),
                    );
                }
                r
            }
        }
    }

    async fn route<B>(
        &self,
        req: Request<B>,
        peer: Option<SocketAddr>,
    ) -> Result<Response<AdminBody>, ApiError>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let path = req.uri().path().to_string();
        // Probes: open whatever the token settings (an orchestrator's probe carries none) and
        // telling nothing but whether to send traffic.
        if path == "/ready" || path == "/live" {
            return Ok(self.probe(&path, req.method()).await);
        }
        // The dashboard (crate::dashboard): its pages hold no data; its data is a read.
        if path.starts_with("/api/") {
            self.authorise(Access::Read, &req)?;
        }
        if let Some(r) = self.dashboard.handle(&req) {
            return Ok(r);
        }
        let (allowed, access) = endpoint(&path)?;
        if req.method().as_str() != allowed {
            return Ok(method_not_allowed(&path, allowed, allowed));
        }
        // A change (or the deployment's description) only when addressed to this listener
        // by something that is not a web page: see `super::origin` for the threat.
        if access == Access::Protected {
            self.own.check_addressed(req.headers(), req.uri())?;
            // With a token the check below needs `Authorization`, which is not simple already
            // (and a missing token is better answered with 401 and how to send it).
            if req.method() == Method::POST && self.token.is_none() {
                origin::check_not_simple(req.headers())?;
            }
        }
        self.authorise(access, &req)?;
        if req.method() == Method::GET {
            return self.read(&path);
        }
        let query = req.uri().query().map(str::to_string);
        let body = self.read_body(req.into_body()).await?;
        let who = peer.map_or_else(|| "unknown peer".to_string(), |p| p.to_string());
        self.change(&path, query.as_deref(), &body, &who).await
    }

    /// `/ready` and `/live`.
    async fn probe(&self, path: &str, method: &Method) -> Response<AdminBody> {
        if method != Method::GET && method != Method::HEAD {
            return method_not_allowed(path, "GET", "GET, HEAD");
        }
        if path == "/live" {
            return reply::json(StatusCode::OK, &json!({"live": true}));
        }
        let r = crate::drain::readiness(&self.state).await;
        let status = if r.ready {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        reply::json(status, &r)
    }

    fn authorise<B>(&self, access: Access, req: &Request<B>) -> Result<(), ApiError> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        if access == Access::Read && !self.protect_reads {
            return Ok(());
        }
        if auth::bearer_matches(token, req.headers()) {
            return Ok(());
        }
        ::metrics::counter!(crate::metrics::ADMIN_UNAUTHORIZED).increment(1);
        Err(ApiError::status(
            StatusCode::UNAUTHORIZED,
            "this endpoint needs the admin token: send Authorization: Bearer <token>",
        ))
    }

    async fn read_body<B>(&self, body: B) -> Result<Bytes, ApiError>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        match Limited::new(body, self.max_body_bytes).collect().await {
            Ok(c) => Ok(c.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::status(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "request body larger than admin.max_body_bytes = {}",
                    self.max_body_bytes
                ),
            )),
            Err(e) => Err(ApiError::status(
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {e}"),
            )),
        }
    }

    fn read(&self, path: &str) -> Result<Response<AdminBody>, ApiError> {
        let now = Instant::now();
        Ok(match path {
            "/" => reply::text(StatusCode::OK, INDEX),
            "/metrics" => {
                self.publish_gauges();
                if let Err(e) = &self.metrics {
                    // Offered demand is ours and still rendered; say why the rest is missing.
                    let mut body = format!("# {e}\n");
                    body.push_str(&m::render(None));
                    return Ok(reply::with_type(StatusCode::OK, PROMETHEUS_TEXT, body));
                }
                reply::with_type(StatusCode::OK, PROMETHEUS_TEXT, m::render(self.metrics()))
            }
            "/status" => {
                let mut v = to_value(&self.state.status())?;
                if let Value::Object(o) = &mut v {
                    o.insert(
                        "incident_controls".into(),
                        to_value(&self.state.controls().snapshot(now))?,
                    );
                    o.insert(
                        "fleet_controls".into(),
                        to_value(&super::fleet::status(&self.state, now))?,
                    );
                    o.insert("offered_demand".into(), offered_json());
                }
                reply::json(StatusCode::OK, &v)
            }
            "/controls" => self.controls_json(now),
            "/config" => {
                let mut v = to_value(&*self.state.config())?;
                redact::redact(&mut v);
                reply::json(StatusCode::OK, &v)
            }
            _ => {
                return Err(ApiError::status(
                    StatusCode::NOT_FOUND,
                    format!("no endpoint {path}"),
                ))
            }
        })
    }

    /// Gauges are sampled when scraped, not on every request: the controller's limit, in
    /// flight, queue and utilisation, and each upstream task's throttle probability.
    fn publish_gauges(&self) {
        let st = self.state.status();
        let a = &st.admission;
        spillway_tower::metrics::gauges(a.in_flight, a.limit, a.utilisation);
        ::metrics::gauge!(m::QUEUED).set(a.queued as f64);
        ::metrics::gauge!(m::QUEUE_CAPACITY).set(a.queue_capacity as f64);
        for t in &st.upstreams {
            spillway_tower::metrics::throttle_probability(
                t.address.clone().into(),
                t.throttle_probability,
            );
        }
    }

    fn controls_json(&self, now: Instant) -> Response<AdminBody> {
        let s: ControlsState = self.state.controls().snapshot(now);
        reply::json(StatusCode::OK, &s)
    }
}

fn offered_json() -> Value {
    let o = m::offered();
    let mut map = serde_json::Map::new();
    for c in Criticality::ALL {
        map.insert(
            c.as_str().into(),
            json!({"requests": o.requests(c), "cost": o.cost(c)}),
        );
    }
    Value::Object(map)
}

fn to_value<T: serde::Serialize + ?Sized>(v: &T) -> Result<Value, ApiError> {
    serde_json::to_value(v).map_err(|e| {
        ApiError::status(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot serialise: {e}"),
        )
    })
}

/// The method an endpoint accepts and who may call it; 404 for no such endpoint.
fn endpoint(path: &str) -> Result<(&'static str, Access), ApiError> {
    Ok(match path {
        "/" | "/metrics" | "/status" | "/controls" => ("GET", Access::Read),
        "/config" => ("GET", Access::Protected),
        "/reload" | "/degradation" => ("POST", Access::Protected),
        p if p.starts_with("/controls/") => ("POST", Access::Protected),
        _ => {
            return Err(ApiError::status(
                StatusCode::NOT_FOUND,
                format!("no endpoint {path}; see GET / for the list"),
            ))
        }
    })
}

/// 405 naming the method `path` accepts, with `Allow` (RFC 9110 §15.5.6).
fn method_not_allowed(path: &str, accepts: &str, allow: &'static str) -> Response<AdminBody> {
    let mut r = ApiError::status(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{path} accepts {accepts} only"),
    )
    .into_response();
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    r
}
