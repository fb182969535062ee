//! The Redis side of fleet-wide incident controls (see `fleet.rs` for what they are).
//!
//! Why a poll of its own rather than riding on the lease call: the lease interval may be up
//! to 10 s, and a fleet lever must reach every proxy within a second. One `MGET` of three small
//! keys every [`POLL`] per proxy is negligible next to the lease script. Every call is bounded
//! (a hung store must not stall the poll), and a failed read keeps the last values until their
//! expiry.
//!
//! Writing is a `SET … PX` (Redis lifts the key at expiry by itself, and each proxy also lifts
//! its copy at the stored `expires_at_ms`, so an unreachable store cannot prolong a control);
//! clearing is a `DEL`, which every proxy reads as "lifted" at its next poll.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::fleet::{now_ms, Entry, FleetControls, Kind, POLL};
use crate::config::ProxyConfig;
use spillway_tower::lease::Client;

/// What the poll and the admin API's writes read of the proxy (`ProxyState` implements it): a
/// trait so that the controls sit below the state that holds them.
pub trait Source: Send + Sync + 'static {
    /// The configuration current now (where the store is: `[admission.quota]`).
    fn config(&self) -> Arc<ProxyConfig>;
    /// The fleet layer of the incident controls, which the poll keeps current.
    fn fleet_controls(&self) -> &FleetControls;
}

/// Each store call's bound: under a poll, so the cadence holds.
const BUDGET: Duration = Duration::from_millis(150);
/// The admin API's bound on a write (an operator waits for it, once).
const WRITE_BUDGET: Duration = Duration::from_secs(2);

/// Starts the poll on the current tokio runtime, if there is one; it follows the configured
/// store through reloads (no store: it only expires what it holds) and ends with `state`.
pub fn spawn<S: Source>(state: &Arc<S>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    handle.spawn(run(Arc::downgrade(state)));
}

async fn run<S: Source>(weak: Weak<S>) {
    let mut client: Option<(String, Option<String>, Client)> = None;
    let mut failing = false;
    loop {
        let started = tokio::time::Instant::now();
        let Some(state) = weak.upgrade() else { return };
        let q = state.config().admission.quota.clone();
        let fleet = state.fleet_controls();
        match q.store {
            None => {
                client = None;
                fleet.expire_now(Instant::now(), now_ms());
            }
            Some(url) => {
                let key = (url, q.store_password_file);
                if !matches!(&client, Some((u, p, _)) if (u, p) == (&key.0, &key.1)) {
                    client = Client::connect(&key.0, key.1.as_deref(), BUDGET)
                        .await
                        .ok()
                        .map(|c| (key.0.clone(), key.1.clone(), c));
                }
                let read = match client.as_mut() {
                    Some((_, _, c)) => read(c).await,
                    None => Err("no connection".to_string()),
                };
                match read {
                    Ok(entries) => {
                        if failing {
                            failing = false;
                            tracing::info!("fleet controls: the store answers again");
                        }
                        fleet.apply_read(entries, Instant::now(), now_ms());
                    }
                    Err(e) => {
                        if !failing {
                            failing = true;
                            tracing::warn!(
                                error = %e,
                                "fleet controls: store unreachable; keeping the last fleet \
                                 controls until their expiry (logged once per outage)"
                            );
                        }
                        fleet.read_failed(e, Instant::now(), now_ms());
                    }
                }
            }
        }
        drop(state);
        tokio::time::sleep_until(started + POLL).await;
    }
}

async fn read(c: &mut Client) -> Result<[Option<Entry>; 3], String> {
    let mut cmd = redis::cmd("MGET");
    for k in Kind::ALL {
        cmd.arg(k.key());
    }
    let reply: Vec<Option<String>> = tokio::time::timeout(BUDGET, cmd.query_async(c.conn()))
        .await
        .map_err(|_| format!("no answer within {} ms", BUDGET.as_millis()))?
        .map_err(|e| e.to_string())?;
    let mut out: [Option<Entry>; 3] = [None, None, None];
    for (slot, text) in out.iter_mut().zip(reply) {
        *slot = text.as_deref().and_then(Entry::parse);
    }
    Ok(out)
}

/// Sets (`Some`) or clears (`None`) one fleet control in the store, then applies it here at
/// once. Fails, saying why, without a store or when it does not answer.
pub async fn write<S: Source + ?Sized>(
    state: &S,
    kind: Kind,
    entry: Option<Entry>,
) -> Result<(), String> {
    let q = state.config().admission.quota.clone();
    let Some(url) = q.store else {
        return Err(
            "scope=fleet needs a shared store: set [admission.quota] store = \"redis://…\"".into(),
        );
    };
    let mut c = Client::connect(&url, q.store_password_file.as_deref(), WRITE_BUDGET).await?;
    let cmd = match &entry {
        Some(e) => {
            let text = serde_json::to_string(e).map_err(|e| e.to_string())?;
            let ttl = e.expires_at_ms.saturating_sub(now_ms()).max(1);
            let mut cmd = redis::cmd("SET");
            cmd.arg(kind.key()).arg(text).arg("PX").arg(ttl);
            cmd
        }
        None => {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(kind.key());
            cmd
        }
    };
    tokio::time::timeout(WRITE_BUDGET, cmd.query_async::<redis::Value>(c.conn()))
        .await
        .map_err(|_| {
            format!(
                "the store did not answer within {} s",
                WRITE_BUDGET.as_secs()
            )
        })?
        .map_err(|e| format!("the store refused the write: {e}"))?;
    state
        .fleet_controls()
        .apply_one(kind, entry, Instant::now(), now_ms());
    Ok(())
}
