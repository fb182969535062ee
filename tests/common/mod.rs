//! Helpers shared by the tests that run the real `spillway` binary as processes on loopback:
//! ports, child processes that are killed on drop, a minimal HTTP/1.1 client, the proxy's fd
//! count, and bounded waits. Each test file uses a subset, hence `dead_code` is allowed.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A loopback port that was free a moment ago, and that no other call in this process returned.
///
/// Not the kernel's `bind(:0)`: that hands out ports from the ephemeral range, which outgoing
/// connections (the test's own, the proxy's to its upstream) draw from too, so a port could be
/// taken between this call and the child's bind; and once its listener is dropped the next call
/// may get the same port again. Ports below the ephemeral range (32768 on Linux) are never
/// picked for a connection, and the ones handed out are remembered.
pub fn free_port() -> u16 {
    use std::collections::hash_map::RandomState;
    use std::collections::BTreeSet;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::Mutex;
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    const LOW: u16 = 20_000;
    const SPAN: u64 = 12_000;
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1_000 {
        // RandomState is seeded randomly per instance: a random start per process and try.
        let port = LOW + (RandomState::new().build_hasher().finish() % SPAN) as u16;
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return port;
        }
    }
    panic!(
        "no free loopback port in {LOW}..{} after 1000 tries",
        u64::from(LOW) + SPAN
    )
}

/// `127.0.0.1:port`.
pub fn local(port: u16) -> SocketAddr {
    ([127, 0, 0, 1], port).into()
}

/// A fresh directory under the system temp dir, named after the test and this process.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spillway-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Kills the child on drop so that a failing assertion leaves no process behind.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Sends `sig` (`-HUP`, `-TERM`, ...) with kill(1).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill {sig} {} failed", self.pid());
    }

    /// Waits at most `limit` for the process to exit.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.0.try_wait().expect("wait for the child") {
                return Some(st);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything the child wrote to stderr (piped by [`spawn`]); call after it exited.
    pub fn stderr(&mut self) -> String {
        let mut log = String::new();
        if let Some(mut e) = self.0.stderr.take() {
            let _ = e.read_to_string(&mut log);
        }
        log
    }

    /// Open file descriptors of the process (`/proc/PID/fd`).
    pub fn fd_count(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

/// Starts `spillway ARGS` with stderr piped (read it with [`Proc::stderr`] after exit; a
/// process that logs more than a pipe holds must not be left running unread for long).
pub fn spawn(args: &[&str]) -> Proc {
    spawn_with(args, Stdio::piped())
}

/// Starts `spillway ARGS` with stderr discarded (long-running or chatty processes).
pub fn spawn_quiet(args: &[&str]) -> Proc {
    spawn_with(args, Stdio::null())
}

fn spawn_with(args: &[&str], stderr: Stdio) -> Proc {
    Proc(
        Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("the spillway binary starts"),
    )
}

/// `spillway backend` on `port` with `workers` x constant `service_ms`, stopping by itself after
/// `secs`, plus any `extra` flags.
pub fn backend(port: u16, workers: usize, service_ms: u64, secs: u64, extra: &[&str]) -> Proc {
    let (listen, w, st, d) = (
        format!("127.0.0.1:{port}"),
        workers.to_string(),
        format!("{service_ms}ms"),
        format!("{secs}s"),
    );
    let mut args = vec![
        "backend",
        "--listen",
        &listen,
        "--workers",
        &w,
        "--service-time",
        &st,
        "--dist",
        "constant",
        "--duration",
        &d,
    ];
    args.extend_from_slice(extra);
    spawn_quiet(&args)
}

/// Writes a proxy config: the data listener, the admin, one upstream, then `extra` TOML.
pub fn write_proxy_config(path: &Path, data: u16, admin: u16, upstream: u16, extra: &str) {
    std::fs::write(
        path,
        format!(
            "[listen]\naddress = \"127.0.0.1:{data}\"\n\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n\n\
             [upstream]\naddresses = [\"127.0.0.1:{upstream}\"]\n{extra}"
        ),
    )
    .expect("write the config file");
}

/// Starts `spillway proxy --config PATH` and waits until its data port accepts.
pub fn proxy(path: &Path, data: u16) -> Proc {
    let p = spawn_quiet(&["proxy", "--config", path.to_str().expect("utf-8 path")]);
    wait_for("the proxy to accept", Duration::from_secs(20), || {
        connect(local(data))
    });
    p
}

/// A connection with a 10 s read timeout (a read that waits longer is a hang), or `None`.
pub fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.set_nodelay(true).ok()?;
    Some(s)
}

