//! TLS on the client-facing listener (cargo feature `tls`): rustls with the `ring` provider,
//! ALPN `h2` and `http/1.1`.
//!
//! Why optional: most sidecars terminate TLS elsewhere (a mesh, a load balancer) and the proxy
//! then needs no crypto in its build; a gateway at the edge needs it. The certificate chain and
//! key are read once when the listener starts (changing `[listen]` needs a restart; SIGHUP
//! reloads everything else).

use crate::config::ListenConfig;

/// Accepts TLS connections.
#[cfg(feature = "tls")]
pub type Acceptor = tokio_rustls::TlsAcceptor;

/// Accepts TLS connections (uninhabited: this build has no `tls` feature).
#[cfg(not(feature = "tls"))]
#[derive(Debug, Clone)]
pub enum Acceptor {}

/// The acceptor for `cfg.tls`, `None` when TLS is not configured. Errors name the file and
/// what was wrong.
#[cfg(feature = "tls")]
pub fn acceptor(cfg: &ListenConfig) -> Result<Option<Acceptor>, String> {
    use std::sync::Arc;

    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls::{self, ServerConfig};

    let Some(tls) = &cfg.tls else {
        return Ok(None);
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| {
            format!(
                "listen.tls.cert = {:?}: cannot read a PEM certificate chain: {e}",
                tls.cert
            )
        })?;
    if certs.is_empty() {
        return Err(format!(
            "listen.tls.cert = {:?}: no CERTIFICATE in the file",
            tls.cert
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&tls.key).map_err(|e| {
        format!(
            "listen.tls.key = {:?}: cannot read a PEM private key: {e}",
            tls.key
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut sc = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("listen.tls: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!("listen.tls: the certificate and key do not make a server identity: {e}")
        })?;
    sc.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Some(tokio_rustls::TlsAcceptor::from(Arc::new(sc))))
}

/// The acceptor for `cfg.tls` (this build has no `tls` feature: TLS settings are an error).
#[cfg(not(feature = "tls"))]
pub fn acceptor(cfg: &ListenConfig) -> Result<Option<Acceptor>, String> {
    match cfg.tls {
        None => Ok(None),
        Some(_) => Err("listen.tls is set but this build has no TLS: rebuild with \
                        `--features spillway-proxy/tls`"
            .into()),
    }
}
