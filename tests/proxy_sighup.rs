//! `spillway proxy --config FILE` as a process, reloaded by SIGHUP: a valid new file takes effect
//! without dropping an open client connection; an invalid one is refused (logged, counted) and
//! the old configuration keeps serving; SIGTERM drains and exits 0.
//!
//! Why a process test: the in-process tests cover `reload_from_file`, but only a real process
//! proves the signal is wired to it. Everything runs on loopback and is bounded in time (the
//! backend stops by itself after 60 s; every wait below has a deadline).
#![cfg(unix)]

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

mod common;

use common::{free_port, get, spawn};

fn get_on(s: &mut TcpStream, path: &str) -> (u16, String) {
    write!(s, "GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").expect("send a request");
    let (status, _, body) = common::read_response(s).expect("a response");
    (status, body)
}

/// Polls `f` every 50 ms until it returns `Some`, or fails naming `what` after 15 s.
fn wait_for<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    common::wait_for(what, Duration::from_secs(15), f)
}

fn status_json(admin: SocketAddr) -> Option<serde_json::Value> {
    let (code, body) = get(admin, "/status")?;
    (code == 200).then(|| serde_json::from_str(&body).expect("/status is JSON"))
}

fn write_config(path: &Path, data: u16, admin: u16, backend: u16, route: &str) {
    std::fs::write(
        path,
        format!(
            "[listen]\naddress = \"127.0.0.1:{data}\"\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
             [upstream]\naddresses = [\"127.0.0.1:{backend}\"]\n\n[[routes]]\nname = \"{route}\"\npath = \"/\"\n"
        ),
    )
    .expect("write the config file");
}

fn route_names(admin: SocketAddr) -> Vec<String> {
    let v = status_json(admin).expect("/status answers");
    v["routes"]
        .as_array()
        .expect("/status has routes")
        .iter()
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn sighup_reloads_valid_refuses_invalid_keeps_connections_and_sigterm_drains() {
    let dir = std::env::temp_dir().join(format!("spillway-sighup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("proxy.toml");
    let (data_port, admin_port, backend_port) = (free_port(), free_port(), free_port());
    let data: SocketAddr = ([127, 0, 0, 1], data_port).into();
    let admin: SocketAddr = ([127, 0, 0, 1], admin_port).into();

    let backend_listen = format!("127.0.0.1:{backend_port}");
    let _backend = spawn(&[
        "backend",
        "--listen",
        &backend_listen,
        "--service-time",
        "1ms",
        "--duration",
        "60s",
    ]);
    write_config(&path, data_port, admin_port, backend_port, "before");
    let mut proxy = spawn(&["proxy", "--config", path.to_str().expect("utf-8 path")]);

    wait_for("the proxy to forward a request", || {
        if let Some(st) = proxy.0.try_wait().expect("wait for the proxy") {
            panic!(
                "the proxy exited ({st}) before forwarding: {}",
                proxy.stderr()
            );
        }
        get(data, "/x").filter(|(code, _)| *code == 200)
    });
    assert_eq!(route_names(admin), ["before"]);

    // A client connection opened before the reload.
    let mut kept = TcpStream::connect(data).expect("connect to the proxy");
    kept.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    assert_eq!(get_on(&mut kept, "/a").0, 200);

    // A valid file: SIGHUP applies it.
    write_config(&path, data_port, admin_port, backend_port, "after");
    proxy.signal("-HUP");
    wait_for("SIGHUP to apply the new routes", || {
        (route_names(admin) == ["after"]).then_some(())
    });
    let s = status_json(admin).expect("/status");
    assert_eq!(s["reloads"], 1, "{s}");
    assert_eq!(s["reload_failures"], 0, "{s}");
    // The connection opened before the reload still serves.
    assert_eq!(get_on(&mut kept, "/b").0, 200);

    // An invalid file: refused, counted, the old configuration kept.
    std::fs::write(&path, "[[routes]]\nname = 5\n").expect("write a broken file");
    proxy.signal("-HUP");
    let s = wait_for("the refused reload to be counted", || {
        status_json(admin).filter(|s| s["reload_failures"] == 1)
    });
    assert_eq!(s["reloads"], 1, "{s}");
    assert_eq!(route_names(admin), ["after"]);
    assert_eq!(get_on(&mut kept, "/c").0, 200);
    assert_eq!(get(data, "/d").map(|r| r.0), Some(200));

    // SIGTERM: stops, exit status 0, and the refusal was logged with the offending key.
    drop(kept);
    proxy.signal("-TERM");
    let status = proxy
        .wait_exit(Duration::from_secs(15))
        .expect("the proxy exits after SIGTERM");
    assert!(status.success(), "proxy exit status {status}");
    let log = proxy.stderr();
    assert!(log.contains("configuration reload refused"), "{log}");
    assert!(log.contains("name"), "the refusal names the key: {log}");
    let _ = std::fs::remove_dir_all(&dir);
}
