//! A private `redis-server` per test: on a free loopback port, no persistence, killed on drop.
//!
//! Why never a shared one: tests run in parallel and on developers' machines, where a Redis on
//! 6379 may hold someone's data. Without the binary a test is skipped with a message — unless
//! `CI` is set, where `.ci/run` installs it and its absence is a failure. Only std: the root
//! package's tests/fleet_redis.rs includes this file too.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub struct RedisServer {
    pub port: u16,
    child: Option<Child>,
    /// `--requirepass`, if any.
    password: Option<String>,
}

/// Whether `redis-server` can be run; `None` (after saying why) when the test should be
/// skipped. Panics under CI when it is missing.
pub fn available() -> Option<()> {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(());
    }
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        panic!(
            "CI is set but redis-server is not installed (.ci/run installs Debian's redis-server)"
        );
    }
    eprintln!(
        "SKIPPED: redis-server is not installed (apt-get install redis-server); CI runs this test"
    );
    None
}

/// Whether a Redis answers on `addr`: `+PONG`, or `-NOAUTH` when it wants a password.
fn pong(addr: SocketAddr) -> bool {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(100)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = [0u8; 64];
    s.write_all(b"PING\r\n").is_ok()
        && s.read(&mut buf)
            .is_ok_and(|n| buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH"))
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

impl RedisServer {
    /// Starts one on a free loopback port and waits until it accepts connections.
    pub fn start() -> RedisServer {
        Self::start_with_password(None)
    }

    /// Starts one that asks clients for `password` (`--requirepass`).
    pub fn start_with_password(password: Option<&str>) -> RedisServer {
        let mut s = RedisServer {
            port: free_port(),
            child: None,
            password: password.map(str::to_string),
        };
        // A port free a moment ago may be taken by then (another test's server or client
        // socket): then the server exits, and another port is tried.
        for _ in 0..5 {
            if s.launch() {
                return s;
            }
            s.port = free_port();
        }
        panic!("redis-server did not start on any of 5 free ports");
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills it (SIGKILL: no goodbye to its clients) and waits for the process to end.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Kills what runs and spawns the server on its port.
    fn spawn(&mut self) {
        self.kill();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string()]).args([
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]);
        if let Some(p) = &self.password {
            cmd.args(["--requirepass", p]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
    }

    /// Starts it again on the same port (empty: nothing was persisted) and waits until it
    /// answers.
    pub fn restart(&mut self) {
        assert!(
            self.launch(),
            "redis-server did not start on port {}",
            self.port
        );
    }

    /// Spawns the server and waits (at most 10 s) until it answers a PING; `false` if it
    /// exited first. An answer, not only a connect: a connect to a port nobody listens on can
    /// succeed by itself (TCP's simultaneous open, when the client's ephemeral port is that
    /// port), and the server then is not there for the test.
    fn launch(&mut self) -> bool {
        self.spawn();
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if self
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
            {
                return false;
            }
            if pong(addr) {
                return true;
            }
            assert!(
                Instant::now() < until,
                "redis-server did not answer on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `INFO commandstats`' `calls` for `command` (lower case, e.g. "evalsha"), over RESP by
    /// hand (inline commands, the reply a bulk string), so that this module needs only std and
    /// the root package's tests can share it.
    pub fn calls(&self, command: &str) -> u64 {
        let info = (|| -> std::io::Result<String> {
            let mut s = TcpStream::connect(SocketAddr::from(([127, 0, 0, 1], self.port)))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            if let Some(p) = &self.password {
                s.write_all(format!("AUTH {p}\r\n").as_bytes())?;
            }
            s.write_all(b"INFO commandstats\r\n")?;
            let mut reply = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = s.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                reply.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&reply);
                // After AUTH's `+OK\r\n`: `$LEN\r\n`, then LEN bytes.
                let text = text.strip_prefix("+OK\r\n").unwrap_or(&text);
                if let Some((len, rest)) = text
                    .strip_prefix('$')
                    .and_then(|t| t.split_once("\r\n"))
                    .and_then(|(l, r)| Some((l.parse::<usize>().ok()?, r)))
                {
                    if rest.len() >= len {
                        return Ok(rest[..len].to_string());
                    }
                }
            }
            Ok(String::from_utf8_lossy(&reply).into_owned())
        })()
        .expect("INFO commandstats");
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
