//! Serde helper: a `Duration` as float milliseconds (fields suffixed `_ms`).

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1e3)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let ms = f64::deserialize(d)?;
    Duration::try_from_secs_f64(ms / 1e3).map_err(|_| {
        serde::de::Error::custom(format_args!(
            "invalid duration {ms} ms: expected a finite number of milliseconds >= 0"
        ))
    })
}

/// The same for `Option<Duration>` (absent or null = `None`).
pub mod option {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_secs_f64() * 1e3)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            None => Ok(None),
            Some(ms) => {
                super::deserialize(serde::de::value::F64Deserializer::<D::Error>::new(ms)).map(Some)
            }
        }
    }
}
