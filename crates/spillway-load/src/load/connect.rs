//! The generator's connections: every one to the address checked before the run, in cleartext
//! or, with the `tls` feature, over TLS (rustls, as the proxy's `tls` feature).
//!
//! Why the address is pinned: the loopback check, `--allow-remote` and the printed cap are
//! about the address resolved once at start. A name resolved again for each new connection
//! could point elsewhere mid-run (a round-robin record, a rebinding), and the resolver's thread
//! pool is work the generator does not need while it keeps a schedule. The URIs still carry the
//! name the user typed, so the Host header and, over HTTPS, SNI and the certificate check use
//! that name, not the address.
//!
//! Why the platform's trust store by default and `ca_file` otherwise, with no switch that
//! turns verification off: a staging service usually has a certificate of an internal CA, whose
//! bundle the operator has; a load test that ignored a wrong certificate would measure (and
//! load) whatever answered.

use std::future::{ready, Ready};
use std::iter::{once, Once};
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;

use super::{LoadConfig, LoadError};

/// A resolver that answers every name with the one address the run was checked against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pinned(SocketAddr);

impl tower_service::Service<Name> for Pinned {
    type Response = Once<SocketAddr>;
    type Error = std::io::Error;
    type Future = Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Name) -> Self::Future {
        ready(Ok(once(self.0)))
    }
}

#[cfg(feature = "tls")]
type Connector = hyper_rustls::HttpsConnector<HttpConnector<Pinned>>;
#[cfg(not(feature = "tls"))]
type Connector = HttpConnector<Pinned>;

/// The HTTP client every request task shares (its pool of connections to the target).
pub(crate) type HttpClient = Client<Connector, Empty<Bytes>>;

/// What an HTTPS target's certificate is checked with, read before the run starts.
#[cfg(feature = "tls")]
pub(crate) struct Tls(rustls::ClientConfig);

/// Nothing: this build speaks cleartext only (`validate` refuses an HTTPS target).
#[cfg(not(feature = "tls"))]
pub(crate) struct Tls;

impl Tls {
    /// Reads `cfg.ca_file`, or the platform's trust store, for an HTTPS target.
    #[cfg(feature = "tls")]
    pub(crate) fn new(cfg: &LoadConfig) -> Result<Self, LoadError> {
        let roots = if cfg.https {
            roots(cfg.ca_file.as_deref())?
        } else {
            // A cleartext target: the TLS layer passes every request through untouched.
            rustls::RootCertStore::empty()
        };
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| LoadError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Tls(config))
    }

    /// Nothing to read: this build has no TLS.
    #[cfg(not(feature = "tls"))]
    pub(crate) fn new(_: &LoadConfig) -> Result<Self, LoadError> {
        Ok(Tls)
    }
}

/// `ca_file`'s certificates, or the platform's; an empty set is an error (nothing would verify).
#[cfg(feature = "tls")]
fn roots(ca_file: Option<&std::path::Path>) -> Result<rustls::RootCertStore, LoadError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect())
                .map_err(|e| LoadError::Tls(format!("--ca-file {}: {e}", path.display())))?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(LoadError::Tls(format!(
                    "--ca-file {}: no CA certificate in it (expected PEM \"CERTIFICATE\" blocks)",
                    path.display()
                )));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(LoadError::Tls(
                    "the platform's trust store has no CA certificate: give the target's CA \
                     bundle with --ca-file"
                        .into(),
                ));
            }
        }
    }
    Ok(roots)
}

/// Builds the shared client: no Nagle delay, a large idle pool (open-loop traffic opens one
/// HTTP/1.1 connection per concurrent request), or HTTP/2 (prior knowledge in cleartext, ALPN
/// `h2` over TLS).
pub(crate) fn http_client(cfg: &LoadConfig, tls: Tls) -> HttpClient {
    let mut http = HttpConnector::new_with_resolver(Pinned(cfg.target));
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(5)));
    // The scheme is the TLS layer's business (it passes `http://` through).
    http.enforce_http(!cfg!(feature = "tls"));
    #[cfg(feature = "tls")]
    let connector = {
        let b = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.0)
            .https_or_http();
        if cfg.http2 {
            b.enable_http2().wrap_connector(http)
        } else {
            b.enable_http1().wrap_connector(http)
        }
    };
    #[cfg(not(feature = "tls"))]
    let connector = {
        let Tls = tls;
        http
    };
    let mut b = Client::builder(hyper_util::rt::TokioExecutor::new());
    b.pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(4096)
        .timer(hyper_util::rt::TokioTimer::new())
        .pool_timer(hyper_util::rt::TokioTimer::new());
    if cfg.http2 {
        b.http2_only(true);
    }
    b.build(connector)
}

impl LoadConfig {
    /// The target as a URL: `https://staging.example.com:443`, `http://127.0.0.1:8080`.
    pub fn target_url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        match &self.authority {
            Some(a) => format!("{scheme}://{a}"),
            None => format!("{scheme}://{}", self.target),
        }
    }

    /// `https` needs the `tls` feature; `ca_file` needs `https`.
    pub(super) fn check_tls(&self) -> Result<(), LoadError> {
        let bad = |flag: &'static str, why: String| Err(LoadError::Config { flag, why });
        if self.https && !cfg!(feature = "tls") {
            return bad(
                "--target",
                format!(
                    "{}: this build speaks cleartext HTTP only; HTTPS targets need the `tls` \
                     feature (cargo install spillway --features tls)",
                    self.target_url()
                ),
            );
        }
        if let (Some(ca), false) = (&self.ca_file, self.https) {
            return bad(
                "--ca-file",
                format!(
                    "{} is for an https:// target; {} is cleartext",
                    ca.display(),
                    self.target_url()
                ),
            );
        }
        Ok(())
    }
}
