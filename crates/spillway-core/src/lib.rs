//! Spillway's policy core: every decision about who is refused, when and why.
//!
//! Why it is shaped like this: overload policy has to be tested exhaustively (property tests over
//! every interleaving we can think of), simulated at fleet scale with a virtual clock, and run on
//! the hot path of every request at a cost of nanoseconds. So it is plain synchronous Rust with no
//! async runtime, time is injected ([`clock`]), randomness is injected ([`random`]), and the async
//! layers in `spillway-tower` and the proxy only carry requests to it and back.
//!
//! ```
//! use std::sync::Arc;
//! use spillway_core::controller::{Admission, AdmissionConfig, AdmissionController, AdmissionRequest};
//! use spillway_core::limit::{FixedConfig, LimitConfig};
//! use spillway_core::{Criticality, SystemClock};
//!
//! // Room for one request at a time, and no queue: the second is refused at once.
//! let mut cfg = AdmissionConfig {
//!     limit: LimitConfig::Fixed(FixedConfig { limit: 1 }),
//!     ..AdmissionConfig::default()
//! };
//! cfg.queue.max_len = Some(0);
//! let controller = AdmissionController::new(cfg, Arc::new(SystemClock))?;
//!
//! let first = controller.admit(&AdmissionRequest::new("acme", Criticality::Critical));
//! let Admission::Admitted(permit) = first else { panic!("the first request fits") };
//! let second = controller.admit(&AdmissionRequest::new("acme", Criticality::Sheddable));
//! let Admission::Refused(refusal) = second else { panic!("no room for a second") };
//! println!("refused: {}", refusal.reason.as_str());
//!
//! drop(permit); // the response is complete: the slot is free again
//! let third = controller.admit(&AdmissionRequest::new("acme", Criticality::Sheddable));
//! assert!(matches!(third, Admission::Admitted(_)));
//! # Ok::<(), spillway_core::ConfigError>(())
//! ```
//!
//! The pieces, in the order a request meets them on the server side:
//!
//! | module | what it decides | source |
//! | --- | --- | --- |
//! | [`criticality`] | which work is shed first | SRE book ch. 21, "Criticality" |
//! | [`quota`] | whether this customer is over its share, in cost units | SRE book ch. 21, "Per-customer limits" |
//! | [`signal`], [`shed`] | how loaded the task is; whether to shed this level now | SRE book ch. 21, "Utilization signals" |
//! | [`limit`], [`limiter`] | how many requests may run at once | Netflix concurrency-limits; Envoy adaptive concurrency |
//! | [`queue`] | who waits, in what order, and who is dropped | SRE book ch. 22; CoDel (Nichols & Jacobson 2012) |
//! | [`controller`] | all of the above behind one call | — |
//!
//! and on the client side: [`throttle`] (adaptive throttling) and [`retry`] (the three retry
//! gates). [`erlang`] is the M/M/c arithmetic behind `spillway calc`; [`preset`] is the proxy's
//! zero-config policy by name.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod clock;
pub mod controller;
pub mod criticality;
pub mod erlang;
pub mod error;
#[cfg(feature = "hints")]
pub mod hint;
pub mod limit;
pub mod limiter;
pub mod preset;
pub mod queue;
pub mod quota;
pub mod random;
pub mod retry;
pub mod shed;
pub mod signal;
pub mod throttle;
pub mod window;

pub use clock::{Clock, ManualClock, SystemClock};
pub use criticality::{Criticality, ParseCriticalityError, PerCriticality};
pub use error::ConfigError;
pub use random::{FixedRandom, RandomSource, SeededRandom, ThreadRandom};
