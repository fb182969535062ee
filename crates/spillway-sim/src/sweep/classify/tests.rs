use super::super::tests::{cell, figures, sweep};
use super::*;

/// The classes follow their definitions: the oracle (and the service-time ceiling) first,
/// then the reference and the requirement's own slack.
#[test]
fn failing_cells_are_classified_as_stated() {
    let sw = sweep("");
    let run = |ok: u64| figures(10_000, 0, (10_000, ok));
    let unprotected = run(0);
    let class = |dist, spillway: u64, tuned: u64, oracle: u64| {
        let mut spec = cell(4, 2.0, 100.0);
        spec.dist = dist;
        let (p, t, o) = (run(spillway), run(tuned), run(oracle));
        let v = judge(Check::Critical, &spec, &sw, &p, &unprotected).expect("judged");
        let refs = References {
            unprotected: &unprotected,
            tuned: &t,
            oracle_critical: Some(&o),
            oracle_goodput: None,
        };
        classify(Check::Critical, &v, &spec, &sw, refs)
    };
    let c = Dist::Const;
    assert_eq!(class(c, 9_990, 9_000, 10_000), None, "99.9 % passes");
    assert_eq!(class(c, 9_000, 9_990, 10_000), Some(Class::BehindTuned));
    assert_eq!(class(c, 9_000, 9_500, 10_000), Some(Class::BehindTuned));
    // Within R2's 0.1 pp of the tuned baseline, or ahead of it: failing like it.
    assert_eq!(class(c, 9_000, 9_005, 10_000), Some(Class::FailsLikeTuned));
    assert_eq!(class(c, 9_000, 5_000, 10_000), Some(Class::FailsLikeTuned));
    // The oracle misses 99.9 % by far more than chance; the tuned baseline meeting it would
    // show it does not; 11 misses in 10 000 where 10 are allowed is no proof.
    assert_eq!(class(c, 9_000, 9_500, 9_900), Some(Class::Infeasible));
    assert_eq!(class(c, 9_000, 9_990, 9_900), Some(Class::BehindTuned));
    assert_eq!(class(c, 9_000, 9_500, 9_989), Some(Class::BehindTuned));
    // Exponential service with a 5x timeout: e^-5 of the requests are late whatever admits
    // them, however lucky the oracle's run.
    assert_eq!(
        class(Dist::Exp, 9_000, 10_000, 10_000),
        Some(Class::Infeasible)
    );
}

/// R1's reference is the tuned baseline's own harm: a strict priority queue in front of a FIFO
/// backend delays the lowest level too, and where it fails within R1's 0.1 pp of Spillway's
/// figure, or worse, the cell fails like it.
#[test]
fn do_no_harm_is_classified_against_the_tuned_baselines_harm() {
    let sw = sweep("");
    let spec = cell(4, 0.9, 100.0);
    let unprotected = figures(10_000, 9_990, (5_000, 5_000));
    let class = |spillway: u64, tuned: u64| {
        let (p, t) = (
            figures(10_000, spillway, (5_000, 5_000)),
            figures(10_000, tuned, (5_000, 5_000)),
        );
        let v = judge(Check::DoNoHarm, &spec, &sw, &p, &unprotected).expect("judged");
        let refs = References {
            unprotected: &unprotected,
            tuned: &t,
            oracle_critical: None,
            oracle_goodput: None,
        };
        classify(Check::DoNoHarm, &v, &spec, &sw, refs)
    };
    assert_eq!(class(9_980, 9_900), None, "0.1 pp of harm passes");
    assert_eq!(class(9_900, 9_990), Some(Class::BehindTuned));
    assert_eq!(
        class(9_900, 9_950),
        Some(Class::BehindTuned),
        "0.4 pp behind"
    );
    assert_eq!(class(9_900, 9_905), Some(Class::FailsLikeTuned));
    assert_eq!(class(9_900, 9_800), Some(Class::FailsLikeTuned));
}
