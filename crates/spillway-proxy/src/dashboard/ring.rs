//! The last 15 minutes at 1 s resolution, kept as ready-to-send JSON.
//!
//! Why JSON and not the structs: the sampler writes once a second, but every open dashboard
//! reads once a second too, and during an incident several people watch. Serialising each
//! sample once, when it is taken, makes a read a copy of a few short strings under a lock held
//! for microseconds — nothing the sampler or the data path waits on.

use std::collections::VecDeque;
use std::sync::Mutex;

/// Samples kept: 15 minutes at one per second.
pub const CAPACITY: usize = 15 * 60;

/// A bounded ring of `(timestamp ms, JSON object)` pairs, oldest first.
#[derive(Debug)]
pub struct Ring {
    inner: Mutex<VecDeque<(u64, String)>>,
    capacity: usize,
}

impl Default for Ring {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl Ring {
    /// A ring keeping the last `capacity` samples (at least one).
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Ring {
            inner: Mutex::new(VecDeque::with_capacity(capacity)),
            capacity,
        }
    }

    /// Appends a sample taken at `t_ms`, dropping the oldest when full.
    pub fn push(&self, t_ms: u64, json: String) {
        let mut q = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == self.capacity {
            q.pop_front();
        }
        q.push_back((t_ms, json));
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no sample has been taken yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `{"now": <ms>, "interval_ms": 1000, "capacity": N, "samples": [...]}` with the samples
    /// taken strictly after `since_ms` (all of them for 0), oldest first.
    pub fn to_json_since(&self, since_ms: u64, now_ms: u64) -> String {
        let q = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        // Samples are in time order: find the first newer one from the back (a poll usually
        // asks for the last one or two).
        let start = q
            .iter()
            .rposition(|(t, _)| *t <= since_ms)
            .map_or(0, |i| i + 1);
        let size: usize = q.iter().skip(start).map(|(_, s)| s.len() + 1).sum();
        let mut out = String::with_capacity(size + 96);
        out.push_str(&format!(
            "{{\"now\":{now_ms},\"interval_ms\":1000,\"capacity\":{},\"samples\":[",
            self.capacity
        ));
        for (i, (_, s)) in q.iter().skip(start).enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(s);
        }
        out.push_str("]}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_capacity_samples_and_answers_since() {
        let r = Ring::with_capacity(3);
        assert!(r.is_empty());
        for t in 1..=5u64 {
            r.push(t * 1000, format!("{{\"t\":{}}}", t * 1000));
        }
        assert_eq!(r.len(), 3);
        let all: serde_json::Value = serde_json::from_str(&r.to_json_since(0, 9)).unwrap();
        let ts: Vec<u64> = all["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["t"].as_u64().unwrap())
            .collect();
        assert_eq!(ts, [3000, 4000, 5000]);
        assert_eq!(all["now"], 9);
        let newer: serde_json::Value = serde_json::from_str(&r.to_json_since(4000, 9)).unwrap();
        assert_eq!(newer["samples"].as_array().unwrap().len(), 1);
        let none: serde_json::Value = serde_json::from_str(&r.to_json_since(5000, 9)).unwrap();
        assert_eq!(none["samples"].as_array().unwrap().len(), 0);
    }
}
