use spillway_core::erlang::MmcQueue;

use super::config::{ArrivalKind, BackendKind, Dist};
use super::*;

const QUICK: &str = include_str!("../../../../examples/sim/robustness-quick.toml");
const FULL: &str = include_str!("../../../../examples/sim/robustness.toml");
const SMALL: &str = include_str!("../../../../examples/sim/robustness-small.toml");

pub(super) fn sweep(extra: &str) -> SweepConfig {
    SweepConfig::from_toml(
        &format!(
            "name = \"t\"\nseed = 7\n{extra}\n[[matrix]]\nname = \"m\"\nworkers = [4]\n\
             mean_ms = [10]\ndistribution = [\"exp\"]\ntimeout_x = [5]\noffered = [2]\n\
             critical_share = [0.6]\narrivals = [\"poisson\"]\n"
        ),
        "t.toml",
    )
    .expect("valid sweep")
}

pub(super) fn cell(workers: u32, offered: f64, max_requests: f64) -> CellSpec {
    CellSpec {
        workers,
        mean_ms: 10.0,
        dist: Dist::Exp,
        timeout_x: 5.0,
        offered,
        critical_share: 0.6,
        arrivals: ArrivalKind::Poisson,
        backend: BackendKind::Plain,
        max_requests,
        min_duration_s: 0.01,
        max_duration_s: 1e4,
    }
}

/// The unprotected backend with Poisson arrivals and exponential service is M/M/c (work for
/// callers who left is still done, so nothing leaves the queue early): its share of waiting
/// requests, mean wait and success within the timeout must be the core's Erlang C figures.
#[test]
fn unprotected_mmc_cells_match_erlang_c() {
    let sw = sweep("");
    for (c, rho) in [(1, 0.5), (4, 0.8), (20, 0.85)] {
        let spec = cell(c, rho, 60_000.0);
        let f = run_cell(&spec, &sw, false).expect("cell runs");
        let q = MmcQueue::new(c, spec.mean_ms / 1e3, rho * spec.capacity()).expect("stable");
        let waited = f.backend_waited as f64 / f.backend_started as f64;
        assert!(
            (waited - q.prob_wait()).abs() < 0.02,
            "c={c} rho={rho}: waited {waited}, Erlang C {}",
            q.prob_wait()
        );
        let wq = q.mean_wait_secs() * 1e3;
        assert!(
            (f.backend_wait_mean_ms - wq).abs() < 0.12 * wq + 0.05,
            "c={c} rho={rho}: mean wait {} ms, Erlang C {wq} ms",
            f.backend_wait_mean_ms
        );
        // P(W + S > T): no wait (1 − C) then Exp(μ); or Exp(θ) + Exp(μ), θ = cμ − λ.
        let (mu, t) = (1e3 / spec.mean_ms, spec.timeout_ms() / 1e3);
        let theta = f64::from(c) * mu - rho * spec.capacity();
        let pc = q.prob_wait();
        let late = (1.0 - pc) * (-mu * t).exp()
            + pc * (theta * (-mu * t).exp() - mu * (-theta * t).exp()) / (theta - mu);
        assert!(
            (f.success() - (1.0 - late)).abs() < 0.012,
            "c={c} rho={rho}: success {}, M/M/c {}",
            f.success(),
            1.0 - late
        );
        assert_eq!(f.refused, 0, "nothing refuses without the proxy");
    }
}

#[test]
fn cells_are_deterministic_under_a_seed() {
    let sw = sweep("");
    let spec = cell(4, 3.0, 3000.0);
    let a = serde_json::to_string(&run_one(&spec, &sw).expect("runs")).expect("json");
    let b = serde_json::to_string(&run_one(&spec, &sw).expect("runs")).expect("json");
    assert_eq!(a, b);
    let mut sw8 = sw.clone();
    sw8.seed = 8;
    let c = serde_json::to_string(&run_one(&spec, &sw8).expect("runs")).expect("json");
    assert_ne!(a, c, "another seed draws other arrivals");
    // Protected and unprotected runs see the same open-loop arrivals.
    let r = run_one(&spec, &sw).expect("runs");
    assert_eq!(r.protected.offered, r.unprotected.offered);
    assert_eq!(r.protected.critical_offered, r.unprotected.critical_offered);
}

