//! `POST /controls/...?scope=fleet`: the incident controls for every proxy sharing the store.
//!
//! Why on the admin API rather than a separate tool: the on-call engineer already knows these
//! endpoints from the runbook; adding `scope=fleet` (and optionally `expires_seconds`) to the
//! same call is the least to remember during an incident. The proxy that receives it writes the
//! store and applies the control at once; the others read it within their next poll
//! (`controls::fleet::POLL`). See `controls/fleet.rs` for precedence and expiry.

use std::time::{Duration, Instant};

use http::StatusCode;
use serde_json::Value;

use super::api::admit_percent;
use super::params::Params;
use super::reply::{self, AdminBody, ApiError};
use crate::controls::fleet::{self, now_ms, Entry, FleetStatus, Kind};
use crate::controls::{fleet_sync, IncidentControls};
use crate::state::ProxyState;
use http::Response;

const SCOPE: &str = "\"local\" (this proxy, the default) or \"fleet\" (every proxy sharing \
                     [admission.quota] store)";
const EXPIRES: &str = "a number of seconds above 0 and at most 86400 (24 h)";

/// Takes `scope` out of `p`: whether the control is for the whole fleet.
pub fn is_fleet_scope(p: &mut Params) -> Result<bool, ApiError> {
    match p.remove("scope") {
        None | Some(Value::Null) => Ok(false),
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("local") => Ok(false),
        Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("fleet") => Ok(true),
        Some(v) => Err(ApiError::invalid(
            "scope",
            v.as_str().map_or(v.to_string(), str::to_string).as_str(),
            SCOPE,
        )),
    }
}

/// `/status`'s `fleet_controls`.
pub fn status(state: &ProxyState, now: Instant) -> FleetStatus {
    state.fleet_status(now)
}

/// Sets or clears the fleet control at `path` from `p`; answers with `fleet_controls`.
pub async fn handle(
    state: &ProxyState,
    path: &str,
    p: &Params,
    who: &str,
    now: Instant,
) -> Result<Response<AdminBody>, ApiError> {
    let expiry = match p.f64("expires_seconds", EXPIRES)? {
        None => fleet::DEFAULT_EXPIRY,
        Some(s) => Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero() && *d <= fleet::MAX_EXPIRY)
            .ok_or_else(|| ApiError::invalid("expires_seconds", &s.to_string(), EXPIRES))?,
    };
    let set_at_ms = now_ms();
    let entry = |value| Entry {
        value,
        set_by: state.fleet_controls().instance().to_string(),
        peer: who.to_string(),
        set_at_ms,
        expires_at_ms: set_at_ms.saturating_add(expiry.as_millis() as u64),
    };
    let changes: Vec<(Kind, Option<Entry>)> = match path {
        "/controls/shed-below" => {
            p.only(&["criticality", "expires_seconds"])?;
            if !p.has("criticality") {
                return Err(ApiError::missing(
                    "criticality",
                    "a criticality below which everything is shed, or \"off\"",
                ));
            }
            let c = p.criticality("criticality")?;
            vec![(
                Kind::ShedBelow,
                c.map(|c| entry(fleet::Value::ShedBelow(c))),
            )]
        }
        "/controls/admit-percent" => {
            p.only(&["percent", "ramp_seconds", "exempt_from", "expires_seconds"])?;
            vec![(Kind::AdmitPercent, admit_entry(state, p, now)?.map(entry))]
        }
        "/controls/retries" => {
            p.only(&["enabled", "expires_seconds"])?;
            let on = p.bool("enabled")?;
            vec![(
                Kind::RetriesOff,
                (!on).then(|| entry(fleet::Value::RetriesOff)),
            )]
        }
        "/controls/reset" => {
            p.only(&[])?;
            Kind::ALL.into_iter().map(|k| (k, None)).collect()
        }
        _ => {
            return Err(ApiError::status(
                StatusCode::BAD_REQUEST,
                format!(
                    "{path} has no fleet scope; fleet controls: shed-below, admit-percent, \
                     retries, reset"
                ),
            ))
        }
    };
    let mut said = Vec::new();
    for (kind, e) in changes {
        let what = match &e {
            Some(e) => format!("{:?} until {} ms since epoch", e.value, e.expires_at_ms),
            None => "cleared".into(),
        };
        fleet_sync::write(state, kind, e)
            .await
            .map_err(|m| ApiError::status(StatusCode::SERVICE_UNAVAILABLE, m))?;
        said.push(format!("{} {what}", kind.key()));
    }
    tracing::info!(admin = %who, change = %said.join("; "), "admin: fleet control");
    Ok(reply::json(StatusCode::OK, &status(state, Instant::now())))
}

/// The admit-percent value to store (`None`: clear), computed with the local control's rules
/// on a scratch copy of the current fleet control (so a ramp alone ramps from it).
fn admit_entry(
    state: &ProxyState,
    p: &Params,
    now: Instant,
) -> Result<Option<fleet::Value>, ApiError> {
    let scratch = IncidentControls::new(
        now.checked_sub(Duration::from_secs(86_400 * 8))
            .unwrap_or(now),
    );
    if let Some(current) = state.fleet_controls().entry(Kind::AdmitPercent) {
        if let Some((start, a)) = current.admit_at(now, now_ms()) {
            scratch.set_admit_percent(start, a)?;
        }
    }
    admit_percent(p, &scratch, now)?;
    Ok(scratch
        .snapshot(now)
        .admit_percent
        .map(|a| fleet::Value::AdmitPercent {
            percent: a.from_percent,
            ramp_seconds: a.ramp_seconds,
            exempt_from: a.exempt_from,
        }))
}
