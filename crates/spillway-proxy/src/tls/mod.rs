//! TLS (cargo feature `tls`): on the client-facing listener ([`acceptor`]) and to the
//! upstream tasks (`[upstream.tls]`, `Client`), rustls with the `ring` provider; certificates
//! and keys re-read on every reload (SIGHUP) without dropping a connection.
//!
//! Why optional: most sidecars terminate TLS elsewhere (a mesh, a load balancer) and the proxy
//! then needs no crypto in its build; a gateway at the edge, or a proxy in front of a service
//! that only speaks HTTPS, needs it.
//!
//! Why reload by swapping what new handshakes use: a certificate is renewed while connections
//! are open, and cutting them would be an outage of its own. The listener answers each
//! handshake with the certificate current at that moment (a resolver holding it, swapped on
//! reload); the upstream client makes each new connection with the client configuration current
//! at that moment; established connections keep the session they negotiated. Files are read
//! whole and checked (chain parsed, key matching the certificate) before anything is swapped,
//! so a bad file refuses the reload and the old certificate stays (reported like any refused
//! reload).

#[cfg(feature = "tls")]
mod client;
mod config;
#[cfg(feature = "tls")]
mod files;
#[cfg(feature = "tls")]
mod listener;
#[cfg(all(test, feature = "tls"))]
mod tests;

#[cfg(feature = "tls")]
pub(crate) use client::{is_h2, Alpn};
#[cfg(feature = "tls")]
pub use client::{Client, TlsStream};
#[cfg(feature = "tls")]
pub use listener::ListenerCerts;

pub use config::{TlsConfig, UpstreamTlsConfig};

/// Accepts TLS connections.
#[cfg(feature = "tls")]
pub type Acceptor = tokio_rustls::TlsAcceptor;

/// Accepts TLS connections (uninhabited: this build has no `tls` feature).
#[cfg(not(feature = "tls"))]
#[derive(Debug, Clone)]
pub enum Acceptor {}

/// The acceptor for `[listen.tls]` (`tls`), `None` when TLS is not configured. Errors name the
/// file and what was wrong. Its certificate is fixed; [`serving`] makes one that follows reloads.
#[cfg(feature = "tls")]
pub fn acceptor(tls: Option<&TlsConfig>) -> Result<Option<Acceptor>, String> {
    let Some(tls) = tls else {
        return Ok(None);
    };
    let certs = listener::ListenerCerts::new(listener::load(tls)?);
    listener::acceptor(certs).map(Some)
}

/// The acceptor for `[listen.tls]` (this build has no `tls` feature: TLS settings are an error).
#[cfg(not(feature = "tls"))]
pub fn acceptor(tls: Option<&TlsConfig>) -> Result<Option<Acceptor>, String> {
    match tls {
        None => Ok(None),
        Some(_) => Err(NO_TLS.replace("{}", "listen.tls")),
    }
}

#[cfg(not(feature = "tls"))]
const NO_TLS: &str = "{} is set but this build has no TLS: rebuild with `--features tls` \
                      (`cargo install spillway --features tls`)";

/// The listener's certificates as the running proxy holds them, so that a reload can swap
/// them ([`Reloader::prepare`]).
#[derive(Debug, Default)]
pub struct Reloader {
    #[cfg(feature = "tls")]
    listener: std::sync::Mutex<Option<std::sync::Arc<ListenerCerts>>>,
}

/// The acceptor the data listener serves with for `[listen.tls]` (`tls`): its certificate is
/// the one `reloader` holds, swapped by each reload. `None` when TLS is not configured.
#[cfg(feature = "tls")]
pub fn serving(reloader: &Reloader, tls: Option<&TlsConfig>) -> Result<Option<Acceptor>, String> {
    let Some(tls) = tls else {
        return Ok(None);
    };
    let mut slot = reloader.listener.lock().unwrap_or_else(|p| p.into_inner());
    let certs = match &*slot {
        // Every data-plane thread's acceptor shares one resolver.
        Some(c) => std::sync::Arc::clone(c),
        None => {
            let c = listener::ListenerCerts::new(listener::load(tls)?);
            *slot = Some(std::sync::Arc::clone(&c));
            c
        }
    };
    listener::acceptor(certs).map(Some)
}

/// The acceptor the data listener serves with (this build has no `tls` feature).
#[cfg(not(feature = "tls"))]
pub fn serving(reloader: &Reloader, tls: Option<&TlsConfig>) -> Result<Option<Acceptor>, String> {
    let _ = reloader;
    acceptor(tls)
}