/// Every CRITICAL request ends served, refused (by some reason) or timed out, and those
/// counts are part of all requests' counts: R2's report says where CRITICAL was lost.
#[test]
fn critical_requests_are_accounted_for() {
    let sw = sweep("");
    let r = run_one(&cell(4, 3.0, 3000.0), &sw).expect("runs");
    for f in [&r.protected, &r.unprotected] {
        let refused: u64 = f.critical_refused_by_reason.values().sum();
        assert_eq!(
            f.critical_ok + refused + f.critical_timed_out,
            f.critical_offered,
            "{f:?}"
        );
        assert!(f.critical_timed_out <= f.timed_out);
        for (reason, n) in &f.critical_refused_by_reason {
            assert!(*n <= f.refused_by_reason[reason], "{reason}");
        }
    }
    // At 3x with a 5x timeout the protected run refuses some CRITICAL work or lets it time
    // out, the unprotected run refuses nothing: both counts are exercised.
    assert!(r.unprotected.critical_refused_by_reason.is_empty());
    assert!(r.unprotected.critical_timed_out > 0);
}

#[test]
fn the_report_names_the_worst_cell_of_each_requirement() {
    let sw = SweepConfig::from_toml(
        "name = \"w\"\nmax_requests = 1500\nmin_duration_s = 0.05\n[[matrix]]\nname = \"m\"\n\
         workers = [2, 8]\nmean_ms = [5]\ndistribution = [\"exp\", \"const\"]\n\
         timeout_x = [5]\noffered = [0.5, 2, 8]\ncritical_share = [0.5]\n\
         arrivals = [\"poisson\", \"closed:16\"]\n",
        "w.toml",
    )
    .expect("valid");
    let report = run_sweep(&sw, 2, &|_, _| {}).expect("runs");
    // 2 workers × 2 distributions × (3 offered + 1 closed loop).
    assert_eq!(report.cells.len(), 16);
    let text = summary_text(&report);
    for (k, s) in report.checks.iter().enumerate() {
        let verdicts: Vec<_> = report.cells.iter().filter_map(|c| c.verdicts[k]).collect();
        assert_eq!(s.applicable, verdicts.len(), "{}", s.id);
        assert_eq!(
            s.failing,
            verdicts.iter().filter(|v| !v.pass).count(),
            "{}",
            s.id
        );
        let (i, label, figures) = s.worst.as_ref().expect("every check applies somewhere");
        let worst = report.cells[*i].verdicts[k].expect("the worst cell is judged");
        assert!(
            verdicts.iter().all(|v| !judge::worse(s.check, v, &worst)),
            "{}: a cell is worse than the one named",
            s.id
        );
        assert_eq!(label, &report.cells[*i].label);
        assert!(text.contains(label.as_str()) && text.contains(figures.as_str()));
        assert!(text.contains(&format!("{} of {} cells fail", s.failing, s.applicable)));
    }
    assert_classified(&report, &sw);
}

