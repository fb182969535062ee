//! `spillway proxy` as a process on SIGTERM with `[shutdown] drain_delay_ms`: `/ready` turns
//! 503 at once while the proxy keeps accepting and serving for the delay; then the listener
//! closes, the requests in progress are answered with `connection: close`, and the process
//! exits 0. Before any traffic `/ready` is 200 because the upstream accepts connections; `/live`
//! is 200 throughout.
//!
//! Everything runs on loopback and is bounded (the backend stops by itself after 60 s; every
//! wait has a deadline). The one ordering the test relies on: the two requests sent after `/ready`
//! turned 503 reach the proxy within the 2 s delay, which holds unless the machine stalls for
//! seconds.
#![cfg(unix)]

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

mod common;

use common::{connect, free_port, get, spawn};

/// One HTTP/1.1 response: (status, lower-case head, body).
fn read_response(s: &mut TcpStream) -> (u16, String, String) {
    common::read_response(s).expect("a response")
}

fn send(s: &mut TcpStream, path: &str) {
    write!(s, "GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").expect("send a request");
}

/// Polls `f` every 50 ms until it returns `Some`, or fails naming `what` after 20 s.
fn wait_for<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    common::wait_for(what, Duration::from_secs(20), f)
}

#[test]
fn sigterm_turns_ready_off_serves_through_the_delay_then_drains_and_exits() {
    let dir = std::env::temp_dir().join(format!("spillway-sigterm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("proxy.toml");
    let (data_port, admin_port, backend_port) = (free_port(), free_port(), free_port());
    let data: SocketAddr = ([127, 0, 0, 1], data_port).into();
    let admin: SocketAddr = ([127, 0, 0, 1], admin_port).into();
    let backend_listen = format!("127.0.0.1:{backend_port}");
    // Every request takes 2.5 s upstream: longer than the 2 s delay, so requests sent during
    // the delay are still in progress when the listener closes.
    let _backend = spawn(&[
        "backend",
        "--listen",
        &backend_listen,
        "--service-time",
        "2500ms",
        "--dist",
        "constant",
        "--workers",
        "16",
        "--duration",
        "60s",
    ]);
    std::fs::write(
        &path,
        format!(
            "[listen]\naddress = \"127.0.0.1:{data_port}\"\n\n[admin]\nlisten = \
             \"127.0.0.1:{admin_port}\"\n\n[upstream]\naddresses = [\"127.0.0.1:{backend_port}\"]\n\n\
             [classify]\nhealth_paths = [\"/healthz\"]\n\n\
             [shutdown]\ndrain_delay_ms = 2000\ndrain_timeout_ms = 10000\n"
        ),
    )
    .expect("write the config file");
    let mut proxy = spawn(&["proxy", "--config", path.to_str().expect("utf-8 path")]);

    // Ready before any traffic: the backend accepts connections.
    let body = wait_for("/ready to answer 200", || {
        get(admin, "/ready").filter(|(s, _)| *s == 200)
    })
    .1;
    assert!(body.contains("accepts connections"), "{body}");
    assert_eq!(get(admin, "/live").map(|r| r.0), Some(200));
    assert_eq!(get(data, "/healthz").map(|r| r.0), Some(200), "forwarded");
    let mut kept = wait_for("the proxy to accept", || connect(data));
    send(&mut kept, "/warm");
    assert_eq!(read_response(&mut kept).0, 200);

    proxy.signal("-TERM");
    let body = wait_for("/ready to answer 503 after SIGTERM", || {
        get(admin, "/ready").filter(|(s, _)| *s == 503)
    })
    .1;
    assert!(body.contains("draining"), "{body}");
    // Within the delay: a load balancer's health check through the data port is told too,
    // without waiting for the upstream.
    let (status, body) = get(data, "/healthz").expect("health check answered");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("shutting down"), "{body}");
    assert_eq!(
        get(admin, "/live").map(|r| r.0),
        Some(200),
        "live while draining"
    );
    // Within the delay: an open connection and a new one are both still served.
    send(&mut kept, "/during-delay-kept");
    let mut fresh = connect(data).expect("the listener still accepts during the delay");
    send(&mut fresh, "/during-delay-new");
    for (name, s) in [("kept", &mut kept), ("new", &mut fresh)] {
        let (status, head, _) = read_response(s);
        assert_eq!(status, 200, "{name}: {head}");
        // The listener closed while the request was in progress: told to go elsewhere.
        assert!(head.contains("connection: close"), "{name}: {head}");
    }

    let status = proxy
        .wait_exit(Duration::from_secs(20))
        .expect("the proxy exits after SIGTERM");
    assert!(status.success(), "proxy exit status {status}");
    assert!(connect(data).is_none(), "nothing listens after exit");
    let log = proxy.stderr();
    assert!(log.contains("drain_delay_ms = 2000"), "{log}");
    assert!(
        log.contains("has no token"),
        "the open admin listener is warned about: {log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
