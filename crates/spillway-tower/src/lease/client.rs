//! The Redis side of the lease: one connection manager and one script, every call bounded.
//!
//! Why a connection manager: it reconnects on its own after the store restarts, so the lease
//! task only sees a failed call (and falls back) rather than a dead connection to rebuild.
//! Why every call under a timeout of half an interval: the lease task must keep its cadence
//! (membership is a TTL of two intervals), and a store that hangs is as unusable as one that
//! refuses.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{IntoConnectionInfo, Script};

use super::{Report, MEMBERS_KEY};

/// The share computation (see `share.lua` for the algorithm).
const SHARE_LUA: &str = include_str!("share.lua");

/// A connection to the store and the loaded script.
pub struct Client {
    conn: ConnectionManager,
    script: Script,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to `url` (password from the first line of `password_file`, if given) within
    /// `budget`.
    pub async fn connect(
        url: &str,
        password_file: Option<&str>,
        budget: Duration,
    ) -> Result<Client, String> {
        let mut info = url
            .into_connection_info()
            .map_err(|e| format!("bad store URL: {e}"))?;
        if let Some(path) = password_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read quota.store_password_file {path}: {e}"))?;
            let password = text.lines().next().unwrap_or("").trim_end().to_string();
            info.redis.password = Some(password);
        }
        let client = redis::Client::open(info).map_err(|e| e.to_string())?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(budget)
            .set_response_timeout(budget)
            .set_number_of_retries(1)
            .set_max_delay(budget.as_millis() as u64);
        let conn = tokio::time::timeout(budget, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| format!("no connection within {} ms", budget.as_millis()))?
            .map_err(|e| e.to_string())?;
        Ok(Client {
            conn,
            script: Script::new(SHARE_LUA),
        })
    }

    /// One lease: reports `reports`' demands and returns (live members, share per report).
    /// Membership lasts `ttl`; a bucket's water level computed within `reuse` by any instance
    /// is applied rather than computed again (see `share.lua`).
    pub async fn lease(
        &mut self,
        instance: &str,
        ttl: Duration,
        reuse: Duration,
        reports: &[Report],
        budget: Duration,
    ) -> Result<(u64, Vec<f64>), String> {
        let mut inv = self.script.prepare_invoke();
        inv.key(MEMBERS_KEY)
            .arg(instance)
            .arg(ttl.as_millis() as u64)
            .arg(reuse.as_millis() as u64);
        for r in reports {
            inv.key(&r.key).arg(r.global);
            if r.ask > r.demand {
                inv.arg(format!("{}:{}", r.demand, r.ask));
            } else {
                inv.arg(r.demand);
            }
        }
        let reply: Vec<String> = tokio::time::timeout(budget, inv.invoke_async(&mut self.conn))
            .await
            .map_err(|_| format!("no answer within {} ms", budget.as_millis()))?
            .map_err(|e| e.to_string())?;
        parse_reply(&reply, reports.len())
    }
}

impl Client {
    /// The connection, for other small commands on the same store (fleet controls).
    pub fn conn(&mut self) -> &mut ConnectionManager {
        &mut self.conn
    }

    /// Removes `instance` from the member set (best effort, within `budget`): the others'
    /// next leases share its part out.
    pub async fn leave(&mut self, instance: &str, budget: Duration) {
        let mut cmd = redis::cmd("ZREM");
        cmd.arg(MEMBERS_KEY).arg(instance);
        let _ = tokio::time::timeout(budget, cmd.query_async::<i64>(&mut self.conn)).await;
    }
}

/// `{members, share...}` as the script returns it; every share finite and non-negative.
pub fn parse_reply(reply: &[String], n: usize) -> Result<(u64, Vec<f64>), String> {
    let bad = || format!("unexpected reply from the share script: {reply:?}");
    let (first, rest) = reply.split_first().ok_or_else(bad)?;
    let members = first.parse::<u64>().map_err(|_| bad())?;
    if rest.len() != n {
        return Err(bad());
    }
    let shares = rest
        .iter()
        .map(|s| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0))
        .collect::<Option<Vec<f64>>>()
        .ok_or_else(bad)?;
    Ok((members, shares))
}

/// `url` without credentials: `scheme://host:port/db`, for logs and `/status`.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "(invalid store URL)".into();
    };
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    format!("{scheme}://{rest}")
}

/// Whether the lease client can use `url`: it parses as a Redis URL, and `rediss://` only in a
/// build with TLS (the `fleet-tls` feature; the proxy's `tls`). The error says what is accepted.
pub fn check_store_url(url: &str) -> Result<(), String> {
    if url.starts_with("rediss://") && !cfg!(feature = "fleet-tls") {
        return Err(
            "redis://host:port/db (rediss:// needs a build with TLS: the proxy's `tls` \
             feature, or spillway-tower's `fleet-tls`)"
                .into(),
        );
    }
    url.into_connection_info()
        .map(|_| ())
        .map_err(|e| format!("a redis://host:port/db or rediss://host:port/db URL ({e})"))
}
