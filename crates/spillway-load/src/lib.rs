//! Spillway's proof tools: an open-loop load generator, a demo backend with the overload
//! pathology built in, a simulator, and the reports (JSON, self-contained HTML with SVG charts).
//!
//! Why a crate of its own: the claims Spillway makes are curves (goodput vs offered load past the
//! knee, recovery after a surge — SRE book ch. 21; AWS Builders' Library "Using load shedding to
//! avoid overload"), and the same measuring and reporting code must serve `spillway load`,
//! `spillway demo`, `spillway sim` and users' own experiments, in-process or from the CLI.

#![deny(unsafe_code)]
#![deny(missing_docs)]

pub mod backend;
pub mod demo;
pub mod load;
pub mod report;
pub mod sim;
pub mod units;