/// Every failing verdict has a class, by the rule the report states, and the counts and the
/// list of cells furthest behind tuned agree with the cells.
fn assert_classified(report: &SweepReport, sw: &SweepConfig) {
    let t = &sw.thresholds;
    for (k, s) in report.checks.iter().enumerate() {
        let mut counts = [0; 3];
        for c in &report.cells {
            let (v, class) = (c.verdicts[k], c.classes[k]);
            let Some(v) = v.filter(|v| !v.pass) else {
                assert_eq!(class, None, "{} {}: passing or not judged", s.id, c.label);
                continue;
            };
            let class = class.expect("a failing verdict is classified");
            counts[Class::ALL
                .iter()
                .position(|&x| x == class)
                .expect("a class")] += 1;
            let refs = c.references();
            let oracle = classify::oracle(s.check, &c.spec, sw, refs);
            let reference = classify::reference(s.check, &c.spec, sw, refs);
            match class {
                Class::Infeasible => {
                    let o = oracle.expect("only checks with an oracle are infeasible");
                    let threshold = match s.check {
                        Check::Critical => t.critical_success,
                        Check::Goodput => t.goodput_fraction,
                        _ => panic!("{}: infeasible by construction never", s.id),
                    };
                    assert!(o < threshold, "{} {}: oracle {o}", s.id, c.label);
                }
                Class::BehindTuned | Class::FailsLikeTuned => {
                    let r = reference.expect("judged where Spillway's run is");
                    let behind = r.pass
                        || classify::gap(s.check, v.figure, r.figure)
                            > classify::tolerance(s.check, t) + 1e-12;
                    assert_eq!(behind, class == Class::BehindTuned, "{} {}", s.id, c.label);
                }
            }
        }
        assert_eq!(
            counts,
            [s.infeasible, s.behind_tuned, s.fails_like_tuned],
            "{}",
            s.id
        );
        assert_eq!(
            s.infeasible + s.behind_tuned + s.fails_like_tuned,
            s.failing
        );
        let gaps: Vec<f64> = s
            .behind_tuned_worst
            .iter()
            .map(|(i, label, _)| {
                let c = &report.cells[*i];
                assert_eq!(&c.label, label);
                assert_eq!(c.classes[k], Some(Class::BehindTuned));
                c.gap(k, sw).expect("judged")
            })
            .collect();
        assert_eq!(gaps.len(), s.behind_tuned.min(BEHIND_LISTED), "{}", s.id);
        assert!(gaps.windows(2).all(|w| w[0] >= w[1]), "{}: {gaps:?}", s.id);
    }
}

/// The tuned baseline is HAProxy as `bench/robustness.sh` configures it: it refuses nothing,
/// holds a queued request until the client's timeout, and serves CRITICAL first.
#[test]
fn the_tuned_baseline_queues_as_haproxy_does() {
    let sw = sweep("");
    let spec = cell(4, 3.0, 3000.0);
    let tuned = run_mode(&spec, &sw, Mode::Tuned).expect("runs");
    let unprotected = run_mode(&spec, &sw, Mode::Unprotected).expect("runs");
    assert_eq!(tuned.offered, unprotected.offered, "the same arrivals");
    assert_eq!(tuned.critical_offered, unprotected.critical_offered);
    assert_eq!(tuned.refused, 0, "{:?}", tuned.refused_by_reason);
    assert!(
        tuned.abandoned_in_queue > 0,
        "3x overload leaves requests queued"
    );
    // Every request that left the queue unserved waited out the whole timeout.
    assert_eq!(tuned.refusal_median_ms, Some(spec.timeout_ms()));
    let critical = tuned.critical_success().expect("CRITICAL offered");
    let rest =
        (tuned.ok - tuned.critical_ok) as f64 / (tuned.offered - tuned.critical_offered) as f64;
    assert!(critical > rest, "CRITICAL {critical} vs the rest {rest}");
}

/// R3 counts only answers to work the backend started within the offering window: a queue
/// held for a whole client timeout drains after a window shorter than that timeout, and
/// counting those answers over the window scored the tuned baseline far above capacity.
#[test]
fn goodput_counts_only_work_started_within_the_window() {
    let sw = sweep("");
    // 4 workers, constant 10 ms (400/s), 10x for 0.1 s, callers allow 200 ms.
    let mut spec = cell(4, 10.0, 400.0);
    spec.dist = Dist::Const;
    spec.timeout_x = 20.0;
    let tuned = run_mode(&spec, &sw, Mode::Tuned).expect("runs");
    assert!(
        (tuned.duration_s - 0.1).abs() < 1e-9,
        "{}",
        tuned.duration_s
    );
    // At most 4 workers x 10 starts (t = 0, 10, ..., 90 ms) fall within the window.
    assert!(tuned.window_ok <= 40, "{}", tuned.window_ok);
    assert!(
        tuned.goodput_fraction() <= 1.0 + 1e-9,
        "{}",
        tuned.goodput_fraction()
    );
    // The queue drained for up to another 200 ms: all answers over the window are far more.
    assert!(
        tuned.ok > 2 * tuned.window_ok,
        "ok {} in window {}",
        tuned.ok,
        tuned.window_ok
    );
    assert!(tuned.goodput_rps > 2.0 * tuned.reference_rps);
}

