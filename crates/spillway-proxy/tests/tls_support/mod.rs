//! Certificates made for the test (rcgen) and a TLS backend on loopback that says what it saw:
//! protocol, SNI, whether the client presented a certificate.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::Response;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

/// A certificate authority.
pub struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate chain and its key, PEM.
pub struct Leaf {
    pub cert: String,
    pub key: String,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Ca { issuer }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by this CA.
    pub fn leaf(&self, names: &[&str]) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or("leaf"));
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }
}

/// A temporary directory of PEM files, removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(tag: &str) -> Dir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "spillway-tls-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }

    /// Writes `text` to `name` in the directory; its path.
    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server configuration presenting `leaf`, asking for a client certificate issued by
/// `client_ca` when given, with ALPN `h2` and `http/1.1`.
pub fn server_config(leaf: &Leaf, client_ca: Option<&Ca>) -> Arc<ServerConfig> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(leaf.cert.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(leaf.key.as_bytes()).unwrap();
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            roots.add(ca.issuer.der().clone()).unwrap();
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut sc = builder.with_single_cert(chain, key).unwrap();
    sc.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(sc)
}

/// A TLS backend: answers `v=<version> alpn=<protocol> sni=<name or -> client_cert=<yes|no>`.
pub struct TlsBackend {
    pub addr: SocketAddr,
    pub task: tokio::task::JoinHandle<()>,
    /// Handshakes completed.
    pub handshakes: Arc<AtomicUsize>,
    /// Handshakes that failed.
    pub failed: Arc<AtomicUsize>,
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn tls_backend(cfg: Arc<ServerConfig>) -> TlsBackend {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(cfg);
    let handshakes = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let (ok, bad) = (Arc::clone(&handshakes), Arc::clone(&failed));
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((s, _)) = l.accept().await else { return };
            let (acceptor, ok, bad) = (acceptor.clone(), Arc::clone(&ok), Arc::clone(&bad));
            conns.spawn(async move {
                let tls = match acceptor.accept(s).await {
                    Ok(t) => t,
                    Err(_) => {
                        bad.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                };
                ok.fetch_add(1, Ordering::SeqCst);
                let session = tls.get_ref().1;
                let said = format!(
                    "alpn={} sni={} client_cert={}",
                    session
                        .alpn_protocol()
                        .map_or("-".into(), |p| String::from_utf8_lossy(p).into_owned()),
                    session.server_name().unwrap_or("-"),
                    if session.peer_certificates().is_some() {
                        "yes"
                    } else {
                        "no"
                    }
                );
                let svc = service_fn(move |r: hyper::Request<hyper::body::Incoming>| {
                    let line = format!(
                        "v={:?} {said} path={} scheme={}",
                        r.version(),
                        r.uri().path(),
                        r.uri().scheme_str().unwrap_or("-")
                    );
                    async move { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(line)))) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    TlsBackend {
        addr,
        task,
        handshakes,
        failed,
    }
}
