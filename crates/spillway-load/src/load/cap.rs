//! The cap on what a run may send ([`LoadConfig::max_rate`]), checked before anything is sent.
//!
//! Why a cap and not only a flag: a load run against another machine is someone else's service
//! at the other end, so `--allow-remote` alone would let a typo in `--rate` (or a naive client's
//! retries multiplying it) flood it. The cap bounds what can reach the wire — the peak offered
//! rate times the attempts each request may make — and the CLI prints it before starting.

use super::{LoadConfig, LoadError};

impl LoadConfig {
    /// The most attempts per second this run can put on the wire (mean): the peak offered rate
    /// times the attempts per request. `None` for a closed loop, whose rate is whatever the
    /// target answers.
    pub fn wire_rate_bound(&self) -> Option<f64> {
        if self.connections.is_some() {
            return None;
        }
        Some(self.shape.peak() * f64::from(self.retry.max_attempts.max(1)))
    }

    /// `max_rate`: required with `allow_remote`, and not below [`Self::wire_rate_bound`].
    pub(super) fn check_cap(&self) -> Result<(), LoadError> {
        let bad = |flag: &'static str, why: String| Err(LoadError::Config { flag, why });
        let Some(cap) = self.max_rate else {
            if self.allow_remote {
                return bad(
                    "--max-rate",
                    "required with --allow-remote: the most attempts/s the target may receive"
                        .into(),
                );
            }
            return Ok(());
        };
        if !(cap.is_finite() && cap > 0.0) {
            return bad("--max-rate", format!("{cap} is not a number > 0"));
        }
        match self.wire_rate_bound() {
            None => bad(
                "--connections",
                "a closed loop sends as fast as the target answers, so --max-rate cannot bound \
                 it; use --rate"
                    .into(),
            ),
            Some(bound) if bound > cap * (1.0 + 1e-9) => bad(
                "--max-rate",
                format!(
                    "the run could send {bound} attempts/s (peak --rate {} × --attempts {}), \
                     above the cap of {cap}/s: lower --rate or --attempts, or raise --max-rate",
                    self.shape.peak(),
                    self.retry.max_attempts
                ),
            ),
            Some(_) => Ok(()),
        }
    }
}