/// The oracle sends no work that cannot end in time, so its backend never queues and nothing
/// it admitted times out; and the example that motivates it — one worker, exponential 10 ms
/// service, a 50 ms timeout — is infeasible for R2: e^-5 of the service times alone are late.
#[test]
fn the_oracle_bounds_what_admission_can_do() {
    let sw = sweep("");
    let mut spec = cell(1, 2.0, 3000.0);
    spec.critical_share = 0.6;
    let r = run_one(&spec, &sw).expect("runs");
    let oracle = r
        .oracle_critical
        .as_ref()
        .expect("R2 failed, so the oracle ran");
    assert_eq!(
        oracle.backend_waited, 0,
        "the oracle's backend never queues"
    );
    assert_eq!(
        oracle.timed_out, oracle.abandoned_in_queue,
        "nothing admitted is late"
    );
    assert!(oracle.refused_by_reason.keys().all(|k| k == "oracle_late"));
    assert_eq!(oracle.critical_offered, oracle.offered, "CRITICAL alone");
    let best = oracle.critical_success().expect("CRITICAL offered");
    for (name, run) in [("unprotected", &r.unprotected), ("tuned", &r.tuned)] {
        let s = run.critical_success().expect("CRITICAL offered");
        assert!(best >= s, "oracle {best} < {name} {s}");
    }
    let k = CHECKS
        .iter()
        .position(|&c| c == Check::Critical)
        .expect("R2");
    assert_eq!(r.classes[k], Some(Class::Infeasible), "{:?}", r.verdicts[k]);
    // The ceilings of the distributions, as the model draws them.
    let ceiling = |dist, x| {
        let mut c = spec;
        (c.dist, c.timeout_x) = (dist, x);
        classify::service_ceiling(&c, &sw.model)
    };
    assert!((ceiling(Dist::Exp, 5.0) - (1.0 - (-5.0f64).exp())).abs() < 1e-12);
    assert_eq!(ceiling(Dist::Const, 5.0), 1.0);
    assert!(
        (ceiling(Dist::Bimodal, 5.0) - 0.95).abs() < 1e-12,
        "the slow mode is 10.3x"
    );
    assert_eq!(ceiling(Dist::Bimodal, 20.0), 1.0);
    // Lognormal σ = 1: P(Z > ln 5 + 1/2) = 1.748 %.
    assert!((ceiling(Dist::Lognormal, 5.0) - (1.0 - 0.017_48)).abs() < 1e-4);
}

pub(super) fn figures(offered: u64, ok: u64, critical: (u64, u64)) -> RunFigures {
    let mut f = super::figures::RunFigures::empty();
    f.offered = offered;
    f.ok = ok;
    f.critical_offered = critical.0;
    f.critical_ok = critical.1;
    f
}

/// The thresholds are applied as issue 28 states them.
#[test]
fn requirements_are_judged_as_stated() {
    let sw = sweep("");
    let mut spec = cell(4, 0.9, 100.0);
    let base = figures(100_000, 99_000, (50_000, 50_000));
    // R1: within 0.1 pp passes, beyond fails; above 0.9x it does not apply.
    let ok = figures(100_000, 98_900, (50_000, 50_000));
    let bad = figures(100_000, 98_890, (50_000, 50_000));
    assert!(judge::judge(Check::DoNoHarm, &spec, &sw, &ok, &base).is_some_and(|v| v.pass));
    assert!(judge::judge(Check::DoNoHarm, &spec, &sw, &bad, &base).is_some_and(|v| !v.pass));
    spec.offered = 1.0;
    assert!(judge::judge(Check::DoNoHarm, &spec, &sw, &bad, &base).is_none());
    // R2: 99.9 % passes, less fails; a CRITICAL share above 0.8 is out of scope.
    let c_ok = figures(100, 0, (10_000, 9_990));
    let c_bad = figures(100, 0, (10_000, 9_989));
    assert!(judge::judge(Check::Critical, &spec, &sw, &c_ok, &base).is_some_and(|v| v.pass));
    assert!(judge::judge(Check::Critical, &spec, &sw, &c_bad, &base).is_some_and(|v| !v.pass));
    spec.critical_share = 0.9;
    assert!(judge::judge(Check::Critical, &spec, &sw, &c_bad, &base).is_none());
    // A capacity drop to half makes 0.6 of nominal capacity 1.2 of the lowest: out of scope.
    spec.critical_share = 0.6;
    spec.backend = BackendKind::CapacityDrop;
    assert!(judge::judge(Check::Critical, &spec, &sw, &c_bad, &base).is_none());
    spec.backend = BackendKind::Plain;
    // R3: 95 % of the reference.
    let mut g = figures(100, 95, (0, 0));
    g.reference_rps = 100.0;
    g.window_goodput_rps = 95.0;
    assert!(judge::judge(Check::Goodput, &spec, &sw, &g, &base).is_some_and(|v| v.pass));
    g.window_goodput_rps = 94.9;
    assert!(judge::judge(Check::Goodput, &spec, &sw, &g, &base).is_some_and(|v| !v.pass));
    // R4a from 2x: a 10 ms median passes; none refused at all fails.
    spec.offered = 2.0;
    let mut r = figures(100, 50, (0, 0));
    r.refusal_median_ms = Some(10.0);
    assert!(judge::judge(Check::RefuseEarly, &spec, &sw, &r, &base).is_some_and(|v| v.pass));
    r.refusal_median_ms = None;
    assert!(judge::judge(Check::RefuseEarly, &spec, &sw, &r, &base).is_some_and(|v| !v.pass));
    // R4b: one late queue exit fails.
    r.late_queue_exits = 1;
    assert!(judge::judge(Check::QueueWait, &spec, &sw, &r, &base).is_some_and(|v| !v.pass));
}

