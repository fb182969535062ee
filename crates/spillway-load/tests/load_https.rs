//! The generator against an HTTPS target on loopback (feature `tls`): a certificate for
//! `localhost` made by the test (rcgen), trusted through `ca_file`; every request counted by
//! the server and by the report. Runs of 1 s; counts are exact, no timing is asserted.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use spillway_load::load::{
    Arrivals, LoadConfig, LoadError, LoadGenerator, RateShape, TrafficClass,
};
use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

/// A CA and a `localhost` certificate it signed, as PEM: (CA, leaf chain, leaf key).
fn certificates() -> (String, String, String) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "spillway load test CA");
    let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    (issuer.pem(), leaf.pem(), key.serialize_pem())
}

/// What the server saw.
#[derive(Default)]
struct Seen {
    /// Requests answered, by path.
    ok: AtomicU64,
    shed: AtomicU64,
    /// TLS handshakes that failed.
    failed_handshakes: AtomicU64,
    /// SNI names, ALPN protocols, Host headers and HTTP versions, one entry per request.
    sni: Mutex<Vec<String>>,
    alpn: Mutex<Vec<String>>,
    host: Mutex<Vec<String>>,
    version: Mutex<Vec<String>>,
}

/// An HTTPS server on loopback: `/shed` answers 503, anything else 200.
async fn https_server(chain: &str, key: &str) -> (SocketAddr, Arc<Seen>) {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain.as_bytes())
        .collect::<Result<_, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let s = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, seen) = (acceptor.clone(), Arc::clone(&s));
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    seen.failed_handshakes.fetch_add(1, Ordering::SeqCst);
                    return;
                };
                let session = tls.get_ref().1;
                let sni = session.server_name().unwrap_or("-").to_string();
                let alpn = session
                    .alpn_protocol()
                    .map_or("-".into(), |p| String::from_utf8_lossy(p).into_owned());
                let svc = hyper::service::service_fn(move |r: hyper::Request<_>| {
                    let seen = Arc::clone(&seen);
                    seen.sni.lock().unwrap().push(sni.clone());
                    seen.alpn.lock().unwrap().push(alpn.clone());
                    let host = r
                        .headers()
                        .get(http::header::HOST)
                        .and_then(|h| h.to_str().ok())
                        .or(r.uri().authority().map(|a| a.as_str()))
                        .unwrap_or("-")
                        .to_string();
                    seen.host.lock().unwrap().push(host);
                    seen.version
                        .lock()
                        .unwrap()
                        .push(format!("{:?}", r.version()));
                    let status = if r.uri().path() == "/shed" {
                        seen.shed.fetch_add(1, Ordering::SeqCst);
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        seen.ok.fetch_add(1, Ordering::SeqCst);
                        StatusCode::OK
                    };
                    async move {
                        let mut resp = Response::new(Full::new(Bytes::from_static(b"ok")));
                        *resp.status_mut() = status;
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    (addr, seen)
}

struct Dir(std::path::PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("spillway-load-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A 1 s run of 40/s, evenly spaced, one attempt each, 3 in 4 requests to `/` and 1 in 4 to
/// `/shed`, to `https://localhost:PORT` (connecting to `addr`) trusting `ca_file`.
fn config(addr: SocketAddr, ca_file: &std::path::Path) -> LoadConfig {
    let mut cfg = LoadConfig::new(addr);
    cfg.authority = Some(format!("localhost:{}", addr.port()));
    cfg.https = true;
    cfg.ca_file = Some(ca_file.to_path_buf());
    cfg.shape = RateShape::Constant(40.0);
    cfg.arrivals = Arrivals::Uniform;
    cfg.duration = Duration::from_secs(1);
    cfg.timeout = Duration::from_secs(2);
    cfg.retry.max_attempts = 1;
    cfg.mix = spillway_load::load::Mix::new(vec![
        TrafficClass::parse("criticality=CRITICAL,route=/,weight=3").unwrap(),
        TrafficClass::parse("criticality=SHEDDABLE,route=/shed,weight=1").unwrap(),
    ]);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_every_request_to_an_https_target_on_loopback() {
    let (ca, chain, key) = certificates();
    let dir = Dir::new("https");
    let ca_file = dir.0.join("ca.pem");
    std::fs::write(&ca_file, ca).unwrap();
    let (addr, seen) = https_server(&chain, &key).await;

    for http2 in [false, true] {
        let before = (
            seen.ok.load(Ordering::SeqCst),
            seen.shed.load(Ordering::SeqCst),
        );
        let mut cfg = config(addr, &ca_file);
        cfg.http2 = http2;
        // Loopback: no --allow-remote, no cap needed.
        assert!(!cfg.allow_remote && cfg.max_rate.is_none());
        assert_eq!(
            cfg.target_url(),
            format!("https://localhost:{}", addr.port())
        );
        let report = LoadGenerator::new(cfg).unwrap().run().await.unwrap();
        let c = &report.summary.counts;
        let ok = seen.ok.load(Ordering::SeqCst) - before.0;
        let shed = seen.shed.load(Ordering::SeqCst) - before.1;
        // 40/s for 1 s (the 40th arrival falls on the end of the window, up to rounding).
        assert!((39..=40).contains(&c.offered), "http2={http2}: {c:?}");
        assert!(c.is_balanced(), "{c:?}");
        // Every request reached the server over TLS and was answered: 200 is goodput, 503 a
        // refusal, nothing timed out or failed.
        assert_eq!(c.sent, c.offered, "{c:?}");
        assert_eq!(c.goodput, ok, "http2={http2}: {c:?}");
        assert_eq!(c.rejected, shed, "http2={http2}: {c:?}");
        assert_eq!(ok + shed, c.offered, "{c:?}");
        assert_eq!((c.timed_out, c.errors), (0, 0), "{c:?}");
        assert!(ok > 0 && shed > 0, "both classes were sent: {ok} / {shed}");
        assert_eq!(
            report.meta["url"],
            format!("https://localhost:{}", addr.port())
        );
    }
    assert_eq!(seen.failed_handshakes.load(Ordering::SeqCst), 0);
    // The name the run was given, not the address it connects to, went out by SNI and in the
    // Host header (HTTP/1.1) or :authority (h2); ALPN agreed the protocol asked for.
    let n = seen.sni.lock().unwrap().len();
    assert!(seen.sni.lock().unwrap().iter().all(|s| s == "localhost"));
    let authority = format!("localhost:{}", addr.port());
    assert!(
        seen.host.lock().unwrap().iter().all(|h| *h == authority),
        "{:?}",
        seen.host.lock().unwrap()
    );
    let versions = seen.version.lock().unwrap().clone();
    let alpn = seen.alpn.lock().unwrap().clone();
    let h1 = versions.iter().filter(|v| *v == "HTTP/1.1").count();
    let h2 = versions.iter().filter(|v| *v == "HTTP/2.0").count();
    assert_eq!(h1 + h2, n, "{versions:?}");
    assert!(h1 >= 39 && h2 >= 39, "{h1} HTTP/1.1, {h2} h2");
    for (v, a) in versions.iter().zip(&alpn) {
        let want = if v == "HTTP/2.0" { "h2" } else { "http/1.1" };
        // HTTP/1.1 is offered without ALPN (the server then assumes it).
        assert!(
            a == want || (a == "-" && want == "http/1.1"),
            "{v} over {a}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_the_ca_did_not_sign_fails_every_request() {
    let (_, chain, key) = certificates();
    let (other_ca, _, _) = certificates();
    let dir = Dir::new("https-wrong-ca");
    let ca_file = dir.0.join("other-ca.pem");
    std::fs::write(&ca_file, other_ca).unwrap();
    let (addr, seen) = https_server(&chain, &key).await;
    let mut cfg = config(addr, &ca_file);
    cfg.shape = RateShape::Constant(10.0);
    let report = LoadGenerator::new(cfg).unwrap().run().await.unwrap();
    let c = &report.summary.counts;
    assert!((9..=10).contains(&c.offered), "{c:?}");
    // Nothing was answered: the handshake failed for every attempt, and no request reached
    // the server.
    assert_eq!(c.errors, c.offered, "{c:?}");
    assert_eq!(c.goodput + c.rejected, 0, "{c:?}");
    assert_eq!(
        seen.ok.load(Ordering::SeqCst) + seen.shed.load(Ordering::SeqCst),
        0
    );
    assert!(seen.failed_handshakes.load(Ordering::SeqCst) >= 1);
    // The report says why, down to the certificate check.
    let why = report.meta["first_error"].as_str().unwrap_or_default();
    assert!(why.contains("certificate"), "{why:?}");
}

#[test]
fn a_ca_file_that_holds_no_certificate_is_refused_before_the_run() {
    let dir = Dir::new("https-bad-ca");
    let empty = dir.0.join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
    for ca in [empty, dir.0.join("missing.pem")] {
        match LoadGenerator::new(config(addr, &ca)) {
            Err(LoadError::Tls(why)) => assert!(why.contains("--ca-file"), "{why}"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("{} accepted", ca.display()),
        }
    }
    // A remote HTTPS target still needs --allow-remote (and a cap).
    let mut cfg = config("192.0.2.7:443".parse().unwrap(), &dir.0);
    cfg.ca_file = None;
    match cfg.validate() {
        Err(LoadError::Config { flag, why }) => {
            assert_eq!(flag, "--target");
            assert!(why.contains("--allow-remote"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}
