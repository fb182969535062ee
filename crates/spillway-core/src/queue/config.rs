//! The queue's settings: its bounds and discipline, validated so that a unit mistake (an hour
//! of queueing, a typo'd length) is refused at load time rather than discovered under load.

use std::time::Duration;

use super::{CODEL_INTERVAL, CODEL_TARGET, DEFAULT_MAX_WAIT};
use crate::error::ConfigError;

/// The order in which waiting requests of the same class are served, and when they are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(tag = "discipline", rename_all = "snake_case", deny_unknown_fields)
)]
pub enum QueueDiscipline {
    /// First in, first out.
    Fifo,
    /// FIFO until the queue has held more than `depth` entries for `after`, then LIFO until it
    /// drains to `depth` (Facebook's adaptive LIFO, "Fail at Scale", ACM Queue 2015).
    AdaptiveLifo {
        /// Queue length above which the queue counts as building (default 0: non-empty).
        depth: usize,
        /// How long it must have been building before switching to LIFO (default 100 ms).
        #[cfg_attr(
            feature = "serde",
            serde(rename = "after_ms", with = "crate::queue::millis")
        )]
        after: Duration,
    },
    /// FIFO, dropping at dequeue while the sojourn time stays above `target` (CoDel).
    Codel {
        /// Acceptable standing queue delay (default 5 ms).
        #[cfg_attr(
            feature = "serde",
            serde(rename = "target_ms", with = "crate::queue::millis")
        )]
        target: Duration,
        /// Window over which the delay must stay above target before dropping (default 100 ms).
        #[cfg_attr(
            feature = "serde",
            serde(rename = "interval_ms", with = "crate::queue::millis")
        )]
        interval: Duration,
    },
}

impl QueueDiscipline {
    /// Adaptive LIFO with its defaults: LIFO once the queue has been non-empty for 100 ms.
    pub const fn adaptive_lifo() -> Self {
        QueueDiscipline::AdaptiveLifo {
            depth: 0,
            after: CODEL_INTERVAL,
        }
    }

    /// CoDel with the paper's defaults (5 ms / 100 ms).
    pub const fn codel() -> Self {
        QueueDiscipline::Codel {
            target: CODEL_TARGET,
            interval: CODEL_INTERVAL,
        }
    }
}

impl Default for QueueDiscipline {
    /// CoDel: it bounds standing delay without a hand-tuned timeout.
    fn default() -> Self {
        QueueDiscipline::codel()
    }
}

/// Queue bounds and discipline.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct QueueConfig {
    /// Maximum entries; `None` (default) = half the current concurrency limit (SRE book ch. 22:
    /// at most 50% of the worker pool). `Some(0)` disables queueing.
    pub max_len: Option<usize>,
    /// Longest an entry may wait (default 100 ms); one with a deadline gives up earlier if it
    /// could no longer finish by it.
    #[cfg_attr(
        feature = "serde",
        serde(rename = "max_wait_ms", with = "crate::queue::millis")
    )]
    pub max_wait: Duration,
    /// Service order and dropping (default CoDel 5 ms / 100 ms).
    pub discipline: QueueDiscipline,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_len: None,
            max_wait: DEFAULT_MAX_WAIT,
            discipline: QueueDiscipline::default(),
        }
    }
}

/// Upper bound on `max_wait` and discipline durations: a queue wait of an hour is a unit mistake.
const MAX_SETTING: Duration = Duration::from_secs(3600);
/// Upper bound on `max_len`: far above any useful queue, low enough to catch typos.
const MAX_LEN: usize = 1 << 24;

impl QueueConfig {
    /// Checks every setting; the error names the field and what it accepts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(n) = self.max_len {
            if n > MAX_LEN {
                return Err(ConfigError::new(
                    "queue.max_len",
                    n,
                    "an integer in [0, 16777216] (0 disables queueing), or unset for half the limit",
                ));
            }
        }
        check_duration("queue.max_wait", self.max_wait, false)?;
        match self.discipline {
            QueueDiscipline::Fifo => {}
            QueueDiscipline::AdaptiveLifo { depth, after } => {
                if depth > MAX_LEN {
                    return Err(ConfigError::new(
                        "queue.discipline.depth",
                        depth,
                        "an integer in [0, 16777216]",
                    ));
                }
                check_duration("queue.discipline.after", after, true)?;
            }
            QueueDiscipline::Codel { target, interval } => {
                check_duration("queue.discipline.target", target, false)?;
                check_duration("queue.discipline.interval", interval, false)?;
                if target >= interval {
                    return Err(ConfigError::new(
                        "queue.discipline.target",
                        format_args!("{target:?}"),
                        "a duration shorter than queue.discipline.interval",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The entry bound for a concurrency limit of `limit`.
    pub fn capacity(&self, limit: usize) -> usize {
        self.max_len.unwrap_or(limit / 2)
    }
}

fn check_duration(field: &'static str, d: Duration, zero_ok: bool) -> Result<(), ConfigError> {
    if d > MAX_SETTING || (!zero_ok && d.is_zero()) {
        Err(ConfigError::new(
            field,
            format_args!("{d:?}"),
            if zero_ok {
                "a duration in [0, 1 h]"
            } else {
                "a duration in (0, 1 h]"
            },
        ))
    } else {
        Ok(())
    }
}
