//! HTTP/1.1 on the wire, both sides: the server codec that reads a client's request head and
//! writes the response head (`server`), the client codec that writes a request head to an
//! upstream and reads its response head (`client`), and what they share — body framing
//! (`body`: lengths, chunked coding, trailers), header-name tables and values taken from the
//! head's bytes (`header`), hop-by-hop fields (`hop`), response fields passed through as
//! bytes (`raw`) and the fields the proxy adds to a forwarded request (`added`).
//!
//! Why one module under the others: the listener and the upstream side speak the same
//! protocol, and before this module each borrowed the other's helpers (the listener's codec
//! took the framing from `upstream`, the upstream codec took hop-by-hop names and added
//! fields from `forward`), so the proxy's layers ran in a circle. Here the protocol is the
//! bottom layer: it imports nothing of the proxy's above it, so the listener, the forwarding
//! policy and the upstream pools all depend on it and not on each other's insides. The split
//! follows Pingora's `protocols/http/v1/{server,client,common,body,header}.rs`. Pure
//! functions over buffers, no I/O: every rule is tested on bytes.

mod added;
mod body;
pub(crate) mod client;
mod header;
mod hop;
mod raw;
pub(crate) mod server;

pub use added::AddedHeaders;
pub(crate) use added::X_FORWARDED_FOR;
pub(crate) use body::{chunk_header, chunked_end, Decoded, Decoder, Framing};
#[cfg(test)]
pub(crate) use client::{encode_request, parse_response};
pub(crate) use header::NameCache;
pub(crate) use hop::strip_hop_by_hop;
#[cfg(test)]
pub(crate) use hop::{is_hop_by_hop, ALWAYS_REMOVED};
pub(crate) use raw::RawFields;
