//! The last 15 minutes at 1 s resolution, kept as ready-to-send JSON.
//!
//! Why JSON and not the structs: the sampler writes once a second, but every open dashboard
//! reads once a second too, and during an incident several people watch. Serialising each
//! sample once, when it is taken, makes a read a copy of a few short strings under a lock held
//! for microseconds — nothing the sampler or the data path waits on.

use std::sync::Mutex;

/// Samples kept: 15 minutes at one per second.
pub const CAPACITY: usize = 15 * 60;
/// Bytes reserved for each sample when the ring is made: a sample of the soak's proxy is about
/// 830 bytes; one with more routes or signals grows its slot once, when it is first written.
pub const SLOT_BYTES: usize = 1024;

/// A bounded ring of `(timestamp ms, JSON object)` pairs, oldest first.
///
/// Why every slot is allocated up front and reused: the history would otherwise grow by a
/// sample's size every second for its first 15 minutes (0.75 MB, about 1.2 kB/s of the proxy's
/// RSS in the 10-minute soak, docs/soak.md), which reads as a slow leak; allocated at start, the
/// proxy's memory is flat from its first minute.
#[derive(Debug)]
pub struct Ring {
    inner: Mutex<Slots>,
    capacity: usize,
}

/// The slots, written in turn: `len` samples starting at `start`, wrapping around.
#[derive(Debug)]
struct Slots {
    slots: Vec<(u64, String)>,
    start: usize,
    len: usize,
}

impl Slots {
    /// The `i`-th sample held, oldest first (`i < len`).
    fn get(&self, i: usize) -> &(u64, String) {
        &self.slots[(self.start + i) % self.slots.len()]
    }

    /// The samples held from the `from`-th, oldest first.
    fn iter_from(&self, from: usize) -> impl Iterator<Item = &(u64, String)> + '_ {
        (from..self.len).map(|i| self.get(i))
    }
}

impl Default for Ring {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl Ring {
    /// A ring keeping the last `capacity` samples (at least one), each slot's memory
    /// ([`SLOT_BYTES`]) allocated now.
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let slots = (0..capacity)
            .map(|_| (0, String::with_capacity(SLOT_BYTES)))
            .collect();
        Ring {
            inner: Mutex::new(Slots {
                slots,
                start: 0,
                len: 0,
            }),
            capacity,
        }
    }

    /// Appends a sample taken at `t_ms`, overwriting the oldest when full.
    pub fn push(&self, t_ms: u64, json: &str) {
        let mut q = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let at = if q.len == self.capacity {
            let at = q.start;
            q.start = (q.start + 1) % self.capacity;
            at
        } else {
            q.len += 1;
            (q.start + q.len - 1) % self.capacity
        };
        let slot = &mut q.slots[at];
        slot.0 = t_ms;
        slot.1.clear();
        slot.1.push_str(json);
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).len
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
        let start = (0..q.len)
            .rev()
            .find(|&i| q.get(i).0 <= since_ms)
            .map_or(0, |i| i + 1);
        let size: usize = q.iter_from(start).map(|(_, s)| s.len() + 1).sum();
        let mut out = String::with_capacity(size + 96);
        out.push_str(&format!(
            "{{\"now\":{now_ms},\"interval_ms\":1000,\"capacity\":{},\"samples\":[",
            self.capacity
        ));
        for (i, (_, s)) in q.iter_from(start).enumerate() {
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
            r.push(t * 1000, &format!("{{\"t\":{}}}", t * 1000));
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

    #[test]
    fn overwrites_slots_in_place_without_growing() {
        let r = Ring::with_capacity(4);
        let sample = "x".repeat(SLOT_BYTES / 2);
        for t in 1..=4u64 {
            r.push(t, &sample);
        }
        let before: Vec<*const u8> = {
            let q = r.inner.lock().unwrap();
            q.slots.iter().map(|(_, s)| s.as_ptr()).collect()
        };
        for t in 5..=11u64 {
            r.push(t, &sample);
        }
        let q = r.inner.lock().unwrap();
        let after: Vec<*const u8> = q.slots.iter().map(|(_, s)| s.as_ptr()).collect();
        assert_eq!(before, after, "every slot kept its allocation");
        assert!(q.slots.iter().all(|(_, s)| s.capacity() == SLOT_BYTES));
        drop(q);
        let all: serde_json::Value =
            serde_json::from_str(&r.to_json_since(0, 0).replace(&sample, "0")).unwrap();
        assert_eq!(all["samples"].as_array().unwrap().len(), 4);
        let ts: Vec<u64> = (0..4).map(|i| r.inner.lock().unwrap().get(i).0).collect();
        assert_eq!(ts, [8, 9, 10, 11]);
    }
}
