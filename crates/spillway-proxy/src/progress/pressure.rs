//! Pressure-scaled idle timeouts for HTTP/1.1 client connections: kept-alive connections are
//! closed sooner when the proxy is short of connections or is refusing work for its own
//! overload.
//!
//! Why: an HTTP/1.1 client needs one connection per request in flight, so a client that stalls
//! for a moment and then sends what piled up (an open-loop generator on a busy host, a fleet of
//! callers retrying together) opens hundreds of connections at once and keeps them in its pool
//! afterwards, idle, for its own idle timeout. Each one holds the proxy's memory for it
//! (docs/soak.md) and a file descriptor; the default `listen.idle_timeout_ms` (75 s) keeps them
//! for longer than any pool does. Closing idle connections costs the client a new handshake
//! when it wants one again, and a request that races the close; that is worth paying only when
//! the connections are a burden. So, as Envoy's overload manager does with
//! `envoy.overload_actions.reduce_timeouts` on `HTTP_DOWNSTREAM_CONNECTION_IDLE`, the idle
//! timeout is scaled down between `listen.idle_timeout_ms` and `listen.idle_timeout_min_ms` by
//! a pressure in 0 ..= 1:
//! - open connections, linear from 0 at `listen.idle_pressure_from_pct` % of
//!   `listen.max_connections` to 1 at the cap (Envoy's scaled trigger; at the cap itself the
//!   connection's timer already closes an idle connection at once, [`super::watch`]);
//! - 1 for a connection idle while the proxy refused requests for its own overload (shed, no
//!   concurrency slot, queue full or timed out: one such refusal since the connection went idle, or
//!   in the [`OVERLOAD_RECENT`](crate::state::OVERLOAD_RECENT) before). A refused request gains
//!   nothing from a connection kept warm for its next try, and an overload is when a stalled,
//!   piled-up client shows up; counting the refusals of the connection's whole idle time, not only
//!   the last second's, lets a burst's connections go at the minimum even when the burst's overload
//!   ended before they had been idle that long.
//!
//! A connection in active use never idles long enough to notice (a pool reuses its warm
//! connections first): what goes is what a burst left behind. HTTP/2 is left out: one
//! connection carries a whole client, so bursts do not pile connections up, and closing it
//! drops the client's channel.

use std::time::Duration;

/// The idle timeout's scaling (from `[listen]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdlePressure {
    /// The idle timeout at full pressure (`listen.idle_timeout_min_ms`).
    pub min: Duration,
    /// Open connections at which scaling begins (`idle_pressure_from_pct` of the cap).
    pub from: usize,
    /// The connection cap (`listen.max_connections`).
    pub cap: usize,
}

impl IdlePressure {
    /// The scaling for `max_connections`, beginning at `from_pct` % of it.
    pub fn new(min: Duration, from_pct: u32, max_connections: usize) -> Self {
        let pct = usize::try_from(from_pct.min(100)).unwrap_or(100);
        IdlePressure {
            min,
            from: max_connections.saturating_mul(pct) / 100,
            cap: max_connections,
        }
    }

    /// No scaling: the idle timeout is always `idle` (the minimum is never reached).
    #[cfg(test)]
    pub const OFF: IdlePressure = IdlePressure {
        min: Duration::MAX,
        from: usize::MAX,
        cap: usize::MAX,
    };

    /// The pressure for `open` connections and the overload state, 0 ..= 1.
    pub fn pressure(&self, open: usize, overloaded: bool) -> f64 {
        if overloaded {
            return 1.0;
        }
        if open <= self.from || self.cap <= self.from {
            return 0.0;
        }
        ((open - self.from) as f64 / (self.cap - self.from) as f64).min(1.0)
    }

    /// The idle timeout of an HTTP/1.1 connection whose configured one is `idle`, with `open`
    /// client connections and the proxy `overloaded` or not: `idle` at no pressure, the
    /// minimum at full pressure, linear between (never above `idle`).
    pub fn idle_limit(&self, idle: Duration, open: usize, overloaded: bool) -> Duration {
        let min = self.min.min(idle);
        let p = self.pressure(open, overloaded);
        if p <= 0.0 {
            return idle;
        }
        min + (idle - min).mul_f64(1.0 - p)
    }
}

#[cfg(test)]
mod tests;
