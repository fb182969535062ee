//! The fields the proxy adds to a forwarded request — its criticality, its customer, the
//! `x-forwarded-for` list — carried beside the request's map and written by whoever puts the
//! request on the wire.
//!
//! Why beside the map: inserting each into the request's `HeaderMap` (the name hashed, the
//! table probed, the entry stored, and all of it dropped again after the request is written)
//! is work for fields the proxy itself wrote and never reads back. The HTTP/1.1 codec
//! writes them after the map's fields; the HTTP/2 and upgrade paths, which hand the request to
//! hyper, put them into the map first ([`AddedHeaders::insert_into`]). A client's own field of the
//! same name is removed from the map when one is added, so ours replaces it as an insert would.

use http::header::{HeaderMap, HeaderName, HeaderValue};
use spillway_core::Criticality;
use spillway_tower::context::RequestContext;
use spillway_tower::wire;

/// `x-forwarded-for` (a static name: a `&str` name would be copied into a new one per request).
pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Fields to add to a forwarded request (see the module docs). Kept small — it lives in every
/// request's future, which is moved whole — so the criticality is its tag, not a field.
#[derive(Debug, Default, Clone)]
pub struct AddedHeaders {
    criticality: Option<Criticality>,
    customer: Option<HeaderValue>,
    forwarded_for: Option<HeaderValue>,
}

impl AddedHeaders {
    /// None (a request the proxy sends on its own behalf, such as a health check).
    pub fn none() -> Self {
        AddedHeaders::default()
    }

    /// The fields for a request with `headers`, in the context `ctx` (`customer`: the
    /// configured default customer's value, made once, when that is the customer), with
    /// `forwarded_for` as its `x-forwarded-for` list (the caller's, made from the peer); the
    /// client's own fields of those names are removed from `headers`.
    pub(crate) fn new(
        headers: &mut HeaderMap,
        ctx: &RequestContext,
        customer: Option<HeaderValue>,
        forwarded_for: Option<HeaderValue>,
    ) -> Self {
        remove(headers, &wire::CRITICALITY);
        // A customer field that already says the same is left where it is (as
        // `RequestContext::write_headers` leaves it).
        let same = || {
            wire::find_only(headers, &wire::CUSTOMER)
                .is_some_and(|v| v.as_bytes() == ctx.customer.as_bytes())
        };
        let customer = if !ctx.customer.is_empty() && !same() {
            customer.or_else(|| HeaderValue::from_str(&ctx.customer).ok())
        } else {
            None
        };
        if customer.is_some() {
            remove(headers, &wire::CUSTOMER);
        }
        if forwarded_for.is_some() {
            remove(headers, &X_FORWARDED_FOR);
        }
        AddedHeaders {
            criticality: Some(ctx.criticality),
            customer,
            forwarded_for,
        }
    }

    fn fields(&self) -> impl Iterator<Item = (HeaderName, HeaderValue)> + '_ {
        let criticality = self
            .criticality
            .map(|c| (wire::CRITICALITY, wire::format_criticality(c)));
        let customer = self.customer.clone().map(|v| (wire::CUSTOMER, v));
        let forwarded_for = self.forwarded_for.clone().map(|v| (X_FORWARDED_FOR, v));
        criticality.into_iter().chain(customer).chain(forwarded_for)
    }

    /// Writes the fields as HTTP/1.1 field lines.
    pub(crate) fn write(&self, buf: &mut Vec<u8>) {
        let mut line = |name: &HeaderName, value: &[u8]| {
            buf.extend_from_slice(name.as_str().as_bytes());
            buf.extend_from_slice(b": ");
            buf.extend_from_slice(value);
            buf.extend_from_slice(b"\r\n");
        };
        if let Some(c) = self.criticality {
            line(&wire::CRITICALITY, c.as_str().as_bytes());
        }
        if let Some(v) = &self.customer {
            line(&wire::CUSTOMER, v.as_bytes());
        }
        if let Some(v) = &self.forwarded_for {
            line(&X_FORWARDED_FOR, v.as_bytes());
        }
    }

    /// Puts the fields into `headers` (for a request hyper writes).
    pub(crate) fn insert_into(&self, headers: &mut HeaderMap) {
        for (name, value) in self.fields() {
            headers.insert(name, value);
        }
    }
}

/// Removes the request's own `name` fields (looked for first: most requests have none, and a
/// lookup by scan costs less than a removal's hashing).
fn remove(headers: &mut HeaderMap, name: &HeaderName) {
    if wire::find(headers, name).is_some() {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn ctx(customer: &str) -> RequestContext {
        RequestContext {
            criticality: Criticality::SheddablePlus,
            deadline: None,
            customer: Arc::from(customer),
            attempt: 1,
        }
    }

    fn written(a: &AddedHeaders) -> String {
        let mut buf = Vec::new();
        a.write(&mut buf);
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn the_proxys_fields_replace_the_clients_own() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-spillway-criticality",
            HeaderValue::from_static("CRITICAL_PLUS"),
        );
        h.append("x-spillway-customer", HeaderValue::from_static("mallory"));
        h.append("x-spillway-customer", HeaderValue::from_static("acme"));
        h.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4"));
        h.insert("accept", HeaderValue::from_static("*/*"));
        // The list as the caller makes it from the client's field and the peer.
        let xff = HeaderValue::from_static("1.2.3.4, 10.0.0.9");
        let a = AddedHeaders::new(&mut h, &ctx("acme"), None, Some(xff));
        assert_eq!(
            written(&a),
            "x-spillway-criticality: SHEDDABLE_PLUS\r\nx-spillway-customer: acme\r\n\
             x-forwarded-for: 1.2.3.4, 10.0.0.9\r\n"
        );
        let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(
            left,
            ["accept"],
            "the client's own fields of those names are gone"
        );
        // The same fields when hyper writes the request.
        let mut m = h.clone();
        a.insert_into(&mut m);
        assert_eq!(m["x-spillway-criticality"], "SHEDDABLE_PLUS");
        assert_eq!(m["x-spillway-customer"], "acme");
        assert_eq!(m["x-forwarded-for"], "1.2.3.4, 10.0.0.9");
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn a_customer_field_that_already_says_the_same_stays_in_the_map() {
        let mut h = HeaderMap::new();
        h.insert("x-spillway-customer", HeaderValue::from_static("acme"));
        let a = AddedHeaders::new(&mut h, &ctx("acme"), None, None);
        assert_eq!(h["x-spillway-customer"], "acme");
        assert_eq!(a.customer, None);
        assert_eq!(written(&a), "x-spillway-criticality: SHEDDABLE_PLUS\r\n");
        // No customer at all: none added, none removed.
        let mut h = HeaderMap::new();
        h.insert("x-spillway-customer", HeaderValue::from_static("other"));
        let a = AddedHeaders::new(&mut h, &ctx(""), None, None);
        assert_eq!(h["x-spillway-customer"], "other");
        assert_eq!(a.customer, None);
        // The configured default's value, made once, is used as given.
        let mut h = HeaderMap::new();
        let made = HeaderValue::from_static("default");
        let a = AddedHeaders::new(&mut h, &ctx("default"), Some(made.clone()), None);
        assert_eq!(
            a.customer.as_ref().map(|v| v.as_bytes().as_ptr()),
            Some(made.as_bytes().as_ptr())
        );
    }

    #[test]
    fn none_adds_nothing() {
        let a = AddedHeaders::none();
        assert_eq!(written(&a), "");
        let mut m = HeaderMap::new();
        a.insert_into(&mut m);
        assert!(m.is_empty());
    }
}
