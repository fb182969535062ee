//! The admin API's request handling, independent of the socket: routing, the token check, and
//! one function per endpoint. Generic over the request body so it is tested without a network.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderValue, ALLOW, WWW_AUTHENTICATE};
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use serde_json::{json, Value};
use spillway_core::Criticality;

use super::origin::{self, OwnAddress};
use super::params::Params;
use super::reply::{self, AdminBody, ApiError};
use super::{auth, metrics as m, redact, AdminConfig};
use crate::controls::{AdmitPercent, ControlsState};
use crate::metrics::recorder::MetricsHandle;
use crate::state::ProxyState;

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
            if req.method() != Method::GET && req.method() != Method::HEAD {
                let mut r = ApiError::status(
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!("{path} accepts GET only"),
                )
                .into_response();
                r.headers_mut()
                    .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
                return Ok(r);
            }
            if path == "/live" {
                return Ok(reply::json(StatusCode::OK, &json!({"live": true})));
            }
            let r = crate::drain::readiness(&self.state).await;
            let status = if r.ready {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            return Ok(reply::json(status, &r));
        }
        // The dashboard (crate::dashboard): its pages hold no data; its data is a read.
        if path.starts_with("/api/") {
            self.authorise(Access::Read, &req)?;
        }
        if let Some(r) = self.dashboard.handle(&req) {
            return Ok(r);
        }
        let (allowed, access): (&str, Access) = match path.as_str() {
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
        };
        if req.method().as_str() != allowed {
            let mut r = ApiError::status(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{path} accepts {allowed} only"),
            )
            .into_response();
            r.headers_mut().insert(
                ALLOW,
                HeaderValue::from_static(if allowed == "GET" { "GET" } else { "POST" }),
            );
            return Ok(r);
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
        let now = Instant::now();
        let controls = self.state.controls();
        // Incident controls: this proxy's (default) or the fleet's (`scope=fleet`).
        let mut params = None;
        if path.starts_with("/controls/") {
            let mut p = Params::parse(query.as_deref(), &body)?;
            if super::fleet::is_fleet_scope(&mut p)? {
                return super::fleet::handle(&self.state, &path, &p, &who, now).await;
            }
            params = Some(p);
        }
        let (response, action) = match path.as_str() {
            "/reload" => return self.reload(&body, &who),
            "/degradation" => return self.degradation(query.as_deref(), &body, &who),
            "/controls/shed-below" => {
                let p = params.take().unwrap_or_default();
                p.only(&["criticality"])?;
                if !p.has("criticality") {
                    return Err(ApiError::missing(
                        "criticality",
                        "a criticality below which everything is shed, or \"off\"",
                    ));
                }
                let c = p.criticality("criticality")?;
                controls.set_shed_below(c);
                (self.controls_json(now), format!("shed below {}", name(c)))
            }
            "/controls/admit-percent" => {
                let p = params.take().unwrap_or_default();
                let action = admit_percent(&p, controls, now)?;
                (self.controls_json(now), action)
            }
            "/controls/retries" => {
                let p = params.take().unwrap_or_default();
                p.only(&["enabled"])?;
                let on = p.bool("enabled")?;
                controls.set_retries_enabled(on);
                (
                    self.controls_json(now),
                    format!("proxy retries {}", on_off(on)),
                )
            }
            "/controls/exercise-degraded" => {
                let p = params.take().unwrap_or_default();
                p.only(&["fraction"])?;
                const ACCEPTS: &str = "a fraction from 0 to 1 (0.01 = 1% of requests), or \"off\"";
                let f = if p.is_off("fraction") && p.has("fraction") {
                    0.0
                } else {
                    p.f64("fraction", ACCEPTS)?
                        .ok_or_else(|| ApiError::missing("fraction", ACCEPTS))?
                };
                controls.set_exercise_degraded(f)?;
                (
                    self.controls_json(now),
                    format!("exercise degraded path on {f} of requests"),
                )
            }
            "/controls/reset" => {
                params.take().unwrap_or_default().only(&[])?;
                controls.reset();
                (
                    self.controls_json(now),
                    "every incident control off".to_string(),
                )
            }
            _ => {
                return Err(ApiError::status(
                    StatusCode::NOT_FOUND,
                    format!(
                        "no control {path}; controls: shed-below, admit-percent, retries, \
                         exercise-degraded, reset"
                    ),
                ))
            }
        };
        tracing::info!(who = %who, "admin: {action}");
        Ok(response)
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

    fn reload(&self, body: &[u8], who: &str) -> Result<Response<AdminBody>, ApiError> {
        let before = redacted_config(&self.state)?;
        let (result, source) = if body.iter().all(u8::is_ascii_whitespace) {
            (self.state.reload_from_file(), "file")
        } else {
            let text = std::str::from_utf8(body).map_err(|_| {
                ApiError::bad_request(
                    "body",
                    "the request body is not UTF-8",
                    "a TOML configuration, or an empty body to re-read the file",
                )
            })?;
            (
                self.state
                    .reload_from_str(text, "admin API (POST /reload body)"),
                "request body",
            )
        };
        match result {
            Ok(()) => {
                let after = redacted_config(&self.state)?;
                let changed = redact::changed_paths(&before, &after, MAX_CHANGED);
                tracing::info!(
                    who = %who,
                    source = %source,
                    changed = changed.len(),
                    "admin: configuration reloaded"
                );
                let status = self.state.status();
                Ok(reply::json(
                    StatusCode::OK,
                    &json!({
                        "reloaded": true,
                        "source": source,
                        "origin": status.config_origin,
                        "changed": changed,
                        "reloads": status.reloads,
                    }),
                ))
            }
            Err(e) => Ok(reply::json(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({
                    "error": e.to_string(),
                    "origin": e.origin,
                    "line": e.line,
                    "key": e.key,
                    "kept": "the previous configuration is still in effect",
                }),
            )),
        }
    }

    fn degradation(
        &self,
        query: Option<&str>,
        body: &[u8],
        who: &str,
    ) -> Result<Response<AdminBody>, ApiError> {
        let p = Params::parse(query, body)?;
        p.only(&["route", "enabled"])?;
        let enabled = p.bool("enabled")?;
        let route = p
            .str(
                "route",
                "a route name from the configuration, or \"*\" for every route",
            )?
            .filter(|r| !r.is_empty() && *r != "*");
        self.state
            .set_degradation(route, enabled)
            .map_err(|e| ApiError {
                status: StatusCode::NOT_FOUND,
                field: Some("route".into()),
                message: e.to_string(),
                accepts: format!("one of the configured routes ({}), or \"*\"", e.known),
            })?;
        let target = route.map_or_else(|| "every route".to_string(), |r| format!("route {r:?}"));
        tracing::info!(
            who = %who,
            enabled,
            "admin: degradation {} for {target}",
            if enabled { "enabled" } else { "switched off" }
        );
        let status = to_value(&self.state.status())?;
        Ok(reply::json(
            StatusCode::OK,
            &json!({
                "route": route,
                "enabled": enabled,
                "degradation_all_off": status.get("degradation_all_off"),
                "routes": status.get("routes"),
            }),
        ))
    }
}

