//! Reading PEM files, with errors that name the key, the file and what was wrong: an operator
//! reading `--check`'s output or a refused reload should not have to guess which of four files
//! it was.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The certificates in the PEM file `path` (set as `key`), in order; at least one.
pub(super) fn certs(key: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<_, _>>())
        .map_err(|e| format!("{key} = {path:?}: cannot read a PEM certificate chain: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{key} = {path:?}: no CERTIFICATE in the file"));
    }
    Ok(certs)
}

/// The private key in the PEM file `path` (set as `key`).
pub(super) fn private_key(key: &str, path: &str) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("{key} = {path:?}: cannot read a PEM private key: {e}"))
}

/// The crypto provider every TLS configuration of the proxy uses.
pub(super) fn provider() -> std::sync::Arc<tokio_rustls::rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider())
}
