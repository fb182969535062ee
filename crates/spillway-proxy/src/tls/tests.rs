//! Reading certificate files and naming tasks: each kind of bad input refused with the key,
//! the file and why.

use super::client::{Client, Sides};
use super::config::UpstreamTlsConfig;

fn write(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("spillway-tls-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn ca_pem() -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.self_signed(&key).unwrap().pem()
}

fn with_ca(ca_file: String) -> UpstreamTlsConfig {
    UpstreamTlsConfig {
        ca_file: Some(ca_file),
        ..UpstreamTlsConfig::default()
    }
}

#[test]
fn each_task_is_checked_against_its_host_unless_a_server_name_is_set() {
    let tls = with_ca(write("ca-names.pem", &ca_pem()));
    let c = Client::new(
        &tls,
        &[
            "api.internal:443",
            "10.0.0.1:8443",
            "[::1]:443",
            "localhost:1",
        ],
    )
    .unwrap();
    assert_eq!(c.names(), ["api.internal", "10.0.0.1", "::1", "localhost"]);
    let named = UpstreamTlsConfig {
        server_name: Some("svc.example".into()),
        ..tls.clone()
    };
    let c = Client::new(&named, &["10.0.0.1:443", "10.0.0.2:443"]).unwrap();
    assert_eq!(c.names(), ["svc.example", "svc.example"]);
    let e = Client::new(&tls, &["under_score..bad:443"]).unwrap_err();
    assert_eq!(e.0, "upstream.addresses[0]");
    assert!(e.1.contains("upstream.tls.server_name"), "{}", e.1);
}

#[test]
fn bad_files_name_the_key_and_the_file() {
    let e = Sides::load(&with_ca("/nonexistent/ca.pem".into()))
        .err()
        .unwrap();
    assert_eq!(e.0, "upstream.tls.ca_file");
    assert!(e.1.contains("/nonexistent/ca.pem"), "{}", e.1);

    let e = Sides::load(&with_ca(write("key-only.pem", "junk\n")))
        .err()
        .unwrap();
    assert!(e.1.contains("no CERTIFICATE"), "{}", e.1);

    let ca = write("ca-files.pem", &ca_pem());
    let e = Sides::load(&UpstreamTlsConfig {
        client_key_file: Some("/k.pem".into()),
        ..with_ca(ca.clone())
    })
    .err()
    .unwrap();
    assert_eq!(e.0, "upstream.tls.client_cert_file");
    let e = Sides::load(&UpstreamTlsConfig {
        client_cert_file: Some(ca.clone()),
        client_key_file: Some("/nonexistent/k.pem".into()),
        ..with_ca(ca.clone())
    })
    .err()
    .unwrap();
    assert_eq!(e.0, "upstream.tls.client_key_file");
    assert!(e.1.contains("/nonexistent/k.pem"), "{}", e.1);
}
