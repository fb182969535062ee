//! Spillway's proof tools: an open-loop load generator, a demo backend with the overload
//! pathology built in, and the demo. The run reports (JSON, self-contained HTML with SVG
//! charts) and the simulator are `spillway-sim`'s; [`report`] is re-exported here.
//!
//! Why a crate of its own: the claims Spillway makes are curves (goodput vs offered load past the
//! knee, recovery after a surge — SRE book ch. 21; AWS Builders' Library "Using load shedding to
//! avoid overload"), and the same measuring and reporting code must serve `spillway load`,
//! `spillway demo`, `spillway sim` and users' own experiments, in-process or from the CLI.
//!
//! ```
//! use std::time::Duration;
//! use spillway_load::backend::{Backend, BackendConfig};
//! use spillway_load::load::{LoadConfig, LoadGenerator, RateShape};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = tokio::runtime::Runtime::new()?;
//! let report = runtime.block_on(async {
//!     // The demo backend on a free loopback port: 4 workers, 10 ms per request (400/s).
//!     let backend = Backend::start(BackendConfig::default()).await?;
//!     let mut cfg = LoadConfig::new(backend.local_addr());
//!     cfg.shape = RateShape::Constant(50.0); // well under capacity
//!     cfg.duration = Duration::from_secs(1);
//!     let report = LoadGenerator::new(cfg)?.run().await?;
//!     backend.shutdown();
//!     Ok::<_, Box<dyn std::error::Error>>(report)
//! })?;
//! let counts = &report.summary.counts;
//! assert!(counts.offered > 0 && counts.goodput > counts.offered / 2);
//! println!("{} of {} served", counts.goodput, counts.offered);
//! # Ok(())
//! # }
//! ```

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod backend;
pub mod demo;
pub mod load;
pub mod units;

/// The run reports, shared with the simulator (`spillway_sim::report`).
pub use spillway_sim::report;
