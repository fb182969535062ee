//! Binding the client-facing port: one listening socket per data-plane thread with
//! `SO_REUSEPORT`, or one socket the threads share where the option is missing.
//!
//! Why per thread: the kernel then spreads new connections across the threads and each
//! thread accepts and serves its own, with no hand-off between threads (the listener's module
//! docs say more).

use std::net::SocketAddr;

use tokio::net::TcpListener;

/// Binds `addr` (helper for the binary and tests).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Listening sockets for the data-plane threads.
#[derive(Debug)]
pub struct Bound {
    /// One socket per thread (`SO_REUSEPORT`), or a single socket the threads share.
    pub sockets: Vec<std::net::TcpListener>,
    /// The bound address (the real port when port 0 was asked for).
    pub addr: SocketAddr,
    /// Why the threads share one socket, when they do.
    pub shared_because: Option<String>,
}

/// Pending connections the kernel queues per socket (tokio's `TcpListener::bind` uses 1024).
const BACKLOG: i32 = 1024;

/// Binds `threads` sockets to `addr` with `SO_REUSEPORT` (non-blocking, ready for
/// `TcpListener::from_std`), or one socket when the option is unavailable or `threads` is 1.
///
/// The address is first bound once *without* `SO_REUSEPORT` and released: `SO_REUSEPORT` lets
/// any process of the same user join a group, so without this check a second proxy started on
/// a port in use would silently take half its connections instead of failing. With it, binding
/// a port something already listens on fails with "address in use" as before, and a later
/// process doing the same check fails against ours.
pub fn bind_per_thread(addr: SocketAddr, threads: usize) -> std::io::Result<Bound> {
    let probe = socket(addr)?;
    probe.bind(&addr.into())?;
    let addr = probe
        .local_addr()?
        .as_socket()
        .ok_or_else(|| std::io::Error::other("the bound address is not an IP socket address"))?;
    if threads <= 1 {
        probe.listen(BACKLOG)?;
        probe.set_nonblocking(true)?;
        return Ok(Bound {
            sockets: vec![probe.into()],
            addr,
            shared_because: None,
        });
    }
    drop(probe);
    match reuseport_group(addr, threads) {
        Ok(sockets) => Ok(Bound {
            sockets,
            addr,
            shared_because: None,
        }),
        Err(why) => {
            let one = socket(addr)?;
            one.bind(&addr.into())?;
            one.listen(BACKLOG)?;
            one.set_nonblocking(true)?;
            Ok(Bound {
                sockets: vec![one.into()],
                addr,
                shared_because: Some(format!("SO_REUSEPORT unavailable ({why})")),
            })
        }
    }
}

/// A TCP socket for `addr`, not yet bound.
fn socket(addr: SocketAddr) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // As tokio's bind: a restart may bind while old connections sit in TIME_WAIT.
    #[cfg(unix)]
    s.set_reuse_address(true)?;
    Ok(s)
}

#[cfg(unix)]
fn reuseport_group(
    addr: SocketAddr,
    threads: usize,
) -> std::io::Result<Vec<std::net::TcpListener>> {
    let mut out = Vec::with_capacity(threads);
    for _ in 0..threads {
        let s = socket(addr)?;
        s.set_reuse_port(true)?;
        s.bind(&addr.into())?;
        s.listen(BACKLOG)?;
        s.set_nonblocking(true)?;
        out.push(s.into());
    }
    Ok(out)
}

#[cfg(not(unix))]
fn reuseport_group(_: SocketAddr, _: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    Err(std::io::Error::other("not a Unix system"))
}
