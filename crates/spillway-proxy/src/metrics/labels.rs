//! Bounded label values: at most `admin.max_customer_labels` customers and
//! `admin.max_operation_labels` operations get metric series of their own; every other value is
//! counted under [`OTHER`].
//!
//! The rule (first come, kept for good) and its reasons are `spillway_tower::metrics::labels`'
//! — one implementation for the proxy and the server layer, so both bound alike. The proxy
//! offers its configured customers, the default customer, route names and the unmatched
//! operation first, at start and on every reload.

pub use spillway_tower::metrics::labels::{
    LabelCap, MetricLabels, DEFAULT_MAX_VALUES, MAX_MAX_VALUES, OTHER,
};
