//! Cost units as whole nanoseconds of refill, and the `_ms` serde helper of the quota settings.

/// A cost as a finite non-negative number: NaN and negatives are 0.
pub(super) fn sanitize(cost: f64) -> f64 {
    if cost > 0.0 {
        cost
    } else {
        0.0
    }
}

/// `cost` cost units as nanoseconds of refill, rounded up (a charge never rounds to free),
/// saturating at `u64::MAX`.
pub(super) fn to_ns(cost: f64, ns_per_unit: f64) -> u64 {
    let ns = cost * ns_per_unit;
    if ns >= u64::MAX as f64 {
        return u64::MAX;
    }
    if ns > 0.0 {
        // Rounded up without `f64::ceil`, a libm call on baseline x86-64 (no SSE4.1) made three
        // times a charge: truncation is exact, and a fraction (only possible below 2^53) adds 1.
        // Below 2^63 through i64, whose conversions are single instructions there (u64's are
        // branchy sequences).
        if ns < 9_223_372_036_854_775_808.0 {
            let whole = ns as i64;
            // `whole` is in 0..2^63: the cast to u64 is exact.
            whole as u64 + u64::from((whole as f64) < ns)
        } else {
            ns as u64 // a whole number already
        }
    } else {
        0 // also NaN
    }
}

/// Serde helper: a `Duration` as float milliseconds (the crate's convention for `_ms` fields).
#[cfg(feature = "serde")]
pub(super) mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1e3)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let ms = f64::deserialize(d)?;
        Duration::try_from_secs_f64(ms / 1e3).map_err(|_| {
            serde::de::Error::custom(format!(
                "invalid duration {ms} ms: expected a finite number of milliseconds >= 0"
            ))
        })
    }
}
