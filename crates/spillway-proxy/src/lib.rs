//! Spillway as a reverse proxy: the same overload protections for services in any language,
//! as a sidecar in front of one service or a gateway in front of its tasks.
//!
//! Why a proxy: most services that need protecting are not written in Rust, and the
//! protections (criticality-aware admission, per-customer quotas, adaptive throttling, retry
//! budgets — SRE book ch. 21; AWS Builders' Library "Using load shedding to avoid overload")
//! must not need a code change. Every decision is made by `spillway-core`; this crate carries
//! requests to it and to the upstream tasks and back.
//!
//! In-process, with the zero-configuration policy (`spillway proxy --listen … --upstream …`):
//!
//! ```
//! use spillway_proxy::run::{self, Source};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! use tokio::net::{TcpListener, TcpStream};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! # // An upstream task: anything speaking HTTP/1.1 (here a few lines of tokio).
//! # let upstream = TcpListener::bind("127.0.0.1:0").await?;
//! # let upstream_addr = upstream.local_addr()?;
//! # tokio::spawn(async move {
//! #     while let Ok((mut conn, _)) = upstream.accept().await {
//! #         tokio::spawn(async move {
//! #             let mut buf = [0u8; 4096];
//! #             let mut seen = Vec::new();
//! #             while let Ok(n @ 1..) = conn.read(&mut buf).await {
//! #                 seen.extend_from_slice(&buf[..n]);
//! #                 if seen.windows(4).any(|w| w == b"\r\n\r\n") {
//! #                     seen.clear();
//! #                     let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
//! #                     if conn.write_all(ok).await.is_err() { break; }
//! #                 }
//! #             }
//! #         });
//! #     }
//! # });
//! let state = run::load(&Source::Flags {
//!     listen: "127.0.0.1:0".parse()?,
//!     upstreams: vec![upstream_addr.to_string()],
//!     threads: Some(1),
//! })?;
//! let proxy = run::start(state, None).await?; // serves on the current runtime
//!
//! let mut client = TcpStream::connect(proxy.addr).await?;
//! client
//!     .write_all(b"GET / HTTP/1.1\r\nhost: shop\r\nconnection: close\r\n\r\n")
//!     .await?;
//! let mut response = String::new();
//! client.read_to_string(&mut response).await?;
//! assert!(response.starts_with("HTTP/1.1 200"), "{response}");
//! assert!(response.ends_with("hello"));
//!
//! proxy.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! The public modules (linked) are what users and the tests need: [`run`] to start the proxy,
//! [`config`] and [`state`] to build it, [`admin`] for its admin listener, and the types those
//! take; the others (`code`) are internal, `pub(crate)`.
//!
//! | module | what |
//! | --- | --- |
//! | [`config`] | the TOML file: types, defaults, validation with key and line |
//! | [`state`] | the runtime state shared with the admin API: reload, status, switches |
//! | `route` | classification: route, criticality (trusted CIDRs), customer, cost |
//! | `path` | the request path made normal before routing and forwarded so |
//! | `forward` | one request's path: controls → degrade → admit → forward → permit held (layers: listener → forward → body → upstream → request_body → http1, checked by `tests/module_layers.rs`) |
//! | [`upstream`] | the tasks: pools, p2c balancing, throttles, retries, ejection, health checks |
//! | `body` | the response bodies: `ResponseBody` (what the proxy answers with), the upstream's response body holding the permit |
//! | `request_body` | the request bodies, below `upstream`: [`RequestBody`](upstream::RequestBody) (what the proxy sends upstream), the client's unread request body, the fast path's body its connection fills |
//! | [`http1`] | HTTP/1.1 on the wire, both codecs and what they share (framing, header names, hop-by-hop fields); imports nothing of the proxy |
//! | `progress` | a client connection's progress, the token a request carries until its response ends, and the connection's one timer (header, idle, send, body-read, upstream-body timeouts); imports nothing of the proxy |
//! | `degrade` | graceful degradation per route |
//! | `drain` | readiness (`/ready`), the drain delay and timeout after SIGTERM |
//! | [`run`] | the process: one single-threaded runtime per core for the data plane, a control runtime for admin, signals and reloads |
//! | [`listener`] | accept with back-pressure, HTTP/1.1 + h2c, header limits, graceful shutdown, `SO_REUSEPORT` sockets per thread |
//! | `tls` | optional TLS on the listener and to the upstreams, reloaded on SIGHUP (cargo feature `tls`, rustls) |
//! | [`access`] | the access log: sampled, formatted per request, written by a thread of its own |
//! | [`admin`], [`controls`] | the admin listener and incident controls |
//! | [`dashboard`] | the live dashboard and knee calculator the admin listener serves |

// Denied, not forbidden: one function builds header values from `httparse`'s spans unchecked,
// as hyper does (`http1::header::parsed_value`, measured there).
#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod access;
pub mod admin;
pub(crate) mod body;
pub mod config;
pub mod controls;
pub mod dashboard;
pub(crate) mod degrade;
pub(crate) mod drain;
pub(crate) mod forward;
// The fuzz harnesses (fuzz/, tests/fuzz_corpus.rs): not part of the API.
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod hostcpu;
pub mod http1;
pub mod lease;
pub mod listener;
pub mod metrics;
mod open_files;
pub(crate) mod path;
pub(crate) mod progress;
mod read_buffer;
pub(crate) mod request_body;
pub mod respond;
pub(crate) mod route;
pub mod run;
pub mod state;
pub(crate) mod tls;
pub mod upstream;

pub use config::{ConfigError, ProxyConfig};
pub use state::ProxyState;
