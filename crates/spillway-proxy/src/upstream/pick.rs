//! The balancing pick: power of two choices among the tasks a request has not tried, on
//! in-flight requests plus a penalty for recent errors (Mitzenmacher, "The Power of Two Choices
//! in Randomized Load Balancing", 2001; the reasons are in the module above).

use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;

use super::{Pool, Task};

impl Pool {
    /// Power of two choices among tasks not ejected and not in `tried`; falls back to ejected
    /// tasks if every other is excluded (better an ejected task than a certain failure).
    ///
    /// Why two draws from all tasks first: a gateway's tasks are seldom tried or ejected, so
    /// the pair usually qualifies, and the pick costs two draws and two scores whatever the
    /// pool's size (listing the eligible tasks first cost two passes over all of them per
    /// request). A pair kept only when both qualify is uniform over the qualifying pairs, as
    /// the draw among the eligible ones it falls back to is.
    pub fn pick(&self, tried: &Tried, now: Instant) -> Option<Arc<Task>> {
        let eligible = |t: &Task, allow_ejected: bool| {
            !tried.has(t.id) && (allow_ejected || !t.is_ejected(now))
        };
        if let Some((x, y)) = two_of(&self.tasks) {
            if eligible(x, false) && eligible(y, false) {
                return Some(Arc::clone(better(x, y, now)));
            }
        }
        for allow_ejected in [false, true] {
            let qualifying: SmallVec<[&Arc<Task>; 8]> = self
                .tasks
                .iter()
                .filter(|t| eligible(t, allow_ejected))
                .collect();
            if let Some((x, y)) = two_of(&qualifying) {
                return Some(Arc::clone(better(x, y, now)));
            }
        }
        None
    }
}

/// Two distinct entries of `items` drawn at random, in their order in `items` (the same one
/// twice when there is only one); `None` when it is empty.
pub(super) fn two_of<T>(items: &[T]) -> Option<(&T, &T)> {
    let n = items.len();
    if n <= 1 {
        return items.first().map(|x| (x, x));
    }
    let a = fastrand::usize(..n);
    let b = fastrand::usize(..n - 1);
    let b = if b >= a { b + 1 } else { b };
    Some((items.get(a.min(b))?, items.get(a.max(b))?))
}

/// The less loaded of two candidates, the first on a tie. One candidate (a sidecar's single
/// task, or one left eligible) is the pick without scoring: its score, a sum over the error
/// window's buckets, is not needed twice (~430 instructions a request, callgrind,
/// proxy-forwarding.md "Fourteenth round").
fn better<'a>(x: &'a Arc<Task>, y: &'a Arc<Task>, now: Instant) -> &'a Arc<Task> {
    if Arc::ptr_eq(x, y) || x.score(now) <= y.score(now) {
        x
    } else {
        y
    }
}

/// The tasks a request has been sent to (each attempt goes to another).
///
/// Why two parts: indexes below 64 (every sidecar's and most gateways' tasks) are bits of one
/// word, and tasks past them go to a list allocated only when one of them is tried: this
/// travels inside every request's future, whose every byte is copied when it moves.
#[derive(Debug, Default, Clone)]
pub struct Tried {
    low: u64,
    /// Boxed for a thin pointer: 8 bytes in every request's future (a `Vec` is 24, a boxed
    /// slice 16).
    #[allow(clippy::box_collection)]
    high: Option<Box<Vec<u64>>>,
}

impl Tried {
    /// Notes that an attempt went to task `id`.
    pub fn add(&mut self, id: u64) {
        if id < 64 {
            self.low |= 1 << id;
        } else if !self.has(id) {
            self.high.get_or_insert_with(Box::default).push(id);
        }
    }

    /// Whether an attempt went to task `id`.
    pub fn has(&self, id: u64) -> bool {
        if id < 64 {
            self.low & (1 << id) != 0
        } else {
            self.high.as_ref().is_some_and(|h| h.contains(&id))
        }
    }
}
