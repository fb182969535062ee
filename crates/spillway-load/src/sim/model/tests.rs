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