/// `POST /controls/admit-percent`: set, ramp from the current share, or turn off.
pub(super) fn admit_percent(
    p: &Params,
    controls: &crate::controls::IncidentControls,
    now: Instant,
) -> Result<String, ApiError> {
    const PERCENT: &str = "a number of percent from 0 to 100, or \"off\"";
    const RAMP: &str = "a number of seconds above 0 and at most 604800 (7 days)";
    p.only(&["percent", "ramp_seconds", "exempt_from"])?;
    let ramp = p
        .f64("ramp_seconds", RAMP)?
        .map(|s| {
            Duration::try_from_secs_f64(s)
                .map_err(|_| ApiError::invalid("ramp_seconds", &s.to_string(), RAMP))
        })
        .transpose()?;
    if p.has("percent") && p.is_off("percent") {
        controls.clear_admit_percent();
        return Ok("admit-percent off".into());
    }
    let exempt_from = p.criticality("exempt_from")?;
    match (p.f64("percent", PERCENT)?, ramp) {
        (Some(percent), ramp) => {
            controls.set_admit_percent(
                now,
                AdmitPercent {
                    percent,
                    ramp,
                    exempt_from,
                },
            )?;
            Ok(format!(
                "admit {percent}% of traffic{}{}",
                ramp.map_or(String::new(), |r| format!(
                    ", ramping to 100% over {} s",
                    r.as_secs_f64()
                )),
                exempt_from.map_or(String::new(), |c| format!(", {c} and above exempt")),
            ))
        }
        (None, Some(r)) => {
            if p.has("exempt_from") {
                return Err(ApiError::bad_request(
                    "exempt_from",
                    "exempt_from can only be set together with percent",
                    "percent and exempt_from together; a ramp alone keeps the current exemption",
                ));
            }
            controls.ramp_up(now, r)?;
            Ok(format!(
                "ramp admitted traffic to 100% over {} s",
                r.as_secs_f64()
            ))
        }
        (None, None) => Err(ApiError::missing(
            "percent",
            "percent (0 to 100, or \"off\"), ramp_seconds, or both",
        )),
    }
}

fn redacted_config(state: &ProxyState) -> Result<Value, ApiError> {
    let mut v = to_value(&*state.config())?;
    redact::redact(&mut v);
    Ok(v)
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

fn name(c: Option<Criticality>) -> &'static str {
    c.map_or("nothing (off)", Criticality::as_str)
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}
