//! Choosing the task of a request's first attempt from a stream that can be read ahead.
//!
//! Why: an arrival's first act at fleet scale is a cache miss — the task it picks at random
//! (its slot, its admission controller's fast-path lines, the limit state and random source
//! behind them) was last visited ~50 ms and ~10⁴ requests before, so none of it is cached, and
//! a pick drawn from the engine's shared stream cannot be known before it is drawn: the prefetch
//! issued at the pick had ~100 instructions to hide a ~100 ns miss chain. So each client group
//! draws the tasks of its requests' *first* attempts from a stream of its own, and keeps two
//! copies of that stream running [`NEAR`] and [`FAR`] picks ahead of it. Each pick advances the
//! copies by one pick too, and what a copy's pick names is the task that will be picked that
//! many first attempts later: [`FAR`] ahead its slot and its entry in the layer's hint table are
//! prefetched, [`NEAR`] ahead (the hint entry has arrived by then) the controller's lines,
//! [`CLOSE`] ahead (those lines have arrived) what joining its queue would touch, if the
//! controller says the request would have to queue (`enqueue_hints`: 31% of the 10⁴-task
//! fleet's attempts queue, and their enqueue's reads were ~5% of the run).
//!
//! The prediction is exact while the live tasks do not change (random balancing); after a
//! fault it is wrong for at most [`FAR`] picks — a wasted prefetch, nothing else. Results
//! depend only on the streams, never on the copies: same seed, same run.
//! Retries and calls between layers still draw from the engine's stream (their `avoid` rule
//! makes the number of draws depend on the pick itself).

use super::Engine;
#[cfg(test)]
use crate::config::Balance;
#[cfg(test)]
use crate::model::Part;
use crate::model::{Layer, NONE};

/// Picks ahead at which what an enqueue reads is prefetched.
const CLOSE: usize = 1;
/// Picks ahead at which the controller's lines are prefetched.
const NEAR: usize = 2;
/// Picks ahead at which the task's slot and hint entry are prefetched.
const FAR: usize = 4;

/// A client group's stream of first-attempt picks, and its three copies ahead.
pub(super) struct Picks {
    rng: fastrand::Rng,
    close: fastrand::Rng,
    near: fastrand::Rng,
    far: fastrand::Rng,
}

impl Picks {
    /// The stream of group `g` of a run seeded with `seed`, its copies advanced over `layer`.
    pub fn new(seed: u64, g: usize, layer: &Layer) -> Picks {
        let rng = fastrand::Rng::with_seed(stream_seed(seed, g as u64));
        let (mut close, mut near, mut far) = (rng.clone(), rng.clone(), rng.clone());
        for _ in 0..CLOSE {
            layer.predict(&mut close, 0);
        }
        for _ in 0..NEAR {
            layer.predict(&mut near, 0);
        }
        for _ in 0..FAR {
            layer.predict(&mut far, 0);
        }
        Picks {
            rng,
            close,
            near,
            far,
        }
    }
}

/// A seed for group `g`'s stream, apart from the engine's (seeded with `seed` itself) and from
/// every other group's: SplitMix64's finalizer over the pair (Steele, Lea & Flood, "Fast
/// splittable pseudorandom number generators", OOPSLA 2014).
pub(super) fn stream_seed(seed: u64, g: u64) -> u64 {
    let mut z = seed ^ (g.wrapping_add(1)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Engine {
    /// The task of a first attempt by group `g` at layer 0, from the group's stream; prefetches
    /// the tasks its next picks will choose.
    pub(super) fn first_pick(&mut self, g: usize) -> Option<u32> {
        let layer = &mut self.layers[0];
        let picks = &mut self.groups[g].picks;
        let task = layer.pick(&mut picks.rng, NONE);
        let far = layer.predict(&mut picks.far, FAR);
        let near = layer.predict(&mut picks.near, NEAR);
        let close = layer.predict(&mut picks.close, CLOSE);
        if let Some(t) = far {
            self.prefetch_task_slot(0, t);
        }
        if let Some(t) = near {
            self.prefetch_task_state(0, t);
        }
        if let Some(t) = close {
            self.prefetch_enqueue(0, t, self.groups[g].crit);
        }
        task
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;
    use crate::builtin;
    use crate::time::SimClock;

    /// A layer with hot tasks (a draw for the hot share, then one for the task), balanced at
    /// random and round robin: after each pick the copies name exactly the tasks the stream
    /// picks [`CLOSE`], [`NEAR`] and [`FAR`] picks later.
    #[test]
    fn the_copies_name_the_tasks_picked_close_near_and_far_picks_later() {
        let sc = builtin::scenario("local-overload")
            .expect("shipped")
            .expect("valid");
        let origin = Instant::now();
        let clock = Arc::new(SimClock::new(origin));
        let mut rng = fastrand::Rng::with_seed(1);
        for balance in [Balance::Random, Balance::RoundRobin] {
            let mut cfg = sc.layers[0].clone();
            cfg.balance = balance;
            assert!(cfg.hot_tasks > 0 && cfg.hot_share > 0.0);
            let mut layer = Layer::build(&cfg, true, false, &clock, origin, &mut rng, Part::WHOLE)
                .expect("builds");
            let mut picks = Picks::new(8, 0, &layer);
            let (mut close, mut near, mut far) = (Vec::new(), Vec::new(), Vec::new());
            let mut picked = Vec::new();
            for _ in 0..200 {
                // In `first_pick`'s order: the pick, then the copies.
                picked.push(layer.pick(&mut picks.rng, NONE));
                near.push(layer.predict(&mut picks.near, NEAR));
                close.push(layer.predict(&mut picks.close, CLOSE));
                far.push(layer.predict(&mut picks.far, FAR));
            }
            assert_eq!(&close[..200 - CLOSE], &picked[CLOSE..], "{balance:?}");
            assert_eq!(&near[..200 - NEAR], &picked[NEAR..], "{balance:?}");
            assert_eq!(&far[..200 - FAR], &picked[FAR..], "{balance:?}");
            let hot = picked
                .iter()
                .filter(|t| t.is_some_and(|t| t < cfg.hot_tasks))
                .count();
            assert!(hot > 50, "the hot share is drawn ({hot} of 200)");
        }
    }

    #[test]
    fn group_streams_differ_from_each_other_and_from_the_seed() {
        let seeds: Vec<u64> = (0..4).map(|g| stream_seed(8, g)).collect();
        for (i, a) in seeds.iter().enumerate() {
            assert_ne!(*a, 8);
            for b in &seeds[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(stream_seed(8, 1), stream_seed(8, 1));
    }
}
