//! Fleet-wide incident controls: shed-below, admit-percent and retries-off set once, for every
//! proxy sharing the quota store (`[admission.quota] store`).
//!
//! Why: during an incident the runbook's levers (stop retries, shed the lowest criticality
//! first, cut traffic to 1% and ramp back) are needed on every task at once; looping over hosts
//! is slow and misses the ones that autoscaled in meanwhile. The store the fleet already shares
//! for quota leases carries them: one Redis key per control, holding who set it, when, and
//! when it expires (every fleet control expires — an incident lever forgotten on a whole fleet
//! is an outage of its own). Each proxy reads the keys every [`POLL`] (one `MGET`, independent
//! of the lease interval) and applies what it reads to a second [`IncidentControls`], the
//! *fleet layer*, beside its local one.
//!
//! **Precedence: the stricter wins.** A request passes only if both layers let it through,
//! drawn with the same random number, so admit-percent admits the smaller of the two shares
//! (each layer's own exemption applies within that layer), shed-below sheds below the higher
//! of the two levels, and the proxy retries only if neither layer turned retries off. Clearing
//! one layer leaves the other in force.
//!
//! **Store down.** The fleet layer keeps what it last read until each control's own expiry
//! (checked locally against the wall clock); local controls never depend on the store.
//!
//! This file holds the data and its application (no I/O, unit-tested); `fleet_sync.rs` the
//! Redis side.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use spillway_core::Criticality;

use super::{AdmitPercent, AdmitPercentState, IncidentControls};

/// How often each proxy reads the fleet controls: well inside the one second an operator
/// expects a fleet-wide lever to take, and one small `MGET` per proxy per poll.
pub const POLL: Duration = Duration::from_millis(200);
/// A fleet control's lifetime when the operator gives none: long enough for an incident's
/// first steps, short enough that a forgotten one lifts itself.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(15 * 60);
/// The longest accepted lifetime (24 h): longer is almost certainly a unit mistake.
pub const MAX_EXPIRY: Duration = Duration::from_secs(24 * 3600);

/// The three fleet-wide controls, in the order of [`FleetControls`]' slots and the store keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Shed below a criticality.
    ShedBelow,
    /// Admit a percentage (optionally ramping).
    AdmitPercent,
    /// Turn the proxies' own retries off.
    RetriesOff,
}

impl Kind {
    /// Every kind, in slot order.
    pub const ALL: [Kind; 3] = [Kind::ShedBelow, Kind::AdmitPercent, Kind::RetriesOff];

    /// The Redis key (under the quota keys' hash tag, one Cluster slot).
    pub const fn key(self) -> &'static str {
        match self {
            Kind::ShedBelow => "{spillway}:control:shed_below",
            Kind::AdmitPercent => "{spillway}:control:admit_percent",
            Kind::RetriesOff => "{spillway}:control:retries_off",
        }
    }

    const fn slot(self) -> usize {
        match self {
            Kind::ShedBelow => 0,
            Kind::AdmitPercent => 1,
            Kind::RetriesOff => 2,
        }
    }
}

/// A control's value as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Value {
    /// Shed every level below this one.
    ShedBelow(Criticality),
    /// Admit `percent`% from `set_at_ms`, ramping to 100% over `ramp_seconds` if given.
    AdmitPercent {
        /// The share admitted at the start, percent.
        percent: f64,
        /// Ramp length, seconds.
        ramp_seconds: Option<f64>,
        /// Levels at or above this one bypass the percentage.
        exempt_from: Option<Criticality>,
    },
    /// The proxies' own retries are off.
    RetriesOff,
}

impl Value {
    /// Which control this is.
    pub fn kind(&self) -> Kind {
        match self {
            Value::ShedBelow(_) => Kind::ShedBelow,
            Value::AdmitPercent { .. } => Kind::AdmitPercent,
            Value::RetriesOff => Kind::RetriesOff,
        }
    }
}

/// One fleet control as stored (JSON) and shown in `/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The control.
    pub value: Value,
    /// The instance whose admin API set it.
    pub set_by: String,
    /// The admin client's address, as that instance saw it.
    pub peer: String,
    /// When it was set, ms since the Unix epoch (the setter's clock).
    pub set_at_ms: u64,
    /// When it lifts, ms since the Unix epoch.
    pub expires_at_ms: u64,
}

