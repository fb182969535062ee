//! An upstream response's header fields passed to an HTTP/1.x client as the upstream wrote
//! them, without a `HeaderMap` in between.
//!
//! Why: a forwarded response's fields are, for the proxy, mostly cargo. Putting each into a
//! `HeaderMap` (a name looked up, hashed, a value made and inserted) only for the client side
//! to write it out again, and then dropping the map, is the largest cost of a forwarded
//! response's head, for fields nobody reads. When the client's connection is on the HTTP/1.1
//! fast path, which writes bytes, the fields the proxy does not act on stay where they are in
//! the response head and go out as byte ranges of it (adjacent fields as one range); the map
//! holds only the fields the proxy reads or removes ([`kind`]). The fields the proxy reads for itself as they pass (the
//! cost and ORCA reports, the length, a date) are noted on the way.
//!
//! What falls back to the whole map (a response like any other, as every HTTP/2 client's
//! is): a client not on the fast path; an overload refusal (429, 503), whose fields the retry
//! logic reads and to which a give-up marker may be added; a response without a body (HEAD,
//! 204, 304, a length of zero), whose connection is back on the idle list before its head is
//! written; a `connection` field naming fields to remove; a length beside a transfer coding.

use bytes::Bytes;
use http::header::HeaderValue;
use spillway_tower::wire::name;

use super::header::parsed_value;
use super::hop::is_hop_by_hop_name;

/// What the proxy does with a response header field when it could pass it through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Passed through, not read.
    Raw,
    /// Passed through; the client side needs to know one was sent (it adds one otherwise).
    Date,
    /// Passed through; frames the body.
    Length,
    /// Passed through; the service's cost report (`x-spillway-cost`).
    Cost,
    /// Passed through; the service's ORCA utilisation report (`endpoint-load-metrics`).
    Load,
    /// Passed through; the same report as protobuf (`endpoint-load-metrics-bin`).
    LoadBin,
    /// Into the map: hop-by-hop (removed, or read for the connection's reuse), `trailer` (read
    /// by the client side) or `grpc-status` (read to classify an overload).
    Kept,
}

/// How the proxy treats the field `wire` names (any case). By length first: most names are
/// none of these, and a length rules out all but one or two.
pub(super) fn kind(wire: &[u8]) -> Kind {
    let is = |s: &str| wire.eq_ignore_ascii_case(s.as_bytes());
    match wire.len() {
        4 if is("date") => Kind::Date,
        7 if is("trailer") => Kind::Kept,
        11 if is(name::GRPC_STATUS) => Kind::Kept,
        14 if is("content-length") => Kind::Length,
        15 if is(name::COST) => Kind::Cost,
        21 if is(name::ENDPOINT_LOAD_METRICS) => Kind::Load,
        25 if is(name::ENDPOINT_LOAD_METRICS_BIN) => Kind::LoadBin,
        _ if is_hop_by_hop_name(wire) => Kind::Kept,
        _ => Kind::Raw,
    }
}

/// The passed-through fields of the response on a connection, kept by the connection (so
/// their room is reused) from the head's parse until its body is read.
#[derive(Debug, Default)]
pub(crate) struct RawFields {
    /// This response's fields are here (not in its map).
    active: bool,
    /// The response head the ranges point into.
    head: Bytes,
    /// Byte ranges of `head`, each one or more whole field lines without the last line's end.
    lines: Vec<(u32, u32)>,
    /// The `content-length` among them.
    length: Option<u64>,
    date: bool,
    cost: Option<HeaderValue>,
    load: Option<HeaderValue>,
    load_bin: Option<HeaderValue>,
}

impl RawFields {
    /// Starts on a new head (`head`, frozen).
    pub(super) fn begin(&mut self, head: &Bytes) {
        self.clear();
        self.head = head.clone();
    }

    /// Takes in the field whose name starts at `start` and whose value is `value_start..end`
    /// of the head, of kind `kind` (not [`Kind::Kept`]).
    pub(super) fn add(&mut self, kind: Kind, start: usize, value_start: usize, end: usize) {
        match kind {
            Kind::Date => self.date = true,
            Kind::Cost if self.cost.is_none() => {
                self.cost = Some(parsed_value(&self.head, value_start, end));
            }
            Kind::Load if self.load.is_none() => {
                self.load = Some(parsed_value(&self.head, value_start, end));
            }
            Kind::LoadBin if self.load_bin.is_none() => {
                self.load_bin = Some(parsed_value(&self.head, value_start, end));
            }
            _ => {}
        }
        // A head is at most `MAX_HEAD` (< 4 GiB) long.
        let (start, end) = (start as u32, end as u32);
        if let Some(last) = self.lines.last_mut() {
            // Right after the last range's line, on the next line: one range for both.
            if self.head.get(last.1 as usize..start as usize) == Some(b"\r\n") {
                last.1 = end;
                return;
            }
        }
        self.lines.push((start, end));
    }

    /// The fields are complete: `length` is the response's (parsed from its `content-length`,
    /// which is among them when it is `Some`).
    pub(super) fn finish(&mut self, length: Option<u64>) {
        self.length = length;
        self.active = true;
    }

    /// Forgets the head (its bytes go back to the read buffer once nothing else holds them).
    pub(crate) fn clear(&mut self) {
        self.active = false;
        self.head = Bytes::new();
        self.lines.clear();
        self.length = None;
        self.date = false;
        self.cost = None;
        self.load = None;
        self.load_bin = None;
    }

    /// How many byte ranges the fields are written from.
    #[cfg(test)]
    pub(crate) fn ranges(&self) -> usize {
        self.lines.len()
    }

    /// Whether the current response's fields are here.
    pub(crate) fn is_active(&self) -> bool {
        self.active
    }

    /// Writes the fields, each line ended by CRLF.
    pub(crate) fn write(&self, buf: &mut Vec<u8>) {
        for &(start, end) in &self.lines {
            buf.extend_from_slice(&self.head[start as usize..end as usize]);
            buf.extend_from_slice(b"\r\n");
        }
    }

    /// The `content-length` passed through, if one was.
    pub(crate) fn length(&self) -> Option<u64> {
        self.length
    }

    /// Whether a `date` is among the fields.
    pub(crate) fn has_date(&self) -> bool {
        self.date
    }

    /// The first `x-spillway-cost` value.
    pub(crate) fn cost(&self) -> Option<&HeaderValue> {
        self.cost.as_ref()
    }

    /// The first `endpoint-load-metrics` value.
    pub(crate) fn load_metrics(&self) -> Option<&HeaderValue> {
        self.load.as_ref()
    }

    /// The first `endpoint-load-metrics-bin` value.
    pub(crate) fn load_metrics_bin(&self) -> Option<&HeaderValue> {
        self.load_bin.as_ref()
    }
}
