//! The admin API's changes: the incident controls, degradation and reload (POST endpoints).
//!
//! Apart from the read side (`super`) because a change has more to do than a read: parse
//! and check every field, say in the reply what is now in effect, and log who changed what.

use std::time::{Duration, Instant};

use http::{Response, StatusCode};
use serde_json::{json, Value};
use spillway_core::Criticality;

use super::{to_value, AdminApi, ApiError, MAX_CHANGED};
use crate::admin::params::Params;
use crate::admin::redact;
use crate::admin::reply::{self, AdminBody};
use crate::controls::{AdmitPercent, IncidentControls};
use crate::state::ProxyState;

impl AdminApi {
    /// A POST to `path` (already authorised) with its query and body; `who` is logged.
    pub(super) async fn change(
        &self,
        path: &str,
        query: Option<&str>,
        body: &[u8],
        who: &str,
    ) -> Result<Response<AdminBody>, ApiError> {
        match path {
            "/reload" => return self.reload(body, who),
            "/degradation" => return self.degradation(query, body, who),
            _ => {}
        }
        // Incident controls: this proxy's (default) or the fleet's (`scope=fleet`).
        let now = Instant::now();
        let mut p = Params::parse(query, body)?;
        if crate::admin::fleet::is_fleet_scope(&mut p)? {
            return crate::admin::fleet::handle(&self.state, path, &p, who, now).await;
        }
        let action = control(path, &p, self.state.controls(), now)?;
        tracing::info!(who = %who, "admin: {action}");
        Ok(self.controls_json(now))
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

/// Applies the incident control at `path` with `p`; what was done, for the log.
fn control(
    path: &str,
    p: &Params,
    controls: &IncidentControls,
    now: Instant,
) -> Result<String, ApiError> {
    Ok(match path {
        "/controls/shed-below" => {
            p.only(&["criticality"])?;
            if !p.has("criticality") {
                return Err(ApiError::missing(
                    "criticality",
                    "a criticality below which everything is shed, or \"off\"",
                ));
            }
            let c = p.criticality("criticality")?;
            controls.set_shed_below(c);
            format!("shed below {}", name(c))
        }
        "/controls/admit-percent" => admit_percent(p, controls, now)?,
        "/controls/retries" => {
            p.only(&["enabled"])?;
            let on = p.bool("enabled")?;
            controls.set_retries_enabled(on);
            format!("proxy retries {}", on_off(on))
        }
        "/controls/exercise-degraded" => {
            p.only(&["fraction"])?;
            const ACCEPTS: &str = "a fraction from 0 to 1 (0.01 = 1% of requests), or \"off\"";
            let f = if p.is_off("fraction") && p.has("fraction") {
                0.0
            } else {
                p.f64("fraction", ACCEPTS)?
                    .ok_or_else(|| ApiError::missing("fraction", ACCEPTS))?
            };
            controls.set_exercise_degraded(f)?;
            format!("exercise degraded path on {f} of requests")
        }
        "/controls/reset" => {
            p.only(&[])?;
            controls.reset();
            "every incident control off".to_string()
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
    })
}

/// `POST /controls/admit-percent`: set, ramp from the current share, or turn off.
pub(in crate::admin) fn admit_percent(
    p: &Params,
    controls: &IncidentControls,
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