/// The upstream connections as a reload sees them: what swaps their TLS client. Implemented by
/// `upstream::Connections`; a trait so that `tls` sits below the pool and does not name it.
pub trait Connector: Sized {
    /// These connections over TLS made by `client`.
    #[cfg(feature = "tls")]
    fn with_tls(self, client: Client) -> Self;
    /// The TLS client new connections are made with, if they speak TLS.
    #[cfg(feature = "tls")]
    fn tls(&self) -> Option<&std::sync::Arc<Client>>;
}

/// Certificates read for a reload, installed by [`Pending::apply`] once the new configuration
/// is in place.
#[derive(Default)]
#[must_use]
pub struct Pending {
    #[cfg(feature = "tls")]
    listener: Option<(
        std::sync::Arc<ListenerCerts>,
        std::sync::Arc<tokio_rustls::rustls::sign::CertifiedKey>,
    )>,
    #[cfg(feature = "tls")]
    upstream: Option<(std::sync::Arc<Client>, client::Sides)>,
}

impl Reloader {
    /// Reads the certificates the configuration names afresh: the listener's (`listen`, if it
    /// serves TLS) and the upstream client's (`upstream`) when the pool's connections `conns`
    /// were kept from before the reload (a new pool has read its own). An error names the key
    /// and what was wrong; nothing has been swapped then.
    pub fn prepare<C: Connector>(
        &self,
        listen: Option<&TlsConfig>,
        upstream: Option<&UpstreamTlsConfig>,
        conns: &C,
        pool_is_new: bool,
    ) -> Result<Pending, (String, String)> {
        #[cfg(feature = "tls")]
        {
            let mut pending = Pending::default();
            let held = self
                .listener
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if let (Some(certs), Some(tls)) = (held, listen) {
                let key = listener::load(tls).map_err(|m| ("listen.tls".to_string(), m))?;
                pending.listener = Some((certs, key));
            }
            if let (false, Some(client), Some(tls)) = (pool_is_new, conns.tls(), upstream) {
                pending.upstream = Some((std::sync::Arc::clone(client), client::Sides::load(tls)?));
            }
            Ok(pending)
        }
        #[cfg(not(feature = "tls"))]
        {
            let _ = (listen, upstream, conns, pool_is_new);
            Ok(Pending::default())
        }
    }
}

impl Pending {
    /// Makes new handshakes use what [`Reloader::prepare`] read.
    pub fn apply(self) {
        #[cfg(feature = "tls")]
        {
            if let Some((certs, key)) = self.listener {
                certs.set(key);
            }
            if let Some((client, sides)) = self.upstream {
                client.set(sides);
            }
        }
    }
}

/// Checks `[upstream.tls]` (`tls`, for the tasks at `addresses`): reads its files (so
/// `--check` and start refuse a missing or bad one), and the server name each task is checked
/// against.
#[cfg(feature = "tls")]
pub(crate) fn check_upstream<S: AsRef<str>>(
    tls: Option<&UpstreamTlsConfig>,
    addresses: &[S],
) -> Result<(), (String, String)> {
    match tls {
        Some(tls) if tls.enabled => Client::new(tls, addresses).map(|_| ()),
        _ => Ok(()),
    }
}

/// Checks `[upstream.tls]` (this build has no `tls` feature: enabling it is an error).
#[cfg(not(feature = "tls"))]
pub(crate) fn check_upstream<S: AsRef<str>>(
    tls: Option<&UpstreamTlsConfig>,
    addresses: &[S],
) -> Result<(), (String, String)> {
    let _ = addresses;
    match tls {
        Some(tls) if tls.enabled => Err((
            "upstream.tls".to_string(),
            NO_TLS.replace("{}", "upstream.tls"),
        )),
        _ => Ok(()),
    }
}

/// `conns` over TLS when `[upstream.tls]` (`tls`) is enabled (its files read now).
#[cfg(feature = "tls")]
pub(crate) fn with_tls<C: Connector, S: AsRef<str>>(
    conns: C,
    tls: Option<&UpstreamTlsConfig>,
    addresses: &[S],
) -> Result<C, String> {
    match tls {
        Some(tls) if tls.enabled => {
            let client = Client::new(tls, addresses)
                .map_err(|(key, message)| format!("{key}: {message}"))?;
            Ok(conns.with_tls(client))
        }
        _ => Ok(conns),
    }
}

/// `conns` as they are: this build has no TLS (`config::check` refused `[upstream.tls]`).
#[cfg(not(feature = "tls"))]
pub(crate) fn with_tls<C: Connector, S: AsRef<str>>(
    conns: C,
    tls: Option<&UpstreamTlsConfig>,
    addresses: &[S],
) -> Result<C, String> {
    check_upstream(tls, addresses).map_err(|(key, message)| format!("{key}: {message}"))?;
    Ok(conns)
}
