//! The client's request body on its way upstream: read to its end or, let go of early, read
//! and discarded behind the answer (`unread`); on the proxy's own HTTP/1.1 fast path, filled by
//! the connection's task (`fast`).
//!
//! Why a module of its own, below `upstream`: the upstream connections send these bodies, while
//! the proxy's response bodies (`crate::body`) hold what only the layers above know (the
//! admission permit, the task's slot); kept together, the upstream layer imported the bodies
//! and the bodies the upstream layer. This one imports only the protocol layer (`http1`: the
//! body framing) and the connection's progress it reports to.

pub(crate) mod fast;
mod unread;

pub(crate) use unread::BodyBreak;
pub use unread::UnreadRequestBody;

/// The error a body frame may fail with (the same as `upstream::BoxError`).
type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;