/// A closed loop stopped early at the request cap is compared with the limit-off run over the
/// seconds both offered in, not with the other's whole run.
#[test]
fn a_truncated_closed_loop_is_judged_over_the_common_span() {
    let sw = sweep("");
    let mut spec = cell(20, 1.0, 1000.0);
    spec.arrivals = ArrivalKind::Closed(64);
    // 10 s planned in 200 slices of 50 ms; the limit-off run serves 20 per slice for 4 s,
    // then 10 (a capacity drop) to the end: 280/s over its whole run.
    let run = |slices: usize, drop_from: usize, truncated: bool| {
        let mut f = figures(0, 0, (0, 0));
        f.slice_s = 0.05;
        f.ok_slices = (0..super::figures::SLICES)
            .map(|i| match i {
                _ if i >= slices => 0,
                _ if i >= drop_from => 10,
                _ => 20,
            })
            .collect();
        f.ok = f.ok_slices.iter().map(|&n| u64::from(n)).sum();
        f.duration_s = slices as f64 * 0.05;
        f.goodput_rps = f.ok as f64 / f.duration_s;
        f.truncated = truncated;
        f
    };
    let off = run(200, 80, false);
    assert!((off.goodput_rps - 280.0).abs() < 1e-9);
    // Stopped at 3 s, before the drop, serving what the limit-off run served then: whole runs
    // would read +43 %; it is level.
    let early = run(60, 80, true);
    let v = judge::judge(Check::DoNoHarm, &spec, &sw, &early, &off).expect("applies");
    assert!(v.pass && v.figure.abs() < 1e-9, "{v:?}");
    // The same run with its first slice lost: 1.7 % behind over the common span, a fail that
    // the whole runs' +40 % hid.
    let mut short = run(60, 80, true);
    short.ok_slices[0] = 0;
    short.ok -= 20;
    short.goodput_rps = short.ok as f64 / short.duration_s;
    assert!(short.goodput_rps > off.goodput_rps);
    let v = judge::judge(Check::DoNoHarm, &spec, &sw, &short, &off).expect("applies");
    assert!(!v.pass && (v.figure + 100.0 / 60.0).abs() < 1e-9, "{v:?}");
    assert_eq!(short.common_span_s(&off), Some(3.0));
    // Untruncated runs keep their whole-run rates.
    let whole = run(200, 200, false);
    assert_eq!(whole.common_span_s(&off), None);
    let v = judge::judge(Check::DoNoHarm, &spec, &sw, &whole, &off).expect("applies");
    assert!(
        (v.figure - (400.0 / 280.0 - 1.0) * 100.0).abs() < 1e-9,
        "{v:?}"
    );
}

