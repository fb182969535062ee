//! The client-facing listener: accept with back-pressure, serve HTTP/1.1 and h2c on the same
//! port, bound slow and oversized request heads, shut down gracefully.
//!
//! Why a connection cap that *stops accepting* rather than accepting and closing: open
//! connections cost memory and file descriptors whether or not they carry requests
//! ("connections are load too"); closing them after accept costs a handshake each and invites
//! instant reconnects, while leaving them in the kernel's backlog makes clients wait (or time
//! out) at no cost to the proxy. Slow clients are bounded by hyper's header-read timeout
//! (HTTP/1.1), oversized heads by its read buffer (431) and HTTP/2 header-list limit. With the
//! `tls` feature and `[listen.tls]`, connections are TLS (ALPN h2/http1.1), the handshake
//! bounded by the same header-read timeout.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::metrics::Fault;
use crate::state::ProxyState;
use crate::tls::Acceptor;

/// Serves `listener` (over TLS when `tls` is given) until `shutdown` resolves, then waits up
/// to `drain` for open connections to finish their requests.
pub async fn serve(
    listener: TcpListener,
    state: Arc<ProxyState>,
    tls: Option<Acceptor>,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) {
    let listen = state.config().listen.clone();
    let cap = Arc::new(Semaphore::new(listen.max_connections));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(listen.header_read_timeout_ms))
        .max_buf_size(listen.max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(listen.max_header_bytes).unwrap_or(u32::MAX));
    let builder = Arc::new(builder);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        // Back-pressure: take a connection slot before accepting.
        let slot = match Arc::clone(&cap).try_acquire_owned() {
            Ok(s) => s,
            Err(_) => {
                state.faults.count(Fault::ConnectionCap);
                tokio::select! {
                    s = Arc::clone(&cap).acquire_owned() => match s { Ok(s) => s, Err(_) => break },
                    _ = &mut shutdown => break,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    crate::metrics::log(&format!("accept failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        metrics::gauge!(crate::metrics::CONNECTIONS).increment(1.0);
        let state2 = Arc::clone(&state);
        let svc = service_fn(move |req| {
            let state = Arc::clone(&state2);
            async move {
                Ok::<_, std::convert::Infallible>(
                    crate::forward::handle(state, Some(peer), req).await,
                )
            }
        });
        let watcher = graceful.watcher();
        let (builder, state3, tls) = (Arc::clone(&builder), Arc::clone(&state), tls.clone());
        let handshake = Duration::from_millis(listen.header_read_timeout_ms);
        tokio::spawn(async move {
            let result = match tls {
                None => {
                    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
                    watcher.watch(conn.into_owned()).await
                }
                Some(acceptor) => {
                    #[cfg(feature = "tls")]
                    match tokio::time::timeout(handshake, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let conn =
                                builder.serve_connection_with_upgrades(TokioIo::new(tls), svc);
                            watcher.watch(conn.into_owned()).await
                        }
                        Ok(Err(_)) => {
                            state3.faults.count(Fault::TlsHandshake);
                            Ok(())
                        }
                        Err(_) => {
                            state3.faults.count(Fault::HeaderTimeout);
                            Ok(())
                        }
                    }
                    #[cfg(not(feature = "tls"))]
                    {
                        let _ = (handshake, &watcher);
                        match acceptor {}
                    }
                }
            };
            if let Err(e) = result {
                count_connection_error(&state3, &*e);
            }
            metrics::gauge!(crate::metrics::CONNECTIONS).decrement(1.0);
            drop(slot);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(drain) => {
            crate::metrics::log("shutdown: connections still open after the drain period; closing");
        }
    }
}

fn count_connection_error(state: &ProxyState, e: &(dyn std::error::Error + 'static)) {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_parse_too_large() {
                state.faults.count(Fault::HeadersTooLarge);
            } else if h.is_parse() {
                state.faults.count(Fault::BadRequest);
            } else if h.is_timeout() {
                state.faults.count(Fault::HeaderTimeout);
            }
            return;
        }
        cur = err.source();
    }
}

/// Binds `addr` (helper for the binary and tests).
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
