//! `spillway proxy --config FILE` as a process, reloaded by SIGHUP: a valid new file takes effect
//! without dropping an open client connection; an invalid one is refused (logged, counted) and
//! the old configuration keeps serving; SIGTERM drains and exits 0.
//!
//! Why a process test: the in-process tests cover `reload_from_file`, but only a real process
//! proves the signal is wired to it. Everything runs on loopback and is bounded in time (the
//! backend stops by itself after 60 s; every wait below has a deadline).
#![cfg(unix)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A loopback port that was free a moment ago.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local address").port()
}

/// Kills the child on drop so that a failing assertion leaves no process behind.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(args: &[&str]) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the spillway binary starts"),
    )
}

fn signal(p: &Proc, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &p.0.id().to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill {sig} failed");
}

/// Reads one HTTP/1.1 response (Content-Length or chunked body) from a keep-alive stream.
fn read_response(s: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).expect("read the response head");
        assert_eq!(
            n,
            1,
            "connection closed mid-head: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let status: u16 = head[9..12].parse().expect("status code");
    let body = if let Some(len) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse::<usize>().expect("content-length"))
    {
        let mut body = vec![0u8; len];
        s.read_exact(&mut body).expect("read the body");
        body
    } else {
        assert!(head.contains("transfer-encoding: chunked"), "{head}");
        let mut body = Vec::new();
        while !body.ends_with(b"0\r\n\r\n") {
            let n = s.read(&mut byte).expect("read a chunk");
            assert_eq!(n, 1, "connection closed mid-body");
            body.push(byte[0]);
        }
        body
    };
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn get_on(s: &mut TcpStream, path: &str) -> (u16, String) {
    write!(s, "GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").expect("send a request");
    read_response(s)
}

fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    Some(read_response(&mut s))
}

/// Polls `f` every 50 ms until it returns `Some`, or fails naming `what` after 15 s.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
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
    signal(&proxy, "-HUP");
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
    signal(&proxy, "-HUP");
    let s = wait_for("the refused reload to be counted", || {
        status_json(admin).filter(|s| s["reload_failures"] == 1)
    });
    assert_eq!(s["reloads"], 1, "{s}");
    assert_eq!(route_names(admin), ["after"]);
    assert_eq!(get_on(&mut kept, "/c").0, 200);
    assert_eq!(get(data, "/d").map(|r| r.0), Some(200));

    // SIGTERM: stops, exit status 0, and the refusal was logged with the offending key.
    drop(kept);
    signal(&proxy, "-TERM");
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = proxy.0.try_wait().expect("wait for the proxy") {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the proxy did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "proxy exit status {status}");
    let mut log = String::new();
    proxy
        .0
        .stderr
        .take()
        .expect("stderr piped")
        .read_to_string(&mut log)
        .expect("read the proxy's log");
    assert!(log.contains("configuration reload refused"), "{log}");
    assert!(log.contains("name"), "the refusal names the key: {log}");
    let _ = std::fs::remove_dir_all(&dir);
}