/// A run records its successes by the slice they were answered in, every one of them.
#[test]
fn successes_are_recorded_by_slice() {
    let sw = sweep("");
    let f = run_cell(&cell(4, 0.9, 2_000.0), &sw, false).expect("cell runs");
    assert_eq!(f.ok_slices.len(), super::figures::SLICES);
    assert_eq!(f.ok_slices.iter().map(|&n| u64::from(n)).sum::<u64>(), f.ok);
    assert!((f.slice_s * super::figures::SLICES as f64 - f.duration_s).abs() < 1e-6);
    // Spread over the window, not piled in one slice.
    assert!(f.ok_slices.iter().filter(|&&n| n > 0).count() > super::figures::SLICES / 2);
}

#[test]
fn shipped_sweep_files_parse() {
    let quick = SweepConfig::from_toml(QUICK, "robustness-quick.toml").expect("quick parses");
    let n = quick.cells().expect("cells").len();
    assert!((100..=500).contains(&n), "the quick subset has {n} cells");
    let full = SweepConfig::from_toml(FULL, "robustness.toml").expect("full parses");
    let cells = full.cells().expect("cells");
    // Every value of every axis of issue 28 appears somewhere.
    for w in [1, 4, 20, 100, 1000] {
        assert!(cells.iter().any(|c| c.workers == w), "workers {w}");
    }
    for m in [0.1, 1.0, 10.0, 50.0, 500.0] {
        assert!(cells.iter().any(|c| c.mean_ms == m), "mean {m}");
    }
    for o in [0.5, 0.9, 1.0, 2.0, 5.0, 10.0] {
        assert!(cells.iter().any(|c| c.offered == o), "offered {o}");
    }
    for s in [0.0, 0.3, 0.6, 0.8] {
        assert!(cells.iter().any(|c| c.critical_share == s), "share {s}");
    }
    for a in [
        ArrivalKind::Poisson,
        ArrivalKind::OnOff,
        ArrivalKind::Closed(64),
        ArrivalKind::Closed(256),
    ] {
        assert!(cells.iter().any(|c| c.arrivals == a), "{a:?}");
    }
    // A cell listed by two matrices runs once.
    let mut labels: Vec<_> = cells.iter().map(|c| c.label()).collect();
    labels.sort();
    labels.dedup();
    assert_eq!(labels.len(), cells.len());
    // A closed loop is one cell, whatever the offered axis says.
    assert!(cells
        .iter()
        .filter(|c| !c.arrivals.is_open())
        .all(|c| c.offered == 0.0));
    // The small-upstream file: 1 and 4 workers, each with a plain and a thrashing backend.
    let small = SweepConfig::from_toml(SMALL, "robustness-small.toml").expect("small parses");
    let cells = small.cells().expect("cells");
    assert_eq!(cells.len(), 864);
    for w in [1, 4] {
        for b in [BackendKind::Plain, BackendKind::Slowdown] {
            let n = cells
                .iter()
                .filter(|c| c.workers == w && c.backend == b)
                .count();
            assert_eq!(n, 216, "workers {w}, {b:?}");
        }
    }
}

