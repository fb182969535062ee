//! The upstream client's TLS: which CAs are trusted, the client certificate for mTLS, the name
//! each task's certificate is checked against (and sent as SNI), ALPN by protocol.
//!
//! Why the platform's trust store by default (`rustls-native-certs`) and not a compiled-in
//! list (`webpki-roots`): it is already in the build (the Redis client's `rediss://` uses it),
//! it is updated with the operating system (a container image's `ca-certificates`) rather than
//! by rebuilding the proxy, and a private CA installed on the host is trusted as the
//! operator's other tools trust it. Most deployments set `ca_file` anyway: upstreams behind a
//! proxy usually carry certificates of an internal CA.

use std::io;
use std::sync::{Arc, RwLock};

use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

use super::config::UpstreamTlsConfig;
use super::files;

/// A TLS connection to an upstream task.
pub type TlsStream = tokio_rustls::client::TlsStream<TcpStream>;

/// What a new connection offers by ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alpn {
    /// `http/1.1` only.
    Http1,
    /// `h2` only (`upstream.protocol = "http2"`, gRPC, or a task known to speak it).
    Http2,
    /// `h2` then `http/1.1`: asking which one a task speaks (`upstream.protocol = "auto"`).
    Either,
}

type Invalid = (String, String);

/// One client configuration per ALPN offer, read from the files together.
pub(crate) struct Sides {
    http1: TlsConnector,
    http2: TlsConnector,
    either: TlsConnector,
}

impl Sides {
    /// Reads `tls`'s files (CA bundle, client certificate and key) afresh.
    pub(crate) fn load(tls: &UpstreamTlsConfig) -> Result<Self, Invalid> {
        let roots = roots(tls)?;
        let builder = ClientConfig::builder_with_provider(files::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| ("upstream.tls".to_string(), e.to_string()))?
            .with_root_certificates(roots);
        let base = match (&tls.client_cert_file, &tls.client_key_file) {
            (None, None) => builder.with_no_client_auth(),
            (Some(c), Some(k)) => {
                let key = "upstream.tls.client_cert_file";
                let chain = files::certs(key, c).map_err(|m| (key.to_string(), m))?;
                let key = "upstream.tls.client_key_file";
                let private = files::private_key(key, k).map_err(|m| (key.to_string(), m))?;
                builder.with_client_auth_cert(chain, private).map_err(|e| {
                    (
                        "upstream.tls".to_string(),
                        format!(
                            "the client certificate {c:?} and key {k:?} do not make a client \
                             identity: {e}"
                        ),
                    )
                })?
            }
            (Some(_), None) => {
                return Err((
                    "upstream.tls.client_key_file".to_string(),
                    "missing: upstream.tls.client_cert_file needs its private key".to_string(),
                ))
            }
            (None, Some(_)) => {
                return Err((
                    "upstream.tls.client_cert_file".to_string(),
                    "missing: upstream.tls.client_key_file is set without its certificate"
                        .to_string(),
                ))
            }
        };
        let with = |alpn: &[&[u8]]| {
            let mut c = base.clone();
            c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            TlsConnector::from(Arc::new(c))
        };
        Ok(Sides {
            http1: with(&[b"http/1.1"]),
            http2: with(&[b"h2"]),
            either: with(&[b"h2", b"http/1.1"]),
        })
    }
}

/// `ca_file`'s certificates, or the platform's trust store.
fn roots(tls: &UpstreamTlsConfig) -> Result<RootCertStore, Invalid> {
    let mut roots = RootCertStore::empty();
    match &tls.ca_file {
        Some(path) => {
            let key = "upstream.tls.ca_file";
            for cert in files::certs(key, path).map_err(|m| (key.to_string(), m))? {
                roots.add(cert).map_err(|e| {
                    (
                        key.to_string(),
                        format!("{path:?}: a certificate that cannot be a trust anchor: {e}"),
                    )
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let why: Vec<String> = found.errors.iter().map(|e| e.to_string()).collect();
                return Err((
                    "upstream.tls.ca_file".to_string(),
                    format!(
                        "not set, and the platform's trust store has no CA certificate ({}): \
                         set it to a PEM bundle",
                        if why.is_empty() {
                            "none found".to_string()
                        } else {
                            why.join("; ")
                        }
                    ),
                ));
            }
        }
    }
    Ok(roots)
}

/// The TLS side of an upstream pool: what new connections are made with (swapped on reload)
/// and the name each task's certificate must carry.
pub struct Client {
    current: RwLock<Arc<Sides>>,
    names: Box<[ServerName<'static>]>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Reads `tls`'s files and the server name of each of `addresses` (`host:port`).
    pub fn new<S: AsRef<str>>(tls: &UpstreamTlsConfig, addresses: &[S]) -> Result<Self, Invalid> {
        let names = addresses
            .iter()
            .enumerate()
            .map(|(i, a)| server_name(tls, i, a.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Client {
            current: RwLock::new(Arc::new(Sides::load(tls)?)),
            names,
        })
    }

    /// The name each task is checked against, as text.
    #[cfg(test)]
    pub(crate) fn names(&self) -> Vec<String> {
        self.names.iter().map(|n| n.to_str().into_owned()).collect()
    }

    /// New connections are made with `sides` (open ones keep their session).
    pub(crate) fn set(&self, sides: Sides) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(sides);
    }

    /// The TLS handshake with task `task` over `tcp`, offering `alpn`.
    pub(crate) async fn connect(
        &self,
        task: usize,
        tcp: TcpStream,
        alpn: Alpn,
    ) -> io::Result<TlsStream> {
        let name = self
            .names
            .get(task)
            .ok_or_else(|| io::Error::other(format!("no upstream task number {task}")))?
            .clone();
        let connector = {
            let sides = self.current.read().unwrap_or_else(|p| p.into_inner());
            match alpn {
                Alpn::Http1 => sides.http1.clone(),
                Alpn::Http2 => sides.http2.clone(),
                Alpn::Either => sides.either.clone(),
            }
        };
        connector.connect(name, tcp).await
    }
}

/// Whether `stream` agreed on HTTP/2 by ALPN.
pub(crate) fn is_h2(stream: &TlsStream) -> bool {
    stream.get_ref().1.alpn_protocol() == Some(b"h2")
}

/// The name task `i` (at `address`) is checked against: `server_name`, or the address's host.
fn server_name(
    tls: &UpstreamTlsConfig,
    i: usize,
    address: &str,
) -> Result<ServerName<'static>, Invalid> {
    if let Some(n) = &tls.server_name {
        return ServerName::try_from(n.as_str())
            .map(|n| n.to_owned())
            .map_err(|e| {
                (
                    "upstream.tls.server_name".to_string(),
                    format!("{n:?}: not a DNS name or IP address: {e}"),
                )
            });
    }
    let host = match address.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map(|(h, _)| h),
        None => address.rsplit_once(':').map(|(h, _)| h),
    }
    .unwrap_or(address);
    ServerName::try_from(host)
        .map(|n| n.to_owned())
        .map_err(|e| {
            (
                format!("upstream.addresses[{i}]"),
                format!(
                    "{address:?}: its host is not a name a certificate can carry ({e}): set \
                 upstream.tls.server_name"
                ),
            )
        })
}
