//! The listener's certificate, swappable: each handshake is answered with the one current at
//! that moment (see the module doc of `crate::tls`).

use std::sync::{Arc, RwLock};

use tokio_rustls::rustls::server::{ClientHello, ResolvesServerCert};
use tokio_rustls::rustls::sign::CertifiedKey;
use tokio_rustls::rustls::ServerConfig;

use super::config::TlsConfig;
use super::files;

/// The listener's certificate chain and key, as new handshakes get them.
#[derive(Debug)]
pub struct ListenerCerts {
    current: RwLock<Arc<CertifiedKey>>,
}

impl ListenerCerts {
    pub(super) fn new(key: Arc<CertifiedKey>) -> Arc<Self> {
        Arc::new(ListenerCerts {
            current: RwLock::new(key),
        })
    }

    /// New handshakes get `key` (open connections keep theirs).
    pub(super) fn set(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = key;
    }
}

impl ResolvesServerCert for ListenerCerts {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(
            &self.current.read().unwrap_or_else(|p| p.into_inner()),
        ))
    }
}

/// Reads `tls`'s chain and key and checks that they belong together.
pub(super) fn load(tls: &TlsConfig) -> Result<Arc<CertifiedKey>, String> {
    let chain = files::certs("listen.tls.cert", &tls.cert)?;
    let key = files::private_key("listen.tls.key", &tls.key)?;
    CertifiedKey::from_der(chain, key, &files::provider())
        .map(Arc::new)
        .map_err(|e| {
            format!(
                "listen.tls: the certificate {:?} and key {:?} do not make a server identity: {e}",
                tls.cert, tls.key
            )
        })
}

/// An acceptor answering with `certs`' current certificate; ALPN `h2` and `http/1.1`.
pub(super) fn acceptor(certs: Arc<ListenerCerts>) -> Result<super::Acceptor, String> {
    let mut sc = ServerConfig::builder_with_provider(files::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("listen.tls: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    sc.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(sc)))
}