#[test]
fn bad_sweep_files_name_the_key() {
    let base = "name = \"b\"\n[[matrix]]\nname = \"m\"\nworkers = [4]\nmean_ms = [10]\n\
                timeout_x = [5]\noffered = [2]\ncritical_share = [0.6]\n";
    let e = SweepConfig::from_toml(
        &format!("{base}distribution = [\"pareto\"]\narrivals = [\"poisson\"]\n"),
        "b.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("matrix[m].distribution") && e.contains("lognormal"),
        "{e}"
    );
    let e = SweepConfig::from_toml(
        &format!("{base}distribution = [\"exp\"]\narrivals = [\"closed:0\"]\n"),
        "b.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("matrix[m].arrivals") && e.contains("closed:N"),
        "{e}"
    );
    let e = SweepConfig::from_toml("name = \"b\"\nmatrix = []\n", "b.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("matrix"), "{e}");
    let e = SweepConfig::from_toml("name = \"b\"\nbogus = 1\nmatrix = []\n", "b.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("bogus"), "{e}");
}

/// `--cell` runs the cells whose label contains one of its patterns, each with the result it
/// has in the whole sweep (its seed comes from its label); a pattern that names no cell, or an
/// empty one, is refused with a label to show what labels look like.
#[test]
fn a_cell_filter_runs_the_named_cells_alone() {
    let mut sw = SweepConfig::from_toml(QUICK, "robustness-quick.toml").expect("quick parses");
    let all = sw.cells().expect("cells");
    let spec = all[all.len() / 2];
    let label = spec.label();
    sw.only = vec![label.clone()];
    let picked = sw.cells().expect("cells");
    assert!(
        !picked.is_empty() && picked.iter().all(|c| c.label().contains(&label)),
        "{label}: {picked:?}"
    );
    let alone = run_sweep(&sw, 1, &|_, _| {}).expect("runs");
    let in_whole = run_one(&spec, &sw).expect("runs");
    let json = |c: &CellResult| serde_json::to_string(c).expect("json");
    assert_eq!(json(&alone.cells[0]), json(&in_whole));
    for bad in ["no such cell", ""] {
        sw.only = vec![bad.to_owned()];
        let e = sw.cells().unwrap_err().to_string();
        assert!(e.contains("--cell") && e.contains("c="), "{bad:?}: {e}");
    }
    sw.only = vec!["c=".repeat(101)];
    let e = sw.cells().unwrap_err().to_string();
    assert!(
        e.contains("1 to 200 characters") && !e.contains("no cell's label"),
        "refused for its length: {e}"
    );
}

/// The quick matrix's report, run once for the requirement tests below.
fn quick_report() -> &'static SweepReport {
    static REPORT: std::sync::OnceLock<SweepReport> = std::sync::OnceLock::new();
    REPORT.get_or_init(|| {
        let sw = SweepConfig::from_toml(QUICK, "robustness-quick.toml").expect("quick parses");
        run_sweep(&sw, 0, &|_, _| {}).expect("runs")
    })
}

/// The quick matrix's failing cells are classified by the rule the report states.
#[test]
#[ignore = "runs the quick matrix; run with the issue_28 tests"]
fn issue_28_failing_cells_are_classified() {
    let sw = SweepConfig::from_toml(QUICK, "robustness-quick.toml").expect("quick parses");
    assert_classified(quick_report(), &sw);
}

/// Asserts that `checks` pass in every cell of the quick matrix they apply to.
fn assert_holds(checks: &[Check]) {
    let report = quick_report();
    for s in report.checks.iter().filter(|s| checks.contains(&s.check)) {
        assert!(s.applicable > 0, "{} applies to no cell", s.id);
        assert!(
            s.pass(),
            "{} fails in {} of {} cells:\n{}",
            s.id,
            s.failing,
            s.applicable,
            summary_text(report)
        );
    }
}

// Issue 28's requirements 1–4 on the quick matrix, thresholds as the issue states them, one
// test each so that each can be un-ignored when the policy meets it.

#[test]
#[ignore = "issue 28 R1: today's zero-config admission refuses below capacity (cold start at \
            limit 5, queue_full / queue_timeout at 0.5x-0.9x, SHEDDABLE headroom)"]
fn issue_28_r1_do_no_harm() {
    assert_holds(&[Check::DoNoHarm]);
}

#[test]
#[ignore = "issue 28 R2: today's zero-config admission serves CRITICAL below 99.9 % at 1x-10x"]
fn issue_28_r2_critical_first() {
    assert_holds(&[Check::Critical]);
}

#[test]
#[ignore = "issue 28 R3: today's zero-config admission keeps goodput below 95 % of capacity \
            in many overloaded cells"]
fn issue_28_r3_goodput() {
    assert_holds(&[Check::Goodput]);
}

#[test]
#[ignore = "issue 28 R4: today's queue holds requests for a flat 100 ms (median refusal ~100 \
            ms) and until their deadline"]
fn issue_28_r4_refuse_early() {
    assert_holds(&[Check::RefuseEarly, Check::QueueWait]);
}

