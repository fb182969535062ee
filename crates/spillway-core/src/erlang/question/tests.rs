use super::*;
use crate::erlang::MAX_SERVERS;

fn question(workers: Workers, arrivals: Arrivals) -> KneeQuestion {
    KneeQuestion {
        service_time_secs: 0.04,
        workers,
        arrivals,
        sheddable_share: 0.3,
        target: None,
    }
}

#[test]
fn capacity_becomes_workers_and_utilisation_becomes_a_rate() {
    // 100 completions/s of 40 ms work is 4 workers (Little's law); 0.9 of it is 90 req/s.
    let a = answer(&question(
        Workers::Capacity(100.0),
        Arrivals::Utilisation(0.9),
    ))
    .unwrap();
    assert_eq!(a.servers, 4);
    assert_eq!(a.servers_from, Field::Capacity);
    assert!((a.capacity_rps - 100.0).abs() < 1e-9);
    assert!((a.plan.input.arrival_rate - 90.0).abs() < 1e-9);
    assert!(a.target_is_default_knee);
    assert_eq!(a.target, WaitTarget::knee(0.04).unwrap());
    assert_eq!(a.knee_utilisation, knee_utilisation(4).unwrap());
}

#[test]
fn the_reference_figures_hold() {
    // 40 ms of work at 90%: 360 ms of mean queueing with one worker, about 4 ms with forty.
    for (c, wait) in [(1, 0.36), (40, 0.004_116)] {
        let a = answer(&question(Workers::Count(c), Arrivals::Utilisation(0.9))).unwrap();
        let got = a.plan.without_shedding.unwrap().mean_wait_secs;
        assert!((got - wait).abs() < 5e-6, "{c}: {got}");
    }
}

#[test]
fn overload_is_an_answer_not_an_error() {
    let a = answer(&question(Workers::Count(4), Arrivals::Rate(150.0))).unwrap();
    assert!(a.plan.without_shedding.is_none());
    assert!(a.plan.shortfall_rate > 0.0);
}

#[test]
fn each_refusal_blames_the_input_at_fault() {
    let field = |q: KneeQuestion| answer(&q).unwrap_err().field;
    let base = question(Workers::Count(4), Arrivals::Utilisation(0.5));
    assert_eq!(
        field(KneeQuestion {
            service_time_secs: 0.0,
            ..base
        }),
        Field::ServiceTime
    );
    assert_eq!(
        field(KneeQuestion {
            workers: Workers::Count(MAX_SERVERS + 1),
            ..base
        }),
        Field::Workers
    );
    assert_eq!(
        field(KneeQuestion {
            workers: Workers::Capacity(-1.0),
            ..base
        }),
        Field::Capacity
    );
    assert_eq!(
        field(KneeQuestion {
            arrivals: Arrivals::Rate(f64::NAN),
            ..base
        }),
        Field::ArrivalRate
    );
    assert_eq!(
        field(KneeQuestion {
            arrivals: Arrivals::Utilisation(-0.1),
            ..base
        }),
        Field::Utilisation
    );
    assert_eq!(
        field(KneeQuestion {
            sheddable_share: 2.0,
            ..base
        }),
        Field::SheddableShare
    );
    assert_eq!(
        field(KneeQuestion {
            target: Some(WaitTarget::Quantile {
                quantile: 1.5,
                wait_secs: 0.01
            }),
            ..base
        }),
        Field::TargetWait
    );
}

#[test]
fn the_family_adds_the_operators_own_curve_in_order() {
    let us = [0.0, 0.5, 0.9];
    let curves = knee_family(&[1, 4, 40], 7, 0.04, &us).unwrap();
    let servers: Vec<u32> = curves.iter().map(|c| c.servers).collect();
    assert_eq!(servers, [1, 4, 7, 40]);
    assert!(curves.iter().all(|c| c.points.len() == us.len()));
    // Already in the family: not drawn twice.
    assert_eq!(knee_family(&[1, 4], 4, 0.04, &us).unwrap().len(), 2);
    // More workers, less queueing at the same utilisation.
    assert!(curves[0].points[2].mean_wait_secs > curves[3].points[2].mean_wait_secs);
}
