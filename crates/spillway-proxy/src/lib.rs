//! (being written)
#![forbid(unsafe_code)]

pub mod admin;
pub mod controls;