/// The same cell in the fleet engine — a `proxy_admission` layer in front of an unprotected
/// backend, as `sim::demo` models `spillway demo` — must tell the same story: two
/// implementations of the plumbing around one core policy, different random streams.
#[test]
fn a_protected_cell_agrees_with_the_fleet_engine() {
    let sw = SweepConfig::from_toml(
        "name = \"x\"\nmax_requests = 16000\nmin_duration_s = 20\nmax_duration_s = 20\n\
         [[matrix]]\nname = \"m\"\nworkers = [20]\nmean_ms = [50]\ndistribution = [\"exp\"]\n\
         timeout_x = [20]\noffered = [2]\ncritical_share = [0.6]\narrivals = [\"poisson\"]\n",
        "x.toml",
    )
    .expect("valid");
    let spec = sw.cells().expect("cells")[0];
    let cell = run_cell(&spec, &sw, true).expect("runs");
    let client = |name: &str, crit: &str, rps: f64| {
        format!(
            "[[client]]\nname = \"{name}\"\ncriticality = \"{crit}\"\ntimeout_ms = 1000\n\
             deadline_ms = 1000\nretry = \"none\"\nmax_attempts = 1\n\
             load = {{ shape = \"constant\", rps = {rps} }}\n"
        )
    };
    let toml = format!(
        "name = \"x\"\nduration_s = 20\nseed = 3\n{}{}\
         [[layer]]\nname = \"proxy\"\nworkers = 100000\n\
         service = {{ dist = \"const\", mean_ms = 0.001 }}\nretry = \"none\"\n\
         timeout_ms = 30000\nproxy_admission = true\n\
         [[layer]]\nname = \"backend\"\nworkers = 20\n\
         service = {{ dist = \"exp\", mean_ms = 50 }}\nprotected = false\n",
        client("c", "CRITICAL", 240.0),
        client("s", "SHEDDABLE", 560.0)
    );
    let sc = crate::Scenario::from_toml(&toml, "x").expect("scenario");
    let fleet = crate::run_one(&sc, "x").expect("runs").report.summary;
    let fleet_success = fleet.counts.goodput as f64 / fleet.counts.offered as f64;
    let c = &fleet.by_criticality["CRITICAL"];
    let fleet_critical = c.goodput as f64 / c.offered as f64;
    assert!(
        (cell.success() - fleet_success).abs() < 0.03,
        "success: sweep cell {}, fleet engine {fleet_success}",
        cell.success()
    );
    let critical = cell.critical_success().expect("CRITICAL offered");
    assert!(
        (critical - fleet_critical).abs() < 0.03,
        "CRITICAL success: sweep cell {critical}, fleet engine {fleet_critical}"
    );
    assert!(
        (cell.goodput_rps / fleet.goodput_rps - 1.0).abs() < 0.03,
        "goodput: sweep cell {}/s, fleet engine {}/s",
        cell.goodput_rps,
        fleet.goodput_rps
    );
}

/// Not a check: writes the quick matrix's failing cells, per requirement with their figures,
/// to `$SWEEP_FAILING` (default `target/quick-sweep-failing.txt`), so that a change of policy
/// can be compared cell by cell with the run before. Runs with the requirement tests
/// (`--ignored issue_28`) and shares their one run of the matrix.
#[test]
#[ignore = "writes a file; run with the issue_28 tests"]
fn issue_28_write_failing_cells() {
    let custom = std::env::var("SWEEP_FILE").ok().map(|f| {
        let text = std::fs::read_to_string(&f).expect("SWEEP_FILE reads");
        let sw = SweepConfig::from_toml(&text, &f).expect("SWEEP_FILE parses");
        run_sweep(&sw, 0, &|_, _| {}).expect("runs")
    });
    let report = custom.as_ref().unwrap_or_else(|| quick_report());
    let mut out = summary_text(report);
    for (k, check) in CHECKS.iter().enumerate() {
        for c in &report.cells {
            if let Some(v) = c.verdicts[k] {
                if !v.pass {
                    out.push_str(&format!(
                        "{} FAIL {:.4} {} | {} | {}\n",
                        check.id(),
                        v.figure,
                        c.classes[k].map_or("?", Class::as_str),
                        c.label,
                        judge::describe(*check, &c.spec, &c.protected, &c.unprotected)
                    ));
                }
            }
        }
    }
    let path = std::env::var("SWEEP_FAILING").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/quick-sweep-failing.txt"
        )
        .into()
    });
    std::fs::write(&path, out).expect("writes the failing cells");
}
