use spillway_core::controller::RefusalReason;

use super::Res;

#[test]
fn every_answer_survives_its_word() {
    let mut all = vec![
        Res::Ok,
        Res::Failed { dont_retry: false },
        Res::Failed { dont_retry: true },
        Res::Timeout,
        Res::Conn,
        Res::Throttled,
    ];
    all.extend(RefusalReason::ALL.iter().map(|&r| Res::Refused(r)));
    let mut words: Vec<u32> = all.iter().map(|r| r.to_word()).collect();
    for (r, &w) in all.iter().zip(&words) {
        assert_eq!(Res::from_word(w), *r, "word {w}");
    }
    words.sort_unstable();
    words.dedup();
    assert_eq!(words.len(), all.len(), "one word per answer");
}

/// With every task live a pick reads no list (`all_alive`); with one down it reads the list
/// and never picks that task — and both pick exactly what reading the list would.
#[test]
fn picks_are_the_live_lists_entries_whether_or_not_it_is_read() {
    use std::sync::Arc;
    use std::time::Instant;

    use super::{Layer, Part, NONE};
    use crate::builtin;
    use crate::time::SimClock;

    let sc = builtin::scenario("local-overload")
        .expect("shipped")
        .expect("valid");
    let origin = Instant::now();
    let clock = Arc::new(SimClock::new(origin));
    let mut rng = fastrand::Rng::with_seed(3);
    let mut layer = Layer::build(
        &sc.layers[0],
        true,
        false,
        &clock,
        origin,
        &mut rng,
        Part::WHOLE,
    )
    .expect("builds");
    assert!(layer.hot_tasks > 0 && layer.all_alive);
    let by_list = |layer: &Layer, seed: u64| {
        // The same draws as `choose`, reading the lists.
        let mut r = fastrand::Rng::with_seed(seed);
        let list = if r.f64() < layer.hot_share {
            &layer.alive_hot
        } else {
            &layer.alive
        };
        list[r.usize(..list.len())]
    };
    for seed in 0..200 {
        let picked = layer.pick(&mut fastrand::Rng::with_seed(seed), NONE);
        assert_eq!(picked, Some(by_list(&layer, seed)));
    }
    layer.tasks[1].down = 1;
    layer.rebuild_alive();
    assert!(!layer.all_alive);
    for seed in 0..200 {
        let picked = layer.pick(&mut fastrand::Rng::with_seed(seed), NONE);
        assert_eq!(picked, Some(by_list(&layer, seed)));
        assert_ne!(picked, Some(1));
    }
}