/// One HTTP/1.1 response: status, lower-case head, body (content-length or chunked).
pub fn read_response(s: &mut TcpStream) -> std::io::Result<(u16, String, String)> {
    let eof = |what: &str| std::io::Error::new(std::io::ErrorKind::UnexpectedEof, what.to_owned());
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if s.read(&mut byte)? == 0 {
            return Err(eof("closed before the end of the response head"));
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let status: u16 = head
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| eof("no status code"))?;
    let body = if let Some(len) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        let mut body = vec![0u8; len];
        s.read_exact(&mut body)?;
        body
    } else if head.contains("transfer-encoding: chunked") {
        let mut body = Vec::new();
        while !body.ends_with(b"0\r\n\r\n") {
            if s.read(&mut byte)? == 0 {
                return Err(eof("closed mid-body"));
            }
            body.push(byte[0]);
        }
        body
    } else {
        Vec::new()
    };
    Ok((status, head, String::from_utf8_lossy(&body).into_owned()))
}

/// `GET path` on a new connection (`connection: close`): (status, body), or `None` when the
/// connection or the response failed.
pub fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n"
    )
    .ok()?;
    let (status, _, body) = read_response(&mut s).ok()?;
    Some((status, body))
}

/// Polls `f` every 50 ms until it returns `Some`, or fails naming `what` after `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (at most 15 s) for the process's fd count to fall to `baseline` or below; returns the
/// last count seen.
pub fn fds_settle(p: &Proc, baseline: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let n = p.fd_count();
        if n <= baseline || Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What one client request saw.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// When it was sent, from the start of the run.
    pub sent: Duration,
    /// When its answer (or failure) came, from the start of the run.
    pub done: Duration,
    /// The status, or the error text (a connect failure, a reset, EOF, a 10 s read timeout).
    pub result: Result<u16, String>,
    /// Whether the response said `connection: close`.
    pub close: bool,
}

/// Client threads, each sending `GET /` on its own keep-alive connection (reconnecting after a
/// failure or a `connection: close`) every `gap`, until `stop_at` after `start`. A read waits at
/// most 10 s, so a hang shows as an error, never as a stuck test.
pub fn run_clients(
    addr: SocketAddr,
    threads: usize,
    gap: Duration,
    start: Instant,
    stop_at: Duration,
) -> Vec<std::thread::JoinHandle<Vec<Outcome>>> {
    (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                let mut out = Vec::new();
                let mut conn: Option<TcpStream> = None;
                while start.elapsed() < stop_at {
                    let sent = start.elapsed();
                    let result = (|| {
                        if conn.is_none() {
                            conn = Some(connect(addr).ok_or("connect failed")?);
                        }
                        let s = conn.as_mut().expect("connected above");
                        write!(s, "GET / HTTP/1.1\r\nhost: test\r\n\r\n")
                            .map_err(|e| format!("write: {e}"))?;
                        read_response(s).map_err(|e| format!("read: {e}"))
                    })();
                    let done = start.elapsed();
                    let outcome = match result {
                        Ok((status, head, _)) => {
                            let close = head.contains("connection: close");
                            if close {
                                conn = None;
                            }
                            Outcome {
                                sent,
                                done,
                                result: Ok(status),
                                close,
                            }
                        }
                        Err(e) => {
                            conn = None;
                            Outcome {
                                sent,
                                done,
                                result: Err(e.to_string()),
                                close: true,
                            }
                        }
                    };
                    out.push(outcome);
                    std::thread::sleep(gap);
                }
                out
            })
        })
        .collect()
}

/// Joins the threads of [`run_clients`]; every outcome, in send order.
pub fn join_clients(handles: Vec<std::thread::JoinHandle<Vec<Outcome>>>) -> Vec<Outcome> {
    let mut all: Vec<Outcome> = handles
        .into_iter()
        .flat_map(|h| h.join().expect("client thread"))
        .collect();
    all.sort_by_key(|o| o.sent);
    all
}

/// Raises this process's soft open-file limit to its hard limit (children started afterwards
/// inherit it, as the `spillway` binary would raise its own) and returns the soft limit now in
/// force, for tests that hold thousands of connections: many machines start processes at 1,024.
#[cfg(target_os = "linux")]
pub fn raise_open_files() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read or write one `rlimit` through a valid pointer.
    unsafe {
        assert_eq!(
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim),
            0,
            "getrlimit(RLIMIT_NOFILE)"
        );
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim = raised;
            }
        }
    }
    lim.rlim_cur
}