impl Entry {
    /// Parses a stored entry; `None` for anything that is not one (a peer-controlled store
    /// must not be able to panic the proxy, and a malformed key is treated as absent).
    pub fn parse(text: &str) -> Option<Entry> {
        let e: Entry = serde_json::from_str(text).ok()?;
        if matches!(e.value, Value::AdmitPercent { .. }) {
            e.admit_at(Instant::now(), e.set_at_ms)?;
        }
        Some(e)
    }

    pub(crate) fn admit_at(&self, now: Instant, now_ms: u64) -> Option<(Instant, AdmitPercent)> {
        let Value::AdmitPercent {
            percent,
            ramp_seconds,
            exempt_from,
        } = self.value
        else {
            return None;
        };
        let ramp = match ramp_seconds {
            Some(s) => Some(Duration::try_from_secs_f64(s).ok()?),
            None => None,
        };
        let a = AdmitPercent {
            percent,
            ramp,
            exempt_from,
        };
        a.validate().ok()?;
        // The ramp started when the operator set it, not when this proxy read it, so every
        // proxy is at the same point of the ramp.
        let age = Duration::from_millis(now_ms.saturating_sub(self.set_at_ms));
        Some((now.checked_sub(age).unwrap_or(now), a))
    }
}

/// Milliseconds since the Unix epoch now (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One fleet control in `/status`: the stored entry and the seconds left.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntryStatus {
    /// The stored entry.
    #[serde(flatten)]
    pub entry: Entry,
    /// Seconds until it lifts.
    pub expires_in_seconds: f64,
    /// For admit-percent, the share admitted now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<AdmitPercentState>,
}

/// `/status`'s `fleet_controls`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetStatus {
    /// This instance's id as a setter.
    pub instance: String,
    /// Whether a store is configured (without one, fleet scope is refused).
    pub store: bool,
    /// Milliseconds since the store last answered a poll (`None`: never).
    pub last_read_ms_ago: Option<u64>,
    /// The last poll's failure, if the store is failing now.
    pub last_error: Option<String>,
    /// Fleet shed-below, if set.
    pub shed_below: Option<EntryStatus>,
    /// Fleet admit-percent, if set.
    pub admit_percent: Option<EntryStatus>,
    /// Fleet retries-off, if set.
    pub retries_off: Option<EntryStatus>,
    /// What applies here, local and fleet together (the stricter wins).
    pub effective: Effective,
}

/// The controls in force once local and fleet layers are combined.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Effective {
    /// The higher of the two shed-below levels.
    pub shed_below: Option<Criticality>,
    /// Where it comes from: `local`, `fleet`, or `None`.
    pub shed_below_from: Option<&'static str>,
    /// The smaller of the two admit-percent shares now.
    pub admit_percent: Option<f64>,
    /// Whether the proxy retries (both layers allow it).
    pub retries_enabled: bool,
}

#[derive(Debug, Default)]
struct Meta {
    entries: [Option<Entry>; 3],
    last_read: Option<Instant>,
    last_error: Option<String>,
}

/// The fleet layer and where each of its controls came from.
#[derive(Debug)]
pub struct FleetControls {
    layer: IncidentControls,
    instance: String,
    meta: Mutex<Meta>,
}

impl Default for FleetControls {
    fn default() -> Self {
        FleetControls {
            layer: IncidentControls::default(),
            instance: spillway_tower::lease::instance_id(),
            meta: Mutex::new(Meta::default()),
        }
    }
}

impl FleetControls {
    /// The controls applied from the store (consulted by the data path after the local ones).
    pub fn layer(&self) -> &IncidentControls {
        &self.layer
    }

    /// This instance's id, recorded as `set_by` on the controls it sets.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    fn meta(&self) -> std::sync::MutexGuard<'_, Meta> {
        self.meta.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies what the store holds now (`read[k]` for [`Kind::ALL`]`[k]`; `None` = absent).
    pub fn apply_read(&self, read: [Option<Entry>; 3], now: Instant, now_ms: u64) {
        let mut m = self.meta();
        m.last_read = Some(now);
        m.last_error = None;
        for (kind, e) in Kind::ALL.into_iter().zip(read) {
            // A malformed entry of the wrong kind under a key is treated as absent.
            let e = e.filter(|e| e.value.kind() == kind && e.expires_at_ms > now_ms);
            self.set_slot(&mut m, kind, e, now, now_ms);
        }
    }

    /// The store could not be read: keep the last values, lifting those past their expiry.
    pub fn read_failed(&self, error: String, now: Instant, now_ms: u64) {
        let mut m = self.meta();
        m.last_error = Some(error);
        self.expire(&mut m, now, now_ms);
    }

