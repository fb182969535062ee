//! The controller's memory layout: the fast path's fields come first.

use std::mem::offset_of;

use super::{Inner, HOT_BYTES};

/// The fields every admission and release reads end within the first [`HOT_BYTES`] of the
/// `Arc` allocation (16 bytes of counts, then `Inner`): the layout note's promise.
#[test]
fn the_fast_path_fields_share_the_first_cache_lines() {
    const ARC_COUNTS: usize = 16;
    let ends = [
        ("clock", offset_of!(Inner, clock) + 16),
        (
            "limiter",
            offset_of!(Inner, limiter) + std::mem::size_of::<crate::limiter::Limiter>(),
        ),
        ("queued", offset_of!(Inner, queued) + 8),
        ("service", offset_of!(Inner, service) + 8),
        (
            "random",
            offset_of!(Inner, random)
                + std::mem::size_of::<
                    std::sync::OnceLock<std::sync::Arc<dyn crate::random::RandomSource>>,
                >(),
        ),
        ("has_signals", offset_of!(Inner, has_signals) + 1),
        ("shed", offset_of!(Inner, shed) + 32),
        ("quota", offset_of!(Inner, quota) + 32),
        ("counters.admitted", offset_of!(Inner, counters) + 32),
    ];
    for (name, end) in ends {
        assert!(
            ARC_COUNTS + end <= HOT_BYTES,
            "{name} ends at {}",
            ARC_COUNTS + end
        );
    }
}