    /// Lifts every control past its expiry (also done on each read).
    pub fn expire_now(&self, now: Instant, now_ms: u64) {
        let mut m = self.meta();
        self.expire(&mut m, now, now_ms);
    }

    fn expire(&self, m: &mut Meta, now: Instant, now_ms: u64) {
        for kind in Kind::ALL {
            if m.entries[kind.slot()]
                .as_ref()
                .is_some_and(|e| e.expires_at_ms <= now_ms)
            {
                self.set_slot(m, kind, None, now, now_ms);
            }
        }
    }

    /// Applies one control just written (or cleared) by this instance, before the next read.
    pub fn apply_one(&self, kind: Kind, e: Option<Entry>, now: Instant, now_ms: u64) {
        let mut m = self.meta();
        self.set_slot(&mut m, kind, e, now, now_ms);
    }

    /// The current entry of `kind`, if set.
    pub fn entry(&self, kind: Kind) -> Option<Entry> {
        self.meta().entries[kind.slot()].clone()
    }

    fn set_slot(&self, m: &mut Meta, kind: Kind, e: Option<Entry>, now: Instant, now_ms: u64) {
        if m.entries[kind.slot()] == e {
            return;
        }
        match (&e, kind) {
            (
                Some(Entry {
                    value: Value::ShedBelow(c),
                    ..
                }),
                _,
            ) => self.layer.set_shed_below(Some(*c)),
            (None, Kind::ShedBelow) => self.layer.set_shed_below(None),
            (
                Some(
                    entry @ Entry {
                        value: Value::AdmitPercent { .. },
                        ..
                    },
                ),
                _,
            ) => match entry.admit_at(now, now_ms) {
                Some((start, a)) => {
                    // Validated by `admit`: cannot fail.
                    let _ = self.layer.set_admit_percent(start, a);
                }
                None => self.layer.clear_admit_percent(),
            },
            (None, Kind::AdmitPercent) => self.layer.clear_admit_percent(),
            (
                Some(Entry {
                    value: Value::RetriesOff,
                    ..
                }),
                _,
            ) => self.layer.set_retries_enabled(false),
            (None, Kind::RetriesOff) => self.layer.set_retries_enabled(true),
        }
        match &e {
            Some(e) => tracing::info!(
                control = kind.key(),
                set_by = %e.set_by,
                peer = %e.peer,
                expires_in_s = e.expires_at_ms.saturating_sub(now_ms) / 1000,
                "fleet control applies"
            ),
            None => tracing::info!(control = kind.key(), "fleet control lifted"),
        }
        m.entries[kind.slot()] = e;
    }

    /// `/status`'s view, with `local` the proxy's local layer.
    pub fn status(
        &self,
        local: &IncidentControls,
        store: bool,
        now: Instant,
        now_ms: u64,
    ) -> FleetStatus {
        let m = self.meta();
        let fleet_snap = self.layer.snapshot(now);
        let local_snap = local.snapshot(now);
        let show = |kind: Kind| {
            m.entries[kind.slot()].clone().map(|entry| EntryStatus {
                expires_in_seconds: entry.expires_at_ms.saturating_sub(now_ms) as f64 / 1000.0,
                current: (kind == Kind::AdmitPercent)
                    .then(|| fleet_snap.admit_percent.clone())
                    .flatten(),
                entry,
            })
        };
        let (shed_below, shed_below_from) = match (local_snap.shed_below, fleet_snap.shed_below) {
            (Some(l), Some(f)) if f > l => (Some(f), Some("fleet")),
            (Some(l), _) => (Some(l), Some("local")),
            (None, Some(f)) => (Some(f), Some("fleet")),
            (None, None) => (None, None),
        };
        let pct = |s: &Option<AdmitPercentState>| s.as_ref().map(|a| a.current_percent);
        let admit_percent = match (
            pct(&local_snap.admit_percent),
            pct(&fleet_snap.admit_percent),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        FleetStatus {
            instance: self.instance.clone(),
            store,
            last_read_ms_ago: m
                .last_read
                .map(|t| now.saturating_duration_since(t).as_millis() as u64),
            last_error: m.last_error.clone(),
            shed_below: show(Kind::ShedBelow),
            admit_percent: show(Kind::AdmitPercent),
            retries_off: show(Kind::RetriesOff),
            effective: Effective {
                shed_below,
                shed_below_from,
                admit_percent,
                retries_enabled: local_snap.retries_enabled && fleet_snap.retries_enabled,
            },
        }
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
